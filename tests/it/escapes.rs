//! What escapes a pass, and what jobrun cannot verify, is never taken for
//! the pass: a daemon that left with `setsid` (it still carries the pass's
//! id) is no member, a running wrapper that cannot be verified is unknown
//! (never "gone", so its command is never taken for an orphan), a live
//! waiter is never removed, and a holder in another time namespace (whose
//! boot clock is offset) is never judged dead on that clock.

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use jobrun::model::{Liveness, Outcome, State};

use crate::support::procfs::{here, now_ms, session_of, start_of};
use crate::support::{
    alive, both_stores, script, start_pass, store_exec, text, wait_until, without_jobrun_env, Kind,
    TestEnv, BIN,
};

const BOUND: Duration = Duration::from_secs(20);

/// A pid no process has.
const GONE: (i32, u64) = (4_194_000, 1);

/// A lease of `job` as a writer of the store could insert it: wrapper and
/// command as given, the wrapper's session as given (`None`: NULL, as an
/// older jobrun wrote it), a lease running another minute.
fn forge_lease(
    env: &TestEnv,
    job: &str,
    pass_id: &str,
    wrapper: (i32, u64),
    child: (i32, u64),
    session: Option<i32>,
) {
    let (host, boot, ns) = here();
    let now = now_ms();
    let sid = session.map_or("NULL".to_string(), |s| s.to_string());
    store_exec(
        env,
        &format!(
            "INSERT INTO jobs (name, next_token, created_ms) VALUES ('{job}', 100, 0) \
             ON CONFLICT (name) DO NOTHING; \
             INSERT INTO leases (job, slot, token, pass_id, host, boot_id, pid_ns, wrapper_pid, \
             wrapper_start, child_pid, child_start, wrapper_sid, argv, cwd, slots, lease_ms, \
             max_hold_ms, acquired_ms, renewed_ms, expires_ms) VALUES ('{job}', 0, 99, \
             '{pass_id}', '{host}', '{boot}', '{ns}', {}, {}, {}, {}, {sid}, '[\"x\"]', '/', 1, \
             60000, 86400000, {now}, {now}, {})",
            wrapper.0,
            wrapper.1,
            child.0,
            child.1,
            now + 60_000
        ),
    );
}

/// stop-due, as an upgrade script runs it, with and without escalation;
/// everything it said.
fn stop_due_all(env: &TestEnv) -> Vec<String> {
    [
        &["stop-due", "--all"][..],
        &["stop-due", "--all", "--wait", "2s", "--kill-after", "1s"][..],
    ]
    .iter()
    .map(|args| {
        let out = env.run(args);
        format!("{args:?}: {}{}", text(&out.stdout), text(&out.stderr))
    })
    .collect()
}

/// A pass ran `setsid -f` and ended ok: its daemon carries the pass's id
/// for life, and the pass id is in history. A row naming the daemon as the
/// command of a dead wrapper (whatever session it records) is no orphaned
/// pass: status does not call it orphaned, and stop-due, with its KILL,
/// signals nothing.
fn a_setsid_daemon_named_by_a_forged_row_is_no_pass(env: &TestEnv) {
    let daemon = script(
        env,
        "daemon.sh",
        "setsid -f sh -c 'echo $$ > daemon.pid.tmp && mv daemon.pid.tmp daemon.pid; \
         exec sleep 1000' < /dev/null > /dev/null 2>&1\n\
         # The pass ends once the daemon has left its group: until its\n\
         # setsid, the forked daemon is still a member, and the end of the\n\
         # pass would TERM it with the group's other leftovers.\n\
         i=0; while [ ! -e daemon.pid ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done",
    );
    assert_eq!(
        env.run(&["run", "setup", "--", &daemon]).status.code(),
        Some(0)
    );
    assert!(env.wait_for_file("daemon.pid", BOUND), "no daemon started");
    let d = env.pid_in("daemon.pid");
    let pass_id = env.history("setup")[0].pass_id.clone();
    let environ = fs::read(format!("/proc/{d}/environ")).unwrap();
    assert!(
        text(&environ).contains(&format!("JOBRUN_PASS={pass_id}")),
        "the daemon does not carry the pass's id"
    );
    let named = (d, start_of(d));
    for (job, session) in [("escaped", None), ("escaped-sid", Some(d))] {
        forge_lease(env, job, &pass_id, GONE, named, session);
        let s = env.slot(job);
        assert_ne!(s.state, State::Orphaned, "{job}: {s:?}");
        assert_ne!(s.verdict.liveness, Liveness::Alive, "{job}: {s:?}");
    }
    for said in stop_due_all(env) {
        assert!(said.contains("signalled 0 in-flight"), "{said}");
        assert!(!said.contains("sent KILL"), "{said}");
        assert!(alive(d), "the daemon was signalled: {said}");
    }
}

/// A row of store S naming a live pass of store T (its wrapper, its command,
/// its real pass id): the wrapper holds no lock of S (SQLite), its command
/// carries T's stamp (PostgreSQL), but it runs, so it is not gone and its
/// command is no orphan. stop-due on S signals nothing; the pass of T runs
/// on and is recorded as it really ends.
fn a_live_pass_of_another_store_is_unknown_never_gone(s: &TestEnv) {
    let t = match s.kind {
        Kind::Sqlite => TestEnv::sqlite(),
        Kind::Postgres => TestEnv::postgres().expect("a server"),
    };
    let p = start_pass(&t, "theirs", "theirs", "60s", &[]);
    let real = t.slot("theirs");
    let w = (p.wrapper as i32, start_of(p.wrapper as i32));
    let c = (p.child, start_of(p.child));
    assert_eq!(
        s.run(&["run", "setup", "--", "true"]).status.code(),
        Some(0)
    );
    let sid = session_of(w.0);
    forge_lease(s, "forged", &real.pass_id, w, c, Some(sid));
    let slot = s.slot("forged");
    assert_eq!(slot.verdict.liveness, Liveness::Unknown, "{slot:?}");
    assert_eq!(slot.state, State::Running, "{slot:?}");
    assert!(!slot.verdict.reason.contains("gone"), "{slot:?}");
    for said in stop_due_all(s) {
        assert!(said.contains("signalled 0 in-flight"), "{said}");
        assert!(alive(p.child), "{said}");
        assert!(!t.path("theirs.termed").exists(), "{said}");
    }
    fs::write(t.path("theirs.stop"), "").unwrap();
    assert_eq!(t.wait_exit(p.wrapper, BOUND), Some(0));
    let ended: Vec<Outcome> = t.history("theirs").into_iter().map(|r| r.outcome).collect();
    assert_eq!(ended, [Outcome::Ok]);
}

/// The lock file of a real pass, deleted under it (a tmp cleaner, a member
/// of a group store): status says so, nothing signals the pass or takes its
/// slot, and the pass is recorded as it really ends.
#[test]
fn a_pass_whose_lock_file_vanished_is_reported_and_left_alone() {
    let env = TestEnv::sqlite();
    let p = start_pass(&env, "j", "first", "60s", &[]);
    let id = env.slot("j").pass_id;
    fs::remove_file(format!("{}.holders/{id}.lock", env.db)).unwrap();
    let s = env.slot("j");
    assert_eq!(s.verdict.liveness, Liveness::Unknown, "{s:?}");
    assert_eq!(s.state, State::Running, "{s:?}");
    assert!(
        s.verdict.reason.contains(&format!(
            "lock file missing; wrapper pid {} running",
            p.wrapper
        )),
        "{s:?}"
    );
    for said in stop_due_all(&env) {
        assert!(said.contains("signalled 0 in-flight"), "{said}");
        assert!(said.contains("lock file missing"), "{said}");
        assert!(!env.path("first.termed").exists(), "{said}");
    }
    let out = env.run(&["clear-locks", "--all"]);
    assert!(
        text(&out.stdout).contains("cleared 0"),
        "{}",
        text(&out.stdout)
    );
    let out = env.run(&["run", "-E", "75", "j", "--", "touch", "rival.ran"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(!env.path("rival.ran").exists());
    fs::write(env.path("first.stop"), "").unwrap();
    assert_eq!(env.wait_exit(p.wrapper, BOUND), Some(0));
    let ended: Vec<Outcome> = env
        .history("j")
        .into_iter()
        .filter(|r| r.pass_id == id)
        .map(|r| r.outcome)
        .collect();
    assert_eq!(ended, [Outcome::Ok]);
}

/// A live waiter is never removed, not even by `clear-locks --force`, and
/// not when its lock file is gone (SQLite): status says the lock file is
/// missing, and the waiter runs once the slot is free.
fn a_live_waiter_is_never_removed(env: &TestEnv) {
    let p = start_pass(env, "w", "holder", "60s", &[]);
    let waiter = env.start(
        "waiter",
        &[
            "run", "--wait", "60s", "--lease", "60s", "w", "--", "touch", "waited",
        ],
    );
    assert!(
        wait_until(BOUND, || env.job("w").queue.length == 1),
        "the waiter never queued: {}",
        env.stderr_of("waiter")
    );
    let id = env.job("w").queue.waiters[0].pass_id.clone();
    if env.kind == Kind::Sqlite {
        fs::remove_file(format!("{}.holders/{id}.lock", env.db)).unwrap();
        let v = &env.job("w").queue.waiters[0].verdict;
        assert_ne!(v.liveness, Liveness::Dead, "{v:?}");
        assert!(v.reason.contains("lock file missing"), "{v:?}");
    }
    for args in [
        &["clear-locks", "w"][..],
        &["clear-locks", "--all", "--force"],
    ] {
        let out = env.run(args);
        let said = text(&out.stdout);
        assert!(!said.contains("removed from the queue"), "{args:?}: {said}");
        assert!(!said.contains("ghost"), "{args:?}: {said}");
    }
    // Forced over its live holder, the slot is free: the waiter takes it.
    assert_eq!(
        env.wait_exit(waiter, BOUND),
        Some(0),
        "{}",
        env.stderr_of("waiter")
    );
    assert!(env.path("waited").exists());
    fs::write(env.path("holder.stop"), "").unwrap();
    assert!(env.wait_exit(p.wrapper, BOUND).is_some());
    assert!(env
        .history("w")
        .iter()
        .any(|r| r.pass_id == id && r.outcome == Outcome::Ok));
}

/// How far the boot clock of the time namespaces below is offset: past the
/// default max hold (24 h), so that a lease aged on it looks lapsed and
/// forfeited.
const BOOTTIME_OFFSET: &str = "200000";

/// `jobrun ARGS` in a new time namespace whose boot clock is offset (as a
/// CRIU restore or a sandbox does), against the env's store.
fn in_time_namespace(env: &TestEnv, args: &[&str]) -> Command {
    let mut c = without_jobrun_env("unshare");
    c.args([
        "--time",
        "--boottime",
        BOOTTIME_OFFSET,
        "--fork",
        "--kill-child",
        BIN,
    ])
    .args(args)
    .env("JOBRUN_DB", &env.db)
    .current_dir(env.dir.path())
    .stdin(Stdio::null());
    c
}

/// Whether this kernel lets the test make a time namespace (root, Linux
/// 5.6 and later); said when it does not.
fn time_namespaces() -> bool {
    let ok = Command::new("unshare")
        .args(["--time", "--boottime", "1", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: this process cannot make a time namespace (unshare --time)");
    }
    ok
}

/// A child the test started under `unshare`, ended by pid when dropped.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A holder and a judge on one boot in two time namespaces: the judge sees
/// the holder's start times and boot-clock stamps offset. It never judges
/// the live holder dead nor its lease lapsed or forfeited, and a second
/// pass does not take its slot; either way round.
fn another_time_namespace_is_another_clock(env: &TestEnv) {
    if !time_namespaces() {
        return;
    }
    // The holder here, the judge in an offset time namespace.
    let p = start_pass(env, "t", "here", "60s", &[]);
    let status = in_time_namespace(env, &["status", "t", "--json"])
        .output()
        .unwrap();
    let shown: jobrun::model::StatusReport = serde_json::from_slice(&status.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&status.stderr)));
    let s = &shown.jobs[0].slots[0];
    assert_ne!(s.verdict.liveness, Liveness::Dead, "{s:?}");
    assert!(s.expires_in_ms > 0, "{s:?}");
    for args in [
        &["run", "-E", "75", "t", "--", "touch", "rival.ran"][..],
        &["clear-locks", "--all"][..],
        &["stop-due", "--all"][..],
    ] {
        let out = in_time_namespace(env, args).output().unwrap();
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!env.path("rival.ran").exists(), "{args:?}: {said}");
        assert!(!env.path("here.termed").exists(), "{args:?}: {said}");
        assert_eq!(env.held("t"), 1, "{args:?}: {said}");
    }
    fs::write(env.path("here.stop"), "").unwrap();
    assert_eq!(env.wait_exit(p.wrapper, BOUND), Some(0));

    // The holder in the offset time namespace, the judge here.
    let child = script(
        env,
        "there.sh",
        "echo $$ > there.pid.tmp && mv there.pid.tmp there.pid\n\
         while [ ! -e there.stop ]; do sleep 0.05; done",
    );
    let there = Started(
        in_time_namespace(env, &["run", "--lease", "60s", "u", "--", &child])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(env.wait_for_file("there.pid", BOUND), "the pass never ran");
    let c = env.pid_in("there.pid");
    assert!(wait_until(BOUND, || env
        .find_slot("u")
        .is_some_and(|s| s.holder.child_pid == Some(c))));
    let s = env.slot("u");
    assert_ne!(s.verdict.liveness, Liveness::Dead, "{s:?}");
    assert!(s.expires_in_ms > 0, "{s:?}");
    let out = env.run(&["run", "-E", "75", "u", "--", "touch", "rival.ran"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(!env.path("rival.ran").exists());
    let out = env.run(&["stop-due", "--all"]);
    assert!(
        text(&out.stdout).contains("another time namespace"),
        "{}",
        text(&out.stdout)
    );
    fs::write(env.path("there.stop"), "").unwrap();
    assert!(wait_until(BOUND, || env.held("u") == 0));
    drop(there);
}

both_stores!(
    a_setsid_daemon_named_by_a_forged_row_is_no_pass,
    a_live_pass_of_another_store_is_unknown_never_gone,
    a_live_waiter_is_never_removed,
    another_time_namespace_is_another_clock,
);
