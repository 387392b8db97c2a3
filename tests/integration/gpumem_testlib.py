"""Shared helpers for gpumem's end-to-end tests: run a program over the simulated CUDA platform, with
or without the shim preloaded, and read back what the simulator saw.

Paths come from the environment Meson sets for each test:
  GPUMEM_TEST_SHIM     path of libgpumem.so
  GPUMEM_TEST_SIM_DIR  folder holding the simulator's libcuda.so.1 and libcudart.so.13
"""

import dataclasses
import json
import os
import re
import resource
import subprocess
import tempfile
import unittest

# Variables that change the shim's or the simulator's behaviour; cleared so each test states its own.
# A launcher's or a cluster's (a test run inside srun, torchrun or a GPU-sharing pod) change it too.
_POLICY_PREFIXES = ("GPUMEM_", "XLA_", "TF_", "CUDASIM_", "OMPI_COMM_WORLD_", "PMI_", "MPI_LOCAL", "SLURM_",
                    "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
_LAUNCHER_NAMES = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE")


# A simulated machine of two devices, for peer access.
TWO_DEVICES = {"CUDASIM_DEVICE_MEMORY": "4GiB,4GiB"}
_CLASSIC = {"GPUMEM_REGION_SOURCE": "classic"}
# The shim's ways of serving memory a program shaped like a framework is checked in, and the program
# without it: name -> (preload the shim?, environment).
MODE_CONFIGURATIONS = {
    "without gpumem": (False, {}),
    # The default region source: virtual memory where the driver has it, as the simulator's devices do.
    "bfc preallocated": (True, {"GPUMEM_LIMIT": "64MiB"}),
    "bfc growth": (True, {"GPUMEM_LIMIT": "64MiB", "GPUMEM_PREALLOCATE": "false"}),
    "bfc classic preallocated": (True, _CLASSIC),
    "bfc classic growth": (True, {**_CLASSIC, "GPUMEM_PREALLOCATE": "false"}),
    "platform": (True, {"GPUMEM_MODE": "platform"}),
    "cuda_async": (True, {"GPUMEM_MODE": "cuda_async"}),
}


# The one line a process says, at the default log level, when gpumem takes over its first device
# (LogLevel::notice): "gpumem: device 0: bfc arena, preallocated, vmm regions (auto), limit 12 GiB (...)".
START_LINE = re.compile(r"^gpumem: device \d+: (bfc arena|cuda_async pool|platform)\b.*, limit \d[^,]* \(.*\)$")


def start_lines(stderr: str) -> list:
    """The start lines in a process's stderr (one when gpumem took over a device, else none)."""
    return [line for line in stderr.splitlines() if START_LINE.match(line)]


def without_start_line(stderr: str) -> str:
    """stderr less the start line: what gpumem (and the program) said besides, for the tests that
    check that a run had nothing to warn about."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not START_LINE.match(line.rstrip("\n")))


def shim_path() -> str:
    return os.environ["GPUMEM_TEST_SHIM"]


def sim_dir() -> str:
    return os.environ["GPUMEM_TEST_SIM_DIR"]


def build_root() -> str:
    return os.environ["GPUMEM_TEST_BUILD_ROOT"]


def source_root() -> str:
    return os.environ["GPUMEM_TEST_SOURCE_ROOT"]


def program_path(name: str) -> str:
    """A test program (or library, or folder) built in tests/integration/programs."""
    return os.path.join(build_root(), "tests", "integration", "programs", name)


@dataclasses.dataclass
class Result:
    argv: list
    returncode: int
    stdout: str
    stderr: str
    report: dict | None  # the simulator's CUDASIM_REPORT JSON, None if it wrote none

    def device(self, ordinal: int = 0) -> dict:
        assert self.report is not None, f"no simulator report for {self.argv}\n{self.stderr}"
        return self.report["devices"][ordinal]

    def describe(self) -> str:
        return (f"$ {' '.join(self.argv)}\nexit {self.returncode}\n--- stdout\n{self.stdout}"
                f"--- stderr\n{self.stderr}")


def key_values(text: str) -> dict:
    """The "key=value" lines of a program's output, as a dict (other lines are ignored)."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def clean_environment() -> dict:
    # CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER: the simulator honours them as the driver does, and the
    # tests choose their devices themselves.
    return {k: v for k, v in os.environ.items() if not k.startswith(_POLICY_PREFIXES)
            and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
            + _LAUNCHER_NAMES}


def run(argv, env=None, preload=True, sim=True, timeout=120, input_text=None, cwd=None, fsize_limit=None) -> Result:
    """Runs argv (in `cwd` if given); preload puts the shim in LD_PRELOAD, sim puts the simulator on
    LD_LIBRARY_PATH; fsize_limit sets RLIMIT_FSIZE (ulimit -f, in bytes) for it, whose SIGXFSZ keeps its
    default action (ending the process), as in a shell."""
    full_env = clean_environment()
    with tempfile.TemporaryDirectory(prefix="gpumem-test-") as tmp:
        report_path = os.path.join(tmp, "report.json")
        if sim:
            full_env["LD_LIBRARY_PATH"] = sim_dir()
            full_env["CUDASIM_REPORT"] = report_path
        if preload:
            full_env["LD_PRELOAD"] = shim_path()
        full_env.update(env or {})
        limit = None if fsize_limit is None else (lambda: resource.setrlimit(resource.RLIMIT_FSIZE,
                                                                             (fsize_limit, fsize_limit)))
        proc = subprocess.run([str(a) for a in argv], env=full_env, capture_output=True, text=True,
                              timeout=timeout, input=input_text, cwd=cwd, errors="replace", preexec_fn=limit)
        report = None
        if os.path.exists(report_path):
            with open(report_path) as f:
                report = json.load(f)
        return Result([str(a) for a in argv], proc.returncode, proc.stdout, proc.stderr, report)


class TestCase(unittest.TestCase):
    def assertSucceeded(self, result: Result):
        self.assertEqual(result.returncode, 0, result.describe())


# --- jobs of several ranks (test_ranks.py, test_mpirun.py) ---

@dataclasses.dataclass
class Rank:
    """What one rank of a job printed (rank_job's line) and its exit status."""
    rank: int
    local_rank: int
    device: int
    result: str
    returncode: int
    stderr: str


def rank_lines(stdout: str) -> list:
    """rank_job's lines ("rank=R local_rank=L device=D result=...") of a job's merged output."""
    ranks = []
    for line in stdout.splitlines():
        if not line.startswith("rank="):
            continue
        fields = dict(field.split("=", 1) for field in line.split())
        ranks.append(Rank(int(fields["rank"]), int(fields["local_rank"]), int(fields["device"]), fields["result"],
                          0 if fields["result"] == "ok" else 1, ""))
    return sorted(ranks, key=lambda r: r.rank)


def job_environment(folder: str, env=None, preload=True) -> dict:
    """The environment every rank of a job over the simulator shares: the simulator's devices shared
    by the ranks (CUDASIM_SHARED_DEVICES, a directory in `folder`), the shim preloaded, its log at info and
    each rank's statistics in a file of its own (stats.HOST.RANK.json in `folder`)."""
    full_env = clean_environment()
    full_env["LD_LIBRARY_PATH"] = sim_dir()
    full_env["CUDASIM_SHARED_DEVICES"] = os.path.abspath(os.path.join(folder, "devices"))
    if preload:
        full_env["LD_PRELOAD"] = shim_path()
    full_env["GPUMEM_LOG_LEVEL"] = "info"
    full_env["GPUMEM_STATS_FILE"] = os.path.join(folder, "stats.%h.%r.json")
    full_env.update(env or {})
    return full_env


def launch_by_hand(argv, rank_environments, env, timeout=120) -> list:
    """Starts one process of `argv` per entry of `rank_environments` (a launcher's variables for that
    rank) at once, as a launcher does, and waits for all: their rank_job lines and exit statuses."""
    processes = []
    for variables in rank_environments:
        processes.append(subprocess.Popen([str(a) for a in argv], env={**env, **variables}, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, errors="replace"))
    ranks = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=timeout)
        lines = rank_lines(stdout)
        assert len(lines) == 1, f"exit {process.returncode}\n{stdout}\n{stderr}"
        ranks.append(dataclasses.replace(lines[0], returncode=process.returncode, stderr=stderr))
    return sorted(ranks, key=lambda r: r.rank)


def stats_files(folder: str) -> dict:
    """The statistics each rank wrote in `folder` (stats.HOST.RANK.json), by rank."""
    found = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith("stats.") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                document = json.load(f)
            found[document["rank"]] = document
    return found
