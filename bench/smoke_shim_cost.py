"""Runs shim_cost briefly over the simulated driver, alone and with libgpumem.so preloaded in modes
off and bfc, and fails when a row is missing or failed, a time is not positive, or the shim was not
(or was) in the process and active as its mode says; also that a bad option is refused. Keeps the
benchmark from breaking unnoticed; it times nothing.

usage: smoke_shim_cost.py SHIM_COST LIBGPUMEM_SO CUDASIM_DIR"""
import subprocess
import sys

from bench_common import by_name, clean_environment, run_benchmark

program, shim, sim_dir = sys.argv[1:4]
EXPECTED = ("alloc_free_4KiB", "cuMemGetInfo", "cuCtxGetCurrent")
problems = []
base = clean_environment()
base["LD_LIBRARY_PATH"] = sim_dir + (":" + base["LD_LIBRARY_PATH"] if base.get("LD_LIBRARY_PATH") else "")
setups = {"simulator alone": (base, 0, 0),
          "shim off": (dict(base, LD_PRELOAD=shim, GPUMEM_MODE="off"), 1, 0),
          "shim bfc": (dict(base, LD_PRELOAD=shim, GPUMEM_MODE="bfc"), 1, 1)}
for setup, (env, loaded, active) in setups.items():
    try:
        runs = by_name(run_benchmark([program, "--pairs=2000", "--warmup=100", "--benchmark_min_time=0.001"],
                                     env=env, timeout=120))
    except RuntimeError as error:
        problems.append(f"{setup}: {error}")
        continue
    for name in EXPECTED:
        if name not in runs:
            problems.append(f"{setup}: missing {name}")
            continue
        run = runs[name][0]
        if run.get("error_occurred"):
            problems.append(f"{setup}: {name}: {run.get('error_message')}")
        elif not run["real_time"] > 0:
            problems.append(f"{setup}: {name}: real_time {run['real_time']}")
        elif (run["shim_loaded"], run["shim_active"]) != (loaded, active):
            problems.append(f"{setup}: {name}: shim_loaded {run['shim_loaded']}, shim_active {run['shim_active']}, "
                            f"expected {loaded}, {active}")
    if "alloc_free_4KiB" in runs and runs["alloc_free_4KiB"][0].get("iterations") != 2000:
        problems.append(f"{setup}: alloc_free_4KiB ran {runs['alloc_free_4KiB'][0].get('iterations')} pairs, not 2000")

bad = subprocess.run([program, "--pairs=x"], env=base, capture_output=True, text=True, timeout=60, check=False)
if bad.returncode != 2 or "--pairs" not in bad.stderr or len(bad.stderr.strip().splitlines()) != 1:
    problems.append(f"--pairs=x: expected exit 2 and one line naming the option, got {bad.returncode}: {bad.stderr!r}")

if problems:
    sys.exit("\n".join(problems))
print("shim_cost ran alone and under the shim (off, bfc)")
