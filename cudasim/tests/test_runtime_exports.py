"""Checks the simulated libcudart.so.13's dynamic symbols against NVIDIA's library.

Usage: test_runtime_exports.py OBJDUMP OUR_LIBCUDART [NVIDIA_LIBCUDART]

It must export only CUDA runtime names, each under the version node libcudart.so.13 and each
also exported by NVIDIA's libcudart.so.13 (when given); and it must neither link the driver nor
import any driver symbol, since it reaches the driver only through dlopen and cuGetProcAddress.
"""
import subprocess
import sys
import unittest

OBJDUMP, OURS = sys.argv[1], sys.argv[2]
NVIDIA = sys.argv[3] if len(sys.argv) > 3 else None


def dynamic_symbols(library):
    """(defined, undefined): {name: version} of the library's dynamic function/object symbols."""
    output = subprocess.run([OBJDUMP, "-T", library], check=True, capture_output=True, text=True).stdout
    defined, undefined = {}, {}
    for line in output.splitlines():
        fields = line.split()
        if len(fields) < 4 or not all(c in "0123456789abcdef" for c in fields[0]):
            continue
        name, version = fields[-1], fields[-2]
        if "*ABS*" in fields:  # the version node's own definition
            continue
        (undefined if "*UND*" in fields else defined)[name] = version
    return defined, undefined


def needed_libraries(library):
    output = subprocess.run([OBJDUMP, "-p", library], check=True, capture_output=True, text=True).stdout
    return [line.split()[1] for line in output.splitlines() if line.strip().startswith("NEEDED")]


class RuntimeExports(unittest.TestCase):
    def setUp(self):
        self.defined, self.undefined = dynamic_symbols(OURS)

    def test_exports_runtime_names_under_nvidias_version_node(self):
        self.assertIn("cudaMalloc", self.defined)
        self.assertIn("cudaMallocAsync_ptsz", self.defined)
        self.assertIn("__cudaRegisterFatBinary", self.defined)  # what nvcc-generated host code calls
        for name, version in self.defined.items():
            with self.subTest(name=name):
                self.assertTrue(name.startswith(("cuda", "__cuda")), name)
                self.assertEqual(version, "libcudart.so.13")

    def test_driver_is_neither_linked_nor_imported(self):
        self.assertFalse([lib for lib in needed_libraries(OURS) if lib.startswith("libcuda.")])
        self.assertEqual(sorted(name for name in self.undefined if name.startswith("cu")), [])


# Only where NVIDIA's library is installed (the Meson test passes it then); no skipped test.
if NVIDIA is not None:
    def test_every_export_is_one_of_nvidias(self):
        nvidia, _ = dynamic_symbols(NVIDIA)
        self.assertEqual(sorted(set(self.defined) - set(nvidia)), [])

    RuntimeExports.test_every_export_is_one_of_nvidias = test_every_export_is_one_of_nvidias


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
