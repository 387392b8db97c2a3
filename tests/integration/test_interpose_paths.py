"""The three ways a program reaches the driver all go through the shim's hooks.

The same allocation loop (64 x 1 MiB) built against the shared runtime, the static runtime (nvcc's
default) and the driver API directly. Without the shim every request reaches the simulated driver;
under it (bfc mode, preallocation) the driver sees one allocation, the program's gpumem_is_active()
says 1, the shim's table of real entry points is complete, and for the runtimes the debug log shows
cuGetProcAddress handing out the cuMemAlloc_v2 hook.
"""

import unittest

import gpumem_testlib as testlib

PROGRAMS = {
    "shared runtime": "interpose_paths_runtime_shared",
    "static runtime": "interpose_paths_runtime_static",
    "driver API": "interpose_paths_driver",
}
ALLOCATIONS = 64


class PathsTest(testlib.TestCase):
    def run_program(self, program, **kwargs):
        result = testlib.run([testlib.program_path(program)], **kwargs)
        self.assertSucceeded(result)
        return result, testlib.key_values(result.stdout)

    def test_without_the_shim_every_request_reaches_the_driver(self):
        for path, program in PROGRAMS.items():
            with self.subTest(path=path):
                result, values = self.run_program(program, preload=False)
                self.assertEqual(values["gpumem_is_active"], "-1")
                self.assertEqual(result.device(0)["driver_allocs"], ALLOCATIONS)

    def test_under_the_shim_the_hooks_serve_every_request(self):
        for path, program in PROGRAMS.items():
            with self.subTest(path=path):
                result, values = self.run_program(program, env={"GPUMEM_LOG_LEVEL": "debug"})
                self.assertEqual(values["gpumem_is_active_before"], "0")
                self.assertEqual(values["gpumem_is_active"], "1")
                # No request reaches cuMemAlloc: the arena's memory is virtual memory (the default).
                self.assertEqual(result.device(0)["driver_allocs"], 0, result.describe())
                self.assertGreater(result.device(0)["vmm"]["creates"], 0, result.describe())
                # The shim's own table of real entry points is complete (none of them a hook).
                self.assertIn("gpumem: [debug] real driver resolved; entry points it lacks: none",
                              result.stderr)
                if program != "interpose_paths_driver":
                    self.assertIn("cuMemAlloc_v2 hook in libgpumem.so", result.stderr)
                    self.assertIn("cuMemAlloc", result.report["proc_address_requests"])

    def test_mode_off_passes_everything_through(self):
        for path, program in PROGRAMS.items():
            with self.subTest(path=path):
                result, values = self.run_program(program, env={"GPUMEM_MODE": "off"})
                self.assertEqual(values["gpumem_is_active"], "0")
                self.assertEqual(result.device(0)["driver_allocs"], ALLOCATIONS)
                self.assertEqual(result.stderr, "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
