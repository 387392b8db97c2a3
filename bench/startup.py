#!/usr/bin/env python3
"""What preloading libgpumem.so costs a process that never uses CUDA: runs a C program (/bin/true)
and a C++ one (gpumem-replay --help) many times, interleaved, without anything preloaded, with an
empty library preloaded (bench/empty_preload.c: what preloading any library costs) and with the
shim, and prints the median wall time of each as a Markdown table. "added" is the shim's time less
the empty library's.

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
    """Medians of `runs` runs of each program without anything preloaded, with the empty library and with
    the shim of build dir `build`, in four interleaved rounds (so drift hits all alike): a list of
    {program, without_ms, empty_ms, with_ms, added_ms}, added_ms being with_ms - empty_ms."""
    shim = os.path.abspath(os.path.join(build, "shim", "libgpumem.so"))
    empty = os.path.abspath(os.path.join(build, "bench", "libempty_preload.so"))
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    configurations = {"without": plain, "empty": dict(plain, LD_PRELOAD=empty), "with": dict(plain, LD_PRELOAD=shim)}
    programs = {"C program (/bin/true)": ["/bin/true"],
                "C++ program (gpumem-replay --help)": [os.path.join(build, "tools", "gpumem-replay"), "--help"]}
    rows = []
    for name, argv in programs.items():
        medians = {key: [] for key in configurations}
        for _ in range(4):
            for key, env in configurations.items():
                medians[key].append(median_ms(argv, env, runs // 4))
        without, empty_ms, with_ms = (statistics.median(medians[key]) for key in ("without", "empty", "with"))
        rows.append({"program": name, "without_ms": without, "empty_ms": empty_ms, "with_ms": with_ms,
                     "added_ms": with_ms - empty_ms})
    return rows


TABLE_HEAD = ("| program | nothing preloaded (ms) | empty library preloaded (ms) | shim preloaded (ms) | "
              "added by the shim (ms) |\n|---|---|---|---|---|")


def table_row(row):
    return (f"| {row['program']} | {row['without_ms']:.3f} | {row['empty_ms']:.3f} | {row['with_ms']:.3f} | "
            f"{row['added_ms']:+.3f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--runs", type=int, default=400)
    args = parser.parse_args()
    print(f"{args.runs} runs each, medians\n")
    print(TABLE_HEAD)
    for row in measure(args.build, args.runs):
        print(table_row(row))


if __name__ == "__main__":
    main()
