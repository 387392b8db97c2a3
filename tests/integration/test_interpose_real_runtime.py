"""NVIDIA's own CUDA runtime (shared and static), over the toolkit's stub driver.

Real NVIDIA code, no GPU: the stub answers every call with CUDA_ERROR_STUB_LIBRARY and its
cuGetProcAddress fails, so the runtime falls back to dlsym for each driver name. The program must
print the same errors with and without the shim, and the debug log must show the runtime's driver
look-ups answered with the shim's hooks.
"""

import unittest

import gpumem_testlib as testlib

PROGRAMS = ["interpose_real_runtime_shared", "interpose_real_runtime_static"]
HOOKED_LOOKUPS = ["cuGetProcAddress_v2", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2",
                  "cuMemAllocAsync", "cuMemFreeAsync_ptsz", "cuCtxSynchronize"]


def stub_environment(extra=None):
    env = {"LD_LIBRARY_PATH": testlib.program_path("interpose_nvidia_stub")}
    env.update(extra or {})
    return env


class RealRuntimeTest(testlib.TestCase):
    def test_same_errors_with_and_without_the_shim(self):
        for program in PROGRAMS:
            with self.subTest(program=program):
                argv = [testlib.program_path(program)]
                without = testlib.run(argv, preload=False, sim=False, env=stub_environment())
                with_shim = testlib.run(argv, sim=False, env=stub_environment())
                self.assertSucceeded(without)
                self.assertIn("cudaMalloc: cudaErrorStubLibrary", without.stdout)
                self.assertEqual(with_shim.returncode, without.returncode, with_shim.describe())
                self.assertEqual(with_shim.stdout, without.stdout)
                self.assertEqual(with_shim.stderr, "")

    def test_runtime_lookups_resolve_to_the_hooks(self):
        for program in PROGRAMS:
            with self.subTest(program=program):
                result = testlib.run([testlib.program_path(program)], sim=False,
                                     env=stub_environment({"GPUMEM_LOG_LEVEL": "debug"}))
                self.assertSucceeded(result)
                for name in HOOKED_LOOKUPS:
                    self.assertIn(f'gpumem: [debug] dlsym("{name}") -> hook in libgpumem.so',
                                  result.stderr)
                # Unhooked names are looked up too but never answered with a hook.
                self.assertNotIn('dlsym("cuInit")', result.stderr)

    def test_the_programs_own_driver_lookups_get_the_hooks(self):
        # dlopen("libcuda.so.1") + dlsym, as the runtime does: hooked names are answered by the
        # shim, the others (cuInit) still by the stub driver.
        for program in PROGRAMS:
            with self.subTest(program=program):
                argv = [testlib.program_path(program), "lookups"]
                result = testlib.run(argv, sim=False, env=stub_environment())
                self.assertSucceeded(result)
                found = testlib.key_values(result.stdout)
                self.assertEqual(found.get("cuMemAlloc_v2"), "libgpumem.so", result.describe())
                self.assertEqual(found.get("cuGetProcAddress_v2"), "libgpumem.so", result.describe())
                self.assertEqual(found.get("cuInit"), "libcuda.so.1", result.describe())
                without = testlib.run(argv, preload=False, sim=False, env=stub_environment())
                self.assertSucceeded(without)
                self.assertEqual(testlib.key_values(without.stdout),
                                 dict.fromkeys(("cuMemAlloc_v2", "cuGetProcAddress_v2", "cuInit"),
                                               "libcuda.so.1"), without.describe())


if __name__ == "__main__":
    unittest.main(verbosity=2)
