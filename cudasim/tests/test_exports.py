"""The simulated libcuda.so.1 and libcudart.so.13 export every function NVIDIA's do, under the same
symbol version, and every function they do not simulate answers "not supported" (once said).

Usage: test_exports.py NM CUDASIM_DIR TOOLKIT_LIBCUDA TOOLKIT_LIBCUDART DRIVER_STUBS RUNTIME_STUBS README

NM lists the dynamic symbols (`nm -D --defined-only`) of the simulator's libraries in CUDASIM_DIR and
of the toolkit's (stubs/libcuda.so and libcudart.so of the toolkit Meson found). DRIVER_STUBS and
RUNTIME_STUBS are the generated lists of names answered by a "not supported" stub
(cudasim/stubs/generate_stubs.py). README is cudasim/README.md, whose coverage tables must be what
cudasim/stubs/api_coverage.py computes.
"""
import os
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "stubs"))
import api_coverage as coverage  # noqa: E402

NM, CUDASIM_DIR, TOOLKIT_LIBCUDA, TOOLKIT_LIBCUDART, DRIVER_STUBS, RUNTIME_STUBS, README = sys.argv[1:8]
OUR_LIBCUDA = os.path.join(CUDASIM_DIR, "libcuda.so.1")
OUR_LIBCUDART = os.path.join(CUDASIM_DIR, "libcudart.so.13")

# Deliberately not exported, with the reason (also in cudasim/README.md, "Exports").
EXCLUDED = {
    "__cudaGetProcAddress": "undocumented nvcc-internal entry point without a prototype in any toolkit header; "
                            "code nvcc generates does not call it, and a stub with a guessed signature could "
                            "corrupt its caller",
    "__cudaRegisterHostVar": "as __cudaGetProcAddress",
    "__cudaRegisterUnifiedTable": "as __cudaGetProcAddress",
}

CUDA_ERROR_NOT_INITIALIZED = 3
NOT_SUPPORTED = 801  # CUDA_ERROR_NOT_SUPPORTED and cudaErrorNotSupported alike


def exported_functions(library):
    """{name: name@version as nm prints it} for the library's exported functions."""
    output = subprocess.run([NM, "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    symbols = {}
    for fields in map(str.split, output.splitlines()):
        if len(fields) == 3 and fields[1] in "TW":
            symbols[fields[2].split("@")[0]] = fields[2]
    return symbols


def read_names(path):
    with open(path, encoding="utf-8") as names:
        return names.read().split()


# Calls every stub twice with no arguments (a stub reads none), before and after initialisation, in a
# child with the simulator on its library path; prints "name result result" per stub.
CALLER = textwrap.dedent("""
    import ctypes, sys
    library, init, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    lib = ctypes.CDLL(library)
    def call(name):
        function = getattr(lib, name)
        function.restype = ctypes.c_int
        return function()
    before = call(names[0]) if init == "cuInit" else -1
    if init == "cuInit":
        assert lib.cuInit(0) == 0
    for name in names:
        print(name, call(name), call(name), flush=True)
    if init != "cuInit":
        lib.cudaGetLastError.restype = ctypes.c_int
        print("last-error", lib.cudaGetLastError(), lib.cudaGetLastError())
    print("before-init", before)
""")


def call_stubs(library, init, names):
    env = dict(os.environ, LD_LIBRARY_PATH=CUDASIM_DIR)
    done = subprocess.run([sys.executable, "-c", CALLER, library, init, *names], env=env, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


class Exports(unittest.TestCase):
    def check_library(self, ours, toolkit):
        mine, nvidia = exported_functions(ours), exported_functions(toolkit)
        missing = sorted(name for name in nvidia if name not in mine and name not in EXCLUDED)
        self.assertEqual(missing, [], f"{ours} lacks functions {toolkit} exports")
        versions = sorted(f"{mine[name]} (NVIDIA: {nvidia[name]})" for name in nvidia
                          if name in mine and mine[name] != nvidia[name])
        self.assertEqual(versions, [], "symbol versions differ")
        return mine, nvidia

    def test_driver_exports_every_function_of_the_toolkits_driver(self):
        self.check_library(OUR_LIBCUDA, TOOLKIT_LIBCUDA)

    def test_runtime_exports_every_function_of_the_toolkits_runtime(self):
        mine, nvidia = self.check_library(OUR_LIBCUDART, TOOLKIT_LIBCUDART)
        for name in EXCLUDED:  # each exclusion is real and still needed
            with self.subTest(name=name):
                self.assertIn(name, nvidia)
                self.assertNotIn(name, mine)

    def check_stubs(self, library, init, stubs_path):
        names = read_names(stubs_path)
        self.assertTrue(names, "no stubs listed")
        rc, out, err = call_stubs(library, init, names)
        self.assertEqual(rc, 0, err[-2000:])
        results = dict((line.split()[0], line.split()[1:]) for line in out.splitlines())
        for name in names:
            with self.subTest(name=name):
                self.assertEqual(results.get(name), [str(NOT_SUPPORTED)] * 2)
                said = [line for line in err.splitlines() if f" {name} is not simulated" in line]
                self.assertEqual(len(said), 1, "said once per process")
        return results

    def test_driver_functions_not_simulated_answer_not_supported(self):
        results = self.check_stubs(OUR_LIBCUDA, "cuInit", DRIVER_STUBS)
        self.assertEqual(results["before-init"], [str(CUDA_ERROR_NOT_INITIALIZED)])

    def test_runtime_functions_not_simulated_answer_not_supported(self):
        results = self.check_stubs(OUR_LIBCUDART, "runtime", RUNTIME_STUBS)
        self.assertEqual(results["last-error"], [str(NOT_SUPPORTED), "0"])  # recorded as the last error

    def test_readme_coverage_tables_are_the_codes(self):
        generated = coverage.render(NM, CUDASIM_DIR, TOOLKIT_LIBCUDA, TOOLKIT_LIBCUDART, DRIVER_STUBS, RUNTIME_STUBS)
        with open(README, encoding="utf-8") as f:
            current = coverage.readme_section(f.read())
        self.maxDiff = None
        self.assertEqual(current, generated, "cudasim/README.md's coverage tables are stale: run "
                         "cudasim/stubs/api_coverage.py with --update cudasim/README.md (arguments as this test's)")

    def test_bookkeeping_functions_are_exported_and_not_stubs(self):
        for library, ours, stubs in [("driver", OUR_LIBCUDA, DRIVER_STUBS), ("runtime", OUR_LIBCUDART, RUNTIME_STUBS)]:
            mine, stubbed = exported_functions(ours), set(read_names(stubs))
            for name in sorted(coverage.BOOKKEEPING[library]):
                with self.subTest(name=name):
                    self.assertIn(name, mine)
                    self.assertNotIn(name, stubbed)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
