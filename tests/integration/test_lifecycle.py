"""Life cycle: the CUDA runtime loaded and unloaded with dlopen/dlclose several times, with a device
reset before each unload; device memory allocated, used and freed from atexit handlers and static
destructors, through the runtime and the driver API. Under the shim in every mode: the same answers
as without it, no crash."""

import unittest

import gpumem_testlib as t

MODES = [{}, {"GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_MODE": "platform"}, {"GPUMEM_MODE": "cuda_async"},
         {"GPUMEM_MODE": "off"}]


class DlopenCycle(unittest.TestCase):
    def test_runtime_loaded_and_unloaded_again_and_again(self):
        program = t.program_path("lifecycle")
        plain = t.run([program, "dlopen_cycle", "5"], preload=False)
        self.assertEqual(plain.returncode, 0, plain.describe())
        self.assertIn("intact=5", plain.stdout)
        for env in MODES:
            with self.subTest(env=env):
                result = t.run([program, "dlopen_cycle", "5"], env=env)
                self.assertEqual(result.returncode, 0, result.describe())
                self.assertEqual(result.stdout, plain.stdout, result.describe())
                self.assertEqual(result.stderr, "", result.describe())



class AfterMain(unittest.TestCase):
    def test_allocation_from_atexit_handlers_and_static_destructors(self):
        program = t.program_path("exit_allocations")
        plain = t.run([program, "both"], preload=False)
        self.assertEqual(plain.returncode, 0, plain.describe())
        self.assertEqual(t.key_values(plain.stdout),
                         {"main_ok": "1", "atexit_runtime_ok": "1", "atexit_driver_ok": "1",
                          "static_destructor_runtime_ok": "1", "static_destructor_driver_ok": "1"})
        for env in MODES + [{"GPUMEM_STATS": "1"}, {"GPUMEM_TRACE": "/dev/null"}]:
            for when in ("atexit", "static", "both"):
                with self.subTest(env=env, when=when):
                    expected = t.run([program, when], preload=False)
                    result = t.run([program, when], env=env)
                    self.assertEqual(result.returncode, 0, result.describe())
                    self.assertEqual(result.stdout, expected.stdout, result.describe())


if __name__ == "__main__":
    unittest.main(verbosity=2)
