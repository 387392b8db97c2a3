#!/usr/bin/env bash
# The frameworks' on-demand path through gpumem against their own allocators (docs/frameworks.md):
# each framework-shaped test program replays the traces of bench/traces twice over the simulator,
# once with its own allocator in the process (JAX's and TensorFlow's BFC, PyTorch's caching
# allocator, CuPy's pool; no shim) and once switched to allocate on demand under libgpumem.so (each
# buffer a driver call that gpumem's arena serves). Prints, per framework and trace, the best of
# ROUNDS runs of each (nanoseconds per allocation or free) and their ratio.
#
#   bench/frameworks.sh [BUILD_DIR] [ROUNDS]     (default: build, 5)
set -euo pipefail

build=${1:-build}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
programs=$build/tests/integration/programs
shim=$(cd "$build/shim" && pwd)/libgpumem.so
for needed in "$programs/framework_xla" "$shim"; do
  [ -e "$needed" ] || { echo "bench/frameworks.sh: $needed is missing: build BUILD_DIR ($build) first" >&2; exit 2; }
done
case $rounds in '' | *[!0-9]* | 0) echo "bench/frameworks.sh: ROUNDS must be a whole number above 0, not \"$rounds\"" >&2; exit 2 ;; esac

traces=$(mktemp -d)
trap 'rm -rf "$traces"' EXIT
export LD_LIBRARY_PATH=$(cd "$build/cudasim" && pwd) CUDASIM_DEVICE_MEMORY=16GiB

# The best ns/op of `rounds` runs of a program replaying a trace; extra arguments are env settings.
best_ns() {
  local program=$1 trace=$2 best="" value
  shift 2
  for _ in $(seq "$rounds"); do
    value=$(env "$@" "$programs/$program" "trace:$traces/$trace.csv" 2>/dev/null | sed -n 's/^trace_ns_per_op=//p')
    [ -n "$value" ] || { echo "bench/frameworks.sh: $program did not replay $trace" >&2; exit 1; }
    best=$(awk -v a="$value" -v b="$best" 'BEGIN { print (b == "" || a < b) ? a : b }')
  done
  echo "$best"
}

echo "| framework | trace | own allocator (ns/op) | through gpumem (ns/op) | ratio |"
echo "|---|---|---|---|---|"
for trace in xla_training transformer cnn inference; do
  xz -dc "$here/traces/$trace.csv.xz" > "$traces/$trace.csv"
  for framework in xla tf torch cupy; do
    own=$(best_ns "framework_$framework" "$trace" GPUMEM_FRAMEWORKS=off)
    shimmed=$(best_ns "framework_$framework" "$trace" LD_PRELOAD="$shim")
    awk -v f="$framework" -v t="$trace" -v a="$own" -v b="$shimmed" \
      'BEGIN { printf "| %s | %s | %.1f | %.1f | %.2f |\n", f, t, a, b, b / a }'
  done
done
