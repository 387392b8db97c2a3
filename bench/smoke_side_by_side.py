"""Runs side_by_side_bench once at its smallest sizes, with the inference trace, and fails when a row
is missing, reports an error or failed allocations, or has figures out of range (driver calls, peak
bytes, utilisation in (0, 1]); when the allocators disagree on what the workload asked for; when the
arena's driver calls and utilisation on the trace differ from gpumem-replay's; or when a bad option is
not refused. Keeps the benchmark from breaking unnoticed; it times nothing.

usage: smoke_side_by_side.py SIDE_BY_SIDE_BENCH GPUMEM_REPLAY TRACES_DIR"""
import json
import lzma
import os
import subprocess
import sys
import tempfile

from bench_common import by_name, clean_environment, run_benchmark

bench, replay, traces = sys.argv[1:4]
ALLOCATORS = ("arena", "arena_vmm", "cub_default", "cub_pow2")
WORKLOADS = ("random_allocations_1000", "steady_state_1000", "trace_inference")
problems = []

with tempfile.TemporaryDirectory() as scratch:
    trace = os.path.join(scratch, "inference.csv")
    with lzma.open(os.path.join(traces, "inference.csv.xz"), "rb") as packed, open(trace, "wb") as plain:
        plain.write(packed.read())
    env = clean_environment()
    runs = by_name(run_benchmark([bench, "--random-ops=1000", "--steady-live=1000", "--steady-steps=4096",
                                  f"--trace=inference={trace}", "--benchmark_min_time=0.001"], env=env, timeout=300))
    references = {}
    for allocator, source in (("arena", "classic"), ("arena_vmm", "vmm")):
        replayed = subprocess.run([replay, trace, "--growth", "--limit", "8GiB", "--source", source, "--json"],
                                  env=env, capture_output=True, text=True, timeout=120, check=False)
        if replayed.returncode != 0:
            sys.exit(f"gpumem-replay exited with {replayed.returncode}: {replayed.stderr.strip()}")
        references[allocator] = json.loads(replayed.stdout)

rows = {}
for workload in WORKLOADS:
    for allocator in ALLOCATORS:
        name = f"{workload}/{allocator}"
        if name not in runs:
            problems.append(f"missing: {name}")
            continue
        run = rows[name] = runs[name][0]
        if run.get("error_occurred"):
            problems.append(f"{name}: {run.get('error_message')}")
            continue
        if run["failures"] != 0:
            problems.append(f"{name}: {run['failures']:.0f} failed allocations")
        if not run["driver_calls"] >= 1:
            problems.append(f"{name}: driver_calls {run['driver_calls']} (expected at least 1)")
        if not run["peak_held"] >= run["peak_requested"] > 0:
            problems.append(f"{name}: peak_held {run['peak_held']} below peak_requested {run['peak_requested']}")
        if not 0.0 < run["utilisation"] <= 1.0:
            problems.append(f"{name}: utilisation {run['utilisation']} outside (0, 1]")
        if not run["ops_per_pass"] > 0 or not run["cpu_time"] > 0:
            problems.append(f"{name}: nothing timed (ops_per_pass {run['ops_per_pass']}, cpu_time {run['cpu_time']})")
    asked = {rows[f"{workload}/{a}"]["peak_requested"] for a in ALLOCATORS if f"{workload}/{a}" in rows}
    if len(asked) > 1:
        problems.append(f"{workload}: the allocators saw different requests (peak_requested {sorted(asked)})")

for allocator, reference in references.items():
    arena = rows.get(f"trace_inference/{allocator}")
    if arena is None:
        continue
    for key, ours in (("driver_calls", "driver_calls"), ("peak_requested", "peak_requested"),
                      ("peak_reserved", "peak_held")):
        if arena[ours] != reference[key]:
            problems.append(f"trace_inference/{allocator}: {ours} {arena[ours]:.0f}, "
                            f"gpumem-replay's {key} {reference[key]}")

bad = subprocess.run([bench, "--random-ops=0"], capture_output=True, text=True, timeout=60, check=False)
if bad.returncode != 2 or "--random-ops" not in bad.stderr or len(bad.stderr.strip().splitlines()) != 1:
    problems.append(f"--random-ops=0: expected exit 2 and one line naming the option, got {bad.returncode}: {bad.stderr!r}")

if problems:
    sys.exit("\n".join(problems))
print(f"{len(rows)} side-by-side rows, figures in range, the arena's trace figures match gpumem-replay's")
