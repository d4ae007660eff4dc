#!/usr/bin/env bash
# jobrun's speed and memory figures, side by side with flock(1).
#
#   scripts/bench.sh            # SQLite figures, then PostgreSQL figures
#   RUNS=1000 scripts/bench.sh  # more runs per command (default 300)
#   PG=0 scripts/bench.sh       # skip PostgreSQL
#
# Prints: median wall time of `jobrun run x -- true` against
# `flock -n LOCK true` and bare `true` (hyperfine), the wrapper's peak RSS
# (VmHWM) while its child runs next to flock's, the median on PostgreSQL over
# loopback, and how many concurrently renewing passes (3 s lease) one
# PostgreSQL server sustains with no renewal failure and no lost lease.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-300}
PG=${PG:-1}
work=$(mktemp -d /tmp/jobrun-bench.XXXXXX)
pgdir=""
cleanup() {
  if [ -n "$pgdir" ]; then scripts/pg-test-server stop "$pgdir" || echo "bench: could not stop the server in $pgdir" >&2; fi
  rm -rf "$work"
}
trap cleanup EXIT

command -v hyperfine >/dev/null || { echo "bench: hyperfine is missing (Debian package hyperfine)" >&2; exit 1; }
cargo build --release --quiet
bin=$PWD/target/release/jobrun

median_ms() { # hyperfine JSON, command index
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.3f" % (d["results"][int(sys.argv[2])]["median"]*1000))' "$1" "$2"
}

echo "== wall time, SQLite store ($RUNS runs each)"
export JOBRUN_DB=$work/bench.db
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$work/sqlite.json" \
  "$bin run x -- true" "flock -n $work/lock true" "true" >/dev/null 2>&1
j=$(median_ms "$work/sqlite.json" 0); f=$(median_ms "$work/sqlite.json" 1); t=$(median_ms "$work/sqlite.json" 2)
printf '%-34s %10s\n' "command" "median ms"
printf '%-34s %10s\n' "jobrun run x -- true" "$j" "flock -n LOCK true" "$f" "true" "$t"
python3 -c 'import sys; print("jobrun / flock: %.2fx" % (float(sys.argv[1])/float(sys.argv[2])))' "$j" "$f"

echo
echo "== peak RSS while the child runs (VmHWM)"
peak_kib() { # command... ; samples VmHWM of the wrapper just before its child ends
  "$@" &
  local pid=$! hwm=""
  for _ in $(seq 1 40); do
    sleep 0.05
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  done
  wait "$pid" || true
  echo "${hwm:-?}"
}
jr=$(peak_kib "$bin" run --lease 3s rss -- sleep 2.5)
fl=$(peak_kib flock "$work/lock" sleep 2.5)
printf '%-34s %10s\n' "process" "peak KiB"
printf '%-34s %10s\n' "jobrun run (lease 3s, renewing)" "$jr" "flock LOCK" "$fl"

if [ "$PG" = 0 ]; then exit 0; fi

echo
echo "== PostgreSQL over loopback"
eval "$(PG_MAX_CONNECTIONS=700 scripts/pg-test-server start)"
pgdir=$JOBRUN_TEST_PGDIR
psql -q "$JOBRUN_TEST_PG/postgres" -c "CREATE DATABASE bench" >/dev/null
export JOBRUN_DB=$JOBRUN_TEST_PG/bench
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$work/pg.json" "$bin run x -- true" >/dev/null 2>&1
p=$(median_ms "$work/pg.json" 0)
printf '%-34s %10s\n' "store" "median ms"
printf '%-34s %10s\n' "SQLite" "$j" "PostgreSQL (loopback)" "$p"

echo
echo "== concurrent renewing passes on one server (lease 3s, 20 s each, started 5 ms apart)"
sustain() { # N: start N passes of distinct jobs, each renewing for 20 s
  local n=$1 dir=$work/sustain-$1 i
  mkdir -p "$dir"
  for i in $(seq 1 "$n"); do
    ( "$bin" run --lease 3s "s$n.$i" -- sleep 20 2>"$dir/$i.err"; echo $? >"$dir/$i.rc" ) &
    sleep 0.005
  done
  wait
  local failed lost ran startfail
  failed=$(cat "$dir"/*.err | grep -c "renewal failed" || true)
  lost=$(cat "$dir"/*.err | grep -c "lease lost" || true)
  startfail=$(cat "$dir"/*.rc | grep -cvx 0 || true)
  ran=$(psql -qtA "$JOBRUN_DB" -c "SELECT count(*) FROM history WHERE job LIKE 's$n.%' AND outcome = 'ok'")
  printf '%-10s %8s %14s %16s %12s\n' "$n" "$ran" "$startfail" "$failed" "$lost"
  if [ "$startfail" -gt 0 ]; then
    echo "  first start failure: $(grep -h jobrun: "$dir"/*.err | head -1)"
  fi
}
printf '%-10s %8s %14s %16s %12s\n' "passes" "ran ok" "failed start" "renewal failures" "lost leases"
for n in ${SUSTAIN:-100 200 400 600}; do sustain "$n"; done
