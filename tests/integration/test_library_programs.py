"""NVIDIA's libraries over the simulator: examples/libraries/<library>_calls, built by nvcc with its
default static runtime against the toolkit's cuBLAS, cuBLASLt, cuFFT, cuRAND, cuSPARSE, cuSOLVER,
cuDNN and NCCL. Each library carries its own copy of NVIDIA's runtime, which reaches the simulated
driver through cuGetProcAddress and the private export tables, and loads its kernels from fat
binaries whose entries are Zstandard-compressed (cudasim/driver/modules/fatbin.cpp).

No device code runs, so no result is computed: a program prints every call and the status it
returned and stops at the first failure. A library that runs must get to its end alone and, under
gpumem in each mode, print exactly the same calls and statuses, with its device memory served by
gpumem (every allocation the simulator saw without the shim is one gpumem served; every cuMemCreate,
which gpumem passes through, charged to its budget with the same peak), and a
GPUMEM_LIMIT below what it asks for must give the library's own out-of-memory status. A library
that cannot run yet fails as EXPECTED says: the exact call and status, and the line the simulator
printed about why (cudasim/export_tables.md lists what it asked for).

The coverage table of cudasim/README.md is made from EXPECTED, which these tests assert;
CoverageTableTest fails when the committed table differs (--write-coverage rewrites it).
"""

import concurrent.futures
import json
import os
import sys
import tempfile
import unittest

import gpumem_testlib as testlib
import test_examples

PROGRAMS_DIR = os.path.join(test_examples.EXAMPLES_DIR, "libraries")
README = os.path.join(test_examples.SOURCE_ROOT, "cudasim", "README.md")
SIM_ENV = {"CUDASIM_DEVICES": "2", "CUDASIM_DEVICE_MEMORY": "8GiB,8GiB"}
KERNEL_WARNING = "cudasim: kernels do not run on the simulated device"


class Expected:
    """What a program does over the simulator today.

    fails: None when it runs to its end, else (the line the program ends with on stderr, the line
    the simulator printed about why). unknown: the unknown export-table entries
    (table, index) it calls and goes on without. oom: (the library call that must answer, the
    status) when GPUMEM_LIMIT `oom_limit` is below what the library allocates itself; None when
    these calls allocate nothing of the library's own (`no_oom` says so in the table). vmm_only: the
    library's device memory is all cuMemCreate (none through cuMemAlloc, so gpumem's arena serves
    none of it)."""

    def __init__(self, library, calls, fails=None, unknown=(), oom=None, oom_limit="1MiB", no_oom="",
                 vmm_only=False):
        self.library = library
        self.calls = calls
        self.fails = fails
        self.unknown = list(unknown)
        self.oom = oom
        self.oom_limit = oom_limit
        self.no_oom = no_oom
        self.vmm_only = vmm_only


EXPECTED = {
    "cublas_calls": Expected(
        "cuBLAS", "cublasCreate, cublasSetStream, cublasSetWorkspace, cublasSgemm, cublasDgemm, cublasGemmEx (FP16), "
                  "cublasSgemmStridedBatched, cublasDestroy",
        unknown=[("UNNAMED_1734DC26", 4)], oom=("cublasCreate(&handle)", "3 (CUBLAS_STATUS_ALLOC_FAILED)")),
    "cublaslt_calls": Expected(
        "cuBLASLt", "cublasLtCreate, matmul and layout descriptors, cublasLtMatmulAlgoGetHeuristic, cublasLtMatmul, "
                    "cublasLtDestroy",
        no_oom="allocates no device memory of its own in these calls"),
    "cufft_calls": Expected(
        "cuFFT", "cufftPlan1d (C2C, batched), cufftPlan2d (R2C), cufftSetStream, cufftGetSize, cufftExecC2C, "
                 "cufftExecR2C, cufftDestroy",
        oom=("cufftPlan1d(&plan_1d, n, CUFFT_C2C, batch)", "5 (CUFFT_INTERNAL_ERROR)")),
    "curand_calls": Expected(
        "cuRAND", "curandCreateGenerator (XORWOW, Philox), curandSetStream, curandSetPseudoRandomGeneratorSeed, "
                  "curandGenerateUniform, curandGenerateNormal, curandDestroyGenerator",
        oom=("curandGenerateUniform(philox, values, n)", "102 (CURAND_STATUS_ALLOCATION_FAILED)"), oom_limit="6MiB"),
    "cusparse_calls": Expected(
        "cuSPARSE", "cusparseCreate, cusparseSetStream, cusparseCreateCsr, cusparseCreateDnVec, cusparseSpMV_bufferSize, "
                    "cusparseSpMV, cusparseDestroy",
        no_oom="allocates no device memory of its own in these calls"),
    "cusolver_calls": Expected(
        "cuSOLVER", "cusolverDnCreate, cusolverDnSetStream, cusolverDnSpotrf_bufferSize, cusolverDnSpotrf, "
                    "cusolverDnDestroy",
        oom=("cusolverDnCreate(&handle)", "7 (CUSOLVER_STATUS_INTERNAL_ERROR)")),
    "cudnn_calls": Expected(
        "cuDNN", "cudnnCreate, cudnnSetStream, tensor, filter and convolution descriptors, "
                 "cudnnGetConvolution2dForwardOutputDim, cudnnGetConvolutionForwardWorkspaceSize, cudnnDestroy",
        oom=("cudnnCreate(&handle)", "4004 (CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)"), oom_limit="16KiB"),
    "nccl_calls": Expected(
        "NCCL", "ncclGetVersion, ncclCommInitAll (2 devices), ncclCommUserRank, ncclCommCount, ncclCommDestroy",
        oom=("ncclCommInitAll(comms, ranks, devices)", "1 (ncclUnhandledCudaError)"), vmm_only=True),
}

# The shim's modes (test_examples.SHIM_CONFIGS's policy lines say each applied).
MODES = {
    "bfc": ({}, ["bfc mode"]),
    "platform": ({"GPUMEM_MODE": "platform"}, ["platform mode"]),
    "cuda_async": ({"GPUMEM_MODE": "cuda_async"}, ["cuda_async mode"]),
    "share auto": ({"GPUMEM_SHARE": "auto"}, ["bfc mode", "share=auto(GPUMEM_SHARE)"]),
}


def program_path(name: str) -> str:
    return os.path.join(PROGRAMS_DIR, name)


def run_program(name, env=None, preload=False, stats_dir=None):
    full_env = {**SIM_ENV, **(env or {})}
    if stats_dir is not None:
        full_env["GPUMEM_STATS_FILE"] = os.path.join(stats_dir, "stats.json")
        if full_env.get("GPUMEM_SHARE") == "auto":
            # Its ledger in the test's own folder.
            full_env["GPUMEM_SHARE_DIR"] = os.path.join(stats_dir, "share")
            os.makedirs(full_env["GPUMEM_SHARE_DIR"], exist_ok=True)
    return testlib.run([program_path(name)], env=full_env, preload=preload, timeout=120)


def driver_allocs(result: testlib.Result) -> int:
    return sum(device["driver_allocs"] for device in result.report["devices"])


def served_allocs(stats_dir: str) -> int:
    """The allocations gpumem served (its statistics file), over every device."""
    with open(os.path.join(stats_dir, "stats.json")) as f:
        document = json.load(f)
    return sum(device["allocations"] for device in document["devices"])


def vmm_creates(result: testlib.Result) -> list:
    """The cuMemCreate allocations the simulator saw on each device, and their peak bytes."""
    return [(device["vmm"]["creates"], device["vmm"]["peak_bytes"]) for device in result.report["devices"]]


def vmm_charged(stats_dir: str) -> list:
    """The cuMemCreate allocations gpumem charged to each device's budget, and their peak bytes."""
    with open(os.path.join(stats_dir, "stats.json")) as f:
        document = json.load(f)
    return [(device["budget"]["paths"]["vmm"]["charges"], device["budget"]["paths"]["vmm"]["peak_charged"])
            for device in document["devices"]]


def simulator_reasons(stderr: str) -> list:
    """The simulator's lines, less the two every run of NVIDIA's runtime prints."""
    return [line for line in stderr.splitlines() if line.startswith("cudasim:")
            and not line.startswith(KERNEL_WARNING) and "{F8CFF951-2146-8B4E-B9E2-FB469E7C0DD9}" not in line]


class LibraryProgramTest(testlib.TestCase):
    """One test per library: alone, under gpumem in each mode, and under a limit below its needs."""

    def check_alone(self, name: str) -> testlib.Result:
        expected = EXPECTED[name]
        result = run_program(name)
        unknown = [(c["table"], c["index"]) for c in result.report["export_table_calls"] if c["knowledge"] == "unknown"]
        self.assertEqual(unknown, expected.unknown, result.describe())
        if expected.fails is None:
            self.assertSucceeded(result)
            self.assertEqual(result.stdout.splitlines()[-1], f"{name}: done", result.describe())
            if expected.vmm_only:
                self.assertEqual(driver_allocs(result), 0, result.describe())
                self.assertTrue(all(creates > 0 for creates, _ in vmm_creates(result)), result.describe())
        else:
            self.assertEqual(result.returncode, 1, result.describe())
            self.assertEqual(result.stderr.splitlines()[-1], expected.fails[0], result.describe())
            self.assertIn(expected.fails[1], simulator_reasons(result.stderr), result.describe())
        return result

    def check_program(self, name: str):
        self.assertTrue(os.access(program_path(name), os.X_OK), f"{program_path(name)} is not built")
        baseline = self.check_alone(name)
        with tempfile.TemporaryDirectory(prefix="gpumem-libraries-") as tmp:
            dirs = {mode: os.path.join(tmp, mode.replace(" ", "_")) for mode in MODES}
            for folder in dirs.values():
                os.makedirs(folder)
            with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
                futures = {mode: pool.submit(run_program, name, {**env, "GPUMEM_LOG_LEVEL": "info"}, True, dirs[mode])
                           for mode, (env, _) in MODES.items()}
                results = {mode: future.result() for mode, future in futures.items()}
            for mode, result in results.items():
                with self.subTest(mode=mode):
                    self.assertEqual(result.returncode, baseline.returncode, result.describe())
                    self.assertEqual(result.stdout, baseline.stdout,
                                     f"{mode}: the calls or their statuses differ from the run without gpumem\n"
                                     f"{result.describe()}")
                    self.assertNotIn("gpumem: [warning]", result.stderr, result.describe())
                    # The mode applied to every context gpumem served (its policy line comes with the
                    # first allocation; NCCL fails before any).
                    policy = [line for line in result.stderr.splitlines() if line.startswith("gpumem: [info] context")
                              and "summary" not in line]
                    self.assertEqual(bool(policy), driver_allocs(baseline) > 0, result.describe())
                    for line in policy:
                        for phrase in MODES[mode][1]:
                            self.assertIn(phrase, line, result.describe())
                    if EXPECTED[name].fails is None:
                        # Every allocation the simulator saw without gpumem (the program's and the
                        # library's own) is one gpumem served.
                        self.assertEqual(served_allocs(dirs[mode]), driver_allocs(baseline), result.describe())
                        # The library's own cuMemCreate allocations (NCCL's buffers): passed through,
                        # each one charged to its device's budget, the same peak as without gpumem.
                        self.assertEqual(vmm_charged(dirs[mode]), vmm_creates(baseline), result.describe())
                        # The arena saves driver allocations where the library makes any.
                        if mode == "bfc" and driver_allocs(baseline) > 0:
                            self.assertLess(driver_allocs(result), driver_allocs(baseline), result.describe())

    def check_limit(self, name: str):
        expected = EXPECTED[name]
        call, status = expected.oom
        result = run_program(name, {"GPUMEM_LIMIT": expected.oom_limit}, preload=True)
        self.assertEqual(result.returncode, 1, result.describe())
        # The library's own status, for its own call: not the program's cudaMalloc, not a crash.
        prefix = name[:-len("_calls")]  # how the program names the library it calls
        self.assertEqual(result.stderr.splitlines()[-1], f"{prefix}: {call} returned {status.split()[0]}",
                         result.describe())
        # Without the limit the same call succeeds (the baseline of check_program).
        self.assertIn(f"{prefix}: {call} -> 0", run_program(name).stdout)


def _add(name: str):
    def test(self):
        self.check_program(name)
    test.__doc__ = f"{name}: alone over the simulator, then under gpumem in each mode"
    setattr(LibraryProgramTest, f"test_{name}", test)
    if EXPECTED[name].oom is not None:
        def limit(self):
            self.check_limit(name)
        limit.__doc__ = f"{name}: a GPUMEM_LIMIT below its needs gives the library's out-of-memory status"
        setattr(LibraryProgramTest, f"test_{name}_limit", limit)


for _name in EXPECTED:
    _add(_name)


class NcclPeerAccessTest(testlib.TestCase):
    """NCCL reads peer access from the simulated NVML (nvmlDeviceGetP2PStatus): the two devices are
    peers by default, and CUDASIM_PEER_ACCESS=none turns P2P off in NCCL's topology (its INFO log
    says so) while the communicators are still made."""

    DISABLED = "P2P is disabled between connected GPUs"

    def test_nccl_follows_the_simulated_peer_access(self):
        self.assertTrue(os.access(program_path("nccl_calls"), os.X_OK), "nccl_calls is not built")
        for peer_access, disabled in (("all", False), ("none", True)):
            with self.subTest(CUDASIM_PEER_ACCESS=peer_access):
                result = run_program("nccl_calls", {"CUDASIM_PEER_ACCESS": peer_access, "NCCL_DEBUG": "INFO"})
                self.assertSucceeded(result)
                self.assertIn("nccl_calls: done", result.stdout.splitlines(), result.describe())  # NCCL logs there too
                self.assertEqual(self.DISABLED in result.stdout + result.stderr, disabled, result.describe())


class GpumemRunTest(testlib.TestCase):
    """gpumem-run --sim over each library: one that runs gets to its end; one that cannot run yet
    gives its status, and the one line of the simulator that says why."""

    def test_gpumem_run_sim_runs_each_library_or_says_why_not(self):
        wrapper = os.path.join(testlib.build_root(), "scripts", "gpumem-run")
        for name, expected in EXPECTED.items():
            with self.subTest(program=name):
                result = testlib.run([wrapper, "--sim", "--sim-devices", "2", "--", program_path(name)], preload=False,
                                     sim=False, timeout=120)
                if expected.fails is None:
                    self.assertSucceeded(result)
                    self.assertEqual(result.stdout.splitlines()[-1], f"{name}: done", result.describe())
                    continue
                self.assertEqual(result.returncode, 1, result.describe())
                self.assertEqual(result.stderr.splitlines()[-1], expected.fails[0], result.describe())
                self.assertEqual(simulator_reasons(result.stderr), [expected.fails[1]], result.describe())


# --- the coverage table of cudasim/README.md, made from EXPECTED (what the tests above assert) ---

TABLE_BEGIN = "<!-- library coverage: made by tests/integration/test_library_programs.py --write-coverage -->"
TABLE_END = "<!-- end of library coverage -->"
MODE_NAMES = "bfc, platform, cuda_async, GPUMEM_SHARE=auto"


def coverage_table() -> str:
    rows = ["| Library | Calls of its test program | Alone over the simulator | Under gpumem "
            f"({MODE_NAMES}) | GPUMEM_LIMIT below its needs | Unknown entries called |",
            "|---|---|---|---|---|---|"]
    for name, e in EXPECTED.items():
        if e.fails is None:
            alone = "runs to its end"
            if e.vmm_only:
                shim = ("the same calls and statuses; its device memory is all `cuMemCreate` (on every device), passed "
                        "through and charged to gpumem's budget: the same count and peak")
            else:
                shim = "the same calls and statuses; every allocation served by gpumem"
        else:
            call = e.fails[0].split(": ", 1)[1]
            alone = f"fails: `{call}`; the simulator says `{e.fails[1].removeprefix('cudasim: ')}`"
            shim = "the same failure"
        if e.oom is not None:
            limit = f"`{e.oom[0]}` returns {e.oom[1]} (limit {e.oom_limit})"
        else:
            limit = e.no_oom or "not reached"
        unknown = ", ".join(f"`{table}[{index}]`" + (" (goes on without it)" if e.fails is None else "")
                            for table, index in e.unknown) or "none"
        rows.append(f"| {e.library} (`examples/libraries/{name}.cpp`) | {e.calls} | {alone} | {shim} | {limit} "
                    f"| {unknown} |")
    return "\n".join(rows) + "\n"


def readme_table(text: str) -> str:
    begin = text.index(TABLE_BEGIN) + len(TABLE_BEGIN) + 1
    return text[begin:text.index(TABLE_END, begin)]


class CoverageTableTest(unittest.TestCase):
    def test_readme_table_is_the_one_the_tests_make(self):
        with open(README, encoding="utf-8") as f:
            text = f.read()
        self.assertIn(TABLE_BEGIN, text, f"{README} has no library coverage table")
        self.assertEqual(readme_table(text), coverage_table(),
                         "cudasim/README.md's library coverage table is not the one the tests make: run "
                         "python3 tests/integration/test_library_programs.py --write-coverage")


def write_coverage():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    old = readme_table(text)
    begin = text.index(TABLE_BEGIN) + len(TABLE_BEGIN) + 1
    with open(README, "w", encoding="utf-8") as f:
        f.write(text[:begin] + coverage_table() + text[begin + len(old):])


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-coverage"]:
        write_coverage()
    else:
        unittest.main()
