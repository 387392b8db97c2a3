"""Helpers shared by scripts/bench and the bench smoke tests: running the benchmark programs with a
clean environment and reading Google Benchmark's JSON output."""
import json
import os
import subprocess

# Variables that change what the shim, gpumem-replay or the simulator do; a run starts without them.
_CONFIG_PREFIXES = ("GPUMEM_", "XLA_", "TF_", "CUDASIM_")


def clean_environment():
    """The current environment without LD_PRELOAD and without any variable the shim, gpumem-replay or
    the simulator read, so that every figure comes from the defaults or what a caller sets."""
    return {key: value for key, value in os.environ.items()
            if key != "LD_PRELOAD" and not key.startswith(_CONFIG_PREFIXES)}


def run_benchmark(argv, env=None, timeout=600):
    """Runs a Google Benchmark program with JSON on stdout; returns its list of runs.
    Raises RuntimeError with the program's stderr when it fails or prints no JSON."""
    result = subprocess.run(list(argv) + ["--benchmark_format=json"], env=env, capture_output=True,
                            text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{os.path.basename(argv[0])} exited with {result.returncode}: {result.stderr.strip()}")
    try:
        return json.loads(result.stdout)["benchmarks"]
    except (ValueError, KeyError) as error:
        raise RuntimeError(f"{os.path.basename(argv[0])} printed no benchmark JSON ({error})") from error


_NS_PER_UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def time_ns(run, which):
    """A run's `real_time` or `cpu_time` (per iteration) in nanoseconds."""
    return run[which] * _NS_PER_UNIT[run["time_unit"]]


# Parts Google Benchmark appends to a benchmark's name for its settings ("/iterations:2000", "/real_time").
_SETTING_PARTS = ("iterations:", "min_time:", "repeats:", "threads:", "real_time", "process_time")


def base_name(run):
    """The name a benchmark was registered under, without the parts its settings add."""
    return "/".join(part for part in run.get("run_name", run["name"]).split("/")
                    if not part.startswith(_SETTING_PARTS))


def by_name(runs):
    """Runs that are iterations (not aggregates) by base_name(); each name keeps a list (repetitions)."""
    named = {}
    for run in runs:
        if run.get("run_type", "iteration") == "iteration":
            named.setdefault(base_name(run), []).append(run)
    return named
