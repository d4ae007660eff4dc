//! `jobrun run NAME -- COMMAND`: take a slot (or queue for one), run the
//! command under a renewed lease, release only after the child is gone,
//! record the pass.
//!
//! `run()` here prepares a pass: it opens and pins the store, takes the
//! holder lock and forks the command, held before exec. `pass.rs` takes
//! the slot, runs the command and releases; `queue.rs` waits in line;
//! `wake.rs` and `notify.rs` wake waiters on this machine and across
//! hosts.

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
use crate::cmd::evidence;
use crate::evidence::Evidence;
use crate::files::{remove_stale_lock, HolderLock};
use crate::policy::lease::{Eviction, Holder};
use crate::process::this_process;
use crate::report::{escape, utc_ms};
use crate::say;
use crate::settings::RunSettings;
use crate::spawn::HeldChild;
use crate::store::{Acquire, AcquireRequest, Attempt, PauseInfo, StoreHandle, StorePin, StoreSpec};
use crate::supervise::{self, Event};

/// A fresh pass id: 12 random hex digits.
fn new_pass_id() -> String {
    let mut buf = [0u8; 6];
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        let t = now_ms() as u64 ^ ((std::process::id() as u64) << 20);
        buf.copy_from_slice(&t.to_le_bytes()[..6]);
    }
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

struct Pass {
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
    /// The command, forked and held until it is on record with the slot.
    held: Option<HeldChild>,
    /// Holders already warned about (slot, token): alive past their lease.
    warned: HashSet<(u32, i64)>,
}

pub fn run(spec: StoreSpec, settings: RunSettings) -> Result<i32> {
    // Handlers first: a TERM that arrives while we take the lease is queued
    // and acted on, never the default "die holding it".
    let (sender, events) = mpsc::channel();
    supervise::watch_signals(sender.clone()).context("cannot install signal handlers")?;
    let started_ms = now_ms();
    let started = Instant::now();
    let mut store = spec.open()?;
    let pin = Arc::new(StorePin::new(&spec, store.as_mut())?);
    let evidence = evidence(&spec);
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
    let env = [
        ("JOBRUN_JOB", settings.job.clone()),
        ("JOBRUN_PASS", pass_id.clone()),
    ];
    let held = HeldChild::fork(&settings.argv, &env).map_err(|e| anyhow::anyhow!(e.message))?;
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
    };
    let mut pass = Pass {
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
        held: Some(held),
        warned: HashSet::new(),
    };
    let code = pass.go();
    // The kernel lock is evidence until the lease is gone: drop it last.
    drop(lock);
    code
}

impl Pass {
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
