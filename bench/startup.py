#!/usr/bin/env python3
"""What preloading libgpumem.so costs a process that never uses CUDA: runs a C program (/bin/true)
and a C++ one (gpumem-replay --help) many times, without anything preloaded, with an empty library
preloaded (bench/empty_preload.c: what preloading any library costs) and with the shim, the three
in turn, and prints the median wall time of each as a Markdown table. "added" is the median of the
differences between each shim run and the empty-library run beside it.

    python3 bench/startup.py [--build build] [--runs 400]

scripts/bench imports it and calls measure().
"""
import argparse
import os
import statistics
import subprocess
import time


def run_ms(argv, env):
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return (time.perf_counter() - start) * 1e3


def measure(build, runs):
    """Each program run `runs` times in each configuration (nothing preloaded, the empty library, the
    shim of build dir `build`), the three in turn, so that the machine's drift hits them alike: a
    list of {program, without_ms, empty_ms, with_ms, added_ms}, the first three medians of their
    runs, added_ms the median of the differences between each turn's shim run and its empty-library
    run (pairs taken moments apart: far less noise than a difference of medians)."""
    shim = os.path.abspath(os.path.join(build, "shim", "libgpumem.so"))
    empty = os.path.abspath(os.path.join(build, "bench", "libempty_preload.so"))
    for library in (shim, empty):
        if not os.path.isfile(library):  # the loader would only warn, and the figures would be of nothing
            raise SystemExit(f"bench/startup.py: --build {build}: no {library}; build it first")
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    configurations = {"without": plain, "empty": dict(plain, LD_PRELOAD=empty), "with": dict(plain, LD_PRELOAD=shim)}
    programs = {"C program (/bin/true)": ["/bin/true"],
                "C++ program (gpumem-replay --help)": [os.path.join(build, "tools", "gpumem-replay"), "--help"]}
    rows = []
    for name, argv in programs.items():
        times = {key: [] for key in configurations}
        for turn in range(runs):
            # The order changes from turn to turn, so that no configuration always runs first.
            keys = list(configurations)[turn % 3:] + list(configurations)[:turn % 3]
            for key in keys:
                times[key].append(run_ms(argv, configurations[key]))
        added = statistics.median(w - e for w, e in zip(times["with"], times["empty"]))
        without, empty_ms, with_ms = (statistics.median(times[key]) for key in ("without", "empty", "with"))
        rows.append({"program": name, "without_ms": without, "empty_ms": empty_ms, "with_ms": with_ms,
                     "added_ms": added})
    return rows


TABLE_HEAD = ("| program | nothing preloaded (ms) | empty library preloaded (ms) | shim preloaded (ms) | "
              "added by the shim (ms, paired) |\n|---|---|---|---|---|")


def table_row(row):
    return (f"| {row['program']} | {row['without_ms']:.3f} | {row['empty_ms']:.3f} | {row['with_ms']:.3f} | "
            f"{row['added_ms']:+.3f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--runs", type=int, default=400)
    args = parser.parse_args()
    print(f"{args.runs} runs each, medians; added: the median of the differences between runs taken in turn\n")
    print(TABLE_HEAD)
    for row in measure(args.build, args.runs):
        print(table_row(row))


if __name__ == "__main__":
    main()
