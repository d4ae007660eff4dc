#!/usr/bin/env bash
# How long `jobrun check` and `jobrun metrics` take on a big SQLite store:
# JOBS jobs (1000) with PASSES passes of history each (1000), every five
# minutes, one in fifty failed, as a store kept for months would hold.
#
#   scripts/bench-monitor.sh                 # builds the release binary if missing
#   BIN=target/debug/jobrun RUNS=5 scripts/bench-monitor.sh
#
# Prints the median and the slowest wall time of RUNS (10) runs of each.
# Needs sqlite3 (Debian's sqlite3) to write the history fast. Everything
# is in a temporary directory, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${JOBS:-1000}
PASSES=${PASSES:-1000}
RUNS=${RUNS:-10}
BIN=${BIN:-target/release/jobrun}
command -v sqlite3 >/dev/null || { echo "bench-monitor: sqlite3 is missing (Debian package sqlite3)" >&2; exit 1; }
if [ ! -x "$BIN" ]; then
  cargo build --release --locked --quiet
fi
work=$(mktemp -d /tmp/jobrun-bench-monitor.XXXXXX)
trap 'rm -rf "$work"' EXIT
export JOBRUN_DB=$work/jobrun.db

# The schema, as jobrun makes it; then the rows, as passes would have left them.
"$BIN" pause --new seed 2>/dev/null
"$BIN" resume seed 2>/dev/null
now=$(($(date +%s) * 1000))
sqlite3 "$JOBRUN_DB" <<SQL
BEGIN;
WITH RECURSIVE j(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM j WHERE n < $JOBS - 1)
INSERT INTO jobs (name, next_token, created_ms) SELECT printf('job.%04d', n), $PASSES + 1, 0 FROM j;
WITH RECURSIVE j(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM j WHERE n < $JOBS - 1),
               p(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM p WHERE n < $PASSES - 1)
INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms, duration_ms,
                     exit_code, outcome, waited_ms)
SELECT printf('job.%04d', j.n), printf('%04d%08d', j.n, p.n), p.n + 1, 0, 'web1', 4242,
       $now - ($PASSES - p.n) * 300000 + j.n * 100, $now - ($PASSES - p.n) * 300000 + j.n * 100 + 1500,
       1500, CASE WHEN p.n % 50 = 49 THEN 3 ELSE 0 END,
       CASE WHEN p.n % 50 = 49 THEN 'failed' ELSE 'ok' END, 0
FROM p, j ORDER BY p.n, j.n;
INSERT INTO job_counters (job, outcome, passes) SELECT job, outcome, count(*) FROM history GROUP BY job, outcome;
UPDATE jobs SET counted_id = (SELECT max(id) FROM history WHERE history.job = jobs.name);
COMMIT;
SQL
# One real pass per job folds its rows into the job's figures and latest
# passes, as the passes that wrote them would have.
for n in $(seq 0 $((JOBS - 1))); do
  "$BIN" run -q "$(printf 'job.%04d' "$n")" -- true
done

# Median and max of RUNS timings of "$@", in milliseconds.
timed() {
  local t=() start end
  for _ in $(seq "$RUNS"); do
    start=$(date +%s%N)
    "$@" >/dev/null || true
    end=$(date +%s%N)
    t+=($(( (end - start) / 1000000 )))
  done
  printf '%s\n' "${t[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median %d ms, max %d ms", a[int((NR+1)/2)], a[NR]}'
}

echo "store: $JOBS jobs x $PASSES passes ($(du -h "$JOBRUN_DB" | cut -f1)), $BIN, $RUNS runs each"
echo "jobrun check:   $(timed "$BIN" check)"
echo "jobrun metrics: $(timed "$BIN" metrics)"
