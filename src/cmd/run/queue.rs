//! The queue (`--wait`): wait in line, be promoted when a slot frees,
//! back off between looks, remove the ghosts ahead.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{notify, paused_line, report_evictions, wake, Ctx, Holding, Planned, Queued, Taken};
use crate::cmd::queued_pass;
use crate::events::Event;
use crate::evidence::StoreReach;
use crate::exit;
use crate::policy::lease::{decide_waiter, Eviction, WaiterDecision};
use crate::policy::outcome::Outcome;
use crate::policy::pause;
use crate::policy::slots::{Occupancy, Turn};
use crate::policy::window::WindowRow;
use crate::report::{escape, human_ms};
use crate::say;
use crate::spawn::HeldChild;
use crate::store::{Acquire, Enqueue, Held, StoreError};
use crate::supervise::{classify, SignalKind};

/// The longest fallback poll of a waiter that a release wakes.
const QUIET_POLL: Duration = Duration::from_secs(5);

/// How long a waiter that hears releases (PostgreSQL's LISTEN) sleeps
/// between polls at most: the polls only catch what sends no notification
/// (a holder that died or whose lease lapsed).
const LISTENING_POLL: Duration = Duration::from_secs(5);

impl Ctx {
    /// Promote this waiter if its turn has come, evicting what `plan` names.
    fn promote(&mut self, id: i64, plan: &[Planned]) -> Result<Acquire> {
        let evict: Vec<Eviction> = plan.iter().map(|p| p.eviction.clone()).collect();
        // A busy store is tried again at the next look (the queue loop
        // keeps the waiter's place), not here: a stop must not wait on it.
        let attempt = self
            .store
            .get()?
            .promote(id, &self.req, &evict, &self.pin)?;
        report_evictions(plan, &attempt, &self.evidence);
        if let Some(c) = &attempt.claimed {
            self.window = Some(c.key.clone());
        }
        Ok(attempt.result)
    }

    /// `--wait`: join the queue (or, with `--coalesce`, an identical queued
    /// pass). The wake file is watched before the row exists: a release in
    /// between wakes it.
    pub(super) fn enqueue(mut self, held: HeldChild) -> Result<Taken> {
        if self.settings.coalesce {
            // Never coalesce into a ghost: its work would never run.
            self.remove_ghosts(i64::MAX)?;
        }
        let wake = wake::watch(self.store.spec(), &self.req.pass_id, self.sender.clone());
        let coalesce = self.settings.coalesce.then_some(self.settings.argv_exact);
        let req = &self.req;
        match self.store.while_busy(|s| s.enqueue(req, coalesce))? {
            Enqueue::Coalesced(p) => {
                drop(held);
                self.coalesced(&p).map(Taken::Done)
            }
            Enqueue::Queued(id) => Ok(Taken::Queued(Queued {
                ctx: self,
                held,
                id,
                wake,
            })),
        }
    }
}

/// How a wait ended without a slot.
enum Ending {
    /// It gave up (why, and its outcome).
    GaveUp(&'static str, Outcome),
    /// Its window was done (false) or given up (true) when its turn came.
    Window(WindowRow, bool),
}

impl Queued {
    /// Wait in line until promoted (then run the command) or until the wait
    /// runs out, the row is lost, or a stop signal arrives: the exit code.
    pub(super) fn wait(self) -> Result<i32> {
        let Queued {
            ctx: mut this,
            held,
            id,
            wake,
        } = self;
        let wait = this.settings.wait.unwrap_or_default();
        let arrived = Instant::now();
        // Settings bound --wait to 100 years; past the clock's range, no
        // deadline at all.
        let deadline = arrived.checked_add(wait);
        // On PostgreSQL, releases of this job on any host also wake this
        // waiter (LISTEN/NOTIFY); it then polls rarely, holding only the
        // listening connection in between.
        let listener = notify::listen(this.store.spec(), &this.settings.job, this.sender.clone());
        let row = Held::Waiter {
            id,
            job: this.settings.job.clone(),
            pass_id: this.req.pass_id.clone(),
        };
        // Its own connection: the queue polls on the pass's meanwhile.
        let renewer = this.start_renewer(
            row,
            &format!("{} (queued pass {})", this.settings.job, this.req.pass_id),
            arrived,
            this.store.fresh(),
        )?;
        let mut poll = Duration::from_millis(20);
        // The fallback poll: every release on a one-machine store wakes the
        // waiters it lets in, so a waiter with a wake file there polls
        // rarely (it still finds a ghost ahead of it, or a pause lifted); on
        // a fleet store a listening waiter is woken by releases on any host.
        let max_poll = if wake.is_some() && this.store.spec().reach() == StoreReach::OneMachine {
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
            match this.queue_step(id) {
                Ok(Acquire::Acquired(key)) => break Ok(key),
                Ok(Acquire::Gone) => {
                    break Err(Ending::GaveUp(
                        "its queue row was removed (cleared as a ghost)",
                        Outcome::Skipped,
                    ))
                }
                Ok(Acquire::Paused(p)) => {
                    if !paused {
                        say!(notice, "{}: {}; waiting", this.label(), paused_line(&p));
                        paused = true;
                    }
                }
                Ok(Acquire::Behind(pos)) => {
                    position = pos;
                    paused = false;
                }
                Ok(Acquire::Full) => {}
                // Its turn came and its window was done meanwhile (or
                // given up): it ends as a pass that found it so.
                Ok(Acquire::WindowDone(row)) => break Err(Ending::Window(row, false)),
                Ok(Acquire::WindowGivenUp(row)) => break Err(Ending::Window(row, true)),
                // A store that is busy or unreachable for a moment costs
                // this waiter polls, not its place: it keeps waiting (its
                // renewer keeps the row) and tries a fresh connection.
                Err(e)
                    if e.downcast_ref::<StoreError>()
                        .is_some_and(StoreError::is_transient) =>
                {
                    if !store_failing {
                        say!(
                            warning,
                            "{}: store unavailable while queued, still waiting: {e:#}",
                            this.label()
                        );
                        store_failing = true;
                    }
                    this.store.close();
                }
                Err(e) => {
                    drop(held);
                    renewer.stop();
                    let pin = Arc::clone(&this.pin);
                    let _ = this.store.with_retries(|store| store.depart(id, &pin));
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
                break Err(Ending::GaveUp(why, Outcome::WaitExpired));
            }
            let left = deadline.map_or(poll, |d| d.saturating_duration_since(now));
            if listener.is_some() && poll >= Duration::from_secs(1) {
                this.store.close();
            }
            match this.events.recv_timeout(poll.min(left)) {
                Ok(Event::Signal(s)) if classify(s) != SignalKind::ForwardOnly => {
                    drop(held);
                    renewer.stop();
                    let pin = Arc::clone(&this.pin);
                    let _ = this.store.with_retries(|store| store.depart(id, &pin));
                    say!(
                        notice,
                        "{}: stopped by signal {s} while queued",
                        this.label()
                    );
                    this.record_not_run(Outcome::Stopped)?;
                    return Ok(exit::of_signal(s));
                }
                Ok(Event::LeaseLost) => {
                    break Err(Ending::GaveUp("its queue row was lost", Outcome::Skipped))
                }
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
        this.drop_stale_events();
        match result {
            Ok(key) => {
                // Slots still free (several released at once, a pause
                // lifted): the next in line can be promoted too.
                wake::wake_next(&mut this.store, &key.job);
                Holding {
                    ctx: this,
                    held,
                    key,
                }
                .run()
            }
            Err(Ending::Window(row, given_up)) => {
                drop(held);
                let pin = Arc::clone(&this.pin);
                let _ = this.store.with_retries(|store| store.depart(id, &pin));
                this.window_skip(&row, given_up)
            }
            Err(Ending::GaveUp(why, outcome)) => {
                drop(held);
                let pin = Arc::clone(&this.pin);
                let _ = this.store.with_retries(|store| store.depart(id, &pin));
                if !this.settings.quiet {
                    let at = if position > 0 {
                        format!(" at queue position {position}")
                    } else {
                        String::new()
                    };
                    say!(
                        warning,
                        "{}: gave up waiting after {}{at}: {why}",
                        this.label(),
                        human_ms(arrived.elapsed().as_millis() as i64)
                    );
                }
                this.record_not_run(outcome)?;
                Ok(this.settings.conflict_exit_code)
            }
        }
    }
}

impl Ctx {
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
        let store = self.store.get()?;
        let waiters = store.waiters(jobs)?;
        let leases = store.leases(jobs)?;
        let occ = Occupancy::of(
            leases.iter().map(|l| (l.slot, l.slots)),
            waiters.iter().map(|w| (w.id, w.slots)),
            Some(self.settings.slots),
        );
        let Turn::Behind(position) = occ.turn_of(id) else {
            return Ok(None);
        };
        let pauses = store.pauses()?;
        let paused = pause::holding_back(&pauses, &self.settings.job).is_some();
        Ok((!paused).then_some((position, occ.free())))
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
    pub(super) fn remove_ghosts(&mut self, id: i64) -> Result<u32> {
        self.remove_ghosts_ahead(id, usize::MAX)
    }

    /// Remove dead (or lapsed and unknown) waiters among the first
    /// `window` (at least one) of those ahead of `id`.
    fn remove_ghosts_ahead(&mut self, id: i64, window: usize) -> Result<u32> {
        let job = self.settings.job.clone();
        let waiters = self.store.get()?.waiters(std::slice::from_ref(&job))?;
        let mut removed = 0;
        for w in waiters.iter().filter(|w| w.id < id).take(window.max(1)) {
            let v = self.evidence.judge_waiter(&w.holder, &w.pass_id);
            let gone = match decide_waiter(w, v.liveness) {
                WaiterDecision::Keep => false,
                remove => {
                    let by = self.req.by();
                    self.store.get()?.remove_ghost(w.id, remove, &by)?
                }
            };
            if gone {
                wake::remove_stale(self.store.spec(), &w.pass_id);
                say!(
                    warning,
                    "{}: removed {}",
                    escape(&w.job),
                    queued_pass(w, &v)
                );
                removed += 1;
            }
        }
        Ok(removed)
    }
}
