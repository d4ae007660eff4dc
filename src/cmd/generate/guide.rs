//! The prose only a page carries: the JSON documents, the examples and
//! the 3 a.m. troubleshooting of jobrun(1), and each command's examples.
//! Lists in it that name states or outcomes come from the code's tables.

use roff::{bold, Roff};

use super::text::{heading, item, literal, para, prose, subheading};
use crate::model::State;
use crate::policy::outcome::Outcome;

/// What jobrun(1)'s DESCRIPTION adds to `cli::INTRO`.
pub const MAIN_DESCRIPTION: &str = "Each pass of a job runs under a lease that a helper \
thread renews while the command runs, and with evidence of who holds it (host, boot, PID \
namespace, process start time), so a dead holder's lock is freed at once on the same machine \
and within one lease window elsewhere, and nothing ever frees or signals a process it \
believes alive. A SQLite file keeps the leases, the queue, the pauses and the history of \
one machine; a PostgreSQL database those of a fleet. Each command has a page of its own.";

/// `a, b, c or d`.
fn either(words: &[&str]) -> String {
    match words.split_last() {
        Some((last, head)) if !head.is_empty() => format!("{} or {last}", head.join(", ")),
        _ => words.join(""),
    }
}

pub fn json_output(r: &mut Roff) {
    heading(r, "JSON OUTPUT");
    r.text(prose(
        "Both documents are stable: fields are only ever added. Times named `since` are \
         UTC (RFC 3339); `*_ms` fields are milliseconds.",
    ));
    para(r, "`jobrun status --json` prints one object:");
    literal(
        r,
        r#"{"store": "/var/lib/jobrun/jobrun.db",
 "jobs": [{
  "name": "feeds.poll",
  "state": "running",
  "paused": null | {"owner": null, "reason": "disk", "since": "...", "all": false},
  "pauses": [{"owner": "upgrade", "reason": "upgrade",
              "since": "2026-11-29T10:00:00Z", "all": true}],
  "slots": [{
    "slot": 0, "state": "running", "token": 1764410400000001,
    "pass_id": "3f2a9c0b11de",
    "holder": {"host": "web1", "pid": 4242, "child_pid": 4243},
    "verdict": {"liveness": "alive", "reason": "pid 4242 is running"},
    "since": "2026-11-29T10:00:00Z",
    "held_ms": 12000, "renewed_ago_ms": 2000, "expires_in_ms": 298000,
    "renewal_late": false,
    "max_hold_ms": 86400000, "command": ["./poll"],
    "containers": null | "docker" | "podman"}],
  "queue": {"length": 1, "head_waited_ms": 5000,
    "waiters": [{"position": 1, "pass_id": "...",
                 "holder": {"host": "web1", "pid": 4301},
                 "verdict": {"liveness": "alive", "reason": "..."},
                 "waited_ms": 5000, "command": ["./poll"]}]},
  "last": null | {"outcome": "ok", "duration_ms": 3100,
                  "ended_ago_ms": 60000},
  "last_attempt": null | {"outcome": "skipped", "ended_ago_ms": 120000},
  "window": null | {"key": "1764579600", "state": "done", "attempts": 1,
    "max_attempts": 3, "pass_id": "3f2a9c0b11de", "host": "web2",
    "claimed": "2026-12-01T09:00:00Z", "ended": "2026-12-01T09:00:03Z",
    "outcome": "ok"}}]}"#,
    );
    let states: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
    para(
        r,
        &format!(
            "`store` names the store read (a URL without its password); `state` is {}; \
             `liveness` is alive, dead or unknown; `paused` is the first of `pauses`, every \
             pause standing on the job (`owner` null for a pause without `--as`; `all` for \
             `pause --all`); `containers` is the engine a pass declared with `run \
             --containers`, whose answer about the pass's label the verdict includes; \
             `renewal_late` is true once more than half the lease has passed since the last \
             renewal (renewals come every third): the store serves them slower than its \
             passes ask, and the holder has said so on its stderr. \
             `last` is the last pass that took a slot; `last_attempt` the last pass of any \
             kind (a skip shows that the scheduler fired). `window` is the latest window a \
             `--once-per` or `--window` pass claimed (null for a job never run so): its \
             `key` (the window's start in Unix seconds, or the `--window` key), `state` \
             (claimed, done, failed: it may be claimed again, or given-up), the claims made \
             (`attempts`) of the `max_attempts` its latest claimer allowed, and that claim's \
             `pass_id`, `host`, `claimed` and `ended` times and `outcome` (null while it \
             runs).",
            either(&states)
        ),
    );
    para(r, "`jobrun history --json` prints:");
    literal(
        r,
        r#"{"store": "/var/lib/jobrun/jobrun.db",
 "passes": [{"job": "feeds.poll", "pass_id": "3f2a9c0b11de",
   "token": 1764410400000001, "slot": 0, "host": "web1", "pid": 4242,
   "started_at_ms": 1764410400000, "ended_at_ms": 1764410403100,
   "duration_ms": 3100, "waited_ms": 0, "exit_code": 0, "signal": null,
   "outcome": "ok", "freed": null, "window": null}],
 "summary": [{"job": "feeds.poll", "count": 288, "mean_ms": 3000,
   "p50_ms": 2900, "p95_ms": 4100, "max_ms": 9000,
   "outcomes": {"ok": 287, "skipped": 1}}]}"#,
    );
    let outcomes: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
    para(
        r,
        &format!(
            "Passes are newest start first (`--reverse`: oldest first). `token` and `slot` \
             are null for a pass that took no slot; `exit_code` is null when the command \
             died of `signal`; the command started `waited_ms` after `started_at_ms` (null \
             for passes recorded before jobrun kept it) and ran `duration_ms`; `outcome` is \
             {} (OUTCOMES above); `freed` is null unless someone other than the pass freed \
             its slot or removed its queue row: then it says why (`reason`: dead, \
             lapsed-unknown, forfeited or forced), who (`by`) and on what verdict \
             (`evidence`, naming what was asked: the pass's processes and, for a `run \
             --containers` pass, its containers; null for a ghost waiter); `window` is the \
             window of a `--once-per` or `--window` pass (null otherwise). The summary \
             counts durations of the passes that ran a command: of every pass recorded, \
             pruned ones too (`p50_ms` and `p95_ms` from a sketch, within 1%), or with \
             `--since` or `--outcome`, of the kept passes that match (never only the \
             `--limit` shown).",
            either(&outcomes)
        ),
    );
}

pub fn main_examples(r: &mut Roff) {
    heading(r, "EXAMPLES");
    subheading(r, "cron");
    r.text(prose(
        "cron runs with PATH=/usr/bin:/bin, so set PATH (or write the full path of \
         jobrun); a `%` in a crontab command line ends the command (write `\\%`). When the \
         previous pass still runs, the new one writes one line naming the holder on \
         standard error, which cron mails; `-q` silences it and `-E` {CODE} makes it an \
         exit code instead:",
    ));
    literal(
        r,
        r#"PATH=/usr/local/bin:/usr/bin:/bin
JOBRUN_DB=/var/lib/jobrun/jobrun.db
*/5 * * * * jobrun run -q feeds.poll -- /srv/app/bin/poll-due-feeds
0 * * * * jobrun run -E 75 digest.flush -- /srv/app/bin/flush --date "$(date +\%F)""#,
    );
    subheading(r, "A fleet");
    r.text(prose(
        "The same crontab on every host, with a PostgreSQL store they share: each host \
         polls in its own place in the first two minutes and never two at once, a pass \
         runs at most 20 minutes (exit 124 past it), and the hourly flush runs once per \
         hour on whichever host comes first, another host taking over when it fails:",
    ));
    literal(
        r,
        r#"JOBRUN_DB=postgres://jobrun@db.internal/jobrun?sslmode=verify-full
JOBRUN_SPREAD=2m
JOBRUN_TIMEOUT=20m
*/5 * * * * jobrun run feeds.poll -- /srv/app/bin/poll-due-feeds
0 * * * * jobrun run --once-per 1h digest.flush -- /srv/app/bin/flush
30 2 * * * jobrun run --window "$(date +\%F)" reports.daily -- /srv/app/bin/daily"#,
    );
    subheading(r, "systemd");
    r.text(prose(
        "A service started by a timer; systemd's stop TERMs jobrun (`KillMode=mixed`), \
         which forwards it and releases the lease once the command is gone:",
    ));
    literal(
        r,
        "# feeds-poll.service
[Unit]
Description=Poll due feeds
Wants=network-online.target
After=network-online.target
[Service]
Type=exec
ExecStart=/usr/bin/jobrun run --lease 2m feeds.poll -- /srv/app/bin/poll-due-feeds
KillMode=mixed
TimeoutStopSec=30

# feeds-poll.timer
[Timer]
OnCalendar=*:0/5
Persistent=true
[Install]
WantedBy=timers.target",
    );
    subheading(r, "An upgrade");
    r.text(prose(
        "Hold new passes under a tag of its own, stop what runs, upgrade, and lift only \
         that pause (an operator's own pause stays):",
    ));
    literal(
        r,
        "jobrun pause --all --as upgrade --reason upgrade
jobrun stop-due --all --wait 5m
# ... install the new jobrun ...
jobrun --version
jobrun resume --all --as upgrade",
    );
    subheading(r, "3 a.m.: a job is not running");
    literal(
        r,
        "jobrun status feeds.poll        # which store? held, paused, queued?
jobrun history feeds.poll --limit 5  # last passes, outcomes",
    );
    para(
        r,
        "Check the first line names the store cron uses (root's is \
         {/var/lib/jobrun/jobrun.db}; run as root, or pass `--db`). Then, by state:",
    );
    let by_state = [
        (
            State::Paused,
            "`status` lists each pause with owner, reason and since: `jobrun resume \
             feeds.poll` lifts a pause without an owner, `jobrun resume feeds.poll --as TAG` \
             (or `--all --as TAG`) the one TAG owns.",
        ),
        (
            State::Running,
            "A pass holds it: the verdict says whether its holder is alive. A long pass may \
             be legitimate (see `history` for its usual length); a hung one is stopped with \
             `jobrun stop-due feeds.poll --wait 1m`.",
        ),
        (
            State::Dead,
            "The holder is gone: `jobrun clear-locks feeds.poll` frees it (`--dry-run` \
             first shows what it would do); the next pass would free a dead holder itself.",
        ),
        (
            State::Stale,
            "Nothing here can judge the holder (another host, boot or namespace) and its \
             lease has lapsed: `clear-locks` frees it.",
        ),
        (
            State::Orphaned,
            "The wrapper died but the command, or a container of a `--containers` pass, \
             runs on: `stop-due` stops it (a container by its label, through its engine).",
        ),
        (
            State::Free,
            "Nothing holds it: check the cron line (PATH, `%`) and cron's mail or journal \
             for the pass's own error.",
        ),
    ];
    for (state, what) in by_state {
        item(r, vec![bold(state.as_str())], prose(what));
    }
}

/// A subcommand's EXAMPLES, and what else its page says.
pub fn sub_examples(r: &mut Roff, sub: &str) {
    let example = match sub {
        "run" => {
            "jobrun run --lease 2m -E 75 feeds.poll -- /srv/app/bin/poll-due-feeds
jobrun run --slots 3 --wait 10m thumbs.render -- ./render --fast
jobrun run --containers docker feeds.poll -- \\
    sh -c 'exec docker compose run --rm --label \"$JOBRUN_LABEL\" job'
jobrun run --timeout 20m --spread 2m --jitter 30s feeds.poll -- /srv/app/bin/poll-due-feeds
jobrun run --once-per 1h digest.flush -- /srv/app/bin/flush --hour \"$JOBRUN_WINDOW\"
jobrun run --window \"$(date +%F)\" --window-attempts 5 reports.daily -- ./daily
jobrun run --on-success 'curl -fsS -m 10 https://hc-ping.com/UUID' \\
    --on-failure 'curl -fsS -m 10 https://hc-ping.com/UUID/fail' feeds.poll -- ./poll"
        }
        "status" => {
            "jobrun status
jobrun --db /var/lib/jobrun/jobrun.db status feeds.poll --json"
        }
        "history" => {
            "jobrun history feeds.poll --since 1d --outcome failed
jobrun history --reverse --limit 50"
        }
        "pause" => {
            "jobrun pause db.vacuum --reason \"disk maintenance\"
jobrun pause --all --as upgrade --reason upgrade"
        }
        "resume" => {
            "jobrun resume db.vacuum
jobrun resume --all --as upgrade"
        }
        "forget" => "jobrun forget feeds.poll.old",
        "timeline" => {
            "jobrun timeline
COLUMNS=200 jobrun timeline feeds.poll digest.flush --since 7d"
        }
        "stop-due" => "jobrun stop-due --all --wait 5m --kill-after 1m",
        "clear-locks" => "jobrun clear-locks --all --dry-run",
        _ => return,
    };
    heading(r, "EXAMPLES");
    literal(r, example);
    if matches!(sub, "status" | "history") {
        para(
            r,
            "The first line names the store read. The `--json` fields are listed under \
             JSON OUTPUT in `jobrun`(1).",
        );
    }
}
