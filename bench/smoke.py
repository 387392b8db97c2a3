"""Runs arena_bench once at its smallest sizes and fails if any benchmark is missing, reports an
error, or counted failed allocations. Keeps the benchmark from breaking unnoticed; it times nothing."""
import json
import subprocess
import sys

EXPECTED = {"random_allocations<ArenaUnderTest>/1000", "random_allocations<PowerOfTwoCache>/1000",
            "steady_state<ArenaUnderTest>/1000", "steady_state<PowerOfTwoCache>/1000", "dependent_loads/256"}

result = subprocess.run([sys.argv[1], "--benchmark_filter=/1000$|^dependent_loads/256$", "--benchmark_min_time=0.001",
                         "--benchmark_format=json"], capture_output=True, text=True, timeout=300)
if result.returncode != 0:
    sys.exit(f"arena_bench exited with {result.returncode}: {result.stderr}")
runs = json.loads(result.stdout)["benchmarks"]
names = {run["name"].split("/min_time")[0] for run in runs}
problems = [f"missing: {name}" for name in sorted(EXPECTED - names)]
for run in runs:
    if run.get("error_occurred"):
        problems.append(f"{run['name']}: {run.get('error_message')}")
    elif run.get("failures", 0) != 0:
        problems.append(f"{run['name']}: {run['failures']} failed allocations")
    elif not run.get("real_time", 0) > 0:
        problems.append(f"{run['name']}: no time measured")
if problems:
    sys.exit("\n".join(problems))
print(f"{len(runs)} benchmark runs completed without failures")
