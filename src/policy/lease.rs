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

/// The wait before a renewer's next tick: its interval, ±10% by `r` (a
/// random number, uniform over `u16`), so that thousands of passes started
/// together do not renew in step.
pub fn renew_tick(interval: Duration, r: u16) -> Duration {
    interval * 9 / 10 + interval * u32::from(r) / (5 * 65_536)
}

/// A renewal is late when more than half the lease passed since the one
/// before (ticks come every third, ±10%): the store serves its renewals
/// slower than its passes ask, and the operator hears of it (the
/// renewer's warning, `status`) while the lease still holds.
pub fn renewal_late(lease_ms: i64, renewed_ago_ms: i64) -> bool {
    renewed_ago_ms > lease_ms / 2
}

/// The fencing-token rule: the token a slot is taken under, and the job's
/// counter after it, from the counter as stored and the clock's floor
/// (`Clock::token_floor`). A token is strictly larger than every token the
/// job handed out before (the counter), at least the floor (so a deleted
/// and re-created store never repeats one), and never below 1. `None` when
/// the counter cannot grow any further: the pass is refused rather than
/// given a token twice (only a writer of the store can put it there).
pub fn draw_token(counter: i64, floor: i64) -> Option<(i64, i64)> {
    let token = counter.max(floor).max(1);
    Some((token, token.checked_add(1)?))
}

/// Where a new job's counter starts: at the clock's floor, and above every
/// token of a job of the same name forgotten from this store before
/// (`forgotten`: the largest such counter, kept store-wide).
pub fn first_counter(floor: i64, forgotten: Option<i64>) -> i64 {
    floor.max(forgotten.unwrap_or(0)).max(1)
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
    /// The time namespace its start times and boot-clock stamps were read
    /// in; `None` on rows of a jobrun that did not record it (see
    /// `time_ns_of`).
    pub time_ns: Option<String>,
    /// The wrapper's session: the command's process group lives inside it.
    /// `None` on rows of a jobrun that did not record it.
    pub session: Option<i32>,
    /// The `jobrun run` process that holds the lease.
    pub wrapper: Proc,
    /// The command's process, forked and put on record before it may
    /// exec; its pid is also the id of the pass's process group.
    pub child: Option<Proc>,
}

impl Holder {
    /// The boot clock the holder stamped its row on (see `boot_clock`).
    pub fn boot_clock(&self) -> String {
        boot_clock(&self.boot_id, self.time_ns.as_deref())
    }
}

/// The initial time namespace (the kernel's `PROC_TIME_INIT_INO`): where
/// every process runs unless it was started in another one.
pub const INITIAL_TIME_NS: &str = "time:[4026531834]";

/// The time namespace a start time or a boot-clock stamp was read in, as
/// recorded (or read): a row of a jobrun that recorded none, and a kernel
/// without time namespaces, mean the initial one.
pub fn time_ns_of(recorded: Option<&str>) -> &str {
    recorded
        .filter(|t| !t.is_empty())
        .unwrap_or(INITIAL_TIME_NS)
}

/// One boot clock: a boot (its id) seen from one time namespace. Two
/// readings of `CLOCK_BOOTTIME`, or two `/proc` start times, compare only
/// when their boot clocks are the same: a time namespace offsets that
/// clock (`unshare --time --boottime`, a CRIU restore).
pub fn boot_clock(boot_id: &str, time_ns: Option<&str>) -> String {
    format!("{boot_id} {}", time_ns_of(time_ns))
}

/// Identifies one lease: the job, the slot, and the fencing token under
/// which it was taken. Renew and release are compare-and-set on all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseKey {
    pub job: String,
    pub slot: u32,
    pub token: i64,
}

/// The store's clock at one instant, read inside the transaction that uses
/// it: the server's wall clock on PostgreSQL (one clock for a fleet), this
/// host's on SQLite, where `boot` also carries this process's boot clock
/// (`boot_clock`: boot id and time namespace) and its `CLOCK_BOOTTIME` (a
/// clock that never steps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clock {
    /// Wall time in Unix milliseconds.
    pub now_ms: i64,
    /// This process's boot clock (`boot_clock`) and its reading in
    /// milliseconds, on a one-machine store.
    pub boot: Option<(String, i64)>,
}

impl Clock {
    /// The boot clock's reading, when the store keeps one.
    pub fn boot_ms(&self) -> Option<i64> {
        self.boot.as_ref().map(|(_, ms)| *ms)
    }

    /// The floor of a new fencing token: the wall clock in microseconds.
    /// An earlier store (deleted, re-created, restored from a backup) could
    /// only have handed out a larger token by taking slots faster than one
    /// per microsecond over its whole life.
    pub fn token_floor(&self) -> i64 {
        self.now_ms.saturating_mul(1000)
    }

    /// Milliseconds since an instant a row recorded: on the boot clock when
    /// the row was stamped on this boot clock (`row_boot` is its
    /// `boot_clock`: this boot, seen from this time namespace; `boot` its
    /// boot-clock stamp), else on the wall clock. The one place that picks
    /// the clock: a wall-clock step never makes a lease of this boot look
    /// lapsed or forfeited, and a boot clock offset by another time
    /// namespace never ages a row stamped on this one.
    pub fn since(&self, row_boot: &str, wall: i64, boot: Option<i64>) -> i64 {
        match (&self.boot, boot) {
            (Some((id, now)), Some(then)) if id == row_boot => now.saturating_sub(then),
            _ => self.now_ms.saturating_sub(wall),
        }
    }
}

/// The instants a lease or queue row records, as the store keeps them.
/// Ages are never stored: they are computed from these by `Ages::of`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stamps {
    /// Wall time (store clock) the slot was taken, or the waiter arrived.
    pub acquired_ms: i64,
    /// Wall time (store clock) of the last renewal: with the job, slot and
    /// token, what a transition compares-and-sets on.
    pub renewed_ms: i64,
    /// The same instants on the boot clock, for rows of a one-machine
    /// store's boot.
    pub acquired_boot_ms: Option<i64>,
    pub renewed_boot_ms: Option<i64>,
    pub lease_ms: i64,
    /// Unbounded (`i64::MAX`) for a waiter: `--wait` bounds it.
    pub max_hold_ms: i64,
}

/// A row's ages on the store's clock at one instant, and what they mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ages {
    /// Since the slot was taken (or the waiter arrived).
    pub held_ms: i64,
    pub renewed_ago_ms: i64,
    /// Until the lease lapses; zero or negative once lapsed.
    pub expires_in_ms: i64,
    max_hold_ms: i64,
}

impl Ages {
    /// The one rule for lapse and forfeiture: the ages of a row stamped
    /// `stamps` by a holder on boot clock `row_boot` (`Holder::boot_clock`),
    /// on `clock`.
    pub fn of(stamps: &Stamps, row_boot: &str, clock: &Clock) -> Ages {
        let renewed_ago_ms = clock.since(row_boot, stamps.renewed_ms, stamps.renewed_boot_ms);
        Ages {
            held_ms: clock.since(row_boot, stamps.acquired_ms, stamps.acquired_boot_ms),
            renewed_ago_ms,
            expires_in_ms: stamps.lease_ms.saturating_sub(renewed_ago_ms),
            max_hold_ms: stamps.max_hold_ms,
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
    /// The container engine the pass declared (`--containers`), as the
    /// store keeps it: a name for `Engine::parse`, never a command.
    pub containers: Option<String>,
    pub stamps: Stamps,
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
    /// `run --max-idle`, and how long since the pass's last `jobrun touch`
    /// (or since it took the slot): (idle ms, max idle ms), store clock.
    pub idle: Option<(i64, i64)>,
}

impl LeaseRow {
    /// A row as read, aged on `clock`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: LeaseKey,
        pass_id: String,
        holder: Holder,
        argv: Vec<String>,
        cwd: String,
        slots: u32,
        stamps: Stamps,
        clock: &Clock,
    ) -> LeaseRow {
        let ages = Ages::of(&stamps, &holder.boot_clock(), clock);
        LeaseRow {
            job: key.job,
            slot: key.slot,
            token: key.token,
            pass_id,
            argv,
            cwd,
            slots,
            containers: None,
            lease_ms: stamps.lease_ms,
            max_hold_ms: stamps.max_hold_ms,
            acquired_at_ms: stamps.acquired_ms,
            held_ms: ages.held_ms,
            renewed_ago_ms: ages.renewed_ago_ms,
            expires_in_ms: ages.expires_in_ms,
            idle: None,
            stamps,
            holder,
        }
    }

    pub fn key(&self) -> LeaseKey {
        LeaseKey {
            job: self.job.clone(),
            slot: self.slot,
            token: self.token,
        }
    }

    fn ages(&self) -> Ages {
        Ages {
            held_ms: self.held_ms,
            renewed_ago_ms: self.renewed_ago_ms,
            expires_in_ms: self.expires_in_ms,
            max_hold_ms: self.max_hold_ms,
        }
    }

    /// The lease window has passed without a renewal.
    pub fn lapsed(&self) -> bool {
        self.ages().lapsed()
    }

    /// Past its own max hold (see `Ages::forfeited`), or past its own
    /// `--max-idle` since its last progress: either way the holder stopped
    /// renewing by the operator's setting, so, once its lease has lapsed
    /// too, it forfeited the slot alive or not.
    pub fn forfeited(&self) -> bool {
        self.ages().forfeited() || self.idle.is_some_and(|(idle, max)| idle >= max)
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
    /// As `LeaseRow::containers`.
    pub containers: Option<String>,
    pub stamps: Stamps,
    pub arrived_at_ms: i64,
    pub waited_ms: i64,
    pub expires_in_ms: i64,
}

impl WaiterRow {
    /// A row as read, aged on `clock`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: i64,
        job: String,
        pass_id: String,
        holder: Holder,
        argv: Vec<String>,
        cwd: String,
        slots: u32,
        stamps: Stamps,
        clock: &Clock,
    ) -> WaiterRow {
        let ages = Ages::of(&stamps, &holder.boot_clock(), clock);
        WaiterRow {
            id,
            job,
            pass_id,
            argv,
            cwd,
            slots,
            containers: None,
            arrived_at_ms: stamps.acquired_ms,
            // Shown to operators as a wait: on the store's wall clock.
            waited_ms: clock.now_ms.saturating_sub(stamps.acquired_ms),
            expires_in_ms: ages.expires_in_ms,
            stamps,
            holder,
        }
    }

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
    /// Why, as the pass's history records it.
    pub reason: FreeReason,
    /// The verdict the holder was freed on, naming the evidence asked
    /// (`dead: no process (...), no container with its label`), as the
    /// pass's history records it.
    pub evidence: Option<String>,
}

impl Eviction {
    /// The eviction, with the verdict (`Verdict`'s text) it was decided on.
    pub fn with_evidence(self, verdict: String) -> Eviction {
        Eviction {
            evidence: Some(verdict),
            ..self
        }
    }

    /// Whether the eviction still applies to `row`, the slot's row as read
    /// again inside the transaction that would remove it (aged on that
    /// transaction's clock). The store then removes it with a
    /// compare-and-set on what it read. Time only makes "lapsed" and
    /// "forfeited" truer, so a row still lapsed when read is lapsed when
    /// removed; a holder that renewed in between changed its stamp and
    /// keeps its slot.
    pub fn still_holds(&self, row: &LeaseRow) -> bool {
        row.slot == self.slot
            && row.token == self.token
            && match self.condition {
                EvictIf::TokenMatches => true,
                EvictIf::Lapsed => row.lapsed(),
                // Past its max hold and lapsed: a live holder stops renewing
                // at its max hold, so the slot is taken only once its lease
                // has run out.
                EvictIf::Forfeited => row.lapsed() && row.forfeited(),
            }
    }
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
    /// As history records it.
    pub fn key(self) -> &'static str {
        match self {
            FreeReason::Dead => "dead",
            FreeReason::LapsedUnknown => "lapsed-unknown",
            FreeReason::Forfeited => "forfeited",
            FreeReason::Forced => "forced",
        }
    }

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
                reason,
                evidence: None,
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

impl WaiterDecision {
    /// Why the waiter is removed, as its history records it.
    pub fn reason(&self) -> FreeReason {
        match self {
            WaiterDecision::Remove {
                only_if_lapsed: true,
            } => FreeReason::LapsedUnknown,
            _ => FreeReason::Dead,
        }
    }

    /// Whether a removal still applies to `row`, read again inside the
    /// transaction that would remove it (see `Eviction::still_holds`).
    pub fn still_holds(&self, row: &WaiterRow) -> bool {
        match self {
            WaiterDecision::Keep => false,
            WaiterDecision::Remove { only_if_lapsed } => !only_if_lapsed || row.lapsed(),
        }
    }
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
    fn renewal_ticks_stay_within_ten_percent_and_late_is_past_half_the_lease() {
        let third = Duration::from_secs(1);
        assert_eq!(renew_tick(third, 0), Duration::from_millis(900));
        assert_eq!(renew_tick(third, u16::MAX / 2 + 1), third);
        let top = renew_tick(third, u16::MAX);
        assert!(top > Duration::from_millis(1099) && top < Duration::from_millis(1100));
        assert!(!renewal_late(3000, 1500));
        assert!(renewal_late(3000, 1501));
    }

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

    const NOW: i64 = 1_800_000_000_000;

    fn holder() -> Holder {
        Holder {
            host: "h".into(),
            boot_id: "b".into(),
            pid_ns: "n".into(),
            time_ns: None,
            session: None,
            wrapper: Proc { pid: 1, start: 1 },
            child: None,
        }
    }

    /// A 3 s lease held `held_ms`, lapsing in `expires_in_ms`, with a max
    /// hold of `max_hold_ms`, read on a wall clock.
    fn row(held_ms: i64, expires_in_ms: i64, max_hold_ms: i64) -> LeaseRow {
        let stamps = Stamps {
            acquired_ms: NOW - held_ms,
            renewed_ms: NOW - (3000 - expires_in_ms),
            acquired_boot_ms: None,
            renewed_boot_ms: None,
            lease_ms: 3000,
            max_hold_ms,
        };
        let key = LeaseKey {
            job: "j".into(),
            slot: 0,
            token: 1,
        };
        let clock = Clock {
            now_ms: NOW,
            boot: None,
        };
        LeaseRow::new(
            key,
            "p".into(),
            holder(),
            vec![],
            "/".into(),
            1,
            stamps,
            &clock,
        )
    }

    /// Which clock ages a row: the boot clock for a row stamped on this
    /// boot, the wall clock (the server's, on a fleet store) otherwise. A
    /// wall-clock step of an hour changes the ages of other boots' rows,
    /// never this boot's.
    #[test]
    fn ages_are_measured_on_the_boot_clock_within_one_boot() {
        let stamps = Stamps {
            acquired_ms: NOW - 10_000,
            renewed_ms: NOW - 1_000,
            acquired_boot_ms: Some(50_000),
            renewed_boot_ms: Some(59_000),
            lease_ms: 3_000,
            max_hold_ms: 20_000,
        };
        let on = |now_ms: i64, boot: Option<(&str, i64)>| Clock {
            now_ms,
            boot: boot.map(|(id, ms)| (id.to_string(), ms)),
        };
        let stepped = NOW + 3_600_000;
        // (clock, row's boot) -> (held, renewed ago, lapsed, forfeited)
        let table = [
            (
                on(NOW, Some(("b", 60_000))),
                "b",
                (10_000, 1_000, false, false),
            ),
            (
                on(stepped, Some(("b", 60_000))),
                "b",
                (10_000, 1_000, false, false),
            ),
            (
                on(NOW, Some(("b", 64_000))),
                "b",
                (14_000, 5_000, true, false),
            ),
            (
                on(stepped, Some(("other", 60_000))),
                "b",
                (3_610_000, 3_601_000, true, true),
            ),
            (on(NOW, None), "b", (10_000, 1_000, false, false)),
            (on(stepped, None), "b", (3_610_000, 3_601_000, true, true)),
        ];
        for (clock, row_boot, (held, renewed, lapsed, forfeited)) in table {
            let a = Ages::of(&stamps, row_boot, &clock);
            assert_eq!(
                (a.held_ms, a.renewed_ago_ms, a.lapsed(), a.forfeited()),
                (held, renewed, lapsed, forfeited),
                "{clock:?}"
            );
            assert_eq!(a.expires_in_ms, 3_000 - renewed);
        }
    }

    /// One boot seen from another time namespace is another boot clock: a
    /// row stamped there is aged on the wall clock, however far that
    /// namespace's boot clock is offset. A row that recorded no time
    /// namespace was stamped in the initial one.
    #[test]
    fn a_boot_clock_is_one_boot_seen_from_one_time_namespace() {
        let stamps = Stamps {
            acquired_ms: NOW - 10_000,
            renewed_ms: NOW - 1_000,
            acquired_boot_ms: Some(50_000),
            renewed_boot_ms: Some(59_000),
            lease_ms: 3_000,
            max_hold_ms: 20_000,
        };
        let offset = 100_000_000_000;
        // (the reader's time namespace and boot-clock reading, the row's
        // time namespace) -> (held, renewed ago)
        let table = [
            ((None, 60_000), None, (10_000, 1_000)),
            ((Some(""), 60_000), Some(INITIAL_TIME_NS), (10_000, 1_000)),
            ((Some("time:[7]"), 60_000 + offset), None, (10_000, 1_000)),
            ((None, 60_000), Some("time:[7]"), (10_000, 1_000)),
            (
                (Some("time:[7]"), 61_000),
                Some("time:[7]"),
                (11_000, 2_000),
            ),
        ];
        for ((mine, reading), theirs, want) in table {
            let clock = Clock {
                now_ms: NOW,
                boot: Some((boot_clock("b", mine), reading)),
            };
            let a = Ages::of(&stamps, &boot_clock("b", theirs), &clock);
            assert_eq!((a.held_ms, a.renewed_ago_ms), want, "{mine:?} {theirs:?}");
            assert!(!a.lapsed() && !a.forfeited(), "{mine:?} {theirs:?}");
        }
    }

    /// Tokens grow, start above the clock's floor and every forgotten job's
    /// tokens, are never below 1, and never repeat: a counter that cannot
    /// grow refuses the pass.
    #[test]
    fn the_fencing_token_rule() {
        // (counter, floor) -> (token, next counter)
        let table = [
            ((5, 3), Some((5, 6))),
            ((5, 9), Some((9, 10))),
            ((0, -7_000), Some((1, 2))),
            ((-40, -7_000), Some((1, 2))),
            ((i64::MAX - 1, 0), Some((i64::MAX - 1, i64::MAX))),
            ((i64::MAX, 0), None),
            ((0, i64::MAX), None),
        ];
        for ((counter, floor), want) in table {
            assert_eq!(draw_token(counter, floor), want, "{counter} {floor}");
        }
        assert_eq!(first_counter(100, None), 100);
        assert_eq!(first_counter(100, Some(500)), 500);
        assert_eq!(first_counter(-5, None), 1);
    }

    /// An eviction decided outside the transaction applies only to the row
    /// it was decided on, and only while its condition holds on the row as
    /// read again.
    #[test]
    fn an_eviction_applies_only_while_its_condition_holds() {
        let ev = |condition| Eviction {
            slot: 0,
            token: 1,
            condition,
            reason: FreeReason::LapsedUnknown,
            evidence: None,
        };
        let lapsed = row(10, -5, 100);
        let renewed = row(10, 2000, 100);
        let forfeit = row(500, -5, 100);
        let mut other_token = lapsed.clone();
        other_token.token = 2;
        let table = [
            (EvictIf::TokenMatches, &renewed, true),
            (EvictIf::TokenMatches, &other_token, false),
            (EvictIf::Lapsed, &lapsed, true),
            (EvictIf::Lapsed, &renewed, false),
            (EvictIf::Lapsed, &other_token, false),
            (EvictIf::Forfeited, &lapsed, false),
            (EvictIf::Forfeited, &forfeit, true),
            (EvictIf::Forfeited, &row(500, 2000, 100), false),
        ];
        for (condition, row, want) in table {
            assert_eq!(ev(condition).still_holds(row), want, "{condition:?}");
        }
    }

    #[test]
    fn lapsed_and_forfeited_follow_the_store_clock() {
        assert!(!row(10, 1, 100).lapsed());
        assert!(row(10, 0, 100).lapsed());
        assert!(row(10, -5, 100).lapsed());
        assert!(!row(99, 1, 100).forfeited());
        assert!(row(100, 1, 100).forfeited());
        // Past its own --max-idle since its last touch: forfeited too.
        let mut idle = row(10, -5, 100);
        idle.idle = Some((59, 60));
        assert!(!idle.forfeited());
        idle.idle = Some((60, 60));
        assert!(idle.forfeited());
        assert!(matches!(
            decide(&idle, Liveness::Alive, false),
            Decision::Free(_, FreeReason::Forfeited)
        ));
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
        let waiter = |expires_in_ms: i64| {
            let stamps = Stamps {
                acquired_ms: NOW - 10_000,
                renewed_ms: NOW - (3000 - expires_in_ms),
                acquired_boot_ms: None,
                renewed_boot_ms: None,
                lease_ms: 3000,
                max_hold_ms: i64::MAX,
            };
            let clock = Clock {
                now_ms: NOW,
                boot: None,
            };
            WaiterRow::new(
                1,
                "j".into(),
                "p".into(),
                holder(),
                vec![],
                "/".into(),
                1,
                stamps,
                &clock,
            )
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
            let w = waiter(expires);
            let decision = decide_waiter(&w, liveness);
            assert_eq!(decision, want, "{liveness:?} {expires}");
            // A removal still applies to the row it was decided on.
            assert_eq!(
                decision.still_holds(&w),
                want != WaiterDecision::Keep,
                "{liveness:?}"
            );
        }
    }
}
