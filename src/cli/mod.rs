//! What the user can type: clap definitions, no logic but `plain`'s
//! reading of the plain `run` line without them. Every flag an
//! operator sets in a cron line also reads a `JOBRUN_*` variable.
//! Durations and names stay strings here; `settings` validates them with
//! messages that say why.

use clap::{Args, Parser, Subcommand};

mod plain;
mod run;
pub use plain::plain_run;
pub use run::*;

/// What jobrun is: `--help` and jobrun(1) open with it.
pub const INTRO: &str = "jobrun wraps a scheduled pass (a cron entry, a systemd timer, a ticker \
loop) so that no two passes of a job overlap, a pass killed without unwinding never blocks its \
job for long, and an operator can always see who holds what and fix it safely.";

#[derive(Debug, Parser)]
#[command(
    name = "jobrun",
    version = crate::SHOWN_VERSION,
    about = "Run scheduled passes under a renewed lease: never two at once, never silently stuck",
    long_about = format!("{INTRO}\n\n{}", crate::exit::summary())
)]
pub struct Cli {
    #[command(flatten)]
    pub store: StoreArgs,

    #[command(subcommand)]
    pub command: Command,
}

// The store options, global: every subcommand takes them. (A doc comment
// here would become the about of whatever flattens it.)
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The store: a SQLite file path, or a PostgreSQL connection string as
    /// libpq takes it (postgres://user@host/db?sslmode=verify-full, or
    /// host=... dbname=... key=value pairs; PG* variables and ~/.pgpass
    /// fill what it leaves out).
    /// Default: /var/lib/jobrun/jobrun.db for root,
    /// $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise.
    /// A password written here shows in ps to every user for the whole
    /// pass: use ~/.pgpass, PGPASSFILE or a client certificate. A
    /// JOBRUN_DB that holds a password is removed from the command's
    /// environment (a jobrun inside it then needs ~/.pgpass or its own
    /// --db).
    #[arg(long, global = true, env = "JOBRUN_DB", value_name = "PATH|URL")]
    pub db: Option<String>,

    /// Octal mode of the files jobrun creates for a SQLite store (the store,
    /// holder locks, wake files), e.g. 0660 for a group-shared store; a mode
    /// that lets others write is refused.
    /// Default: 0600 for a new store; a store that exists is used with the
    /// mode of its file (only its owner can change it), and the files made
    /// beside a group-shared one get its group.
    #[arg(long, global = true, env = "JOBRUN_DB_MODE", value_name = "MODE")]
    pub db_mode: Option<String>,
}

/// `jobrun run ...`, the line every tick of every job runs, parsed with
/// only `run`'s parser built under the same top level (`Cli` builds every
/// subcommand's). What it accepts and refuses is `Cli`'s: a test compares
/// them. It prints nothing itself: help, version and every error are
/// parsed again by `Cli`, which prints them, so the top level's texts
/// (the exit-code summary among them) are not built for every pass.
#[derive(Debug, Parser)]
#[command(name = "jobrun", version = crate::SHOWN_VERSION)]
pub struct RunOnly {
    #[command(flatten)]
    pub store: StoreArgs,

    #[command(subcommand)]
    pub command: RunCommand,
}

/// `run` alone (its help is `RunArgs`'s).
#[derive(Debug, Subcommand)]
pub enum RunCommand {
    Run(RunArgs),
}

impl From<RunOnly> for Cli {
    fn from(r: RunOnly) -> Cli {
        let RunCommand::Run(args) = r.command;
        Cli {
            store: r.store,
            command: Command::Run(args),
        }
    }
}

// Parsed once per process: `run`'s many settings cost nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    // Its help is `RunArgs`'s, shared with `RunOnly`.
    Run(RunArgs),
    /// Show every job: state, holder, evidence, queue, last outcome.
    ///
    /// One row per job and slot, for every job the store knows or only the
    /// NAMEs given: the state, the holder with the evidence verdict on
    /// whether it lives, how long it has held, when it last renewed and
    /// when its lease expires, the queue behind it and the job's last
    /// outcome. The first line names the store read, so an operator can
    /// tell root's store from their own.
    ///
    /// The first command to run when a job did not run or seems stuck.
    /// --json prints the same as a stable document for scripts and
    /// monitoring.
    Status(StatusArgs),
    /// Clear locks whose holder is dead or whose lease lapsed unseen.
    ///
    /// For each held lock of the NAMEs (or --all), clear-locks prints the
    /// holder with its evidence verdict and frees the slot when the holder
    /// is dead, or when its lease lapsed and nothing shows it alive. Queue
    /// rows of dead waiters (ghosts) are removed too. A holder believed
    /// alive is kept unless --force is given, the operator's deliberate
    /// override, which is logged; a live waiter is never removed. Clearing
    /// never stops anything: of a --containers pass, it says which
    /// containers still run.
    ///
    /// The next pass of a job frees a dead holder by itself: clear-locks is
    /// for an operator who wants a lock gone now, or wants to see why it
    /// stays. --dry-run prints exactly what would happen and changes
    /// nothing.
    ClearLocks(ClearArgs),
    /// Stop in-flight passes (for upgrade scripts) so they release at once.
    ///
    /// stop-due sends TERM to the wrapper of every in-flight pass of the
    /// NAMEs (or --all) that it can verify as the recorded holder: same
    /// machine, boot and PID namespace, and the process start time on
    /// record. Each wrapper forwards the signal to its command, waits for it
    /// and releases its lock at once. A pass whose wrapper is gone but
    /// whose command runs on (orphaned) has its process group signalled
    /// directly. Anything it cannot verify (another host, boot or
    /// namespace, a reused pid) is listed and never signalled. The
    /// containers of a --containers pass, orphaned or not, are stopped
    /// through its engine by the pass's label (ENGINE stop -t, with
    /// --kill-after or 10 seconds).
    ///
    /// Used by upgrade scripts after pause: --wait waits until the
    /// signalled passes released their locks, and --kill-after KILLs a
    /// command still holding that long after the TERM.
    StopDue(StopArgs),
    /// Hold new passes (and queue promotion) of jobs.
    ///
    /// While a job is paused, a new pass of it skips with the conflict
    /// code (or keeps waiting with --wait) and no waiter is promoted;
    /// passes already running go on, and dead holders are still freed.
    /// --all pauses every job, including jobs first seen while the pause
    /// stands.
    ///
    /// A pause may be taken on behalf of a tag (--as upgrade): a job stays
    /// paused while any pause on it stands, and each resume lifts only the
    /// pauses of its own tag, so an upgrade script never lifts the pause an
    /// operator set by hand. --reason is shown by status and by every
    /// skipped pass.
    Pause(PauseArgs),
    /// Lift a pause: your own (no --as) or the one a tag owns (--as TAG).
    ///
    /// Without --as, resume lifts only pauses set without a tag; with --as
    /// TAG, only the pauses TAG owns. Whatever still stands on a job after
    /// the resume is named, with the command that would lift it, so a job
    /// that stays paused never looks resumed.
    ///
    /// An upgrade script ends with resume --all --as upgrade, which leaves
    /// an operator's own pause in place.
    Resume(ResumeArgs),
    /// Show recorded passes and a duration summary per job.
    ///
    /// Every pass that took a slot or joined the queue ends in one history
    /// row: when it started, how long it waited and ran, its exit code or
    /// signal, and its outcome. Passes are listed newest start first;
    /// --since, --outcome and --limit choose which.
    ///
    /// The summary per job (count, mean, p50, p95 and max duration, count
    /// per outcome) measures how long passes of the job really take, so an
    /// operator can choose --lease and --max-hold from measured pass
    /// lengths rather than a guess.
    History(HistoryArgs),
    /// Remove free jobs, their history and its kept output from the store.
    ///
    /// For jobs the store no longer needs to show: a renamed or retired
    /// job. Only a free job is forgotten (no holder, no waiter, no pause
    /// standing on it); anything else would lose what an operator or a
    /// pass still relies on, so it is refused with the reason. The check
    /// and the removal are one transaction.
    ///
    /// A forgotten job seen again starts its fencing tokens above every
    /// token handed out before, so a token never repeats.
    Forget(ForgetArgs),
    /// Draw when passes ran: one row per job, time across the width.
    ///
    /// For the operator who would rather look than read: one row per job
    /// (the NAMEs given, or every job), time from --since ago (default 24h)
    /// to now across the terminal's width (COLUMNS, else the terminal's,
    /// else 100 columns). Passes are bars (= for one holding a slot now),
    /// those that ended badly (failed, killed, lost-lease, spawn-failed,
    /// timeout, abandoned) marked X apart from ok ones, skipped passes are ticks,
    /// queue waits (and passes queued now) are shaded, and a wait that ran
    /// out ends in !. Where passes meet in one column, the worst shows. Colour only on a terminal, and never with NO_COLOR.
    Timeline(TimelineArgs),
    /// A monitoring plugin: are jobs late, failing, stuck? (Nagios, Icinga)
    ///
    /// check judges every job (or the NAMEs given) from what the store
    /// recorded and answers by the monitoring-plugins conventions: the
    /// first line is a summary with perfdata, then one line per job that is
    /// not OK with the reason in words; the exit code is 0 OK, 1 WARNING,
    /// 2 CRITICAL, 3 UNKNOWN. This is the one command whose bad usage exits
    /// 3 (UNKNOWN), as are an unknown NAME and a missing or unreadable
    /// store.
    ///
    /// A job is late when no pass started since its next expected start
    /// plus grace: expected from the interval or cron schedule it declared
    /// on run (--every, --schedule with --tz), or learned from its own history once it has 5 attempts (the largest
    /// gap among its latest 20, so a gap it has had before never pages;
    /// attempts of several hosts for one tick count once). It is failing
    /// when its last passes that took a slot ended badly (failed, killed,
    /// lost-lease, spawn-failed, abandoned); stuck when a pass holds longer
    /// than --max-running (or 3 times the job's p95 once it has 10 passes,
    /// or past its --max-idle without a touch). A dead holder not yet
    /// freed, a queue head waiting past --max-wait and a pause older than
    /// --max-paused warn. Thresholds given here override the job's own;
    /// --max-* limits left unset are not checked.
    Check(CheckArgs),
    /// Record progress of the pass this command runs in (for --max-idle).
    ///
    /// Run by a pass's command (or anything it starts): touch finds its
    /// pass through JOBRUN_JOB, JOBRUN_PASS and JOBRUN_TOKEN, and records
    /// that the pass made progress, on the store's clock. A pass run with
    /// --max-idle D that has not touched for D is hung: its renewals stop
    /// and its lease lapses. check reports it stuck before that. A token
    /// that is not the current holder's is refused (exit 1): the pass lost
    /// its slot.
    Touch,
    /// Print every job's figures for Prometheus (text exposition format).
    ///
    /// Per job: when its last pass started, last succeeded and last
    /// failed, how long its last pass ran, its passes by outcome (a
    /// counter that pruning history never lowers), slots held, queue
    /// length, whether it is paused, the interval check expects, and what
    /// check says of it. Label values are escaped; samples carry no
    /// timestamps.
    ///
    /// --textfile PATH replaces PATH whole (a file beside it, renamed over
    /// it) for node_exporter's textfile collector; with
    /// JOBRUN_METRICS_TEXTFILE set, every run refreshes that file after its
    /// pass, so the collector sees a pass within its scrape interval.
    Metrics(MetricsArgs),
    /// Write the man pages and shell completions (for maintainers).
    #[command(hide = true)]
    Generate(GenerateArgs),
}

#[derive(Debug, Args)]
pub struct Targets {
    /// Jobs to act on.
    #[arg(
        value_name = "NAME",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub names: Vec<String>,
    /// Act on every job.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Jobs to show (default: all).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Machine-readable output (its fields: JSON OUTPUT in jobrun(1)).
    #[arg(long)]
    pub json: bool,
    /// Show every text in full instead of fitting 100 columns (long
    /// verdicts, reasons, hosts and names are otherwise wrapped or cut).
    #[arg(long)]
    pub wide: bool,
}

#[derive(Debug, Args)]
pub struct ClearArgs {
    #[command(flatten)]
    pub targets: Targets,
    /// Print what would be done and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also clear locks whose holder is believed alive (logged).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct StopArgs {
    #[command(flatten)]
    pub targets: Targets,
    /// Wait until the signalled passes released their locks.
    #[arg(long, value_name = "DURATION")]
    pub wait: Option<String>,
    /// With --wait: KILL the command of a pass still holding this long after
    /// the TERM (its wrapper then reaps it and releases).
    #[arg(long, value_name = "DURATION")]
    pub kill_after: Option<String>,
    /// Print what would be signalled and signal nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub targets: Targets,
    /// Why, shown by status and by every skipped pass.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Pause on behalf of TAG (e.g. upgrade): only resume --as TAG lifts
    /// it, and it lifts no other pause.
    #[arg(long = "as", value_name = "TAG")]
    pub owner: Option<String>,
    /// Also pause NAMEs the store does not know yet, before their first
    /// pass (without it, a name the store has never seen is refused as a
    /// typo).
    #[arg(long)]
    pub new: bool,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub targets: Targets,
    /// Lift only the pauses TAG owns (without it: only pauses without an
    /// owner; the others are named and stay).
    #[arg(long = "as", value_name = "TAG")]
    pub owner: Option<String>,
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// Jobs to forget: each must be free (no holder, no waiter, not paused).
    #[arg(value_name = "NAME", required = true)]
    pub names: Vec<String>,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only this job.
    pub name: Option<String>,
    /// How many passes to show (the newest that match). The summary below
    /// them covers every pass recorded, pruned ones too (p50 and p95
    /// within 1%); with --since or --outcome, every kept pass that
    /// matches, not only these.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub limit: u32,
    /// Oldest first (the default is newest first, by start time).
    #[arg(long)]
    pub reverse: bool,
    /// Only passes that started at most this long ago (e.g. 2h, 7d).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Only passes with this outcome.
    #[arg(long, value_name = "OUTCOME", value_parser = outcome_names())]
    pub outcome: Option<String>,
    /// Machine-readable output (its fields: JSON OUTPUT in jobrun(1)).
    #[arg(long)]
    pub json: bool,
    /// Print the output kept for pass PASS (a pass id, as history shows
    /// it), with control characters other than newline and tab escaped.
    #[arg(long, value_name = "PASS", conflicts_with_all = ["name", "json", "since", "outcome", "reverse"])]
    pub show: Option<String>,
}

#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// Jobs to draw (default: all).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// How far back the picture starts (e.g. 6h, 7d); passes that started
    /// before it are not drawn.
    #[arg(long, default_value = "24h", value_name = "DURATION")]
    pub since: String,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Jobs to check (default: every job).
    #[arg(value_name = "NAME", conflicts_with = "all")]
    pub names: Vec<String>,
    /// Check every job (the default).
    #[arg(long)]
    pub all: bool,
    /// Machine-readable output (its fields: JSON OUTPUT in jobrun(1)).
    #[arg(long)]
    pub json: bool,
    /// Also say, for every job, what its lateness is judged on (declared,
    /// learned, or why there is no lateness verdict).
    #[arg(short, long)]
    pub verbose: bool,
    /// Judge lateness on this interval instead of the job's own.
    #[arg(long, value_name = "DURATION", conflicts_with = "schedule")]
    pub every: Option<String>,
    /// Judge lateness on this cron schedule instead of the job's own.
    #[arg(long, value_name = "CRON")]
    pub schedule: Option<String>,
    /// The time zone of --schedule (default: the host's).
    #[arg(long, value_name = "ZONE", requires = "schedule")]
    pub tz: Option<String>,
    /// How late a pass may start before the job is late (default: half the
    /// interval; half the typical gap when learned).
    #[arg(long, value_name = "DURATION")]
    pub grace: Option<String>,
    /// WARNING once late by more than this past the expected start: a
    /// duration (10m) or a multiple of the interval (1.5x). Default: the
    /// grace.
    #[arg(short, long, value_name = "DURATION|Nx")]
    pub warning: Option<String>,
    /// CRITICAL once late by more than this past the expected start: a
    /// duration or a multiple of the interval. Default: the grace and one
    /// further interval.
    #[arg(short, long, value_name = "DURATION|Nx")]
    pub critical: Option<String>,
    /// Failing once this many passes in a row ended badly.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub failures: u32,
    /// Failing until this many passes in a row ended well.
    #[arg(long, default_value_t = 1, value_name = "M",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub recover: u32,
    /// Stuck when a pass holds its slot longer than this (replaces the
    /// 3x p95 rule).
    #[arg(long, value_name = "DURATION")]
    pub max_running: Option<String>,
    /// Long queue when the first waiter has waited longer than this.
    #[arg(long, value_name = "DURATION")]
    pub max_wait: Option<String>,
    /// Old pause when a pause has stood longer than this.
    #[arg(long, value_name = "DURATION")]
    pub max_paused: Option<String>,
}

#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Write to PATH (replaced whole, atomically) instead of standard
    /// output: node_exporter's textfile collector reads *.prom files.
    #[arg(long, env = "JOBRUN_METRICS_TEXTFILE", value_name = "PATH")]
    pub textfile: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Directory for the man pages.
    #[arg(long, default_value = "man")]
    pub man: std::path::PathBuf,
    /// Directory for the shell completions.
    #[arg(long, default_value = "completions")]
    pub completions: std::path::PathBuf,
}

/// The outcomes `history --outcome` takes: `Outcome::ALL`'s names.
/// `timed-out`, the name earlier jobruns gave `wait-expired`, is taken too
/// (hidden), and means `wait-expired`.
fn outcome_names() -> clap::builder::PossibleValuesParser {
    use crate::policy::outcome::Outcome;
    clap::builder::PossibleValuesParser::new(Outcome::ALL.map(|o| {
        let v = clap::builder::PossibleValue::new(o.as_str());
        if o == Outcome::WaitExpired {
            v.alias(Outcome::WAIT_EXPIRED_BEFORE)
        } else {
            v
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// `RunOnly` accepts exactly what `Cli` accepts of a `jobrun run` line,
    /// to the same values; whatever it refuses (help, version and errors
    /// included) is then parsed by `Cli`, which prints it.
    #[test]
    fn the_run_parser_is_the_full_ones_run() {
        let lines: &[&[&str]] = &[
            &["x", "--", "true"],
            &["x", "--", "sh", "-c", "exit 3"],
            &["--db", "/tmp/s.db", "x", "--", "true"],
            &["--db=/tmp/s.db", "--db-mode", "0660", "x", "--", "true"],
            &["x", "--lease", "10s", "--max-hold", "1h", "--", "true"],
            &[
                "-E", "3", "--wait", "5s", "--slots", "2", "x", "--", "a", "--b",
            ],
            &[
                "--on-lost",
                "term",
                "--timeout",
                "1m",
                "--kill-after",
                "2s",
                "x",
                "--",
                "t",
            ],
            &["--on-lost", "sometimes", "x", "--", "t"],
            &["x", "true"],
            &["x"],
            &[],
            &["--help"],
            &["-h"],
            &["--version"],
            &["--no-such-flag", "x", "--", "true"],
            &["x", "y", "--", "true"],
            &["--", "true"],
            &["--lease", "x", "--", "true"],
        ];
        for line in lines {
            let argv: Vec<&str> = ["jobrun", "run"]
                .iter()
                .chain(line.iter())
                .copied()
                .collect();
            let full = Cli::try_parse_from(&argv);
            match RunOnly::try_parse_from(&argv) {
                Ok(r) => {
                    let full = full.unwrap_or_else(|e| panic!("{argv:?}: only Cli refuses: {e}"));
                    assert_eq!(
                        format!("{:?}", Cli::from(r)),
                        format!("{full:?}"),
                        "{argv:?}"
                    );
                }
                Err(_) => assert!(full.is_err(), "{argv:?}: only RunOnly refuses"),
            }
        }
        // The same `run` under the same top level.
        let mut full = Cli::command();
        full.build();
        let mut only = RunOnly::command();
        only.build();
        let run = |c: &mut clap::Command| {
            let r = c.find_subcommand_mut("run").unwrap();
            (
                r.render_long_help().to_string(),
                r.render_usage().to_string(),
            )
        };
        assert_eq!(run(&mut full), run(&mut only));
        assert_eq!(full.get_name(), only.get_name());
        assert_eq!(full.get_version(), only.get_version());
    }
}
