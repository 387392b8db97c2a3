#!/usr/bin/env python3
"""What GPUMEM_TRACE costs: runs examples/alloc_churn over the simulated platform under the shim,
with and without the trace, interleaved, and prints the medians of the program's own figures (its
time inside cudaMalloc/cudaFree, and its whole run) as a Markdown table.

    python3 bench/trace_overhead.py [--build build] [--runs 15] [--scale 4]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

FIGURES = {
    "allocation time (ms)": re.compile(r"allocation time: ([0-9.]+) ms"),
    "total time (ms)": re.compile(r"total time: ([0-9.]+) ms"),
}


def run_once(build, scale, trace_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMEM_", "XLA_", "TF_", "CUDASIM_"))}
    env["LD_LIBRARY_PATH"] = os.path.join(build, "tests", "cudasim")
    env["LD_PRELOAD"] = os.path.join(build, "shim", "libgpumem.so")
    if trace_path:
        env["GPUMEM_TRACE"] = trace_path
    out = subprocess.run([os.path.join(build, "examples", "alloc_churn"), str(scale)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return {name: float(pattern.search(out).group(1)) for name, pattern in FIGURES.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--scale", type=int, default=4)
    args = parser.parse_args()
    samples = {"off": [], "on": []}
    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.csv")
        for _ in range(args.runs):
            samples["off"].append(run_once(args.build, args.scale, None))
            samples["on"].append(run_once(args.build, args.scale, trace))
        with open(trace) as f:
            rows = sum(1 for _ in f) - 1
    print(f"alloc_churn {args.scale}, bfc mode over the simulator, {args.runs} interleaved runs each, "
          f"{rows} trace rows per run; medians")
    print()
    print("| figure | no trace | GPUMEM_TRACE | added |")
    print("|---|---|---|---|")
    for name in FIGURES:
        off = statistics.median(s[name] for s in samples["off"])
        on = statistics.median(s[name] for s in samples["on"])
        print(f"| {name} | {off:.2f} | {on:.2f} | {100.0 * (on - off) / off:+.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
