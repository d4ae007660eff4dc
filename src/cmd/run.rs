//! `jobrun run NAME -- COMMAND`: take a slot (or queue for one), run the
//! command under a renewed lease, release only after the child is gone,
//! record the pass.

use std::collections::HashSet;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::clock::now_ms;
use crate::cmd::{evidence, holder_name, judged, queued_pass};
use crate::exit;
use crate::lease::{
    decide, decide_waiter, renew_interval, Decision, Eviction, FreeReason, Holder, LeaseKey,
    Outcome, PassRecord, WaiterDecision,
};
use crate::liveness::{
    remove_stale_lock, this_process, Evidence, HolderLock, Liveness, StoreReach,
};
use crate::renewer::{Held, Renewer, RenewerConfig, RenewerExit, StoreLease};
use crate::report::{escape, human_ms, utc_ms};
use crate::say;
use crate::settings::RunSettings;
use crate::spawn::HeldChild;
use crate::store::{
    Acquire, AcquireRequest, Attempt, Enqueue, PauseInfo, Store, StoreError, StorePin, StoreSpec,
};
use crate::supervise::{self, classify, Event, SignalKind};

/// The longest fallback poll of a waiter that a release wakes.
const QUIET_POLL: Duration = Duration::from_secs(5);

/// How long a waiter that hears releases (PostgreSQL's LISTEN) sleeps
/// between polls at most: the polls only catch what sends no notification
/// (a holder that died or whose lease lapsed).
const LISTENING_POLL: Duration = Duration::from_secs(5);

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
    spec: StoreSpec,
    settings: RunSettings,
    /// On PostgreSQL, closed while the child runs: the renewer has its own
    /// connection, and a fleet of passes should cost the server one each.
    conn: Option<Box<dyn Store>>,
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
        spec,
        settings,
        conn: Some(store),
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

    fn go(&mut self) -> Result<i32> {
        // Try the slot first: a free job needs no judging. Only when it is
        // held are its holders judged and the forfeit ones evicted.
        let mut got = self.acquire(&[])?;
        if !matches!(got, Acquire::Acquired(_)) {
            let plan = self.reconcile()?;
            if !plan.is_empty() {
                got = self.acquire(&plan)?;
            }
        }
        // A dead waiter nobody queues behind would keep every later pass
        // out: judge the queue too, and look again if a ghost was removed.
        // (A pass that will queue judges the waiters ahead of it from the
        // queue, a few at a time, instead of all of them on arrival.)
        if got == Acquire::Full && self.settings.wait.is_none() && self.remove_ghosts(i64::MAX)? > 0
        {
            let plan = self.reconcile()?;
            got = self.acquire(&plan)?;
        }
        if !matches!(got, Acquire::Acquired(_)) && self.settings.wait.is_none() {
            self.held = None;
        }
        match got {
            Acquire::Acquired(key) => self.run_child(key),
            Acquire::Paused(p) if self.settings.wait.is_none() => {
                if !self.settings.quiet {
                    say!("{}: {}; skipping", self.label(), paused_line(&p));
                }
                self.record_not_run(Outcome::Skipped)?;
                Ok(self.settings.conflict_exit_code)
            }
            _ if self.settings.wait.is_some() => self.queue(),
            _ => self.conflict(),
        }
    }

    /// Take a slot, evicting what `plan` names.
    fn acquire(&mut self, plan: &[Planned]) -> Result<Acquire> {
        let evict: Vec<Eviction> = plan.iter().map(|p| p.eviction.clone()).collect();
        let attempt = open(&mut self.conn, &self.spec)?.acquire(&self.req, &evict)?;
        report_evictions(plan, &attempt, &self.evidence);
        Ok(attempt.result)
    }

    /// Promote this waiter if its turn has come, evicting what `plan` names.
    fn promote(&mut self, id: i64, plan: &[Planned]) -> Result<Acquire> {
        let evict: Vec<Eviction> = plan.iter().map(|p| p.eviction.clone()).collect();
        let attempt = open(&mut self.conn, &self.spec)?.promote(id, &self.req, &evict)?;
        report_evictions(plan, &attempt, &self.evidence);
        Ok(attempt.result)
    }

    /// Judge every holder of the job and plan what the rules free, with the
    /// line to log if it is freed. Probes run here, outside transactions.
    fn reconcile(&mut self) -> Result<Vec<Planned>> {
        let job = self.settings.job.clone();
        let leases = open(&mut self.conn, &self.spec)?.leases(std::slice::from_ref(&job))?;
        let mut plan = Vec::new();
        for (l, v) in judged(leases, &self.evidence) {
            match decide(&l, v.liveness, false) {
                Decision::Free(eviction, reason) => {
                    let why = match reason {
                        FreeReason::Forfeited => format!(
                            "held {} past its max hold {} ({v})",
                            human_ms(l.held_ms),
                            human_ms(l.max_hold_ms)
                        ),
                        FreeReason::LapsedUnknown => {
                            format!("lease lapsed {} ago ({v})", human_ms(-l.expires_in_ms))
                        }
                        FreeReason::Dead | FreeReason::Forced => v.to_string(),
                    };
                    let note = format!(
                        "{}: freed slot {} (token {}) of holder {}: {}",
                        escape(&l.job),
                        l.slot,
                        l.token,
                        holder_name(&l),
                        escape(&why)
                    );
                    plan.push(Planned {
                        eviction,
                        note,
                        pass_id: l.pass_id.clone(),
                    });
                }
                Decision::Keep if l.lapsed() && v.liveness == Liveness::Alive => {
                    // Once per holder, not at every poll of a queued pass.
                    if self.warned.insert((l.slot, l.token)) {
                        say!(
                            "{}: warning: lease lapsed {} ago but holder {} is alive ({}); \
                             keeping it",
                            escape(&l.job),
                            human_ms(-l.expires_in_ms),
                            holder_name(&l),
                            escape(&v.reason)
                        );
                    }
                }
                Decision::Keep => {}
            }
        }
        Ok(plan)
    }

    /// The slot is held: one line naming the holder, then the conflict code.
    fn conflict(&mut self) -> Result<i32> {
        if self.settings.coalesce {
            self.remove_ghosts(i64::MAX)?;
        }
        let jobs = std::slice::from_ref(&self.settings.job);
        if self.settings.coalesce && self.settings.argv_exact {
            let cwd = self.req.cwd.clone();
            let queued = open(&mut self.conn, &self.spec)?.waiters(jobs)?;
            if let Some(w) = queued
                .iter()
                .find(|w| w.argv == self.settings.argv_text && w.cwd == cwd)
            {
                return self.coalesced(&w.pass_id.clone());
            }
        }
        if !self.settings.quiet {
            let leases = open(&mut self.conn, &self.spec)?.leases(jobs)?;
            let queued = open(&mut self.conn, &self.spec)?.waiters(jobs)?.len();
            let line = match leases.first() {
                Some(l) => {
                    let v = self.evidence.judge(&l.holder, &l.pass_id);
                    let more = if leases.len() > 1 {
                        format!(" (+{} more)", leases.len() - 1)
                    } else {
                        String::new()
                    };
                    format!(
                        "already running; skipping: held by {} since {}, renewed {} ago, \
                         token {} ({}){more}",
                        holder_name(l),
                        utc_ms(l.acquired_at_ms),
                        crate::report::age_ms(l.renewed_ago_ms),
                        l.token,
                        escape(&v.to_string())
                    )
                }
                None => format!("{queued} pass(es) queued ahead; skipping"),
            };
            say!("{}: {line}", self.label());
        }
        self.record_not_run(Outcome::Skipped)?;
        Ok(self.settings.conflict_exit_code)
    }

    fn coalesced(&mut self, into: &str) -> Result<i32> {
        self.held = None;
        say!(
            "{}: coalesced into queued pass {}",
            self.label(),
            escape(into)
        );
        self.record_not_run(Outcome::Coalesced)?;
        Ok(self.settings.coalesced_exit_code)
    }

    fn record_not_run(&mut self, outcome: Outcome) -> Result<()> {
        self.record(None, outcome, None, None)
    }

    fn record(
        &mut self,
        key: Option<&LeaseKey>,
        outcome: Outcome,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> Result<()> {
        let pass = self.pass_record(key, outcome, code, signal);
        Ok(open(&mut self.conn, &self.spec)?.record_pass(&pass, self.settings.keep_history)?)
    }

    fn pass_record(
        &self,
        key: Option<&LeaseKey>,
        outcome: Outcome,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> PassRecord {
        let ended = now_ms();
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let (waited, duration) = match self.child_started {
            Some(at) => (at.duration_since(self.started), at.elapsed()),
            None => (self.started.elapsed(), Duration::ZERO),
        };
        PassRecord {
            job: self.settings.job.clone(),
            pass_id: self.req.pass_id.clone(),
            token: key.map(|k| k.token),
            slot: key.map(|k| k.slot),
            host: self.evidence.me.host.clone(),
            pid: self.req.holder.wrapper.pid,
            started_at_ms: self.started_ms,
            ended_at_ms: ended,
            duration_ms: ms(duration),
            waited_ms: Some(ms(waited)),
            exit_code: code,
            signal,
            outcome,
        }
    }

    /// A terminating signal that arrived before the child existed.
    fn pending_stop(&self) -> Option<i32> {
        let mut stop = None;
        while let Ok(e) = self.events.try_recv() {
            if let Event::Signal(s) = e {
                if let SignalKind::Stop { .. } = classify(s) {
                    stop.get_or_insert(s);
                }
            }
        }
        stop
    }

    fn run_child(&mut self, key: LeaseKey) -> Result<i32> {
        let label = format!("{} slot {} (token {})", key.job, key.slot, key.token);
        let taken = Instant::now();
        let Some(held) = self.held.take() else {
            self.finish(&key, Outcome::Failed, None, None);
            anyhow::bail!("{label}: the command was not held");
        };
        if let Some(sig) = self.pending_stop() {
            drop(held);
            say!("{label}: stopped by signal {sig} before the command started");
            self.finish(&key, Outcome::Stopped, None, Some(sig));
            return Ok(exit::SIGNAL_BASE + sig);
        }
        if self.spec.reach() == StoreReach::Fleet {
            self.conn = None;
        }
        // On record with the slot: let it exec, with its fencing token.
        // From here until it is reaped nothing may return early: the child
        // must never run unsupervised.
        let mut child = held.release(key.token, key.slot);
        self.child_started = Some(Instant::now());
        let watched = supervise::watch_exit(child.id(), self.sender.clone())
            .context("cannot watch the child")
            .and_then(|()| self.start_renewer(Held::Lease(key.clone()), &label, taken));
        let renewer = match watched {
            Ok(r) => r,
            Err(e) => {
                child.kill_and_reap();
                self.finish(&key, Outcome::Failed, None, Some(libc::SIGKILL));
                return Err(e);
            }
        };
        let ended = supervise::supervise(
            &mut child,
            &self.events,
            self.settings.kill_after,
            self.settings.on_lost,
            &label,
        );
        let renewer_exit = renewer.stop();
        if let Some(e) = child.exec_failure(&self.settings.argv_text[0]) {
            say!("{}: {}", self.label(), e.message);
            self.finish(&key, Outcome::SpawnFailed, Some(e.code), None);
            return Ok(e.code);
        }
        let lost = ended.lease_lost || renewer_exit == RenewerExit::LeaseLost;
        // The outcome follows how the command ended: `stopped` only when it
        // died of the terminating signal the wrapper forwarded, or of a KILL
        // after it (the wrapper's --kill-after, stop-due's --kill-after); a
        // command that handled the signal and exited is judged by its exit
        // code like any other.
        let died_of_stop = ended.stopped_by.is_some()
            && (ended.signal == ended.stopped_by || ended.signal == Some(libc::SIGKILL));
        let outcome = if died_of_stop {
            Outcome::Stopped
        } else if lost {
            Outcome::LostLease
        } else if ended.killed || ended.signal.is_some() {
            Outcome::Killed
        } else if ended.code == Some(0) {
            Outcome::Ok
        } else {
            Outcome::Failed
        };
        self.finish(&key, outcome, ended.code, ended.signal);
        Ok(ended.exit_code())
    }

    fn start_renewer(&self, held: Held, label: &str, taken: Instant) -> Result<Renewer> {
        let events = self.sender.clone();
        // Max hold bounds a running pass; a waiter is bounded by --wait.
        let max_hold = match held {
            Held::Lease(_) => self.settings.max_hold,
            Held::Waiter { .. } => Duration::MAX,
        };
        let lease = StoreLease::new(
            self.spec.clone(),
            held,
            self.settings.lease,
            Arc::clone(&self.pin),
        );
        let cfg = RenewerConfig {
            label: label.to_string(),
            interval: renew_interval(self.settings.lease),
            lease: self.settings.lease,
            max_hold,
            taken,
        };
        Renewer::spawn(lease, cfg, move |exit| {
            let _ = events.send(match exit {
                RenewerExit::MaxHold => Event::MaxHold,
                _ => Event::LeaseLost,
            });
        })
        .context("cannot start the renewer")
    }

    /// Run `op` on the pass's connection; a failure is retried twice on a
    /// fresh connection, after 200 ms and then 1 s.
    fn with_retries<T>(
        &mut self,
        mut op: impl FnMut(&mut dyn Store) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut last = None;
        for pause in [0, 200, 1000] {
            std::thread::sleep(Duration::from_millis(pause));
            let done = match open(&mut self.conn, &self.spec) {
                Ok(store) => op(store.as_mut()),
                Err(e) => Err(e),
            };
            match done {
                Ok(v) => return Ok(v),
                Err(e) => {
                    self.conn = None;
                    last = Some(e);
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// Give the slot back and record the pass, in one transaction. If that
    /// keeps failing the lease lapses on its own (and the dead wrapper's
    /// evidence frees it sooner); the pass still exits with its command's
    /// code.
    fn finish(&mut self, key: &LeaseKey, outcome: Outcome, code: Option<i32>, signal: Option<i32>) {
        // A store deleted or replaced under the pass: its lease went with
        // it, and the store now at that path (if any) never knew the pass.
        if let Err(why) = self.pin.check_file() {
            say!(
                "{} slot {}: {why}; the lease was lost with it and the pass is not recorded",
                key.job,
                key.slot
            );
            return;
        }
        let pass = self.pass_record(Some(key), outcome, code, signal);
        let keep = self.settings.keep_history;
        match self.with_retries(|store| store.release(key, Some((&pass, keep)))) {
            Ok(true) => {
                if let Ok(store) = open(&mut self.conn, &self.spec) {
                    crate::wake::wake_next(&self.spec, store.as_mut(), &key.job);
                }
            }
            Ok(false) => say!(
                "{} slot {}: lock was no longer ours at release (token {})",
                key.job,
                key.slot,
                key.token
            ),
            Err(e) => say!(
                "{} slot {}: release failed, the lease will lapse and the pass is not \
                 recorded: {e}",
                key.job,
                key.slot
            ),
        }
    }

    /// `--wait`: queue FIFO for a slot.
    fn queue(&mut self) -> Result<i32> {
        let wait = self.settings.wait.unwrap_or_default();
        if self.settings.coalesce {
            // Never coalesce into a ghost: its work would never run.
            self.remove_ghosts(i64::MAX)?;
        }
        // Watched before the row exists: a release in between wakes it.
        let wake = crate::wake::watch(&self.spec, &self.req.pass_id, self.sender.clone());
        let id = match open(&mut self.conn, &self.spec)?.enqueue(
            &self.req,
            self.settings.coalesce && self.settings.argv_exact,
        )? {
            Enqueue::Coalesced(p) => return self.coalesced(&p),
            Enqueue::Queued(id) => id,
        };
        let arrived = Instant::now();
        // Settings bound --wait to 100 years; past the clock's range, no
        // deadline at all.
        let deadline = arrived.checked_add(wait);
        // On PostgreSQL, releases of this job on any host also wake this
        // waiter (LISTEN/NOTIFY); it then polls rarely, holding only the
        // listening connection in between.
        let listener = crate::notify::listen(&self.spec, &self.settings.job, self.sender.clone());
        let held = Held::Waiter {
            id,
            job: self.settings.job.clone(),
            pass_id: self.req.pass_id.clone(),
        };
        let renewer = self.start_renewer(
            held,
            &format!("{} (queued pass {})", self.settings.job, self.req.pass_id),
            arrived,
        )?;
        let mut poll = Duration::from_millis(20);
        // The fallback poll: every release on a one-machine store wakes the
        // waiters it lets in, so a waiter with a wake file there polls
        // rarely (it still finds a ghost ahead of it, or a pause lifted); on
        // a fleet store a listening waiter is woken by releases on any host.
        let max_poll = if wake.is_some() && self.spec.reach() == StoreReach::OneMachine {
            QUIET_POLL
        } else if listener.is_some() {
            LISTENING_POLL
        } else {
            Duration::from_secs(1)
        };
        let mut position = 0;
        let mut paused = false;
        let mut store_failing = false;
        let result = loop {
            match self.queue_step(id) {
                Ok(Acquire::Acquired(key)) => break Ok(key),
                Ok(Acquire::Gone) => {
                    break Err((
                        "its queue row was removed (cleared as a ghost)",
                        Outcome::Skipped,
                    ))
                }
                Ok(Acquire::Paused(p)) => {
                    if !paused {
                        say!("{}: {}; waiting", self.label(), paused_line(&p));
                        paused = true;
                    }
                }
                Ok(Acquire::Behind(pos)) => {
                    position = pos;
                    paused = false;
                }
                Ok(Acquire::Full) => {}
                // A store that is busy or unreachable for a moment costs
                // this waiter polls, not its place: it keeps waiting (its
                // renewer keeps the row) and tries a fresh connection.
                Err(e)
                    if e.downcast_ref::<StoreError>()
                        .is_some_and(StoreError::is_transient) =>
                {
                    if !store_failing {
                        say!(
                            "{}: store unavailable while queued, still waiting: {e:#}",
                            self.label()
                        );
                        store_failing = true;
                    }
                    self.conn = None;
                }
                Err(e) => {
                    self.held = None;
                    renewer.stop();
                    let _ = self.with_retries(|store| store.remove_waiter(id, false));
                    return Err(e);
                }
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                let why = if paused {
                    "timed out while the job was paused"
                } else {
                    "timed out"
                };
                break Err((why, Outcome::TimedOut));
            }
            let left = deadline.map_or(poll, |d| d.saturating_duration_since(now));
            if listener.is_some() && poll >= Duration::from_secs(1) {
                self.conn = None;
            }
            match self.events.recv_timeout(poll.min(left)) {
                Ok(Event::Signal(s)) if classify(s) != SignalKind::ForwardOnly => {
                    self.held = None;
                    renewer.stop();
                    let _ = self.with_retries(|store| store.remove_waiter(id, false));
                    say!("{}: stopped by signal {s} while queued", self.label());
                    self.record_not_run(Outcome::Stopped)?;
                    return Ok(exit::SIGNAL_BASE + s);
                }
                Ok(Event::LeaseLost) => break Err(("its queue row was lost", Outcome::Skipped)),
                // A release on this machine: look again at once.
                Ok(_) => poll = Duration::from_millis(20),
                Err(RecvTimeoutError::Timeout) => {
                    poll = (poll * 3 / 2).min(max_poll);
                }
                Err(RecvTimeoutError::Disconnected) => {}
            }
        };
        renewer.stop();
        drop(wake);
        drop(listener);
        self.drop_stale_events();
        match result {
            Ok(key) => {
                // Slots still free (several released at once, a pause
                // lifted): the next in line can be promoted too.
                if let Ok(store) = open(&mut self.conn, &self.spec) {
                    crate::wake::wake_next(&self.spec, store.as_mut(), &key.job);
                }
                self.run_child(key)
            }
            Err((why, outcome)) => {
                self.held = None;
                let _ = self.with_retries(|store| store.remove_waiter(id, false));
                if !self.settings.quiet {
                    let at = if position > 0 {
                        format!(" at queue position {position}")
                    } else {
                        String::new()
                    };
                    say!(
                        "{}: gave up waiting after {}{at}: {why}",
                        self.label(),
                        human_ms(arrived.elapsed().as_millis() as i64)
                    );
                }
                self.record_not_run(outcome)?;
                Ok(self.settings.conflict_exit_code)
            }
        }
    }

    /// One look at the queue: judge holders, try to promote; when behind,
    /// remove the ghosts ahead and look again. A paused job promotes nobody
    /// but still removes ghosts.
    fn queue_step(&mut self, id: i64) -> Result<Acquire> {
        loop {
            let plan = self.reconcile()?;
            // Reads first: a waiter that cannot be promoted yet takes no
            // write lock (on SQLite a poller holding it while descheduled
            // delays the release and promotion it waits for).
            if plan.is_empty() {
                if let Some((position, window)) = self.surely_behind(id)? {
                    // Only a ghost among those who could be promoted now
                    // holds anyone up; judging the whole queue at every
                    // poll of every waiter costs a long queue dearly.
                    if self.remove_ghosts_ahead(id, window)? == 0 {
                        return Ok(Acquire::Behind(position));
                    }
                    continue;
                }
            }
            let got = self.promote(id, &plan)?;
            let removed = match got {
                Acquire::Behind(_) => self.remove_ghosts(id)?,
                Acquire::Paused(_) => self.remove_ghosts(i64::MAX)?,
                _ => 0,
            };
            if removed == 0 || !matches!(got, Acquire::Behind(_)) {
                return Ok(got);
            }
        }
    }

    /// `Some((position, free slots))` when waiter `id` is queued behind
    /// the free slots of an unpaused job, by reads alone (the same count as
    /// promotion); `None` when promotion must decide.
    fn surely_behind(&mut self, id: i64) -> Result<Option<(u32, usize)>> {
        let jobs = std::slice::from_ref(&self.settings.job);
        let store = open(&mut self.conn, &self.spec)?;
        let waiters = store.waiters(jobs)?;
        let Some(rank) = waiters.iter().position(|w| w.id == id) else {
            return Ok(None);
        };
        let leases = store.leases(jobs)?;
        let limit = leases
            .iter()
            .map(|l| l.slots)
            .chain(waiters.iter().map(|w| w.slots))
            .chain([self.settings.slots])
            .min()
            .unwrap_or(1)
            .max(1) as usize;
        let free = limit.saturating_sub(leases.len());
        if rank < free {
            return Ok(None);
        }
        let paused = store
            .pauses()?
            .iter()
            .any(|p| p.job == "*" || p.job == self.settings.job);
        Ok((!paused).then_some((rank as u32 + 1, free)))
    }

    /// Events left over from the wait (the waiter renewer's, wake-ups) must
    /// not reach the pass: only signals are kept.
    fn drop_stale_events(&mut self) {
        let mut signals = vec![];
        while let Ok(e) = self.events.try_recv() {
            if let Event::Signal(s) = e {
                signals.push(s);
            }
        }
        for s in signals {
            let _ = self.sender.send(Event::Signal(s));
        }
    }

    /// Remove dead (or lapsed and unknown) waiters ahead of `id`. Returns how
    /// many were removed.
    fn remove_ghosts(&mut self, id: i64) -> Result<u32> {
        self.remove_ghosts_ahead(id, usize::MAX)
    }

    /// Remove dead (or lapsed and unknown) waiters among the first
    /// `window` (at least one) of those ahead of `id`.
    fn remove_ghosts_ahead(&mut self, id: i64, window: usize) -> Result<u32> {
        let job = self.settings.job.clone();
        let waiters = open(&mut self.conn, &self.spec)?.waiters(std::slice::from_ref(&job))?;
        let mut removed = 0;
        for w in waiters.iter().filter(|w| w.id < id).take(window.max(1)) {
            let v = self.evidence.judge_waiter(&w.holder, &w.pass_id);
            let gone = match decide_waiter(w, v.liveness) {
                WaiterDecision::Remove { only_if_lapsed } => {
                    open(&mut self.conn, &self.spec)?.remove_waiter(w.id, only_if_lapsed)?
                }
                WaiterDecision::Keep => false,
            };
            if gone {
                crate::wake::remove_stale(&self.spec, &w.pass_id);
                say!("{}: removed {}", escape(&w.job), queued_pass(w, &v));
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// The pass's own connection, reopened if it was closed.
fn open<'a>(
    conn: &'a mut Option<Box<dyn Store>>,
    spec: &StoreSpec,
) -> Result<&'a mut Box<dyn Store>, crate::store::StoreError> {
    match conn {
        Some(s) => Ok(s),
        None => Ok(conn.insert(spec.open()?)),
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
