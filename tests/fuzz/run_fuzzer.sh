#!/usr/bin/env bash
# run_fuzzer.sh FUZZER CORPUS: runs FUZZER for GPUMEM_FUZZ_SECONDS (10 when unset) over a copy of
# the seed corpus CORPUS (the committed corpus never grows), and fails when it finds a crash, a leak
# or a timeout. What it found is left in the working folder, named in the output.
set -euo pipefail
fuzzer=$(readlink -f -- "$1") corpus=$(readlink -f -- "$2")
seconds=${GPUMEM_FUZZ_SECONDS:-10}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpumem-fuzz.XXXXXX")
cp -R "$corpus/." "$work/corpus"
cd "$work"
if "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 corpus; then
  rm -rf "$work"
else
  echo "run_fuzzer.sh: $(basename "$fuzzer") failed; its inputs are in $work" >&2
  exit 1
fi
