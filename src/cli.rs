//! What the user can type: clap definitions only, no logic. Every flag an
//! operator sets in a cron line also reads a `JOBRUN_*` variable.
//! Durations and names stay strings here; `settings` validates them with
//! messages that say why.

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "jobrun",
    version = crate::VERSION,
    about = "Run scheduled passes under a renewed lease: never two at once, never silently stuck",
    long_about = "jobrun wraps a scheduled pass (a cron entry, a systemd timer, a ticker loop) \
so that no two passes of a job overlap, a pass killed without unwinding never blocks its job \
for long, and an operator can always see who holds what and fix it safely.\n\n\
Exit codes: the child's own code; 128+N when the child died of signal N; the conflict code \
(-E, default 0) when the job is held or paused; 1 when an operator command could not finish; \
125 when jobrun itself failed (also when a command other than run or pause names a store that \
does not exist); 126 when the command cannot be executed; 127 when it is not found. An operator \
command whose output reader went away is ended by SIGPIPE, as ls is (141 in the shell)."
)]
pub struct Cli {
    /// The store: a SQLite file path, or a PostgreSQL connection string as
    /// libpq takes it (postgres://user@host/db?sslmode=verify-full, or
    /// host=... dbname=... key=value pairs; PG* variables and ~/.pgpass
    /// fill what it leaves out).
    /// Default: /var/lib/jobrun/jobrun.db for root,
    /// $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise.
    #[arg(long, global = true, env = "JOBRUN_DB", value_name = "PATH|URL")]
    pub db: Option<String>,

    /// Octal mode of the files jobrun creates for a SQLite store (the store,
    /// holder locks, wake files), e.g. 0660 for a group-shared store; a mode
    /// that lets others write is refused.
    #[arg(
        long,
        global = true,
        env = "JOBRUN_DB_MODE",
        value_name = "MODE",
        default_value = "0600"
    )]
    pub db_mode: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take a slot of NAME and run COMMAND under a renewed lease.
    Run(RunArgs),
    /// Show every job: state, holder, evidence, queue, last outcome.
    Status(StatusArgs),
    /// Clear locks whose holder is dead or whose lease lapsed unseen.
    ClearLocks(ClearArgs),
    /// Stop in-flight passes (for upgrade scripts) so they release at once.
    StopDue(StopArgs),
    /// Hold new passes (and queue promotion) of jobs.
    Pause(PauseArgs),
    /// Lift a pause: your own (no --as) or the one a tag owns (--as TAG).
    Resume(ResumeArgs),
    /// Show recorded passes and a duration summary per job.
    History(HistoryArgs),
    /// Remove free jobs and their history from the store.
    Forget(ForgetArgs),
    /// Write the man pages and shell completions (for maintainers).
    #[command(hide = true)]
    Generate(GenerateArgs),
}

/// `--on-lost`, as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnLostArg {
    /// Keep running: single-flight is a convenience; the fencing token is
    /// the bound.
    Continue,
    /// Stop the child as if the wrapper had received TERM.
    Term,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job: 1-200 printable characters, no whitespace at either end, no
    /// control, bidirectional-override (U+202A-U+202E, U+2066-U+2069,
    /// U+200E, U+200F, U+061C) or zero-width (U+200B-U+200D, U+2060, U+FEFF)
    /// characters.
    pub name: String,

    /// The command and its arguments, run directly (no shell); passed
    /// byte for byte, UTF-8 or not.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,

    /// The lease window, renewed every third of it (at least 3s).
    #[arg(
        long,
        env = "JOBRUN_LEASE",
        default_value = "5m",
        value_name = "DURATION"
    )]
    pub lease: String,

    /// Backstop for a pass that is alive but hung: past it renewals stop and
    /// the lease lapses (at least the lease).
    #[arg(
        long,
        env = "JOBRUN_MAX_HOLD",
        default_value = "24h",
        value_name = "DURATION"
    )]
    pub max_hold: String,

    /// After forwarding TERM or INT, wait this long before sending KILL.
    #[arg(
        long,
        env = "JOBRUN_KILL_AFTER",
        default_value = "10s",
        value_name = "DURATION"
    )]
    pub kill_after: String,

    /// What happens to the child when the lease is lost.
    #[arg(long, env = "JOBRUN_ON_LOST", value_enum, default_value = "continue")]
    pub on_lost: OnLostArg,

    /// Exit code when the job is held or paused (like flock -E).
    #[arg(short = 'E', long, env = "JOBRUN_CONFLICT_EXIT_CODE", default_value_t = crate::exit::CONFLICT_DEFAULT,
          value_parser = clap::value_parser!(i32).range(0..=255), value_name = "CODE")]
    pub conflict_exit_code: i32,

    /// Do not print the line naming the holder when the job is held.
    /// JOBRUN_QUIET takes 1/0, true/false, yes/no or on/off.
    #[arg(short, long, env = "JOBRUN_QUIET", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub quiet: bool,

    /// How many passes of the job may run at once; the smallest among the
    /// live holders and waiters binds.
    #[arg(long, env = "JOBRUN_SLOTS", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10000), value_name = "N")]
    pub slots: u32,

    /// Queue for a slot for up to this long instead of skipping (0: do not wait).
    #[arg(
        short,
        long,
        env = "JOBRUN_WAIT",
        default_value = "0",
        value_name = "DURATION"
    )]
    pub wait: String,

    /// Join an identical queued pass (same job, argv and working directory)
    /// instead of queueing another.
    #[arg(long, env = "JOBRUN_COALESCE")]
    pub coalesce: bool,

    /// Exit code of a pass that coalesced into a queued one.
    #[arg(long, env = "JOBRUN_COALESCED_EXIT_CODE", default_value_t = 0,
          value_parser = clap::value_parser!(i32).range(0..=255), value_name = "CODE")]
    pub coalesced_exit_code: i32,

    /// How many passes of history to keep per job.
    #[arg(long, env = "JOBRUN_KEEP_HISTORY", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub keep_history: u32,
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
    /// How many passes to show (the newest that match).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub limit: u32,
    /// Oldest first (the default is newest first, by start time).
    #[arg(long)]
    pub reverse: bool,
    /// Only passes that started at most this long ago (e.g. 2h, 7d).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Only passes with this outcome.
    #[arg(long, value_name = "OUTCOME", value_parser = [
        "ok", "failed", "skipped", "lost-lease", "spawn-failed", "killed", "stopped",
        "coalesced", "timed-out",
    ])]
    pub outcome: Option<String>,
    /// Machine-readable output (its fields: JSON OUTPUT in jobrun(1)).
    #[arg(long)]
    pub json: bool,
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
