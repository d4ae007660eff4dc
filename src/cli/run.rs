//! `run`'s arguments and the enums they take, moved out of `cli/mod.rs` to
//! keep it under the 600-line rule; `cli` re-exports them.

use clap::Args;

/// `--on-lost`, as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnLostArg {
    /// Keep running: single-flight is a convenience; the fencing token is
    /// the bound.
    Continue,
    /// Stop the child as if the wrapper had received TERM.
    Term,
}

/// `--containers`, as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContainersArg {
    /// Docker (and docker compose): asks `docker` from the judge's PATH.
    Docker,
    /// Podman: asks `podman` from the judge's PATH.
    Podman,
}

/// Take a slot of NAME and run COMMAND under a renewed lease.
///
/// The line to put in a crontab or a systemd unit. jobrun takes one of
/// the job's slots (--slots, default 1) and runs COMMAND directly, with
/// no shell, in a process group of its own. A helper thread renews the
/// lease every third of its window while the command runs; the slot is
/// released, and the pass recorded in history, only once the command
/// and its process group are gone.
///
/// When every slot is held or the job is paused, the pass prints one
/// line naming the holder and exits with the conflict code (-E), or
/// queues for a slot in arrival order with --wait. A holder that died
/// without releasing is freed at once on the same machine; elsewhere
/// its lease lapses within one window. A holder believed alive is never
/// freed, even past its lease, unless it held past its max hold.
///
/// With --containers, the work the command hands to a container engine
/// (docker compose run, podman run) is part of the pass: its containers
/// carry the label in JOBRUN_LABEL, the pass lives while its processes
/// or those containers run, and the slot is released only once the
/// engine says none of them runs.
///
/// With JOBRUN_METRICS_TEXTFILE set, the pass refreshes that file with
/// jobrun metrics once it ended, for node_exporter's textfile
/// collector; a file it cannot write is said and changes nothing else.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job: 1-200 printable characters, no whitespace at either end, no
    /// control, bidirectional-override (U+202A-U+202E, U+2066-U+2069,
    /// U+200E, U+200F, U+061C) or zero-width (U+200B-U+200D, U+2060, U+FEFF)
    /// characters, nor any other invisible (Default_Ignorable), unassigned
    /// or private-use code point.
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
    /// the lease lapses (at least the lease). The command runs on: to end
    /// a pass that takes too long, use --timeout.
    #[arg(
        long,
        env = "JOBRUN_MAX_HOLD",
        default_value = "24h",
        value_name = "DURATION"
    )]
    pub max_hold: String,

    /// Stop the command this long after it started: its whole process
    /// group gets TERM, then KILL after --kill-after; the pass exits 124
    /// (as timeout(1)) with the outcome timeout, and releases its slot once
    /// the group is gone. Unlike --max-hold, which only lets the lease
    /// lapse and leaves a hung command running, --timeout ends the
    /// command: use it for the longest a pass may take, and keep --max-hold
    /// as the backstop for a wrapper that cannot stop its command (0: no
    /// timeout).
    #[arg(long, env = "JOBRUN_TIMEOUT", value_name = "DURATION")]
    pub timeout: Option<String>,

    /// Wait a random time in [0, DURATION), drawn afresh each pass, before
    /// trying for a slot (systemd's RandomizedDelaySec=). The wait counts
    /// in neither the pass's wait nor its duration; a TERM during it ends
    /// the pass at once (143) with nothing taken or recorded.
    #[arg(long, env = "JOBRUN_JITTER", value_name = "DURATION")]
    pub jitter: Option<String>,

    /// Wait a stable offset in [0, DURATION), derived from the host identity
    /// and the job name, before trying for a slot (systemd's
    /// FixedRandomDelay=): a fleet whose crontabs all fire at the same
    /// minute arrives spread out, each host in its own place. Adds to
    /// --jitter.
    #[arg(long, env = "JOBRUN_SPREAD", value_name = "DURATION")]
    pub spread: Option<String>,

    /// A pass that has not run `jobrun touch` for this long is hung: past
    /// it renewals stop and the lease lapses, as at --max-hold counted from
    /// the last touch, so a later pass may take over (at least the lease;
    /// without it, only --max-hold bounds the pass).
    #[arg(long, env = "JOBRUN_MAX_IDLE", value_name = "DURATION")]
    pub max_idle: Option<String>,

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

    /// The command hands its work to this container engine: the pass gets
    /// JOBRUN_LABEL to label its containers with, and whoever judges or
    /// stops the pass asks the engine about that label. The pass lives
    /// while its processes or its containers run.
    #[arg(long, env = "JOBRUN_CONTAINERS", value_enum, value_name = "ENGINE")]
    pub containers: Option<ContainersArg>,

    /// Run the job once per window of DURATION (whole seconds), windows
    /// aligned to the Unix epoch on the store's clock (the server's on
    /// PostgreSQL, never a host's): the first pass of a window claims it
    /// with its slot; later passes in a window done skip as `done`, on
    /// every host. The command gets the window's start in JOBRUN_WINDOW.
    #[arg(
        long,
        env = "JOBRUN_ONCE_PER",
        value_name = "DURATION",
        conflicts_with = "window"
    )]
    pub once_per: Option<String>,

    /// Run the job once per window KEY (validated like a job name), e.g.
    /// --window "$(date +\%F)" for a calendar day in local time: as
    /// --once-per, with the window the operator names. The command gets
    /// KEY in JOBRUN_WINDOW.
    #[arg(long, env = "JOBRUN_WINDOW_KEY", value_name = "KEY")]
    pub window: Option<String>,

    /// Claims a window allows when its claimers did not end ok (failed,
    /// killed, abandoned...): any host may claim it again until then;
    /// after that the window is given up.
    #[arg(long, env = "JOBRUN_WINDOW_ATTEMPTS", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=1000), value_name = "N")]
    pub window_attempts: u32,

    /// A shell line run (by /bin/sh -c) when the command starts, beside it,
    /// never delaying it; it sees JOBRUN_JOB, JOBRUN_PASS, JOBRUN_TOKEN and
    /// JOBRUN_SLOT.
    #[arg(long, env = "JOBRUN_ON_START", value_name = "SHELL-LINE")]
    pub on_start: Option<String>,

    /// A shell line run after a pass that ended ok, once its slot is
    /// released; it also sees JOBRUN_OUTCOME, JOBRUN_EXIT_CODE and
    /// JOBRUN_DURATION_MS.
    #[arg(long, env = "JOBRUN_ON_SUCCESS", value_name = "SHELL-LINE")]
    pub on_success: Option<String>,

    /// A shell line run after a pass that ended badly (failed, killed,
    /// lost-lease, spawn-failed, timeout), once its slot is released; never
    /// after a pass whose command did not run, nor one stopped by the
    /// operator. With --output quiet-unless-failed it also gets the
    /// captured output's path in JOBRUN_OUTPUT_FILE.
    #[arg(long, env = "JOBRUN_ON_FAILURE", value_name = "SHELL-LINE")]
    pub on_failure: Option<String>,

    /// How long a hook may run: past it its process group is killed (and
    /// logged); a hook never changes the pass's exit code or outcome.
    #[arg(
        long,
        env = "JOBRUN_HOOK_TIMEOUT",
        default_value = "10s",
        value_name = "DURATION"
    )]
    pub hook_timeout: String,

    /// Also send each pass's outcome line to syslog, facility cron (for
    /// hosts without a journal): an error when the pass ended badly.
    /// JOBRUN_SYSLOG takes 1/0, true/false, yes/no or on/off.
    #[arg(long, env = "JOBRUN_SYSLOG", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub syslog: bool,
    /// The job is meant to run this often (e.g. 5m, 1d): `check` calls it
    /// late when no pass started for that long plus its grace. Stored with
    /// the job; the latest declaration wins. Without one, check learns the
    /// job's cadence from its history.
    #[arg(
        long,
        env = "JOBRUN_EVERY",
        value_name = "DURATION",
        conflicts_with = "schedule"
    )]
    pub every: Option<String>,

    /// The job runs on this cron schedule (five crontab fields, e.g.
    /// '*/5 * * * *'), in --tz or the host's zone, correct across DST:
    /// `check` calls it late when no pass started since a firing plus its
    /// grace. Stored with the job; the latest declaration wins.
    #[arg(long, env = "JOBRUN_SCHEDULE", value_name = "CRON")]
    pub schedule: Option<String>,

    /// The time zone of --schedule, by its name in the system's zoneinfo
    /// (e.g. Europe/Berlin); default: the host's.
    #[arg(long, env = "JOBRUN_TZ", value_name = "ZONE", requires = "schedule")]
    pub tz: Option<String>,

    /// How many passes of history to keep per job.
    #[arg(long, env = "JOBRUN_KEEP_HISTORY", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub keep_history: u32,

    /// Also prune passes that ended longer ago than this (e.g. 30d), the
    /// newest always kept; the counters and figures of the job keep
    /// counting them.
    #[arg(long, env = "JOBRUN_KEEP_HISTORY_FOR", value_name = "DURATION")]
    pub keep_history_for: Option<String>,

    /// Where the command's stdout and stderr go: inherit (jobrun's own), or
    /// quiet-unless-failed (like chronic: both into a private spool, in the
    /// order written, printed to jobrun's stdout only when the pass did not
    /// end ok, so cron mails only failures).
    #[arg(long, env = "JOBRUN_OUTPUT", value_enum, default_value = "inherit")]
    pub output: OutputArg,

    /// With --output quiet-unless-failed: the most output a spool keeps
    /// (at least 1KiB); past it the head and the tail stay and a line
    /// marks the cut.
    #[arg(
        long,
        env = "JOBRUN_OUTPUT_LIMIT",
        default_value = "10MiB",
        value_name = "SIZE"
    )]
    pub output_limit: String,

    /// With --output quiet-unless-failed: keep the last SIZE of the output
    /// of a pass that ended badly with its history row, for history --show
    /// (0: keep none).
    #[arg(
        long,
        env = "JOBRUN_KEEP_OUTPUT",
        default_value = "64KiB",
        value_name = "SIZE"
    )]
    pub keep_output: String,

    /// The most kept output the whole store holds; past it the oldest is
    /// dropped first.
    #[arg(
        long,
        env = "JOBRUN_KEEP_OUTPUT_TOTAL",
        default_value = "64MiB",
        value_name = "SIZE"
    )]
    pub keep_output_total: String,
}

/// `--output`, as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputArg {
    /// The command writes to jobrun's own stdout and stderr.
    Inherit,
    /// Spool the output; print it only when the pass did not end ok.
    QuietUnlessFailed,
}
