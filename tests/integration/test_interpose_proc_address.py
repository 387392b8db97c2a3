"""cuGetProcAddress (both signatures) and dlsym on the driver's handle, answered through the shim.

The program asks the driver for hooked and unhooked entry points, with and without the per-thread
flag, and prints where each answer lies (dladdr). Under the shim, an answer that is a hooked entry
point must be the shim's function of exactly that versioned name; every other answer must be the
driver's, unchanged. Checked both for a program that finds the driver as the runtimes do (dlopen +
dlsym) and for one linked against libcuda directly.
"""

import os
import unittest

import gpumem_testlib as testlib
from test_interpose_exports import HOOKED_DRIVER_ENTRY_POINTS

SHIM = "libgpumem.so"
DRIVER = "libcuda.so.1"
LEGACY, PER_THREAD = "1", "2"


def answers(result):
    """{(getter, name, version, flags): (object, symbol)} from the program's output."""
    table = {}
    for line in result.stdout.splitlines():
        request, _, answer = line.partition(" -> ")
        table[tuple(request.split())] = tuple(answer.split())
    return table


class ProcAddressTest(testlib.TestCase):
    def run_both(self, program):
        without = testlib.run([testlib.program_path(program)], preload=False)
        self.assertSucceeded(without)
        with_shim = testlib.run([testlib.program_path(program)])
        self.assertSucceeded(with_shim)
        return answers(without), answers(with_shim)

    def check_program(self, program):
        without, with_shim = self.run_both(program)
        self.assertEqual(set(without), set(with_shim))
        self.assertGreater(len(without), 40)
        swapped = 0
        for request, (obj, symbol) in without.items():
            with self.subTest(request=request):
                if obj == "error":
                    self.assertEqual(with_shim[request], (obj, symbol))
                    continue
                self.assertEqual(obj, DRIVER, f"without the shim: {request} -> {obj} {symbol}")
                if symbol in HOOKED_DRIVER_ENTRY_POINTS:
                    self.assertEqual(with_shim[request], (SHIM, symbol))
                    swapped += 1
                else:
                    self.assertEqual(with_shim[request], (obj, symbol))
        self.assertGreater(swapped, 20)
        return without, with_shim

    def check_specific_answers(self, with_shim):
        for getter in ("v2", "v1"):
            expectations = {
                ("cuMemAlloc", "13000", LEGACY): (SHIM, "cuMemAlloc_v2"),
                ("cuMemFreeAsync", "13000", PER_THREAD): (SHIM, "cuMemFreeAsync_ptsz"),
                ("cuMemFreeAsync", "13000", LEGACY): (SHIM, "cuMemFreeAsync"),
                ("cuMemAllocAsync", "13000", PER_THREAD): (SHIM, "cuMemAllocAsync_ptsz"),
                ("cuCtxSynchronize", "13000", LEGACY): (SHIM, "cuCtxSynchronize_v2"),
                ("cuCtxSynchronize", "12000", LEGACY): (SHIM, "cuCtxSynchronize"),
                ("cuGetProcAddress", "13000", LEGACY): (SHIM, "cuGetProcAddress_v2"),
                ("cuGetProcAddress", "11030", LEGACY): (SHIM, "cuGetProcAddress"),
                ("cuMemcpyHtoD", "13000", LEGACY): (DRIVER, "cuMemcpyHtoD_v2"),
                ("cuMemcpyHtoD", "13000", PER_THREAD): (DRIVER, "cuMemcpyHtoD_v2_ptds"),
                ("cuInit", "13000", LEGACY): (DRIVER, "cuInit"),
            }
            for (name, version, flags), expected in expectations.items():
                with self.subTest(getter=getter, name=name, version=version, flags=flags):
                    self.assertEqual(with_shim[(getter, name, version, flags)], expected)

    def test_driver_found_by_dlopen_and_dlsym(self):
        _, with_shim = self.check_program("interpose_proc_address")
        self.check_specific_answers(with_shim)
        self.assertEqual(with_shim[("dlsym", "cuGetProcAddress_v2", "0", "0")],
                         (SHIM, "cuGetProcAddress_v2"))
        self.assertEqual(with_shim[("dlsym", "cuGetProcAddress", "0", "0")],
                         (SHIM, "cuGetProcAddress"))

    def test_program_linked_against_the_driver(self):
        _, with_shim = self.check_program("interpose_proc_address_linked")
        self.check_specific_answers(with_shim)

    def test_old_cuMemAlloc_is_left_alone(self):
        # cuMemAlloc before CUDA 3.2 is the 32-bit family: never swapped for the _v2 hook.
        _, with_shim = self.run_both("interpose_proc_address")
        for getter in ("v2", "v1"):
            obj, symbol = with_shim[(getter, "cuMemAlloc", "2000", LEGACY)]
            self.assertNotEqual(obj, SHIM)
            self.assertNotEqual(symbol, "cuMemAlloc_v2")

    def test_each_hooked_answer_is_logged_at_debug_level(self):
        result = testlib.run([testlib.program_path("interpose_proc_address")],
                             env={"GPUMEM_LOG_LEVEL": "debug"})
        self.assertSucceeded(result)
        self.assertIn('gpumem: [debug] dlsym("cuGetProcAddress_v2") -> hook in libgpumem.so',
                      result.stderr)
        self.assertIn('gpumem: [debug] cuGetProcAddress("cuMemFreeAsync", 13000, flags=2) -> '
                      'cuMemFreeAsync_ptsz hook in libgpumem.so', result.stderr)


class ThreadsAndForkTest(testlib.TestCase):
    """The first look-ups race in 8 threads; then a forked child looks up again and allocates."""

    def test_with_and_without_the_shim(self):
        for preload, obj in ((False, DRIVER), (True, SHIM)):
            with self.subTest(preload=preload):
                result = testlib.run([testlib.program_path("interpose_threads")], preload=preload,
                                     timeout=60)
                self.assertSucceeded(result)
                values = testlib.key_values(result.stdout)
                self.assertEqual(values["threads_agree"], "1", result.describe())
                self.assertEqual(values["answer"], f"{obj} cuMemAlloc_v2")
                self.assertEqual(values["child_answer"], f"{obj} cuMemAlloc_v2")
                self.assertEqual(values["child_alloc"], "0", result.describe())


if __name__ == "__main__":
    unittest.main(verbosity=2)
