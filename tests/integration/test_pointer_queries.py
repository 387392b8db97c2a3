"""Pointer queries on cudaMalloc blocks (programs/pointer_queries.cpp): cuMemGetAddressRange and the
RANGE_START_ADDR / RANGE_SIZE attributes give a range holding the whole block, the other attributes
say where it lives (context, device, memory type), IS_LEGACY_CUDA_IPC_CAPABLE says 1 (as it does for
cudaMalloc memory, which the shim exports in every mode), cuPointerGetAttributes agrees with them, and a base
exported as Numba and vLLM export it, with the offset sent beside it, reads the block in another
process. The same answers without gpumem and in every mode; a VMM-backed arena answers with the
block itself, since the mappings under it are no allocation of the program's."""

import unittest

from gpumem_testlib import MODE_CONFIGURATIONS, TWO_DEVICES, TestCase, key_values, program_path, run

PROGRAM = program_path("pointer_queries")
SIM = TWO_DEVICES
CONFIGURATIONS = MODE_CONFIGURATIONS
# A classic region is one driver allocation holding many blocks: its range holds the block, but starts
# where the region does. Everywhere else the range is the block's own.
REGION_CONFIGURATIONS = {"bfc classic preallocated", "bfc classic growth"}
POINTERS = ("block", "inside", "small", "other_device")


class PointerQueriesTest(TestCase):
    def test_queries_describe_the_block_and_its_exported_base_reads_it(self):
        for name, (preload, env) in CONFIGURATIONS.items():
            with self.subTest(configuration=name):
                result = run([PROGRAM, "queries"], env={**SIM, **env}, preload=preload)
                self.assertSucceeded(result)
                self.assertNotIn("gpumem: [error]", result.stderr, result.describe())
                got = key_values(result.stdout)
                expected = {"numba_inside": "ok", "numba_small": "ok", "vllm_small": "ok"}
                for pointer in POINTERS:
                    expected.update({
                        f"{pointer}_range_holds_block": "1",
                        f"{pointer}_attribute_range_holds_block": "1",
                        f"{pointer}_attribute_range_is_address_range": "1",
                        f"{pointer}_where": "ok",
                        f"{pointer}_all_at_once_agree": "1",
                        # cudaIpcGetMemHandle exports it (read_elsewhere shows it does) in every mode.
                        f"{pointer}_legacy_ipc_capable": "1",
                    })
                    if name not in REGION_CONFIGURATIONS:
                        expected[f"{pointer}_range_is_block"] = "1"
                    else:
                        expected[f"{pointer}_range_is_block"] = got.get(f"{pointer}_range_is_block")
                self.assertEqual(got, expected, result.describe())


if __name__ == "__main__":
    unittest.main()
