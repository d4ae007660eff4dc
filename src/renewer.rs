//! The helper thread that keeps a lease alive while its pass runs.
//!
//! It knows nothing of any store: it renews a `Renewable` every interval
//! (a third of the lease, floored at one second, ±10% so that passes
//! started together do not renew in step; tests pass their own) and keeps
//! three rules. A renewal that fails is retried next tick (the `Renewable`
//! reconnects); the lease counts as lost only once a whole window has
//! passed unrenewed, or at once when the row is no longer ours. Past the
//! max hold it stops renewing and lets the lease lapse. Whatever ends it is
//! logged once and reported to its owner exactly once. A renewal that lands
//! late (past half the lease since the one before: the store is slower
//! than its passes renew) still counts, and is said once, while the lease
//! holds. Its lines go to the `Log` its owner gives it: a pass's stderr, or
//! a list a test reads back.
//!
//! Time reaches the rules through a `Ticker`: a pass's renewer waits on its
//! owner's stop channel, each tick jittered; the tests drive a clock of
//! their own.

use std::fmt;

use crate::report::Level;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::policy::lease::{renew_tick, renewal_late};

/// What one renewal attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The row is gone or carries another token: someone took it.
    NotOurs,
    /// The store itself is gone or is another one: the reason.
    StoreLost(String),
}

/// Something with a lease to renew.
pub trait Renewable: Send {
    fn renew(&mut self) -> anyhow::Result<Renewal>;
    /// The pass's last progress mark (`jobrun touch`) as the last renewal
    /// read it, for `--max-idle`; `None` before any.
    fn progress(&self) -> Option<i64> {
        None
    }
}

/// Why the renewer stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewerExit {
    /// Its owner stopped it (the pass ended).
    Stopped,
    /// The lease is no longer ours or went a whole window unrenewed.
    LeaseLost,
    /// The pass reached its max hold; the lease will lapse.
    MaxHold,
    /// The pass made no progress (`jobrun touch`) for its max idle; the
    /// lease will lapse, as at max hold.
    MaxIdle,
}

#[derive(Debug, Clone)]
pub struct RenewerConfig {
    /// What log lines call the lease, e.g. `feeds.poll slot 0 (token 12)`.
    pub label: String,
    pub interval: Duration,
    pub lease: Duration,
    pub max_hold: Duration,
    /// When the lease was taken; max hold counts from here.
    pub taken: Instant,
    /// `--max-idle`: counted from the last progress a renewal saw (or from
    /// `taken`), like max hold from the last touch.
    pub max_idle: Option<Duration>,
    /// Where the renewer's lines go.
    pub log: Log,
}

/// Where the renewer says what happened to the lease (`report::Log`).
pub use crate::report::Log;

/// One line to the renewer's log: `log!(cfg, "format", args...)`, a
/// warning (a lost lease, max hold), or `log!(notice: cfg, ...)`.
macro_rules! log {
    (notice: $cfg:expr, $($arg:tt)*) => {
        $cfg.log.line(Level::Notice, format_args!($($arg)*))
    };
    ($cfg:expr, $($arg:tt)*) => {
        $cfg.log.line(Level::Warning, format_args!($($arg)*))
    };
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("Log")
    }
}

/// A running renewer of `R`; stopping it hands `R` back.
pub struct Renewer<R> {
    state: State<R>,
}

/// A renewer's thread is started only when its first renewal is due
/// (`deferred`): a pass whose command ends before that never starts one.
enum State<R> {
    Due {
        target: R,
        cfg: RenewerConfig,
        on_exit: Box<dyn FnOnce(RenewerExit) + Send>,
        at: Instant,
    },
    Running {
        stop: Sender<()>,
        handle: JoinHandle<(RenewerExit, R)>,
    },
}

impl<R: Renewable + 'static> Renewer<R> {
    /// Start renewing at once (`deferred`, then `start`).
    #[cfg(test)]
    pub fn spawn<F>(target: R, cfg: RenewerConfig, on_exit: F) -> std::io::Result<Renewer<R>>
    where
        F: FnOnce(RenewerExit) + Send + 'static,
    {
        let mut r = Renewer::deferred(target, cfg, on_exit);
        r.start()?;
        Ok(r)
    }

    /// A renewer whose thread starts only when its owner calls `start`,
    /// which it does at `due` (the first tick, drawn now) or whenever it
    /// needs the renewals to go on without it. `on_exit` runs on the
    /// renewer thread when it stops by itself (lease lost, max hold),
    /// never when its owner stops it.
    pub fn deferred<F>(target: R, cfg: RenewerConfig, on_exit: F) -> Renewer<R>
    where
        F: FnOnce(RenewerExit) + Send + 'static,
    {
        let at = Instant::now() + jittered_tick(cfg.interval);
        Renewer {
            state: State::Due {
                target,
                cfg,
                on_exit: Box::new(on_exit),
                at,
            },
        }
    }

    /// When its thread must start: `None` once it runs.
    pub fn due(&self) -> Option<Instant> {
        match &self.state {
            State::Due { at, .. } => Some(*at),
            State::Running { .. } => None,
        }
    }

    /// Start its thread (once; its first renewal at the tick drawn when it
    /// was made). On failure nothing changed: it may be started again.
    pub fn start(&mut self) -> std::io::Result<()> {
        let State::Due { at, .. } = self.state else {
            return Ok(());
        };
        let (stop, stopped) = mpsc::channel::<()>();
        // What it renews is handed to the thread once it runs: a thread
        // that cannot be made leaves it here.
        let (tx_run, rx_run) = mpsc::channel::<(R, RenewerConfig, OnExit)>();
        let handle = std::thread::Builder::new()
            .name("jobrun-renewer".into())
            .spawn(move || {
                let Ok((mut target, cfg, on_exit)) = rx_run.recv() else {
                    unreachable!("a started renewer is always given its lease")
                };
                let mut ticker = StopChannel {
                    stop: stopped,
                    first: Some(at),
                };
                let exit = renew_until_done(&mut target, &cfg, &mut ticker);
                if exit != RenewerExit::Stopped {
                    on_exit(exit);
                }
                (exit, target)
            })?;
        let running = State::Running { stop, handle };
        let State::Due {
            target,
            cfg,
            on_exit,
            ..
        } = std::mem::replace(&mut self.state, running)
        else {
            unreachable!("checked above")
        };
        let _ = tx_run.send((target, cfg, on_exit));
        Ok(())
    }

    /// Stop renewing, wait for the thread to end (if it was started), and
    /// take back what it renewed (`None` only if the thread panicked).
    pub fn stop(self) -> (RenewerExit, Option<R>) {
        match self.state {
            State::Due { target, .. } => (RenewerExit::Stopped, Some(target)),
            State::Running { stop, handle } => {
                let _ = stop.send(());
                match handle.join() {
                    Ok((exit, target)) => (exit, Some(target)),
                    Err(_) => (RenewerExit::Stopped, None),
                }
            }
        }
    }
}

type OnExit = Box<dyn FnOnce(RenewerExit) + Send>;

/// The renewer's clock: how it waits for the next tick and what time it
/// is.
pub trait Ticker {
    /// Wait `interval`, less `spent` (the time since the renewal before
    /// was asked): `false` when the owner stopped the renewer meanwhile.
    fn wait(&mut self, interval: Duration, spent: Duration) -> bool;
    fn now(&self) -> Instant;
}

/// One tick of `interval`, jittered.
fn jittered_tick(interval: Duration) -> Duration {
    let r = crate::random::bytes::<2>().map_or(u16::MAX / 2, u16::from_le_bytes);
    renew_tick(interval, r)
}

/// A pass's ticker: the monotonic clock, and a channel its owner stops it
/// through (a dropped sender stops it too). Its first tick is the instant
/// drawn when the renewer was made.
struct StopChannel {
    stop: Receiver<()>,
    first: Option<Instant>,
}

impl Ticker for StopChannel {
    fn wait(&mut self, interval: Duration, spent: Duration) -> bool {
        let wait = match self.first.take() {
            Some(at) => at.saturating_duration_since(Instant::now()),
            None => jittered_tick(interval).saturating_sub(spent),
        };
        matches!(self.stop.recv_timeout(wait), Err(RecvTimeoutError::Timeout))
    }
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Renew `target` each tick until the owner stops it, the lease is lost or
/// max hold is reached.
pub fn renew_until_done<R: Renewable, T: Ticker>(
    target: &mut R,
    cfg: &RenewerConfig,
    ticker: &mut T,
) -> RenewerExit {
    let mut last_renewed = cfg.taken;
    let (mut progress, mut progressed) = (target.progress(), cfg.taken);
    let mut warned_late = false;
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    // How long the last renewal took from its asking: the next tick counts
    // from when it was asked, as its window does.
    let mut spent = Duration::ZERO;
    loop {
        if !ticker.wait(cfg.interval, spent) {
            return RenewerExit::Stopped;
        }
        let now = ticker.now();
        if now.saturating_duration_since(cfg.taken) >= cfg.max_hold {
            log!(
                cfg,
                "{}: max hold {} reached; renewals stop and the lease will lapse",
                cfg.label,
                humantime::format_duration(cfg.max_hold)
            );
            return RenewerExit::MaxHold;
        }
        if let Some(max_idle) = cfg.max_idle {
            if now.saturating_duration_since(progressed) >= max_idle {
                log!(
                    cfg,
                    "{}: no progress (jobrun touch) for --max-idle {}: the pass is hung; \
                     renewals stop and the lease will lapse",
                    cfg.label,
                    humantime::format_duration(max_idle)
                );
                return RenewerExit::MaxIdle;
            }
        }
        // A renewal is stamped at the earliest as it starts (`now`): its
        // window counts from there, however long the store took to answer.
        let renewed = target.renew();
        spent = ticker.now().saturating_duration_since(now);
        match renewed {
            Ok(Renewal::Renewed) => {
                let since = ticker.now().saturating_duration_since(last_renewed);
                if !warned_late && renewal_late(ms(cfg.lease), ms(since)) {
                    warned_late = true;
                    log!(
                        cfg,
                        "{}: warning: renewed {} after the renewal before, past half the lease \
                         ({}): the store is slower than its passes renew; the lease holds",
                        cfg.label,
                        humantime::format_duration(Duration::from_millis(ms(since) as u64)),
                        humantime::format_duration(cfg.lease)
                    );
                }
                last_renewed = now;
                if target.progress() != progress {
                    progress = target.progress();
                    progressed = last_renewed;
                }
            }
            Ok(Renewal::NotOurs) => {
                log!(
                    cfg,
                    "{}: lease lost: the lock is no longer ours (cleared or taken over)",
                    cfg.label
                );
                return RenewerExit::LeaseLost;
            }
            Ok(Renewal::StoreLost(why)) => {
                log!(cfg, "{}: lease lost: {why}", cfg.label);
                return RenewerExit::LeaseLost;
            }
            Err(e) => {
                if ticker.now().saturating_duration_since(last_renewed) >= cfg.lease {
                    log!(
                        cfg,
                        "{}: lease lost: not renewed for a whole window ({}); last error: {e:#}",
                        cfg.label,
                        humantime::format_duration(cfg.lease)
                    );
                    return RenewerExit::LeaseLost;
                }
                log!(
                    notice: cfg,
                    "{}: renewal failed, retrying next tick on a fresh connection: {e:#}",
                    cfg.label
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A fake lease: counts renewals and follows a script of answers
    /// (`None`: the renewal fails).
    #[derive(Clone, Default)]
    struct FakeLease {
        calls: Arc<Mutex<u32>>,
        /// Answers for the first calls; after them, `then`.
        script: Arc<Mutex<Vec<Option<Renewal>>>>,
        then: Option<Renewal>,
    }

    impl FakeLease {
        fn answering(then: Option<Renewal>, first: Vec<Option<Renewal>>) -> FakeLease {
            FakeLease {
                calls: Arc::default(),
                script: Arc::new(Mutex::new(first.into_iter().rev().collect())),
                then,
            }
        }
        fn calls(&self) -> u32 {
            *self.calls.lock().unwrap()
        }
    }

    impl Renewable for FakeLease {
        fn renew(&mut self) -> anyhow::Result<Renewal> {
            *self.calls.lock().unwrap() += 1;
            let answer = self
                .script
                .lock()
                .unwrap()
                .pop()
                .unwrap_or(self.then.clone());
            answer.ok_or_else(|| anyhow::anyhow!("database is locked"))
        }
    }

    /// A clock the test moves: each wait advances it by the interval, and
    /// the owner stops the renewer after `ticks` waits.
    struct Manual {
        now: Instant,
        ticks: u32,
    }

    impl Ticker for Manual {
        fn wait(&mut self, interval: Duration, spent: Duration) -> bool {
            if self.ticks == 0 {
                return false;
            }
            self.ticks -= 1;
            self.now += interval.saturating_sub(spent);
            true
        }
        fn now(&self) -> Instant {
            self.now
        }
    }

    const TICK: Duration = Duration::from_millis(20);
    const LEASE: Duration = Duration::from_millis(150);

    /// A log a test reads back: every line the renewer said, in order.
    fn kept() -> (Log, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(vec![]));
        let sink = Arc::clone(&lines);
        let log = Log(Arc::new(move |_, l: &str| {
            sink.lock().unwrap().push(l.to_string())
        }));
        (log, lines)
    }

    /// What one run of the renewer's loop came to: how it ended, how many
    /// renewals it tried, and what it said.
    #[derive(Debug)]
    struct Ran {
        exit: RenewerExit,
        calls: u32,
        said: Vec<String>,
    }

    impl Ran {
        /// It ended as `exit` after `calls` renewals.
        fn ended(&self, exit: RenewerExit, calls: u32) -> &Self {
            assert_eq!((self.exit, self.calls), (exit, calls), "{self:#?}");
            self
        }

        /// It said exactly `lines`.
        fn said(&self, lines: &[&str]) {
            assert_eq!(self.said, lines, "{self:#?}");
        }
    }

    /// Run the renewer's loop on a manual clock for at most `ticks` ticks.
    fn run(fake: &FakeLease, max_hold: Duration, ticks: u32) -> Ran {
        let start = Instant::now();
        let (log, said) = kept();
        let cfg = RenewerConfig {
            label: "feeds.poll slot 0 (token 12)".into(),
            interval: TICK,
            lease: LEASE,
            max_hold,
            taken: start,
            max_idle: None,
            log,
        };
        let mut ticker = Manual { now: start, ticks };
        let exit = renew_until_done(&mut fake.clone(), &cfg, &mut ticker);
        let said = said.lock().unwrap().clone();
        Ran {
            exit,
            calls: fake.calls(),
            said,
        }
    }

    const LONG: Duration = Duration::from_secs(60);
    const RETRY: &str = "feeds.poll slot 0 (token 12): renewal failed, retrying next tick on a \
                         fresh connection: database is locked";

    #[test]
    fn renews_every_tick_until_its_owner_stops_it() {
        let fake = FakeLease::answering(Some(Renewal::Renewed), vec![]);
        run(&fake, LONG, 10)
            .ended(RenewerExit::Stopped, 10)
            .said(&[]);
    }

    #[test]
    fn a_row_no_longer_ours_is_lost_at_once() {
        let fake = FakeLease::answering(Some(Renewal::NotOurs), vec![Some(Renewal::Renewed)]);
        run(&fake, LONG, 100)
            .ended(RenewerExit::LeaseLost, 2)
            .said(&[
                "feeds.poll slot 0 (token 12): lease lost: the lock is no longer ours \
                     (cleared or taken over)",
            ]);
    }

    #[test]
    fn a_lost_store_loses_the_lease_at_once() {
        let gone = Renewal::StoreLost("the store file was deleted".into());
        let fake = FakeLease::answering(Some(gone), vec![]);
        run(&fake, LONG, 100)
            .ended(RenewerExit::LeaseLost, 1)
            .said(&["feeds.poll slot 0 (token 12): lease lost: the store file was deleted"]);
    }

    /// A lease whose pass touches at each of its first `touches` renewals.
    struct Touching {
        calls: u32,
        touches: u32,
    }

    impl Renewable for Touching {
        fn renew(&mut self) -> anyhow::Result<Renewal> {
            self.calls += 1;
            Ok(Renewal::Renewed)
        }
        fn progress(&self) -> Option<i64> {
            Some(i64::from(self.calls.min(self.touches)))
        }
    }

    /// The config of a renewer of `j` taken at `start`, its lines to `log`.
    fn config(start: Instant, max_idle: Option<Duration>, log: Log) -> RenewerConfig {
        RenewerConfig {
            label: "j slot 0 (token 1)".into(),
            interval: TICK,
            lease: LEASE,
            max_hold: LONG,
            taken: start,
            max_idle,
            log,
        }
    }

    #[test]
    fn max_idle_counts_from_the_last_touch_seen() {
        let start = Instant::now();
        let (log, said) = kept();
        let cfg = config(start, Some(Duration::from_millis(60)), log);
        // Touches seen at the renewals of 20..100 ms; the last at 100 ms,
        // so the tick at 160 ms stops (60 ms idle), after 7 renewals.
        let mut lease = Touching {
            calls: 0,
            touches: 5,
        };
        let mut ticker = Manual {
            now: start,
            ticks: 100,
        };
        assert_eq!(
            renew_until_done(&mut lease, &cfg, &mut ticker),
            RenewerExit::MaxIdle
        );
        assert_eq!(lease.calls, 7);
        assert_eq!(
            *said.lock().unwrap(),
            [
                "j slot 0 (token 1): no progress (jobrun touch) for --max-idle 60ms: the pass is \
              hung; renewals stop and the lease will lapse"
            ]
        );
        // Never touched: idle from the take.
        let mut lease = Touching {
            calls: 0,
            touches: 0,
        };
        let mut ticker = Manual {
            now: start,
            ticks: 100,
        };
        assert_eq!(
            renew_until_done(&mut lease, &cfg, &mut ticker),
            RenewerExit::MaxIdle
        );
        assert_eq!(lease.calls, 2);
    }

    #[test]
    fn max_hold_stops_renewing() {
        // Ticks at 20, 40, 60 and 80 ms renew; the one at 100 ms stops.
        let fake = FakeLease::answering(Some(Renewal::Renewed), vec![]);
        run(&fake, Duration::from_millis(100), 100)
            .ended(RenewerExit::MaxHold, 4)
            .said(&[
                "feeds.poll slot 0 (token 12): max hold 100ms reached; renewals stop \
                     and the lease will lapse",
            ]);
    }

    #[test]
    fn one_failed_renewal_is_retried_and_the_lease_kept() {
        // Thirty ticks (600 ms, four windows) with one failure among them.
        let fake = FakeLease::answering(Some(Renewal::Renewed), vec![None]);
        run(&fake, LONG, 30)
            .ended(RenewerExit::Stopped, 30)
            .said(&[RETRY]);
    }

    #[test]
    fn a_window_counts_from_the_last_good_renewal() {
        // Good renewals for 10 ticks (200 ms, past one 150 ms window), then
        // six failures (120 ms): the window runs from the last success, so
        // the lease is kept; a seventh and eighth (160 ms) lose it.
        let mut first = vec![Some(Renewal::Renewed); 10];
        first.extend(vec![None; 6]);
        let fake = FakeLease::answering(Some(Renewal::Renewed), first.clone());
        let mut said = vec![RETRY; 6];
        said.push(LATE);
        run(&fake, LONG, 20)
            .ended(RenewerExit::Stopped, 20)
            .said(&said);
        let fake = FakeLease::answering(None, first);
        let ran = run(&fake, LONG, 100);
        ran.ended(RenewerExit::LeaseLost, 18);
        assert_eq!(ran.said[..7], [RETRY; 7], "{ran:#?}");
        assert_eq!(ran.said.len(), 8, "{ran:#?}");
    }

    const LATE: &str = "feeds.poll slot 0 (token 12): warning: renewed 140ms after the \
                        renewal before, past half the lease (150ms): the store is slower than \
                        its passes renew; the lease holds";

    #[test]
    fn a_late_renewal_counts_and_is_said_once() {
        // Two failures, then a good renewal 60 ms after the take (not
        // late); then four failures twice over, each streak ending in a good
        // renewal 100 ms after the one before (late): the lease holds, and
        // the first late renewal is said, once.
        let mut first = vec![None, None, Some(Renewal::Renewed)];
        for _ in 0..2 {
            first.extend(vec![None; 4]);
            first.push(Some(Renewal::Renewed));
        }
        let fake = FakeLease::answering(Some(Renewal::Renewed), first);
        let ran = run(&fake, LONG, 20);
        ran.ended(RenewerExit::Stopped, 20);
        let late = "feeds.poll slot 0 (token 12): warning: renewed 100ms after the renewal \
                    before, past half the lease (150ms): the store is slower than its passes \
                    renew; the lease holds";
        let mut said = vec![RETRY; 6];
        said.push(late);
        said.extend([RETRY; 4]);
        ran.said(&said);
    }

    #[test]
    fn failures_for_a_whole_window_lose_the_lease() {
        // Lost at the first tick at or past 150 ms: the eighth (160 ms),
        // after seven retries; the loss names the window and the error.
        let fake = FakeLease::answering(None, vec![]);
        let ran = run(&fake, LONG, 100);
        ran.ended(RenewerExit::LeaseLost, 8);
        let mut said = vec![RETRY; 7];
        said.push(
            "feeds.poll slot 0 (token 12): lease lost: not renewed for a whole window \
             (150ms); last error: database is locked",
        );
        ran.said(&said);
    }

    /// A clock a renewal moves too: it takes `slow` to answer the first
    /// time (renewed), then fails at once.
    struct Slow {
        now: Arc<Mutex<Instant>>,
        slow: Duration,
        calls: u32,
    }

    impl Renewable for Slow {
        fn renew(&mut self) -> anyhow::Result<Renewal> {
            self.calls += 1;
            if self.calls > 1 {
                anyhow::bail!("database is locked");
            }
            *self.now.lock().unwrap() += self.slow;
            Ok(Renewal::Renewed)
        }
    }

    struct Shared(Arc<Mutex<Instant>>);

    impl Ticker for Shared {
        fn wait(&mut self, interval: Duration, spent: Duration) -> bool {
            *self.0.lock().unwrap() += interval.saturating_sub(spent);
            true
        }
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
    }

    /// A renewal is stamped at the earliest as it is asked for, so its
    /// window and the next tick count from there, not from the answer: one
    /// asked at 20 ms and answered at 120 ms is followed by a renewal at
    /// once (its tick of 20 ms was spent), and the lease is lost at the
    /// first tick past 170 ms (180 ms: four failures), where counting from
    /// the answer would have kept it to 280 ms.
    #[test]
    fn a_slow_renewals_window_counts_from_when_it_was_asked() {
        let start = Instant::now();
        let now = Arc::new(Mutex::new(start));
        let (log, said) = kept();
        let cfg = config(start, None, log);
        let mut lease = Slow {
            now: Arc::clone(&now),
            slow: Duration::from_millis(100),
            calls: 0,
        };
        let exit = renew_until_done(&mut lease, &cfg, &mut Shared(Arc::clone(&now)));
        assert_eq!((exit, lease.calls), (RenewerExit::LeaseLost, 5));
        assert_eq!(*now.lock().unwrap() - start, Duration::from_millis(180));
        let said = said.lock().unwrap();
        assert!(said.last().unwrap().contains("lease lost"), "{said:?}");
    }

    /// The thread: a loss is reported to its owner once; the owner's stop
    /// is not reported at all.
    #[test]
    fn the_thread_reports_a_loss_once_and_an_owners_stop_never() {
        let (log, said) = kept();
        let cfg = |interval| RenewerConfig {
            label: "test".into(),
            interval,
            lease: LEASE,
            max_hold: LONG,
            taken: Instant::now(),
            max_idle: None,
            log: log.clone(),
        };
        let (sink, seen) = mpsc::channel();
        let fake = FakeLease::answering(Some(Renewal::NotOurs), vec![]);
        let r = Renewer::spawn(fake, cfg(Duration::from_millis(1)), move |e| {
            sink.send(e).unwrap()
        })
        .unwrap();
        let reported = seen.recv_timeout(Duration::from_secs(10));
        assert_eq!(reported, Ok(RenewerExit::LeaseLost));
        assert_eq!(r.stop().0, RenewerExit::LeaseLost);
        assert!(seen.try_recv().is_err(), "reported once");
        assert_eq!(
            *said.lock().unwrap(),
            ["test: lease lost: the lock is no longer ours (cleared or taken over)"]
        );

        let (sink, seen) = mpsc::channel();
        let fake = FakeLease::answering(Some(Renewal::Renewed), vec![]);
        let r = Renewer::spawn(fake.clone(), cfg(LONG), move |e| sink.send(e).unwrap()).unwrap();
        let (exit, back) = r.stop();
        assert_eq!(exit, RenewerExit::Stopped);
        assert!(back.is_some(), "the lease comes back to its owner");
        assert_eq!(fake.calls(), 0, "stopped before its first tick");
        assert!(seen.try_recv().is_err(), "an owner's stop is not reported");
        assert_eq!(said.lock().unwrap().len(), 1, "a stop says nothing");
    }

    /// A deferred renewer costs no thread until its owner starts it: one
    /// stopped before then hands its lease back untouched; once started it
    /// renews at the tick drawn when it was made.
    #[test]
    fn a_deferred_renewer_runs_only_once_started() {
        let (log, _) = kept();
        let cfg = |interval| RenewerConfig {
            label: "test".into(),
            interval,
            lease: LEASE,
            max_hold: LONG,
            taken: Instant::now(),
            max_idle: None,
            log: log.clone(),
        };
        let fake = FakeLease::answering(Some(Renewal::Renewed), vec![]);
        let r = Renewer::deferred(fake.clone(), cfg(LONG), |_| {});
        assert!(r.due().is_some_and(|at| at > Instant::now() + LONG / 2));
        let (exit, back) = r.stop();
        assert_eq!(
            (exit, back.is_some(), fake.calls()),
            (RenewerExit::Stopped, true, 0)
        );

        let mut r = Renewer::deferred(fake.clone(), cfg(Duration::from_millis(1)), |_| {});
        r.start().unwrap();
        assert_eq!(r.due(), None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while fake.calls() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(fake.calls() >= 2, "renews once started");
        assert_eq!(r.stop().0, RenewerExit::Stopped);
    }
}
