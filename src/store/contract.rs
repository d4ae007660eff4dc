//! The store contract, in-process, against both stores, on a clock the
//! tests move (`ClockOffset`): every transition and its compare-and-set.
//! A test body runs once on a fresh SQLite file and once on a fresh
//! PostgreSQL database of the server `scripts/test` starts; without
//! `JOBRUN_TEST_PG` (a bare `cargo test`) the PostgreSQL half is skipped
//! with the reason printed, and with it set an unreachable server fails.

use std::time::Duration;

#[cfg(feature = "postgres")]
use super::postgres::PgStore;
use super::sql::ClockOffset;
use super::sqlite::SqliteStore;
use super::{
    Acquire, AcquireRequest, Enqueue, Forget, Held, HistoryQuery, Released, Store, StoreError,
    StorePin, StoreSpec,
};
use crate::policy::containers::Engine;
use crate::policy::lease::{
    EvictIf, Eviction, FreeReason, Holder, LeaseKey, Proc, WaiterDecision, MIN_LEASE,
};
use crate::policy::outcome::{Outcome, PassRecord, RECENT};
use crate::policy::pause::PauseScope;
use crate::policy::window::{WindowAsk, WindowSpec};
use crate::renewer::Renewal;

/// One store under test, its pin, and the hand on its clock.
struct Subject {
    store: Box<dyn Store>,
    pin: StorePin,
    clock: ClockOffset,
    /// Write the store as someone other than jobrun could.
    forge: Box<dyn FnMut(&str)>,
    /// Keeps the SQLite file's directory, or drops the PostgreSQL database.
    _keep: Keep,
}

enum Keep {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Database {
        server: String,
        name: String,
    },
}

impl Drop for Keep {
    fn drop(&mut self) {
        if let Keep::Database { server, name } = self {
            if let Ok(mut admin) =
                postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
            {
                let _ =
                    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            }
        }
    }
}

fn sqlite() -> Subject {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let mut store = SqliteStore::open(&path, 0o600).expect("open SQLite store");
    let clock = store.backend.offset.clone();
    let spec = StoreSpec::Sqlite(path.clone(), 0o600);
    let pin = StorePin::new(&spec, &mut store).expect("pin");
    let forge = move |sql: &str| {
        let c = rusqlite::Connection::open(&path).expect("open the store raw");
        c.execute_batch(sql).expect("forge a row");
    };
    Subject {
        store: Box::new(store),
        pin,
        clock,
        forge: Box::new(forge),
        _keep: Keep::Dir(dir),
    }
}

/// `None` (said once): this build has no PostgreSQL store.
#[cfg(not(feature = "postgres"))]
fn postgres() -> Option<Subject> {
    eprintln!("skipped the PostgreSQL half: jobrun is built without the PostgreSQL store");
    None
}

/// A fresh database on the test server, or `None` (said once) when no
/// server was given.
#[cfg(feature = "postgres")]
fn postgres() -> Option<Subject> {
    let Ok(server) = std::env::var("JOBRUN_TEST_PG") else {
        eprintln!("skipped the PostgreSQL half: JOBRUN_TEST_PG is not set (scripts/test sets it)");
        return None;
    };
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "jobrun_c_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let mut admin = postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
        .unwrap_or_else(|e| panic!("JOBRUN_TEST_PG={server} cannot be reached: {e}"));
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create the test database");
    let keep = Keep::Database {
        server: server.clone(),
        name: name.clone(),
    };
    let url = format!("{server}/{name}");
    let mut store = PgStore::open(&url).expect("open PostgreSQL store");
    let clock = store.backend.offset.clone();
    let pin = StorePin::new(&StoreSpec::Postgres(url.clone()), &mut store).expect("pin");
    let forge = move |sql: &str| {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect raw");
        c.batch_execute(sql).expect("forge a row");
    };
    Some(Subject {
        store: Box::new(store),
        pin,
        clock,
        forge: Box::new(forge),
        _keep: keep,
    })
}

/// Run `body` against both stores.
fn both(body: fn(&mut Subject)) {
    body(&mut sqlite());
    if let Some(mut pg) = postgres() {
        body(&mut pg);
    }
}

const LEASE: Duration = MIN_LEASE;

pub(super) fn req(job: &str, pass: &str, slots: u32) -> AcquireRequest {
    AcquireRequest {
        job: job.into(),
        pass_id: pass.into(),
        holder: Holder {
            host: "contract-host".into(),
            boot_id: "contract-boot".into(),
            pid_ns: "pid:[1]".into(),
            time_ns: None,
            session: None,
            wrapper: Proc {
                pid: 4242,
                start: 1,
            },
            child: Some(Proc {
                pid: 4243,
                start: 2,
            }),
        },
        argv: vec!["sync".into(), pass.into()],
        cwd: "/srv".into(),
        slots,
        lease: LEASE,
        max_hold: Duration::from_secs(60),
        containers: None,
        window: None,
        declared: None,
        max_idle: None,
    }
}

fn take(s: &mut Subject, job: &str, pass: &str) -> LeaseKey {
    match s.store.acquire(&req(job, pass, 1), &[]).unwrap().result {
        Acquire::Acquired(k) => k,
        other => panic!("{pass}: {other:?}"),
    }
}

fn renew(s: &mut Subject, held: &Held) -> Renewal {
    s.store.renew_held(held, LEASE, &s.pin).unwrap()
}

fn evict(s: &mut Subject, key: &LeaseKey, condition: EvictIf) -> bool {
    let ev = Eviction {
        slot: key.slot,
        token: key.token,
        condition,
        reason: FreeReason::Dead,
        evidence: None,
    }
    .with_evidence("dead: no process (P), no container with its label".into());
    s.store.evict(&key.job, &ev, "contract").unwrap()
}

/// The record of pass `pass`, which took the slot of `k` and ended so.
fn released(k: &LeaseKey, pass: &str, outcome: Outcome) -> PassRecord {
    PassRecord {
        pass_id: pass.into(),
        token: Some(k.token),
        ..record(&k.job, outcome)
    }
}

/// A pass as its wrapper records it: one that took a slot has a token.
fn record(job: &str, outcome: Outcome) -> PassRecord {
    let took_slot = outcome.ran_command();
    PassRecord {
        job: job.into(),
        pass_id: "0000000000aa".into(),
        token: took_slot.then_some(7),
        slot: took_slot.then_some(0),
        host: "contract-host".into(),
        pid: 1,
        started_at_ms: 0,
        ended_at_ms: 0,
        duration_ms: 5,
        waited_ms: Some(0),
        exit_code: Some(0),
        signal: None,
        outcome,
        freed: None,
        window: None,
    }
}

/// A windowed pass's request, and how it ended as its wrapper records it.
fn windowed(job: &str, pass: &str, spec: WindowSpec) -> AcquireRequest {
    AcquireRequest {
        window: Some(WindowAsk { spec, attempts: 3 }),
        ..req(job, pass, 1)
    }
}

fn ended(job: &str, pass: &str, outcome: Outcome, window: &str) -> PassRecord {
    PassRecord {
        pass_id: pass.into(),
        window: Some(window.into()),
        ..record(job, outcome)
    }
}

/// Claim, finish and claim again: the window row follows its claims, in
/// the transactions that take and release the slot.
fn windows_are_claimed_with_the_slot(s: &mut Subject) {
    let hourly = WindowSpec::Every(3600);
    let a = s
        .store
        .acquire(&windowed("w", "a", hourly.clone()), &[])
        .unwrap();
    let (Acquire::Acquired(ka), Some(claim)) = (a.result, a.claimed) else {
        panic!("the first pass claims the window");
    };
    assert_eq!(claim.attempt, 1);
    let hour = claim.key.clone();
    assert_eq!(hour.parse::<i64>().unwrap() % 3600, 0);
    // Held: the next pass finds the slot full and claims nothing.
    let b = s
        .store
        .acquire(&windowed("w", "b", hourly.clone()), &[])
        .unwrap();
    assert_eq!((b.result, b.claimed), (Acquire::Full, None));
    s.store
        .release(
            &ka,
            Some((&ended("w", "a", Outcome::Ok, &hour), super::Keep::last(10))),
            &s.pin,
        )
        .unwrap();
    let c = s
        .store
        .acquire(&windowed("w", "c", hourly.clone()), &[])
        .unwrap();
    let Acquire::WindowDone(row) = c.result else {
        panic!("{c:?}");
    };
    assert_eq!(
        (row.pass_id.as_str(), row.outcome.as_deref()),
        ("a", Some("ok"))
    );
    // The next hour on the store's clock is a new window; failures let it
    // be claimed again, up to the attempts allowed.
    s.clock.advance(Duration::from_secs(3600));
    let mut key = String::new();
    for (attempt, pass) in [(1, "d"), (2, "e"), (3, "f")] {
        let got = s
            .store
            .acquire(&windowed("w", pass, hourly.clone()), &[])
            .unwrap();
        let (Acquire::Acquired(k), Some(claim)) = (got.result, got.claimed) else {
            panic!("{pass} claims again");
        };
        assert_eq!(claim.attempt, attempt);
        assert_ne!(claim.key, hour);
        key = claim.key;
        s.store
            .release(
                &k,
                Some((
                    &ended("w", pass, Outcome::Failed, &key),
                    super::Keep::last(10),
                )),
                &s.pin,
            )
            .unwrap();
    }
    let g = s.store.acquire(&windowed("w", "g", hourly), &[]).unwrap();
    assert!(
        matches!(g.result, Acquire::WindowGivenUp(ref r) if r.attempts == 3),
        "{g:?}"
    );
    let latest = s.store.windows(&[]).unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(
        (latest[0].key.as_str(), latest[0].attempts),
        (key.as_str(), 3)
    );
    // An evicted claimer's window is ended as abandoned, with its history
    // row, and may be claimed again.
    let named = WindowSpec::Key("2026-12-01".into());
    let h = s
        .store
        .acquire(&windowed("k", "h", named.clone()), &[])
        .unwrap();
    let Acquire::Acquired(kh) = h.result else {
        panic!("{h:?}");
    };
    assert!(evict(s, &kh, EvictIf::TokenMatches));
    let row = &s.store.windows(&["k".into()]).unwrap()[0];
    assert_eq!(row.outcome.as_deref(), Some("abandoned"));
    let i = s.store.acquire(&windowed("k", "i", named), &[]).unwrap();
    assert_eq!(i.claimed.map(|c| c.attempt), Some(2));
    let abandoned = s
        .store
        .history(&HistoryQuery {
            job: Some("k".into()),
            limit: 10,
            ..HistoryQuery::default()
        })
        .unwrap();
    assert_eq!(abandoned[0].window.as_deref(), Some("2026-12-01"));
}

fn take_renew_release(s: &mut Subject) {
    let a = take(s, "j", "a");
    let full = s.store.acquire(&req("j", "b", 1), &[]).unwrap().result;
    assert_eq!(full, Acquire::Full);
    assert_eq!(renew(s, &Held::Lease(a.clone())), Renewal::Renewed);
    // Renew and release are compare-and-set on the token.
    let stale = LeaseKey {
        token: a.token - 1,
        ..a.clone()
    };
    assert_eq!(renew(s, &Held::Lease(stale.clone())), Renewal::NotOurs);
    assert_eq!(
        s.store.release(&stale, None, &s.pin).unwrap(),
        Released::NotOurs
    );
    // Passes queued for another job are not this one's to wake.
    s.store.enqueue(&req("elsewhere", "w", 1), None).unwrap();
    assert_eq!(
        s.store
            .release(
                &a,
                Some((&record("j", Outcome::Ok), super::Keep::last(10))),
                &s.pin
            )
            .unwrap(),
        Released::Freed { queued: false }
    );
    assert!(!s.store.release(&a, None, &s.pin).unwrap().freed());
    assert_eq!(renew(s, &Held::Lease(a)), Renewal::NotOurs);
    let b = take(s, "j", "b");
    assert_eq!(b.slot, 0);
    let h = s
        .store
        .history(&HistoryQuery {
            limit: 10,
            ..HistoryQuery::default()
        })
        .unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].outcome, Outcome::Ok);
}

fn tokens_only_grow(s: &mut Subject) {
    let mut last = 0;
    for i in 0..5 {
        let k = take(s, "t", &format!("p{i}"));
        assert!(k.token > last, "{} after {last}", k.token);
        last = k.token;
        assert!(s.store.release(&k, None, &s.pin).unwrap().freed());
    }
    // A job forgotten and seen again still draws larger tokens.
    assert!(matches!(s.store.forget("t").unwrap(), Forget::Forgotten));
    let k = take(s, "t", "again");
    assert!(k.token > last, "{} after {last}", k.token);
}

/// A counter that cannot grow refuses the pass; a clock far in the past
/// never gives a token below 1.
fn tokens_never_repeat_or_go_below_one(s: &mut Subject) {
    // 60 years back: the clock's floor is negative.
    s.clock.advance_back(Duration::from_secs(60 * 31_557_600));
    let k = take(s, "n", "a");
    assert!(k.token >= 1, "{}", k.token);
    assert!(s.store.release(&k, None, &s.pin).unwrap().freed());
    s.clock.advance(Duration::from_secs(60 * 31_557_600));
    // A writer of the store sets the counter to its largest value.
    (s.forge)("UPDATE jobs SET next_token = 9223372036854775807 WHERE name = 'n'");
    let err = s.store.acquire(&req("n", "b", 1), &[]).unwrap_err();
    assert!(err.to_string().contains("cannot grow"), "{err}");
    assert!(s.store.leases(&["n".into()]).unwrap().is_empty());
}

/// An eviction applies only while its condition holds on the row as read
/// in the evicting transaction; a renewal in between keeps the slot.
fn evictions_check_their_condition_again(s: &mut Subject) {
    let k = take(s, "e", "a");
    assert!(!evict(s, &k, EvictIf::Lapsed), "a live lease is not lapsed");
    s.clock.advance(LEASE + Duration::from_millis(10));
    // Lapsed, but it renews before the evictor's transaction.
    assert_eq!(renew(s, &Held::Lease(k.clone())), Renewal::Renewed);
    assert!(!evict(s, &k, EvictIf::Lapsed), "renewed in between");
    s.clock.advance(LEASE + Duration::from_millis(10));
    assert!(
        !evict(s, &k, EvictIf::Forfeited),
        "lapsed, not past max hold"
    );
    assert!(evict(s, &k, EvictIf::Lapsed));
    assert_eq!(renew(s, &Held::Lease(k)), Renewal::NotOurs);
    // Past its max hold and lapsed: forfeited.
    let k = take(s, "e", "b");
    s.clock.advance(Duration::from_secs(61));
    assert!(evict(s, &k, EvictIf::Forfeited));
    // Judged dead: the token alone must match.
    let k = take(s, "e", "c");
    let other = LeaseKey {
        token: k.token + 1,
        ..k.clone()
    };
    assert!(!evict(s, &other, EvictIf::TokenMatches));
    assert!(evict(s, &k, EvictIf::TokenMatches));
}

/// Evictions named by a take happen in its transaction, and are reported.
fn a_take_evicts_what_it_names(s: &mut Subject) {
    let k = take(s, "x", "a");
    s.clock.advance(LEASE);
    let ev = Eviction {
        slot: k.slot,
        token: k.token,
        condition: EvictIf::Lapsed,
        reason: FreeReason::LapsedUnknown,
        evidence: None,
    };
    let attempt = s
        .store
        .acquire(&req("x", "b", 1), std::slice::from_ref(&ev))
        .unwrap();
    assert_eq!(attempt.evicted, vec![ev]);
    assert!(matches!(attempt.result, Acquire::Acquired(ref n) if n.token > k.token));
}

/// The smallest `--slots` among holders, waiters and the asker binds.
fn the_smallest_slot_count_binds(s: &mut Subject) {
    let r = |p: &str, n| req("s", p, n);
    let a = s.store.acquire(&r("a", 2), &[]).unwrap().result;
    let b = s.store.acquire(&r("b", 2), &[]).unwrap().result;
    assert!(matches!(a, Acquire::Acquired(ref k) if k.slot == 0));
    assert!(matches!(b, Acquire::Acquired(ref k) if k.slot == 1));
    assert_eq!(
        s.store.acquire(&r("c", 3), &[]).unwrap().result,
        Acquire::Full
    );
    let Acquire::Acquired(b) = b else {
        unreachable!()
    };
    assert!(s.store.release(&b, None, &s.pin).unwrap().freed());
    // A newcomer asking for one slot while one is held: it binds.
    assert_eq!(
        s.store.acquire(&r("d", 1), &[]).unwrap().result,
        Acquire::Full
    );
    assert!(matches!(
        s.store.acquire(&r("e", 2), &[]).unwrap().result,
        Acquire::Acquired(ref k) if k.slot == 1
    ));
}

/// First come, first served: one per free slot, never ahead of the queue.
fn the_queue_is_served_in_order(s: &mut Subject) {
    let held = take(s, "q", "a");
    let id = |e: Enqueue| match e {
        Enqueue::Queued(id) => id,
        other => panic!("{other:?}"),
    };
    let w1 = id(s.store.enqueue(&req("q", "w1", 1), None).unwrap());
    let w2 = id(s.store.enqueue(&req("q", "w2", 1), None).unwrap());
    assert_eq!(
        s.store
            .promote(w1, &req("q", "w1", 1), &[], &s.pin)
            .unwrap()
            .result,
        Acquire::Behind(1)
    );
    assert_eq!(
        s.store
            .promote(w2, &req("q", "w2", 1), &[], &s.pin)
            .unwrap()
            .result,
        Acquire::Behind(2)
    );
    // The release says passes wait, so their wake-up is sent.
    assert_eq!(
        s.store.release(&held, None, &s.pin).unwrap(),
        Released::Freed { queued: true }
    );
    // A pass that does not wait never jumps the queue.
    assert_eq!(
        s.store.acquire(&req("q", "late", 1), &[]).unwrap().result,
        Acquire::Full
    );
    assert_eq!(
        s.store
            .promote(w2, &req("q", "w2", 1), &[], &s.pin)
            .unwrap()
            .result,
        Acquire::Behind(2)
    );
    let got = s
        .store
        .promote(w1, &req("q", "w1", 1), &[], &s.pin)
        .unwrap()
        .result;
    assert!(matches!(got, Acquire::Acquired(_)), "{got:?}");
    // Renewing the promoted waiter's row finds its lease: not a loss.
    let waiter = Held::Waiter {
        id: w1,
        job: "q".into(),
        pass_id: "w1".into(),
    };
    assert_eq!(renew(s, &waiter), Renewal::Renewed);
    let gone = Held::Waiter {
        id: w1,
        job: "q".into(),
        pass_id: "nobody".into(),
    };
    assert_eq!(renew(s, &gone), Renewal::NotOurs);
    assert_eq!(
        s.store
            .promote(w1, &req("q", "w1", 1), &[], &s.pin)
            .unwrap()
            .result,
        Acquire::Gone
    );
}

/// A ghost removed because it lapsed stays if it renewed in between; its
/// own departure always goes.
fn waiters_leave_by_compare_and_set(s: &mut Subject) {
    let _held = take(s, "g", "a");
    let Enqueue::Queued(w) = s.store.enqueue(&req("g", "w", 1), None).unwrap() else {
        panic!("queued")
    };
    let lapsed = WaiterDecision::Remove {
        only_if_lapsed: true,
    };
    assert!(
        !s.store.remove_ghost(w, lapsed, "contract").unwrap(),
        "not lapsed yet"
    );
    s.clock.advance(LEASE);
    assert!(s.store.remove_ghost(w, lapsed, "contract").unwrap());
    let Enqueue::Queued(w) = s.store.enqueue(&req("g", "w2", 1), None).unwrap() else {
        panic!("queued")
    };
    assert!(s.store.depart(w, &s.pin).unwrap());
    assert!(!s.store.depart(w, &s.pin).unwrap());
    // The ghost is in history, once, as abandoned; the departed waiter
    // records its own pass.
    let h = s.store.history(&HistoryQuery {
        job: Some("g".into()),
        limit: 10,
        ..HistoryQuery::default()
    });
    let h = h.unwrap();
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(
        (h[0].outcome, h[0].pass_id.as_str()),
        (Outcome::Abandoned, "w")
    );
    assert!(!h[0].ran());
}

fn identical_queued_passes_coalesce(s: &mut Subject) {
    let _held = take(s, "c", "a");
    let first = s.store.enqueue(&req("c", "w", 1), Some(true)).unwrap();
    assert!(matches!(first, Enqueue::Queued(_)));
    // Same job, argv ("sync w") and cwd: joins it.
    let mut same = req("c", "x", 1);
    same.argv = vec!["sync".into(), "w".into()];
    assert_eq!(
        s.store.enqueue(&same, Some(true)).unwrap(),
        Enqueue::Coalesced("w".into())
    );
    // Not exact (not UTF-8), or not asked: queues.
    assert!(matches!(
        s.store.enqueue(&same, Some(false)).unwrap(),
        Enqueue::Queued(_)
    ));
    assert!(matches!(
        s.store.enqueue(&same, None).unwrap(),
        Enqueue::Queued(_)
    ));
}

/// The engine a pass declares is kept with its queue row and with the
/// lease it is promoted to, and read back as the store keeps it; a row
/// written by a jobrun that knew no engines reads as none.
fn the_declared_engine_is_kept_with_the_pass(s: &mut Subject) {
    let mut boxed = req("e", "w", 1);
    boxed.containers = Some(Engine::Podman);
    let held = take(s, "e", "a");
    let Enqueue::Queued(id) = s.store.enqueue(&boxed, None).unwrap() else {
        panic!("queued")
    };
    let waiters = s.store.waiters(&["e".into()]).unwrap();
    assert_eq!(waiters[0].containers.as_deref(), Some("podman"));
    let leases = s.store.leases(&["e".into()]).unwrap();
    assert_eq!(leases[0].containers, None);
    assert!(s.store.release(&held, None, &s.pin).unwrap().freed());
    let got = s.store.promote(id, &boxed, &[], &s.pin).unwrap().result;
    assert!(matches!(got, Acquire::Acquired(_)), "{got:?}");
    let leases = s.store.leases(&["e".into()]).unwrap();
    assert_eq!(leases[0].pass_id, "w");
    assert_eq!(leases[0].containers.as_deref(), Some("podman"));
    // Whatever a writer of the store put there is read as text, for the
    // judge to refuse.
    (s.forge)("UPDATE leases SET containers = '/bin/sh -c id' WHERE job = 'e'");
    let leases = s.store.leases(&["e".into()]).unwrap();
    assert_eq!(leases[0].containers.as_deref(), Some("/bin/sh -c id"));
}

fn pauses_have_a_scope(s: &mut Subject) {
    s.store
        .pause(&PauseScope::All, Some("upgrade"), None)
        .unwrap();
    let got = s.store.acquire(&req("p", "a", 1), &[]).unwrap().result;
    assert!(
        matches!(got, Acquire::Paused(ref p) if p.all && p.owner.as_deref() == Some("upgrade"))
    );
    s.store
        .pause(&PauseScope::Job("p".into()), None, Some("disk"))
        .unwrap();
    // Another owner's resume lifts nothing of this one.
    assert_eq!(s.store.resume(Some(&PauseScope::All), None).unwrap(), 0);
    assert_eq!(s.store.resume(None, Some("upgrade")).unwrap(), 1);
    let got = s.store.acquire(&req("p", "a", 1), &[]).unwrap().result;
    assert!(matches!(got, Acquire::Paused(ref p) if !p.all && p.reason.as_deref() == Some("disk")));
    assert!(matches!(
        s.store.acquire(&req("other", "a", 1), &[]).unwrap().result,
        Acquire::Acquired(_)
    ));
    let pauses = s.store.pauses().unwrap();
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].scope, PauseScope::Job("p".into()));
    assert!(matches!(s.store.forget("p").unwrap(), Forget::Paused(_)));
    assert_eq!(
        s.store
            .resume(Some(&PauseScope::Job("p".into())), None)
            .unwrap(),
        1
    );
    assert!(matches!(s.store.forget("p").unwrap(), Forget::Forgotten));
}

fn kept_output_goes_with_its_pass(s: &mut Subject) {
    let pass = |id: &str| PassRecord {
        pass_id: id.into(),
        ..record("o", Outcome::Failed)
    };
    let kept = |s: &mut Subject, id: &str| s.store.kept_output(id).unwrap().map(|k| k.output);
    // Bytes as the command wrote them: NUL and bytes that are not UTF-8.
    let raw: &[u8] = b"\0\xff\x1b[1m tail\n";
    s.store
        .record_pass(&pass("00000000000a"), super::Keep::last(10), &s.pin)
        .unwrap();
    s.store
        .keep_output("o", "00000000000a", raw, 1 << 20)
        .unwrap();
    assert_eq!(kept(s, "00000000000a").as_deref(), Some(raw));
    // Past the store-wide cap the oldest goes first.
    s.store
        .record_pass(&pass("00000000000b"), super::Keep::last(10), &s.pin)
        .unwrap();
    s.store.keep_output("o", "00000000000b", raw, 15).unwrap();
    assert_eq!(kept(s, "00000000000a"), None);
    assert_eq!(kept(s, "00000000000b").as_deref(), Some(raw));
    // Output of a pass history does not hold is not kept.
    s.store
        .keep_output("o", "00000000000c", raw, 1 << 20)
        .unwrap();
    assert_eq!(kept(s, "00000000000c"), None);
    // Pruning history removes the output of the passes it removes.
    s.store
        .record_pass(&pass("00000000000d"), super::Keep::last(1), &s.pin)
        .unwrap();
    assert_eq!(kept(s, "00000000000b"), None);
    s.store
        .keep_output("o", "00000000000d", raw, 1 << 20)
        .unwrap();
    // And so does forgetting the job.
    assert!(matches!(s.store.forget("o").unwrap(), Forget::Forgotten));
    assert_eq!(kept(s, "00000000000d"), None);
}

fn history_is_pruned_per_job(s: &mut Subject) {
    for _ in 0..5 {
        s.store
            .record_pass(&record("h", Outcome::Skipped), super::Keep::last(3), &s.pin)
            .unwrap();
        s.store
            .record_pass(&record("k", Outcome::Ok), super::Keep::last(3), &s.pin)
            .unwrap();
    }
    let q = |job: &str, outcome| HistoryQuery {
        job: Some(job.into()),
        outcome,
        limit: 100,
        ..HistoryQuery::default()
    };
    assert_eq!(s.store.history(&q("h", None)).unwrap().len(), 3);
    assert_eq!(
        s.store.history(&q("k", Some(Outcome::Ok))).unwrap().len(),
        3
    );
    assert_eq!(
        s.store
            .history(&q("k", Some(Outcome::Failed)))
            .unwrap()
            .len(),
        0
    );
    let jobs = s.store.jobs(&[]).unwrap();
    let k = jobs.iter().find(|j| j.name == "k").unwrap();
    assert_eq!(k.last_outcome.as_deref(), Some("ok"));
    let h = jobs.iter().find(|j| j.name == "h").unwrap();
    // A skip never took a slot: no last outcome.
    assert_eq!(h.last_outcome, None);
}

/// The counters count every pass once, in the transaction that records it,
/// and pruning history never lowers them; a pass freed as abandoned that
/// reaches its own end is counted by how it ended too; forgetting a job
/// forgets its counters.
fn counters_outlive_pruning(s: &mut Subject) {
    for _ in 0..5 {
        s.store
            .record_pass(&record("c", Outcome::Ok), super::Keep::last(2), &s.pin)
            .unwrap();
    }
    s.store
        .record_pass(&record("c", Outcome::Failed), super::Keep::last(2), &s.pin)
        .unwrap();
    let counted = |s: &mut Subject, job: &str| -> Vec<(String, i64)> {
        s.store
            .counters(&[job.into()])
            .unwrap()
            .into_iter()
            .map(|k| (k.outcome, k.passes))
            .collect()
    };
    assert_eq!(
        counted(s, "c"),
        [("failed".into(), 1), ("ok".into(), 5)],
        "six passes, two kept"
    );
    // A row written by a jobrun that does not count is folded in by the
    // next writer, and read meanwhile.
    // An earlier jobrun's name for a wait that ran out counts as this one's.
    (s.forge)(
        "INSERT INTO history (job, pass_id, host, pid, started_ms, ended_ms, duration_ms, \
         outcome) VALUES ('c', 'old', 'h', 1, 0, 0, 0, 'skipped'), \
         ('c', 'old2', 'h', 1, 0, 0, 0, 'timed-out'), ('c', 'old3', 'h', 1, 0, 0, 0, 'skipped')",
    );
    assert_eq!(counted(s, "c")[2], ("skipped".into(), 2));
    assert_eq!(counted(s, "c")[3], ("wait-expired".into(), 1));
    s.store
        .record_pass(&record("c", Outcome::Ok), super::Keep::last(1), &s.pin)
        .unwrap();
    assert_eq!(
        counted(s, "c"),
        [
            ("failed".into(), 1),
            ("ok".into(), 6),
            ("skipped".into(), 2),
            ("wait-expired".into(), 1)
        ]
    );
    // Abandoned, then its own end: counted both ways, never lowered.
    let k = take(s, "c", "a");
    s.clock.advance(Duration::from_secs(1));
    assert!(evict(s, &k, EvictIf::TokenMatches));
    let ended = released(&k, "a", Outcome::Ok);
    s.store
        .release(&k, Some((&ended, super::Keep::last(1))), &s.pin)
        .unwrap();
    assert_eq!(
        counted(s, "c"),
        [
            ("abandoned".into(), 1),
            ("failed".into(), 1),
            ("ok".into(), 7),
            ("skipped".into(), 2),
            ("wait-expired".into(), 1)
        ]
    );
    // Freed by a jobrun that does not count (its lease gone, its row
    // written, not counted): the pass's own end counts that row as it
    // stood before it updates it, so the pass counts once each way.
    let k = take(s, "d", "b");
    (s.forge)("DELETE FROM leases WHERE job = 'd'");
    (s.forge)(
        "INSERT INTO history (job, pass_id, host, pid, started_ms, ended_ms, duration_ms, \
         outcome) VALUES ('d', 'b', 'h', 1, 0, 0, 0, 'abandoned')",
    );
    let ended = released(&k, "b", Outcome::Failed);
    s.store
        .release(&k, Some((&ended, super::Keep::last(5))), &s.pin)
        .unwrap();
    assert_eq!(
        counted(s, "d"),
        [("abandoned".into(), 1), ("failed".into(), 1)]
    );
    assert_eq!(counted(s, "other"), []);
    assert!(matches!(s.store.forget("c").unwrap(), Forget::Forgotten));
    s.store
        .record_pass(&record("c", Outcome::Ok), super::Keep::last(1), &s.pin)
        .unwrap();
    assert_eq!(counted(s, "c"), [("ok".into(), 1)]);
}

/// A release folds its own row and every other row after the job's marks
/// into its counters and figures, however the marks stand: a row written
/// while it ran by a jobrun that folds nothing, and a row numbered past
/// its own under marks moved to just before that row (on PostgreSQL an id
/// written by hand does not move the sequence, so the release's own row
/// comes before it).
fn a_release_folds_every_row_after_the_marks(s: &mut Subject) {
    let counted = |s: &mut Subject| -> Vec<(String, i64)> {
        s.store
            .counters(&["m".into()])
            .unwrap()
            .into_iter()
            .map(|k| (k.outcome, k.passes))
            .collect()
    };
    let figures = |s: &mut Subject| {
        let f = s.store.stats(&["m".into()]).unwrap().remove("m").unwrap();
        (f.ran, f.max_ms)
    };
    let keep = super::Keep::last(100);
    let k = take(s, "m", "a");
    let a = released(&k, "a", Outcome::Ok);
    s.store.release(&k, Some((&a, keep)), &s.pin).unwrap();
    let k = take(s, "m", "b");
    (s.forge)(
        "INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
         duration_ms, outcome) VALUES ('m', 'old', 9, 0, 'h', 1, 0, 0, 5000, 'failed')",
    );
    let b = released(&k, "b", Outcome::Ok);
    s.store.release(&k, Some((&b, keep)), &s.pin).unwrap();
    // Folded, not read after the marks: a row folded past is never read.
    (s.forge)("DELETE FROM history WHERE job = 'm' AND pass_id = 'old'");
    assert_eq!(
        counted(s),
        [("failed".into(), 1), ("ok".into(), 2)],
        "the row written while b ran"
    );
    assert_eq!(figures(s), (3, 5000));
    let k = take(s, "m", "c");
    (s.forge)(
        "INSERT INTO history (id, job, pass_id, host, pid, started_ms, ended_ms, duration_ms, \
         outcome) VALUES (1000000000, 'm', 'far', 'h', 1, 0, 0, 0, 'skipped'); \
         UPDATE jobs SET counted_id = 999999999 WHERE name = 'm'; \
         UPDATE job_stats SET counted_id = 999999999 WHERE job = 'm'; \
         UPDATE job_recent SET upto = 999999999 WHERE job = 'm'",
    );
    let c = released(&k, "c", Outcome::Ok);
    s.store.release(&k, Some((&c, keep)), &s.pin).unwrap();
    (s.forge)("DELETE FROM history WHERE job = 'm' AND pass_id = 'far'");
    assert!(
        counted(s).contains(&("skipped".into(), 1)),
        "the row numbered past c's: {:?}",
        counted(s)
    );
}

/// A job's figures count every pass in the transaction that records it:
/// pruning, by number or by age, never lowers them; rows written by a
/// jobrun that does not fold them are read meanwhile; a pass freed as
/// abandoned that reaches its own end counts by how it ended too;
/// forgetting a job forgets its figures.
fn figures_outlive_pruning(s: &mut Subject) {
    let at = |s: &mut Subject, job: &str| s.store.stats(&[job.into()]).unwrap().remove(job);
    for ms in [10, 20, 30, 40] {
        let mut p = record("f", Outcome::Ok);
        p.duration_ms = ms;
        s.store
            .record_pass(&p, super::Keep::last(2), &s.pin)
            .unwrap();
        s.clock.advance(Duration::from_secs(1));
    }
    let mut failed = record("f", Outcome::Failed);
    failed.duration_ms = 1000;
    s.store
        .record_pass(&failed, super::Keep::last(2), &s.pin)
        .unwrap();
    s.store
        .record_pass(&record("f", Outcome::Skipped), super::Keep::last(2), &s.pin)
        .unwrap();
    let f = at(s, "f").expect("figures of f");
    assert_eq!(
        (f.ran, f.sum_ms, f.max_ms),
        (5, 1100, 1000),
        "six passes, two kept"
    );
    assert_eq!((f.percentile_ms(50), f.mean_ms()), (30, 220));
    assert_eq!(f.last_duration_ms, Some(1000));
    // The store's clock (real time, moved on): the last ok ended a second
    // before the failure, which ran a second.
    let (ok_at, failed_at) = (f.last_success_ms.unwrap(), f.last_failure_ms.unwrap());
    assert!(
        (1000..1500).contains(&(failed_at - ok_at)),
        "{ok_at} {failed_at}"
    );
    assert_eq!(f.last_start_ms, Some(failed_at - 1000));
    // A row written by a jobrun that does not fold: read meanwhile,
    // folded by the next writer, never twice.
    (s.forge)(
        "INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
         duration_ms, outcome) VALUES ('f', 'old', 9, 0, 'h', 1, 0, 0, 5000, 'ok')",
    );
    assert_eq!(at(s, "f").unwrap().max_ms, 5000);
    s.store
        .record_pass(&record("f", Outcome::Skipped), super::Keep::last(1), &s.pin)
        .unwrap();
    let f = at(s, "f").unwrap();
    assert_eq!((f.ran, f.max_ms), (6, 5000));
    // Abandoned, then its own end: counted both ways.
    let k = take(s, "f", "a");
    s.clock.advance(Duration::from_secs(1));
    assert!(evict(s, &k, EvictIf::TokenMatches));
    let ended = released(&k, "a", Outcome::Ok);
    s.store
        .release(&k, Some((&ended, super::Keep::last(1))), &s.pin)
        .unwrap();
    let f = at(s, "f").unwrap();
    assert_eq!(f.ran, 8, "abandoned and ok");
    assert!(f.last_success_ms.unwrap() - failed_at >= 1000);
    // By age: what ended longer ago than the limit goes, the newest stays.
    let by_age = super::Keep {
        passes: 1000,
        age: Some(Duration::from_secs(10)),
    };
    let kept = |s: &mut Subject| {
        let q = HistoryQuery {
            job: Some("g".into()),
            limit: 100,
            ..HistoryQuery::default()
        };
        s.store.history(&q).unwrap().len()
    };
    s.store
        .record_pass(&record("g", Outcome::Ok), by_age, &s.pin)
        .unwrap();
    s.clock.advance(Duration::from_secs(5));
    s.store
        .record_pass(&record("g", Outcome::Ok), by_age, &s.pin)
        .unwrap();
    assert_eq!(kept(s), 2);
    s.clock.advance(Duration::from_secs(6));
    s.store
        .record_pass(&record("g", Outcome::Ok), by_age, &s.pin)
        .unwrap();
    assert_eq!(kept(s), 2, "the first ended 11 s ago");
    s.clock.advance(Duration::from_secs(60));
    s.store
        .record_pass(&record("g", Outcome::Skipped), by_age, &s.pin)
        .unwrap();
    assert_eq!(kept(s), 1, "only the newest");
    assert_eq!(at(s, "g").unwrap().ran, 3);
    assert!(matches!(s.store.forget("f").unwrap(), Forget::Forgotten));
    assert_eq!(at(s, "f"), None);
    s.store
        .record_pass(&record("f", Outcome::Ok), super::Keep::last(1), &s.pin)
        .unwrap();
    assert_eq!(at(s, "f").unwrap().ran, 1);
}

/// `check` reads a job's last hundred passes from one row, kept by the
/// writers of history: pruning never shortens them, rows an older jobrun
/// wrote are read with them, a row updated in place is one entry as it
/// ended, and a job whose row does not read is read from its history.
fn the_latest_passes_outlive_pruning(s: &mut Subject) {
    let seen = |s: &mut Subject| s.store.recent(&["r".into()], RECENT).unwrap().1.remove(0);
    let durations = |r: &[crate::policy::outcome::Seen]| -> Vec<i64> {
        r.iter().map(|p| p.duration_ms).collect()
    };
    for ms in 0..120 {
        let outcome = [Outcome::Ok, Outcome::Failed][ms as usize % 2];
        let mut p = record("r", outcome);
        p.duration_ms = ms;
        s.store
            .record_pass(&p, super::Keep::last(3), &s.pin)
            .unwrap();
    }
    let r = seen(s);
    assert_eq!(durations(&r), (20..120).rev().collect::<Vec<_>>());
    assert_eq!((r[0].outcome, r[1].outcome), (Outcome::Failed, Outcome::Ok));
    (s.forge)(
        "INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
         duration_ms, outcome) VALUES ('r', 'old', 9, 0, 'h', 1, 0, 0, 5000, 'ok')",
    );
    let r = seen(s);
    assert_eq!(
        (r.len(), r[0].duration_ms, r[1].duration_ms),
        (RECENT, 5000, 119)
    );
    // A jobrun that folds figures alone (schema 12) wrote a row and moved
    // the figures' mark past it: the latest passes still hold it.
    (s.forge)(
        "INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
         duration_ms, outcome) VALUES ('r', 'figures-only', 9, 0, 'h', 1, 0, 0, 6000, 'ok')",
    );
    (s.forge)(
        "UPDATE job_stats SET counted_id = (SELECT MAX(id) FROM history WHERE job = 'r') \
         WHERE job = 'r'",
    );
    assert_eq!(durations(&seen(s)[..3]), [6000, 5000, 119]);
    // Abandoned, then its own end: one entry, as it ended.
    let k = take(s, "r", "a");
    s.clock.advance(Duration::from_secs(1));
    assert!(evict(s, &k, EvictIf::TokenMatches));
    assert_eq!(seen(s)[0].outcome, Outcome::Abandoned);
    let mut ended = released(&k, "a", Outcome::Failed);
    ended.duration_ms = 777;
    s.store
        .release(&k, Some((&ended, super::Keep::last(3))), &s.pin)
        .unwrap();
    let r = seen(s);
    assert_eq!(
        (r.len(), r[0].outcome, &durations(&r)[..4]),
        (RECENT, Outcome::Failed, &[777, 6000, 5000, 119][..])
    );
    (s.forge)("UPDATE job_recent SET seen = 'not ours' WHERE job = 'r'");
    assert_eq!(durations(&seen(s)), [777, 6000, 5000]);
    // A jobrun that knows no latest passes forgot the job and left them:
    // a job of the same name, made again, reads only its own passes.
    s.store
        .record_pass(&record("r", Outcome::Ok), super::Keep::last(3), &s.pin)
        .unwrap();
    (s.forge)("DELETE FROM job_stats WHERE job = 'r'");
    (s.forge)("DELETE FROM history WHERE job = 'r'");
    (s.forge)("DELETE FROM jobs WHERE name = 'r'");
    let k = take(s, "r", "b");
    let mut again = released(&k, "b", Outcome::Ok);
    again.duration_ms = 4242;
    s.store
        .release(&k, Some((&again, super::Keep::last(3))), &s.pin)
        .unwrap();
    assert_eq!(durations(&seen(s)), [4242]);
    // Latest passes marked past the figures' mark are not the job's own:
    // its history is read, and the next writer makes them again from it.
    (s.forge)("UPDATE job_recent SET upto = 999999999 WHERE job = 'r'");
    (s.forge)(
        "INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
         duration_ms, outcome) VALUES ('r', 'past-mark', 9, 0, 'h', 1, 0, 0, 6500, 'ok')",
    );
    assert_eq!(durations(&seen(s)), [6500, 4242]);
    let mut next = record("r", Outcome::Ok);
    next.duration_ms = 31;
    s.store
        .record_pass(&next, super::Keep::last(3), &s.pin)
        .unwrap();
    (s.forge)("DELETE FROM history WHERE job = 'r' AND pass_id = 'past-mark'");
    assert_eq!(durations(&seen(s)), [31, 6500, 4242]);
    assert!(matches!(s.store.forget("r").unwrap(), Forget::Forgotten));
    assert_eq!(seen(s), []);
}

/// Whoever frees a pass records it, once: a holder that later reaches its
/// own release updates that row to how it really ended.
fn every_pass_ends_in_one_history_row(s: &mut Subject) {
    let k = take(s, "o", "a");
    s.clock.advance(Duration::from_secs(2));
    assert_eq!(renew(s, &Held::Lease(k.clone())), Renewal::Renewed);
    s.clock.advance(Duration::from_secs(1));
    assert!(evict(s, &k, EvictIf::TokenMatches));
    let q = HistoryQuery {
        job: Some("o".into()),
        limit: 10,
        ..HistoryQuery::default()
    };
    let h = s.store.history(&q).unwrap();
    assert_eq!(h.len(), 1, "{h:?}");
    let p = &h[0];
    assert_eq!(p.outcome, Outcome::Abandoned);
    assert_eq!((p.pass_id.as_str(), p.token), ("a", Some(k.token)));
    assert!(p.ran(), "it held a slot");
    // Its end is its last renewal: held 2 s of the 3 s before eviction.
    assert!((1_900..=2_100).contains(&p.duration_ms), "{p:?}");
    let freed = p.freed.clone().unwrap();
    assert_eq!(
        (freed.reason.as_str(), freed.by.as_str()),
        ("dead", "contract")
    );
    // And the verdict it was freed on, naming the evidence asked.
    assert_eq!(
        freed.evidence.as_deref(),
        Some("dead: no process (P), no container with its label")
    );
    // The holder was alive after all: its own release replaces the row.
    let ended = released(&k, "a", Outcome::Ok);
    assert!(!s
        .store
        .release(&k, Some((&ended, super::Keep::last(10))), &s.pin)
        .unwrap()
        .freed());
    let h = s.store.history(&q).unwrap();
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0].outcome, Outcome::Ok);
    assert_eq!(h[0].freed, Some(freed), "who freed it is kept");
    // The job's last pass is the one that took a slot.
    let jobs = s.store.jobs(&["o".into()]).unwrap();
    assert_eq!(jobs[0].last_outcome.as_deref(), Some("ok"));
}

#[test]
fn once_per_window() {
    both(windows_are_claimed_with_the_slot);
}

#[test]
fn pass_counters_never_go_down() {
    both(counters_outlive_pruning);
}

#[test]
fn a_release_folds_the_rows_after_the_marks() {
    both(a_release_folds_every_row_after_the_marks);
}

#[test]
fn figures_never_go_down() {
    both(figures_outlive_pruning);
}

#[test]
fn the_latest_passes_never_go_down() {
    both(the_latest_passes_outlive_pruning);
}

#[test]
fn one_history_row_per_pass() {
    both(every_pass_ends_in_one_history_row);
}

#[test]
fn take_renew_and_release_are_compare_and_set() {
    both(take_renew_release);
}

#[test]
fn fencing_tokens_only_grow() {
    both(tokens_only_grow);
}

#[test]
fn fencing_tokens_never_repeat_nor_go_below_one() {
    both(tokens_never_repeat_or_go_below_one);
}

#[test]
fn an_eviction_checks_its_condition_in_its_transaction() {
    both(evictions_check_their_condition_again);
}

#[test]
fn a_take_evicts_in_the_same_transaction() {
    both(a_take_evicts_what_it_names);
}

#[test]
fn slot_counts() {
    both(the_smallest_slot_count_binds);
}

#[test]
fn queue_order_and_promotion() {
    both(the_queue_is_served_in_order);
}

#[test]
fn waiter_removal() {
    both(waiters_leave_by_compare_and_set);
}

#[test]
fn coalescing() {
    both(identical_queued_passes_coalesce);
}

#[test]
fn the_declared_container_engine() {
    both(the_declared_engine_is_kept_with_the_pass);
}

#[test]
fn pause_scopes() {
    both(pauses_have_a_scope);
}

#[test]
fn history_pruning() {
    both(history_is_pruned_per_job);
}

#[test]
fn kept_output() {
    both(kept_output_goes_with_its_pass);
}

/// A PostgreSQL store dropped and re-created under a renewer is another
/// store: the renewal says so instead of renewing into it.
#[test]
fn a_renewal_in_another_database_is_a_lost_store() {
    let Some(mut s) = postgres() else { return };
    let k = take(&mut s, "d", "a");
    let elsewhere = StorePin::Database("cluster/another".into());
    let got = s
        .store
        .renew_held(&Held::Lease(k.clone()), LEASE, &elsewhere)
        .unwrap();
    assert!(matches!(got, Renewal::StoreLost(_)), "{got:?}");
    assert_eq!(renew(&mut s, &Held::Lease(k)), Renewal::Renewed);
}

/// Nor does a pass write its release or its record into it: the pass is
/// not recorded in a store that never knew it.
#[test]
fn a_pass_is_not_recorded_in_another_database() {
    let Some(mut s) = postgres() else { return };
    let k = take(&mut s, "d", "a");
    let elsewhere = StorePin::Database("cluster/another".into());
    let got = s.store.release(
        &k,
        Some((&record("d", Outcome::Ok), super::Keep::last(10))),
        &elsewhere,
    );
    assert!(matches!(got, Err(StoreError::NotPinned(_))), "{got:?}");
    let got = s.store.record_pass(
        &record("d", Outcome::Skipped),
        super::Keep::last(10),
        &elsewhere,
    );
    assert!(matches!(got, Err(StoreError::NotPinned(_))), "{got:?}");
    let q = HistoryQuery {
        job: Some("d".into()),
        limit: 10,
        ..HistoryQuery::default()
    };
    assert!(s.store.history(&q).unwrap().is_empty());
    // A waiter's id names nothing there: neither promoted nor departed.
    let Enqueue::Queued(w) = s.store.enqueue(&req("d", "w", 1), None).unwrap() else {
        panic!("queued")
    };
    let got = s.store.promote(w, &req("d", "w", 1), &[], &elsewhere);
    assert!(matches!(got, Err(StoreError::NotPinned(_))), "{got:?}");
    let got = s.store.depart(w, &elsewhere);
    assert!(matches!(got, Err(StoreError::NotPinned(_))), "{got:?}");
    assert_eq!(s.store.waiters(&["d".into()]).unwrap().len(), 1);
    // In its own store the lease was still held, and is released.
    assert!(s.store.release(&k, None, &s.pin).unwrap().freed());
    assert!(s.store.depart(w, &s.pin).unwrap());
}
