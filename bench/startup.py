#!/usr/bin/env python3
"""What preloading libgpumem.so costs a process that never uses CUDA: runs a C program (/bin/true)
and a C++ one (gpumem-replay --help) many times, interleaved, with and without the shim in
LD_PRELOAD, and prints the median wall time of each as a Markdown table.

    python3 bench/startup.py [--build build] [--runs 400]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--runs", type=int, default=400)
    args = parser.parse_args()
    shim = os.path.abspath(os.path.join(args.build, "shim", "libgpumem.so"))
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    preloaded = dict(plain, LD_PRELOAD=shim)
    programs = {"C program (/bin/true)": ["/bin/true"],
                "C++ program (gpumem-replay --help)": [os.path.join(args.build, "tools", "gpumem-replay"), "--help"]}
    print(f"{args.runs} runs each, medians\n")
    print("| program | without the shim (ms) | with it (ms) | added (ms) |")
    print("|---|---|---|---|")
    for name, argv in programs.items():
        without, with_shim = [], []
        for _ in range(4):  # interleaved rounds, so drift hits both alike
            without.append(median_ms(argv, plain, args.runs // 4))
            with_shim.append(median_ms(argv, preloaded, args.runs // 4))
        a, b = statistics.median(without), statistics.median(with_shim)
        print(f"| {name} | {a:.3f} | {b:.3f} | {b - a:+.3f} |")


if __name__ == "__main__":
    main()
