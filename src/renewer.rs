//! The helper thread that keeps a lease alive while its pass runs.
//!
//! It knows nothing of any store: it renews a `Renewable` every interval
//! (a third of the lease, floored at one second; tests pass their own) and
//! keeps three rules. A renewal that fails is retried next tick (the
//! `Renewable` reconnects); the lease counts as lost only once a whole window
//! has passed unrenewed, or at once when the row is no longer ours. Past the
//! max hold it stops renewing and lets the lease lapse. Whatever ends it is
//! logged once and reported to its owner exactly once.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::lease::LeaseKey;
use crate::say;
use crate::store::{StoreError, StorePin, StoreSpec};

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
}

pub struct Renewer {
    stop: Sender<()>,
    handle: JoinHandle<RenewerExit>,
}

impl Renewer {
    /// Start renewing. `on_exit` runs on the renewer thread when it stops
    /// by itself (lease lost, max hold), never when its owner stops it.
    pub fn spawn<R, F>(mut target: R, cfg: RenewerConfig, on_exit: F) -> std::io::Result<Renewer>
    where
        R: Renewable + 'static,
        F: FnOnce(RenewerExit) + Send + 'static,
    {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("jobrun-renewer".into())
            .spawn(move || {
                let exit = renew_until_done(&mut target, &cfg, &stopped);
                if exit != RenewerExit::Stopped {
                    on_exit(exit);
                }
                exit
            })?;
        Ok(Renewer { stop, handle })
    }

    /// Stop renewing and wait for the thread to end.
    pub fn stop(self) -> RenewerExit {
        let _ = self.stop.send(());
        self.handle.join().unwrap_or(RenewerExit::Stopped)
    }
}

fn renew_until_done<R: Renewable>(
    target: &mut R,
    cfg: &RenewerConfig,
    stopped: &mpsc::Receiver<()>,
) -> RenewerExit {
    let mut last_renewed = cfg.taken;
    loop {
        match stopped.recv_timeout(cfg.interval) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return RenewerExit::Stopped,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if cfg.taken.elapsed() >= cfg.max_hold {
            say!(
                "{}: max hold {} reached; renewals stop and the lease will lapse",
                cfg.label,
                humantime::format_duration(cfg.max_hold)
            );
            return RenewerExit::MaxHold;
        }
        match target.renew() {
            Ok(Renewal::Renewed) => last_renewed = Instant::now(),
            Ok(Renewal::NotOurs) => {
                say!(
                    "{}: lease lost: the lock is no longer ours (cleared or taken over)",
                    cfg.label
                );
                return RenewerExit::LeaseLost;
            }
            Ok(Renewal::StoreLost(why)) => {
                say!("{}: lease lost: {why}", cfg.label);
                return RenewerExit::LeaseLost;
            }
            Err(e) => {
                if last_renewed.elapsed() >= cfg.lease {
                    say!(
                        "{}: lease lost: not renewed for a whole window ({}); last error: {e:#}",
                        cfg.label,
                        humantime::format_duration(cfg.lease)
                    );
                    return RenewerExit::LeaseLost;
                }
                say!(
                    "{}: renewal failed, retrying next tick on a fresh connection: {e:#}",
                    cfg.label
                );
            }
        }
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

/// From this renewal interval on (a lease of 30 s or more), a renewer on a
/// PostgreSQL store connects, renews and disconnects at each tick instead of
/// holding a server connection for the whole pass: a fleet's passes then
/// cost the server connections only while they renew.
pub const CONNECT_PER_RENEWAL: Duration = Duration::from_secs(10);

/// A lease in a store, renewed on a connection of its own that is dropped
/// after a failure and reopened on the next tick.
pub struct StoreLease {
    spec: StoreSpec,
    store: Option<Box<dyn crate::store::Store>>,
    held: Held,
    lease: Duration,
    pin: Arc<StorePin>,
}

impl StoreLease {
    pub fn new(spec: StoreSpec, held: Held, lease: Duration, pin: Arc<StorePin>) -> StoreLease {
        StoreLease {
            spec,
            store: None,
            held,
            lease,
            pin,
        }
    }

    fn try_renew(&mut self) -> Result<Renewal, StoreError> {
        // Checked before any connection is opened: a reconnect must never
        // find (or make) a new store at the same path.
        if let Err(why) = self.pin.check_file() {
            return Ok(Renewal::StoreLost(why));
        }
        let store = match &mut self.store {
            Some(s) => s,
            None => self.store.insert(
                self.spec
                    .open_for_renewal(crate::lease::renew_interval(self.lease))?,
            ),
        };
        if let Err(why) = self.pin.check(store.as_mut())? {
            return Ok(Renewal::StoreLost(why));
        }
        let ours = renew_on(&self.held, self.lease, store.as_mut());
        // A renewal interval this long costs the server more as a held
        // connection than as a new one each tick.
        if self.spec.reach() == crate::liveness::StoreReach::Fleet
            && crate::lease::renew_interval(self.lease) >= CONNECT_PER_RENEWAL
        {
            self.store = None;
        }
        Ok(if ours? {
            Renewal::Renewed
        } else {
            Renewal::NotOurs
        })
    }
}

/// Renew what `held` names on `store`: whether it is still ours.
fn renew_on(
    held: &Held,
    lease: Duration,
    store: &mut dyn crate::store::Store,
) -> Result<bool, StoreError> {
    Ok(match held {
        Held::Lease(key) => store.renew(key, lease)?,
        Held::Waiter { id, job, pass_id } => {
            store.renew_waiter(*id, lease)? || {
                // Promoted between two ticks: the row became this
                // pass's lease, which is not lost; the owner stops
                // this renewer.
                let leases = store.leases(std::slice::from_ref(job))?;
                leases.iter().any(|l| &l.pass_id == pass_id)
            }
        }
    })
}

impl Renewable for StoreLease {
    fn renew(&mut self) -> anyhow::Result<Renewal> {
        match self.try_renew() {
            Ok(r) => Ok(r),
            Err(e) => {
                // A fresh connection next tick: a dropped one never recovers.
                self.store = None;
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A fake lease: counts renewals and follows a script of answers.
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

    const TICK: Duration = Duration::from_millis(20);
    const LEASE: Duration = Duration::from_millis(150);

    fn cfg(max_hold: Duration) -> RenewerConfig {
        RenewerConfig {
            label: "test".into(),
            interval: TICK,
            lease: LEASE,
            max_hold,
            taken: Instant::now(),
        }
    }

    fn exits() -> (
        Arc<Mutex<Vec<RenewerExit>>>,
        impl FnOnce(RenewerExit) + Send,
    ) {
        let seen = Arc::new(Mutex::new(vec![]));
        let sink = seen.clone();
        (seen, move |e| sink.lock().unwrap().push(e))
    }

    fn wait_for_exit(seen: &Arc<Mutex<Vec<RenewerExit>>>, within: Duration) -> Vec<RenewerExit> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if !seen.lock().unwrap().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        seen.lock().unwrap().clone()
    }

    #[test]
    fn renews_every_interval_until_its_owner_stops_it() {
        let fake = FakeLease::answering(Some(Renewal::Renewed), vec![]);
        let (seen, on_exit) = exits();
        let r = Renewer::spawn(fake.clone(), cfg(Duration::from_secs(60)), on_exit).unwrap();
        // Wait until ten renewals happened, then check the time it took.
        let start = Instant::now();
        while fake.calls() < 10 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let took = start.elapsed();
        assert_eq!(r.stop(), RenewerExit::Stopped);
        // Ten ticks of 20 ms: at least 180 ms (a tick may move by one), and
        // not wildly more on a loaded machine.
        assert!(
            took >= Duration::from_millis(180),
            "10 renewals in {took:?}"
        );
        assert!(
            took < Duration::from_millis(1000),
            "10 renewals in {took:?}"
        );
        let after = fake.calls();
        std::thread::sleep(TICK * 3);
        assert_eq!(fake.calls(), after, "no renewal after stop");
        assert!(
            seen.lock().unwrap().is_empty(),
            "owner's stop is not reported"
        );
    }

    #[test]
    fn a_row_no_longer_ours_is_lost_at_once() {
        let fake = FakeLease::answering(Some(Renewal::NotOurs), vec![Some(Renewal::Renewed)]);
        let (seen, on_exit) = exits();
        let r = Renewer::spawn(fake.clone(), cfg(Duration::from_secs(60)), on_exit).unwrap();
        assert_eq!(
            wait_for_exit(&seen, Duration::from_secs(2)),
            vec![RenewerExit::LeaseLost]
        );
        assert_eq!(r.stop(), RenewerExit::LeaseLost);
        assert_eq!(fake.calls(), 2);
    }

    #[test]
    fn max_hold_stops_renewing() {
        let fake = FakeLease::answering(Some(Renewal::Renewed), vec![]);
        let (seen, on_exit) = exits();
        let started = Instant::now();
        let r = Renewer::spawn(fake.clone(), cfg(Duration::from_millis(100)), on_exit).unwrap();
        assert_eq!(
            wait_for_exit(&seen, Duration::from_secs(2)),
            vec![RenewerExit::MaxHold]
        );
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(r.stop(), RenewerExit::MaxHold);
        // 100 ms of 20 ms ticks: 4 renewals, give or take one.
        assert!((3..=5).contains(&fake.calls()), "{} renewals", fake.calls());
    }

    #[test]
    fn one_failed_renewal_is_retried_and_the_lease_kept() {
        let fake = FakeLease::answering(Some(Renewal::Renewed), vec![None]);
        let (seen, on_exit) = exits();
        let r = Renewer::spawn(fake.clone(), cfg(Duration::from_secs(60)), on_exit).unwrap();
        let start = Instant::now();
        // Run well past one window: a single failure must not lose the lease.
        while start.elapsed() < LEASE * 3 && seen.lock().unwrap().is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            seen.lock().unwrap().is_empty(),
            "lease lost after one failure"
        );
        assert!(fake.calls() >= 10, "{} renewals", fake.calls());
        assert_eq!(r.stop(), RenewerExit::Stopped);
    }

    #[test]
    fn a_window_counts_from_the_last_good_renewal() {
        // Good renewals for 10 ticks (200 ms, past one 150 ms window), then
        // one failure: the window runs from the last success, so the lease
        // is kept.
        let mut first = vec![Some(Renewal::Renewed); 10];
        first.push(None);
        let fake = FakeLease::answering(Some(Renewal::Renewed), first);
        let (seen, on_exit) = exits();
        let r = Renewer::spawn(fake.clone(), cfg(Duration::from_secs(60)), on_exit).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while fake.calls() < 14 && seen.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(seen.lock().unwrap().is_empty(), "lost after one failure");
        assert!(fake.calls() >= 14, "{} renewals", fake.calls());
        assert_eq!(r.stop(), RenewerExit::Stopped);
    }

    #[test]
    fn failures_for_a_whole_window_lose_the_lease() {
        let fake = FakeLease::answering(None, vec![]);
        let (seen, on_exit) = exits();
        let start = Instant::now();
        let r = Renewer::spawn(fake.clone(), cfg(Duration::from_secs(60)), on_exit).unwrap();
        assert_eq!(
            wait_for_exit(&seen, Duration::from_secs(2)),
            vec![RenewerExit::LeaseLost]
        );
        let took = start.elapsed();
        // Lost at the first tick at or past 150 ms: 8 ticks, give or take one.
        assert!(took >= LEASE, "lost after {took:?}");
        assert!((7..=9).contains(&fake.calls()), "{} attempts", fake.calls());
        assert_eq!(r.stop(), RenewerExit::LeaseLost);
    }
}
