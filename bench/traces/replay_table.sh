#!/bin/sh
# Replays every trace of bench/traces/ through gpumem-replay in every mode (source vmm/classic,
# growth/preallocation, split rule tight/xla) and prints the Markdown table of README.md there:
# driver calls (per 1,000 operations) and their modelled time at the published latency per call.
# Usage: bench/traces/replay_table.sh [GPUMEM_REPLAY]   (default: build/tools/gpumem-replay)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
replay=${1:-build/tools/gpumem-replay}
[ -x "$replay" ] || { echo "replay_table.sh: expected the built gpumem-replay, got \"$replay\"" >&2; exit 2; }
echo "| trace | source | mode | split | peak reserved (MiB) | utilisation | driver calls (/1k ops) | driver ms (modelled) | remaps / unmaps | min limit (MiB) | min limit / live peak | live granules / live peak |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for trace in transformer cnn inference serving xla_training; do
  for source in vmm classic; do
    for mode in growth preallocate; do
      for split in tight xla; do
        extra=
        [ "$mode" = preallocate ] && extra=--min-limit
        # shellcheck disable=SC2086 # $extra is one option or nothing
        xz -dc "$here/$trace.csv.xz" | GPUMEM_SPLIT_RULE=$split "$replay" - --source "$source" "--$mode" \
          --limit 8GiB $extra --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
mib = lambda b: f'{b / 2**20:.0f}'
limit = d.get('min_limit')
ratio = f'{limit / d[\"peak_requested\"]:.3f}' if limit else '-'
reserved = mib(d['peak_reserved']) if '$mode' == 'growth' else '-'
utilisation = f'{d[\"utilisation\"]:.3f}' if '$mode' == 'growth' else '-'
granules = f'{d[\"peak_live_granules\"] / d[\"peak_requested\"]:.3f}'
remaps = f'{d[\"region_maps\"]} / {d[\"region_unmaps\"]}' if '$source' == 'vmm' else '-'
calls = f'{d[\"driver_calls\"]} ({1000 * d[\"driver_calls\"] / d[\"operations\"]:.1f})'
print(f'| $trace | $source | $mode | $split | {reserved} | {utilisation} | {calls} | {d[\"driver_ms\"]:.1f} | {remaps} | '
      f'{mib(limit) if limit else \"-\"} | {ratio} | {granules} |')"
      done
    done
  done
done
