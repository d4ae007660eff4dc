//! The pass: take a slot, run the held command under a renewed lease,
//! release the slot once the command is gone, record the pass.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::renewal::start_late;
use super::{paused_line, report_evictions, wake, Ctx, Holding, Planned, Prepared, Taken};
use crate::capture::{Capture, Reading, Spooled};
use crate::clock::now_ms;
use crate::cmd::{holder_name, judge_lease, judged};
use crate::events::{self, Event};
use crate::exit;
use crate::hook::{self, EndVars, PassVars, StartHook};
use crate::policy::coalesce::{self, Invocation};
use crate::policy::lease::{decide, Decision, Eviction, FreeReason, LeaseKey};
use crate::policy::outcome::{Ending, Outcome, PassRecord};
use crate::policy::window::WindowRow;
use crate::policy::Liveness;
use crate::renewer::{Log, Renewer, RenewerExit};
use crate::report::{escape, human_ms, utc_ms};
use crate::say;
use crate::store::{Acquire, Held, Released, StoreError, StoreLease};
use crate::supervise::{self, classify, SignalKind};

impl Prepared {
    /// Take a slot, or find why not. A free job needs no judging: only when
    /// it is held are its holders judged and the forfeit ones evicted.
    pub(super) fn take(self) -> Result<Taken> {
        let Prepared { mut ctx, held } = self;
        let mut got = ctx.acquire(&[])?;
        if !matches!(got, Acquire::Acquired(_)) {
            let plan = ctx.reconcile()?;
            if !plan.is_empty() {
                got = ctx.acquire(&plan)?;
            }
        }
        // A dead waiter nobody queues behind would keep every later pass
        // out: judge the queue too, and look again if a ghost was removed.
        // (A pass that will queue judges the waiters ahead of it from the
        // queue, a few at a time, instead of all of them on arrival.)
        if got == Acquire::Full && ctx.settings.wait.is_none() && ctx.remove_ghosts(i64::MAX)? > 0 {
            let plan = ctx.reconcile()?;
            got = ctx.acquire(&plan)?;
        }
        match got {
            Acquire::Acquired(key) => Ok(Taken::Holding(Holding { ctx, held, key })),
            Acquire::WindowDone(row) => {
                drop(held);
                ctx.window_skip(&row, false).map(Taken::Done)
            }
            Acquire::WindowGivenUp(row) => {
                drop(held);
                ctx.window_skip(&row, true).map(Taken::Done)
            }
            _ if ctx.settings.wait.is_some() => ctx.enqueue(held),
            Acquire::Paused(p) => {
                drop(held);
                if !ctx.settings.quiet {
                    say!(notice, "{}: {}; skipping", ctx.label(), paused_line(&p));
                }
                ctx.record_not_run(Outcome::Skipped)?;
                Ok(Taken::Done(ctx.settings.conflict_exit_code))
            }
            _ => {
                drop(held);
                ctx.conflict().map(Taken::Done)
            }
        }
    }
}

impl Ctx {
    /// Take a slot, evicting what `plan` names.
    pub(super) fn acquire(&mut self, plan: &[Planned]) -> Result<Acquire> {
        let evict: Vec<Eviction> = plan.iter().map(|p| p.eviction.clone()).collect();
        let req = &self.req;
        let attempt = self.store.while_busy(|s| s.acquire(req, &evict))?;
        report_evictions(plan, &attempt, &self.evidence);
        if let Some(c) = &attempt.claimed {
            self.window = Some(c.key.clone());
        }
        Ok(attempt.result)
    }

    /// The window was done (or given up): one line naming who did it, the
    /// pass recorded as `done` (or `skipped`), the conflict code.
    pub(super) fn window_skip(&mut self, row: &WindowRow, given_up: bool) -> Result<i32> {
        if !self.settings.quiet {
            say!(
                notice,
                "{}: {}; skipping",
                self.label(),
                super::window_line(row, given_up)
            );
        }
        self.window = Some(row.key.clone());
        let outcome = if given_up {
            Outcome::Skipped
        } else {
            Outcome::Done
        };
        self.record_not_run(outcome)?;
        Ok(self.settings.conflict_exit_code)
    }

    /// Judge every holder of the job and plan what the rules free, with the
    /// line to log if it is freed. Probes run here, outside transactions.
    pub(super) fn reconcile(&mut self) -> Result<Vec<Planned>> {
        let job = self.settings.job.clone();
        let leases = self.store.get()?.leases(std::slice::from_ref(&job))?;
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
                    let (job, holder, why) = (escape(&l.job), holder_name(&l), escape(&why));
                    let (slot, token) = (l.slot, l.token);
                    let note = format!(
                        "{job}: freed slot {slot} (token {token}) of holder {holder}: {why}"
                    );
                    plan.push(Planned {
                        eviction: eviction.with_evidence(v.to_string()),
                        note,
                        pass_id: l.pass_id.clone(),
                    });
                }
                Decision::Keep if l.lapsed() && v.liveness == Liveness::Alive => {
                    // Once per holder, not at every poll of a queued pass.
                    if self.warned.insert((l.slot, l.token)) {
                        say!(
                            warning,
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

    /// What this pass runs, as `--coalesce` compares it.
    pub(super) fn invocation(&self) -> Invocation<'_> {
        Invocation {
            argv: &self.settings.argv_text,
            cwd: &self.req.cwd,
            exact: self.settings.argv_exact,
            containers: self.settings.containers,
        }
    }

    /// The slot is held: one line naming the holder, then the conflict code.
    fn conflict(&mut self) -> Result<i32> {
        if self.settings.coalesce {
            self.remove_ghosts(i64::MAX)?;
        }
        let jobs = std::slice::from_ref(&self.settings.job);
        if self.settings.coalesce {
            let queued = self.store.get()?.waiters(jobs)?;
            if let Some(w) = coalesce::joins(&queued, self.invocation()) {
                return self.coalesced(&w.pass_id.clone());
            }
        }
        if !self.settings.quiet {
            let leases = self.store.get()?.leases(jobs)?;
            let queued = self.store.get()?.waiters(jobs)?.len();
            let line = match leases.first() {
                Some(l) => {
                    let v = judge_lease(&self.evidence, l);
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
            say!(notice, "{}: {line}", self.label());
        }
        self.record_not_run(Outcome::Skipped)?;
        self.store.leave();
        Ok(self.settings.conflict_exit_code)
    }

    /// The pass joined queued pass `into` (its held command already
    /// dropped by the caller).
    pub(super) fn coalesced(&mut self, into: &str) -> Result<i32> {
        say!(
            notice,
            "{}: coalesced into queued pass {}",
            self.label(),
            escape(into)
        );
        self.record_not_run(Outcome::Coalesced)?;
        Ok(self.settings.coalesced_exit_code)
    }

    pub(super) fn record_not_run(&mut self, outcome: Outcome) -> Result<()> {
        let pass = self.pass_record(None, outcome, None, None);
        let keep = self.settings.keep_history;
        let pin = Arc::clone(&self.pin);
        match self.store.while_busy(|s| s.record_pass(&pass, keep, &pin)) {
            // The store the pass began with is gone: nothing to record into.
            Err(StoreError::NotPinned(why)) => {
                say!(error, "{}: {why}; the pass is not recorded", self.label());
                Ok(())
            }
            other => {
                other?;
                if self.settings.syslog {
                    crate::cron_log::send(&pass);
                }
                Ok(())
            }
        }
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
            freed: None,
            window: self.window.clone(),
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

    /// Give the slot back and record the pass, in one transaction. If that
    /// keeps failing the lease lapses on its own (and the dead wrapper's
    /// evidence frees it sooner); the pass still exits with its command's
    /// code.
    ///
    /// Returns how long the command ran, as history has it.
    fn finish(
        &mut self,
        key: &LeaseKey,
        outcome: Outcome,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> i64 {
        let pass = self.pass_record(Some(key), outcome, code, signal);
        self.release_and_record(key, &pass);
        if self.settings.syslog {
            crate::cron_log::send(&pass);
        }
        pass.duration_ms
    }

    /// Give the slot back and record `pass`, in one transaction.
    fn release_and_record(&mut self, key: &LeaseKey, pass: &PassRecord) {
        // A store deleted or replaced under the pass: its lease went with
        // it, and the store now at that path (if any) never knew the pass.
        if let Err(why) = self.pin.check_file() {
            say!(
                error,
                "{} slot {}: {why}; the lease was lost with it and the pass is not recorded",
                key.job,
                key.slot
            );
            return;
        }
        let keep = self.settings.keep_history;
        let pin = Arc::clone(&self.pin);
        match self
            .store
            .with_retries(|store| store.release(key, Some((pass, keep)), &pin))
        {
            Ok(Released::Freed { queued: true }) => wake::wake_next(&mut self.store, &key.job),
            Ok(Released::Freed { queued: false }) => {}
            Ok(Released::NotOurs) => say!(
                warning,
                "{} slot {}: lock was no longer ours at release (token {})",
                key.job,
                key.slot,
                key.token
            ),
            // A database or schema dropped and re-created under the pass.
            Err(StoreError::NotPinned(why)) => say!(
                error,
                "{} slot {}: {why}; the lease was lost with it and the pass is not recorded",
                key.job,
                key.slot
            ),
            Err(e) => say!(
                error,
                "{} slot {}: release failed, the lease will lapse and the pass is not \
                 recorded: {e}",
                key.job,
                key.slot
            ),
        }
    }

    /// The pass as its hooks see it.
    fn hook_vars(&self, key: &LeaseKey) -> PassVars {
        PassVars {
            job: key.job.clone(),
            pass_id: self.req.pass_id.clone(),
            token: key.token,
            slot: key.slot,
            withheld: super::withheld(),
        }
    }

    /// The pass is recorded: show its captured output, run its end hooks
    /// (the failure hook sees the spool), then the spool goes. The one
    /// place a spool's life ends.
    fn end(
        &mut self,
        key: &LeaseKey,
        start: Option<StartHook>,
        spooled: Option<Spooled>,
        mut end: EndVars,
    ) {
        if let Some(s) = &spooled {
            self.show_output(s, end.outcome);
            end.output_file = Some(s.path().to_path_buf());
        }
        self.after(key, start, end);
        drop(spooled);
        // The pass's last transaction is done: a grown WAL is emptied here
        // (the take never does it), once in many passes.
        if let Ok(store) = self.store.get() {
            store.tidy();
        }
        self.store.leave();
    }

    /// The slot is given back: wait for the start hook, then run the end
    /// hook the outcome fires. Neither changes the pass's exit code.
    fn after(&self, key: &LeaseKey, start: Option<StartHook>, end: EndVars) {
        if let Some(h) = start {
            h.join();
        }
        hook::run_end(&self.settings.hooks, &self.hook_vars(key), end);
    }
}

impl Holding {
    /// Release the command with the slot's token, supervise it until it is
    /// gone, give the slot back and record the pass: the exit code.
    pub(super) fn run(self) -> Result<i32> {
        let Holding { mut ctx, held, key } = self;
        let label = format!("{} slot {} (token {})", key.job, key.slot, key.token);
        let taken = Instant::now();
        if let Some(sig) = ctx.pending_stop() {
            drop(held);
            say!(
                notice,
                "{label}: stopped by signal {sig} before the command started"
            );
            ctx.finish(&key, Outcome::Stopped, None, Some(sig));
            return Ok(exit::of_signal(sig));
        }
        // Its output is read from before it can write any.
        let reading = match ctx.capture.take().map(Capture::start).transpose() {
            Ok(r) => r,
            Err(e) => {
                drop(held);
                let ran_ms = ctx.finish(&key, Outcome::SpawnFailed, None, None);
                let end = EndVars {
                    outcome: Outcome::SpawnFailed,
                    exit_code: exit::JOBRUN_FAILED,
                    duration_ms: ran_ms,
                    output_file: None,
                };
                ctx.end(&key, None, None, end);
                return Err(e).context("cannot read the command's output");
            }
        };
        // The pass's connection serves its renewer and comes back for the
        // release: a fleet pass costs the server one connection at most,
        // and none between renewals far apart; a SQLite pass opens the
        // store once, and the kernel keeps one connection's file locks
        // for it, not two (every lock taken on the store's files walks
        // all of them: with thousands of passes, much of a renewal).
        let mut renewer_store = ctx.store.lend();
        // On record with the slot: let it exec, with its fencing token.
        // From here until it is reaped nothing may return early: the child
        // must never run unsupervised.
        // A --once-per window's start, for JOBRUN_WINDOW (its key).
        let window_start = ctx.window.as_deref().and_then(|k| k.parse::<u64>().ok());
        let mut child = held.release_numbered(key.token, key.slot, window_start.unwrap_or(0));
        ctx.child_started = Some(Instant::now());
        let start_hook = StartHook::spawn(&ctx.settings.hooks, &ctx.hook_vars(&key));
        // Before its renewer may use the connection: the pass has nothing
        // else to do until the command ends.
        renewer_store.during_command();
        // Its thread starts when the first renewal is due: a command that
        // ends before never costs one.
        let mut renewer = ctx.renewer(Held::Lease(key.clone()), &label, taken, renewer_store);
        let watched =
            events::watch_exit(child.id(), ctx.sender.clone()).context("cannot watch the child");
        match watched {
            Ok(()) => {}
            Err(e) => {
                child.kill_and_reap();
                let (_, lent) = renewer.stop();
                if let Some(lease) = lent {
                    ctx.store = lease.into_store();
                }
                let spooled = reading.map(Reading::finish);
                let ran_ms = ctx.finish(&key, Outcome::Failed, None, Some(libc::SIGKILL));
                let end = EndVars {
                    outcome: Outcome::Failed,
                    exit_code: exit::JOBRUN_FAILED,
                    duration_ms: ran_ms,
                    output_file: None,
                };
                ctx.end(&key, start_hook, spooled, end);
                return Err(e);
            }
        }
        crate::trace::mark("gate");
        let how = supervise::Stopping {
            kill_after: ctx.settings.kill_after,
            on_lost: ctx.settings.on_lost,
            timeout: ctx
                .settings
                .timeout
                .map(|t| (crate::clock::deadline_after(t), t)),
        };
        let sender = ctx.sender.clone();
        let start = |renewer: &mut Renewer<StoreLease>| start_late(renewer, &label, &sender);
        let ended = {
            let at = renewer.due();
            let mut start_due = || start(&mut renewer);
            let due = at.map(|at| supervise::Due {
                at,
                run: &mut start_due,
            });
            supervise::supervise(&mut child, &ctx.events, how, &label, &Log::stderr(), due)
        };
        let exec_failed = child.exec_failure(&escape(&ctx.settings.argv_text[0]));
        if let (None, Some(engine)) = (&exec_failed, ctx.settings.containers) {
            // The containers it started are the pass's work too, and the
            // lease is renewed while they run.
            start(&mut renewer);
            ctx.outlast_containers(engine, &label, &ended);
        }
        // The group is gone: what it wrote is in the pipe, and a process
        // that left the group (a daemon) and holds the pipe is not waited for.
        let spooled = reading.map(Reading::finish);
        let (renewer_exit, lent) = renewer.stop();
        if let Some(lease) = lent {
            ctx.store = lease.into_store();
        }
        if let Some(e) = exec_failed {
            let hint = if e.code == exit::NOT_FOUND && shell_text(&ctx.settings.argv_text[0]) {
                "; jobrun runs the command without a shell: use -- sh -c '...'"
            } else {
                ""
            };
            say!(error, "{}: {}{hint}", ctx.label(), e.message);
            let ran_ms = ctx.finish(&key, Outcome::SpawnFailed, Some(e.code), None);
            ctx.end(
                &key,
                start_hook,
                spooled,
                EndVars {
                    outcome: Outcome::SpawnFailed,
                    exit_code: e.code,
                    duration_ms: ran_ms,
                    output_file: None,
                },
            );
            return Ok(e.code);
        }
        let outcome = Outcome::of(&Ending {
            exec_failed: false,
            code: ended.code,
            signal: ended.signal,
            stopped_by: ended.stopped_by,
            killed: ended.killed,
            lease_lost: ended.lease_lost || renewer_exit == RenewerExit::LeaseLost,
            timed_out: ended.timed_out,
        });
        let ran_ms = ctx.finish(&key, outcome, ended.code, ended.signal);
        crate::trace::mark("release");
        let code = if outcome == Outcome::Timeout {
            exit::TIMEOUT
        } else {
            ended.exit_code()
        };
        ctx.end(
            &key,
            start_hook,
            spooled,
            EndVars {
                outcome,
                exit_code: code,
                duration_ms: ran_ms,
                output_file: None,
            },
        );
        Ok(code)
    }
}

/// Whether a command name that was not found reads like a shell command
/// line (`-- "echo hi; date"`): spaces or shell syntax in it.
fn shell_text(argv0: &str) -> bool {
    argv0
        .chars()
        .any(|c| c.is_whitespace() || ";|&$<>()`'\"*?~{}".contains(c))
}
