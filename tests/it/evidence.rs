//! Evidence about a lease's holder: a dead holder frees its slot at once, a
//! live one never (not even past its lease), a reused pid is not the holder,
//! and a holder this machine cannot see is left to its lease.

use std::fs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jobrun::model::{Liveness, Outcome, State};

use crate::support::{
    alive, both_stores, kill, kill_pass, start_pass, store_exec, text, wait_until, Kind, TestEnv,
    WEB2,
};

const START: Duration = Duration::from_secs(10);

fn unix_ns(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// A pass SIGKILLed with its child never blocks the job for its lease: the
/// next `run` judges the holder dead, frees the slot at once and says so.
fn killed_holder_frees_at_once(env: &TestEnv) {
    let p = start_pass(env, "j", "first", "60s", &[]);
    let old_token = env.slot("j").token;
    let host = env.slot("j").holder.host;
    let killed_at = SystemTime::now();
    kill_pass(env, p);
    let out = env.run(&[
        "run",
        "-E",
        "75",
        "--lease",
        "60s",
        "j",
        "--",
        "sh",
        "-c",
        "date +%s%N > started.ns",
    ]);
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the next pass did not run: {err}"
    );
    let started: u128 = fs::read_to_string(env.path("started.ns"))
        .expect("the next pass's child ran")
        .trim()
        .parse()
        .unwrap();
    let latency = Duration::from_nanos((started - unix_ns(killed_at)) as u64);
    eprintln!(
        "[{:?}] SIGKILLed holder (lease 60s): kill -> next pass's child started in {} ms",
        env.kind,
        latency.as_millis()
    );
    assert!(
        latency < Duration::from_secs(5),
        "took {latency:?} against a 60s lease"
    );
    // The log names the job, the old holder and why it was judged dead.
    let freed = format!(
        "jobrun: j: freed slot 0 (token {old_token}) of holder {host}:{w}: dead: pid {w} is gone; \
         child pid {c} ",
        w = p.wrapper,
        c = p.child
    );
    assert!(err.contains(&freed), "expected {freed:?} in:\n{err}");
    // ... and the new, larger token it took.
    let new_token: i64 = err
        .split("jobrun: j: took slot 0 with new token ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no new token in:\n{err}"));
    assert!(new_token > old_token, "{new_token} after {old_token}");
    // The new pass took a fresh token and released; the old one is not
    // recorded as anything it did not do.
    assert_eq!(env.held("j"), 0);
    let hist = env.history("j");
    assert_eq!(hist[0].outcome, Outcome::Ok, "{hist:?}");
    assert_eq!(hist[0].token, Some(new_token), "{hist:?}");
}

/// The wrapper SIGKILLed alone: its child runs on, so the holder is alive
/// (orphaned) and keeps the slot past its lease; once the child exits the
/// holder is dead and the next pass runs.
fn orphaned_child_keeps_the_slot(env: &TestEnv) {
    let p = start_pass(env, "j", "first", "3s", &[]);
    let token = env.slot("j").token;
    kill(p.wrapper as i32, libc::SIGKILL);
    assert!(env.wait_exit(p.wrapper, START).is_some());
    assert!(
        wait_until(Duration::from_secs(15), || env
            .find_slot("j")
            .is_some_and(|s| s.expires_in_ms <= 0)),
        "the lease never lapsed: {:?}",
        env.find_slot("j")
    );
    let job = env.job("j");
    assert_eq!(job.state, State::Orphaned, "{job:?}");
    let s = &job.slots[0];
    assert_eq!(s.state, State::Orphaned, "{s:?}");
    assert_eq!(s.verdict.liveness, Liveness::Alive, "{s:?}");
    let reason = &s.verdict.reason;
    assert!(
        reason.contains(&format!("child pid {} runs on", p.child)),
        "{reason}"
    );

    let out = env.run(&["run", "-E", "75", "j", "--", "touch", "rival.ran"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert!(
        !env.path("rival.ran").exists(),
        "a second pass ran beside the orphan"
    );
    assert!(
        err.contains("warning: lease lapsed") && err.contains("is alive"),
        "no warning about the lapsed but live holder: {err}"
    );
    assert!(err.contains("already running; skipping"), "{err}");
    assert!(alive(p.child), "the orphaned child was disturbed");

    fs::write(env.path("first.stop"), "").unwrap();
    assert!(
        wait_until(START, || !alive(p.child)),
        "the child did not stop"
    );
    let out = env.run(&["run", "-E", "75", "j", "--", "touch", "next.ran"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(env.path("next.ran").exists());
    assert!(
        err.contains(&format!("freed slot 0 (token {token})")) && err.contains(": dead: "),
        "{err}"
    );
}

/// A recorded pid whose start time no longer matches is another process:
/// the holder is dead, and stop-due must not signal the process that now
/// has that pid. The start times in the row are faked (a real reuse needs
/// the pid space to wrap); the live processes stand in for the strangers
/// that now own the numbers.
fn reused_pid_is_dead_and_never_signalled(env: &TestEnv) {
    let p = start_pass(env, "j", "first", "60s", &[]);
    // The recorded wrapper's kernel lock would be free by now; point the row
    // at such a file so that only the pids speak.
    let lock = if env.kind == Kind::Sqlite {
        let left = format!("{}.holders/0000000000ff.lock", env.db);
        fs::write(left, "").unwrap();
        ", pass_id = '0000000000ff'".to_string()
    } else {
        String::new()
    };
    store_exec(
        env,
        &format!(
            "UPDATE leases SET wrapper_start = wrapper_start + 7, \
             child_start = child_start + 7{lock} WHERE job = 'j'"
        ),
    );
    let s = env.slot("j");
    assert_eq!(s.verdict.liveness, Liveness::Dead, "{s:?}");
    let reason = &s.verdict.reason;
    assert!(
        reason.contains(&format!(
            "pid {} start time differs (pid reused)",
            p.wrapper
        )),
        "{reason}"
    );

    let out = env.run(&["stop-due", "--all"]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(
        said.contains("not signalled") && said.contains("start time differs"),
        "{said}"
    );
    assert!(
        said.contains("signalled 0 in-flight job process(es)"),
        "{said}"
    );
    // Untouched: a TERM would have reached the child (marker) and ended the
    // wrapper well within this bound.
    assert_eq!(
        env.wait_exit(p.wrapper, Duration::from_secs(2)),
        None,
        "stop-due ended the process now owning the pid"
    );
    assert!(alive(p.child));
    assert!(
        !env.path("first.termed").exists(),
        "stop-due signalled a process it could not verify"
    );
}

/// A holder on another machine cannot be seen from here: unknown, so its
/// slot is kept while its lease runs (even though its pids are dead on this
/// machine), then freed once the lease lapses.
fn other_host_holder_is_left_to_its_lease(env: &TestEnv) {
    let p = start_pass(env, "j", "remote", "6s", &WEB2);
    let s = env.slot("j");
    let token = s.token;
    assert_eq!(s.holder.host, "web2", "{s:?}");
    assert_eq!(s.verdict.liveness, Liveness::Unknown, "{s:?}");
    assert_eq!(s.verdict.reason, "other host web2", "{s:?}");

    let rival = |ran: &str| {
        let out = env.run(&["run", "-E", "75", "j", "--", "touch", ran]);
        (out.status.code(), text(&out.stderr))
    };
    let (code, err) = rival("rival1.ran");
    assert_eq!(code, Some(75), "{err}");
    assert!(
        err.contains(&format!("held by web2:{}", p.wrapper))
            && err.contains("unknown: other host web2"),
        "{err}"
    );

    // Its processes die here, but this machine is not where it claims to
    // run: still unknown, still kept while the lease runs.
    kill_pass(env, p);
    let (code, err) = rival("rival2.ran");
    assert_eq!(
        code,
        Some(75),
        "an unknown holder lost its slot within its lease: {err}"
    );
    assert!(!env.path("rival2.ran").exists());

    assert!(
        wait_until(Duration::from_secs(20), || env
            .find_slot("j")
            .is_some_and(|s| s.state == State::Stale)),
        "never stale: {:?}",
        env.find_slot("j")
    );
    let (code, err) = rival("rival3.ran");
    assert_eq!(code, Some(0), "{err}");
    assert!(env.path("rival3.ran").exists());
    assert!(
        err.contains(&format!(
            "freed slot 0 (token {token}) of holder web2:{}: lease lapsed",
            p.wrapper
        )) && err.contains("(unknown: other host web2)"),
        "{err}"
    );
}

both_stores!(
    killed_holder_frees_at_once,
    orphaned_child_keeps_the_slot,
    reused_pid_is_dead_and_never_signalled,
    other_host_holder_is_left_to_its_lease,
);

/// This machine's host name, as a holder records it.
fn this_host() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// A SQLite store lives on one machine: a lease recorded by this host on an
/// earlier boot has no live holder, whatever its pids say now.
#[test]
fn sqlite_previous_boot_is_dead() {
    let env = TestEnv::sqlite();
    let host = this_host();
    start_pass(
        &env,
        "j",
        "old",
        "60s",
        &[("JOBRUN_BOOT_ID", "an-earlier-boot")],
    );
    let s = env.slot("j");
    assert_eq!(s.holder.host, host);
    assert_eq!(s.verdict.liveness, Liveness::Dead, "{s:?}");
    assert_eq!(s.verdict.reason, "recorded on a previous boot", "{s:?}");
    let out = env.run(&["run", "-E", "75", "j", "--", "true"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("dead: recorded on a previous boot"), "{err}");
}

/// A PostgreSQL store is shared by machines: another boot id may be another
/// machine, so the holder is unknown and keeps its slot within its lease.
#[test]
fn postgres_other_boot_is_unknown() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let host = this_host();
    start_pass(
        &env,
        "j",
        "old",
        "60s",
        &[("JOBRUN_BOOT_ID", "an-earlier-boot")],
    );
    let s = env.slot("j");
    assert_eq!(s.verdict.liveness, Liveness::Unknown, "{s:?}");
    assert_eq!(s.verdict.reason, format!("other host {host}"), "{s:?}");
    let out = env.run(&["run", "-E", "75", "j", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
}

/// A holder in another PID namespace on this kernel (a container): its pids
/// mean nothing here, but the lock its wrapper holds on a file beside the
/// SQLite store does. Alive while the wrapper lives; once the wrapper is
/// gone and only a child we cannot see is left, unknown.
#[test]
fn sqlite_other_pid_namespace_is_judged_by_the_kernel_lock() {
    let env = TestEnv::sqlite();
    let p = start_pass(&env, "j", "boxed", "60s", &[]);
    store_exec(
        &env,
        "UPDATE leases SET pid_ns = 'pid:[4026599999]' WHERE job = 'j'",
    );
    let s = env.slot("j");
    assert_eq!(s.verdict.liveness, Liveness::Alive, "{s:?}");
    assert_eq!(
        s.verdict.reason, "wrapper holds its lock (pid namespace pid:[4026599999])",
        "{s:?}"
    );
    let out = env.run(&["run", "-E", "75", "j", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));

    kill_pass(&env, p);
    let s = env.slot("j");
    assert_eq!(s.verdict.liveness, Liveness::Unknown, "{s:?}");
    assert!(
        s.verdict.reason.starts_with("wrapper's lock is free"),
        "{s:?}"
    );
}
