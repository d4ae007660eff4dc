//! The one way jobrun keeps a connection to its store across a pass: opened
//! on first use, dropped after a failure, reopened on the next use. The
//! pass and its renewer each own one `StoreHandle`; what differs between
//! them is only how long a reopen may wait.
//!
//! `StoreLease` is what the renewer renews: a lease or a queue row in the
//! store a pass started with (its `StorePin`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::evidence::StoreReach;
use crate::policy::lease::LeaseKey;
use crate::renewer::{Renewable, Renewal};

use super::{Result, Store, StoreError, StorePin, StoreSpec};

/// From this renewal interval on (a lease of 30 s or more), a renewer on a
/// PostgreSQL store connects, renews and disconnects at each tick instead of
/// holding a server connection for the whole pass: a fleet's passes then
/// cost the server connections only while they renew.
pub const CONNECT_PER_RENEWAL: Duration = Duration::from_secs(10);

/// How long a pass on PostgreSQL whose renewer connects per renewal keeps
/// its connection once its command has started: a command that ends within
/// it is released on the same connection; a longer one costs the server
/// nothing while it runs.
pub const KEEP_AFTER_START: Duration = Duration::from_millis(100);

/// How long a pass keeps trying a store that answers busy (`while_busy`).
pub const BUSY_BUDGET: Duration = Duration::from_secs(10);

/// The least a renewal on SQLite waits for a busy store, however little of
/// its window is left.
const MIN_RENEWAL_PATIENCE: Duration = Duration::from_millis(100);

/// A connection a timer closes unless its handle takes it back first.
type Parked = Arc<Mutex<Option<Box<dyn Store>>>>;

/// A connection to the store, opened when first needed.
pub struct StoreHandle {
    spec: StoreSpec,
    /// How long a reopen waits at most for a busy SQLite store or a full
    /// PostgreSQL server.
    patience: Duration,
    conn: Option<Box<dyn Store>>,
    /// A connection handed to a timer that closes it unless it is taken
    /// back first (`close_after`).
    parked: Option<Parked>,
    /// Connections opened here may checkpoint the WAL
    /// (`Store::allow_checkpoints`): a renewer's.
    checkpoints: bool,
}

impl StoreHandle {
    /// A handle on the store `conn` was opened from.
    pub fn new(
        spec: StoreSpec,
        patience: Duration,
        mut conn: Option<Box<dyn Store>>,
    ) -> StoreHandle {
        if let Some(c) = conn.as_mut() {
            c.serve_one_pass();
        }
        StoreHandle {
            spec,
            patience,
            conn,
            parked: None,
            checkpoints: false,
        }
    }

    pub fn spec(&self) -> &StoreSpec {
        &self.spec
    }

    /// A handle on the same store with no connection yet.
    pub fn fresh(&self) -> StoreHandle {
        StoreHandle::new(self.spec.clone(), self.patience, None)
    }

    /// Hand this handle's connection over; this one is left fresh.
    pub fn lend(&mut self) -> StoreHandle {
        let fresh = self.fresh();
        std::mem::replace(self, fresh)
    }

    /// The connection, reopened if it was closed. A reopen never creates a
    /// store: the pass pinned the one it started with.
    pub fn get(&mut self) -> Result<&mut dyn Store> {
        if self.conn.is_none() {
            if let Some(parked) = self.parked.take() {
                self.conn = parked.lock().ok().and_then(|mut p| p.take());
            }
        }
        let conn = match self.conn.take() {
            Some(c) => c,
            None => {
                let mut c = self.spec.reopen(self.patience)?;
                c.serve_one_pass();
                if self.checkpoints {
                    c.allow_checkpoints();
                }
                c
            }
        };
        Ok(self.conn.insert(conn).as_mut())
    }

    /// The process exits next: its connection is closed by the exit
    /// (`Store::leave`).
    pub fn leave(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            c.leave();
        }
    }

    /// The pass's command has started (`Store::during_command`); a
    /// connection that is not open is not opened for it.
    pub fn during_command(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            c.during_command();
        }
    }

    /// Close the connection now; the next use opens a fresh one.
    pub fn close(&mut self) {
        self.conn = None;
        self.parked = None;
    }

    /// Close the connection once `grace` has passed unless it is used
    /// again before.
    pub fn close_after(&mut self, grace: Duration) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let parked = Arc::new(Mutex::new(Some(conn)));
        let timer = Arc::clone(&parked);
        let started = std::thread::Builder::new()
            .name("jobrun-idle".into())
            .spawn(move || {
                std::thread::sleep(grace);
                let closed = timer.lock().ok().and_then(|mut p| p.take());
                drop(closed);
            });
        // No timer thread: closed at once.
        if started.is_ok() {
            self.parked = Some(parked);
        }
    }

    /// Run `op`, trying it again while the store answers busy (SQLite
    /// locked past its busy timeout, a PostgreSQL lock or statement timeout:
    /// the transaction was rolled back, nothing was written), with jittered
    /// pauses growing to a second, for at most `BUSY_BUDGET`. A store busy
    /// for a moment (a fleet's passes starting at the same second) costs a
    /// pass a wait, not its run or its record. Anything else fails at once.
    pub fn while_busy<T>(&mut self, mut op: impl FnMut(&mut dyn Store) -> Result<T>) -> Result<T> {
        let deadline = std::time::Instant::now() + BUSY_BUDGET;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.get().and_then(&mut op) {
                Err(StoreError::Busy(_)) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(crate::random::jittered(pause));
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// Run `op` on the connection; a failure is retried twice on a fresh
    /// connection, after 200 ms and then 1 s.
    pub fn with_retries<T>(
        &mut self,
        mut op: impl FnMut(&mut dyn Store) -> Result<T>,
    ) -> Result<T> {
        let mut last = None;
        for pause in [0, 200, 1000] {
            std::thread::sleep(Duration::from_millis(pause));
            match self.get().and_then(&mut op) {
                Ok(v) => return Ok(v),
                // Another store will not become ours on a fresh connection.
                Err(e @ StoreError::NotPinned(_)) => return Err(e),
                Err(e) => {
                    self.close();
                    last = Some(e);
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }
}

/// What the store renews: a running pass's lease or a queued waiter's row.
#[derive(Debug, Clone)]
pub enum Held {
    Lease(LeaseKey),
    Waiter {
        id: i64,
        job: String,
        pass_id: String,
    },
}

/// A lease in the store a pass started with, renewed on a handle the pass
/// lends it (and takes back with `into_store`).
pub struct StoreLease {
    store: StoreHandle,
    /// The handle's patience while its owner had it.
    owner_patience: Duration,
    held: Held,
    lease: Duration,
    pin: Arc<StorePin>,
    /// Close the connection after each renewal (see CONNECT_PER_RENEWAL).
    per_renewal: bool,
    /// Read the pass's progress mark after each renewal (`--max-idle`).
    watch_progress: bool,
    progress: Option<i64>,
    /// When the lease was last renewed (or taken), on this side: a renewal
    /// on SQLite may wait for a busy store until shortly before the window
    /// since then ends, and still count.
    last: Instant,
}

impl StoreLease {
    pub fn new(
        mut store: StoreHandle,
        held: Held,
        lease: Duration,
        pin: Arc<StorePin>,
    ) -> StoreLease {
        let interval = crate::policy::lease::renew_interval(lease);
        let per_renewal =
            store.spec.reach() == StoreReach::Fleet && interval >= CONNECT_PER_RENEWAL;
        if per_renewal {
            // No connection is held between renewals; one that was just
            // used is kept a moment, for a command that ends at once.
            store.close_after(KEEP_AFTER_START);
        }
        // A busy SQLite store or a full server fails the tick within half
        // an interval, so the next tick tries again well inside the window
        // instead of one wait eating it.
        let owner_patience = std::mem::replace(&mut store.patience, interval / 2);
        // The renewer's connection checkpoints the WAL when it has grown,
        // off the path of any pass's take.
        store.checkpoints = true;
        if let Some(conn) = store.conn.as_mut() {
            conn.allow_checkpoints();
        }
        StoreLease {
            store,
            owner_patience,
            held,
            lease,
            pin,
            per_renewal,
            watch_progress: false,
            progress: None,
            last: Instant::now(),
        }
    }

    /// Read the pass's progress mark (`jobrun touch`) after each renewal.
    pub fn watching_progress(mut self) -> StoreLease {
        self.watch_progress = true;
        self
    }

    /// The handle, back to its owner.
    pub fn into_store(mut self) -> StoreHandle {
        self.store.patience = self.owner_patience;
        // A connection lent by its owner waits again as its owner's did
        // (each renewal narrowed it to what was left of its window).
        if let Some(conn) = self.store.conn.as_mut() {
            conn.set_patience(self.owner_patience.min(super::sqlite::BUSY_TIMEOUT));
        }
        self.store.checkpoints = false;
        self.store
    }

    fn try_renew(&mut self) -> Result<Renewal> {
        // Checked before any connection is opened: a reconnect must never
        // find (or make) a new store at the same path.
        if let Err(why) = self.pin.check_file() {
            return Ok(Renewal::StoreLost(why));
        }
        // On SQLite a renewal waits for a busy store (in short naps) until
        // shortly before its window ends: late but inside the window still
        // keeps the lease, where a failed tick would wait a whole interval.
        // A fleet's server keeps its own timeouts: half an interval there.
        // A renewal's stamps are read at the earliest as it starts (on the
        // board, as it is asked): its window counts from here.
        let started = Instant::now();
        let one_machine = self.store.spec.reach() == StoreReach::OneMachine;
        if one_machine {
            let left = self.lease.saturating_sub(self.last.elapsed());
            self.store.patience = left
                .saturating_sub(self.lease / 10)
                .max(MIN_RENEWAL_PATIENCE);
        }
        let patience = self.store.patience;
        let store = self.store.get()?;
        if one_machine {
            store.set_patience(patience);
        }
        let renewed = store.renew_held(&self.held, self.lease, &self.pin);
        if let Ok(Renewal::Renewed) = renewed {
            self.last = started;
        }
        if let (true, Ok(Renewal::Renewed), Held::Lease(key)) =
            (self.watch_progress, &renewed, &self.held)
        {
            // A mark that cannot be read now is read next tick.
            if let Ok(mark) = store.progress(key) {
                self.progress = mark;
            }
        }
        if self.per_renewal {
            self.store.close();
        }
        renewed
    }
}

impl Renewable for StoreLease {
    fn progress(&self) -> Option<i64> {
        self.progress
    }

    fn renew(&mut self) -> anyhow::Result<Renewal> {
        self.try_renew().map_err(|e: StoreError| {
            // A fresh connection next tick: a dropped one never recovers.
            self.store.close();
            e.into()
        })
    }
}
