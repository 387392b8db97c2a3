#!/bin/sh
# Records the PyTorch CPU traces of bench/traces/ (README.md there): builds alloc_logger.so, runs each
# workload of workloads.py under it and keeps the trace xz-compressed.
# Needs gcc, xz and Debian's python3-torch (/usr/bin/python3). Usage: bench/traces/record.sh [WORKLOAD...]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -Wall -Wextra -shared -fPIC -o "$work/alloc_logger.so" "$here/alloc_logger.c" -ldl -lpthread
[ $# -gt 0 ] || set -- transformer cnn inference serving
for workload in "$@"; do
  ALLOC_LOG_FILE="$work/$workload.csv" LD_PRELOAD="$work/alloc_logger.so" /usr/bin/python3 "$here/workloads.py" "$workload"
  xz -9 -c "$work/$workload.csv" > "$here/$workload.csv.xz"
  echo "$workload: $(($(wc -l < "$work/$workload.csv") - 1)) rows -> $here/$workload.csv.xz"
done
