//! The queue (`--wait`): wait in line, be promoted when a slot frees,
//! back off between looks, remove the ghosts ahead.

use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{notify, paused_line, report_evictions, wake, Pass, Planned};
use crate::cmd::queued_pass;
use crate::evidence::StoreReach;
use crate::exit;
use crate::policy::lease::{decide_waiter, Eviction, WaiterDecision};
use crate::policy::outcome::Outcome;
use crate::report::{escape, human_ms};
use crate::say;
use crate::store::{Acquire, Enqueue, Held, StoreError};
use crate::supervise::{classify, Event, SignalKind};

/// The longest fallback poll of a waiter that a release wakes.
const QUIET_POLL: Duration = Duration::from_secs(5);

/// How long a waiter that hears releases (PostgreSQL's LISTEN) sleeps
/// between polls at most: the polls only catch what sends no notification
/// (a holder that died or whose lease lapsed).
const LISTENING_POLL: Duration = Duration::from_secs(5);

impl Pass {
    /// Promote this waiter if its turn has come, evicting what `plan` names.
    pub(super) fn promote(&mut self, id: i64, plan: &[Planned]) -> Result<Acquire> {
        let evict: Vec<Eviction> = plan.iter().map(|p| p.eviction.clone()).collect();
        let attempt = self.store.get()?.promote(id, &self.req, &evict)?;
        report_evictions(plan, &attempt, &self.evidence);
        Ok(attempt.result)
    }

    /// `--wait`: queue FIFO for a slot.
    pub(super) fn queue(&mut self) -> Result<i32> {
        let wait = self.settings.wait.unwrap_or_default();
        if self.settings.coalesce {
            // Never coalesce into a ghost: its work would never run.
            self.remove_ghosts(i64::MAX)?;
        }
        // Watched before the row exists: a release in between wakes it.
        let wake = wake::watch(self.store.spec(), &self.req.pass_id, self.sender.clone());
        let id = match self.store.get()?.enqueue(
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
        let listener = notify::listen(self.store.spec(), &self.settings.job, self.sender.clone());
        let held = Held::Waiter {
            id,
            job: self.settings.job.clone(),
            pass_id: self.req.pass_id.clone(),
        };
        // Its own connection: the queue polls on the pass's meanwhile.
        let renewer = self.start_renewer(
            held,
            &format!("{} (queued pass {})", self.settings.job, self.req.pass_id),
            arrived,
            self.store.fresh(),
        )?;
        let mut poll = Duration::from_millis(20);
        // The fallback poll: every release on a one-machine store wakes the
        // waiters it lets in, so a waiter with a wake file there polls
        // rarely (it still finds a ghost ahead of it, or a pause lifted); on
        // a fleet store a listening waiter is woken by releases on any host.
        let max_poll = if wake.is_some() && self.store.spec().reach() == StoreReach::OneMachine {
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
                    self.store.close();
                }
                Err(e) => {
                    self.held = None;
                    renewer.stop();
                    let _ = self
                        .store
                        .with_retries(|store| store.remove_waiter(id, false));
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
                self.store.close();
            }
            match self.events.recv_timeout(poll.min(left)) {
                Ok(Event::Signal(s)) if classify(s) != SignalKind::ForwardOnly => {
                    self.held = None;
                    renewer.stop();
                    let _ = self
                        .store
                        .with_retries(|store| store.remove_waiter(id, false));
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
                wake::wake_next(&mut self.store, &key.job);
                self.run_child(key)
            }
            Err((why, outcome)) => {
                self.held = None;
                let _ = self
                    .store
                    .with_retries(|store| store.remove_waiter(id, false));
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
    pub(super) fn queue_step(&mut self, id: i64) -> Result<Acquire> {
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
    pub(super) fn surely_behind(&mut self, id: i64) -> Result<Option<(u32, usize)>> {
        let jobs = std::slice::from_ref(&self.settings.job);
        let store = self.store.get()?;
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
    pub(super) fn drop_stale_events(&mut self) {
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
    pub(super) fn remove_ghosts(&mut self, id: i64) -> Result<u32> {
        self.remove_ghosts_ahead(id, usize::MAX)
    }

    /// Remove dead (or lapsed and unknown) waiters among the first
    /// `window` (at least one) of those ahead of `id`.
    pub(super) fn remove_ghosts_ahead(&mut self, id: i64, window: usize) -> Result<u32> {
        let job = self.settings.job.clone();
        let waiters = self.store.get()?.waiters(std::slice::from_ref(&job))?;
        let mut removed = 0;
        for w in waiters.iter().filter(|w| w.id < id).take(window.max(1)) {
            let v = self.evidence.judge_waiter(&w.holder, &w.pass_id);
            let gone = match decide_waiter(w, v.liveness) {
                WaiterDecision::Remove { only_if_lapsed } => {
                    self.store.get()?.remove_waiter(w.id, only_if_lapsed)?
                }
                WaiterDecision::Keep => false,
            };
            if gone {
                wake::remove_stale(self.store.spec(), &w.pass_id);
                say!("{}: removed {}", escape(&w.job), queued_pass(w, &v));
                removed += 1;
            }
        }
        Ok(removed)
    }
}
