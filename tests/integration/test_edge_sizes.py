"""Sizes at the edges of size_t (2^64 - 1, a negative size cast, 2^63, 0, 1) through every entry point
that takes device memory by size, in every mode, capped by GPUMEM_LIMIT, by HAMi's limit and by a
shared GPU's ledger: each call gets the driver's own answer, and afterwards the cap still holds: the
device memory really held (the simulator's peak) and what the program can still take stay within it.
A size that wrapped a sum in 64 bits used to remove the cap (program edge_sizes.cpp)."""

import os
import tempfile
import unittest

import gpumem_testlib as t

MIB = 1 << 20
LIMIT = 256 * MIB
DEVICE = {"CUDASIM_DEVICE_MEMORY": "1GiB"}
MODES = {
    "bfc": {},
    "bfc growth": {"GPUMEM_PREALLOCATE": "0"},
    "bfc classic": {"GPUMEM_REGION_SOURCE": "classic"},
    "platform": {"GPUMEM_MODE": "platform"},
    "cuda_async": {"GPUMEM_MODE": "cuda_async"},
}


def answers(result):
    """{(call, size): error name} from the program's lines."""
    found = {}
    for line in result.stdout.splitlines():
        if line.startswith("call="):
            fields = dict(field.split("=", 1) for field in line.split())
            found[(fields["call"], int(fields["size"]))] = fields["result"]
    return found


def held_at_peak(result):
    """The most device memory the process held at once, and the most managed memory."""
    device = result.device(0)
    return device["peak_bytes_reserved"], device["managed"]["peak_bytes"]


class EdgeSizes(t.TestCase):
    def run_program(self, env, preload=True):
        result = t.run([t.program_path("edge_sizes")], env={**DEVICE, **env}, preload=preload, timeout=120)
        self.assertSucceeded(result)
        return result

    def caps(self):
        share_dir = tempfile.mkdtemp(prefix="gpumem-edge-share-")
        self.addCleanup(lambda: os.system(f"rm -rf '{share_dir}'"))
        return {
            "GPUMEM_LIMIT": {"GPUMEM_LIMIT": str(LIMIT)},
            "HAMi": {"CUDA_DEVICE_MEMORY_LIMIT": f"{LIMIT // MIB}m"},
            "shared GPU": {"GPUMEM_LIMIT": str(LIMIT), "GPUMEM_SHARE": "auto", "GPUMEM_SHARE_DIR": share_dir},
        }

    def test_every_entry_point_answers_as_the_driver_and_the_cap_holds(self):
        reference = answers(self.run_program({}, preload=False))
        self.assertEqual(len(reference), 7 * 12)
        for cap, cap_env in self.caps().items():
            for mode, mode_env in MODES.items():
                with self.subTest(cap=cap, mode=mode):
                    result = self.run_program({**cap_env, **mode_env})
                    got = answers(result)
                    differing = {key: (got.get(key), want) for key, want in reference.items() if got.get(key) != want}
                    self.assertEqual(differing, {}, result.describe())
                    values = t.key_values(result.stdout)
                    self.assertEqual(values["refused_by"], "CUDA_ERROR_OUT_OF_MEMORY", result.describe())
                    # The blocks the cap still allows: all of it less what a mode keeps beside them.
                    self.assertLessEqual(int(values["filled"]), LIMIT, result.describe())
                    self.assertGreaterEqual(int(values["filled"]), LIMIT - 64 * MIB, result.describe())
                    # Out-of-memory reports name who refused: the budget for what it could hold, the
                    # driver for sizes beyond the device.
                    reports = [line for line in result.stderr.splitlines() if "refused it" in line]
                    if mode in ("platform", "cuda_async"):
                        self.assertIn("gpumem's budget refused it", reports[-1], result.describe())  # the fill's
                    if mode == "platform":
                        self.assertIn("the driver refused it", reports[0], result.describe())  # 2^64 - 1
                    device_peak, managed_peak = held_at_peak(result)
                    self.assertLessEqual(device_peak, LIMIT, result.describe())
                    self.assertLessEqual(managed_peak, LIMIT, result.describe())


if __name__ == "__main__":
    unittest.main()
