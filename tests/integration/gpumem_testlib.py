"""Shared helpers for gpumem's end-to-end tests: run a program over the simulated CUDA platform, with
or without the shim preloaded, and read back what the simulator saw.

Paths come from the environment Meson sets for each test:
  GPUMEM_TEST_SHIM     path of libgpumem.so
  GPUMEM_TEST_SIM_DIR  folder holding the simulator's libcuda.so.1 and libcudart.so.13
"""

import dataclasses
import json
import os
import resource
import subprocess
import tempfile
import unittest

# Variables that change the shim's or the simulator's behaviour; cleared so each test states its own.
_POLICY_PREFIXES = ("GPUMEM_", "XLA_", "TF_", "CUDASIM_")


# A simulated machine of two devices, for peer access.
TWO_DEVICES = {"CUDASIM_DEVICE_MEMORY": "4GiB,4GiB"}
_VMM = {"GPUMEM_REGION_SOURCE": "vmm", "GPUMEM_LIMIT": "64MiB"}
# The shim's ways of serving memory a program shaped like a framework is checked in, and the program
# without it: name -> (preload the shim?, environment).
MODE_CONFIGURATIONS = {
    "without gpumem": (False, {}),
    "bfc preallocated": (True, {}),
    "bfc growth": (True, {"GPUMEM_PREALLOCATE": "false"}),
    "bfc vmm preallocated": (True, _VMM),
    "bfc vmm growth": (True, {**_VMM, "GPUMEM_PREALLOCATE": "false"}),
    "platform": (True, {"GPUMEM_MODE": "platform"}),
    "cuda_async": (True, {"GPUMEM_MODE": "cuda_async"}),
}


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
    return {k: v for k, v in os.environ.items() if not k.startswith(_POLICY_PREFIXES)
            and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}


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
