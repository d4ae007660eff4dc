//! The Store trait: every transition of a lease, a queue row, a pause or a
//! history entry, each one transaction.
//!
//! Two implementations keep the same contract: SQLite (one machine, the
//! default) and PostgreSQL (a fleet). Ages and expiry are computed by the
//! store on its own clock and returned as offsets, so callers never compare
//! their wall clock with another host's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::evidence::StoreReach;
use crate::policy::containers::Engine;
use crate::policy::lease::{Eviction, Holder, LeaseKey, LeaseRow, WaiterDecision, WaiterRow};
use crate::policy::outcome::{Outcome, PassRecord, Seen};
use crate::policy::pause::{Pause, PauseScope};
use crate::policy::stats::Stats;
use crate::policy::watch::Declared;
use crate::policy::window::{WindowAsk, WindowRow};
use crate::renewer::Renewal;

mod board;
#[cfg(test)]
mod contract;
pub mod elsewhere;
mod gate;
mod handle;
mod opened;
#[cfg(feature = "postgres")]
mod pgconfig;
mod pgconn;
#[cfg(feature = "postgres")]
mod pgerr;
#[cfg(feature = "postgres")]
mod pgnotify;
mod pgpass;
#[cfg(feature = "postgres")]
mod pgtls;
#[cfg(feature = "postgres")]
pub mod postgres;
mod queries;
mod rows;
mod schema;
mod seen_text;
mod sql;
pub mod sqlite;
mod stats;
mod steps;
mod transitions;
pub mod writers;

pub use handle::{Held, StoreHandle, StoreLease};
pub use opened::OPEN_PAUSE_ENV;
pub use pgconn::holds_password;

/// What `notify_waiters` names when every job may have room (`resume
/// --all`); not a valid job name (it has a control character).
pub const ALL_JOBS: &str = "\u{1}all";

/// Errors whose kind decides what the caller does next: a busy or dropped
/// store is retried (the renewer tries again next tick), anything else is
/// reported and ends the command.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {0} is busy (locked past the busy timeout)")]
    Busy(String),
    #[error("store {0} is unreachable: {1}")]
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Unreachable(String, String),
    #[error("store {path} is corrupt or not a jobrun store: {detail}")]
    Corrupt { path: String, detail: String },
    /// A job whose fencing-token counter cannot grow (only a writer of the
    /// store can put it there): the pass is refused, never given a token
    /// twice.
    #[error("job {0}: its fencing-token counter is {1} and cannot grow; refusing the pass rather than hand out a token twice (the store's jobs row was written by something other than jobrun)")]
    TokensExhausted(String, i64),
    /// A store whose schema needs a newer jobrun (`schema::too_new`).
    #[error("{0}")]
    TooNew(String),
    #[error("store {path} is on a network filesystem ({fs}); SQLite locking is not safe there: use a PostgreSQL store (JOBRUN_DB=postgres://...)")]
    NetworkFs { path: String, fs: String },
    /// A file of the store that is not ours to use: a symlink, another
    /// user's file, one writable beyond `--db-mode` (see `files::judge`).
    #[error("refusing the store: {0}")]
    Refused(String),
    /// A command that only reads or acts on existing passes was pointed
    /// at a store that does not exist: it never creates one.
    #[error("no store at {0}: only run and pause create a store; pass --db PATH or set JOBRUN_DB to the store the passes use")]
    Missing(String),
    #[error("store {0}: {1}")]
    Other(String, String),
    /// The store is not the one the pass started with (`StorePin`): it was
    /// deleted, replaced, or dropped and re-created under the pass, which
    /// writes nothing into it.
    #[error("{0}")]
    NotPinned(String),
}

impl StoreError {
    /// A failure worth retrying on a fresh connection.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Busy(_) | StoreError::Unreachable(..))
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Where the store lives, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// A SQLite file, and the mode of the files jobrun creates for it
    /// (the store, its holder locks and wake file; 0600 unless configured).
    Sqlite(PathBuf, u32),
    Postgres(String),
}

/// Mode of the files jobrun creates beside a SQLite store by default.
pub const DEFAULT_FILE_MODE: u32 = 0o600;
/// Holders' kernel lock files live in `<store>.holders/`.
pub const HOLDERS_SUFFIX: &str = "holders";

impl StoreSpec {
    pub fn parse(s: &str, mode: u32) -> StoreSpec {
        if s.starts_with("postgres://")
            || s.starts_with("postgresql://")
            || pgconn::looks_like_keyword_string(s)
        {
            StoreSpec::Postgres(s.to_string())
        } else {
            StoreSpec::Sqlite(PathBuf::from(s), mode)
        }
    }

    /// The mode for files jobrun creates, and for its directories (the same
    /// with search permission wherever reading is allowed).
    pub fn modes(&self) -> (u32, u32) {
        let file = match self {
            StoreSpec::Sqlite(_, mode) => *mode,
            StoreSpec::Postgres(_) => DEFAULT_FILE_MODE,
        };
        (file, file | ((file & 0o444) >> 2))
    }

    /// The group of a group-shared SQLite store (its `--db-mode` lets the
    /// group write): the store file's own group, which every file jobrun
    /// makes beside it is given. `None` for a private store, a PostgreSQL
    /// store, or a store file not there (yet) as a regular file.
    pub fn group(&self) -> Option<u32> {
        use std::os::unix::fs::MetadataExt;
        match self {
            StoreSpec::Sqlite(path, mode) if mode & 0o020 != 0 => std::fs::symlink_metadata(path)
                .ok()
                .filter(|md| md.is_file())
                .map(|md| md.gid()),
            _ => None,
        }
    }

    /// Open a fresh connection. Every thread that writes (the pass, its
    /// renewer) opens its own.
    pub fn open(&self) -> Result<Box<dyn Store>> {
        match self {
            StoreSpec::Sqlite(p, mode) => Ok(Box::new(sqlite::SqliteStore::open(p, *mode)?)),
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres(url) => Ok(Box::new(postgres::PgStore::open(url)?)),
            #[cfg(not(feature = "postgres"))]
            StoreSpec::Postgres(url) => Err(elsewhere::unserved(url)),
        }
    }

    /// Open a store that must already exist: every command but `run` and
    /// `pause` (a typo in `--db` must not create an empty store and report
    /// that nothing runs).
    pub fn open_existing(&self) -> Result<Box<dyn Store>> {
        match self {
            StoreSpec::Sqlite(p, mode) => Ok(Box::new(sqlite::SqliteStore::open_opts(
                p,
                *mode,
                sqlite::BUSY_TIMEOUT,
                false,
            )?)),
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres(url) => Ok(Box::new(postgres::PgStore::open_opts(
                url,
                false,
                postgres::TOO_MANY_CLIENTS_BUDGET,
            )?)),
            #[cfg(not(feature = "postgres"))]
            StoreSpec::Postgres(url) => Err(elsewhere::unserved(url)),
        }
    }

    /// Reopen a store a pass already opened (and pinned): never creates
    /// one, and waits at most `patience` for a busy SQLite store or a full
    /// PostgreSQL server. On PostgreSQL it only connects: the schema was
    /// checked when the pass began.
    pub fn reopen(&self, patience: Duration) -> Result<Box<dyn Store>> {
        match self {
            StoreSpec::Sqlite(p, mode) => Ok(Box::new(sqlite::SqliteStore::open_opts(
                p,
                *mode,
                patience.min(sqlite::BUSY_TIMEOUT),
                false,
            )?)),
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres(url) => Ok(Box::new(postgres::PgStore::connect(
                url,
                patience.min(postgres::TOO_MANY_CLIENTS_BUDGET),
            )?)),
            #[cfg(not(feature = "postgres"))]
            StoreSpec::Postgres(url) => Err(elsewhere::unserved(url)),
        }
    }

    pub fn reach(&self) -> StoreReach {
        match self {
            StoreSpec::Sqlite(..) => StoreReach::OneMachine,
            StoreSpec::Postgres(_) => StoreReach::Fleet,
        }
    }

    /// A place at the starters' gate of a SQLite store (`gate`), waited
    /// for until `gate::PATIENCE` or `stopped`; `None` without one.
    pub fn start_gate(&self, stopped: &mut dyn FnMut() -> bool) -> Option<gate::Gate> {
        match self {
            StoreSpec::Sqlite(path, mode) => {
                gate::Gate::enter(path, *mode, gate::PATIENCE, stopped)
            }
            StoreSpec::Postgres(_) => None,
        }
    }

    /// Where holders keep their kernel lock files: beside a SQLite store.
    /// A PostgreSQL store spans kernels, so the source does not apply.
    pub fn lock_dir(&self) -> Option<PathBuf> {
        match self {
            StoreSpec::Sqlite(p, _) => Some(sibling(p, HOLDERS_SUFFIX)),
            StoreSpec::Postgres(_) => None,
        }
    }

    /// How the store is named in messages (a PostgreSQL URL without its
    /// password).
    pub fn display(&self) -> String {
        match self {
            StoreSpec::Sqlite(p, _) => p.display().to_string(),
            StoreSpec::Postgres(url) => pgconn::redact(url),
        }
    }
}

fn sibling(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".");
    s.push(suffix);
    PathBuf::from(s)
}

/// What a pass asks for when it takes a slot.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub job: String,
    pub pass_id: String,
    pub holder: Holder,
    pub argv: Vec<String>,
    pub cwd: String,
    pub slots: u32,
    pub lease: Duration,
    pub max_hold: Duration,
    /// The container engine the pass declared (`--containers`).
    pub containers: Option<Engine>,
    /// The window a windowed pass claims with its slot.
    pub window: Option<WindowAsk>,
    /// The cadence the pass declared for its job (`--every`, `--schedule`):
    /// stored with the job, the latest declaration wins.
    pub declared: Option<Declared>,
    /// `run --max-idle`: the pass is hung once it has not touched for this
    /// long.
    pub max_idle: Option<Duration>,
}

impl AcquireRequest {
    /// The pass as history names it when it frees another pass's slot.
    pub fn by(&self) -> String {
        format!(
            "pass {} on {} (pid {})",
            self.pass_id, self.holder.host, self.holder.wrapper.pid
        )
    }
}

/// Who an operator command acting on the store is, as history names it:
/// `clear-locks on web1 (pid 4242)`.
pub fn operator(command: &str) -> String {
    let host = crate::process::Identity::current().host;
    format!("{command} on {host} (pid {})", std::process::id())
}

/// The result of trying to take a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    Acquired(LeaseKey),
    /// Every slot the job allows is held.
    Full,
    Paused(PauseInfo),
    /// (Queue only) waiters ahead of this one come first; the position is
    /// 1-based.
    Behind(u32),
    /// (Queue only) the waiter's row is gone: it was judged a ghost and
    /// removed, or cleared by an operator.
    Gone,
    /// (Windowed passes) a pass ended ok in the window: the row says which.
    WindowDone(WindowRow),
    /// (Windowed passes) every allowed claim of the window was made and
    /// none ended ok.
    WindowGivenUp(WindowRow),
}

/// The window a pass claimed with its slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub key: String,
    pub attempt: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseInfo {
    pub owner: Option<String>,
    pub reason: Option<String>,
    pub since_ms: i64,
    pub all: bool,
}

/// What a take or a promotion did: its result, and which of the evictions
/// asked for removed a row (a holder that released or renewed meanwhile is
/// not among them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub result: Acquire,
    pub evicted: Vec<Eviction>,
    /// The window claimed with the slot (windowed passes).
    pub claimed: Option<Claimed>,
}

/// A job the store knows, with what status shows about it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobRow {
    pub name: String,
    /// The last pass that took a slot.
    pub last_outcome: Option<String>,
    pub last_duration_ms: Option<i64>,
    pub last_ended_ms_ago: Option<i64>,
    /// The last pass of any kind (a skip shows the scheduler fired).
    pub attempt_outcome: Option<String>,
    pub attempt_ended_ms_ago: Option<i64>,
    /// The cadence the job's latest declaring pass declared.
    #[serde(skip)]
    pub declared: Option<Declared>,
}

/// A job's passes that ended one way, counted since the store first saw
/// the job: pruning history never lowers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub job: String,
    /// As history names it (`Outcome::as_str`, or whatever a writer of
    /// the store wrote).
    pub outcome: String,
    pub passes: i64,
}

/// How much of a job's history a pass that records itself keeps: its
/// last `passes` rows, and with `age`, only those that ended within it
/// (the newest row always stays). Pruning never lowers a counter or a
/// figure: rows are folded into them first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    pub passes: u32,
    pub age: Option<Duration>,
}

impl Keep {
    /// The last `n` passes, whatever their age.
    #[cfg(test)]
    pub fn last(n: u32) -> Keep {
        Keep {
            passes: n,
            age: None,
        }
    }
}

/// Which passes `history` returns.
#[derive(Debug, Clone, Default)]
pub struct HistoryQuery {
    /// Only this job's passes.
    pub job: Option<String>,
    /// Only passes that started at most this long ago (store clock).
    pub since: Option<Duration>,
    /// Only passes with this outcome.
    pub outcome: Option<Outcome>,
    /// At most this many, the newest.
    pub limit: u32,
}

/// The output kept with a pass that ended badly (`run --keep-output`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptOutput {
    /// The tail of what the command wrote, as it wrote it: text from the
    /// store, escaped when shown.
    pub output: Vec<u8>,
}

/// What `touch` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touch {
    /// The pass holds its slot with that token: progress recorded.
    Touched,
    /// The pass's row carries another token: refused.
    StaleToken(i64),
    /// The pass holds no slot of the job (it ended, or lost its lease).
    NotHeld,
}

/// What `forget` did with a job.
#[derive(Debug, Clone)]
pub enum Forget {
    /// The job and its history are gone.
    Forgotten,
    /// The store never saw it (or it was forgotten already).
    Unknown,
    /// Passes hold this many slots.
    Held(usize),
    /// This many passes wait for a slot.
    Queued(usize),
    /// These pauses stand on it (`pause --all` counts).
    Paused(Vec<Pause>),
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The slot is given back; `queued`: passes of the job were waiting
    /// for one then (read under the job's lock, which every queueing
    /// takes: a pass queued later finds the slot free itself).
    Freed { queued: bool },
    /// The row was no longer ours.
    NotOurs,
}

#[cfg(test)]
impl Released {
    pub fn freed(self) -> bool {
        matches!(self, Released::Freed { .. })
    }
}

/// The result of queueing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueue {
    Queued(i64),
    /// An identical pass is already queued: its pass id.
    Coalesced(String),
}

/// The operations every store provides. One method is one transaction.
pub trait Store: Send {
    /// Take the lowest free slot of `req.job`, unless the job is paused or
    /// full. `evict` names leases the caller judged forfeit; each is removed
    /// first if its token (and condition) still holds. Counting, evicting and
    /// taking happen in one transaction, and the fencing token is drawn from
    /// a per-job counter that never goes back.
    fn acquire(&mut self, req: &AcquireRequest, evict: &[Eviction]) -> Result<Attempt>;
    /// Give the slot back, and record the pass (pruning its job's history
    /// to `keep`) in the same transaction, and say whether passes of the
    /// job wait in its queue (`Released`). The pass is recorded either way,
    /// but only into the store it started with: `StoreError::NotPinned`
    /// when `pin` names another.
    fn release(
        &mut self,
        key: &LeaseKey,
        pass: Option<(&PassRecord, Keep)>,
        pin: &StorePin,
    ) -> Result<Released>;
    /// Remove a lease taken away by someone else (clear-locks, takeover),
    /// if its condition still holds, and record its pass as `abandoned` by
    /// `by` in the same transaction.
    fn evict(&mut self, job: &str, ev: &Eviction, by: &str) -> Result<bool>;
    /// Every lease of the named jobs (all jobs when empty).
    fn leases(&mut self, jobs: &[String]) -> Result<Vec<LeaseRow>>;
    /// Every job the store knows (all when `jobs` is empty).
    fn jobs(&mut self, jobs: &[String]) -> Result<Vec<JobRow>>;
    /// Record a pass and prune the job's history to what `keep` keeps,
    /// into the store `pin` names only (`StoreError::NotPinned` otherwise).
    fn record_pass(&mut self, pass: &PassRecord, keep: Keep, pin: &StorePin) -> Result<()>;
    /// The latest passes that match `q`, newest start first.
    fn history(&mut self, q: &HistoryQuery) -> Result<Vec<PassRecord>>;
    /// The passes of the named jobs (all when empty) by outcome, by job and
    /// outcome: the counters, and the history rows not counted yet.
    fn counters(&mut self, jobs: &[String]) -> Result<Vec<Counter>>;
    /// The figures of the named jobs (all when empty) that have passes:
    /// durations, their sketch, latest start, success and failure, over
    /// every pass recorded (pruning never lowers them); one row per job
    /// and the history rows not folded in yet.
    fn stats(&mut self, jobs: &[String]) -> Result<BTreeMap<String, Stats>>;
    /// The store's clock now, and the latest `per_job` passes of each named
    /// job (newest recorded first, at most `policy::outcome::RECENT`), one
    /// list per job in the order named: the ones kept beside its figures,
    /// with the rows recorded since.
    fn recent(&mut self, jobs: &[String], per_job: usize) -> Result<(i64, Vec<Vec<Seen>>)>;
    /// Record progress (`jobrun touch`) of the pass `pass_id` holding a
    /// slot of `job` with `token`, on the store's clock.
    fn touch(&mut self, job: &str, pass_id: &str, token: i64) -> Result<Touch>;
    /// The progress mark (`jobrun touch`, store clock) of the lease `key`,
    /// `None` before its first touch or once the row is gone.
    fn progress(&mut self, key: &LeaseKey) -> Result<Option<i64>>;
    /// Remove a job that is free (no holder, no waiter, no pause of its
    /// own) and its history, in one transaction; otherwise say why not.
    fn forget(&mut self, job: &str) -> Result<Forget>;
    /// Keep `output`, the tail of pass `pass_id` of `job`, beside its
    /// history row; then drop kept output whose pass left history, and the
    /// oldest past `total` bytes in the whole store.
    fn keep_output(&mut self, job: &str, pass_id: &str, output: &[u8], total: u64) -> Result<()>;
    /// The output kept for pass `pass_id`, if any.
    fn kept_output(&mut self, pass_id: &str) -> Result<Option<KeptOutput>>;

    /// Pause `scope` (one job, or all of them, including jobs first seen
    /// while the pause stands) on behalf of `owner` (`None`: nobody's).
    fn pause(
        &mut self,
        scope: &PauseScope,
        owner: Option<&str>,
        reason: Option<&str>,
    ) -> Result<()>;
    /// Lift `owner`'s pause of `scope`, or every pause `owner` holds
    /// (`None`); `owner == None` lifts pauses without an owner. Returns how
    /// many were lifted.
    fn resume(&mut self, scope: Option<&PauseScope>, owner: Option<&str>) -> Result<u64>;
    fn pauses(&mut self) -> Result<Vec<Pause>>;

    /// Join the job's queue, or, with `coalesce` (whether the command's text
    /// is exact: see `policy::coalesce`), join an identical queued pass.
    fn enqueue(&mut self, req: &AcquireRequest, coalesce: Option<bool>) -> Result<Enqueue>;
    /// Promote waiter `id` if it is within the first free slots' worth of
    /// waiters, in arrival order, and the job is not paused. The waiter row
    /// becomes a lease in the same transaction. Only in the store `pin`
    /// names: a waiter's id means nothing in another.
    fn promote(
        &mut self,
        id: i64,
        req: &AcquireRequest,
        evict: &[Eviction],
        pin: &StorePin,
    ) -> Result<Attempt>;
    /// A waiter leaves the queue by itself (it gave up, was stopped): its
    /// row goes, only from the store `pin` names; it records its own pass.
    fn depart(&mut self, id: i64, pin: &StorePin) -> Result<bool>;
    /// Remove a ghost waiter, if `decision` still holds for its row as read
    /// in the transaction, and record its pass as `abandoned` by `by` in
    /// the same transaction.
    fn remove_ghost(&mut self, id: i64, decision: WaiterDecision, by: &str) -> Result<bool>;
    fn waiters(&mut self, jobs: &[String]) -> Result<Vec<WaiterRow>>;
    /// The latest claimed window of each of the named jobs (all when empty).
    fn windows(&mut self, jobs: &[String]) -> Result<Vec<WindowRow>>;

    /// What tells this database from another at the same address (a
    /// PostgreSQL store: the cluster's system identifier and the stamp the
    /// schema got at creation). `None` where the file itself is the
    /// identity (SQLite: see `StorePin`).
    fn identity(&mut self) -> Result<Option<String>>;
    /// Renew what `held` names, if the store is still the one `pin` names
    /// and the row still ours.
    fn renew_held(&mut self, held: &Held, lease: Duration, pin: &StorePin) -> Result<Renewal>;

    /// How long a write on this connection waits for another process's
    /// transaction before it answers busy (SQLite; a PostgreSQL server
    /// keeps its own timeouts).
    fn set_patience(&mut self, _patience: Duration) {}
    /// Let this connection checkpoint the write-ahead log after a commit
    /// that leaves it long (SQLite: a renewer's). A connection does not by
    /// default: a pass's take never pays for a checkpoint.
    fn allow_checkpoints(&mut self) {}
    /// Once its last transaction is done (a pass's release): empty the
    /// write-ahead log if it has grown long, at most once per
    /// `sqlite::CHECKPOINT_BYTES` of log, skipped while the store is busy.
    fn tidy(&mut self) {}
    /// The pass's command has started and its connection has nothing to do
    /// until the command ends: what would otherwise hold up the release is
    /// done now, while the pass only waits (SQLite: a long write-ahead log
    /// is copied back, so that the release's write starts it over).
    fn during_command(&mut self) {}
    /// The process exits once this connection is dropped: leave its
    /// closing to the exit (SQLite). The kernel then releases its locks,
    /// mappings and files as a close would (a connection never
    /// checkpoints on close), without the close's freeing of every
    /// statement and of the parsed schema, about 0.1 ms of every pass.
    fn leave(&mut self) {}
    /// This connection serves one pass, its own or its renewer's
    /// (`StoreHandle`): it keeps only a few statements compiled (SQLite).
    /// A pass runs each statement once or twice in a row, so the memory
    /// one statement gives back serves the next, where a command that reads
    /// row by row keeps the default and compiles each statement once.
    fn serve_one_pass(&mut self) {}
}

/// The stamp in a PostgreSQL store's identity (`Store::identity`), which
/// every role reads alike (the cluster's identifier before it is not).
pub fn stamp_of(identity: &str) -> &str {
    identity.rsplit('/').next().unwrap_or(identity)
}

/// The store a pass started with. A holder whose store was deleted or
/// replaced under it has lost its lease: its renewals would otherwise go
/// to a file nobody else reads, or to a new store that knows nothing of it.
pub enum StorePin {
    /// The SQLite file, held open: while it is, its inode number cannot be
    /// given to a new file, so a different (device, inode) at the path is a
    /// different store.
    File {
        path: PathBuf,
        file: std::fs::File,
        dev: u64,
        ino: u64,
    },
    /// A PostgreSQL database's identity (`Store::identity`).
    Database(String),
}

impl StorePin {
    /// Pin the store `store` (just opened from `spec`).
    pub fn new(spec: &StoreSpec, store: &mut dyn Store) -> Result<StorePin> {
        match spec {
            StoreSpec::Sqlite(path, _) => {
                use std::os::unix::fs::MetadataExt;
                let shown = path.display().to_string();
                let file = crate::files::open(None, path, nix::fcntl::OFlag::O_RDONLY, 0)
                    .map_err(|e| StoreError::Other(shown.clone(), e.to_string()))?;
                let meta = file
                    .metadata()
                    .map_err(|e| StoreError::Other(shown, e.to_string()))?;
                Ok(StorePin::File {
                    path: path.clone(),
                    dev: meta.dev(),
                    ino: meta.ino(),
                    file,
                })
            }
            StoreSpec::Postgres(_) => Ok(StorePin::Database(store.identity()?.unwrap_or_default())),
        }
    }

    /// The stamp the pinned database's schema got at creation (`None` for a
    /// file store): what every role reads alike of its identity, and what
    /// a pass gives its command (`process::identity::STORE_ENV`).
    pub fn stamp(&self) -> Option<&str> {
        self.database().map(stamp_of)
    }

    /// The pinned database's identity (`None` for a file store).
    pub fn database(&self) -> Option<&str> {
        match self {
            StorePin::Database(id) => Some(id),
            StorePin::File { .. } => None,
        }
    }

    /// Whether the path still names the pinned file: `Err(why)` when the
    /// store was deleted or replaced. Needs no connection.
    pub fn check_file(&self) -> std::result::Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let StorePin::File {
            path,
            file,
            dev,
            ino,
        } = self
        else {
            return Ok(());
        };
        if file.metadata().is_ok_and(|m| m.nlink() == 0) {
            return Err(format!("the store file {} was deleted", path.display()));
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.dev() == *dev && m.ino() == *ino => Ok(()),
            Ok(_) => Err(format!(
                "the store file {} was replaced by another file",
                path.display()
            )),
            Err(e) => Err(format!("the store file {} is gone: {e}", path.display())),
        }
    }

    /// Why a database whose identity is now `now` is not the pinned `was`.
    pub fn another_database(now: &str, was: &str) -> String {
        format!(
            "the database is not the one this pass started with ({now}, was {was}): it was \
             dropped and re-created, or the address now names another server"
        )
    }
}
