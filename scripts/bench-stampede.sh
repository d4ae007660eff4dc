#!/usr/bin/env bash
# Queue drain figure: N passes (default 200) of one job started at once with
# --wait 60s --slots SLOTS (default 3), each running a CMD_S-second command
# (default 0.1). Reports the wall time from the first start until the last
# pass has exited, against the ideal N*CMD_S/SLOTS, and how many passes ran.
#
# Usage: scripts/bench-stampede.sh          (builds a release binary first)
#        JOBRUN_BIN=path/to/jobrun N=200 SLOTS=3 CMD_S=0.1 scripts/bench-stampede.sh
#        JOBRUN_DB=postgres://... scripts/bench-stampede.sh   (default: a new SQLite store)
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-200}
SLOTS=${SLOTS:-3}
CMD_S=${CMD_S:-0.1}

if [ -z "${JOBRUN_BIN:-}" ]; then
  cargo build --release --quiet
  JOBRUN_BIN=$PWD/target/release/jobrun
fi
command -v jq >/dev/null || { echo "bench-stampede: needs jq" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/jobrun-stampede.XXXXXX")
export JOBRUN_DB=${JOBRUN_DB:-$WORK/store.db}
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

"$JOBRUN_BIN" run stampede.warmup -- true
start=$(date +%s%N)
for _ in $(seq "$N"); do
  "$JOBRUN_BIN" run --wait 60s --slots "$SLOTS" stampede -- sleep "$CMD_S" 2>>"$WORK/stderr" &
  PIDS+=($!)
done
failed=0
for pid in "${PIDS[@]}"; do wait "$pid" || failed=$((failed + 1)); done
end=$(date +%s%N)
PIDS=()

ran=$("$JOBRUN_BIN" history stampede --json --limit 100000 |
  jq '[.passes[] | select(.outcome == "ok")] | length')
awk -v n="$N" -v s="$SLOTS" -v c="$CMD_S" -v t0="$start" -v t1="$end" \
  -v ran="$ran" -v failed="$failed" 'BEGIN {
  wall = (t1 - t0) / 1e9; ideal = n * c / s;
  printf "passes %d, slots %d, command %.2fs: wall %.1fs, ideal %.1fs, ratio %.2fx; ran ok %d, exit non-zero %d\n",
    n, s, c, wall, ideal, wall / ideal, ran, failed }'
if [ -s "$WORK/stderr" ]; then
  echo "stderr of the passes (first lines):"
  head -5 "$WORK/stderr"
fi
