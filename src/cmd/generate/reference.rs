//! The sections that restate what the code does, each built from the code's
//! own table or constants: EXIT STATUS from `exit::TABLE`, ENVIRONMENT from
//! the clap definitions and the variables' constants, FILES from the path
//! constants, SIGNALS from `spawn::FORWARDED` and `supervise::classify`, OUTCOMES from
//! `Outcome::ALL` and `Outcome::meaning`. Only the wording around them is
//! written here; `tests.rs` reads the pages back against the same tables.

use clap::{Arg, Command};
use roff::{bold, italic, roman, Roff};

use super::text::{heading, help_text, item, para, prose, sentence};
use crate::exit::{self, Status};
use crate::policy::outcome::Outcome;
use crate::spawn::{takes_over, FORWARDED};
use crate::supervise::{classify, SignalKind};

pub use super::variables::{COMMAND_VARIABLES, HOOK_VARIABLES, SETTING_VARIABLES};

/// The commands that only read the store's files (they create none): on
/// their pages `--db-mode` is the mode they expect the files to have.
pub const READERS: [&str; 6] = [
    "status",
    "history",
    "clear-locks",
    "stop-due",
    "forget",
    "resume",
];

/// `--db-mode` as a reading command understands it.
pub fn db_mode_for(sub: &str) -> Option<&'static str> {
    READERS.contains(&sub).then_some(
        "The mode this command expects of a SQLite store's files; it creates none. \
         Without it, the mode of the store file itself (only its owner can change it), \
         so a group-shared store made with --db-mode 0660 is read as such by every \
         member and by root without repeating it. The store file and its -wal and -shm \
         are refused when writable beyond it, and always when writable by others; with \
         group write, files of other members of the caller's groups are accepted.",
    )
}

/// The exit statuses of a subcommand's page, with what each means there
/// when that says more than the table.
fn exits_of(sub: &str) -> Vec<(Status, Option<&'static str>)> {
    use exit::{CANNOT_EXECUTE, INCOMPLETE, JOBRUN_FAILED, NOT_FOUND, OK, TIMEOUT};
    let failed = (Status::Code(JOBRUN_FAILED), None);
    match sub {
        "run" => vec![
            (Status::Child, None),
            (Status::Signal, None),
            (Status::Conflict, None),
            (Status::Coalesced, None),
            (Status::Code(TIMEOUT), None),
            failed,
            (Status::Code(CANNOT_EXECUTE), None),
            (Status::Code(NOT_FOUND), None),
        ],
        "status" => vec![
            (Status::Code(OK), None),
            (
                Status::Code(INCOMPLETE),
                Some("a NAME given is a job the store never saw (the others are still shown)"),
            ),
            failed,
        ],
        "history" => vec![
            (Status::Code(OK), None),
            (
                Status::Code(INCOMPLETE),
                Some("NAME is a job the store never saw"),
            ),
            failed,
        ],
        "forget" => vec![
            (Status::Code(OK), Some("every NAME was forgotten")),
            (
                Status::Code(INCOMPLETE),
                Some("a NAME was refused, with the reason (the others are forgotten)"),
            ),
            failed,
        ],
        "stop-due" => vec![
            (Status::Code(OK), None),
            (
                Status::Code(INCOMPLETE),
                Some(
                    "a pass of this host and boot it was asked to stop could not be \
                     signalled and may still run (a pass on another host is listed, never \
                     a failure), or --wait ran out with locks still held",
                ),
            ),
            failed,
        ],
        "check" => vec![
            (Status::Code(OK), Some("every job checked is OK")),
            (
                Status::Code(INCOMPLETE),
                Some(
                    "the worst verdict is a WARNING: late, stuck, a dead holder not yet freed, \
                     a long queue or an old pause",
                ),
            ),
            (
                Status::Code(exit::CHECK_CRITICAL),
                Some("the worst verdict is CRITICAL: failing, or late by more than one further interval"),
            ),
            (
                Status::Code(exit::CHECK_UNKNOWN),
                Some(
                    "UNKNOWN: bad usage (check alone exits 3 for it, not 125, as the \
                     monitoring-plugins guidelines require), a NAME the store never saw, or a \
                     store that is missing or cannot be read; the reason follows JOBRUN UNKNOWN \
                     on standard output",
                ),
            ),
        ],
        _ => vec![(Status::Code(OK), None), failed],
    }
}

/// What `status` means in the table.
pub fn meaning(status: Status) -> &'static str {
    exit::TABLE
        .iter()
        .find(|(s, _)| *s == status)
        .map(|(_, when)| *when)
        .unwrap_or_else(|| panic!("{status:?} is not in exit::TABLE"))
}

/// EXIT STATUS: every entry of `exit::TABLE` on jobrun(1), the ones a
/// subcommand returns on its page.
pub fn exit_status(r: &mut Roff, sub: Option<&str>) {
    heading(r, "EXIT STATUS");
    let rows = match sub {
        None => exit::TABLE.iter().map(|(s, _)| (*s, None)).collect(),
        Some(sub) => exits_of(sub),
    };
    for (status, when) in rows {
        let when = when.unwrap_or_else(|| meaning(status));
        item(
            r,
            help_text(&status.label()),
            help_text(&format!("When {when}.")),
        );
    }
    if sub != Some("run") {
        para(r, exit::BROKEN_PIPE);
    }
    if sub.is_none() {
        para(
            r,
            "Every failure of jobrun is one line on standard error, after `jobrun:` and \
             naming what failed.",
        );
    }
}

/// Every variable an option reads, with the options that read it (the
/// global ones first, then each subcommand's, in clap's order).
pub fn option_variables(root: &Command) -> Vec<(String, Vec<(String, &Arg)>)> {
    let mut out: Vec<(String, Vec<(String, &Arg)>)> = Vec::new();
    let mut scopes = vec![(String::new(), root)];
    scopes.extend(super::text::subcommands(root).map(|s| (format!("{} ", s.get_name()), s)));
    for (scope, cmd) in scopes {
        for a in cmd.get_arguments() {
            let Some(env) = a.get_env() else { continue };
            if a.is_global_set() && !scope.is_empty() {
                continue;
            }
            let env = env.to_string_lossy().into_owned();
            let flag = match (a.get_long(), a.get_short()) {
                (Some(l), _) => format!("{scope}--{l}"),
                (None, Some(s)) => format!("{scope}-{s}"),
                (None, None) => format!("{scope}{}", a.get_id()),
            };
            match out.iter_mut().find(|(e, _)| *e == env) {
                Some((_, flags)) => flags.push((flag, a)),
                None => out.push((env, vec![(flag, a)])),
            }
        }
    }
    out
}

/// ENVIRONMENT: what each option's variable sets, then the variables no
/// option sets, then those the command gets.
pub fn environment(r: &mut Roff, root: &Command) {
    heading(r, "ENVIRONMENT");
    r.text(prose(
        "Every option an operator sets in a cron line also reads a variable; the option \
         wins over the variable.",
    ));
    for (env, flags) in option_variables(root) {
        // `run --lease` (default 5m): what --help says of it.
        let mut body = Vec::new();
        for (i, (flag, a)) in flags.iter().enumerate() {
            if i > 0 {
                body.push(roman(", "));
            }
            body.push(bold(flag.clone()));
            let default = a.get_default_values().first();
            if let Some(d) = default.filter(|_| a.get_action().takes_values()) {
                body.push(roman(format!(" (default {})", d.to_string_lossy())));
            }
        }
        let help = flags[0]
            .1
            .get_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        body.push(roman(": "));
        body.extend(help_text(&sentence(&help)));
        r.control("TP", []);
        r.control("B", [env.as_str()]);
        r.text(body);
    }
    for (env, what) in SETTING_VARIABLES {
        r.control("TP", []);
        r.control("B", [env]);
        r.text(prose(what));
    }
    para(r, "jobrun sets these in the command's environment:");
    for (env, what) in COMMAND_VARIABLES {
        r.control("TP", []);
        r.control("B", [env]);
        r.text(prose(what));
    }
    para(r, "and these too in a hook's (see HOOKS in jobrun-run(1)):");
    for (env, what) in HOOK_VARIABLES {
        r.control("TP", []);
        r.control("B", [env]);
        r.text(prose(what));
    }
}

/// Stand-ins for the parts of a path that vary.
pub const STORE: &str = "STORE";
pub const PASS: &str = "PASS";
pub const UID: &str = "UID";

/// FILES, as (the paths, what they are): from the constants the code
/// builds each path with.
pub fn file_entries() -> Vec<(Vec<String>, String)> {
    use crate::cmd::run::output::{RUNTIME_OUTPUT_DIR, STORE_OUTPUT_INFIX, TMP_OUTPUT_DIR};
    use crate::cmd::run::wake::{RUNTIME_WAKE_DIR, TMP_DIR_PREFIX, TMP_WAKE_DIR, WAKE_SUFFIX};
    use crate::files::{HOLDER_LOCK_SUFFIX, SPOOL_SUFFIX};
    use crate::settings::{DEFAULT_ROOT_DB, STATE_HOME_DEFAULT, USER_DB};
    use crate::store::elsewhere::PG_PROGRAM;
    use crate::store::sqlite::SIDE_FILES;
    use crate::store::writers::WRITERS_SUFFIX;
    use crate::store::HOLDERS_SUFFIX;
    let holders = format!("{STORE}.{HOLDERS_SUFFIX}/");
    vec![
        (
            vec![DEFAULT_ROOT_DB.into()],
            "The default store of root.".into(),
        ),
        (
            vec![format!("$XDG_STATE_HOME/{USER_DB}")],
            format!(
                "The default store of any other user ({{~/{STATE_HOME_DEFAULT}/{USER_DB}}} \
                 when `XDG_STATE_HOME` is unset or relative): a user who is not root sees their own \
                 store, and `status` names the store it read on its first line."
            ),
        ),
        (
            SIDE_FILES.iter().map(|s| format!("{STORE}{s}")).collect(),
            format!(
                "SQLite's write-ahead log and its index, beside a SQLite store {{{STORE}}} \
                 (the store's path)."
            ),
        ),
        (
            vec![format!("{STORE}{WRITERS_SUFFIX}")],
            "The writers' line of a SQLite store, made with it: every write transaction \
             of jobrun takes a kernel lock on it first and drops it after its commit, so \
             that a freed write lock passes to the next writer at once (thousands of \
             passes renewing through one store wait in the kernel, not in naps). It \
             orders writers only: SQLite's own lock still guards every write, a killed \
             holder's lock goes with it, and readers never take it. Its body is the \
             renewals board, where a pass asks for its renewal and the next writer writes \
             it with its own (4 MiB, allocated when a pass first renews), and past it the starters' \
             gate, where passes wait to open the store and take their slot, one per CPU \
             at a time."
                .into(),
        ),
        (
            vec![holders.clone()],
            "The holders directory beside a SQLite store, made with the store.".into(),
        ),
        (
            vec![format!("{holders}{PASS}{HOLDER_LOCK_SUFFIX}")],
            format!(
                "One file per pass on this machine ({{{PASS}}} is its pass id), locked by \
                 the pass while it runs: the kernel tells any process sharing it whether the \
                 holder lives, across PID namespaces."
            ),
        ),
        (
            vec![format!("{holders}{PASS}{WAKE_SUFFIX}")],
            "The wake FIFO of a pass queued on this machine (`--wait`): a pass that frees \
             a slot writes a byte to the FIFOs of the waiters it lets in, head first. \
             Waiters also poll, so nothing depends on it."
                .into(),
        ),
        (
            vec![format!(
                "$XDG_RUNTIME_DIR/{RUNTIME_WAKE_DIR}/{PASS}{WAKE_SUFFIX}"
            )],
            "The same for a PostgreSQL store, when `XDG_RUNTIME_DIR` is an absolute \
             directory of the caller's with mode 0700. Only waiters of the same user are \
             woken; the others poll."
                .into(),
        ),
        (
            vec![format!(
                "$TMPDIR/{TMP_DIR_PREFIX}{UID}/{TMP_WAKE_DIR}/{PASS}{WAKE_SUFFIX}"
            )],
            format!(
                "The same without such an `XDG_RUNTIME_DIR` ({{/tmp}} when `TMPDIR` is \
                 unset; {{{UID}}} is the caller's user id), in directories of mode 0700 \
                 jobrun creates and checks."
            ),
        ),
        (
            vec![
                format!("$XDG_RUNTIME_DIR/{RUNTIME_OUTPUT_DIR}/{PASS}{SPOOL_SUFFIX}"),
                format!("{STORE}{STORE_OUTPUT_INFIX}{UID}/{PASS}{SPOOL_SUFFIX}"),
                format!("$TMPDIR/{TMP_DIR_PREFIX}{UID}/{TMP_OUTPUT_DIR}/{PASS}{SPOOL_SUFFIX}"),
            ],
            "The output spool of a pass run with `--output quiet-unless-failed`, mode \
             0600 whatever `--db-mode` says, in a directory of mode 0700 jobrun creates \
             and checks: in `XDG_RUNTIME_DIR` when it is an absolute directory of the \
             caller's with mode 0700, else beside a SQLite store, else in the temporary \
             directory. Removed when the pass is over; the spool of a wrapper killed by \
             SIGKILL is removed by the next capturing pass that uses the same directory."
                .into(),
        ),
        (
            vec![PG_PROGRAM.into()],
            "Beside jobrun's own file, where `scripts/build-release` built jobrun without \
                 the PostgreSQL store (as the installs and the package do: a SQLite pass \
                 then loads less code): the same jobrun with that store, which takes over \
                 every command on a PostgreSQL store in jobrun's own process, with its \
                 arguments and environment. Without it such a command is one line and exit \
                 125. A jobrun built by `cargo build` serves both stores itself."
                .into(),
        ),
    ]
}

/// FILES.
pub fn files(r: &mut Roff) {
    heading(r, "FILES");
    for (paths, what) in file_entries() {
        let mut tag = Vec::new();
        for p in paths {
            if !tag.is_empty() {
                tag.push(roman(", "));
            }
            tag.push(italic(p));
        }
        item(r, tag, prose(&what));
    }
    para(
        r,
        "Files jobrun creates get the `--db-mode` (default 0600 for a new store; an \
         existing store's own mode otherwise) and, beside a group-shared store, the store \
         file's group (the holders directory also the setgid bit). A file beside the store \
         is used only when it is not a symbolic link and is owned by the caller or root (or, \
         with group write in `--db-mode`, by a member of one of the caller's groups, or \
         any member when the caller is root); anything else is refused, never followed. \
         The store's directory must be owned by root, the caller or the store's owner, \
         and writable by no one beyond the store's group unless it has the sticky bit.",
    );
}

/// A signal's name without `SIG`: `TERM`.
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().trim_start_matches("SIG").to_string())
        .unwrap_or_else(|_| sig.to_string())
}

/// The forwarded signals, grouped by what `classify` makes of them, in the
/// order `FORWARDED` lists them.
pub fn signal_groups() -> Vec<(SignalKind, Vec<i32>)> {
    let mut groups: Vec<(SignalKind, Vec<i32>)> = Vec::new();
    for sig in FORWARDED {
        let kind = classify(sig);
        match groups.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, sigs)) => sigs.push(sig),
            None => groups.push((kind, vec![sig])),
        }
    }
    groups
}

/// `TERM, INT, HUP or QUIT`.
fn names(sigs: &[i32], last: &str) -> String {
    let names: Vec<String> = sigs.iter().map(|s| signal_name(*s)).collect();
    match names.split_last() {
        Some((tail, head)) if !head.is_empty() => format!("{} {last} {tail}", head.join(", ")),
        _ => names.join(""),
    }
}

/// SIGNALS: what `jobrun run` does with each signal it forwards, and how
/// the pass is then recorded (`pass::run_child` decides it).
pub fn signals(r: &mut Roff, root: &Command) {
    let kill_after = root
        .find_subcommand("run")
        .and_then(|run| run.get_arguments().find(|a| a.get_id() == "kill_after"))
        .and_then(|a| a.get_default_values().first())
        .map(|d| d.to_string_lossy().into_owned())
        .expect("run --kill-after has a default");
    heading(r, "SIGNALS");
    r.text(prose(
        "`jobrun run` runs the command in a process group of its own, with its signal \
         handlers in place before anything starts, and:",
    ));
    let mut stops = Vec::new();
    for (kind, sigs) in signal_groups() {
        let body = match kind {
            SignalKind::Stop { grace: true } => format!(
                "Forwarded to the command's process group, which gets KILL if the command \
                 has not exited `--kill-after` later (default {kill_after}). Stops the pass."
            ),
            SignalKind::Stop { grace: false } => "Forwarded to the command's process group; \
                 no KILL follows. Stops the pass, unless the command handles it and runs on: \
                 the pass then goes on until the command exits."
                .to_string(),
            SignalKind::ForwardOnly => {
                "Forwarded to the command's process group, nothing more: the pass goes on."
                    .to_string()
            }
        };
        if let SignalKind::Stop { .. } = kind {
            stops.extend(sigs.iter().copied());
        }
        let tag = sigs.iter().map(|s| signal_name(*s)).collect::<Vec<_>>();
        r.control("TP", []);
        r.control("B", [tag.join(", ").as_str()]);
        r.text(prose(&body));
    }
    let kill = signal_name(libc::SIGKILL);
    r.control("TP", []);
    r.control("B", [kill.as_str()]);
    r.text(prose(
        "Cannot be caught: the wrapper dies and its lease is no longer renewed. On the \
         same machine a command that runs on is an orphaned pass, which keeps its slot \
         until its process group is gone, and the slot is freed once it is; elsewhere the \
         lease lapses within one window.",
    ));
    let kept: Vec<i32> = FORWARDED
        .into_iter()
        .filter(|&s| !takes_over(s, true))
        .collect();
    let always: Vec<i32> = FORWARDED
        .into_iter()
        .filter(|&s| takes_over(s, true))
        .collect();
    para(
        r,
        &format!(
            "One exception: any of {} that was ignored when jobrun started (HUP under `nohup`, \
             INT and QUIT for a background job of a non-interactive shell) stays ignored, for \
             jobrun and for the command: it is neither handled nor forwarded, and the pass \
             goes on. {} \
             is always handled and forwarded, so `stop-due` and systemd can stop the pass.",
            names(&kept, "or"),
            names(&always, "and"),
        ),
    );
    let base = exit::SIGNAL_BASE;
    para(
        r,
        &format!(
            "A signal that stops the pass ({}) is judged by how the command ends. A \
             command that handles it and exits is recorded by its exit status like any \
             other: `{ok}` and exit 0 when it exits 0, `{failed}` and its own code \
             otherwise. The pass is recorded `{stopped}`, and jobrun exits {base}+N, only \
             when the command dies of the forwarded signal N, or of the KILL after it \
             ({killed}). When the stop comes before the command started, the command never \
             starts; while queued (`--wait`), the pass leaves the queue. Both are recorded \
             `{stopped}` and exit {base}+N.",
            names(&stops, "or"),
            ok = Outcome::Ok.as_str(),
            failed = Outcome::Failed.as_str(),
            stopped = Outcome::Stopped.as_str(),
            killed = base + libc::SIGKILL,
        ),
    );
    para(
        r,
        &format!(
            "With `--on-lost term`, a lost lease stops the command as a TERM would, and the \
             pass is recorded `{}`. jobrun releases its lease only after the command is \
             gone, and leaves no zombie. When the command exits and processes of its group \
             remain, they get TERM and, `--kill-after` later, KILL.",
            Outcome::LostLease.as_str()
        ),
    );
}

/// OUTCOMES: how a pass can end, as history records it.
pub fn outcomes(r: &mut Roff) {
    heading(r, "OUTCOMES");
    r.text(prose(
        "Every pass ends in one history row with one of these outcomes (`history \
         --outcome` shows one of them):",
    ));
    for o in Outcome::ALL {
        item(r, vec![bold(o.as_str())], help_text(o.meaning()));
    }
}

/// HOOKS (jobrun-run(1)): when each hook runs, what it sees, what bounds it.
pub fn hooks(r: &mut Roff) {
    heading(r, "HOOKS");
    let fired = |bad: bool| {
        Outcome::ALL
            .into_iter()
            .filter(|o| o.ended_badly() == bad && (bad || *o == Outcome::Ok))
            .map(Outcome::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    r.text(prose(&format!(
        "Each hook is one shell line, run by `/bin/sh -c` in a process group of its own, \
         with stdin from /dev/null and its output on jobrun's stderr. `--on-start` runs \
         when the command starts, beside it, and never delays it. Once the pass has given \
         its slot back (so a slow hook never holds the job), `--on-success` runs after a \
         pass that ended {ok} and `--on-failure` after one that ended {bad}. A pass whose \
         command never ran (skipped, coalesced, a `--wait` that ran out) and a pass \
         stopped by the operator fire neither.",
        ok = fired(false),
        bad = fired(true),
    )));
    para(
        r,
        "A hook is limited by `--hook-timeout` (default 10s): past it its process group is \
         killed, and when its shell ends anything it left in its group is killed too. A \
         hook that fails, dies or is killed is logged as a warning and never changes the \
         pass's exit code or outcome. jobrun waits for its hooks (each bounded by the \
         timeout) before it exits. A hook does not see `JOBRUN_ON_START`, \
         `JOBRUN_ON_SUCCESS` or `JOBRUN_ON_FAILURE`, so a `jobrun run` inside a hook fires \
         no hooks of its own.",
    );
    para(
        r,
        "A hook sees the command's `JOBRUN_JOB`, `JOBRUN_PASS`, `JOBRUN_TOKEN` and \
         `JOBRUN_SLOT`, and:",
    );
    for (env, what) in HOOK_VARIABLES {
        item(r, vec![bold(env)], help_text(what));
    }
}

/// LOGS (jobrun(1)): the levels of jobrun's lines, the journal, syslog.
pub fn logs(r: &mut Roff) {
    use crate::report::Level;
    heading(r, "LOGS");
    r.text(prose(&format!(
        "jobrun writes one line per event on stderr, `jobrun: ` and the message. Every line \
         has a level. When stderr is the journal (`{}` names stderr's device and inode; a \
         child that inherits the variable with stderr elsewhere gets no prefixes) each line \
         starts with its sd-daemon(3) priority, `<3>` to `<6>`, so that `journalctl -p \
         warning` finds lost leases and evictions. The levels:",
        crate::report::JOURNAL_ENV
    )));
    for l in Level::ALL {
        item(
            r,
            vec![bold(l.as_str()), roman(format!(" <{}>", l.priority()))],
            help_text(l.meaning()),
        );
    }
    para(
        r,
        "With `run --syslog` each pass's outcome line also goes to syslog, facility cron: \
         an error when the pass ended badly, info when it ended ok, a notice otherwise.",
    );
}
