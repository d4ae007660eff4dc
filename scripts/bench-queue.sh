#!/usr/bin/env bash
# Queue figures for jobrun on the default (SQLite) store, beside flock(1)
# where a comparison makes sense.
#
# (a) Hand-off latency: from the moment a running pass's child ends to the
#     moment the head waiter's child starts, over HANDOFFS hand-offs (default
#     100). One chain on one job (--slots 1): pass i's child records its
#     start time (date +%s%N), waits for a release file the script creates,
#     and records its end time right before it exits; pass i+1 is started
#     with --wait and the script waits until `status --json` shows it queued
#     before it releases pass i. Latency = start(i+1) - end(i): it covers the
#     wrapper reaping its child, stopping its renewer, the release
#     transaction, the wake-up of the waiter, the waiter's reconcile and
#     promotion transactions, and spawning the next child. The same chain
#     with `flock LOCK sh pass.sh i` (a waiter is "queued" once /proc/locks
#     shows it blocked on the lock) gives the kernel's figure.
#
# (b) Store writes per second while WAITERS waiters (default 50) wait
#     behind one long pass, all with --lease 3s (renewals every second).
#     Method: count the write transactions SQLite commits, exactly, from the
#     write-ahead log. Every committed write transaction appends frames to
#     the WAL and marks its last frame as a commit frame (non-zero "database
#     size" field in the frame header). A python3 sqlite3 connection holds a
#     read transaction for the whole window, which keeps SQLite from
#     restarting the WAL at a checkpoint, so the WAL only grows; the commit
#     frames are counted at the start and end of the window (frames whose
#     salt matches the WAL header) and the difference divided by the
#     window's length. The WAL header's salt is compared at both ends; if it
#     changed, the window is reported as invalid rather than guessed.
#     What this does not count: a write transaction that changes nothing
#     (a waiter's promotion attempt while it is behind takes the write lock
#     but writes no page) leaves no frame, so those are not writes here;
#     their rate is bounded by the waiters' poll interval (backing off to at
#     most one per waiter per second). Also shown: the CPU time the waiters
#     use (utime+stime from /proc/PID/stat) over the same window. flock(1)
#     waiters block in the kernel: no store, no writes, no CPU.
#
# Usage: scripts/bench-queue.sh        (builds a release binary first)
#        JOBRUN_BIN=path/to/jobrun HANDOFFS=100 WAITERS=50 scripts/bench-queue.sh
set -euo pipefail
cd "$(dirname "$0")/.."

HANDOFFS=${HANDOFFS:-100}
WAITERS=${WAITERS:-50}
WINDOW_S=${WINDOW_S:-10}

if [ -z "${JOBRUN_BIN:-}" ]; then
  cargo build --release --quiet
  JOBRUN_BIN=$PWD/target/release/jobrun
fi
for tool in jq python3 flock; do
  command -v "$tool" >/dev/null || { echo "bench-queue: needs $tool" >&2; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/jobrun-bench.XXXXXX")
PIDS=()
cleanup() {
  local pid
  touch "$WORK/release.all" 2>/dev/null || true
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

die() {
  echo "bench-queue: $*" >&2
  exit 1
}

now_ms() { date +%s%3N; }

# Wait (up to $1 seconds) until the command in the remaining arguments
# succeeds.
wait_for() {
  local limit=$1 start
  shift
  start=$(now_ms)
  until "$@"; do
    if [ $(($(now_ms) - start)) -gt $((limit * 1000)) ]; then
      return 1
    fi
    sleep 0.005
  done
}

# The pass every chain runs: $1 is its directory, $2 its number.
cat >"$WORK/pass.sh" <<'EOF'
#!/bin/sh
d=$1
i=$2
date +%s%N >"$d/start.$i.tmp" && mv "$d/start.$i.tmp" "$d/start.$i"
while [ ! -e "$d/release.$i" ] && [ ! -e "$d/../release.all" ]; do sleep 0.005; done
date +%s%N >"$d/end.$i.tmp" && mv "$d/end.$i.tmp" "$d/end.$i"
EOF
chmod +x "$WORK/pass.sh"

# jobrun on store $1 (a or b). Background passes run the binary directly so
# that $! is jobrun's own pid.
jr() { JOBRUN_DB=$WORK/store-$1.db "$JOBRUN_BIN" "${@:2}"; }

queued_count() { # store job
  jr "$1" status --json "$2" | jq --arg j "$2" '[.jobs[] | select(.name == $j) | .queue.length] | add // 0'
}

has_queued() { [ "$(queued_count "$1" "$2")" -ge "$3" ]; }

flock_blocked() { grep -Eq "^[0-9]+: -> FLOCK +ADVISORY +WRITE +$1 " /proc/locks; }

exists() { [ -e "$1" ]; }

# Print "median max" in ms of the numbers (ns) in file $1.
median_max_ms() {
  sort -n "$1" | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.1f %.1f\n", m / 1e6, v[NR] / 1e6 }'
}

# One chain of $HANDOFFS hand-offs. $1: jobrun or flock.
chain() {
  local kind=$1 dir=$WORK/$1 i pid
  mkdir -p "$dir"
  : >"$dir/latency"
  start_pass() { # number, then "wait" for a queued pass
    if [ "$kind" = jobrun ]; then
      if [ "${2:-}" = wait ]; then
        JOBRUN_DB=$WORK/store-a.db "$JOBRUN_BIN" run --wait 60s handoff -- \
          "$WORK/pass.sh" "$dir" "$1" &
      else
        JOBRUN_DB=$WORK/store-a.db "$JOBRUN_BIN" run handoff -- "$WORK/pass.sh" "$dir" "$1" &
      fi
    else
      flock "$dir/lock" "$WORK/pass.sh" "$dir" "$1" &
    fi
    pid=$!
    PIDS+=("$pid")
  }
  start_pass 0
  wait_for 30 exists "$dir/start.0" || die "$kind: first pass never started"
  for i in $(seq 1 "$HANDOFFS"); do
    start_pass "$i" wait
    if [ "$kind" = jobrun ]; then
      wait_for 30 has_queued a handoff 1 || die "jobrun: pass $i never queued"
    else
      wait_for 30 flock_blocked "$pid" || die "flock: pass $i never blocked"
    fi
    touch "$dir/release.$((i - 1))"
    wait_for 30 exists "$dir/start.$i" || die "$kind: pass $i never started"
    wait_for 30 exists "$dir/end.$((i - 1))" || die "$kind: pass $((i - 1)) never ended"
    echo $(($(cat "$dir/start.$i") - $(cat "$dir/end.$((i - 1))"))) >>"$dir/latency"
  done
  touch "$dir/release.$HANDOFFS"
  wait "$pid" || true
}

echo "bench-queue: jobrun $("$JOBRUN_BIN" --version 2>/dev/null || echo "$JOBRUN_BIN"), $(nproc) CPU(s)"
jr a status >/dev/null
chain jobrun
chain flock
read -r jr_med jr_max < <(median_max_ms "$WORK/jobrun/latency")
read -r fl_med fl_max < <(median_max_ms "$WORK/flock/latency")

# (b) WAITERS waiters behind one long pass.
jr b status >/dev/null
mkdir -p "$WORK/b"
JOBRUN_DB=$WORK/store-b.db "$JOBRUN_BIN" run --lease 3s herd -- "$WORK/pass.sh" "$WORK/b" holder &
PIDS+=("$!")
wait_for 30 exists "$WORK/b/start.holder" || die "the long pass never started"
WAITER_PIDS=()
for i in $(seq 1 "$WAITERS"); do
  JOBRUN_DB=$WORK/store-b.db "$JOBRUN_BIN" run --lease 3s --wait 10m herd -- true &
  PIDS+=("$!")
  WAITER_PIDS+=("$!")
done
wait_for 60 has_queued b herd "$WAITERS" || die "the waiters never all queued"
# Let the waiters' polling back off to its steady interval.
sleep 5

cpu_ticks() {
  local pid total=0 f
  for pid in "${WAITER_PIDS[@]}"; do
    if f=$(cut -d')' -f2- "/proc/$pid/stat" 2>/dev/null); then
      total=$((total + $(echo "$f" | awk '{ print $12 + $13 }')))
    fi
  done
  echo "$total"
}

# Hold a read transaction across the window (so the WAL is never restarted)
# and count commit frames at both ends.
WINDOW_S=$WINDOW_S python3 - "$WORK/store-b.db" >"$WORK/b/measure" <<'EOF' &
import os, sqlite3, struct, sys, time

db = sys.argv[1]
wal = db + "-wal"

def count():
    with open(wal, "rb") as f:
        data = f.read()
    salt = data[16:24]
    page = struct.unpack(">I", data[8:12])[0]
    commits = frames = 0
    off = 32
    while off + 24 + page <= len(data):
        hdr = data[off:off + 24]
        if hdr[8:16] != salt:
            break
        frames += 1
        if struct.unpack(">I", hdr[4:8])[0] != 0:
            commits += 1
        off += 24 + page
    return salt, commits, frames

conn = sqlite3.connect(db, isolation_level=None)
conn.execute("BEGIN")
conn.execute("SELECT count(*) FROM waiters").fetchone()
salt0, c0, f0 = count()
t0 = time.monotonic()
time.sleep(float(os.environ["WINDOW_S"]))
salt1, c1, f1 = count()
t1 = time.monotonic()
conn.execute("COMMIT")
if salt0 != salt1:
    print("invalid invalid invalid")
else:
    dt = t1 - t0
    print(f"{(c1 - c0) / dt:.1f} {(f1 - f0) / dt:.1f} {dt:.1f}")
EOF
MEASURE=$!
ticks0=$(cpu_ticks)
cpu0=$(now_ms)
wait "$MEASURE"
ticks1=$(cpu_ticks)
cpu1=$(now_ms)
hz=$(getconf CLK_TCK)
cpu_pct=$(awk -v t=$((ticks1 - ticks0)) -v hz="$hz" -v ms=$((cpu1 - cpu0)) \
  'BEGIN { printf "%.1f", 100 * (t / hz) / (ms / 1000) }')
read -r commits_per_s frames_per_s window <"$WORK/b/measure"
touch "$WORK/b/release.holder"
for pid in "${PIDS[@]}"; do
  wait "$pid" || true
done
PIDS=()

printf '\n%-44s %12s %12s\n' "" jobrun flock
printf '%-44s %12s %12s\n' "hand-off latency, median (ms, n=$HANDOFFS)" "$jr_med" "$fl_med"
printf '%-44s %12s %12s\n' "hand-off latency, max (ms)" "$jr_max" "$fl_max"
printf '%-44s %12s %12s\n' "store commits/s, $WAITERS waiters (${window}s window)" "$commits_per_s" "0 (no store)"
printf '%-44s %12s %12s\n' "WAL pages written/s, $WAITERS waiters" "$frames_per_s" "0"
printf '%-44s %12s %12s\n' "CPU of the $WAITERS waiters (% of one CPU)" "$cpu_pct" "0 (blocked)"
echo "expected from renewals alone: $WAITERS waiters + 1 holder, one renewal per second each"
