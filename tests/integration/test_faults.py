"""Fault injection: every driver call the shim makes is made to fail (CUDASIM_FAULTS, one call at a
time: the 1st, 2nd or 5th), under the shim in every mode, while a program allocates, frees, and
synchronises and keeps going when a call fails. The program must never crash; whatever failed, it
gets a CUDA error (never a wrong success), the shim's books stay balanced (nothing in use once the
program freed everything), and a clean round of allocations afterwards works. Also a fault that
never stops (every call of an entry point from the first): the program gets errors, not a crash or
a hang."""

import collections
import json
import os
import tempfile
import unittest

import gpumem_testlib as t

# The driver calls the shim makes on the paths this program takes (the simulator's fault points); each
# is reached in at least one mode, which the first test checks.
ENTRY_POINTS = ["cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuMemAllocAsync", "cuMemFreeAsync",
                "cuMemAllocFromPoolAsync", "cuCtxSynchronize", "cuStreamSynchronize",
                "cuStreamCreate", "cuEventCreate", "cuEventRecord", "cuEventQuery"]
CALLS = [1, 2, 5]
MODES = [{}, {"GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_FREE_SYNC": "sync"}, {"GPUMEM_MODE": "platform"},
         {"GPUMEM_MODE": "cuda_async"}]


class FaultInjection(t.TestCase):
    def run_faulty(self, faults, env, operations=300):
        with tempfile.TemporaryDirectory(prefix="gpumem-faults-") as tmp:
            report = os.path.join(tmp, "report.json")
            result = t.run([t.program_path("fault_tolerant"), operations],
                           env=dict(env, CUDASIM_FAULTS=faults, CUDASIM_REPORT=report), timeout=60)
            with open(report) as f:
                injected = json.load(f)["faults_injected"]
        return result, injected

    def test_each_call_the_shim_makes_fails_once(self):
        injected = collections.Counter()
        for env in MODES:
            for entry_point in ENTRY_POINTS:
                for call in CALLS:
                    with self.subTest(env=env, fault=f"{entry_point}@{call}"):
                        result, faults = self.run_faulty(f"{entry_point}@{call}", env)
                        injected[entry_point] += faults
                        self.assertEqual(result.returncode, 0, result.describe())
                        got = t.key_values(result.stdout)
                        self.assertEqual(got["final_ok"], "1", result.describe())
                        self.assertEqual(got["shim_bytes_in_use"], "0", result.describe())
                        if got["failures"] != "0":
                            self.assertTrue(got["first_failure"].startswith("cudaError"), result.describe())
                        # gpumem's lines only (an out-of-memory report goes on below its first line).
                        if result.stderr:
                            self.assertTrue(result.stderr.startswith("gpumem: "), result.describe())
                        self.assertNotIn("\n\n", result.stderr, result.describe())
        # Every entry point listed is one the shim really calls: its fault was injected in some mode.
        never_reached = [entry_point for entry_point in ENTRY_POINTS if injected[entry_point] == 0]
        self.assertEqual(never_reached, [], f"faults injected per entry point: {dict(injected)}")
        print(f"\nfaults injected per entry point: {dict(injected)}", flush=True)

    def test_a_fault_that_never_stops_gives_errors_not_a_crash(self):
        for env in MODES:
            for entry_point in ENTRY_POINTS:
                with self.subTest(env=env, fault=f"{entry_point}@1+"):
                    result, _ = self.run_faulty(f"{entry_point}@1+", env, operations=100)
                    self.assertIn(result.returncode, (0, 1, 4), result.describe())  # never a signal
                    if result.returncode != 4:
                        got = t.key_values(result.stdout)
                        self.assertIn(got["final_ok"], ("0", "1"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
