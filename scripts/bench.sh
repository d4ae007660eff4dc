#!/usr/bin/env bash
# jobrun's speed and memory figures, each beside its anchor measured in the
# same run, written into docs/benchmarks.md (each mode replaces its own
# section there, with the machine, the date and the commit it ran on).
#
#   scripts/bench.sh                  # pass phases rss big contention
#   scripts/bench.sh pass             # `jobrun run x -- true` beside the floor
#                                     # (benches/floor.rs), `flock -n` and
#                                     # `true`, interleaved, and on a job whose
#                                     # history is full (each pass prunes);
#                                     # SQLite beside PostgreSQL, plain and
#                                     # TLS (PG=0 skips)
#   scripts/bench.sh phases           # where the time of one pass goes
#   scripts/bench.sh rss              # peak RSS of a renewing pass beside the
#                                     # floor's and flock's; PSS of 1,000
#                                     # concurrent wrappers
#   scripts/bench.sh big              # history and status on 1,000 jobs x
#                                     # 1,000 passes
#   scripts/bench.sh contention [N..] # N (3000) concurrent renewing passes at
#                                     # a 3 s lease, distinct jobs, HOLD s each
#   scripts/bench.sh fleet            # PostgreSQL fleet figures (below)
#
# Modes combine: `scripts/bench.sh pass rss`. Settings (environment):
#   RUNS (300) timed runs per command, WARMUP (20) untimed rounds first,
#   PHASE_RUNS (300), PSS_N (1000), BIG_JOBS (1000), BIG_PASSES (1000),
#   HOLD (60: long enough that 3,000 passes all start before the first
#   ends) seconds each contention pass runs, PG (1), OUT
#   (docs/benchmarks.md; OUT=- prints only).
#
# Commands are timed by benches/runner.rs (round-robin, so a noisy machine
# slows every command alike); figures are medians with the 10th-90th
# percentile spread, never one run's mean. It needs cargo, flock and
# python3 (for two ratios); PostgreSQL figures use scripts/pg-test-server,
# which installs the server as root.
#
# Fleet figures (fleet mode; FLEET_N, FLEET_HOSTS, FLEET_SECS size them):
#   - how many concurrently renewing passes (3 s lease) one PostgreSQL
#     server sustains (SUSTAIN, "100 200 400 600");
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
WARMUP=${WARMUP:-20}
PG=${PG:-1}
OUT=${OUT:-docs/benchmarks.md}
work=$(mktemp -d /tmp/jobrun-bench.XXXXXX)
pgdir=""
fleetdirs=()
cleanup() {
  if [ -n "$pgdir" ]; then scripts/pg-test-server stop "$pgdir" || echo "bench: could not stop the server in $pgdir" >&2; fi
  for d in "${fleetdirs[@]}"; do scripts/pg-test-server stop "$d" || echo "bench: could not stop the server in $d" >&2; done
  rm -rf "$work"
}
trap cleanup EXIT

modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(pass phases rss big contention)

# The commit the binaries were built from, as the tree stood then (the
# page itself aside).
exclude=()
[ "$OUT" = - ] || exclude=(":(exclude)$OUT")
built="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD -- . "${exclude[@]}" 2>/dev/null || built="$built (with local changes)"

# The binaries alone first, as scripts/build-release builds them for
# install.sh and the package (jobrun without the PostgreSQL store, and
# jobrun-pg, which it hands that store to): building the examples with
# them would unify the features of the dev-dependencies into them, and
# change the symbols link/pass-symbols.txt names (build.rs).
scripts/build-release --quiet
cargo build --release --quiet --example floor --example bench-runner
bin=$PWD/target/release/jobrun
floor=$PWD/target/release/examples/floor
runner=$PWD/target/release/examples/bench-runner

# The section a mode writes: its body is collected in $work/section.
section=$work/section
begin() { # TITLE
  {
    echo "## $1"
    echo
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') with binaries built at commit" \
      "$built:" \
      "$(nproc) CPU ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1))," \
      "$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), Linux $(uname -r)," \
      "load average $(cut -d' ' -f1-3 /proc/loadavg) at the start."
    echo
  } >"$section"
}
say() { echo "$@" >>"$section"; }

# Put the section into $OUT between its markers (added at the end the first
# time), and print it.
finish() { # NAME
  local name=$1
  cat "$section"
  echo
  [ "$OUT" = - ] && return
  [ -f "$OUT" ] || printf '# Benchmarks\n\nWritten by scripts/bench.sh.\n\n' >"$OUT"
  if grep -qx "<!-- bench:$name -->" "$OUT"; then
    awk -v n="$name" -v f="$section" '
      $0 == "<!-- bench:" n " -->" { print; while ((getline l < f) > 0) print l; skip = 1; next }
      $0 == "<!-- /bench:" n " -->" { skip = 0 }
      !skip { print }' "$OUT" >"$work/out" && cat "$work/out" >"$OUT"
  else
    { echo "<!-- bench:$name -->"; cat "$section"; echo "<!-- /bench:$name -->"; echo; } >>"$OUT"
  fi
}

ratio() { python3 -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }

# time_rows FILE: the runner's lines as table rows; sets med_LABEL.
declare -A med
time_rows() {
  local label m p10 p90 lo hi n
  while read -r label m p10 p90 lo hi n; do
    med[$label]=$m
    say "| $label | $m | $p10–$p90 | $lo–$hi | $n |"
  done <"$1"
}

# A PostgreSQL server for the pass figures, with TLS: sets pg_plain, pg_tls.
pg_plain="" pg_tls=""
start_pg() {
  local out port
  out=$(scripts/pg-test-server start --tls) || return 1
  eval "$out"
  pgdir=$JOBRUN_TEST_PGDIR
  port=$(cat "$pgdir/port")
  psql -q "postgres://postgres@127.0.0.1:$port/postgres" -c "CREATE DATABASE bench" >/dev/null
  pg_plain="postgres://postgres@127.0.0.1:$port/bench?sslmode=disable"
  pg_tls="postgres://postgres@localhost:$port/bench?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert=$pgdir/tls/ca.crt"
}

mode_pass() {
  begin "One pass: jobrun beside its floor"
  local db=$work/pass.db fdb=$work/floor.db full=$work/full.db
  JOBRUN_DB=$db "$bin" run x -- true 2>/dev/null
  "$floor" "$fdb" x true
  # A job whose history is full: 1,000 rows kept (the default), so that
  # every pass prunes one, as a job that has run a thousand times does.
  JOBRUN_DB=$full "$bin" run x -- true 2>/dev/null
  "$runner" seed "$full" 1000 >/dev/null
  JOBRUN_DB=$full "$bin" run x -- true
  "$runner" time "$RUNS" "$WARMUP" \
    jobrun JOBRUN_DB="$db" "$bin" run x -- true ::: \
    floor "$floor" "$fdb" x true ::: \
    flock flock -n "$work/lock" true ::: \
    true true ::: \
    jobrun-full JOBRUN_DB="$full" "$bin" run x -- true >"$work/pass.txt"
  say "\`$RUNS\` timed runs of each, interleaved (jobrun, floor, flock, true, jobrun-full, jobrun, ...) after $WARMUP untimed rounds; wall time of fork, exec and wait, in ms."
  say "The floor is \`benches/floor.rs\`: open the store (WAL, synchronous=NORMAL), take a lease row in one write transaction, run the command, delete the row and append a history row in a second. jobrun is the binary \`scripts/build-release\` builds for installs, without the PostgreSQL store; it runs on a store of its own, whose job has fewer rows than it keeps; jobrun-full on a job whose history is full (the 1,000 rows kept by default, written by \`bench-runner seed\`), so that each pass prunes a row, as every pass of a job that has run a thousand times does."
  say
  say "| command | median | p10–p90 | min–max | runs |"
  say "|---|---|---|---|---|"
  time_rows "$work/pass.txt"
  say
  say "jobrun / floor: **$(ratio "${med[jobrun]}" "${med[floor]}")×**; jobrun / flock: $(ratio "${med[jobrun]}" "${med[flock]}")×; floor / flock: $(ratio "${med[floor]}" "${med[flock]}")×; jobrun-full / floor: $(ratio "${med[jobrun-full]}" "${med[floor]}")× (medians)."
  say
  say "Command: \`RUNS=$RUNS scripts/bench.sh pass\`."
  if [ "$PG" != 0 ] && start_pg; then
    say
    say "SQLite beside PostgreSQL over loopback, plain and TLS (sslmode=verify-full), interleaved, $RUNS runs each; jobrun hands a PostgreSQL pass to the jobrun-pg beside it, one exec more:"
    say
    JOBRUN_DB=$pg_plain "$bin" run x -- true
    "$runner" time "$RUNS" "$WARMUP" \
      sqlite JOBRUN_DB="$db" "$bin" run x -- true ::: \
      postgres JOBRUN_DB="$pg_plain" "$bin" run x -- true ::: \
      postgres-tls JOBRUN_DB="$pg_tls" "$bin" run x -- true >"$work/pg.txt"
    say "| store | median | p10–p90 | min–max | runs |"
    say "|---|---|---|---|---|"
    time_rows "$work/pg.txt"
    say
    say "PostgreSQL / SQLite: $(ratio "${med[postgres]}" "${med[sqlite]}")×; with TLS: $(ratio "${med[postgres-tls]}" "${med[sqlite]}")×."
  else
    say
    say "PostgreSQL: not measured in this run (PG=0, or no server could be started)."
  fi
  finish pass
}

mode_phases() {
  begin "Where one pass's time goes"
  local db=$work/phases.db n=${PHASE_RUNS:-300}
  JOBRUN_DB=$db "$bin" run x -- true 2>/dev/null
  JOBRUN_DB=$db "$runner" phases "$n" "$bin" run x -- true >"$work/phases.txt"
  say "\`jobrun run x -- true\`, $n runs with \`JOBRUN_TRACE_PHASES\` set: each phase ends at a mark jobrun takes (\`CLOCK_MONOTONIC\`); \`exec\` runs from the runner's spawn to \`main\`, \`exit\` from the last mark to the runner's wait returning. Microseconds."
  say
  say "| phase | what | median µs | p10–p90 |"
  say "|---|---|---|---|"
  local name m p10 p90 count what
  while read -r name m p10 p90 count; do
    case $name in
      exec) what="spawn, exec and dynamic loading" ;;
      args) what="argument parsing and settings" ;;
      open.starters) what="signal handlers set, then a place among the store's starters (one per CPU)" ;;
      open.files) what="opening: the store's files judged (no symlink, owner, mode, magic)" ;;
      open.connect) what="opening: SQLite connects" ;;
      open.sqlite) what="opening: schema version, WAL mode, pragmas (and reading back the WAL)" ;;
      open.pin) what="opening: the store file pinned" ;;
      open.evidence) what="opening: host, boot and PID namespace" ;;
      open) what="opening: pass id, holder lock, environment" ;;
      fork) what="starting the held command (shared memory; forked where it cannot be), its start time read" ;;
      take) what="the take transaction" ;;
      gate) what="releasing the command to exec (no thread: the renewer's starts at its first tick); a long log copied back while it runs" ;;
      child) what="the command runs (exec of true), its exit noticed on SIGCHLD" ;;
      group) what="what is left of its process group; reaping" ;;
      release) what="the release transaction (with its history row)" ;;
      exit) what="exit" ;;
      total) what="**total**" ;;
      *) what="" ;;
    esac
    say "| $name | $what | $m | $p10–$p90 |"
  done <"$work/phases.txt"
  say
  say "Command: \`PHASE_RUNS=$n scripts/bench.sh phases\`."
  finish phases
}

# peak_kib COMMAND...: VmHWM of the process just before its child (sleep
# 2.5) ends.
peak_kib() {
  "$@" &
  local pid=$! hwm="" i
  for i in $(seq 1 45); do
    sleep 0.05
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo "$hwm")
    [ "$i" -ge 40 ] && [ -n "$hwm" ] && break
  done
  wait "$pid" || true
  echo "${hwm:-0}"
}

median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

mode_rss() {
  begin "Memory"
  local db=$work/rss.db fdb=$work/rss-floor.db i
  JOBRUN_DB=$db "$bin" run x -- true 2>/dev/null
  "$floor" "$fdb" x true
  : >"$work/rss-jobrun"; : >"$work/rss-floor"; : >"$work/rss-flock"
  for i in 1 2 3 4 5; do
    peak_kib env JOBRUN_DB="$db" "$bin" run --lease 3s rss -- sleep 2.5 >>"$work/rss-jobrun"
    peak_kib "$floor" "$fdb" rss sleep 2.5 >>"$work/rss-floor"
    peak_kib flock "$work/lock" sleep 2.5 >>"$work/rss-flock"
  done
  say "Peak resident memory (VmHWM) of the wrapper while its child (\`sleep 2.5\`) runs, median of 5 interleaved runs, KiB; jobrun runs with a 3 s lease, so it renews twice meanwhile."
  say
  say "| wrapper | peak RSS KiB | runs (KiB) |"
  say "|---|---|---|"
  say "| jobrun run --lease 3s | $(median <"$work/rss-jobrun") | $(tr '\n' ' ' <"$work/rss-jobrun")|"
  say "| floor | $(median <"$work/rss-floor") | $(tr '\n' ' ' <"$work/rss-floor")|"
  say "| flock | $(median <"$work/rss-flock") | $(tr '\n' ' ' <"$work/rss-flock")|"
  say
  local n=${PSS_N:-1000} dir=$work/pss
  mkdir -p "$dir"
  export JOBRUN_DB=$work/pss.db
  for i in $(seq 1 "$n"); do
    "$bin" run --lease 3s "pss.$i" -- sleep 60 2>"$dir/$i.err" &
  done
  # Once every pass holds its slot (or 50 s passed): PSS and RSS summed
  # over the wrappers.
  local t0=$SECONDS held=0
  while [ $((SECONDS - t0)) -lt 50 ]; do
    held=$("$runner" leases "$JOBRUN_DB")
    [ "$held" -ge "$n" ] && break
    sleep 1
  done
  local pids pss rss
  pids=$(pgrep -f "^$bin run --lease 3s pss\." || true)
  pss=0 rss=0
  for i in $pids; do
    read -r p r < <(awk '/^Pss:/ {p = $2} /^Rss:/ {r = $2} END {print p + 0, r + 0}' "/proc/$i/smaps_rollup" 2>/dev/null || echo "0 0")
    pss=$((pss + p)) rss=$((rss + r))
  done
  local count
  count=$(echo "$pids" | wc -w)
  for i in $pids; do kill -TERM "$i" 2>/dev/null || true; done
  wait || true
  unset JOBRUN_DB
  say "$n concurrent renewing wrappers (3 s lease), $held holding their slot at the sample, $count sampled: PSS $((pss / 1024)) MiB in all, $((pss / (count > 0 ? count : 1))) KiB each; RSS summed $((rss / 1024)) MiB ($((rss / (count > 0 ? count : 1))) KiB each)."
  say
  say "Command: \`PSS_N=$n scripts/bench.sh rss\`."
  finish rss
}

mode_big() {
  begin "History, status, check and metrics on a big store"
  local jobs=${BIG_JOBS:-1000} passes=${BIG_PASSES:-1000} db=$work/big.db
  export JOBRUN_DB=$db
  "$bin" run big.0 -- true 2>/dev/null
  seq 1 $((jobs - 1)) | xargs -P 4 -I{} "$bin" run "big.{}" -- true
  "$runner" seed "$db" "$passes" >/dev/null
  # A pass of each job folds the copies into its counters and figures, as
  # the writer of each row would have.
  seq 0 $((jobs - 1)) | xargs -P 4 -I{} "$bin" run "big.{}" -- true
  "$runner" time 5 1 history JOBRUN_DB="$db" "$bin" history >"$work/big-history.txt"
  "$runner" time 21 2 status JOBRUN_DB="$db" "$bin" status >"$work/big-status.txt"
  local extra=()
  for c in check metrics; do
    if "$bin" "$c" --help >/dev/null 2>&1; then extra+=("$c"); fi
  done
  say "$jobs jobs, $passes history rows each (two real passes per job, the rest copies written by \`bench-runner seed\` and folded into the job's counters and figures by its second pass), SQLite; ms."
  say
  say "| command | median | p10–p90 | min–max | runs |"
  say "|---|---|---|---|---|"
  time_rows "$work/big-history.txt"
  time_rows "$work/big-status.txt"
  for c in "${extra[@]}"; do
    "$runner" time 5 1 "$c" JOBRUN_DB="$db" "$bin" "$c" >"$work/big-$c.txt" || true
    time_rows "$work/big-$c.txt"
  done
  unset JOBRUN_DB
  say
  say "Command: \`BIG_JOBS=$jobs BIG_PASSES=$passes scripts/bench.sh big\`."
  finish big
}

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
# failures, lost leases and failed releases (the pass's lease left to lapse,
# the pass not recorded) of the passes started in DIR.
tally() {
  local dir=$1 passes codes
  passes=$(find "$dir" -name '*.err' | wc -l)
  codes=$(cat "$dir"/*.rc 2>/dev/null | grep -cx 0 || true)
  echo "$((passes - codes))" \
    "$(cat "$dir"/*.err | grep -c "renewal failed" || true)" \
    "$(cat "$dir"/*.err | grep -c "lease lost" || true)" \
    "$(cat "$dir"/*.err | grep -c "release failed" || true)"
}

mode_contention() {
  local counts=("$@") hold=${HOLD:-60}
  [ ${#counts[@]} -gt 0 ] || counts=(3000)
  begin "Contention: concurrent renewing passes on one SQLite store"
  say "Each pass: \`jobrun run --lease 3s c.N.I -- sleep $hold\`, distinct jobs, all started at once from one shell; renewals come every second (±10%). A failed start is a pass whose exit code is not 0; peak is the most leases held at once (sampled every 250 ms). A lost lease is dated by its pass's last stderr line when that is the loss (undated otherwise): while passes were still starting (before the last one started), while all of them ran, or once the first had ended. A failed release is a pass that said its release failed: its lease is left to lapse and the pass is not recorded."
  say
  say "| passes | started in s | peak held | failed starts | renewal failures | late renewals | lost leases | lost while starting / all running / ending | failed releases | WAL MiB | wall s |"
  say "|---|---|---|---|---|---|---|---|---|---|---|"
  local n dir db t0 started startfail failed lost unreleased late peak wal when
  # The knee: the most passes that ran with no late renewal, and the
  # fewest whose renewals came late or lost their lease.
  local calm="none" late_at="" lost_at=""
  for n in "${counts[@]}"; do
    dir=$work/contention-$n db=$work/contention-$n.db
    mkdir -p "$dir"
    # The store is made by a pass of another job, so that the history of
    # the jobs c.N.* is the spawned passes' alone: the runner's "lost"
    # dates their starts and ends by it.
    JOBRUN_DB=$db "$bin" run "first.$n" -- true 2>/dev/null
    "$runner" watch "$db" "$dir/stop" >"$dir/peak" &
    # The WAL's largest size while they run (a checkpoint starved by
    # readers makes every read slower).
    (w=0; while [ ! -e "$dir/stop" ]; do s=$(stat -c %s "$db-wal" 2>/dev/null || echo 0); [ "$s" -gt "$w" ] && w=$s; sleep 1; done; echo $((w / 1048576))) >"$dir/wal" &
    t0=$SECONDS
    # The runner starts them (a shell's forks would be most of the load)
    # and waits for them all.
    "$runner" spawn "$n" "$dir" JOBRUN_DB="$db" "$bin" run --lease 3s "c.$n.{}" -- sleep "$hold" >"$dir/started"
    started=$(cat "$dir/started")
    touch "$dir/stop"
    wait
    read -r startfail failed lost unreleased < <(tally "$dir")
    late=$(cat "$dir"/*.err | grep -c "warning: renewed" || true)
    peak=$(cat "$dir/peak")
    wal=$(cat "$dir/wal")
    when=$("$runner" lost "$db" "$dir" "c.$n." | awk '
      $1 == "none" { printf "no passes in history"; next }
      { printf "%s / %s / %s", $1, $2, $3
        if ($4 > 0) printf " (%s undated)", $4
        if ($5) printf " (the commands ended before the last pass started)" }')
    say "| $n | $started | $peak | $startfail | $failed | $late | $lost | $when | $unreleased | $wal | $((SECONDS - t0)) |"
    if [ "$late" -eq 0 ] && [ "$lost" -eq 0 ] && [ "$startfail" -eq 0 ] && [ "$unreleased" -eq 0 ]; then
      calm=$n
    elif [ -z "$late_at" ]; then
      late_at=$n
    fi
    if [ -z "$lost_at" ] && { [ "$lost" -gt 0 ] || [ "$startfail" -gt 0 ] || [ "$unreleased" -gt 0 ]; }; then lost_at=$n; fi
    if [ "$startfail" -gt 0 ] || [ "$lost" -gt 0 ] || [ "$unreleased" -gt 0 ]; then
      echo "- at $n, first problem: \`$(cat "$dir"/*.err | grep -m1 -h "jobrun:" | sed "s|$work/||; s/\`/'/g" || true)\`" >>"$work/problems"
    fi
  done
  say
  if [ "$calm" = none ]; then calm="none of these counts"; else calm="$calm passes"; fi
  say "Knee: all renewals on time up to $calm; late renewals (the warning line, \`renewal_late\` in status) from ${late_at:-none of these}; lost leases, failed starts or failed releases from ${lost_at:-none of these}."
  say
  [ ! -f "$work/problems" ] || cat "$work/problems" >>"$section"
  say
  say "Command: \`scripts/bench.sh contention ${counts[*]}\` (HOLD=$hold)."
  finish contention
}

mode_fleet() {
  if [ "$PG" = 0 ]; then
    echo "bench: fleet needs PostgreSQL (PG=0 given)" >&2
    return 1
  fi
  begin "PostgreSQL fleet"
  say '```'
  fleet_figures | tee -a "$section"
  say '```'
  say
  say "Command: \`scripts/bench.sh fleet\`."
  finish fleet
}

# A server of its own for the fleet figures: `start_server` sets
# server_dir to its directory.
server_dir=""
start_server() {
  local out
  out=$(scripts/pg-test-server start)
  eval "$out"
  fleetdirs+=("$JOBRUN_TEST_PGDIR")
  server_dir=$JOBRUN_TEST_PGDIR
}

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
  read -r startfail renewfail lost _ < <(tally "$dir")
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

fleet_figures() {
  echo "== concurrent renewing passes on one server (lease 3s, 20 s each, started 5 ms apart)"
  PG_MAX_CONNECTIONS=700 start_server
  local sport sadmin
  sport=$(cat "$server_dir/port")
  sadmin="postgres://postgres@127.0.0.1:$sport/bench"
  psql -q "postgres://postgres@127.0.0.1:$sport/postgres" -c "CREATE DATABASE bench" >/dev/null
  printf '%-10s %8s %14s %16s %12s\n' "passes" "ran ok" "failed start" "renewal failures" "lost leases"
  local n dir i
  for n in ${SUSTAIN:-100 200 400 600}; do
    dir=$work/sustain-$n
    mkdir -p "$dir"
    for i in $(seq 1 "$n"); do
      start_pass "$dir" "$i" env JOBRUN_DB="$sadmin" "$bin" run --lease 3s "s$n.$i" -- sleep 20
      sleep 0.005
    done
    wait
    local failed lost ran startfail
    read -r startfail failed lost _ < <(tally "$dir")
    ran=$(psql -qtA "$sadmin" -c "SELECT count(*) FROM history WHERE job LIKE 's$n.%' AND outcome = 'ok'")
    printf '%-10s %8s %14s %16s %12s\n' "$n" "$ran" "$startfail" "$failed" "$lost"
  done

  echo
  echo "== connections: ${FLEET_N:-2000} concurrent renewing passes, ${FLEET_HOSTS:-50} host identities, ${FLEET_SECS:-120} s each"
  PG_MAX_CONNECTIONS=50 start_server
  local fleetdir=$server_dir fport fadmin bouncer
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
  mkdir -p "$work/host-b"
  local holder waiter
  for _ in $(seq 1 "${HANDOFFS:-20}"); do
    rm -f "$work/go" "$work/released" "$work/started"
    JOBRUN_DB=$fadmin "$bin" run --lease 3s handoff -- sh -c "while [ ! -e $work/go ]; do sleep 0.01; done; date +%s%N >$work/released" &
    holder=$!
    sleep 0.3
    JOBRUN_DB=$fadmin JOBRUN_HOST=host-b JOBRUN_BOOT_ID=boot-b TMPDIR=$work/host-b XDG_RUNTIME_DIR='' \
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
}

i=0
while [ "$i" -lt ${#modes[@]} ]; do
  m=${modes[$i]}
  i=$((i + 1))
  case $m in
    pass) mode_pass ;;
    phases) mode_phases ;;
    rss) mode_rss ;;
    big) mode_big ;;
    contention)
      counts=()
      while [ "$i" -lt ${#modes[@]} ] && [[ ${modes[$i]} =~ ^[0-9]+$ ]]; do
        counts+=("${modes[$i]}")
        i=$((i + 1))
      done
      mode_contention "${counts[@]}"
      ;;
    fleet) mode_fleet ;;
    *) echo "bench: unknown mode $m (pass, phases, rss, big, contention [N...], fleet)" >&2; exit 2 ;;
  esac
done
