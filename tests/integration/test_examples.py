"""Smoke tests of the example programs in examples/.

Every example, linked against the shared and the static runtime, runs without the shim and then
under it in each allocation mode and each free mode that applies; every run must succeed and print
the same checksum (the fingerprint of the data the program verified) as the run without the shim.
A few further tests check what the examples show (coalescing, out-of-memory reporting) and the
scripts that go with them.

Over the simulator by default, with the paths Meson sets (gpumem_testlib). scripts/gpu-smoke runs
the same matrix on a machine with a GPU: it sets GPUMEM_TEST_EXAMPLES_DIR to a folder of programs
built against NVIDIA's runtime and GPUMEM_TEST_REAL_GPU=1, which keeps the simulator out.
"""

import concurrent.futures
import os
import re
import subprocess
import tempfile
import unittest

import gpumem_testlib as testlib

REAL_GPU = os.environ.get("GPUMEM_TEST_REAL_GPU") == "1"
SOURCE_ROOT = os.environ.get("GPUMEM_TEST_SOURCE_ROOT",
                             os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLES_DIR = os.environ.get("GPUMEM_TEST_EXAMPLES_DIR") or os.path.join(
    os.environ.get("GPUMEM_TEST_BUILD_ROOT", ""), "examples")

RUNTIME_EXAMPLES = ["alloc_churn", "fragmentation", "multistream", "async_pool", "multithread", "oom"]
# Built by nvcc from examples/*.cu; on the simulator test_nvcc_programs runs them (as *_nvcc).
KERNEL_EXAMPLES = ["vector_add", "stream_ordered_allocation", "multi_stream_copy", "bandwidth_test", "ipc_memory_events",
                   "graph_memory_nodes", "zero_copy", "ipc_memory_pools", "vmm_ipc", "multi_gpu"]
# Every program: the runtime examples linked both ways, the driver-API one, and (GPU only) the kernel.
PROGRAMS = ([name + suffix for name in RUNTIME_EXAMPLES for suffix in ("", "_static")]
            + ["driver_api"] + (KERNEL_EXAMPLES if REAL_GPU else []))

# The shim's configurations: the environment, and what its info-level policy line must then say
# (so a configuration that silently did not apply cannot pass). Free modes matter where freed
# memory is kept for reuse (bfc and cuda_async); growth and platform run with the default.
SHIM_CONFIGS = {
    "bfc": ({}, ["bfc mode", "preallocate=on", "free_sync=defer"]),
    "bfc free=sync": ({"GPUMEM_FREE_SYNC": "sync"}, ["bfc mode", "free_sync=sync"]),
    "bfc free=none": ({"GPUMEM_FREE_SYNC": "none"}, ["bfc mode", "free_sync=none"]),
    "bfc growth": ({"GPUMEM_PREALLOCATE": "false"}, ["bfc mode", "preallocate=off"]),
    "platform": ({"GPUMEM_MODE": "platform"}, ["platform mode"]),
    "cuda_async": ({"GPUMEM_MODE": "cuda_async"}, ["cuda_async mode", "free_sync=defer"]),
    "cuda_async free=sync": ({"GPUMEM_MODE": "cuda_async", "GPUMEM_FREE_SYNC": "sync"},
                             ["cuda_async mode", "free_sync=sync"]),
    "cuda_async free=none": ({"GPUMEM_MODE": "cuda_async", "GPUMEM_FREE_SYNC": "none"},
                             ["cuda_async mode", "free_sync=none"]),
}


def applicable_configs(program: str) -> dict:
    """free=none reuses a freed block at once, which is only safe with a single stream (XLA's
    case); multistream deliberately frees blocks that queued copies still use, so it is left out."""
    if program.startswith("multistream"):
        return {name: config for name, config in SHIM_CONFIGS.items() if "free=none" not in name}
    return SHIM_CONFIGS


# A small simulated device keeps oom quick: it allocates until refused.
SIM_ENV = {"CUDASIM_DEVICE_MEMORY": "4GiB"}
CHECKSUM_LINE = re.compile(r"^checksum: ([0-9a-f]{16})$")
# The line the shim logs at info level when a context's manager retires (see MemoryManager::summary).
SUMMARY_LINE = re.compile(
    r"^gpumem: \[info\] context \S+ \(device \d+\) summary: (?P<mode>\w+) mode, (?P<allocs>\d+) allocations, "
    r"\d+ frees, \d+ refused, (?P<driver_allocs>\d+) driver allocations, peak in use \d+ bytes, "
    r"peak reserved (?P<peak_reserved>\d+) bytes, limit \d+ bytes$")
# One process at a time on a real GPU: each run may claim most of its memory.
WORKERS = 1 if REAL_GPU else max(2, min(8, os.cpu_count() or 2))


def program_path(name: str) -> str:
    return os.path.join(EXAMPLES_DIR, name)


def run_example(name, env=None, preload=True, args=()):
    full_env = {} if REAL_GPU else dict(SIM_ENV)
    full_env.update(env or {})
    return testlib.run([program_path(name), *args], env=full_env, preload=preload, sim=not REAL_GPU,
                       timeout=60)


def checksum_of(result: testlib.Result):
    """The checksum on the last line of the output, or None if the output does not end with one."""
    lines = result.stdout.strip().splitlines()
    match = CHECKSUM_LINE.match(lines[-1]) if lines else None
    return match.group(1) if match else None


class ExampleMatrixTest(testlib.TestCase):
    """One test per program: the run without the shim, then every shim configuration in parallel."""

    def check_program(self, program: str):
        self.assertTrue(os.access(program_path(program), os.X_OK), f"{program_path(program)} is not built")
        baseline = run_example(program, preload=False)
        self.assertSucceeded(baseline)
        expected = checksum_of(baseline)
        self.assertIsNotNone(expected, f"no checksum line\n{baseline.describe()}")

        configs = applicable_configs(program)
        with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS) as pool:
            futures = {name: pool.submit(run_example, program, {**env, "GPUMEM_LOG_LEVEL": "info"})
                       for name, (env, _) in configs.items()}
            results = {name: future.result() for name, future in futures.items()}
        for name, result in results.items():
            with self.subTest(config=name):
                self.assertSucceeded(result)
                self.assertEqual(checksum_of(result), expected,
                                 f"{name}: not the checksum of the run without the shim\n"
                                 f"{result.describe()}")
                policy = [line for line in result.stderr.splitlines()
                          if line.startswith("gpumem: [info] context")]
                self.assertTrue(policy, f"{name}: the shim logged no policy line\n{result.describe()}")
                for phrase in configs[name][1]:
                    self.assertIn(phrase, policy[0], f"{name}: the shim did not apply it")


def _add_matrix_test(program: str):
    def test(self):
        self.check_program(program)
    test.__doc__ = f"{program}: same checksum without the shim and in every mode"
    setattr(ExampleMatrixTest, f"test_{program}", test)


for _program in PROGRAMS:
    _add_matrix_test(_program)


@unittest.skipIf(REAL_GPU, "reads the simulator's report and its small device")
class ExampleBehaviourTest(testlib.TestCase):
    """What the examples are meant to show, checked over the simulator."""

    def test_churn_is_served_from_the_preallocation(self):
        for program in ("alloc_churn", "alloc_churn_static", "driver_api"):
            with self.subTest(program=program):
                plain = run_example(program, preload=False)
                self.assertSucceeded(plain)
                allocations = int(re.search(r"allocations: (\d+)", plain.stdout).group(1))
                self.assertGreater(allocations, 1000)
                self.assertEqual(plain.device()["driver_allocs"], allocations, plain.describe())

                # The default: the limit preallocated in a few pieces of virtual memory, no cuMemAlloc.
                shimmed = run_example(program)
                self.assertSucceeded(shimmed)
                self.assertEqual(shimmed.device()["driver_allocs"], 0, shimmed.describe())
                self.assertLessEqual(shimmed.device()["vmm"]["creates"], 64, shimmed.describe())
                # Nothing goes back before the end (driver_api destroys its context, and the arena, at exit).
                self.assertIn(shimmed.device()["vmm"]["releases"], (0, shimmed.device()["vmm"]["creates"]))
                # Classic regions: the head and the rest.
                classic = run_example(program, env={"GPUMEM_REGION_SOURCE": "classic"})
                self.assertSucceeded(classic)
                self.assertEqual(classic.device()["driver_allocs"], 2, classic.describe())

    def test_exit_summary_agrees_with_the_simulators_report(self):
        # On a GPU the demo reads its "driver allocs" and "peak reserved" columns from this line; here
        # the simulator's report says what really reached the driver.
        configs = {"bfc": {}, "bfc growth": {"GPUMEM_PREALLOCATE": "false"}, "platform": {"GPUMEM_MODE": "platform"}}
        for program in ("alloc_churn", "alloc_churn_static", "driver_api", "fragmentation"):
            for name, env in configs.items():
                with self.subTest(program=program, config=name):
                    result = run_example(program, env={**env, "GPUMEM_LOG_LEVEL": "info"})
                    self.assertSucceeded(result)
                    summaries = [match for line in result.stderr.splitlines()
                                 if (match := SUMMARY_LINE.match(line))]
                    self.assertEqual(len(summaries), 1, result.describe())
                    summary = summaries[0]
                    self.assertEqual(summary["mode"], name.split()[0], result.describe())
                    self.assertGreater(int(summary["allocs"]), 0, result.describe())
                    device = result.device()  # a classic region or a piece of virtual memory each
                    self.assertEqual(int(summary["driver_allocs"]), device["driver_allocs"] + device["vmm"]["creates"],
                                     result.describe())
                    peak, driver_peak = int(summary["peak_reserved"]), result.device()["peak_bytes_reserved"]
                    if name == "platform":
                        # The shim counts the bytes asked for; the driver rounds each block up a little.
                        self.assertLessEqual(peak, driver_peak, result.describe())
                        self.assertGreaterEqual(peak, 0.99 * driver_peak, result.describe())
                    else:
                        self.assertEqual(peak, driver_peak, result.describe())

    def test_no_exit_summary_below_info_level(self):
        result = run_example("alloc_churn")
        self.assertSucceeded(result)
        self.assertNotIn("summary:", result.stderr, result.describe())

    def test_growth_with_deferred_frees_stays_near_the_live_set(self):
        plain = run_example("alloc_churn", preload=False)
        self.assertSucceeded(plain)
        grown = run_example("alloc_churn", env={"GPUMEM_PREALLOCATE": "false", "GPUMEM_FREE_SYNC": "defer"})
        self.assertSucceeded(grown)
        plain_peak = plain.device()["peak_bytes_reserved"]
        # Fenced frees are resolved before the arena grows, rather than only at the limit.
        self.assertLessEqual(grown.device()["peak_bytes_reserved"], 4 * plain_peak, grown.describe())

    def test_fragmentation_large_block_reuses_coalesced_holes(self):
        # 96 MiB holds the 88 MiB peak only if the freed holes merge: the 48 MiB block must land in them.
        for program in ("fragmentation", "fragmentation_static"):
            with self.subTest(program=program):
                for source, driver_allocs in (("auto", 0), ("classic", 2)):  # classic: the head and the rest
                    result = run_example(program, env={"GPUMEM_LIMIT": "96MiB", "GPUMEM_REGION_SOURCE": source})
                    self.assertSucceeded(result)
                    self.assertIn("inside the freed range", result.stdout, result.describe())
                    self.assertEqual(result.device()["driver_allocs"], driver_allocs, result.describe())
                # With room to spare, the default policy reuses the holes too: the program's
                # cudaDeviceSynchronize releases the deferred frees.
                roomy = run_example(program)
                self.assertSucceeded(roomy)
                self.assertIn("inside the freed range", roomy.stdout, roomy.describe())

    def test_oom_counts_blocks_within_the_limit(self):
        result = run_example("oom", env={"GPUMEM_LIMIT": "1GiB"})
        self.assertSucceeded(result)
        self.assertIn("got 4 blocks (1.0 GiB)", result.stdout, result.describe())
        self.assertIn("cudaMemGetInfo when refused: free 0 B of 1.0 GiB", result.stdout, result.describe())
        self.assertIn("allocated all 4 blocks again", result.stdout, result.describe())

    def test_oom_without_shim_fills_the_simulated_device(self):
        result = run_example("oom_static", preload=False, env={"CUDASIM_DEVICE_MEMORY": "2GiB"})
        self.assertSucceeded(result)
        blocks = int(re.search(r"got (\d+) blocks", result.stdout).group(1))
        # 2 GiB less the context's share: at least 4, at most 7 blocks of 256 MiB.
        self.assertTrue(4 <= blocks <= 7, result.describe())
        self.assertEqual(result.device()["driver_allocs"], 2 * blocks, result.describe())

    def test_bad_argument_is_a_usage_error(self):
        for program in ("alloc_churn", "oom_static", "driver_api"):
            with self.subTest(program=program):
                result = run_example(program, preload=False, args=["lots"])
                self.assertEqual(result.returncode, 2, result.describe())
                self.assertIn("usage:", result.stderr)

    def test_no_driver_says_how_to_use_the_simulator(self):
        # The first run of a newcomer without a GPU: no libcuda.so.1 on the library path. The example
        # fails, naming the error and how to run over the simulated GPU instead.
        if "libcuda.so.1" in subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout:
            self.skipTest("this machine has a CUDA driver on its library path")
        for program in ("alloc_churn", "alloc_churn_static"):
            with self.subTest(program=program):
                result = testlib.run([program_path(program)], sim=False, timeout=60)
                self.assertEqual(result.returncode, 1, result.describe())
                self.assertIn("cudaErrorInsufficientDriver", result.stderr, result.describe())
                self.assertIn("without a GPU, run over the simulated one: gpumem-run --sim", result.stderr,
                              result.describe())

    def test_a_strict_refusal_over_the_simulator_is_not_taken_for_a_missing_driver(self):
        # GPUMEM_STRICT with a bad variable: gpumem refuses CUDA to the program, which runs over the
        # simulated driver; the example points at gpumem's line, not at the simulator.
        for program in ("alloc_churn", "alloc_churn_static"):
            with self.subTest(program=program):
                result = testlib.run([program_path(program)], env={"GPUMEM_STRICT": "1", "GPUMEM_MODE": "bcf"},
                                     timeout=60)
                self.assertEqual(result.returncode, 1, result.describe())
                self.assertIn('gpumem: GPUMEM_MODE="bcf"', result.stderr, result.describe())
                self.assertIn("GPUMEM_STRICT is set and a gpumem variable is invalid", result.stderr, result.describe())
                self.assertNotIn("without a GPU", result.stderr, result.describe())

    def test_refused_allocation_fails_the_example(self):
        # The simulator refuses every device allocation after the first 10: the example must say so.
        result = run_example("alloc_churn", preload=False, env={"CUDASIM_FAIL_ALLOC_AFTER": "10"})
        self.assertEqual(result.returncode, 1, result.describe())
        self.assertIn("cudaMalloc", result.stderr)
        self.assertIn("cudaErrorMemoryAllocation", result.stderr)


@unittest.skipIf(REAL_GPU, "checks the scripts, not the device")
class ExampleScriptsTest(testlib.TestCase):
    SCRIPTS = [os.path.join(SOURCE_ROOT, "scripts", name) for name in ("demo", "gpu-smoke", "bootstrap")]

    def test_scripts_are_shellcheck_clean(self):
        proc = subprocess.run(["shellcheck", *self.SCRIPTS], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_gpu_smoke_refuses_without_a_gpu(self):
        with tempfile.TemporaryDirectory() as fake_bin:
            fake_smi = os.path.join(fake_bin, "nvidia-smi")
            with open(fake_smi, "w") as f:
                f.write("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
            os.chmod(fake_smi, 0o755)
            env = dict(os.environ, PATH=f"{fake_bin}:/usr/bin:/bin")
            proc = subprocess.run([self.SCRIPTS[1]], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("no GPU", proc.stderr)

    def test_examples_build_against_nvidia_runtime(self):
        # The sources must build unchanged against NVIDIA's runtime, shared and static, as
        # scripts/gpu-smoke builds them on a GPU machine. Of the kernel programs, nvcc builds two here
        # (one linked with the driver too); the build compiled every one with the same nvcc flags
        # (examples/meson.build, *_nvcc), so they are not compiled a second time.
        cuda_home = os.path.dirname(os.environ["GPUMEM_TEST_CUDA_LIB_DIR"])
        kernels = ["vector_add", "vmm_ipc"]
        with tempfile.TemporaryDirectory() as out:
            proc = subprocess.run([self.SCRIPTS[1], "--build-only", out, "--cuda", cuda_home, "--only",
                                   ",".join(RUNTIME_EXAMPLES + ["driver_api"] + kernels)],
                                  capture_output=True, text=True, timeout=600)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertNotIn("warning", proc.stderr)
            expected = [name + suffix for name in RUNTIME_EXAMPLES for suffix in ("", "_static")]
            expected.append("driver_api")
            if os.access(os.path.join(cuda_home, "bin", "nvcc"), os.X_OK):
                expected += kernels
            self.assertEqual(sorted(os.listdir(out)), sorted(expected))

    def test_gpu_smoke_knows_every_example(self):
        # Every example's source is one gpu-smoke builds: --only accepts its name (and then finds no
        # toolkit at a missing folder, status 1), and refuses a name that is none (status 2).
        examples_dir = os.path.join(SOURCE_ROOT, "examples")
        sources = sorted(os.path.splitext(name)[0] for name in os.listdir(examples_dir)
                         if name.endswith((".cpp", ".cu")))
        self.assertEqual(sources, sorted(RUNTIME_EXAMPLES + ["driver_api"] + KERNEL_EXAMPLES))
        with tempfile.TemporaryDirectory() as out:
            missing = os.path.join(out, "no-toolkit")
            for name in sources:
                proc = subprocess.run([self.SCRIPTS[1], "--build-only", out, "--cuda", missing, "--only", name],
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual((proc.returncode, proc.stderr.strip()),
                                 (1, f"gpu-smoke: no CUDA Toolkit at {missing} (use --cuda)"), name)
            for args in (["--build-only", out, "--only", "vector_add,nope"], ["--only", "vector_add"],
                         ["--build-only", out, "--only", ""]):
                proc = subprocess.run([self.SCRIPTS[1], *args], capture_output=True, text=True, timeout=60)
                self.assertEqual(proc.returncode, 2, args)
                self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
                self.assertIn("--only", proc.stderr)

    def run_demo(self, *options):
        build_root = os.environ["GPUMEM_TEST_BUILD_ROOT"]
        with tempfile.TemporaryDirectory(prefix="gpumem-demo-") as timeline_dir:
            proc = subprocess.run([self.SCRIPTS[0], "--build-dir", build_root, "--sim", "--timeline-dir",
                                   timeline_dir, *options],
                                  env=testlib.clean_environment(), capture_output=True, text=True, timeout=300)
            proc.timeline_files = sorted(os.listdir(timeline_dir))
        return proc

    def check_demo_table(self, proc) -> dict:
        """Checks the demo's table and policy lines; returns {(program, allocator): columns}."""
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        table = {}
        for program in ("alloc_churn", "fragmentation"):
            rows = {line[15:33].strip(): line.split()  # printf "%-14s %-18s ..."
                    for line in proc.stdout.splitlines() if line.startswith(program + " ")}
            self.assertEqual(sorted(rows), ["gpumem bfc", "gpumem bfc growth", "plain CUDA"], proc.stdout)
            # Columns after the allocator: driver allocs, peak reserved, alloc time, run time.
            plain_allocs = int(rows["plain CUDA"][-6])
            # The preallocation: 0.75 x 16 GiB in a few pieces of virtual memory (at most 64).
            self.assertIn(int(rows["gpumem bfc"][-6]), range(1, 65), proc.stdout)
            self.assertEqual(rows["gpumem bfc"][-5], "12.0GiB", proc.stdout)
            # Growth maps what the arena lacks, at least 8 MiB at a time, a 2 MiB piece each: fewer
            # driver allocations than the program's own, and far fewer where it reuses its blocks.
            growth_allocs = int(rows["gpumem bfc growth"][-6])
            self.assertLess(growth_allocs, plain_allocs, proc.stdout)
            if program == "alloc_churn":
                self.assertGreater(plain_allocs, 100 * growth_allocs, proc.stdout)
            table.update({(program, allocator): columns for allocator, columns in rows.items()})
        self.assertIn("mode=bfc(default) preallocate=on(default)", proc.stdout)
        self.assertIn("preallocate=off(GPUMEM_PREALLOCATE)", proc.stdout)
        self.assertNotIn("no policy line logged", proc.stdout)
        return table

    def test_demo_prints_the_side_by_side_table(self):
        # Figures from the simulator's report, and (as on a GPU) from gpumem's exit summary: the
        # programs are deterministic, so both must count the same driver allocations.
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            from_report, from_shim = pool.map(lambda options: self.run_demo(*options), [(), ("--figures", "shim")])
        report_table = self.check_demo_table(from_report)
        shim_table = self.check_demo_table(from_shim)
        self.assertIn("Driver figures from the simulator's report.", from_report.stdout)
        self.assertIn("reach twice the program's", from_report.stdout)  # why growth may hold more
        self.assertIn("counted in\nGPUMEM_MODE=platform", from_shim.stdout)
        for row, columns in report_table.items():
            with self.subTest(row=row):
                self.assertEqual(shim_table[row][-6], columns[-6], from_report.stdout + from_shim.stdout)
        # The timeline of alloc_churn in growth mode: its trace, its PNG and its chart after the table.
        self.assertEqual(from_report.timeline_files, ["alloc_churn.png", "alloc_churn.trace.csv"])
        self.assertRegex(from_report.stdout, r"peak in use [0-9.]+ [KMG]?i?B \(\d+ bytes\)")
        self.assertIn("alloc_churn.png", from_report.stdout)

    def test_bootstrap_rejects_an_unknown_package_set(self):
        proc = subprocess.run([self.SCRIPTS[2], "tests"], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(proc.stderr.strip(), "bootstrap: unknown package set 'tests' (expected build, plot or all)")

    def test_bootstrap_sets_are_part_of_all(self):
        # The tests run after `scripts/bootstrap` (all): the demo's sets then have nothing left to install,
        # so each must exit at once, quietly, without root and without touching the package lists.
        for package_set in ("build", "plot", "all"):
            proc = subprocess.run([self.SCRIPTS[2], package_set], capture_output=True, text=True, timeout=60)
            self.assertEqual((proc.returncode, proc.stdout, proc.stderr), (0, "", ""), package_set)

    def test_demo_rejects_a_bad_figures_source(self):
        proc = self.run_demo("--figures", "guess")
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertIn("--figures needs 'report' or 'shim'", proc.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
