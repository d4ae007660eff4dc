//! Lease and holder types, and the arithmetic that decides expiry.
//!
//! Everything here is pure: the store computes ages on its own clock (the
//! server's clock for PostgreSQL, so skewed hosts agree) and hands them over
//! as millisecond offsets; this module only interprets them. The renew
//! interval rule lives here too, because every lease holder (a running pass
//! and a queued waiter) keeps it.

use std::time::Duration;

use serde::Serialize;

use super::Liveness;

/// Shortest lease jobrun accepts: the renewer ticks at a third of the lease,
/// floored at one second, so a shorter lease would lapse between two ticks.
pub const MIN_LEASE: Duration = Duration::from_secs(3);
/// Floor of the renew interval.
pub const MIN_RENEW_INTERVAL: Duration = Duration::from_secs(1);

/// How often a lease of length `lease` is renewed: a third of it, floored at
/// one second.
pub fn renew_interval(lease: Duration) -> Duration {
    (lease / 3).max(MIN_RENEW_INTERVAL)
}

/// One process of a holder: its pid and its start time in clock ticks since
/// boot (field 22 of `/proc/PID/stat`). A pid without its start time is not
/// evidence of anything: the number may have been reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Proc {
    pub pid: i32,
    pub start: u64,
}

/// What a lease (or a queue row) records about its holder so that another
/// process can judge whether it is alive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub host: String,
    pub boot_id: String,
    pub pid_ns: String,
    /// The `jobrun run` process that holds the lease.
    pub wrapper: Proc,
    /// The command's process, forked and put on record before it may
    /// exec; its pid is also the id of the pass's process group.
    pub child: Option<Proc>,
}

/// Identifies one lease: the job, the slot, and the fencing token under
/// which it was taken. Renew and release are compare-and-set on all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseKey {
    pub job: String,
    pub slot: u32,
    pub token: i64,
}

/// A lease row as the store returns it, with its ages measured on the
/// store's clock at the moment it was read.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseRow {
    pub job: String,
    pub slot: u32,
    pub token: i64,
    pub pass_id: String,
    pub holder: Holder,
    pub argv: Vec<String>,
    pub cwd: String,
    /// The `--slots` the holder asked for.
    pub slots: u32,
    pub lease_ms: i64,
    pub max_hold_ms: i64,
    /// Wall-clock time (Unix milliseconds, store clock) the lease was taken.
    pub acquired_at_ms: i64,
    /// Milliseconds since the lease was taken (store clock).
    pub held_ms: i64,
    /// Milliseconds since the last renewal (store clock).
    pub renewed_ago_ms: i64,
    /// Milliseconds until the lease lapses; zero or negative once lapsed.
    pub expires_in_ms: i64,
}

impl LeaseRow {
    pub fn key(&self) -> LeaseKey {
        LeaseKey {
            job: self.job.clone(),
            slot: self.slot,
            token: self.token,
        }
    }

    /// The lease window has passed without a renewal.
    pub fn lapsed(&self) -> bool {
        self.expires_in_ms <= 0
    }

    /// The holder has held longer than its own `--max-hold`: by the
    /// operator's setting it has forfeited the slot, alive or not.
    pub fn forfeited(&self) -> bool {
        self.held_ms >= self.max_hold_ms
    }
}

/// A queued pass (`run --wait`): it carries the same evidence as a lease and
/// is renewed the same way while it waits.
#[derive(Debug, Clone, Serialize)]
pub struct WaiterRow {
    pub id: i64,
    pub job: String,
    pub pass_id: String,
    pub holder: Holder,
    pub argv: Vec<String>,
    pub cwd: String,
    pub slots: u32,
    pub arrived_at_ms: i64,
    pub waited_ms: i64,
    pub expires_in_ms: i64,
}

impl WaiterRow {
    pub fn lapsed(&self) -> bool {
        self.expires_in_ms <= 0
    }
}

/// When a row may be removed by someone other than its holder. The store
/// checks the condition again inside the transaction that removes the row,
/// so a holder that renewed in between keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictIf {
    /// The holder was judged dead: the token alone must still match.
    TokenMatches,
    /// The holder's liveness is unknown: only once its lease has lapsed.
    Lapsed,
    /// The holder is past its max hold.
    Forfeited,
}

/// A lease another process has decided to take away, with the token it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub slot: u32,
    pub token: i64,
    pub condition: EvictIf,
}

/// Why a held slot may be freed by someone other than its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeReason {
    /// Every process of the holder is known dead.
    Dead,
    /// Nothing tells whether the holder lives, and its lease lapsed.
    LapsedUnknown,
    /// The holder is past its own max hold and its lease lapsed: by the
    /// operator's setting it forfeited the slot, alive or not.
    Forfeited,
    /// An operator forced it (`clear-locks --force`) over a holder the
    /// rules would keep.
    Forced,
}

impl FreeReason {
    /// As an operator reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            FreeReason::Dead => "holder is dead",
            FreeReason::LapsedUnknown => "lease lapsed and holder unknown",
            FreeReason::Forfeited => "past its max hold",
            FreeReason::Forced => "forced over a live holder (operator override)",
        }
    }
}

/// What to do with a held lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Keep,
    /// Free it, if the eviction's condition still holds when the store
    /// removes the row.
    Free(Eviction, FreeReason),
}

/// The lease policy in one place. An unattended caller (`run`, a waiter)
/// passes `force = false`; only `clear-locks --force` passes true. Dead
/// frees at once; unknown frees once the lease has lapsed; alive frees only
/// when forced, or past its own max hold once its lease has lapsed too (the
/// holder stops renewing at its max hold, so a live holder whose lease
/// still runs is never judged on a clock that may have jumped).
pub fn decide(lease: &LeaseRow, liveness: Liveness, force: bool) -> Decision {
    let evict = |condition, reason| {
        Decision::Free(
            Eviction {
                slot: lease.slot,
                token: lease.token,
                condition,
            },
            reason,
        )
    };
    match liveness {
        Liveness::Dead => evict(EvictIf::TokenMatches, FreeReason::Dead),
        _ if lease.forfeited() && lease.lapsed() => {
            evict(EvictIf::Forfeited, FreeReason::Forfeited)
        }
        Liveness::Unknown if lease.lapsed() => evict(EvictIf::Lapsed, FreeReason::LapsedUnknown),
        _ if force => evict(EvictIf::TokenMatches, FreeReason::Forced),
        _ => Decision::Keep,
    }
}

/// What to do with a queue row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaiterDecision {
    Keep,
    /// A ghost: remove it, and when its holder is only unknown, only if its
    /// lease is still lapsed when the store removes it.
    Remove {
        only_if_lapsed: bool,
    },
}

/// The ghost rule: a waiter whose process is dead is a ghost; an unknown
/// one once its lease has lapsed. A live waiter holds nothing, and nothing
/// (not even `--force`) removes it.
pub fn decide_waiter(waiter: &WaiterRow, liveness: Liveness) -> WaiterDecision {
    match liveness {
        Liveness::Dead => WaiterDecision::Remove {
            only_if_lapsed: false,
        },
        Liveness::Unknown if waiter.lapsed() => WaiterDecision::Remove {
            only_if_lapsed: true,
        },
        _ => WaiterDecision::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renew_interval_is_a_third_floored_at_one_second() {
        assert_eq!(
            renew_interval(Duration::from_secs(300)),
            Duration::from_secs(100)
        );
        assert_eq!(
            renew_interval(Duration::from_secs(6)),
            Duration::from_secs(2)
        );
        assert_eq!(
            renew_interval(Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(
            renew_interval(Duration::from_millis(2400)),
            Duration::from_secs(1)
        );
        assert_eq!(
            renew_interval(Duration::from_millis(150)),
            Duration::from_secs(1)
        );
    }

    fn row(held_ms: i64, expires_in_ms: i64, max_hold_ms: i64) -> LeaseRow {
        LeaseRow {
            job: "j".into(),
            slot: 0,
            token: 1,
            pass_id: "p".into(),
            holder: Holder {
                host: "h".into(),
                boot_id: "b".into(),
                pid_ns: "n".into(),
                wrapper: Proc { pid: 1, start: 1 },
                child: None,
            },
            argv: vec![],
            cwd: "/".into(),
            slots: 1,
            lease_ms: 3000,
            max_hold_ms,
            acquired_at_ms: 0,
            held_ms,
            renewed_ago_ms: 0,
            expires_in_ms,
        }
    }

    #[test]
    fn lapsed_and_forfeited_follow_the_store_clock() {
        assert!(!row(10, 1, 100).lapsed());
        assert!(row(10, 0, 100).lapsed());
        assert!(row(10, -5, 100).lapsed());
        assert!(!row(99, 1, 100).forfeited());
        assert!(row(100, 1, 100).forfeited());
    }

    #[test]
    fn the_lease_policy_table() {
        use FreeReason::{Forced, Forfeited, LapsedUnknown};
        use Liveness::{Alive, Dead, Unknown};
        let gone = FreeReason::Dead;
        // (liveness, force, held_ms, expires_in_ms) -> freed, and why;
        // max hold 100 ms throughout.
        let table = [
            (Dead, false, 10, 50, Some(gone)),
            (Dead, true, 10, 50, Some(gone)),
            (Dead, false, 500, -5, Some(gone)),
            (Unknown, false, 10, 50, None),
            (Unknown, false, 10, 0, Some(LapsedUnknown)),
            (Unknown, true, 10, 50, Some(Forced)),
            (Unknown, false, 500, 50, None),
            (Unknown, false, 500, -5, Some(Forfeited)),
            (Alive, false, 10, 50, None),
            (Alive, false, 10, -5, None),
            (Alive, false, 500, 50, None),
            (Alive, false, 500, -5, Some(Forfeited)),
            (Alive, true, 10, 50, Some(Forced)),
            (Alive, true, 500, -5, Some(Forfeited)),
        ];
        for (liveness, force, held, expires, want) in table {
            let got = match decide(&row(held, expires, 100), liveness, force) {
                Decision::Keep => None,
                Decision::Free(ev, why) => {
                    let condition = match why {
                        FreeReason::Dead | Forced => EvictIf::TokenMatches,
                        LapsedUnknown => EvictIf::Lapsed,
                        Forfeited => EvictIf::Forfeited,
                    };
                    assert_eq!(
                        ev.condition, condition,
                        "{liveness:?} {force} {held} {expires}"
                    );
                    Some(why)
                }
            };
            assert_eq!(
                got, want,
                "{liveness:?} force={force} held={held} expires={expires}"
            );
        }
    }

    #[test]
    fn the_ghost_waiter_table() {
        let waiter = |expires_in_ms| WaiterRow {
            id: 1,
            job: "j".into(),
            pass_id: "p".into(),
            holder: row(0, 0, 0).holder,
            argv: vec![],
            cwd: "/".into(),
            slots: 1,
            arrived_at_ms: 0,
            waited_ms: 0,
            expires_in_ms,
        };
        let remove = |only_if_lapsed| WaiterDecision::Remove { only_if_lapsed };
        let table = [
            (Liveness::Dead, 50, remove(false)),
            (Liveness::Dead, -5, remove(false)),
            (Liveness::Unknown, 50, WaiterDecision::Keep),
            (Liveness::Unknown, 0, remove(true)),
            (Liveness::Alive, 50, WaiterDecision::Keep),
            (Liveness::Alive, -5, WaiterDecision::Keep),
        ];
        for (liveness, expires, want) in table {
            assert_eq!(
                decide_waiter(&waiter(expires), liveness),
                want,
                "{liveness:?} {expires}"
            );
        }
    }
}
