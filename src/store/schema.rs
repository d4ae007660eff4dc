//! The store's schema: one list of steps for both stores, how far a store
//! has come, and which jobrun may still use it.
//!
//! A fleet upgrades one host at a time, and on one machine passes started
//! by the old binary run on while the new one is installed; both keep using
//! the store the first new jobrun migrated. So every step is additive (new
//! tables, new nullable columns: rows an older jobrun writes stay valid)
//! and records the oldest schema a reader must know to use the store
//! (`min_reader`). A jobrun that knows less is refused with one line naming
//! the upgrade order; one that knows more than the store migrates it
//! forward; one that knows less than the store's version but at least its
//! minimum uses it as it is.
//!
//! Where it is kept: versions 1 to 4 in the marker every jobrun checks
//! (SQLite's `user_version`, PostgreSQL's `jobrun_schema`); from version 5
//! on in `jobrun_meta` (`schema`, `min_reader`), while the old marker stays
//! at the last version the readers of the old marker know
//! (`LEGACY_MARKER`). Were a step ever to need those readers gone, it would
//! raise both `min_reader` and the old marker, and they would refuse the
//! store with their own "newer schema" line.

/// Which store a step's SQL is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres,
}

impl Dialect {
    /// The 64-bit integer type, and an auto-numbered primary key.
    fn types(self) -> (&'static str, &'static str) {
        match self {
            Dialect::Sqlite => ("INTEGER", "INTEGER PRIMARY KEY AUTOINCREMENT"),
            Dialect::Postgres => ("BIGINT", "BIGSERIAL PRIMARY KEY"),
        }
    }
}

/// One step of the schema, from the version before it.
pub struct Step {
    pub version: i64,
    /// The oldest schema a jobrun must know to use a store at this step.
    pub min_reader: i64,
    /// `{int}` and `{serial}` stand for the dialect's types.
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

impl Step {
    /// The step's SQL for `dialect`, with its types filled in.
    pub fn sql(&self, dialect: Dialect) -> String {
        let (int, serial) = dialect.types();
        let text = match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
        };
        text.replace("{holder}", HOLDER_V1)
            .replace("{int}", int)
            .replace("{serial}", serial)
    }
}

/// The last version the marker of every earlier jobrun counts to: it is
/// kept there while `min_reader` lets those jobruns use the store.
pub const LEGACY_MARKER: i64 = 4;

/// The newest schema this jobrun knows.
pub fn known() -> i64 {
    STEPS.last().map_or(0, |s| s.version)
}

/// The oldest reader the steps up to `version` need.
pub fn min_reader(version: i64) -> i64 {
    STEPS
        .iter()
        .filter(|s| s.version <= version)
        .map(|s| s.min_reader)
        .max()
        .unwrap_or(1)
}

/// A store's (version, oldest reader) from its old marker and, once it has
/// one, its meta table (`schema`, `min_reader`). The one tracker both
/// stores read. An old marker past `LEGACY_MARKER` was raised to fence out
/// the jobruns that only read it: it is a minimum too.
pub fn version_of(legacy: i64, meta: Option<(Option<i64>, Option<i64>)>) -> (i64, i64) {
    let fence = if legacy > LEGACY_MARKER { legacy } else { 0 };
    match meta {
        // The meta table counts only once the old marker has come that far
        // (a store whose older tables were dropped starts again).
        _ if legacy < LEGACY_MARKER => (legacy, min_reader(legacy)),
        None => (legacy, min_reader(legacy).max(fence)),
        Some((schema, min)) => {
            let version = schema.unwrap_or(legacy).max(legacy);
            (version, min.unwrap_or(min_reader(version)).max(fence))
        }
    }
}

/// What opening a store at (`version`, `min_reader`) means for this jobrun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Current: use it as it is.
    Current,
    /// Older: apply the steps after `version` first.
    Migrate,
    /// Newer, but this jobrun knows its minimum: use it as it is.
    NewerReadable,
    /// Newer than this jobrun may use.
    TooNew,
}

/// The one rule for which jobrun may use which store.
pub fn fit(version: i64, min_reader: i64) -> Fit {
    let known = known();
    if min_reader > known {
        Fit::TooNew
    } else if version > known {
        Fit::NewerReadable
    } else if version < known {
        Fit::Migrate
    } else {
        Fit::Current
    }
}

/// The steps after `version`, in order.
pub fn after(version: i64) -> impl Iterator<Item = &'static Step> {
    STEPS.iter().filter(move |s| s.version > version)
}

/// The one line for a store this jobrun may not use.
pub fn too_new(store: &str, min_reader: i64) -> String {
    format!(
        "store {store} was written by a newer jobrun: it needs one that knows schema \
         {min_reader} or later, and this one knows up to {}; refusing to touch it. Upgrade jobrun \
         on this host (a fleet upgrades every host before a jobrun that raises the minimum \
         reaches any of them)",
        known()
    )
}

/// Set (`key`, `value`) in the meta table.
pub fn set_meta_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite | Dialect::Postgres => {
            "INSERT INTO jobrun_meta (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        }
    }
}

const V1: &str = r#"
CREATE TABLE jobs (
    name TEXT PRIMARY KEY,
    next_token {int} NOT NULL,
    created_ms {int} NOT NULL
);
CREATE TABLE leases (
    job TEXT NOT NULL,
    slot {int} NOT NULL,
    token {int} NOT NULL,
    {holder}
    max_hold_ms {int} NOT NULL,
    acquired_ms {int} NOT NULL,
    renewed_ms {int} NOT NULL,
    expires_ms {int} NOT NULL,
    PRIMARY KEY (job, slot)
);
CREATE TABLE waiters (
    id {serial},
    job TEXT NOT NULL,
    {holder}
    arrived_ms {int} NOT NULL,
    renewed_ms {int} NOT NULL,
    expires_ms {int} NOT NULL
);
CREATE INDEX waiters_by_job ON waiters (job, id);
CREATE TABLE pauses (
    job TEXT PRIMARY KEY,
    reason TEXT,
    since_ms {int} NOT NULL
);
CREATE TABLE history (
    id {serial},
    job TEXT NOT NULL,
    pass_id TEXT NOT NULL,
    token {int},
    slot {int},
    host TEXT NOT NULL,
    pid {int} NOT NULL,
    started_ms {int} NOT NULL,
    ended_ms {int} NOT NULL,
    duration_ms {int} NOT NULL,
    exit_code {int},
    signal {int},
    outcome TEXT NOT NULL
);
CREATE INDEX history_by_job ON history (job, id);
"#;

/// What a lease row and a queue row both recorded in version 1: the pass,
/// who holds or waits, and what it runs.
const HOLDER_V1: &str = "pass_id TEXT NOT NULL,
    host TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    pid_ns TEXT NOT NULL,
    wrapper_pid {int} NOT NULL,
    wrapper_start {int} NOT NULL,
    child_pid {int},
    child_start {int},
    lock_path TEXT,
    argv TEXT NOT NULL,
    cwd TEXT NOT NULL,
    slots {int} NOT NULL,
    lease_ms {int} NOT NULL,";

/// Every step, oldest first.
pub const STEPS: &[Step] = &[
    // jobs, leases, the queue, pauses and history
    Step {
        version: 1,
        min_reader: 1,
        sqlite: V1,
        postgres: V1,
    },
    // lock files are named by pass id, never by a row; rows of this boot carry boot-clock
    // stamps; a PostgreSQL store gets the stamp that tells it from a re-created one
    Step {
        version: 2,
        min_reader: 2,
        sqlite: r#"
ALTER TABLE leases DROP COLUMN lock_path;
ALTER TABLE waiters DROP COLUMN lock_path;
ALTER TABLE leases ADD COLUMN acquired_boot_ms {int};
ALTER TABLE leases ADD COLUMN renewed_boot_ms {int};
ALTER TABLE waiters ADD COLUMN renewed_boot_ms {int};
"#,
        postgres: r#"
ALTER TABLE leases DROP COLUMN lock_path;
ALTER TABLE waiters DROP COLUMN lock_path;
ALTER TABLE leases ADD COLUMN acquired_boot_ms {int};
ALTER TABLE leases ADD COLUMN renewed_boot_ms {int};
ALTER TABLE waiters ADD COLUMN renewed_boot_ms {int};
CREATE TABLE jobrun_store (stamp TEXT NOT NULL);
INSERT INTO jobrun_store (stamp)
    VALUES (md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text));
"#,
    },
    // a pass's wait before its command started, apart from its duration
    Step {
        version: 3,
        min_reader: 3,
        sqlite: "ALTER TABLE history ADD COLUMN waited_ms {int};",
        postgres: "ALTER TABLE history ADD COLUMN waited_ms {int};",
    },
    // pauses have an owner ('' for none): a job is paused while any owner's pause stands,
    // and each owner lifts only its own
    Step {
        version: 4,
        min_reader: 4,
        sqlite: r#"
CREATE TABLE pauses_v4 (
    job TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    reason TEXT,
    since_ms {int} NOT NULL,
    PRIMARY KEY (job, owner)
);
INSERT INTO pauses_v4 (job, owner, reason, since_ms) SELECT job, '', reason, since_ms FROM pauses;
DROP TABLE pauses;
ALTER TABLE pauses_v4 RENAME TO pauses;
"#,
        postgres: r#"
ALTER TABLE pauses ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE pauses DROP CONSTRAINT pauses_pkey;
ALTER TABLE pauses ADD PRIMARY KEY (job, owner);
"#,
    },
    // the schema version and the oldest reader it allows are kept apart from the marker
    // earlier jobruns check, so that additive steps leave them working
    Step {
        version: 5,
        min_reader: 4,
        sqlite:
            "CREATE TABLE IF NOT EXISTS jobrun_meta (key TEXT PRIMARY KEY, value {int} NOT NULL);",
        postgres:
            "CREATE TABLE IF NOT EXISTS jobrun_meta (key TEXT PRIMARY KEY, value {int} NOT NULL);",
    },
    // who freed a pass that did not end itself (an abandoned holder or a
    // ghost waiter), and why: every pass ends in exactly one history row
    Step {
        version: 6,
        min_reader: 4,
        sqlite: "ALTER TABLE history ADD COLUMN freed_reason TEXT; \
                 ALTER TABLE history ADD COLUMN freed_by TEXT; \
                 CREATE INDEX IF NOT EXISTS history_by_pass ON history (pass_id);",
        postgres: "ALTER TABLE history ADD COLUMN IF NOT EXISTS freed_reason TEXT; \
                   ALTER TABLE history ADD COLUMN IF NOT EXISTS freed_by TEXT; \
                   CREATE INDEX IF NOT EXISTS history_by_pass ON history (pass_id);",
    },
    // the wrapper's session and the time namespace a holder read its clocks in: a
    // process that left that session is no member of the pass, and start times and
    // boot-clock stamps compare only within one time namespace
    Step {
        version: 7,
        min_reader: 4,
        sqlite: "ALTER TABLE leases ADD COLUMN time_ns TEXT; \
                 ALTER TABLE leases ADD COLUMN wrapper_sid {int}; \
                 ALTER TABLE waiters ADD COLUMN time_ns TEXT; \
                 ALTER TABLE waiters ADD COLUMN wrapper_sid {int};",
        postgres: "ALTER TABLE leases ADD COLUMN IF NOT EXISTS time_ns TEXT; \
                   ALTER TABLE leases ADD COLUMN IF NOT EXISTS wrapper_sid {int}; \
                   ALTER TABLE waiters ADD COLUMN IF NOT EXISTS time_ns TEXT; \
                   ALTER TABLE waiters ADD COLUMN IF NOT EXISTS wrapper_sid {int};",
    },
    // the container engine a pass declared (`run --containers`), by name: its judges ask
    // that engine about the pass's label; and the verdict a freed pass was freed on, naming
    // the evidence asked
    Step {
        version: 8,
        min_reader: 4,
        sqlite: "ALTER TABLE leases ADD COLUMN containers TEXT; \
                 ALTER TABLE waiters ADD COLUMN containers TEXT; \
                 ALTER TABLE history ADD COLUMN freed_evidence TEXT;",
        postgres: "ALTER TABLE leases ADD COLUMN IF NOT EXISTS containers TEXT; \
                   ALTER TABLE waiters ADD COLUMN IF NOT EXISTS containers TEXT; \
                   ALTER TABLE history ADD COLUMN IF NOT EXISTS freed_evidence TEXT;",
    },
    // monitoring: per-job passes by outcome that pruning history never lowers (counted up
    // to `jobs.counted_id`, the history rows after it are folded in by the next writer),
    // backfilled from the history kept; the cadence a job declares on `run`; a pass's
    // idle limit and its last progress (`jobrun touch`)
    Step {
        version: 9,
        min_reader: 4,
        sqlite: V9,
        postgres: V9,
    },
    // `timed-out` (a --wait that ran out) is called `wait-expired`, apart from the new
    // `timeout` (a command stopped past --timeout); once per window: a window row per
    // (job, window key) and each pass's window in history. Earlier readers take the new
    // outcome names as outcomes they do not know and never read the window rows; this
    // jobrun reads the `timed-out` rows they still write as `wait-expired`: no reader is
    // fenced out.
    Step {
        version: 10,
        min_reader: 4,
        sqlite: V10,
        postgres: V10,
    },
    // the tail of the output of a pass that ended badly (`run --keep-output`), by pass id,
    // beside its history row: shown by `history --show`, removed with it
    Step {
        version: 11,
        min_reader: 4,
        sqlite: "CREATE TABLE IF NOT EXISTS pass_output (pass_id TEXT PRIMARY KEY, \
                 job TEXT NOT NULL, kept_ms {int} NOT NULL, size {int} NOT NULL, \
                 output BLOB NOT NULL); \
                 CREATE INDEX IF NOT EXISTS pass_output_by_job ON pass_output (job);",
        postgres: "CREATE TABLE IF NOT EXISTS pass_output (pass_id TEXT PRIMARY KEY, \
                   job TEXT NOT NULL, kept_ms {int} NOT NULL, size {int} NOT NULL, \
                   output BYTEA NOT NULL); \
                   CREATE INDEX IF NOT EXISTS pass_output_by_job ON pass_output (job);",
    },
    // per-job figures (`policy::stats`): passes that ran, their total and longest
    // duration, a duration sketch (JSON pairs of bucket and passes), the latest start,
    // success and failure, folded from
    // history up to `job_stats.counted_id` by every writer of a history row (a job
    // without a row is folded from its kept history by its next writer; a reader folds
    // the rows after the mark itself); history by start and by outcome, for the
    // listings and filtered summaries. Earlier readers never read them.
    Step {
        version: 12,
        min_reader: 4,
        sqlite: V12,
        postgres: V12,
    },
    // each job's latest passes as `check` reads them (`policy::outcome::Seen`, JSON), the
    // last hundred folded up to their own mark `upto` by the same writers (an earlier
    // writer folds figures alone, so the two marks can part); a job without them is read
    // from history. Earlier readers never read them.
    Step {
        version: 13,
        min_reader: 4,
        sqlite: RECENT_V13,
        postgres: RECENT_V13,
    },
];

const RECENT_V13: &str =
    "CREATE TABLE IF NOT EXISTS job_recent (job TEXT PRIMARY KEY, upto {int} NOT NULL, \
     seen TEXT NOT NULL);";

const V9: &str = r#"
CREATE TABLE IF NOT EXISTS job_counters (
    job TEXT NOT NULL,
    outcome TEXT NOT NULL,
    passes {int} NOT NULL,
    PRIMARY KEY (job, outcome)
);
ALTER TABLE jobs ADD COLUMN counted_id {int};
ALTER TABLE jobs ADD COLUMN every_ms {int};
ALTER TABLE jobs ADD COLUMN schedule TEXT;
ALTER TABLE jobs ADD COLUMN schedule_tz TEXT;
ALTER TABLE leases ADD COLUMN max_idle_ms {int};
ALTER TABLE leases ADD COLUMN touched_ms {int};
INSERT INTO job_counters (job, outcome, passes)
    SELECT job, outcome, count(*) FROM history WHERE job IN (SELECT name FROM jobs)
    GROUP BY job, outcome;
UPDATE jobs SET counted_id = (SELECT max(id) FROM history WHERE history.job = jobs.name);
"#;

const V10: &str = r#"
UPDATE history SET outcome = 'wait-expired' WHERE outcome = 'timed-out';
INSERT INTO job_counters (job, outcome, passes)
    SELECT job, 'wait-expired', passes FROM job_counters WHERE outcome = 'timed-out'
    ON CONFLICT (job, outcome) DO UPDATE SET passes = job_counters.passes + excluded.passes;
DELETE FROM job_counters WHERE outcome = 'timed-out';
ALTER TABLE history ADD COLUMN window_key TEXT;
CREATE TABLE IF NOT EXISTS windows (
    job TEXT NOT NULL,
    window_key TEXT NOT NULL,
    attempts {int} NOT NULL,
    max_attempts {int} NOT NULL,
    pass_id TEXT NOT NULL,
    host TEXT NOT NULL,
    claimed_ms {int} NOT NULL,
    ended_ms {int},
    outcome TEXT,
    PRIMARY KEY (job, window_key)
);
CREATE INDEX IF NOT EXISTS windows_by_pass ON windows (job, pass_id);
"#;

const V12: &str = r#"
CREATE TABLE IF NOT EXISTS job_stats (
    job TEXT PRIMARY KEY,
    counted_id {int} NOT NULL,
    ran {int} NOT NULL,
    sum_ms {int} NOT NULL,
    max_ms {int} NOT NULL,
    last_duration_ms {int},
    last_start_ms {int},
    last_success_ms {int},
    last_failure_ms {int},
    durations TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_by_start ON history (started_ms);
CREATE INDEX IF NOT EXISTS history_by_outcome ON history (outcome, started_ms);
"#;

/// Where a store's version is kept, for a step that is being applied: the
/// old marker up to `LEGACY_MARKER`, the meta table from then on.
pub fn marker_of(version: i64) -> Marker {
    if version <= LEGACY_MARKER {
        Marker::Legacy(version)
    } else {
        Marker::Meta {
            schema: version,
            min_reader: min_reader(version),
        }
    }
}

/// How a store records that a step was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// The marker every jobrun checks.
    Legacy(i64),
    /// `jobrun_meta`'s `schema` and `min_reader`.
    Meta { schema: i64, min_reader: i64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_run_in_order_and_every_step_since_the_meta_table_is_additive() {
        let mut last = 0;
        for s in STEPS {
            assert_eq!(s.version, last + 1, "step {} after {last}", s.version);
            last = s.version;
            assert!(s.min_reader <= s.version);
            if s.version > LEGACY_MARKER {
                // Readers of the old marker keep working: nothing is
                // dropped or renamed, and no new column is NOT NULL without
                // a default.
                for sql in [s.sqlite, s.postgres] {
                    let upper = sql.to_uppercase();
                    assert!(!upper.contains("DROP "), "step {}: {sql}", s.version);
                    assert!(!upper.contains("RENAME "), "step {}: {sql}", s.version);
                    for line in upper.lines().filter(|l| l.contains("ADD COLUMN")) {
                        assert!(
                            !line.contains("NOT NULL") || line.contains("DEFAULT"),
                            "step {}: {line}",
                            s.version
                        );
                    }
                }
                assert!(s.min_reader <= LEGACY_MARKER, "step {}", s.version);
            }
        }
    }

    #[test]
    fn which_jobrun_may_use_which_store() {
        let k = known();
        let table = [
            ((k, 4), Fit::Current),
            ((k - 1, 4), Fit::Migrate),
            ((1, 1), Fit::Migrate),
            ((k + 3, 4), Fit::NewerReadable),
            ((k + 3, k), Fit::NewerReadable),
            ((k + 3, k + 1), Fit::TooNew),
        ];
        for ((version, min), want) in table {
            assert_eq!(fit(version, min), want, "{version} {min}");
        }
        assert_eq!(marker_of(4), Marker::Legacy(4));
        // (old marker, meta) -> (version, oldest reader)
        let read = [
            ((3, None), (3, 3)),
            ((0, Some((Some(5), Some(4)))), (0, 1)),
            ((4, None), (4, 4)),
            ((4, Some((Some(5), Some(4)))), (5, 4)),
            ((4, Some((Some(9), Some(4)))), (9, 4)),
            ((4, Some((Some(9), Some(7)))), (9, 7)),
            // An old marker raised past 4 fences out its own readers.
            ((99, None), (99, 99)),
            ((7, Some((Some(9), Some(4)))), (9, 7)),
        ];
        for ((legacy, meta), want) in read {
            assert_eq!(version_of(legacy, meta), want, "{legacy} {meta:?}");
        }
        assert_eq!(
            marker_of(5),
            Marker::Meta {
                schema: 5,
                min_reader: 4
            }
        );
    }
}
