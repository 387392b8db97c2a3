#!/usr/bin/env bash
# run_fuzzer.sh FUZZER CORPUS [DICTIONARY]: runs FUZZER for GPUMEM_FUZZ_SECONDS (10 when unset) over a
# copy of the seed corpus CORPUS (the committed corpus never grows), with DICTIONARY's tokens if
# given, and fails when it finds a crash, a leak or a timeout, or is still running 120 s after the
# time asked for (start-up and the slowest input take far less). What it found is left in the
# working folder, named in the output.
set -euo pipefail
fuzzer=$(readlink -f -- "$1") corpus=$(readlink -f -- "$2")
seconds=${GPUMEM_FUZZ_SECONDS:-10}
options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
[ $# -ge 3 ] && options+=(-dict="$(readlink -f -- "$3")")
# An UndefinedBehaviorSanitizer report fails the run too (by default it only prints and goes on).
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpumem-fuzz.XXXXXX")
cp -R "$corpus/." "$work/corpus"
cd "$work"
if timeout $((seconds + 120)) "$fuzzer" "${options[@]}" corpus; then
  rm -rf "$work"
else
  echo "run_fuzzer.sh: $(basename "$fuzzer") failed; its inputs are in $work" >&2
  exit 1
fi
