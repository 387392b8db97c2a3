"""What libgpumem.so and its core are as files, and what they do to a process that never touches CUDA.

- libgpumem.so needs libc alone; libgpumem-core.so, beside it, no CUDA library (the driver is found
  at run time), nor fmt, spdlog or libstdc++ (compiled in, hidden, so they cannot clash with a
  program's own copies), and exports only gpumem_core_attach;
- it exports exactly dlsym, the hooked driver entry points and the gpumem_* C API of gpumem.h, and
  imports no dlsym (the real one comes from dlvsym) nor any glibc newer than 2.34 (shim/README.md);
- preloaded into a program that never uses CUDA (and /bin/true, a shell), it loads nothing (not even
  its core), starts no thread, prints nothing and leaves the exit status alone, even with a bad
  environment; the core is loaded at the first CUDA call;
- without its core, it says so in one line and the program runs as without gpumem.
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

import gpumem_testlib as testlib

HOOKED_DRIVER_ENTRY_POINTS = {
    "cuGetProcAddress", "cuGetProcAddress_v2",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocPitch_v2", "cuMemGetInfo_v2",
    "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemFreeAsync", "cuMemFreeAsync_ptsz",
    "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz",
    "cuCtxSynchronize", "cuCtxSynchronize_v2", "cuCtxDestroy_v2", "cuDevicePrimaryCtxReset_v2",
    "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle",
    "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz", "cuStreamEndCapture", "cuStreamEndCapture_ptsz",
    "cuDeviceTotalMem_v2", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap", "cuMemRetainAllocationHandle",
    "cuMemAllocManaged", "cuArrayCreate_v2", "cuArray3DCreate_v2", "cuArrayDestroy", "cuMipmappedArrayCreate",
    "cuMipmappedArrayDestroy", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2",
    "cuMemGetAddressRange_v2", "cuPointerGetAttribute", "cuPointerGetAttributes", "cuCtxEnablePeerAccess",
    "cuCtxDisablePeerAccess",
}
PUBLIC_HEADER = os.path.join(os.environ.get("GPUMEM_TEST_SOURCE_ROOT", ""), "shim", "include",
                             "gpumem.h")


def needed_libraries(path):
    out = subprocess.run(["readelf", "--dynamic", "--wide", path], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def exported_symbols(path):
    """Defined global/weak symbols of the dynamic symbol table, without version suffixes."""
    out = subprocess.run(["readelf", "--dyn-syms", "--wide", path], capture_output=True, text=True,
                         check=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) >= 8 and fields[0].endswith(":") and fields[6] != "UND" \
                and fields[4] in ("GLOBAL", "WEAK") and fields[3] in ("FUNC", "OBJECT", "IFUNC"):
            names.add(fields[7].split("@")[0])
    return names


def undefined_symbols(path):
    """Symbols the library imports, as name -> version ("" when unversioned)."""
    out = subprocess.run(["readelf", "--dyn-syms", "--wide", path], capture_output=True, text=True,
                         check=True).stdout
    names = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0].endswith(":") and fields[6] == "UND":
            name, _, version = fields[7].partition("@")
            names[name] = version.lstrip("@").split(" ")[0]
    return names


def public_api_functions():
    with open(PUBLIC_HEADER) as header:
        return set(re.findall(r"\b(gpumem_\w+)\s*\(", header.read()))


def core_path():
    return os.path.join(os.path.dirname(testlib.shim_path()), "libgpumem-core.so")


class LibraryFileTest(testlib.TestCase):
    def test_the_preloaded_library_needs_libc_alone(self):
        self.assertEqual(needed_libraries(testlib.shim_path()), ["libc.so.6"])

    def test_no_cuda_library_is_needed(self):
        needed = needed_libraries(core_path())
        self.assertTrue(needed, "readelf found no NEEDED entry at all (libc is expected)")
        cuda = [lib for lib in needed if re.match(r"lib(cuda|cudart|nvidia|nvrtc|cublas)", lib)]
        self.assertEqual(cuda, [], f"NEEDED: {needed}")

    def test_fmt_spdlog_and_libstdcxx_are_compiled_in(self):
        # libstdc++ too: the shim's copy cannot clash with the program's.
        needed = needed_libraries(core_path())
        self.assertEqual([lib for lib in needed if re.match(r"lib(fmt|spdlog|stdc\+\+)", lib)], [],
                         f"NEEDED: {needed}")

    def test_the_core_exports_only_its_attach_function(self):
        self.assertEqual(exported_symbols(core_path()), {"gpumem_core_attach"})

    def test_exports_exactly_the_hooks_dlsym_and_the_c_api(self):
        api = public_api_functions()
        self.assertTrue({"gpumem_version", "gpumem_is_active"} <= api, api)
        expected = HOOKED_DRIVER_ENTRY_POINTS | {"dlsym"} | api
        self.assertEqual(exported_symbols(testlib.shim_path()), expected)

    def test_the_real_dlsym_is_not_imported(self):
        # The real one comes from dlvsym: an imported dlsym would be our own export (-Bsymbolic), or
        # break the caller-identity of RTLD_NEXT look-ups made on the program's behalf.
        imported = undefined_symbols(testlib.shim_path())
        self.assertIn("dlvsym", imported)
        self.assertNotIn("dlsym", imported)

    def test_needs_no_glibc_newer_than_the_documented_2_34(self):
        for path in (testlib.shim_path(), core_path()):
            with self.subTest(path=path):
                versions = [tuple(map(int, v[len("GLIBC_"):].split(".")))
                            for v in undefined_symbols(path).values() if v.startswith("GLIBC_")]
                self.assertTrue(versions)
                self.assertLessEqual(max(versions), (2, 34), versions)

    def test_public_header_is_valid_c_and_cxx(self):
        for compiler, std in (("cc", "-std=c11"), ("c++", "-std=c++20")):
            language = "c" if compiler == "cc" else "c++"
            proc = subprocess.run([compiler, std, "-Wall", "-Wextra", "-Wpedantic", "-Werror",
                                   "-fsyntax-only", "-x", language, PUBLIC_HEADER],
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 0, proc.stderr)


class InertProcessTest(testlib.TestCase):
    BAD_ENVIRONMENT = {"GPUMEM_MODE": "bogus", "XLA_PYTHON_CLIENT_MEM_FRACTION": "7"}

    def check_inert(self, result, status):
        self.assertEqual(result.returncode, status, result.describe())
        self.assertEqual(result.stderr, "", result.describe())

    def test_program_without_cuda(self):
        for env in ({}, {"GPUMEM_LOG_LEVEL": "trace"}, self.BAD_ENVIRONMENT):
            with self.subTest(env=env):
                result = testlib.run([testlib.program_path("interpose_inert"), "7"], env=env)
                self.check_inert(result, 7)
                self.assertIn("shim_mapped=1", result.stdout)  # the preload really happened
                self.assertIn("cuda_libraries_mapped=0", result.stdout)
                self.assertIn("threads=1", result.stdout)

    def test_same_program_without_the_shim(self):
        result = testlib.run([testlib.program_path("interpose_inert"), "7"], preload=False)
        self.check_inert(result, 7)
        self.assertIn("shim_mapped=0", result.stdout)

    def test_system_programs(self):
        for argv, status in ((["/bin/true"], 0), (["/bin/false"], 1), (["sh", "-c", "exit 3"], 3)):
            for env in ({}, self.BAD_ENVIRONMENT):
                with self.subTest(argv=argv, env=env):
                    self.check_inert(testlib.run(argv, env=env), status)

    def test_nothing_cuda_is_mapped_in_a_system_program(self):
        result = testlib.run(["cat", "/proc/self/maps"])
        self.check_inert(result, 0)
        self.assertIn("libgpumem.so", result.stdout)
        self.assertNotIn("libgpumem-core.so", result.stdout)  # loaded only at the first CUDA call
        self.assertNotIn("libcuda", result.stdout)


class CoreLoadingTest(testlib.TestCase):
    def test_the_core_is_loaded_at_the_first_hooked_call(self):
        result = testlib.run([testlib.program_path("interpose_core_loading")])
        self.assertSucceeded(result)
        self.assertEqual(testlib.key_values(result.stdout),
                         {"core_mapped_at_start": "0", "core_mapped_after_unhooked_lookup": "0",
                          "core_mapped_after_hooked_lookup": "1"}, result.describe())

    def test_without_its_core_the_program_runs_as_without_gpumem(self):
        program = os.path.join(testlib.build_root(), "examples", "alloc_churn")
        plain = testlib.run([program], preload=False)
        self.assertSucceeded(plain)
        with tempfile.TemporaryDirectory(prefix="gpumem-alone-") as alone:
            shutil.copy(testlib.shim_path(), alone)
            result = testlib.run([program], env={"LD_PRELOAD": os.path.join(alone, "libgpumem.so")})
        self.assertSucceeded(result)
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, result.describe())
        self.assertRegex(lines[0], r"^gpumem: cannot load .*libgpumem-core\.so .*the program runs without gpumem$")
        checksum = [line for line in result.stdout.splitlines() if line.startswith("checksum:")]
        self.assertEqual(checksum, [line for line in plain.stdout.splitlines() if line.startswith("checksum:")])
        self.assertTrue(checksum)
        for figure in ("driver_allocs", "driver_frees", "peak_bytes_reserved"):  # no arena in between
            self.assertEqual(result.device()[figure], plain.device()[figure], figure)


if __name__ == "__main__":
    unittest.main(verbosity=2)
