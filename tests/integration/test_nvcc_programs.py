"""Programs built by nvcc, run over the simulator: against the shared runtime (examples/*_nvcc,
which finds the simulated libcudart.so.13) and with nvcc's default, NVIDIA's static runtime linked
in (examples/*_nvcc_static, which reaches the simulated driver through cuGetProcAddress and the
private export tables of cudasim/driver/export_tables/).

nvcc's host code registers its fat binary and kernels with the runtime at start-up and launches
kernels through __cudaPushCallConfiguration / __cudaLaunchKernel; the simulator takes all of it,
queues each launch on its stream and runs no device code. So every example, the kernel programs
among them (vector_add, and those written in the shape of NVIDIA's samples, listed in
examples/README.md), must run without the shim and under it in every mode with the same exit status and the same output, except for timings and
the fingerprint of what kernels would have computed ("kernel results (not checked)"). The other
examples print what the allocator underneath did (cudaMemGetInfo figures, how far oom got, whether
holes coalesced), which differs under the shim by design: for them, as in test_examples, the
checksum of the data they verified must be the same.
"""

import concurrent.futures
import os
import re
import unittest

import gpumem_testlib as testlib
import test_examples

EXAMPLES_DIR = test_examples.EXAMPLES_DIR
RUNTIME_PROGRAMS = test_examples.RUNTIME_EXAMPLES + ["driver_api"]
KERNEL_PROGRAMS = test_examples.KERNEL_EXAMPLES
# Programs that launch kernels take --no-kernel-check (bandwidth_test launches none).
NO_KERNEL_CHECK = {"vector_add", "stream_ordered_allocation", "multi_stream_copy", "ipc_memory_events", "graph_memory_nodes",
                   "zero_copy", "ipc_memory_pools", "vmm_ipc", "multi_gpu"}
# Two devices, so bandwidth_test's peer-access part runs too.
SIM_ENV = {"CUDASIM_DEVICES": "2", "CUDASIM_DEVICE_MEMORY": "4GiB,4GiB"}
KERNEL_WARNING = "cudasim: kernels do not run on the simulated device"
FLOAT = re.compile(r" *\d+\.\d+")


SHARED = "_nvcc"  # -cudart shared
STATIC = "_nvcc_static"  # nvcc's default: NVIDIA's libcudart_static.a linked in


def program_path(name: str, variant: str = SHARED) -> str:
    return os.path.join(EXAMPLES_DIR, name + variant)


def run_program(name, env=None, preload=True, variant=SHARED):
    args = ["--no-kernel-check"] if name in NO_KERNEL_CHECK else []
    return testlib.run([program_path(name, variant), *args], env={**SIM_ENV, **(env or {})}, preload=preload,
                       timeout=120)


def comparable_output(stdout: str) -> list:
    """The output without what may differ between runs: timings and bandwidths (every decimal
    number) and the fingerprint of data kernels would have written."""
    return [FLOAT.sub(" #", line) for line in stdout.splitlines()
            if not line.startswith("kernel results (not checked):")]


def kernel_launches(result: testlib.Result) -> int:
    return sum(device["kernel_launches"] for device in result.report["devices"])


class NvccProgramMatrixTest(testlib.TestCase):
    """One test per program: without the shim, then every shim configuration."""

    variant = SHARED

    def check_program(self, name: str):
        path = program_path(name, self.variant)
        self.assertTrue(os.access(path, os.X_OK), f"{path} is not built")
        baseline = run_program(name, preload=False, variant=self.variant)
        self.assertSucceeded(baseline)
        expected = comparable_output(baseline.stdout)
        if name not in KERNEL_PROGRAMS:
            expected = expected[-1:]
        self.assertRegex(expected[-1], r"^checksum: [0-9a-f]{16}$", baseline.describe())
        launches = kernel_launches(baseline)
        if name in NO_KERNEL_CHECK:
            self.assertGreater(launches, 0, baseline.describe())
            self.assertEqual(baseline.stderr.count(KERNEL_WARNING), 1, baseline.describe())
        else:
            self.assertEqual(launches, 0, baseline.describe())

        configs = test_examples.applicable_configs(name)
        with concurrent.futures.ThreadPoolExecutor(max_workers=test_examples.WORKERS) as pool:
            futures = {config: pool.submit(run_program, name, {**env, "GPUMEM_LOG_LEVEL": "info"}, True, self.variant)
                       for config, (env, _) in configs.items()}
            results = {config: future.result() for config, future in futures.items()}
        for config, result in results.items():
            with self.subTest(config=config):
                self.assertEqual(result.returncode, baseline.returncode, result.describe())
                output = comparable_output(result.stdout)
                self.assertEqual(output if name in KERNEL_PROGRAMS else output[-1:], expected,
                                 f"{config}: output differs from the run without the shim\n{result.describe()}")
                self.assertEqual(kernel_launches(result), launches, result.describe())
                policy = [line for line in result.stderr.splitlines() if line.startswith("gpumem: [info] context")]
                self.assertTrue(policy, f"{config}: the shim logged no policy line\n{result.describe()}")
                for phrase in configs[config][1]:
                    self.assertIn(phrase, policy[0], f"{config}: the shim did not apply it")


class NvccStaticProgramMatrixTest(NvccProgramMatrixTest):
    """The same matrix over the programs built with NVIDIA's static runtime."""

    variant = STATIC


def _add_matrix_test(cls, name: str, runtime: str):
    def test(self):
        self.check_program(name)
    test.__doc__ = f"{name} (nvcc, {runtime} runtime): same output without the shim and in every mode"
    setattr(cls, f"test_{name}", test)


for _name in RUNTIME_PROGRAMS + KERNEL_PROGRAMS:
    _add_matrix_test(NvccProgramMatrixTest, _name, "shared")
    _add_matrix_test(NvccStaticProgramMatrixTest, _name, "NVIDIA's static")


class KernelLaunchTest(testlib.TestCase):
    """What the simulator does with launches from nvcc's generated code."""

    def test_kernel_results_are_checked_by_default_and_fail_on_the_simulator(self):
        # Without --no-kernel-check the program verifies c = a + b, which no simulated kernel wrote.
        result = testlib.run([program_path("vector_add")], env=SIM_ENV, preload=False, timeout=120)
        self.assertEqual(result.returncode, 1, result.describe())
        self.assertIn("expected", result.stderr)

    def test_cudasim_kernels_fail_refuses_launches_with_and_without_the_shim(self):
        for preload in (False, True):
            with self.subTest(preload=preload):
                result = run_program("vector_add", env={"CUDASIM_KERNELS": "fail"}, preload=preload)
                self.assertEqual(result.returncode, 1, result.describe())
                self.assertIn("cudaGetLastError() returned cudaErrorNoKernelImageForDevice", result.stderr)
                self.assertNotIn(KERNEL_WARNING, result.stderr)
                self.assertEqual(kernel_launches(result), 0)

    def test_every_launch_is_counted_once(self):
        # vector_add launches one kernel per repeat; multi_stream_copy one per stream and round;
        # multi_gpu one per device, each counted on its own device.
        self.assertEqual(kernel_launches(run_program("vector_add", preload=False)), 10)
        self.assertEqual(kernel_launches(run_program("multi_stream_copy", preload=False)), 8 * 4)
        multi_gpu = run_program("multi_gpu", preload=False)
        self.assertEqual([device["kernel_launches"] for device in multi_gpu.report["devices"]], [1, 1])

    def test_two_device_samples_use_the_second_device(self):
        # With SIM_ENV's two devices the peer parts run, with and without the shim; they are skipped
        # (and say so) only where a second device is missing.
        expected = {"ipc_memory_pools": "peer: device 1 given read-write access to the pool",
                    "vmm_ipc": "peer: device 1 given read-write access to the mapping",
                    "multi_gpu": "multi_gpu: 2 of 2 devices"}
        for name, line in expected.items():
            for preload in (False, True):
                with self.subTest(program=name, preload=preload):
                    result = run_program(name, preload=preload)
                    self.assertSucceeded(result)
                    self.assertIn(line, result.stdout, result.describe())
            with self.subTest(program=name, devices=1):
                result = run_program(name, env={"CUDASIM_DEVICES": "1", "CUDASIM_DEVICE_MEMORY": "4GiB"}, preload=False)
                self.assertSucceeded(result)
                self.assertNotIn(line, result.stdout, result.describe())

    def test_pinned_memory_is_reported(self):
        result = run_program("bandwidth_test", preload=False)
        self.assertSucceeded(result)
        pinned = result.report["pinned_host"]
        # Pinned and write-combined buffers, one pinned buffer for the device copy check; one range registered.
        self.assertEqual((pinned["allocs"], pinned["frees"]), (3, 3))
        self.assertEqual((pinned["registers"], pinned["unregisters"]), (1, 1))
        self.assertEqual(pinned["bytes"], 0)


class StaticRuntimeTest(testlib.TestCase):
    """What NVIDIA's static runtime asks of the simulated driver, and a default-built binary run by
    gpumem-run --sim."""

    TABLES = {"CUDART_INTERFACE", "CONTEXT_LOCAL_STORAGE_INTERFACE_V0301", "TOOLS_RUNTIME_CALLBACK_HOOKS",
              "TOOLS_TLS", "CONTEXT_CHECKS", "INTEGRITY_CHECK"}
    # The one table NVIDIA's runtime asks for that has no known meaning: refused, said once, and
    # the runtime goes on without it.
    UNKNOWN_TABLE = "{F8CFF951-2146-8B4E-B9E2-FB469E7C0DD9}"

    def test_it_asks_for_its_tables_and_calls_no_unknown_entry(self):
        for preload in (False, True):
            with self.subTest(preload=preload):
                result = run_program("vector_add", preload=preload, variant=STATIC)
                self.assertSucceeded(result)
                requests = {r["uuid"]: r for r in result.report["export_table_requests"]}
                self.assertEqual({r["table"] for r in requests.values() if r["table"]}, self.TABLES, result.describe())
                self.assertEqual(requests[self.UNKNOWN_TABLE]["table"], "", result.describe())
                calls = result.report["export_table_calls"]
                self.assertTrue(calls, result.describe())
                self.assertEqual([c for c in calls if c["knowledge"] == "unknown"], [], result.describe())
                self.assertEqual(result.stderr.count(f"table {self.UNKNOWN_TABLE} is not simulated"), 1,
                                 result.describe())
                self.assertNotIn("is not simulated; it returns", result.stderr.replace(
                    f"table {self.UNKNOWN_TABLE} is not simulated; it returns", ""), result.describe())
                # The same launches as the program built against the shared runtime.
                self.assertEqual(kernel_launches(result), 10)

    def test_gpumem_run_sim_caps_a_default_built_binary(self):
        # gpumem-run --sim --limit 1GiB -- ./oom: the cap holds for the static-runtime build as for
        # the shared one (examples/oom allocates 256 MiB blocks until refused), and gpumem serves it.
        wrapper = os.path.join(testlib.build_root(), "scripts", "gpumem-run")
        blocks = {}
        for variant in (SHARED, STATIC):
            with self.subTest(variant=variant):
                result = testlib.run([wrapper, "--sim", "--limit", "1GiB", "--stats", "--", program_path("oom", variant)],
                                     preload=False, sim=False, timeout=120)
                self.assertSucceeded(result)
                got = re.search(r"got (\d+) blocks", result.stdout)
                self.assertIsNotNone(got, result.describe())
                blocks[variant] = int(got.group(1))
                served = re.search(r"gpumem:   allocations served +(\d+)", result.stderr)
                self.assertIsNotNone(served, result.describe())
                self.assertGreater(int(served.group(1)), 0, result.describe())
        self.assertEqual(blocks, {SHARED: 4, STATIC: 4})


if __name__ == "__main__":
    unittest.main()
