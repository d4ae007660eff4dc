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
#
# Fleet figures (FLEET=0 skips them; FLEET_N, FLEET_HOSTS, FLEET_SECS size them):
#   - per-pass cost on PostgreSQL plain and with TLS (sslmode=verify-full),
#     side by side with SQLite in the same run;
#   - connections: FLEET_N (2000) concurrent renewing passes under
#     FLEET_HOSTS (50) host identities, a 60 s lease, for FLEET_SECS (120)
#     seconds, against a server with max_connections = 50: lost leases,
#     failed starts, the wrappers' total memory, peak server connections;
#   - the same through PgBouncer (transaction mode, pool of 20), 3 s lease;
#   - hand-off: release to the child start of a waiter under another host
#     identity (HANDOFFS rounds, 20), median and max.
# Everything runs on 127.0.0.1 and stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-300}
PG=${PG:-1}
work=$(mktemp -d /tmp/jobrun-bench.XXXXXX)
pgdir=""
fleetdirs=()
cleanup() {
  if [ -n "$pgdir" ]; then scripts/pg-test-server stop "$pgdir" || echo "bench: could not stop the server in $pgdir" >&2; fi
  for d in "${fleetdirs[@]}"; do scripts/pg-test-server stop "$d" || echo "bench: could not stop the server in $d" >&2; done
  rm -rf "$work"
}
trap cleanup EXIT

command -v hyperfine >/dev/null || { echo "bench: hyperfine is missing (Debian package hyperfine)" >&2; exit 1; }
cargo build --release --quiet
bin=$PWD/target/release/jobrun

median_ms() { # hyperfine JSON, command index
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.3f" % (d["results"][int(sys.argv[2])]["median"]*1000))' "$1" "$2"
}

# FLEET_ONLY=1: only the connection and hand-off figures.
if [ "${FLEET_ONLY:-0}" != 1 ]; then
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

# start_pass DIR I COMMAND...: run one pass in the background, its stderr
# in DIR/I.err and its exit code in DIR/I.rc. The code is written in both
# branches of an `if`: under `set -e` a failing command on its own would end
# the subshell before its code was written, and the failure go uncounted.
start_pass() {
  local dir=$1 i=$2
  shift 2
  ( if "$@" 2>"$dir/$i.err"; then echo 0; else echo $?; fi >"$dir/$i.rc" ) &
}

# tally DIR: failed starts (a non-zero or missing exit code), renewal
# failures and lost leases of the passes started in DIR.
tally() {
  local dir=$1 passes codes
  passes=$(find "$dir" -name '*.err' | wc -l)
  codes=$(cat "$dir"/*.rc 2>/dev/null | grep -cx 0 || true)
  echo "$((passes - codes))" \
    "$(cat "$dir"/*.err | grep -c "renewal failed" || true)" \
    "$(cat "$dir"/*.err | grep -c "lease lost" || true)"
}

echo
echo "== concurrent renewing passes on one server (lease 3s, 20 s each, started 5 ms apart)"
sustain() { # N: start N passes of distinct jobs, each renewing for 20 s
  local n=$1 dir=$work/sustain-$1 i
  mkdir -p "$dir"
  for i in $(seq 1 "$n"); do
    start_pass "$dir" "$i" "$bin" run --lease 3s "s$n.$i" -- sleep 20
    sleep 0.005
  done
  wait
  local failed lost ran startfail
  read -r startfail failed lost < <(tally "$dir")
  ran=$(psql -qtA "$JOBRUN_DB" -c "SELECT count(*) FROM history WHERE job LIKE 's$n.%' AND outcome = 'ok'")
  printf '%-10s %8s %14s %16s %12s\n' "$n" "$ran" "$startfail" "$failed" "$lost"
  if [ "$startfail" -gt 0 ]; then
    echo "  first start failure: $(grep -h jobrun: "$dir"/*.err | head -1)"
  fi
}
printf '%-10s %8s %14s %16s %12s\n' "passes" "ran ok" "failed start" "renewal failures" "lost leases"
for n in ${SUSTAIN:-100 200 400 600}; do sustain "$n"; done

fi

if [ "${FLEET:-1}" = 0 ]; then exit 0; fi

# A server of its own for the fleet figures: `start_server [args]` sets
# server_dir to its directory.
server_dir=""
start_server() {
  local out
  out=$(scripts/pg-test-server start "$@")
  eval "$out"
  fleetdirs+=("$JOBRUN_TEST_PGDIR")
  server_dir=$JOBRUN_TEST_PGDIR
}

if [ "${FLEET_ONLY:-0}" != 1 ]; then
echo
echo "== per-pass cost: SQLite, PostgreSQL plain and with TLS, one run ($RUNS runs each)"
start_server --tls
tlsdir=$server_dir
tlsport=$(cat "$tlsdir/port")
psql -q "postgres://postgres@127.0.0.1:$tlsport/postgres" -c "CREATE DATABASE bench" >/dev/null
plain="postgres://postgres@127.0.0.1:$tlsport/bench?sslmode=disable"
tls="postgres://postgres@localhost:$tlsport/bench?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert=$tlsdir/tls/ca.crt"
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$work/cost.json" \
  -n sqlite "env JOBRUN_DB=$work/cost.db $bin run x -- true" \
  -n plain "env JOBRUN_DB=$plain $bin run x -- true" \
  -n tls "env JOBRUN_DB=$tls $bin run x -- true" >/dev/null 2>&1
cs=$(median_ms "$work/cost.json" 0); cp=$(median_ms "$work/cost.json" 1); ct=$(median_ms "$work/cost.json" 2)
printf '%-34s %10s %8s\n' "store" "median ms" "x SQLite"
for row in "SQLite:$cs" "PostgreSQL, loopback:$cp" "PostgreSQL, loopback, TLS:$ct"; do
  python3 -c 'import sys; n,v=sys.argv[1].rsplit(":",1); print("%-34s %10s %7.2fx" % (n, v, float(v)/float(sys.argv[2])))' "$row" "$cs"
done
fi

# fleet LABEL URL LEASE: FLEET_N passes of distinct jobs under FLEET_HOSTS
# host identities, each running FLEET_SECS seconds; prints one row.
fleet() {
  local label=$1 url=$2 lease=$3 dir=$work/fleet-$1 i host n=${FLEET_N:-2000} secs=${FLEET_SECS:-120}
  local hosts=${FLEET_HOSTS:-50} admin=$4
  mkdir -p "$dir"
  local t0=$SECONDS
  for i in $(seq 1 "$n"); do
    host=host$((i % hosts))
    start_pass "$dir" "$i" env JOBRUN_DB="$url" JOBRUN_HOST="$host" JOBRUN_BOOT_ID="boot-$host" \
      "$bin" run --lease "$lease" "f.$label.$i" -- sleep "$secs"
    sleep 0.01
  done
  local started=$((SECONDS - t0))
  # Sample while all run: the wrappers' memory, the server's connections.
  local mem=0 pss=0 peak=0 c m p pids
  while [ $((SECONDS - t0)) -lt $((secs - 5)) ]; do
    m=$(ps -eo rss=,args= | awk -v b="$bin run" 'index($0, b) {s += $1} END {print s + 0}')
    [ "$m" -gt "$mem" ] && mem=$m
    # Proportional set size: shared pages (the binary, libc) counted once
    # across the wrappers, which the RSS sum counts in each.
    pids=$(ps -eo pid=,args= | awk -v b="$bin run" 'index($0, b) {printf "/proc/%s/smaps_rollup ", $1}')
    # A wrapper may end between the two reads: its file is gone, not an error.
    # shellcheck disable=SC2086 # one path per wrapper
    p=$({ [ -z "$pids" ] || cat $pids 2>/dev/null || true; } | awk '/^Pss:/ {s += $2} END {print s + 0}')
    [ "$p" -gt "$pss" ] && pss=$p
    c=$(psql -qtA "$admin" -c "SELECT count(*) FROM pg_stat_activity WHERE datname = 'bench'" 2>/dev/null || echo 0)
    [ "$c" -gt "$peak" ] && peak=$c
    sleep 5
  done
  wait
  local lost startfail renewfail ok
  read -r startfail renewfail lost < <(tally "$dir")
  ok=$(psql -qtA "$admin" -c "SELECT count(*) FROM history WHERE job LIKE 'f.$label.%' AND outcome = 'ok'")
  printf '%-12s %6s %6s %6s %8s %8s %8s %10s %10s %10s\n' "$label" "$n" "$lease" "$ok" "$startfail" \
    "$lost" "$renewfail" "$((mem / 1024))" "$((pss / 1024))" "$peak"
  echo "  (all $n started within ${started}s; each ran ${secs}s)"
  if [ "$startfail" -gt 0 ] || [ "$lost" -gt 0 ]; then
    echo "  first problem: $(cat "$dir"/*.err | grep -m1 -h "jobrun:" || true)"
    echo "  why leases were lost:"
    cat "$dir"/*.err | grep -h "lease lost" | sed 's/.*lease lost: //; s/;.*//; s/ (.*//' | sort | uniq -c | head -5 || true
    echo "  why releases failed: $(cat "$dir"/*.err | grep -c "release failed" || true)"
  fi
}

echo
echo "== connections: ${FLEET_N:-2000} concurrent renewing passes, ${FLEET_HOSTS:-50} host identities, ${FLEET_SECS:-120} s each"
PG_MAX_CONNECTIONS=50 start_server
fleetdir=$server_dir
fport=$(cat "$fleetdir/port")
fadmin="postgres://postgres@127.0.0.1:$fport/bench"
psql -q "postgres://postgres@127.0.0.1:$fport/postgres" -c "CREATE DATABASE bench" >/dev/null
echo "server max_connections: $(psql -qtA "$fadmin" -c 'SHOW max_connections')"
printf '%-12s %6s %6s %6s %8s %8s %8s %10s %10s %10s\n' "via" "passes" "lease" "ran ok" "failed" "lost" "renew-err" "RSS MiB" "PSS MiB" "peak conns"
fleet direct "$fadmin" 60s "$fadmin"
bouncer=$(PGBOUNCER_POOL=20 scripts/pg-test-server bouncer "$fleetdir" | sed -n 's/^export JOBRUN_TEST_PGBOUNCER=//p')
fleet pgbouncer "$bouncer/bench" 3s "$fadmin"

echo
echo "== hand-off to a waiter under another host identity (${HANDOFFS:-20} rounds)"
export JOBRUN_DB=$fadmin
mkdir -p "$work/host-b"
for _ in $(seq 1 "${HANDOFFS:-20}"); do
  rm -f "$work/go" "$work/released" "$work/started"
  "$bin" run --lease 3s handoff -- sh -c "while [ ! -e $work/go ]; do sleep 0.01; done; date +%s%N >$work/released" &
  holder=$!
  sleep 0.3
  JOBRUN_HOST=host-b JOBRUN_BOOT_ID=boot-b TMPDIR=$work/host-b XDG_RUNTIME_DIR='' \
    "$bin" run --lease 3s --wait 60s handoff -- sh -c "date +%s%N >$work/started" &
  waiter=$!
  # Waiting long enough to poll only every second or more.
  sleep "$(python3 -c 'import random; print(round(random.uniform(3, 5), 2))')"
  touch "$work/go"
  wait "$holder" "$waiter"
  echo $(( ($(cat "$work/started") - $(cat "$work/released")) / 1000 )) >>"$work/handoff.us"
done
python3 -c '
import statistics, sys
v = [int(x) / 1000 for x in open(sys.argv[1])]
print("release -> waiter child start: median %.1f ms, max %.1f ms over %d rounds" % (statistics.median(v), max(v), len(v)))
' "$work/handoff.us"
