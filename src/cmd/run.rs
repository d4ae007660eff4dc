//! `jobrun run NAME -- COMMAND`: take a slot (or queue for one), run the
//! command under a renewed lease, release only after the child is gone,
//! record the pass.

use std::collections::HashSet;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::cmd::{holder_name, judged};
use crate::exit;
use crate::lease::{renew_interval, Eviction, Holder, LeaseKey, Outcome, PassRecord};
use crate::liveness::{
    decide, judge, start_time, this_process, Decision, HolderLock, Identity, Liveness, StoreReach,
};
use crate::renewer::{Held, Renewer, RenewerConfig, RenewerExit, StoreLease};
use crate::report::{human_ms, utc_ms};
use crate::say;
use crate::settings::RunSettings;
use crate::store::sqlite::local_now_ms;
use crate::store::{Acquire, AcquireRequest, Attempt, Enqueue, PauseInfo, Store, StoreSpec};
use crate::supervise::{self, Event};

/// A fresh pass id: 12 random hex digits.
fn new_pass_id() -> String {
    let mut buf = [0u8; 6];
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        let t = local_now_ms() as u64 ^ ((std::process::id() as u64) << 20);
        buf.copy_from_slice(&t.to_le_bytes()[..6]);
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A lease the evidence rules free, and the line that says so once freed.
struct Planned {
    eviction: Eviction,
    note: String,
}

/// Log the evictions that took effect and, when the pass took a slot in the
/// same transaction, its new token.
fn report_evictions(plan: &[Planned], attempt: &Attempt) {
    for p in plan
        .iter()
        .filter(|p| attempt.evicted.contains(&p.eviction))
    {
        say!("{}", p.note);
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
    identity: Identity,
    /// Holders already warned about (slot, token): alive past their lease.
    warned: HashSet<(u32, i64)>,
}

pub fn run(spec: StoreSpec, settings: RunSettings) -> Result<i32> {
    // Handlers first: a TERM that arrives while we take the lease is queued
    // and acted on, never the default "die holding it".
    let (sender, events) = mpsc::channel();
    supervise::watch_signals(sender.clone()).context("cannot install signal handlers")?;
    let started_ms = local_now_ms();
    let store = spec.open()?;
    let identity = Identity::current();
    let pass_id = new_pass_id();
    let lock = match spec.lock_dir() {
        Some(dir) => Some(
            HolderLock::take(&dir, &pass_id, spec.modes())
                .with_context(|| format!("cannot create holder lock in {}", dir.display()))?,
        ),
        None => None,
    };
    let holder = Holder {
        host: identity.host.clone(),
        boot_id: identity.boot_id.clone(),
        pid_ns: identity.pid_ns.clone(),
        wrapper: this_process(),
        child: None,
        lock_path: lock
            .as_ref()
            .map(|l| l.path().to_string_lossy().into_owned()),
    };
    let req = AcquireRequest {
        job: settings.job.clone(),
        pass_id,
        holder,
        argv: settings.argv.clone(),
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
        identity,
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
        let plan = self.reconcile()?;
        let mut got = self.acquire(&plan)?;
        // A dead waiter nobody queues behind would keep every later pass
        // out: judge the queue too, and look again if a ghost was removed.
        if got == Acquire::Full && self.remove_ghosts(i64::MAX)? > 0 {
            let plan = self.reconcile()?;
            got = self.acquire(&plan)?;
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
        report_evictions(plan, &attempt);
        Ok(attempt.result)
    }

    /// Promote this waiter if its turn has come, evicting what `plan` names.
    fn promote(&mut self, id: i64, plan: &[Planned]) -> Result<Acquire> {
        let evict: Vec<Eviction> = plan.iter().map(|p| p.eviction.clone()).collect();
        let attempt = open(&mut self.conn, &self.spec)?.promote(id, &self.req, &evict)?;
        report_evictions(plan, &attempt);
        Ok(attempt.result)
    }

    /// Judge every holder of the job and plan what the rules free, with the
    /// line to log if it is freed. Probes run here, outside transactions.
    fn reconcile(&mut self) -> Result<Vec<Planned>> {
        let job = self.settings.job.clone();
        let leases = open(&mut self.conn, &self.spec)?.leases(std::slice::from_ref(&job))?;
        let mut plan = Vec::new();
        for (l, v) in judged(leases, &self.spec) {
            match decide(&l, &v, false) {
                Decision::Free(eviction) => {
                    let why = if v.liveness == Liveness::Alive {
                        format!(
                            "held {} past its max hold {} ({v})",
                            human_ms(l.held_ms),
                            human_ms(l.max_hold_ms)
                        )
                    } else if v.liveness == Liveness::Unknown {
                        format!("lease lapsed {} ago ({v})", human_ms(-l.expires_in_ms))
                    } else {
                        v.to_string()
                    };
                    let note = format!(
                        "{}: freed slot {} (token {}) of holder {}: {why}",
                        l.job,
                        l.slot,
                        l.token,
                        holder_name(&l)
                    );
                    plan.push(Planned { eviction, note });
                }
                Decision::Keep if l.lapsed() && v.liveness == Liveness::Alive => {
                    // Once per holder, not at every poll of a queued pass.
                    if self.warned.insert((l.slot, l.token)) {
                        say!(
                            "{}: warning: lease lapsed {} ago but holder {} is alive ({}); \
                             keeping it",
                            l.job,
                            human_ms(-l.expires_in_ms),
                            holder_name(&l),
                            v.reason
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
        let jobs = std::slice::from_ref(&self.settings.job);
        if self.settings.coalesce {
            let cwd = self.req.cwd.clone();
            let queued = open(&mut self.conn, &self.spec)?.waiters(jobs)?;
            if let Some(w) = queued
                .iter()
                .find(|w| w.argv == self.settings.argv && w.cwd == cwd)
            {
                return self.coalesced(&w.pass_id.clone());
            }
        }
        if !self.settings.quiet {
            let leases = open(&mut self.conn, &self.spec)?.leases(jobs)?;
            let queued = open(&mut self.conn, &self.spec)?.waiters(jobs)?.len();
            let line = match leases.first() {
                Some(l) => {
                    let v = judge(&l.holder, &self.identity, self.spec.reach());
                    let more = if leases.len() > 1 {
                        format!(" (+{} more)", leases.len() - 1)
                    } else {
                        String::new()
                    };
                    format!(
                        "already running; skipping: held by {} since {}, renewed {} ago, \
                         token {} ({v}){more}",
                        holder_name(l),
                        utc_ms(l.acquired_at_ms),
                        human_ms(l.renewed_ago_ms),
                        l.token
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
        say!("{}: coalesced into queued pass {into}", self.label());
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
        let ended = local_now_ms();
        let pass = PassRecord {
            job: self.settings.job.clone(),
            pass_id: self.req.pass_id.clone(),
            token: key.map(|k| k.token),
            slot: key.map(|k| k.slot),
            host: self.identity.host.clone(),
            pid: self.req.holder.wrapper.pid,
            started_at_ms: self.started_ms,
            ended_at_ms: ended,
            duration_ms: ended - self.started_ms,
            exit_code: code,
            signal,
            outcome,
        };
        Ok(open(&mut self.conn, &self.spec)?.record_pass(&pass, self.settings.keep_history)?)
    }

    /// A terminating signal that arrived before the child existed.
    fn pending_stop(&self) -> Option<i32> {
        let mut stop = None;
        while let Ok(e) = self.events.try_recv() {
            if let Event::Signal(s) = e {
                if s != libc::SIGUSR1 && s != libc::SIGUSR2 {
                    stop.get_or_insert(s);
                }
            }
        }
        stop
    }

    fn run_child(&mut self, key: LeaseKey) -> Result<i32> {
        let label = format!("{} slot {} (token {})", key.job, key.slot, key.token);
        let taken = Instant::now();
        if let Some(sig) = self.pending_stop() {
            say!("{label}: stopped by signal {sig} before the command started");
            self.release(&key);
            self.record(Some(&key), Outcome::Stopped, None, Some(sig))?;
            return Ok(exit::SIGNAL_BASE + sig);
        }
        let env = [
            ("JOBRUN_JOB", key.job.clone()),
            ("JOBRUN_TOKEN", key.token.to_string()),
            ("JOBRUN_SLOT", key.slot.to_string()),
            ("JOBRUN_PASS", self.req.pass_id.clone()),
        ];
        let child = match supervise::spawn(&self.settings.argv, &env) {
            Ok(c) => c,
            Err(e) => {
                say!("{}: {}", self.label(), e.message);
                self.release(&key);
                self.record(Some(&key), Outcome::SpawnFailed, Some(e.code), None)?;
                return Ok(e.code);
            }
        };
        // From here until the child is reaped nothing may return early: the
        // child must never run unsupervised.
        let pid = child.id() as i32;
        if let Some(start) = start_time(pid) {
            let proc = crate::lease::Proc { pid, start };
            let recorded = match open(&mut self.conn, &self.spec) {
                Ok(store) => store.record_child(&key, proc),
                Err(e) => Err(e),
            };
            if let Err(e) = recorded {
                say!("{label}: could not record child pid {pid}: {e}");
            }
        }
        if self.spec.reach() == StoreReach::Fleet {
            self.conn = None;
        }
        let watched = supervise::watch_exit(child.id(), self.sender.clone())
            .context("cannot watch the child")
            .and_then(|()| self.start_renewer(Held::Lease(key.clone()), &label, taken));
        let renewer = match watched {
            Ok(r) => r,
            Err(e) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                self.release(&key);
                return Err(e);
            }
        };
        let ended = supervise::supervise(
            child,
            &self.events,
            self.settings.kill_after,
            self.settings.on_lost,
            &label,
        );
        let renewer_exit = renewer.stop();
        let lost = ended.lease_lost || renewer_exit == RenewerExit::LeaseLost;
        self.release(&key);
        let outcome = if ended.stopped_by.is_some() {
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
        self.record(Some(&key), outcome, ended.code, ended.signal)?;
        Ok(ended.exit_code())
    }

    fn start_renewer(&self, held: Held, label: &str, taken: Instant) -> Result<Renewer> {
        let events = self.sender.clone();
        // Max hold bounds a running pass; a waiter is bounded by --wait.
        let max_hold = match held {
            Held::Lease(_) => self.settings.max_hold,
            Held::Waiter(_) => Duration::MAX,
        };
        let lease = StoreLease::new(self.spec.clone(), held, self.settings.lease);
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

    /// Give the slot back. A busy store is retried briefly; if the release
    /// still fails the lease lapses on its own, and the dead wrapper's
    /// evidence frees it sooner.
    fn release(&mut self, key: &LeaseKey) {
        let mut last = None;
        for _ in 0..3 {
            let released = match open(&mut self.conn, &self.spec) {
                Ok(store) => store.release(key),
                Err(e) => Err(e),
            };
            match released {
                Ok(true) => {
                    wake_waiters(&self.spec);
                    return;
                }
                Ok(false) => {
                    say!(
                        "{} slot {}: lock was no longer ours at release (token {})",
                        key.job,
                        key.slot,
                        key.token
                    );
                    return;
                }
                Err(e) => {
                    // Try again on a fresh connection.
                    self.conn = None;
                    last = Some(e);
                }
            }
        }
        if let Some(e) = last {
            say!(
                "{} slot {}: release failed, the lease will lapse: {e}",
                key.job,
                key.slot
            );
        }
    }

    /// `--wait`: queue FIFO for a slot.
    fn queue(&mut self) -> Result<i32> {
        let wait = self.settings.wait.unwrap_or_default();
        let id =
            match open(&mut self.conn, &self.spec)?.enqueue(&self.req, self.settings.coalesce)? {
                Enqueue::Coalesced(p) => return self.coalesced(&p),
                Enqueue::Queued(id) => id,
            };
        let arrived = Instant::now();
        let deadline = arrived + wait;
        watch_wake(&self.spec, self.sender.clone());
        let renewer = self.start_renewer(
            Held::Waiter(id),
            &format!("{} (queued pass {})", self.settings.job, self.req.pass_id),
            arrived,
        )?;
        let mut poll = Duration::from_millis(20);
        let mut position = 0;
        let mut paused = false;
        let result = loop {
            let plan = self.reconcile()?;
            match self.promote(id, &plan)? {
                Acquire::Acquired(key) => break Ok(key),
                Acquire::Gone => break Err("its queue row was removed (cleared as a ghost)"),
                Acquire::Paused(p) => {
                    if !paused {
                        say!("{}: {}; waiting", self.label(), paused_line(&p));
                        paused = true;
                    }
                }
                Acquire::Behind(pos) => {
                    position = pos;
                    paused = false;
                    if self.remove_ghosts(id)? > 0 {
                        continue;
                    }
                }
                Acquire::Full => {}
            }
            let now = Instant::now();
            if now >= deadline {
                break Err(if paused {
                    "timed out while the job was paused"
                } else {
                    "timed out"
                });
            }
            match self.events.recv_timeout(poll.min(deadline - now)) {
                Ok(Event::Signal(s)) if s != libc::SIGUSR1 && s != libc::SIGUSR2 => {
                    renewer.stop();
                    let _ = open(&mut self.conn, &self.spec)?.remove_waiter(id, false);
                    say!("{}: stopped by signal {s} while queued", self.label());
                    self.record_not_run(Outcome::Stopped)?;
                    return Ok(exit::SIGNAL_BASE + s);
                }
                Ok(Event::LeaseLost) => break Err("its queue row was lost"),
                // A release on this machine: look again at once.
                Ok(_) => poll = Duration::from_millis(20),
                Err(RecvTimeoutError::Timeout) => {
                    poll = (poll * 3 / 2).min(Duration::from_secs(1));
                }
                Err(RecvTimeoutError::Disconnected) => {}
            }
        };
        renewer.stop();
        match result {
            Ok(key) => self.run_child(key),
            Err(why) => {
                let _ = open(&mut self.conn, &self.spec)?.remove_waiter(id, false);
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
                self.record_not_run(Outcome::TimedOut)?;
                Ok(self.settings.conflict_exit_code)
            }
        }
    }

    /// Remove dead (or lapsed and unknown) waiters ahead of `id`. Returns how
    /// many were removed.
    fn remove_ghosts(&mut self, id: i64) -> Result<u32> {
        let job = self.settings.job.clone();
        let waiters = open(&mut self.conn, &self.spec)?.waiters(std::slice::from_ref(&job))?;
        let mut removed = 0;
        for w in waiters.iter().filter(|w| w.id < id) {
            let v = judge(&w.holder, &self.identity, self.spec.reach());
            let gone = match v.liveness {
                Liveness::Dead => open(&mut self.conn, &self.spec)?.remove_waiter(w.id, false)?,
                Liveness::Unknown if w.lapsed() => {
                    open(&mut self.conn, &self.spec)?.remove_waiter(w.id, true)?
                }
                _ => false,
            };
            if gone {
                say!(
                    "{}: removed queued pass {} of {}:{} ({v})",
                    w.job,
                    w.pass_id,
                    w.holder.host,
                    w.holder.wrapper.pid
                );
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

fn paused_line(p: &PauseInfo) -> String {
    let by = if p.all { " (pause --all)" } else { "" };
    match &p.reason {
        Some(r) => format!("paused{by} ({r}, since {})", utc_ms(p.since_ms)),
        None => format!("paused{by} (since {})", utc_ms(p.since_ms)),
    }
}

fn open_wake_file(spec: &StoreSpec, path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = spec.modes().0;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(mode)
        .open(path)?;
    // Past the umask; another user's wake file keeps the mode it has.
    let _ = file.set_permissions(std::fs::Permissions::from_mode(mode));
    Ok(file)
}

/// Touch the wake file so waiters on this machine look at once.
fn wake_waiters(spec: &StoreSpec) {
    if let Some(Ok(f)) = spec.wake_path().map(|p| open_wake_file(spec, &p)) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

/// Forward changes of the wake file to `events` as `Event::Wake`, through
/// a thread blocked on inotify. Correctness never depends on it: waiters
/// also poll with a bounded interval.
fn watch_wake(spec: &StoreSpec, events: Sender<Event>) {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let Some(path) = spec.wake_path() else { return };
    if open_wake_file(spec, &path).is_err() {
        return;
    }
    let Ok(inotify) = Inotify::init(InitFlags::IN_CLOEXEC) else {
        return;
    };
    if inotify
        .add_watch(&path, AddWatchFlags::IN_ATTRIB | AddWatchFlags::IN_MODIFY)
        .is_err()
    {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("jobrun-wake".into())
        .spawn(move || {
            while inotify.read_events().is_ok() {
                if events.send(Event::Wake).is_err() {
                    break;
                }
            }
        });
}
