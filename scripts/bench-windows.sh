#!/usr/bin/env bash
# Once per window across a fleet: HOSTS host identities (default 3) fire the
# same crontab line, `jobrun run --once-per EVERY` (default 2s), TICKS times
# per window (default 4) for WINDOWS windows (default 20), against one
# store. Reports, per window, how many passes ran ok (always exactly 1) and
# which host ran it, then the totals by outcome.
#
# Usage: scripts/bench-windows.sh          (builds a release binary first)
#        JOBRUN_BIN=path/to/jobrun HOSTS=3 EVERY=2 TICKS=4 WINDOWS=20 scripts/bench-windows.sh
#        JOBRUN_DB=postgres://... scripts/bench-windows.sh   (default: a new SQLite store)
set -euo pipefail
cd "$(dirname "$0")/.."

HOSTS=${HOSTS:-3}
EVERY=${EVERY:-2}
TICKS=${TICKS:-4}
WINDOWS=${WINDOWS:-20}

if [ -z "${JOBRUN_BIN:-}" ]; then
  cargo build --release --quiet
  JOBRUN_BIN=$PWD/target/release/jobrun
fi
command -v jq >/dev/null || { echo "bench-windows: needs jq" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/jobrun-windows.XXXXXX")
export JOBRUN_DB=${JOBRUN_DB:-$WORK/store.db}
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

"$JOBRUN_BIN" run windows.warmup -- true
tick=$(awk -v e="$EVERY" -v t="$TICKS" 'BEGIN { printf "%.3f", e / t }')
for _ in $(seq $((WINDOWS * TICKS))); do
  for h in $(seq "$HOSTS"); do
    JOBRUN_HOST=web$h JOBRUN_BOOT_ID=web$h-boot \
      "$JOBRUN_BIN" run -q --once-per "${EVERY}s" windows -- sleep 0.1 2>>"$WORK/stderr" &
    PIDS+=($!)
  done
  sleep "$tick"
done
for pid in "${PIDS[@]}"; do wait "$pid" || true; done
PIDS=()

"$JOBRUN_BIN" history windows --json --limit 100000 | jq -r '
  [.passes[] | select(.window != null)] as $p
  | ($p | map(select(.outcome == "ok")) | group_by(.window)
     | map("window \(.[0].window): \(length) ok pass(es), on \(map(.host) | join(" "))") | .[]),
    "windows run: \($p | map(select(.outcome == "ok")) | group_by(.window) | length)",
    "windows run more than once: \($p | map(select(.outcome == "ok")) | group_by(.window) | map(select(length > 1)) | length)",
    "outcomes: \([.passes[].outcome] | group_by(.) | map("\(.[0]) \(length)") | join(", "))"'
if [ -s "$WORK/stderr" ]; then
  echo "stderr of the passes (first lines):"
  head -5 "$WORK/stderr"
fi
