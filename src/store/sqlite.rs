//! The embedded default store: one SQLite file on one machine.
//!
//! WAL mode, a busy timeout, and `BEGIN IMMEDIATE` for every write, so two
//! processes never both believe they took the same slot. The file is created
//! 0600 in a directory created for it; it is never deleted, truncated or
//! rewritten because something went wrong: a corrupt file, a file from a
//! newer jobrun, or a file on a network filesystem is an error naming it.
//!
//! Others may write where the store lives and jobrun often runs as root, so
//! the store's directory is judged (`files::judge_store_dir`), its files are
//! judged before SQLite opens them (`files::judge`: no symlink, ours or
//! root's, no wider than `--db-mode`), SQLite opens the store with
//! `SQLITE_OPEN_NOFOLLOW`, URI parsing off, and must have opened the file
//! that was checked (`opened`), and a file that is not a jobrun store (its
//! `application_id`) is refused before anything is written to it.

use std::fs;
use std::mem::ManuallyDrop;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use rusqlite::config::DbConfig;
use rusqlite::{types::ValueRef, Connection, ErrorCode, OpenFlags, TransactionBehavior};

use super::board::{Asked, Board, Request, Taken, Withdrawn};
use super::opened;
use super::schema::{self, Dialect, Fit, Marker};
use super::sql::{
    Backend, ClockOffset, Columns, Conn, Found, Renew, RenewTarget, Row, SqlStore, Value,
};
use super::writers::{Turn, Writers};
use super::{Result, StoreError};
use crate::policy::lease::Clock;

/// How long a write waits for another process's transaction.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A frame of the WAL holding a 4 KiB page: the page and its 24-byte
/// header. The log's lengths below are counted in these.
const FRAME_4K: u64 = 4096 + 24;

/// Checkpoint the WAL once it is this long: 128 frames of a 4 KiB page,
/// 254 of a 2 KiB one (`NEW_STORE_PAGE`; a pass writes about fifteen of
/// either), never from a pass's take. Connections do not checkpoint on
/// close either (a pass is a short-lived process, and each close would cost
/// two fsyncs), so the first connection after all have closed rebuilds the
/// WAL index by reading the whole WAL: keeping it short keeps that cheap.
/// Two connections checkpoint: a renewer's, after its commits
/// (`Store::allow_checkpoints`: passive, for stores many passes share),
/// and a pass's, for the pass that runs alone, whose successor would
/// otherwise read it all back. The pass copies a long log back while its
/// command runs (`Store::during_command`) and, what others wrote since,
/// just before its release's write (`Backend::copy_back_long`), which then
/// starts the log over from its beginning, overwriting it in place: SQLite
/// does so for a write that finds the whole log copied and no reader in it.
/// Where that could not happen (a reader, a writer in between), the pass
/// empties the log once done (`Store::tidy`), cutting the file to nothing.
/// Neither copies the log back in its turn in the writers' line: a
/// checkpoint syncs the WAL and the store to disk, and every writer behind
/// would wait for it (the pass empties a log it has just copied in a turn
/// had at once, copying there only what was written since: `copy_back`,
/// `empty_log`).
pub const CHECKPOINT_BYTES: u64 = 32 + 128 * FRAME_4K;

/// More than a release writes to the log (thirteen frames, eighteen once
/// its job's history is pruned: 54 and 74 KiB of 4 KiB pages): a log this
/// close to `CHECKPOINT_BYTES` is copied back before the release's write,
/// not emptied after it.
const RELEASE_BYTES: u64 = 32 * FRAME_4K;

/// A WAL copied back whole is cut back to this size by the write that
/// starts it over, so its size tells a pass whether it grew long.
const WAL_KEPT_BYTES: u64 = 64 * FRAME_4K;

/// The page size of a store jobrun creates; one made before keeps SQLite's
/// default, 4 KiB (a store's page size is fixed once its first table is).
/// A pass writes about fifteen pages, whatever their size, and the next
/// pass to open the store reads every frame of the log back and checks its
/// sum (`CHECKPOINT_BYTES`): with 2 KiB pages the same length of log holds
/// twice the passes, so it is copied back, with its four syncs, half as
/// often for the same reading. Passes measured 2–4% faster in interleaved
/// runs (`bench-runner time`, eight rounds of 500 to 1,000 each), and
/// reads of a big store 1–8% slower, its trees deeper. 1 KiB pages made a
/// pass about as fast and a big store slower still.
const NEW_STORE_PAGE: u32 = 2048;

/// How many compiled statements a pass's connection keeps
/// (`Store::serve_one_pass`): enough that a statement run twice in a row
/// (the job's lock, the counters' fold) is compiled once; fewer than a
/// release runs, so its statements' memory is reused as it goes instead of
/// adding some 30 KiB to the heap of every wrapper.
const PASS_STATEMENTS: usize = 4;

/// How a write waits for another process's transaction: naps of a
/// millisecond at first, doubling every eight tries up to 32 ms, each
/// jittered ±50% so that waiters do not retry in step, until its patience
/// runs out. SQLite's own handler sleeps up to 100 ms at a time, so a
/// waiter slept through the moments the lock was free while newer writers
/// took it; naps that stay short for ever would instead keep thousands of
/// waiters awake, and starve the holder of the lock of the CPU it needs
/// to commit.
fn wait_politely(conn: &mut Connection, patience: Duration) -> rusqlite::Result<()> {
    let mut since = std::time::Instant::now();
    conn.busy_handler(Some(move |count: i32| {
        if count == 0 {
            since = std::time::Instant::now();
        }
        let waited = since.elapsed();
        if waited >= patience {
            return false;
        }
        let nap = Duration::from_millis(1u64 << (count / 8).clamp(0, 5));
        std::thread::sleep(crate::random::jittered(nap).min(patience - waited));
        true
    }))
}

/// `PRAGMA application_id` of a jobrun store: the bytes "jobr" read as a
/// big-endian 32-bit integer (0x6a6f6272). Set when a store is created (or
/// adopted from an earlier jobrun, which left it 0), checked on every open
/// before anything is written.
pub const APPLICATION_ID: i64 = 0x6a6f_6272;
/// SQLite's write-ahead log and its index, beside the store file (checked
/// with it before it is opened: `opened`).
pub use super::opened::SIDE_FILES;

/// The tables of schema version 1, as an earlier jobrun (which set no
/// application_id) left them, sorted: only such a store is adopted.
const V1_TABLES: &str = "history,jobs,leases,pauses,sqlite_sequence,waiters";

/// Filesystems whose locking SQLite cannot trust, by `statfs` magic.
pub fn network_fs_name(magic: i64) -> Option<&'static str> {
    Some(match magic {
        0x6969 => "nfs",
        0x517b => "smb",
        0xff53_4d42 => "cifs",
        0xfe53_4d42 => "smb2",
        0x00c3_6400 => "ceph",
        0x5346_414f => "afs",
        0x0102_1997 => "9p",
        0x6573_5546 => "fuse",
        _ => return None,
    })
}

pub struct SqliteBackend {
    /// Closed when the backend is dropped, unless the process is about to
    /// exit and left it (`Store::leave`).
    conn: ManuallyDrop<Connection>,
    left: bool,
    path: String,
    /// Its write-ahead log, whose size tells whether it grew long.
    wal: PathBuf,
    /// The writers' line every write transaction waits in (`writers`);
    /// `None` where this user may not open it.
    writers: Option<Arc<Writers>>,
    /// How long a write waits for its turn and SQLite's lock together.
    patience: Duration,
    /// Checkpoint after a write that leaves the WAL long (a renewer's).
    checkpoints: bool,
    /// Whether this pass's last copy of a long log (`copy_back_long`)
    /// copied all of it.
    copied_back: Option<bool>,
    boot_id: String,
    /// The store file's device and inode (`board_key`).
    file_id: String,
    /// See `ClockOffset`: zero but in the in-process store tests.
    pub offset: ClockOffset,
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        if !self.left {
            // SAFETY: the connection is not used again: this is the
            // backend's drop.
            unsafe { ManuallyDrop::drop(&mut self.conn) };
        }
    }
}

pub type SqliteStore = SqlStore<SqliteBackend>;

impl SqliteStore {
    /// Open (creating if needed, with `mode`) the store at `path`.
    pub fn open(path: &Path, mode: u32) -> Result<SqliteStore> {
        SqliteStore::open_with(path, mode, BUSY_TIMEOUT)
    }

    /// As `open`, waiting at most `busy` for another process's transaction.
    pub fn open_with(path: &Path, mode: u32, busy: Duration) -> Result<SqliteStore> {
        SqliteStore::open_opts(path, mode, busy, true)
    }

    /// As `open_with`; with `create` false, a missing store (or directory)
    /// is `StoreError::Missing` and nothing is created.
    pub fn open_opts(path: &Path, mode: u32, busy: Duration, create: bool) -> Result<SqliteStore> {
        let shown = path.display().to_string();
        let other = |e: &dyn std::fmt::Display| StoreError::Other(shown.clone(), e.to_string());
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !create {
            match fs::symlink_metadata(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(StoreError::Missing(shown))
                }
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    return Err(StoreError::Refused(crate::files::denied(path)))
                }
                _ => {}
            }
        }
        if !dir.exists() {
            crate::files::make_dir(&dir, mode | ((mode & 0o444) >> 2), true, None)
                .map_err(|e| other(&e))?;
        }
        crate::files::judge_store_dir(&dir, path).map_err(StoreError::Refused)?;
        let st = nix::sys::statfs::statfs(&dir)
            .map_err(|e| other(&format!("cannot inspect {}: {e}", dir.display())))?;
        #[allow(clippy::unnecessary_cast)]
        if let Some(fs) = network_fs_name(st.filesystem_type().0 as i64) {
            return Err(StoreError::NetworkFs {
                path: shown,
                fs: fs.into(),
            });
        }
        // Create it ourselves so it has its mode from its first byte;
        // SQLite gives its -wal and -shm files the same mode. O_EXCL: a
        // symlink (even a dangling one) planted as the store is never
        // followed, so its target never becomes a database.
        let create = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
        match crate::files::open(None, path, create, mode) {
            Ok(f) => f
                .set_permissions(fs::Permissions::from_mode(mode))
                .map_err(|e| other(&format!("cannot set its mode: {e}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(StoreError::Refused(crate::files::denied(path)))
            }
            Err(e) => return Err(other(&format!("cannot create: {e}"))),
        }
        let (checked, in_wal) = opened::check_files(path, mode)?;
        crate::trace::mark("open.files");
        opened::open_pause();
        // URI parsing off: no SQLITE_OPEN_URI, and an absolute name (the
        // bundled SQLite is built to parse `file:` names by default, and
        // only a name starting `file:` is one).
        let name = std::path::absolute(path).map_err(|e| other(&e))?;
        let mut conn = Connection::open_with_flags(
            &name,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )
        .map_err(|e| match map_err(&shown, e) {
            StoreError::Other(..) if !writable(path) => {
                StoreError::Refused(crate::files::denied(path))
            }
            StoreError::Other(..) if !writable(&dir) => {
                StoreError::Refused(crate::files::denied(&dir))
            }
            e => e,
        })?;
        opened::same_file(&conn, &checked, path)?;
        let store_md = checked
            .metadata()
            .map_err(|e| other(&format!("cannot inspect it: {e}")))?;
        drop(checked);
        wait_politely(&mut conn, busy).map_err(|e| map_err(&shown, e))?;
        // See CHECKPOINT_BYTES.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(|e| map_err(&shown, e))?;
        // A statement's plan never depends on the values bound to it
        // (jobrun's statements have none that would change it): without
        // this SQLite compiles some statements twice, once when prepared
        // and again at their first step, once their values are bound.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(|e| map_err(&shown, e))?;
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let mut backend = SqliteBackend {
            conn: ManuallyDrop::new(conn),
            left: false,
            path: shown,
            wal: PathBuf::from(wal),
            writers: None,
            patience: busy,
            checkpoints: false,
            copied_back: None,
            boot_id: crate::policy::lease::boot_clock(
                &crate::process::Identity::boot_id(),
                Some(&crate::process::Identity::time_ns()),
            ),
            file_id: {
                use std::os::unix::fs::MetadataExt;
                format!("{}:{}", store_md.dev(), store_md.ino())
            },
            offset: ClockOffset::default(),
        };
        // Switching a new store to WAL and migrating it can report busy at
        // once, without the busy handler, while another process does the
        // same: keep trying for as long as the busy timeout.
        crate::trace::mark("open.connect");
        let deadline = std::time::Instant::now() + busy;
        loop {
            match backend.prepare(in_wal) {
                Err(StoreError::Busy(_)) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => break other?,
            }
        }
        // Made once the store is known to be jobrun's: nothing is left
        // beside a file that is refused.
        backend.writers = Writers::open(path, &store_md, mode)
            .map_err(StoreError::Refused)?
            .map(Arc::new);
        Ok(SqlStore { backend })
    }
}

/// Whether the caller may read and write `path`.
fn writable(path: &Path) -> bool {
    nix::unistd::access(
        path,
        nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK,
    )
    .is_ok()
}

/// What a store file says of itself before anything is written to it.
struct Header {
    /// The marker every jobrun checks (`user_version`).
    legacy: i64,
    /// The schema version: from `jobrun_meta` once it exists.
    version: i64,
    /// The oldest reader the store allows.
    min_reader: i64,
    app_id: i64,
    /// Anything exists in the schema.
    has_tables: bool,
    /// The tables' names, sorted, comma-separated.
    tables: String,
}

/// Read the header: a store in use by the one statement of `own_header`,
/// any other file in full.
fn header_of(conn: &Connection) -> rusqlite::Result<Header> {
    match own_header(conn) {
        Some(head) => Ok(head),
        None => full_header(conn),
    }
}

/// Read the header, the first part by one statement: read apart, a process
/// migrating the fresh store in between made it look like someone else's
/// database.
fn full_header(conn: &Connection) -> rusqlite::Result<Header> {
    let (legacy, app_id, has_tables, tables, has_meta) = conn.query_row(
        "SELECT (SELECT user_version FROM pragma_user_version), \
         (SELECT application_id FROM pragma_application_id), \
         (SELECT count(*) FROM sqlite_master), \
         (SELECT group_concat(name, ',') FROM \
           (SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name)), \
         (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'jobrun_meta')",
        [],
        |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)? > 0,
                r.get::<_, Option<String>>(3)?.unwrap_or_default(),
                r.get::<_, i64>(4)? > 0,
            ))
        },
    )?;
    // Both values in one statement: a statement fewer on every open.
    let meta = if has_meta {
        Some(conn.query_row(
            "SELECT (SELECT value FROM jobrun_meta WHERE key = 'schema'), \
             (SELECT value FROM jobrun_meta WHERE key = 'min_reader')",
            [],
            |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?)),
        )?)
    } else {
        None
    };
    let (version, min_reader) = schema::version_of(legacy, meta);
    Ok(Header {
        legacy,
        version,
        min_reader,
        app_id,
        has_tables,
        tables,
    })
}

/// The header of a store marked as jobrun's, with its `jobrun_meta`, by one
/// statement that reads only those (every open of a store in use: the full
/// header's statements read the whole schema's list). `None` for any other
/// file, or any error: the full header then tells, or reports it.
fn own_header(conn: &Connection) -> Option<Header> {
    let (legacy, app_id, schema, min) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version), \
             (SELECT application_id FROM pragma_application_id), \
             (SELECT value FROM jobrun_meta WHERE key = 'schema'), \
             (SELECT value FROM jobrun_meta WHERE key = 'min_reader')",
            [],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                ))
            },
        )
        .ok()?;
    if app_id != APPLICATION_ID {
        return None;
    }
    let (version, min_reader) = schema::version_of(legacy, Some((schema, min)));
    Some(Header {
        legacy,
        version,
        min_reader,
        app_id,
        // `jobrun_meta` is one; their names are read only for a store
        // not marked as jobrun's.
        has_tables: true,
        tables: String::new(),
    })
}

impl SqliteBackend {
    /// Check the store and make it ready; `in_wal`: its header said WAL
    /// before SQLite opened it, so the switch is spared (a store never
    /// leaves WAL once in it).
    fn prepare(&mut self, in_wal: bool) -> Result<()> {
        let shown = self.path.clone();
        // Refuse a file from a newer jobrun, or someone else's database,
        // before anything is written to it (switching to WAL rewrites the
        // header).
        let head = self.header()?;
        let adopt = head.app_id == 0 && head.legacy == 1 && head.tables == V1_TABLES;
        if head.app_id != APPLICATION_ID && head.app_id != 0 {
            return Err(StoreError::Corrupt {
                path: shown,
                detail: format!(
                    "its application_id is {:#x}, not jobrun's {APPLICATION_ID:#x}; \
                     leaving it untouched",
                    head.app_id
                ),
            });
        }
        if head.app_id == 0 && head.legacy > 0 && !adopt {
            return Err(StoreError::Corrupt {
                path: shown,
                detail: format!(
                    "it is another application's database (user_version {}, no jobrun \
                     application_id, tables {}); leaving it untouched",
                    head.legacy,
                    if head.tables.is_empty() {
                        "none"
                    } else {
                        &head.tables
                    }
                ),
            });
        }
        if head.legacy == 0 && head.has_tables {
            return Err(StoreError::Corrupt {
                path: shown,
                detail: "it holds tables but no jobrun schema version".into(),
            });
        }
        let fit = schema::fit(head.version, head.min_reader);
        if fit == Fit::TooNew {
            return Err(StoreError::TooNew(schema::too_new(&shown, head.min_reader)));
        }
        if !in_wal {
            // Taken by a store with no pages yet, fixed by its first write
            // (the switch to WAL); SQLite leaves any other store's alone.
            self.conn
                .pragma_update(None, "page_size", NEW_STORE_PAGE)
                .map_err(|e| map_err(&shown, e))?;
        }
        let mode: String = match in_wal {
            true => "wal".into(),
            false => self
                .conn
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
                .map_err(|e| map_err(&shown, e))?,
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Other(
                shown,
                format!("cannot switch to WAL (journal mode stays {mode})"),
            ));
        }
        self.conn
            .execute_batch(&format!(
                "PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=0; \
                 PRAGMA journal_size_limit={WAL_KEPT_BYTES};"
            ))
            .map_err(|e| map_err(&shown, e))?;
        if fit != Fit::Migrate && head.app_id == APPLICATION_ID {
            return Ok(());
        }
        // Migrate forward in one immediate transaction; a racing process
        // that migrated first leaves nothing to do.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| map_err(&shown, e))?;
        let head = header_of(&tx).map_err(|e| map_err(&shown, e))?;
        if head.app_id != APPLICATION_ID && head.app_id != 0 {
            return Err(StoreError::Corrupt {
                path: shown,
                detail: format!("its application_id is {:#x}, not jobrun's", head.app_id),
            });
        }
        if head.legacy == 0 && head.has_tables {
            return Err(StoreError::Corrupt {
                path: shown,
                detail: "it holds tables but no jobrun schema version".into(),
            });
        }
        for step in schema::after(head.version) {
            tx.execute_batch(&step.sql(Dialect::Sqlite))
                .map_err(|e| map_err(&shown, e))?;
            match schema::marker_of(step.version) {
                Marker::Legacy(v) => tx.pragma_update(None, "user_version", v),
                Marker::Meta { schema, min_reader } => tx
                    .execute(
                        schema::set_meta_sql(Dialect::Sqlite),
                        rusqlite::params!["schema", schema],
                    )
                    .and_then(|_| {
                        tx.execute(
                            schema::set_meta_sql(Dialect::Sqlite),
                            rusqlite::params!["min_reader", min_reader],
                        )
                    })
                    .map(|_| ()),
            }
            .map_err(|e| map_err(&shown, e))?;
        }
        if head.version < super::stats::FOLDED_AT {
            let mut conn = SqliteTx {
                tx: &tx,
                path: &shown,
                boot_id: &self.boot_id,
                offset: &self.offset,
            };
            super::stats::fold_every_job(&mut conn)?;
        }
        // Marked as jobrun's in the same write as its schema: a new store,
        // or one an earlier jobrun created (checked above) adopted now.
        if head.app_id != APPLICATION_ID {
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(|e| map_err(&shown, e))?;
        }
        tx.commit().map_err(|e| map_err(&shown, e))
    }

    /// The WAL is `CHECKPOINT_BYTES` long or longer.
    fn wal_long(&self) -> bool {
        self.wal_holds(CHECKPOINT_BYTES)
    }

    /// The WAL is `len` bytes long or longer. (Past `WAL_KEPT_BYTES` its
    /// length is the log's: a log started over keeps that much of the
    /// file and overwrites it first.)
    fn wal_holds(&self, len: u64) -> bool {
        std::fs::metadata(&self.wal).is_ok_and(|m| m.len() >= len)
    }

    /// Copy the write-ahead log back into the store by a passive
    /// checkpoint, out of the writers' line: it waits for no one and holds
    /// no writer up, and a reader that still needs part of the log leaves
    /// that part. Whether it copied all of the log. (A release that copied
    /// the log back in its turn held up every renewal behind it for the
    /// copy and its syncs.)
    fn copy_back(&self) -> bool {
        self.conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                let (busy, log, done): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
                Ok(busy == 0 && log >= 0 && log == done)
            })
            .unwrap_or(false)
    }

    /// Empty a log `copy_back` copied, in a turn had at once and never
    /// waiting for a reader. What writers added since the copy is copied in
    /// the turn: a few frames, where a turn held up for the whole copy
    /// stalled renewals; skipping the emptying when anyone had written
    /// since let the log grow three times longer while thousands of passes
    /// kept writing.
    fn empty_log(&mut self) {
        let turn = match &self.writers {
            Some(line) => match line.try_turn() {
                Some(turn) => Some(turn),
                None => return,
            },
            None => None,
        };
        // A release's last use of its connection: it may wait for no one.
        let _ = wait_politely(&mut self.conn, Duration::ZERO);
        let _ = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
        drop(turn);
    }

    fn header(&self) -> Result<Header> {
        header_of(&self.conn).map_err(|e| map_err(&self.path, e))
    }

    fn run<T>(
        &mut self,
        behavior: TransactionBehavior,
        f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>,
    ) -> Result<T> {
        // A write waits its turn in the writers' line first, then for
        // SQLite's lock (held by a writer outside the line, if any) with
        // what is left of its patience; a turn not had by then leaves one
        // try at SQLite's lock.
        let line = self.writers.clone();
        let mut turn = None;
        if let (TransactionBehavior::Immediate, Some(line)) = (behavior, &line) {
            let asked = Instant::now();
            turn = line.turn(asked + self.patience);
            let left = match turn {
                Some(_) => self.patience.saturating_sub(asked.elapsed()),
                None => Duration::ZERO,
            };
            wait_politely(&mut self.conn, left).map_err(|e| map_err(&self.path, e))?;
        }
        // In a turn, the renewals asked on the board are written too.
        let board = match (&turn, &line) {
            (Some(_), Some(line)) => line.board(false),
            _ => None,
        };
        self.in_turn(behavior, turn, board, f)
    }

    /// The transaction of a write that has its `turn` (or none), writing
    /// the renewals asked on `board` too; then the turn given up, the
    /// requesters answered woken, and after a write a renewer's
    /// connection copies a long log back (passive: it waits for no one,
    /// and writers go on meanwhile).
    fn in_turn<T>(
        &mut self,
        behavior: TransactionBehavior,
        turn: Option<Turn<'_>>,
        board: Option<&Board>,
        f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>,
    ) -> Result<T> {
        let (out, answered) = self.transact(behavior, board, f)?;
        drop(turn);
        board.inspect(|b| b.wake(&answered));
        if matches!(behavior, TransactionBehavior::Immediate) && self.checkpoints && self.wal_long()
        {
            self.copy_back();
        }
        Ok(out)
    }

    /// One transaction running `f`; given the renewals board (in a turn of
    /// the line), it also renews the requests waiting there, and answers
    /// them once committed: the requests answered, whose owners the caller
    /// wakes once its turn is given up (`Board::wake`).
    fn transact<T>(
        &mut self,
        behavior: TransactionBehavior,
        board: Option<&Board>,
        f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>,
    ) -> Result<(T, Vec<(Asked, bool)>)> {
        let path = self.path.clone();
        let key = board.map(|_| self.board_key());
        let tx = self
            .conn
            .transaction_with_behavior(behavior)
            .map_err(|e| map_err(&path, e))?;
        let mut conn = SqliteTx {
            tx: &tx,
            path: &path,
            boot_id: &self.boot_id,
            offset: &self.offset,
        };
        let out = f(&mut conn)?;
        let taken = match (board, &key) {
            (Some(board), Some(key)) => {
                let boot_ms = conn.clock()?.boot_ms().unwrap_or(i64::MAX);
                board.take(key, boot_ms, BATCH)
            }
            _ => Vec::new(),
        };
        let answers = match renew_taken(&mut conn, &taken) {
            Ok(answers) => answers,
            Err(e) => {
                board.inspect(|b| b.give_back(&taken));
                return Err(e);
            }
        };
        if let Err(e) = tx.commit() {
            board.inspect(|b| b.give_back(&taken));
            return Err(map_err(&path, e));
        }
        board.inspect(|b| b.answer(&answers));
        Ok((out, answers))
    }

    /// Which requests on the board this connection may write: those of
    /// the same store file, stamped on the same clock (this process's boot
    /// clock, and the store's clock offset, a test seam).
    fn board_key(&self) -> String {
        format!("{} {} {}", self.file_id, self.boot_id, self.offset.ms())
    }

    /// Renew a lease through the renewals board: ask there with this
    /// instant's stamps, then wait in line as any write does. Whoever has
    /// the turn first writes the request: a writer ahead in line (the turn
    /// then only finds the answer), or this renewal, which then writes
    /// every request waiting with its own. `Ok(None)`: no board here, or
    /// the request does not fit on it.
    fn renew_on_board(&mut self, renew: &Renew) -> Result<Option<Found>> {
        let RenewTarget::Lease { job, slot, token } = &renew.held else {
            return Ok(None);
        };
        let Some(line) = self.writers.clone() else {
            return Ok(None);
        };
        let Some(board) = line.board(true) else {
            return Ok(None);
        };
        let Some(place) = board.mine() else {
            return Ok(None);
        };
        let clock = clock_now(&self.boot_id, &self.offset);
        let req = Request {
            job: job.clone(),
            slot: *slot,
            token: *token,
            lease_ms: renew.lease_ms,
            now_ms: clock.now_ms,
            boot_ms: clock.boot_ms().unwrap_or_default(),
            key: self.board_key(),
        };
        let Some(asked) = board.ask(place, &req) else {
            return Ok(None);
        };
        // Asked, the pass sleeps until a writer in its turn writes the
        // request with its own, and tries for the turn now and then: a free
        // turn is its own, and its transaction writes every request
        // waiting. Past two thirds of its patience it waits in line as any
        // write does.
        let start = Instant::now();
        let in_line_from = start + self.patience * 2 / 3;
        let mut nap = BOARD_NAP;
        let turn = loop {
            if let Some(renewed) = board.wait(asked, (Instant::now() + nap).min(in_line_from)) {
                return Ok(Some(answered(renewed)));
            }
            if let Some(turn) = line.try_turn() {
                break Some(turn);
            }
            if Instant::now() >= in_line_from {
                break line.turn(start + self.patience);
            }
            nap = (nap * 2).min(BOARD_NAP_MAX);
        };
        let Some(turn) = turn else {
            return match board.withdraw(asked) {
                Withdrawn::Answer(renewed) => Ok(Some(answered(renewed))),
                // Taken by a writer still in its turn: this tick failed.
                Withdrawn::Taken => Err(StoreError::Busy(self.path.clone())),
                // One try at SQLite's lock, as any write whose turn did
                // not come.
                Withdrawn::Yes => {
                    wait_politely(&mut self.conn, Duration::ZERO)
                        .map_err(|e| map_err(&self.path, e))?;
                    self.in_turn(TransactionBehavior::Immediate, None, None, &mut |c| {
                        renew_in(c, renew)
                    })
                    .map(Some)
                }
            };
        };
        if let Some(renewed) = answer_in_turn(board, asked) {
            return Ok(Some(answered(renewed)));
        }
        let left = self.patience.saturating_sub(start.elapsed());
        wait_politely(&mut self.conn, left).map_err(|e| map_err(&self.path, e))?;
        self.in_turn(
            TransactionBehavior::Immediate,
            Some(turn),
            Some(board),
            &mut |c| renew_in(c, renew),
        )
        .map(Some)
    }
}

/// This process's clock now, on the boot clock `boot_id`, moved by the
/// store's clock offset: what a transaction stamps, and what a renewal
/// asked on the board carries.
fn clock_now(boot_id: &str, offset: &ClockOffset) -> Clock {
    offset.apply(Clock {
        now_ms: crate::clock::now_ms(),
        boot: Some((boot_id.to_string(), crate::clock::boot_ms())),
    })
}

/// How many requests on the board one turn writes at most.
const BATCH: usize = 512;

/// How long a renewal asked on the board sleeps before it first tries for
/// the turn itself, and at most between two tries (doubling).
const BOARD_NAP: Duration = Duration::from_millis(20);
const BOARD_NAP_MAX: Duration = Duration::from_millis(100);

/// In a turn of the line: the answer to `asked`, or `None` once it is
/// withdrawn for this turn to write. A request still taken then was taken
/// by a writer whose turn ended without an answer (it died in it).
fn answer_in_turn(board: &Board, asked: Asked) -> Option<bool> {
    match board.withdraw(asked) {
        Withdrawn::Answer(renewed) => Some(renewed),
        Withdrawn::Yes | Withdrawn::Taken => None,
    }
}

/// A lease's renewal as the board answered it.
fn answered(renewed: bool) -> Found {
    Found {
        renewed,
        promoted: false,
        identity: None,
    }
}

/// The compare-and-set of one renewal stamped now, and for a waiter
/// whether it was promoted meanwhile, in one transaction.
fn renew_in(c: &mut dyn Conn, renew: &Renew) -> Result<Found> {
    let clock = c.clock()?;
    let renewed = renew_at(c, renew, clock.now_ms, clock.boot_ms())?;
    let promoted = match renew.promoted(1) {
        Some((sql, params)) if !renewed => c
            .query(&sql, &params)?
            .first()
            .is_some_and(|r| r.int("promoted") > 0),
        _ => false,
    };
    Ok(Found {
        renewed,
        promoted,
        identity: None,
    })
}

/// The compare-and-set of one renewal with the given stamps: whether the
/// row was ours.
fn renew_at(c: &mut dyn Conn, renew: &Renew, now_ms: i64, boot_ms: Option<i64>) -> Result<bool> {
    let next = renew.next_param();
    let (sql, mut params) = renew.update(&format!("${next}"), &format!("${}", next + 1));
    params.push(now_ms.into());
    params.push(boot_ms.into());
    Ok(c.exec(&sql, &params)? > 0)
}

/// Write the requests taken from the board, in the transaction of `c`,
/// each with its requester's stamps: whether each was renewed.
fn renew_taken(c: &mut dyn Conn, taken: &[Taken]) -> Result<Vec<(Asked, bool)>> {
    taken
        .iter()
        .map(|t| {
            let renew = Renew {
                held: RenewTarget::Lease {
                    job: t.req.job.clone(),
                    slot: t.req.slot,
                    token: t.req.token,
                },
                lease_ms: t.req.lease_ms,
            };
            Ok((
                t.asked,
                renew_at(c, &renew, t.req.now_ms, Some(t.req.boot_ms))?,
            ))
        })
        .collect()
}

impl Backend for SqliteBackend {
    fn identity(&mut self) -> Result<Option<String>> {
        Ok(None)
    }

    fn set_patience(&mut self, patience: Duration) {
        // Installing a handler only registers a callback; it cannot fail
        // on an open connection.
        self.patience = patience;
        let _ = wait_politely(&mut self.conn, patience);
    }

    fn allow_checkpoints(&mut self) {
        self.checkpoints = true;
    }

    fn tidy(&mut self) {
        if !self.wal_long() {
            return;
        }
        // One copy per pass: where the release copied the log back before
        // its write and others wrote since (stores many passes share),
        // what they wrote is copied while the log is emptied.
        let all_copied = match self.copied_back.take() {
            Some(all) => all,
            None => self.copy_back(),
        };
        if all_copied {
            self.empty_log();
        }
    }

    fn leave(&mut self) {
        self.left = true;
    }

    fn serve_one_pass(&mut self) {
        self.conn
            .set_prepared_statement_cache_capacity(PASS_STATEMENTS);
    }

    fn copy_back_long(&mut self) {
        // Sooner than `tidy` would (by what a release writes, and some):
        // a log the release itself makes long is emptied after it, by
        // truncating the file, which the next passes then grow again.
        // Copied while the command ran (`Store::during_command`): what
        // others wrote since is all that is left to copy here, and where
        // nothing is, nothing is synced.
        if self.wal_holds(CHECKPOINT_BYTES - RELEASE_BYTES) {
            self.copied_back = Some(self.copy_back());
        }
    }

    fn write<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.run(TransactionBehavior::Immediate, f)
    }

    fn read<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.run(TransactionBehavior::Deferred, f)
    }

    /// A lease's compare-and-set asked on the renewals board, where the
    /// store has one; else one write transaction: the compare-and-set, then
    /// for a waiter whose row is gone whether it was promoted. The file is
    /// the store's identity; its pin is checked before
    /// (`StorePin::check_file`).
    fn renew(&mut self, renew: &Renew, _pinned: Option<&str>) -> Result<Found> {
        if let Some(found) = self.renew_on_board(renew)? {
            return Ok(found);
        }
        self.write(&mut |c| renew_in(c, renew))
    }
}

struct SqliteTx<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    path: &'a str,
    boot_id: &'a str,
    offset: &'a ClockOffset,
}

impl SqliteTx<'_> {
    fn bind(&self, sql: &str, params: &[Value]) -> Result<rusqlite::CachedStatement<'_>> {
        let mut stmt = self
            .tx
            .prepare_cached(&positional(sql))
            .map_err(|e| map_err(self.path, e))?;
        // `?N` is parameter N: `$N` is bound from params[N - 1] wherever
        // it appears, as PostgreSQL binds it.
        for i in 1..=stmt.parameter_count() {
            let res = match params.get(i - 1).unwrap_or(&Value::Null) {
                Value::Null => stmt.raw_bind_parameter(i, rusqlite::types::Null),
                Value::Int(x) => stmt.raw_bind_parameter(i, x),
                Value::Text(s) => stmt.raw_bind_parameter(i, s.as_str()),
                Value::Bytes(b) => stmt.raw_bind_parameter(i, b.as_slice()),
            };
            res.map_err(|e| map_err(self.path, e))?;
        }
        Ok(stmt)
    }
}

/// A statement of jobrun's (`$1`, `$2`, ...: PostgreSQL's parameters) as
/// SQLite is given it: with `?1`, `?2`, ... SQLite takes `$N` for a name,
/// and numbers each one by searching the names before it, which made a
/// statement naming every one of a thousand jobs cost milliseconds to
/// compile and bind; `?N` it numbers as written. Quoted text and names
/// that merely contain a `$` are left as they are.
fn positional(sql: &str) -> String {
    // Every statement of every pass comes through here: the text is
    // searched for the three bytes that matter and copied in runs between
    // them, not walked byte by byte (a byte-wise walk was 2% of a pass).
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let (mut copied, mut at) = (0, 0);
    while let Some(found) = bytes[at..]
        .iter()
        .position(|&c| matches!(c, b'$' | b'\'' | b'"'))
    {
        let i = at + found;
        let c = bytes[i];
        at = i + 1;
        if c != b'$' {
            // Quoted: on past the closing quote (a doubled quote closes
            // and opens again); unclosed, the rest is quoted.
            match bytes[at..].iter().position(|&q| q == c) {
                Some(end) => at += end + 1,
                None => break,
            }
            continue;
        }
        let starts_name = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric() || matches!(bytes[i - 1], b'_' | b'$'));
        if starts_name && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            // `$` is one byte: both slices end on a character's boundary.
            out.push_str(&sql[copied..i]);
            out.push('?');
            copied = i + 1;
        }
    }
    out.push_str(&sql[copied..]);
    out
}

impl Conn for SqliteTx<'_> {
    fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        let mut stmt = self.bind(sql, params)?;
        let n = stmt.raw_execute().map_err(|e| map_err(self.path, e))?;
        Ok(n as u64)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let mut stmt = self.bind(sql, params)?;
        let columns = Columns::new(stmt.column_names());
        let width = stmt.column_count();
        let mut rows = stmt.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| map_err(self.path, e))? {
            let mut vals = Vec::with_capacity(width);
            for i in 0..width {
                vals.push(match row.get_ref(i).map_err(|e| map_err(self.path, e))? {
                    ValueRef::Integer(x) => Value::Int(x),
                    // Checked as UTF-8 the quick way first (long JSON texts
                    // of latest passes are read by the thousand).
                    ValueRef::Text(t) => Value::Text(match std::str::from_utf8(t) {
                        Ok(text) => text.to_owned(),
                        Err(_) => String::from_utf8_lossy(t).into_owned(),
                    }),
                    ValueRef::Real(r) => Value::Int(r as i64),
                    ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
                    ValueRef::Null => Value::Null,
                });
            }
            out.push(Row::new(columns.clone(), vals));
        }
        Ok(out)
    }

    fn insert_id(&mut self, sql: &str, params: &[Value]) -> Result<Option<i64>> {
        // The connection's own record of the row it made, where `RETURNING`
        // compiled a second statement into the INSERT: 60,000 instructions
        // of every pass.
        let made = self.exec(sql, params)?;
        Ok((made == 1).then(|| self.tx.last_insert_rowid()))
    }

    fn clock(&mut self) -> Result<Clock> {
        Ok(clock_now(self.boot_id, self.offset))
    }

    fn lock_job(&mut self, job: &str) -> Result<Option<i64>> {
        // BEGIN IMMEDIATE already holds the database's single write lock.
        let rows = self.query("SELECT next_token FROM jobs WHERE name = $1", &[job.into()])?;
        Ok(rows.first().map(|r| r.int("next_token")))
    }
}

/// Turn a SQLite error into a store error whose kind decides what happens:
/// busy is retried, corruption is reported, never repaired.
fn map_err(path: &str, e: rusqlite::Error) -> StoreError {
    if let rusqlite::Error::SqliteFailure(f, ref msg) = e {
        let detail = msg.clone().unwrap_or_else(|| f.to_string());
        return match f.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => StoreError::Busy(path.into()),
            ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt => StoreError::Corrupt {
                path: path.into(),
                detail,
            },
            ErrorCode::DiskFull => StoreError::Other(path.into(), "disk full".into()),
            ErrorCode::ReadOnly | ErrorCode::PermissionDenied | ErrorCode::CannotOpen => {
                StoreError::Other(path.into(), format!("cannot write: {detail}"))
            }
            _ => StoreError::Other(path.into(), detail),
        };
    }
    StoreError::Other(path.into(), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_given_to_sqlite_by_number() {
        assert_eq!(
            positional("SELECT a FROM t WHERE x = $1 AND y IN ($12, $3)"),
            "SELECT a FROM t WHERE x = ?1 AND y IN (?12, ?3)"
        );
        // Quoted text, doubled quotes and names with a `$` stay.
        assert_eq!(
            positional(r#"SELECT 'it''s $1', "c$2", x$3, $4 FROM t WHERE z = 'é$5'"#),
            r#"SELECT 'it''s $1', "c$2", x$3, ?4 FROM t WHERE z = 'é$5'"#
        );
        assert_eq!(positional("SELECT $ AS d, $x"), "SELECT $ AS d, $x");
        // At either end, after a parameter, after a quote closed, inside
        // one never closed, and beside text of more than one byte.
        assert_eq!(positional("$1"), "?1");
        assert_eq!(positional("x = $10"), "x = ?10");
        assert_eq!(
            positional("$1$2, $$3, _$4, é$5 ($6)"),
            "?1$2, $$3, _$4, é?5 (?6)"
        );
        assert_eq!(positional("'a'$1, \"b\"=$2"), "'a'?1, \"b\"=?2");
        assert_eq!(
            positional("x = $1 AND y = 'it''s $2"),
            "x = ?1 AND y = 'it''s $2"
        );
        assert_eq!(positional("x = $"), "x = $");
    }

    /// Each `$N` gets params[N - 1] wherever and however often it
    /// appears, and a statement naming a thousand values binds them all.
    #[test]
    fn a_parameter_is_bound_by_its_number() {
        use crate::store::sql::Backend;
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(&dir.path().join("s.db"), 0o600).unwrap();
        let many: Vec<Value> = (1..=1000).map(|i: i64| Value::Int(i * 10)).collect();
        let (first, last, sum) = store
            .backend
            .read(&mut |c| {
                let r = c.query("SELECT $2 AS b, $1 AS a, $2 AS again", &["x".into(), 7.into()])?;
                let first = (r[0].int("b"), r[0].text("a"), r[0].int("again"));
                let marks = crate::store::sql::marks(1, many.len());
                let r = c.query(
                    &format!("SELECT $1000 AS last, (SELECT sum(value) FROM json_each(json_array({marks}))) AS sum"),
                    &many,
                )?;
                Ok((first, r[0].int("last"), r[0].int("sum")))
            })
            .unwrap();
        assert_eq!(first, (7, "x".to_string(), 7));
        assert_eq!((last, sum), (10_000, 5_005_000));
    }

    /// A statement is compiled once: a value bound to it never makes
    /// SQLite compile it again at its first step (a pass's fold of its
    /// counters was compiled twice in nearly every release).
    #[test]
    fn a_bound_value_never_recompiles_a_statement() {
        use rusqlite::StatementStatus;
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db"), 0o600).unwrap();
        let conn = &store.backend.conn;
        let mut st = conn
            .prepare("SELECT x FROM (SELECT 1 AS x UNION SELECT 2) ORDER BY x LIMIT ?1")
            .unwrap();
        let got: Vec<i64> = st
            .query_map([1], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(got, [1]);
        assert_eq!(st.get_status(StatementStatus::RePrepare), 0);
    }

    /// Pass "p" takes the slot of job "j".
    fn take_j(store: &mut SqliteStore) -> crate::policy::lease::LeaseKey {
        use crate::store::{Acquire, Store};
        match store
            .acquire(&super::super::contract::req("j", "p", 1), &[])
            .unwrap()
            .result
        {
            Acquire::Acquired(k) => k,
            other => panic!("{other:?}"),
        }
    }

    fn page_size(path: &Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap()
    }

    /// A store jobrun makes has its pages of `NEW_STORE_PAGE`.
    #[test]
    fn a_new_store_has_small_pages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(SqliteStore::open(&path, 0o600).expect("a new store"));
        assert_eq!(page_size(&path), i64::from(NEW_STORE_PAGE));
    }

    /// A store made with 4 KiB pages (SQLite's default, every store an
    /// earlier jobrun made) keeps them when opened outside WAL, where the
    /// smaller size is asked for, and its passes run.
    #[test]
    fn a_store_keeps_its_pages() {
        use crate::store::{Store, StorePin, StoreSpec};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(SqliteStore::open(&path, 0o600).expect("a new store"));
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA journal_mode=DELETE; PRAGMA page_size=4096; VACUUM;")
            .unwrap();
        assert_eq!(page_size(&path), 4096);
        let mut store = SqliteStore::open(&path, 0o600).expect("the store");
        let spec = StoreSpec::Sqlite(path.clone(), 0o600);
        let pin = StorePin::new(&spec, &mut store).unwrap();
        let key = take_j(&mut store);
        assert!(store.release(&key, None, &pin).unwrap().freed());
        drop(store);
        assert_eq!(page_size(&path), 4096);
    }

    /// A pass whose renewal is asked on the board while another
    /// connection has the line's turn: that connection's transaction
    /// writes it, stamped on the pass's clock as it asked, and the pass's
    /// own turn then only reads the answer.
    #[test]
    fn a_renewal_asked_on_the_board_is_written_in_the_turn_before_its_own() {
        use crate::store::{Held, Store, StorePin, StoreSpec};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut pass = SqliteStore::open(&path, 0o600).unwrap();
        let mut other = SqliteStore::open(&path, 0o600).unwrap();
        let pin = StorePin::new(&StoreSpec::Sqlite(path.clone(), 0o600), &mut pass).unwrap();
        let key = take_j(&mut pass);
        let renewed = || -> i64 {
            Connection::open(&path)
                .unwrap()
                .query_row("SELECT renewed_ms FROM leases WHERE job = 'j'", [], |r| {
                    r.get(0)
                })
                .unwrap()
        };
        let taken_at = renewed();
        // Both clocks a minute on: the stamp is the pass's, as it asked.
        pass.backend.offset.advance(Duration::from_secs(60));
        other.backend.offset.advance(Duration::from_secs(60));
        let line = other.backend.writers.clone().unwrap();
        let board = line.board(true).unwrap();
        let turn = line.turn(Instant::now()).expect("the line is free");
        let renewing = std::thread::spawn(move || {
            let r = pass.renew_held(&Held::Lease(key), crate::policy::lease::MIN_LEASE, &pin);
            (pass, r)
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let asked = loop {
            if let [req] = &board.asked()[..] {
                break req.clone();
            }
            assert!(Instant::now() < deadline, "no request on the board");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(asked.now_ms >= taken_at + 60_000, "{asked:?}");
        let before = other.backend.conn.total_changes();
        other
            .backend
            .transact(TransactionBehavior::Immediate, Some(board), &mut |_| Ok(()))
            .unwrap();
        assert_eq!(
            other.backend.conn.total_changes() - before,
            1,
            "the other's transaction wrote the renewal"
        );
        let stamped = renewed();
        assert_eq!(stamped, asked.now_ms, "not stamped as it was asked");
        drop(turn);
        let (pass, got) = renewing.join().unwrap();
        assert!(
            matches!(got, Ok(crate::renewer::Renewal::Renewed)),
            "{got:?}"
        );
        assert_eq!(renewed(), stamped, "the pass wrote it again");
        drop(pass);
    }

    /// A store whose write-ahead log has grown long, written by a second
    /// connection (as other passes would), and that connection.
    fn store_with_a_long_log(dir: &Path) -> (SqliteStore, Connection) {
        let path = dir.join("s.db");
        let store = SqliteStore::open(&path, 0o600).expect("a new store");
        let other = Connection::open(&path).unwrap();
        other
            .execute_batch(
                "PRAGMA wal_autocheckpoint=0; CREATE TABLE filler(b); \
                 INSERT INTO filler VALUES (zeroblob(1000000));",
            )
            .unwrap();
        assert!(store.backend.wal_long(), "the log is long");
        (store, other)
    }

    fn wal_len(dir: &Path) -> u64 {
        fs::metadata(dir.join("s.db-wal")).map_or(0, |m| m.len())
    }

    #[test]
    fn a_release_alone_empties_a_long_log() {
        let dir = tempfile::tempdir().unwrap();
        // The other connection stays open, idle: the release alone empties
        // the log (its successor would otherwise read it all back).
        let (mut store, _other) = store_with_a_long_log(dir.path());
        store.backend.tidy();
        assert_eq!(wal_len(dir.path()), 0, "the log is emptied");
    }

    /// A pass's release finds the log long: it copies it back first, and
    /// its own write then starts the log over, in place, so the next pass
    /// alone reads back only that write's pages (the pass has nothing
    /// left to empty).
    #[test]
    fn a_release_starts_a_long_log_over() {
        use crate::store::Store;
        let (dir, mut store, _other, pin, key) = taken_with_a_long_log();
        assert!(store.release(&key, None, &pin).unwrap().freed());
        assert_started_over(&store, dir.path());
    }

    /// Job j's slot taken on a store whose log is long
    /// (`store_with_a_long_log`), with the store's pin.
    fn taken_with_a_long_log() -> (
        tempfile::TempDir,
        SqliteStore,
        Connection,
        crate::store::StorePin,
        crate::policy::lease::LeaseKey,
    ) {
        use crate::store::{StorePin, StoreSpec};
        let dir = tempfile::tempdir().unwrap();
        let (mut store, other) = store_with_a_long_log(dir.path());
        let spec = StoreSpec::Sqlite(dir.path().join("s.db"), 0o600);
        let pin = StorePin::new(&spec, &mut store).unwrap();
        let key = take_j(&mut store);
        (dir, store, other, pin, key)
    }

    /// The release's write started the log over: the file is cut back and
    /// the log holds that write's pages alone.
    fn assert_started_over(store: &SqliteStore, dir: &Path) {
        assert!(!store.backend.wal_long(), "the log is no longer long");
        assert!(wal_len(dir) <= WAL_KEPT_BYTES, "{}", wal_len(dir));
        let (busy, frames): (i64, i64) = store
            .backend
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(busy, 0);
        assert!(
            frames < 16,
            "the log holds the release's pages alone: {frames}"
        );
    }

    /// A long log is copied back while the pass's command runs: the store
    /// file holds what the log held before the release, whose write then
    /// starts the log over with nothing left to copy.
    #[test]
    fn a_long_log_is_copied_back_while_the_command_runs() {
        use crate::store::Store;
        let (dir, mut store, _other, pin, key) = taken_with_a_long_log();
        let store_len = || fs::metadata(dir.path().join("s.db")).unwrap().len();
        let before = store_len();
        store.during_command();
        assert!(
            store_len() >= before + 1_000_000,
            "copied back: {before} -> {}",
            store_len()
        );
        assert!(store.release(&key, None, &pin).unwrap().freed());
        assert_started_over(&store, dir.path());
    }

    /// A store in use is read by one statement; it reads as the full
    /// header does, whatever its `jobrun_meta` says, and any other file is
    /// left to the full header.
    #[test]
    fn a_store_in_use_reads_its_header_as_in_full() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(SqliteStore::open(&path, 0o600).expect("a new store"));
        let c = Connection::open(&path).unwrap();
        let same = |c: &Connection| {
            let own = own_header(c).expect("a store in use");
            let full = full_header(c).unwrap();
            let fields = |h: &Header| (h.legacy, h.version, h.min_reader, h.app_id, h.has_tables);
            assert_eq!(fields(&own), fields(&full));
            own
        };
        let fresh = same(&c);
        assert_eq!(fresh.version, schema::known());
        c.execute_batch(
            "UPDATE jobrun_meta SET value = 99 WHERE key = 'schema'; \
             UPDATE jobrun_meta SET value = 98 WHERE key = 'min_reader';",
        )
        .unwrap();
        let newer = same(&c);
        assert_eq!((newer.version, newer.min_reader), (99, 98));
        c.execute_batch("DELETE FROM jobrun_meta").unwrap();
        same(&c);
        c.execute_batch("PRAGMA application_id = 7").unwrap();
        assert!(own_header(&c).is_none(), "not marked as jobrun's");
        c.execute_batch("PRAGMA application_id = 0; DROP TABLE jobrun_meta")
            .unwrap();
        assert!(own_header(&c).is_none(), "no jobrun_meta");
    }

    /// A reader that still needs part of the log leaves it long: the
    /// release copies back what it can without waiting in the writers'
    /// line, and takes no turn to empty a log it could not copy (a turn
    /// held while a checkpoint waited and synced stalled every renewal
    /// behind it).
    #[test]
    fn a_release_takes_no_turn_for_a_log_a_reader_still_needs() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, other) = store_with_a_long_log(dir.path());
        let reader = Connection::open(dir.path().join("s.db")).unwrap();
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM filler;")
            .unwrap();
        other
            .execute("INSERT INTO filler VALUES (zeroblob(600000))", [])
            .unwrap();
        let line = store.backend.writers.as_ref().expect("a writers' line");
        let before = line.turns.load(std::sync::atomic::Ordering::Relaxed);
        store.backend.tidy();
        let line = store.backend.writers.as_ref().unwrap();
        assert_eq!(
            line.turns.load(std::sync::atomic::Ordering::Relaxed),
            before,
            "no turn taken"
        );
        assert!(
            wal_len(dir.path()) > 0,
            "the reader's part of the log is kept"
        );
        // Once the reader is done, the next release empties it.
        reader.execute_batch("COMMIT").unwrap();
        store.backend.tidy();
        assert_eq!(wal_len(dir.path()), 0, "the log is emptied");
    }

    #[test]
    fn network_filesystems_are_named() {
        assert_eq!(network_fs_name(0x6969), Some("nfs"));
        assert_eq!(network_fs_name(0xff53_4d42), Some("cifs"));
        assert_eq!(network_fs_name(0xef53), None); // ext4
    }
}
