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
pub mod output;
mod pass;
mod queue;
mod renewal;
pub mod wake;

use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::clock::now_ms;
use crate::cmd::{evidence, open_to_write};
use crate::events::{self, Event, EventSender, Events};
use crate::evidence::Evidence;
use crate::files::{remove_stale_lock, HolderLock};
use crate::policy::lease::{Eviction, Holder, LeaseKey};
use crate::policy::window::{WindowRow, WindowSpec};
use crate::process::this_process;
use crate::report::{escape, utc_ms};
use crate::say;
use crate::settings::{RunSettings, StoreChoice};
use crate::spawn::HeldChild;
use crate::store::{Acquire, AcquireRequest, Attempt, PauseInfo, StoreHandle, StorePin};
use crate::supervise;

/// The variable `--db` is read from (`cli::Cli::db`).
const DB_ENV: &str = "JOBRUN_DB";

/// The variables of jobrun's environment that neither the command nor a
/// hook inherits: a password in JOBRUN_DB is jobrun's (a jobrun run inside
/// them needs .pgpass or its own --db); PGPASSWORD is the caller's and is
/// left alone.
pub(crate) fn withheld() -> &'static [&'static str] {
    match std::env::var_os(DB_ENV) {
        Some(db) if crate::store::holds_password(&db.to_string_lossy()) => &[DB_ENV],
        _ => &[],
    }
}
/// The window a windowed pass runs in, as its command gets it.
pub const WINDOW_ENV: &str = "JOBRUN_WINDOW";

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
        say!(warning, "{}", p.note);
        if let Some(dir) = &evidence.lock_dir {
            remove_stale_lock(dir, &p.pass_id);
        }
    }
    if let (false, Acquire::Acquired(key)) = (attempt.evicted.is_empty(), &attempt.result) {
        say!(
            notice,
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
    events: Events,
    sender: EventSender,
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
    /// The command's output, when captured: read from its release on.
    capture: Option<crate::capture::Capture>,
    /// The window this pass claimed with its slot, or found done or given
    /// up: history records it.
    window: Option<String>,
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
    let (sender, events) = events::watch_signals().context("cannot install signal handlers")?;
    // Orphans of the command come to this process, where the end of the
    // pass finds them without listing every process (`process::own_group`).
    crate::process::become_subreaper();
    // --spread and --jitter: before anything is taken, and apart from the
    // pass's own wait and duration.
    if let Some(sig) = delay_before_pass(&settings, &events) {
        return Ok(stopped_before_trying(
            &settings,
            sig,
            "--spread/--jitter wait",
        ));
    }
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
    // Passes of one store start (open it, take their slot) a few at a
    // time, as many as there are CPUs (`store::gate`).
    let mut stop = None;
    let gate = choice.spec.start_gate(&mut || {
        stop = events.try_iter().find_map(stop_signal);
        stop.is_some()
    });
    if let Some(sig) = stop {
        return Ok(stopped_before_trying(
            &settings,
            sig,
            "waiting among the store's starters",
        ));
    }
    crate::trace::mark("open.starters");
    let mut store = open_to_write(choice)?;
    crate::trace::mark("open.sqlite");
    let pin = Arc::new(StorePin::new(&spec, store.as_mut())?);
    crate::trace::mark("open.pin");
    let mut evidence = evidence(&spec);
    evidence.store_id = pin.stamp().map(String::from);
    crate::trace::mark("open.evidence");
    let pass_id = new_pass_id();
    let lock = match spec.lock_dir() {
        Some(dir) => Some(
            HolderLock::take(&dir, &pass_id, spec.modes(), spec.group())
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
    if let Some(stamp) = &evidence.store_id {
        env.push((crate::process::identity::STORE_ENV, stamp.clone()));
    }
    if settings.containers.is_some() {
        if let Some(label) = crate::engine::label(&pass_id) {
            env.push((crate::engine::LABEL_ENV, label));
        }
    }
    let unset = withheld();
    let capture = match &settings.output {
        Some(out) => Some(output::prepare(&spec, &pass_id, out)?),
        None => None,
    };
    // The window: an operator's key is known now; a --once-per window's
    // start is the store's to say, in the transaction that claims it.
    let numbered = match settings.window.as_ref().map(|w| &w.spec) {
        Some(WindowSpec::Key(key)) => {
            env.push((WINDOW_ENV, key.clone()));
            None
        }
        Some(WindowSpec::Every(_)) => Some(WINDOW_ENV),
        None => None,
    };
    crate::trace::mark("open");
    let held = HeldChild::fork_numbered(
        &settings.argv,
        &env,
        unset,
        capture.as_ref().map(|c| c.command_end()),
        numbered,
    )
    .map_err(|e| anyhow::anyhow!(e.message))?;
    crate::trace::mark("fork");
    let identity = &evidence.me;
    let holder = Holder {
        host: identity.host.clone(),
        boot_id: identity.boot_id.clone(),
        pid_ns: identity.pid_ns.clone(),
        time_ns: Some(identity.time_ns.clone()),
        session: Some(identity.session),
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
        window: settings.window.clone(),
        declared: settings.declared.clone(),
        max_idle: settings.max_idle,
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
        capture,
        window: None,
    };
    let taken = (Prepared { ctx, held }).take();
    drop(gate);
    let code = match taken {
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
    crate::cmd::metrics::refresh_after_pass(&choice.spec);
    code
}

/// The stop signal (TERM, INT, HUP, QUIT) `event` is, if it is one.
fn stop_signal(event: Event) -> Option<i32> {
    match event {
        Event::Signal(sig) => match supervise::classify(sig) {
            supervise::SignalKind::Stop { .. } => Some(sig),
            _ => None,
        },
        _ => None,
    }
}

/// A pass stopped by `sig` before it tried for a slot (`while`): said, and
/// its exit code.
fn stopped_before_trying(settings: &RunSettings, sig: i32, while_: &str) -> i32 {
    say!(
        notice,
        "{}: stopped by signal {sig} before trying for a slot ({while_}); nothing was taken",
        settings.job
    );
    crate::exit::of_signal(sig)
}

/// Wait the pass's `--spread` offset and `--jitter` before it tries for a
/// slot. `Some(signal)` when a stop signal (TERM, INT, HUP, QUIT) arrived
/// meanwhile: the pass then ends at once.
fn delay_before_pass(settings: &RunSettings, events: &Events) -> Option<i32> {
    if settings.spread.is_none() && settings.jitter.is_none() {
        return None;
    }
    let seed = std::env::var(crate::policy::delay::SEED_ENV)
        .ok()
        .map(|s| crate::policy::delay::stable_hash(&[s.as_bytes(), settings.job.as_bytes()]));
    let draw = seed
        .unwrap_or_else(|| crate::random::bytes::<8>().map_or(now_ms() as u64, u64::from_le_bytes));
    let host = crate::process::identity::Identity::current().host;
    let wait = crate::policy::delay::before_pass(
        &host,
        &settings.job,
        settings.spread,
        settings.jitter,
        draw,
    );
    let until = crate::clock::deadline_after(wait);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        match events.recv_timeout(left) {
            Ok(event) => {
                if let Some(sig) = stop_signal(event) {
                    return Some(sig);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => return None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(left);
                return None;
            }
        }
    }
}

impl Ctx {
    fn label(&self) -> String {
        self.settings.job.clone()
    }
}

/// A windowed pass that found its window done (or, `given_up`, out of
/// attempts): the line naming who did it, as text from the store escaped.
fn window_line(row: &WindowRow, given_up: bool) -> String {
    let (key, pass, host) = (escape(&row.key), escape(&row.pass_id), escape(&row.host));
    let at = row.ended_ms.map_or_else(|| "?".to_string(), utc_ms);
    if given_up {
        let outcome = escape(row.outcome.as_deref().unwrap_or("no recorded end"));
        format!(
            "window {key} given up after {} attempts (the last: pass {pass} on {host}, \
             {outcome} at {at})",
            row.attempts
        )
    } else {
        format!("window {key} done: pass {pass} on {host} ended ok at {at}")
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
