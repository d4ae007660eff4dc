//! `jobrun run NAME -- COMMAND`: take a slot (or queue for one), run the
//! command under a renewed lease, release only after the child is gone,
//! record the pass.
//!
//! A pass is a state machine whose states own the held command by value:
//!
//! ```text
//! Prepared --take--> Holding --run--> exit code
//!     |                 ^
//!     +--queue--> Queued+ (promoted)
//!     +--skip / coalesce / give up--> exit code (the held command dropped)
//! ```
//!
//! The command is forked and held before exec in `Prepared`; only a
//! `Holding`, made from a slot the store granted, can release it, with the
//! slot's fencing token. Every other way out drops it, which aborts it: the
//! types, not assignments, make "the command never runs unless on record"
//! and "the held command is dropped exactly once".
//!
//! `run()` here prepares a pass: it opens and pins the store, takes the
//! holder lock and forks the command. `pass.rs` takes the slot, runs the
//! command and releases; `containers.rs` keeps the slot while the
//! containers of a `--containers` pass run on; `queue.rs` waits in line;
//! `wake.rs` and `notify.rs` wake waiters on this machine and across hosts.

mod containers;
mod notify;
mod pass;
mod queue;
pub mod wake;

use std::collections::HashSet;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::clock::now_ms;
use crate::cmd::{evidence, open_to_write};
use crate::evidence::Evidence;
use crate::files::{remove_stale_lock, HolderLock};
use crate::policy::lease::{Eviction, Holder, LeaseKey};
use crate::process::this_process;
use crate::report::{escape, utc_ms};
use crate::say;
use crate::settings::{RunSettings, StoreChoice};
use crate::spawn::HeldChild;
use crate::store::{Acquire, AcquireRequest, Attempt, PauseInfo, StoreHandle, StorePin};
use crate::supervise::{self, Event};

/// A fresh pass id: 12 random hex digits.
fn new_pass_id() -> String {
    let buf = crate::random::bytes::<6>().unwrap_or_else(|| {
        let t = now_ms() as u64 ^ ((std::process::id() as u64) << 20);
        let mut b = [0u8; 6];
        b.copy_from_slice(&t.to_le_bytes()[..6]);
        b
    });
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A lease the evidence rules free, and the line that says so once freed.
struct Planned {
    eviction: Eviction,
    note: String,
    pass_id: String,
}

/// Log the evictions that took effect and, when the pass took a slot in the
/// same transaction, its new token.
fn report_evictions(plan: &[Planned], attempt: &Attempt, evidence: &Evidence) {
    for p in plan
        .iter()
        .filter(|p| attempt.evicted.contains(&p.eviction))
    {
        say!("{}", p.note);
        if let Some(dir) = &evidence.lock_dir {
            remove_stale_lock(dir, &p.pass_id);
        }
    }
    if let (false, Acquire::Acquired(key)) = (attempt.evicted.is_empty(), &attempt.result) {
        say!(
            "{}: took slot {} with new token {}",
            key.job,
            key.slot,
            key.token
        );
    }
}

/// What every state of a pass shares: its settings, its connection to the
/// store, what it asks the store for, and where its events arrive.
struct Ctx {
    settings: RunSettings,
    /// The pass's connection. On PostgreSQL it is lent to the renewer
    /// while the command runs: a fleet of passes should cost the server
    /// one connection each at most.
    store: StoreHandle,
    req: AcquireRequest,
    events: Receiver<Event>,
    sender: Sender<Event>,
    started_ms: i64,
    /// When the pass began, and when its command was released to exec, on
    /// the monotonic clock: the wait and the duration are measured apart.
    started: Instant,
    child_started: Option<Instant>,
    evidence: Evidence,
    /// The store this pass started with; losing it loses the lease.
    pin: Arc<StorePin>,
    /// Holders already warned about (slot, token): alive past their lease.
    warned: HashSet<(u32, i64)>,
}

/// A pass whose command is forked and held before exec, not yet on record.
struct Prepared {
    ctx: Ctx,
    held: HeldChild,
}

/// A pass queued for a slot (`--wait`): its row and its held command on
/// record.
struct Queued {
    ctx: Ctx,
    held: HeldChild,
    id: i64,
    /// This waiter's wake FIFO, watched from before its row existed.
    wake: Option<wake::WakeWatch>,
}

/// A pass holding a slot: its command on record with it, released to exec
/// only by `Holding::run`.
struct Holding {
    ctx: Ctx,
    held: HeldChild,
    key: LeaseKey,
}

/// Where taking a slot led.
enum Taken {
    Holding(Holding),
    Queued(Queued),
    /// The pass ended without running its command: its exit code.
    Done(i32),
}

pub fn run(choice: &StoreChoice, settings: RunSettings) -> Result<i32> {
    let spec = choice.spec.clone();
    // Handlers first: a TERM that arrives while we take the lease is queued
    // and acted on, never the default "die holding it".
    let (sender, events) = mpsc::channel();
    supervise::watch_signals(sender.clone()).context("cannot install signal handlers")?;
    let started_ms = now_ms();
    let started = Instant::now();
    // A pass whose containers could be neither judged nor stopped here
    // would be judged by its processes alone: refused before anything.
    if let Some(engine) = settings.containers {
        if !crate::engine::installed(engine) {
            anyhow::bail!(
                "--containers {0}: {0} is not in PATH, so the pass's containers could be \
                 neither judged nor stopped; install it or set PATH",
                engine.as_str()
            );
        }
    }
    let mut store = open_to_write(choice)?;
    crate::trace::mark("open.sqlite");
    let pin = Arc::new(StorePin::new(&spec, store.as_mut())?);
    crate::trace::mark("open.pin");
    let evidence = evidence(&spec);
    crate::trace::mark("open.evidence");
    let pass_id = new_pass_id();
    let lock = match spec.lock_dir() {
        Some(dir) => Some(
            HolderLock::take(&dir, &pass_id, spec.modes())
                .with_context(|| format!("cannot create holder lock in {}", dir.display()))?,
        ),
        None => None,
    };
    // The command is forked now and held before exec: its pid goes on
    // record in the same transaction that takes the slot (or queues).
    let mut env = vec![
        (crate::spawn::JOB_ENV, settings.job.clone()),
        (crate::process::identity::PASS_ENV, pass_id.clone()),
    ];
    if settings.containers.is_some() {
        if let Some(label) = crate::engine::label(&pass_id) {
            env.push((crate::engine::LABEL_ENV, label));
        }
    }
    crate::trace::mark("open");
    let held = HeldChild::fork(&settings.argv, &env).map_err(|e| anyhow::anyhow!(e.message))?;
    crate::trace::mark("fork");
    let identity = &evidence.me;
    let holder = Holder {
        host: identity.host.clone(),
        boot_id: identity.boot_id.clone(),
        pid_ns: identity.pid_ns.clone(),
        wrapper: this_process(),
        child: Some(held.proc()),
    };
    let req = AcquireRequest {
        job: settings.job.clone(),
        pass_id,
        holder,
        argv: settings.argv_text.clone(),
        cwd: std::env::current_dir()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default(),
        slots: settings.slots,
        lease: settings.lease,
        max_hold: settings.max_hold,
        containers: settings.containers,
    };
    let ctx = Ctx {
        store: StoreHandle::new(spec, Duration::MAX, Some(store)),
        settings,
        req,
        events,
        sender,
        started_ms,
        started,
        child_started: None,
        evidence,
        pin,
        warned: HashSet::new(),
    };
    let code = match (Prepared { ctx, held }).take() {
        Ok(Taken::Holding(h)) => {
            crate::trace::mark("take");
            h.run()
        }
        Ok(Taken::Queued(q)) => q.wait(),
        Ok(Taken::Done(code)) => Ok(code),
        Err(e) => Err(e),
    };
    // The kernel lock is evidence until the lease is gone: drop it last.
    drop(lock);
    code
}

impl Ctx {
    fn label(&self) -> String {
        self.settings.job.clone()
    }
}

/// The pause as a pass reports it; its reason is text from the store.
fn paused_line(p: &PauseInfo) -> String {
    let all = if p.all { " (pause --all)" } else { "" };
    let by = match &p.owner {
        Some(o) => format!(" by {}{all}", escape(o)),
        None => all.to_string(),
    };
    match &p.reason {
        Some(r) => format!("paused{by} ({}, since {})", escape(r), utc_ms(p.since_ms)),
        None => format!("paused{by} (since {})", utc_ms(p.since_ms)),
    }
}
