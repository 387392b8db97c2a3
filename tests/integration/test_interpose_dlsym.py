"""The shim's exported dlsym.

- dlsym(RTLD_NEXT, ...) keeps its caller's identity: a wrapper library that finds libc's rand() with
  RTLD_NEXT gets libc's whether or not the shim is loaded, and wherever the shim sits in the order;
- a failed look-up still fails, with an error for dlerror();
- a "profiler" that calls dlsym and the driver from inside the functions the shim uses while it
  resolves driver entry points neither hangs nor changes any answer.
"""

import os
import unittest

import gpumem_testlib as testlib

EXPECTED_WRAPPER_REPORT = {
    "rtld_next_rand": "libc.so.6",
    "rtld_next_self": "none",
    "rtld_next_self_error": "1",
    "rtld_default_rand": "libinterpose_next_wrapper.so",
    "rand_ok": "1",
}


class RtldNextTest(testlib.TestCase):
    def check(self, result):
        self.assertSucceeded(result)
        self.assertEqual(testlib.key_values(result.stdout), EXPECTED_WRAPPER_REPORT,
                         result.describe())

    def test_without_the_shim(self):
        self.check(testlib.run([testlib.program_path("interpose_next_main")], preload=False,
                               sim=False))

    def test_shim_preloaded_wrapper_linked(self):
        self.check(testlib.run([testlib.program_path("interpose_next_main")], sim=False))

    def test_shim_preloaded_before_the_wrapper(self):
        # The case a dlsym that looked up RTLD_NEXT on its caller's behalf gets wrong: relative to
        # libgpumem.so, the "next" rand is the wrapper's own (endless recursion) and the "next"
        # interpose_next_report is the wrapper's instead of none.
        wrapper = testlib.program_path("libinterpose_next_wrapper.so")
        self.check(testlib.run([testlib.program_path("interpose_next_main")], preload=False,
                               sim=False, env={"LD_PRELOAD": f"{testlib.shim_path()} {wrapper}"}))

    def test_shim_preloaded_after_the_wrapper(self):
        wrapper = testlib.program_path("libinterpose_next_wrapper.so")
        self.check(testlib.run([testlib.program_path("interpose_next_main")], preload=False,
                               sim=False, env={"LD_PRELOAD": f"{wrapper} {testlib.shim_path()}"}))


class ProfilerRecursionTest(testlib.TestCase):
    def test_profiler_calling_dlsym_inside_our_resolution(self):
        program = [testlib.program_path("interpose_proc_address")]
        alone = testlib.run(program)
        self.assertSucceeded(alone)
        profiler = testlib.program_path("libinterpose_profiler.so")
        # The timeout only turns a hang into a failure; nothing here measures time.
        result = testlib.run(program, preload=False, timeout=60,
                             env={"LD_PRELOAD": f"{testlib.shim_path()} {profiler}"})
        self.assertSucceeded(result)
        self.assertEqual(result.stdout, alone.stdout)
        calls = [line for line in result.stderr.splitlines() if line.startswith("profiler:")]
        self.assertEqual(len(calls), 1, result.describe())
        self.assertNotEqual(calls[0], "profiler: 0 calls seen", result.describe())


if __name__ == "__main__":
    unittest.main(verbosity=2)
