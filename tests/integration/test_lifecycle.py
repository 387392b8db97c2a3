"""Life cycle: the CUDA runtime loaded and unloaded with dlopen/dlclose several times, with a device
reset before each unload, under the shim in every mode: same answers as without it, no crash."""

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


if __name__ == "__main__":
    unittest.main(verbosity=2)
