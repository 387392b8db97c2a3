#!/usr/bin/env bash
# Instructions and cache misses per free + allocate pair of arena_bench's steady_state, at 1k, 10k
# and 100k live blocks, counted by cachegrind (a simulated cache: the same counts on any machine,
# however busy, and where perf has no hardware counters).
#
#   bench/cache_misses.sh BUILD_DIR [LAST_LEVEL_BYTES]
#
# BUILD_DIR holds bench/arena_bench (a release build: `meson setup BUILD_DIR --buildtype=release`).
# LAST_LEVEL_BYTES, 2097152 by default, is the simulated last-level cache (16-way, 64-byte lines):
# set it to the largest cache of the machine whose timings you compare with. Each size is run at
# 2^18 and 2^19 pairs; the difference is 2^18 pairs with the setup cancelled out.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: bench/cache_misses.sh BUILD_DIR [LAST_LEVEL_BYTES]" >&2
  exit 2
fi
bench=$1/bench/arena_bench
last_level=${2:-2097152}
if [ ! -x "$bench" ]; then
  echo "cache_misses: BUILD_DIR: expected a build with bench/arena_bench, found no $bench" >&2
  exit 2
fi
if ! [[ $last_level =~ ^[0-9]+$ ]] || [ $((last_level % (16 * 64))) -ne 0 ] || [ "$last_level" -eq 0 ]; then
  echo "cache_misses: LAST_LEVEL_BYTES: expected a positive multiple of 1024, got '$last_level'" >&2
  exit 2
fi
if ! command -v valgrind >/dev/null; then
  echo "cache_misses: valgrind is not installed (Debian package valgrind)" >&2
  exit 2
fi

pairs=$((1 << 18))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Prints "instructions D1-misses last-level-misses" (data reads and writes) for one run.
counts() {
  local filter=$1
  valgrind --tool=cachegrind --cache-sim=yes --LL="$last_level,16,64" \
    --cachegrind-out-file="$work/out" "$bench" --benchmark_filter="$filter" >/dev/null 2>"$work/log"
  awk '/ I +refs:/ {gsub(",", "", $4); i = $4}
       / D1 +misses:/ {gsub(",", "", $4); d = $4}
       / LLd +misses:/ {gsub(",", "", $4); l = $4}
       END {if (i == "" || d == "" || l == "") exit 1; print i, d, l}' "$work/log"
}

echo "steady_state, per free + allocate pair (cachegrind, last level $last_level bytes)"
printf '%-12s %14s %12s %18s\n' "live blocks" "instructions" "L1d misses" "last-level misses"
for live in 1000 10000 100000; do
  read -r i1 d1 l1 < <(counts "^steady_state_counted_1x<ArenaUnderTest>/$live/")
  read -r i2 d2 l2 < <(counts "^steady_state_counted_2x<ArenaUnderTest>/$live/")
  awk -v live="$live" -v n="$pairs" -v i="$((i2 - i1))" -v d="$((d2 - d1))" -v l="$((l2 - l1))" \
    'function per_pair(x) {x /= n; return (x < 0.005 && x > -0.005) ? 0 : x}
     BEGIN {printf "%-12s %14.1f %12.2f %18.2f\n", live, per_pair(i), per_pair(d), per_pair(l)}'
done
