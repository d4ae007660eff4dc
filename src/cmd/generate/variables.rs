//! The variable tables the ENVIRONMENT and HOOKS sections list, moved out of
//! `reference.rs` to keep it under the 600-line rule; `reference` re-exports them.

/// The variables jobrun reads that no option sets.
pub const SETTING_VARIABLES: [(&str, &str); 8] = [
    (
        crate::process::identity::HOST_ENV,
        "The host name recorded with a pass (default: the machine's host name), for \
         containers whose host name is not stable.",
    ),
    (
        crate::process::identity::BOOT_ID_ENV,
        "The boot id recorded with a pass (default: {/proc/sys/kernel/random/boot_id}); a \
         test seam, like `JOBRUN_CLOCK_SKEW`.",
    ),
    (
        crate::cron_log::SOCKET_ENV,
        "The unix socket `--syslog` sends to instead of the system's (`/dev/log`): a test \
         seam.",
    ),
    (
        crate::clock::SKEW_ENV,
        "A duration (`1h`, `-1h`, at most 100 years) added to this host's wall clock, \
         never to its boot clock: a test seam for clocks that disagree.",
    ),
    (
        crate::store::OPEN_PAUSE_ENV,
        "The path of a FIFO that jobrun reads to its end after checking a SQLite store's \
         files and before opening the store: a test seam, like `JOBRUN_CLOCK_SKEW`, for \
         a store replaced in that moment (refused: what is opened must be what was \
         checked). Anything but a FIFO there is ignored.",
    ),
    (
        crate::policy::delay::SEED_ENV,
        "Any text: `run --jitter` draws its wait from it instead of the kernel's randomness, \
         the same wait for the same text and job (a test seam; `--spread` needs none).",
    ),
    (
        crate::store::elsewhere::HANDED_ENV,
        "Set by a jobrun built without the PostgreSQL store to its version when it hands a \
         command on such a store to the `jobrun-pg` beside it; `jobrun-pg` takes it out of \
         its environment (the command never sees it) and warns when it names another \
         version. Not for setting by hand.",
    ),
    (
        crate::trace::TRACE_ENV,
        "When set, `run` prints on standard error, at exit, one `jobrun-phase NAME \
         NANOSECONDS` line (`CLOCK_MONOTONIC`) as each phase of the pass ends: the \
         benchmark's phase table (`scripts/bench.sh phases`).",
    ),
];

/// The variables jobrun gives the command.
pub const COMMAND_VARIABLES: [(&str, &str); 7] = [
    (crate::spawn::JOB_ENV, "The job's name."),
    (
        crate::spawn::TOKEN_ENV,
        "The fencing token: it strictly increases every time any pass takes a slot of \
         the job; hand it to the systems the pass writes to, so they can refuse a stale \
         holder.",
    ),
    (
        crate::spawn::SLOT_ENV,
        "The slot the pass holds (0 to `--slots` minus 1).",
    ),
    (
        crate::process::identity::PASS_ENV,
        "The pass's unique id, as `status` and `history` show it; everything the command \
         starts inherits it.",
    ),
    (
        crate::process::identity::STORE_ENV,
        "On a PostgreSQL store only: the stamp its schema got at creation. A row of another \
         store that names this pass is then not taken for it: `stop-due` on that store \
         never signals it.",
    ),
    (
        crate::engine::LABEL_ENV,
        "With `--containers` only: `jobrun.pass=` and the pass's id, the label its \
         containers must carry (`--label \"$JOBRUN_LABEL\"`); whoever judges or stops the \
         pass asks the engine about that label.",
    ),
    (
        crate::cmd::run::WINDOW_ENV,
        "With `--once-per` or `--window` only: the window the pass claimed: its start in Unix \
         seconds on the store's clock for `--once-per`, the key for `--window`. The command \
         can fence its writes with it.",
    ),
];

/// The variables a hook finds, beside those the command gets.
pub const HOOK_VARIABLES: [(&str, &str); 4] = [
    (
        crate::hook::OUTCOME_ENV,
        "End hooks only: how the pass ended, as history records it (see OUTCOMES in \
         jobrun-history(1)).",
    ),
    (
        crate::hook::EXIT_CODE_ENV,
        "End hooks only: the code the pass exits with (128+N when the command died of \
         signal N).",
    ),
    (
        crate::hook::DURATION_ENV,
        "End hooks only: how long the command ran, in milliseconds, as history records it.",
    ),
    (
        crate::hook::OUTPUT_FILE_ENV,
        "The failure hook only, under `--output quiet-unless-failed`: the path of the \
         spool that holds the command's output (removed once the hook has run).",
    ),
];
