#!/usr/bin/env python3
"""What preloading libgpumem.so costs a process that never uses CUDA: runs a C program (/bin/true)
and a C++ one (gpumem-replay --help) many times, interleaved, with and without the shim in
LD_PRELOAD, and prints the median wall time of each as a Markdown table.

    python3 bench/startup.py [--build build] [--runs 400]

scripts/bench imports it and calls measure().
"""
import argparse
import os
import statistics
import subprocess
import time


def median_ms(argv, env, runs):
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def measure(build, runs):
    """Medians of `runs` runs of each program without and with the shim of build dir `build`, in four
    interleaved rounds (so drift hits both alike): a list of {program, without_ms, with_ms, added_ms}."""
    shim = os.path.abspath(os.path.join(build, "shim", "libgpumem.so"))
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    preloaded = dict(plain, LD_PRELOAD=shim)
    programs = {"C program (/bin/true)": ["/bin/true"],
                "C++ program (gpumem-replay --help)": [os.path.join(build, "tools", "gpumem-replay"), "--help"]}
    rows = []
    for name, argv in programs.items():
        without, with_shim = [], []
        for _ in range(4):
            without.append(median_ms(argv, plain, runs // 4))
            with_shim.append(median_ms(argv, preloaded, runs // 4))
        a, b = statistics.median(without), statistics.median(with_shim)
        rows.append({"program": name, "without_ms": a, "with_ms": b, "added_ms": b - a})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--runs", type=int, default=400)
    args = parser.parse_args()
    print(f"{args.runs} runs each, medians\n")
    print("| program | without the shim (ms) | with it (ms) | added (ms) |")
    print("|---|---|---|---|")
    for row in measure(args.build, args.runs):
        print(f"| {row['program']} | {row['without_ms']:.3f} | {row['with_ms']:.3f} | {row['added_ms']:+.3f} |")


if __name__ == "__main__":
    main()
