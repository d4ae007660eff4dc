//! `jobrun generate`: write the man pages and shell completions from the
//! clap definitions, so they can never describe flags that do not exist. The
//! output is committed; a test regenerates it and fails on any difference.
//!
//! The pages are clap_mangen's sections with a synopsis of our own (it shows
//! the global `--db`, every option with its value, and `-- COMMAND
//! [ARGS...]`), and the reference an installed system has no README for:
//! exit status, environment, files, signals, the JSON output and examples
//! in jobrun(1). Every page names only pages that exist.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use clap::{Arg, ArgAction, Command, CommandFactory};
use clap_complete::Shell;

use crate::cli::{Cli, GenerateArgs};

pub fn run(args: &GenerateArgs) -> Result<i32> {
    write_all(&args.man, &args.completions)?;
    Ok(crate::exit::OK)
}

/// The CLI as the man pages show it: the crate's version alone (a page
/// must not change with every commit) and no `help` subcommand (it has no
/// page).
fn documented() -> Command {
    Cli::command()
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true)
}

/// Text for roff: backslashes and hyphens escaped, and no line starting
/// with a control character.
fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    s.lines()
        .map(|l| {
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn bold(s: &str) -> String {
    format!("\\fB{}\\fR", roff(s))
}

fn italic(s: &str) -> String {
    format!("\\fI{}\\fR", roff(s))
}

/// One argument as the synopsis shows it.
fn synopsis_arg(a: &Arg) -> Option<String> {
    if matches!(
        a.get_action(),
        ArgAction::Help | ArgAction::HelpLong | ArgAction::HelpShort | ArgAction::Version
    ) || a.is_hide_set()
    {
        return None;
    }
    let value = a
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| a.get_id().to_string().to_uppercase());
    if a.is_positional() {
        let many = matches!(a.get_action(), ArgAction::Append)
            || a.get_num_args().is_some_and(|n| n.max_values() > 1);
        if a.is_last_set() {
            return Some(format!(
                "{} {} [{}...]",
                bold("--"),
                italic(&value),
                italic("ARGS")
            ));
        }
        let text = if many {
            format!("{}...", italic(&value))
        } else {
            italic(&value)
        };
        return Some(if a.is_required_set() {
            text
        } else {
            format!("[{text}]")
        });
    }
    let mut flag = Vec::new();
    if let Some(s) = a.get_short() {
        flag.push(bold(&format!("-{s}")));
    }
    if let Some(l) = a.get_long() {
        flag.push(bold(&format!("--{l}")));
    }
    let mut text = flag.join("|");
    if a.get_action().takes_values() {
        text.push(' ');
        text.push_str(&italic(&value));
    }
    Some(if a.is_required_set() {
        text
    } else {
        format!("[{text}]")
    })
}

/// `.SH SYNOPSIS` for `jobrun [global options] [SUB [options] args]`.
fn synopsis(root: &Command, sub: Option<&Command>) -> String {
    let mut words = vec![bold("jobrun")];
    words.extend(
        root.get_arguments()
            .filter(|a| a.is_global_set())
            .filter_map(synopsis_arg),
    );
    match sub {
        Some(sub) => {
            words.push(bold(sub.get_name()));
            let (positional, options): (Vec<&Arg>, Vec<&Arg>) = sub
                .get_arguments()
                .filter(|a| !a.is_global_set())
                .partition(|a| a.is_positional());
            words.extend(options.into_iter().filter_map(synopsis_arg));
            words.extend(positional.into_iter().filter_map(synopsis_arg));
        }
        None => {
            // One line per subcommand, its options summed up (each page
            // lists them).
            let globals = words.join(" ");
            let mut lines = vec![format!(
                "{} [{}|{}]",
                bold("jobrun"),
                bold("-h"),
                bold("--version")
            )];
            for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
                let (positional, options): (Vec<&Arg>, Vec<&Arg>) = sub
                    .get_arguments()
                    .filter(|a| !a.is_global_set())
                    .filter(|a| synopsis_arg(a).is_some())
                    .partition(|a| a.is_positional());
                let mut line = vec![globals.clone(), bold(sub.get_name())];
                if !options.is_empty() {
                    line.push(format!("[{}]", italic("OPTIONS")));
                }
                line.extend(positional.into_iter().filter_map(synopsis_arg));
                lines.push(line.join(" "));
            }
            return format!(".SH SYNOPSIS\n{}\n", lines.join("\n.br\n"));
        }
    }
    format!(".SH SYNOPSIS\n{}\n", words.join(" "))
}

/// The sections of one page, with the roff preamble once.
fn page(man: &clap_mangen::Man, synopsis: &str, extra: &str) -> Result<Vec<u8>> {
    let mut parts: Vec<Vec<u8>> = vec![vec![], vec![], vec![], vec![], vec![], vec![]];
    man.render_title(&mut parts[0])?;
    man.render_name_section(&mut parts[1])?;
    man.render_description_section(&mut parts[2])?;
    man.render_options_section(&mut parts[3])?;
    let mut out = Vec::new();
    let mut preamble: Option<Vec<u8>> = None;
    for (i, part) in parts.iter().enumerate() {
        let text = String::from_utf8_lossy(part).into_owned();
        // Every render starts with the same two-line preamble.
        let body: String = match &preamble {
            None => {
                let head: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
                preamble = Some(head.into_bytes());
                text.clone()
            }
            Some(p) => text
                .strip_prefix(String::from_utf8_lossy(p).as_ref())
                .unwrap_or(&text)
                .to_string(),
        };
        out.extend_from_slice(body.as_bytes());
        if i == 1 {
            out.extend_from_slice(synopsis.as_bytes());
        }
    }
    out.extend_from_slice(extra.as_bytes());
    Ok(out)
}

/// Every generated file as (relative name, contents).
pub fn generated() -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut root = documented();
    root.build();
    let version = format!("jobrun {}", env!("CARGO_PKG_VERSION"));
    let pages: Vec<String> = root
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| format!("jobrun-{}", s.get_name()))
        .collect();
    let man = clap_mangen::Man::new(root.clone())
        .source(version.clone())
        .manual("User Commands");
    let mut main = page(&man, &synopsis(&root, None), "")?;
    let mut subs = Vec::new();
    man.render_subcommands_section(&mut subs)?;
    let subs = String::from_utf8_lossy(&subs).into_owned();
    let subs = subs.lines().skip(2).collect::<Vec<_>>().join("\n");
    main.extend_from_slice(format!("{subs}\n").as_bytes());
    main.extend_from_slice(MAIN_PAGE.as_bytes());
    main.extend_from_slice(see_also(&pages, None).as_bytes());
    out.push(("man/jobrun.1".to_string(), main));
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("jobrun-{}", sub.get_name());
        let mut shown = sub
            .clone()
            .name(clap::builder::Str::from(name.clone().leak() as &'static str));
        // The global options, documented where they are used.
        for g in root.get_arguments().filter(|a| a.is_global_set()) {
            if shown.get_arguments().all(|a| a.get_id() != g.get_id()) {
                shown = shown.arg(g.clone());
            }
        }
        let man = clap_mangen::Man::new(shown)
            .source(version.clone())
            .manual("User Commands");
        let extra = format!(
            "{}{}",
            sub_page_extra(sub.get_name()),
            see_also(&pages, Some(&name))
        );
        out.push((
            format!("man/{name}.1"),
            page(&man, &synopsis(&root, Some(sub)), &extra)?,
        ));
    }
    for (shell, file) in [
        (Shell::Bash, "jobrun.bash"),
        (Shell::Zsh, "_jobrun"),
        (Shell::Fish, "jobrun.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "jobrun", &mut buf);
        out.push((format!("completions/{file}"), buf));
    }
    Ok(out)
}

fn see_also(pages: &[String], this: Option<&str>) -> String {
    let mut refs = Vec::new();
    if this.is_some() {
        refs.push("\\fBjobrun\\fR(1)".to_string());
    }
    for p in pages {
        if Some(p.as_str()) != this {
            refs.push(format!("\\fB{}\\fR(1)", roff(p)));
        }
    }
    format!(".SH SEE ALSO\n{}\n", refs.join(", "))
}

fn write_all(man: &Path, completions: &Path) -> Result<()> {
    fs::create_dir_all(man).with_context(|| format!("cannot create {}", man.display()))?;
    fs::create_dir_all(completions)
        .with_context(|| format!("cannot create {}", completions.display()))?;
    for (name, bytes) in generated()? {
        let path = match name.split_once('/') {
            Some(("man", file)) => man.join(file),
            Some((_, file)) => completions.join(file),
            None => continue,
        };
        fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// What only jobrun(1) carries: the reference an installed system has no
/// README for.
const MAIN_PAGE: &str = r#".SH EXIT STATUS
.TP
the command's own code
The pass ran; its command exited with this code.
.TP
128+N
The command died of signal N (143 after a forwarded TERM).
.TP
the conflict code (\fB\-E\fR, default 0)
The job is held or paused, or \fB\-\-wait\fR ran out.
.TP
1
An operator command could not finish: \fBstop\-due \-\-wait\fR ran out with
locks still held, \fBstatus\fR or \fBhistory\fR was given a job the store
never saw, \fBforget\fR refused a job that is not free.
.TP
125
jobrun itself failed: bad usage or settings, an unusable store.
.TP
126
The command exists but cannot be executed.
.TP
127
The command was not found.
.PP
Every failure of jobrun is one line on standard error, prefixed
\fBjobrun:\fR.
.SH ENVIRONMENT
Every option an operator sets in a cron line also reads a variable; the
option wins over the variable.
.TP
.B JOBRUN_DB
The store (\fB\-\-db\fR): a SQLite file path, or
\fBpostgres://user@host/db\fR for a fleet.
.TP
.B JOBRUN_DB_MODE
Mode of the files jobrun creates for a SQLite store (\fB\-\-db\-mode\fR,
default 0600).
.TP
.B JOBRUN_LEASE
The lease window (\fBrun \-\-lease\fR, default 5m).
.TP
.B JOBRUN_MAX_HOLD
The longest a pass may hold its slot (\fBrun \-\-max\-hold\fR, default 24h).
.TP
.B JOBRUN_KILL_AFTER
Grace between a forwarded TERM or INT and KILL (\fBrun \-\-kill\-after\fR,
default 10s).
.TP
.B JOBRUN_ON_LOST
What a lost lease does to the command (\fBrun \-\-on\-lost\fR,
continue or term).
.TP
.B JOBRUN_CONFLICT_EXIT_CODE
Exit code when the job is held or paused (\fBrun \-E\fR).
.TP
.B JOBRUN_QUIET
No line when the job is held or paused (\fBrun \-q\fR): 1, true, yes or on.
.TP
.B JOBRUN_SLOTS
Passes of the job allowed at once (\fBrun \-\-slots\fR).
.TP
.B JOBRUN_WAIT
How long to queue for a slot (\fBrun \-\-wait\fR).
.TP
.B JOBRUN_COALESCE
Join an identical queued pass (\fBrun \-\-coalesce\fR).
.TP
.B JOBRUN_COALESCED_EXIT_CODE
Exit code of a pass that joined a queued one
(\fBrun \-\-coalesced\-exit\-code\fR).
.TP
.B JOBRUN_KEEP_HISTORY
Passes of history kept per job (\fBrun \-\-keep\-history\fR).
.TP
.B JOBRUN_HOST
The host name recorded with a pass (default: the machine's host name).
.TP
.B JOBRUN_BOOT_ID
The boot id recorded with a pass (default:
\fI/proc/sys/kernel/random/boot_id\fR); a test seam, like
\fBJOBRUN_CLOCK_SKEW\fR.
.TP
.B JOBRUN_CLOCK_SKEW
A duration (\fB1h\fR, \fB\-1h\fR, at most 100 years) added to this host's wall
clock, never to its boot clock: a test seam for clocks that disagree.
.PP
jobrun sets these in the command's environment:
.TP
.B JOBRUN_JOB
The job's name.
.TP
.B JOBRUN_TOKEN
The fencing token: it strictly increases every time any pass takes a slot
of the job; hand it to the systems the pass writes to, so they can refuse a
stale holder.
.TP
.B JOBRUN_SLOT
The slot the pass holds (0 to \fB\-\-slots\fR minus 1).
.TP
.B JOBRUN_PASS
The pass's unique id, as \fBstatus\fR and \fBhistory\fR show it.
.SH FILES
.TP
.I /var/lib/jobrun/jobrun.db
The default store of root.
.TP
.I $XDG_STATE_HOME/jobrun/jobrun.db
The default store of any other user (\fI~/.local/state/jobrun/jobrun.db\fR
when \fBXDG_STATE_HOME\fR is unset): a user who is not root sees their own
store, and \fBstatus\fR names the store it read on its first line.
.TP
.I STORE\-wal\fR, \fISTORE\-shm
SQLite's write\-ahead log and index beside a SQLite store.
.TP
.I STORE.holders/PASS.lock
One file per pass on this machine, locked by the pass while it runs: the
kernel tells any process sharing it whether the holder lives, across PID
namespaces.
.TP
.I STORE.wake
Touched when a pass releases, so that waiters on this machine look at
once. For a PostgreSQL store:
\fI$XDG_RUNTIME_DIR/jobrun\-postgres.wake\fR, or
\fI/tmp/jobrun\-UID/postgres.wake\fR.
.PP
Files jobrun creates get the \fB\-\-db\-mode\fR (default 0600); a store,
holder lock or wake file owned by another user, or a symbolic link, is
refused.
.SH SIGNALS
\fBjobrun run\fR runs the command in a process group of its own, and:
.TP
.B TERM, INT
Forwarded to the command's process group; if the command has not exited
\fB\-\-kill\-after\fR later (default 10s), the group gets KILL. The pass is
recorded as stopped and jobrun exits 128+N.
.TP
.B HUP, QUIT
Forwarded to the process group; the pass is recorded as stopped when the
command ends.
.TP
.B USR1, USR2
Forwarded to the process group, nothing more.
.TP
.B KILL
Cannot be caught: the wrapper dies, its lease is no longer renewed. On the
same machine another process sees at once that the holder is dead (the
command runs on as an orphaned pass until it ends); elsewhere the lease
lapses within one window.
.PP
While queued (\fB\-\-wait\fR), TERM, INT, HUP or QUIT makes the pass leave
the queue and exit 128+N. jobrun releases its lease only after the command
is gone, and leaves no zombie. When the command exits and processes of its
group remain, they get TERM and, after \fB\-\-kill\-after\fR, KILL.
.SH JSON OUTPUT
Both documents are stable: fields are only ever added. Times named
\fBsince\fR are UTC (RFC 3339); \fB*_ms\fR fields are milliseconds.
.PP
\fBjobrun status \-\-json\fR prints one object:
.RS 4
.nf
{"store": "/var/lib/jobrun/jobrun.db",
 "jobs": [{
  "name": "feeds.poll",
  "state": "running",
  "paused": null | {"owner": null, "reason": "disk", "since": "...", "all": false},
  "pauses": [{"owner": "upgrade", "reason": "upgrade",
              "since": "2026\-11\-29T10:00:00Z", "all": true}],
  "slots": [{
    "slot": 0, "state": "running", "token": 1764410400000001,
    "pass_id": "3f2a9c0b11de",
    "holder": {"host": "web1", "pid": 4242, "child_pid": 4243},
    "verdict": {"liveness": "alive", "reason": "pid 4242 is running"},
    "since": "2026\-11\-29T10:00:00Z",
    "held_ms": 12000, "renewed_ago_ms": 2000, "expires_in_ms": 298000,
    "max_hold_ms": 86400000, "command": ["./poll"]}],
  "queue": {"length": 1, "head_waited_ms": 5000,
    "waiters": [{"position": 1, "pass_id": "...",
                 "holder": {"host": "web1", "pid": 4301},
                 "verdict": {"liveness": "alive", "reason": "..."},
                 "waited_ms": 5000, "command": ["./poll"]}]},
  "last": null | {"outcome": "ok", "duration_ms": 3100,
                  "ended_ago_ms": 60000}}]}
.fi
.RE
.PP
\fBstore\fR names the store read (a URL without its password);
\fBstate\fR is free, running, stopped, queued, paused, orphaned, stale or
dead;
\fBliveness\fR is alive, dead or unknown; \fBpaused\fR is the first of
\fBpauses\fR, every pause standing on the job (\fBowner\fR null for a pause
without \fB\-\-as\fR; \fBall\fR for \fBpause \-\-all\fR).
.PP
\fBjobrun history \-\-json\fR prints:
.RS 4
.nf
{"store": "/var/lib/jobrun/jobrun.db",
 "passes": [{"job": "feeds.poll", "pass_id": "3f2a9c0b11de",
   "token": 1764410400000001, "slot": 0, "host": "web1", "pid": 4242,
   "started_at_ms": 1764410400000, "ended_at_ms": 1764410403100,
   "duration_ms": 3100, "waited_ms": 0, "exit_code": 0, "signal": null,
   "outcome": "ok"}],
 "summary": [{"job": "feeds.poll", "count": 288, "mean_ms": 3000,
   "p50_ms": 2900, "p95_ms": 4100, "max_ms": 9000,
   "outcomes": {"ok": 287, "skipped": 1}}]}
.fi
.RE
.PP
Passes are newest start first (\fB\-\-reverse\fR: oldest first).
\fBtoken\fR and \fBslot\fR are null for a pass that took no slot;
\fBexit_code\fR is null when the command died of \fBsignal\fR;
the command started \fBwaited_ms\fR after \fBstarted_at_ms\fR (null for
passes recorded before jobrun kept it) and ran \fBduration_ms\fR;
\fBoutcome\fR is one of ok, failed, skipped, lost\-lease, spawn\-failed,
killed, stopped, coalesced, timed\-out. The summary counts durations of
the passes that ran a command.
.SH EXAMPLES
.SS cron
cron runs with PATH=/usr/bin:/bin, so set PATH (or write the full path of
jobrun); a \fB%\fR in a crontab command line ends the command (write
\fB\e%\fR). When the previous pass still runs, the new one writes one line
naming the holder on standard error, which cron mails; \fB\-q\fR silences it
and \fB\-E\fR \fICODE\fR makes it an exit code instead:
.RS 4
.nf
PATH=/usr/local/bin:/usr/bin:/bin
JOBRUN_DB=/var/lib/jobrun/jobrun.db
*/5 * * * * jobrun run \-q feeds.poll \-\- /srv/app/bin/poll\-due\-feeds
0 * * * * jobrun run \-E 75 digest.flush \-\- /srv/app/bin/flush \-\-date "$(date +\e%F)"
.fi
.RE
.SS systemd
A service started by a timer; systemd's stop TERMs jobrun
(\fBKillMode=mixed\fR), which forwards it and releases the lease once the
command is gone:
.RS 4
.nf
# feeds\-poll.service
[Unit]
Description=Poll due feeds
Wants=network\-online.target
After=network\-online.target
[Service]
Type=exec
ExecStart=/usr/bin/jobrun run \-\-lease 2m feeds.poll \-\- /srv/app/bin/poll\-due\-feeds
KillMode=mixed
TimeoutStopSec=30

# feeds\-poll.timer
[Timer]
OnCalendar=*:0/5
Persistent=true
[Install]
WantedBy=timers.target
.fi
.RE
.SS An upgrade
Hold new passes under a tag of its own, stop what runs, upgrade, and lift
only that pause (an operator's own pause stays):
.RS 4
.nf
jobrun pause \-\-all \-\-as upgrade \-\-reason upgrade
jobrun stop\-due \-\-all \-\-wait 5m
# ... install the new jobrun ...
jobrun \-\-version
jobrun resume \-\-all \-\-as upgrade
.fi
.RE
.SS 3 a.m.: a job is not running
.RS 4
.nf
jobrun status feeds.poll        # which store? held, paused, queued?
jobrun history feeds.poll \-\-limit 5  # last passes, outcomes
.fi
.RE
.PP
Check the first line names the store cron uses (root's is
\fI/var/lib/jobrun/jobrun.db\fR; run as root, or pass \fB\-\-db\fR). Then:
.TP
.B paused
\fBstatus\fR lists each pause with owner, reason and since:
\fBjobrun resume feeds.poll\fR lifts a pause without an owner,
\fBjobrun resume feeds.poll \-\-as TAG\fR (or \fB\-\-all \-\-as TAG\fR) the
one TAG owns.
.TP
.B running
A pass holds it: the verdict says whether its holder is alive. A long pass
may be legitimate (see \fBhistory\fR for its usual length); a hung one is
stopped with \fBjobrun stop\-due feeds.poll \-\-wait 1m\fR.
.TP
.B dead, stale
The holder is gone: \fBjobrun clear\-locks feeds.poll\fR frees it
(\fB\-\-dry\-run\fR first shows what it would do); the next pass would free
a dead holder itself.
.TP
.B orphaned
The wrapper died but the command runs on: \fBstop\-due\fR stops it.
.TP
.B free
Nothing holds it: check the cron line (PATH, \fB%\fR) and cron's mail or
journal for the pass's own error.
"#;

/// What a subcommand's page adds to clap's sections.
fn sub_page_extra(sub: &str) -> String {
    let exit = match sub {
        "run" => {
            "The command's own code; 128+N when it died of signal N; the conflict \
             code (\\fB\\-E\\fR, default 0) when the job is held or paused or \
             \\fB\\-\\-wait\\fR ran out; 125 when jobrun failed; 126 when the command \
             cannot be executed; 127 when it is not found."
        }
        "status" | "history" => {
            "0; 1 when a NAME given is a job the store never saw (the others are \
             still shown); 125 when jobrun failed."
        }
        "forget" => {
            "0 when every NAME was forgotten; 1 when one was refused; 125 when jobrun failed."
        }
        "stop-due" => {
            "0; 1 when \\fB\\-\\-wait\\fR ran out with locks still held or a verified \
             pass could not be signalled; 125 when jobrun failed."
        }
        _ => "0; 125 when jobrun failed.",
    };
    let mut s = format!(".SH EXIT STATUS\n{exit}\n");
    let example = match sub {
        "run" => Some(
            "jobrun run \\-\\-lease 2m \\-E 75 feeds.poll \\-\\- /srv/app/bin/poll\\-due\\-feeds\n\
             jobrun run \\-\\-slots 3 \\-\\-wait 10m thumbs.render \\-\\- ./render \\-\\-fast",
        ),
        "status" => Some("jobrun status\njobrun \\-\\-db /var/lib/jobrun/jobrun.db status feeds.poll \\-\\-json"),
        "history" => Some("jobrun history feeds.poll \\-\\-since 1d \\-\\-outcome failed\njobrun history \\-\\-reverse \\-\\-limit 50"),
        "pause" => Some("jobrun pause db.vacuum \\-\\-reason \"disk maintenance\"\njobrun pause \\-\\-all \\-\\-as upgrade \\-\\-reason upgrade"),
        "resume" => Some("jobrun resume db.vacuum\njobrun resume \\-\\-all \\-\\-as upgrade"),
        "forget" => Some("jobrun forget feeds.poll.old"),
        "stop-due" => Some("jobrun stop\\-due \\-\\-all \\-\\-wait 5m \\-\\-kill\\-after 1m"),
        "clear-locks" => Some("jobrun clear\\-locks \\-\\-all \\-\\-dry\\-run"),
        _ => None,
    };
    if let Some(e) = example {
        s.push_str(&format!(".SH EXAMPLES\n.RS 4\n.nf\n{e}\n.fi\n.RE\n"));
    }
    if matches!(sub, "status" | "history") {
        s.push_str(
            ".PP\nThe first line names the store read. The \\fB\\-\\-json\\fR \
             fields are listed under JSON OUTPUT in \\fBjobrun\\fR(1).\n",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::MAIN_PAGE;
    use crate::model::{Outcome, State};

    /// The text of jobrun(1) from `from` to the next `until`, unescaped.
    fn sentence(from: &str, until: char) -> String {
        let page = MAIN_PAGE.replace("\\-", "-").replace('\n', " ");
        let at = page.find(from).unwrap_or_else(|| panic!("no {from:?}"));
        let rest = &page[at + from.len()..];
        rest[..rest.find(until).unwrap()].to_string()
    }

    /// JSON OUTPUT names every state status shows and every outcome
    /// history records.
    #[test]
    fn json_output_names_every_state_and_outcome() {
        let states = sentence("\\fBstate\\fR is ", ';');
        for s in State::ALL {
            assert!(states.contains(s.as_str()), "{states:?} lacks {s:?}");
        }
        let outcomes = sentence("\\fBoutcome\\fR is one of ", '.');
        for o in Outcome::ALL {
            assert!(outcomes.contains(o.as_str()), "{outcomes:?} lacks {o:?}");
        }
    }
}
