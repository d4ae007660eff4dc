//! Forged rows: anyone who can write the store (a group sharing a SQLite
//! store, a fleet's PostgreSQL role) can write any row. No row makes jobrun
//! unlink a file outside its holders directory, signal a process that is
//! not of the pass, hang on a file it did not make, or block a job for good
//! through a queue row whose process is not a jobrun wrapper.

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use jobrun::model::{Liveness, State};

use crate::support::procfs::{here, now_ms, start_of};
use crate::support::{
    alive, both_stores, start_pass, store_exec, text, wait_until, Kind, TempUser, TestEnv,
};

const BOUND: Duration = Duration::from_secs(20);

/// A process the test owns that is not jobrun: what a forged row names as
/// its wrapper and command. Its pid goes in a `.pid` file, so the env ends
/// it even when the test fails.
struct Stranger {
    child: Child,
    pid: i32,
    start: u64,
}

impl Stranger {
    fn start(env: &TestEnv) -> Stranger {
        let child = Command::new("sleep")
            .arg("1000")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        fs::write(env.path("stranger.pid"), pid.to_string()).unwrap();
        Stranger {
            child,
            pid,
            start: start_of(pid),
        }
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A forged lease of `job`, as a writer of the store could insert it.
fn forge_lease(
    env: &TestEnv,
    job: &str,
    pass_id: &str,
    wrapper: (i32, u64),
    child: Option<(i32, u64)>,
    expires_in_ms: i64,
) {
    let (host, boot, ns) = here();
    let now = now_ms();
    let (cpid, cstart) = match child {
        Some((p, s)) => (p.to_string(), s.to_string()),
        None => ("NULL".into(), "NULL".into()),
    };
    store_exec(
        env,
        &format!(
            "INSERT INTO jobs (name, next_token, created_ms) VALUES ('{job}', 100, 0) \
             ON CONFLICT (name) DO NOTHING; \
             INSERT INTO leases (job, slot, token, pass_id, host, boot_id, pid_ns, wrapper_pid, \
             wrapper_start, child_pid, child_start, argv, cwd, slots, lease_ms, max_hold_ms, \
             acquired_ms, renewed_ms, expires_ms) VALUES ('{job}', 0, 99, '{pass_id}', \
             '{host}', '{boot}', '{ns}', {}, {}, {cpid}, {cstart}, '[\"x\"]', '/', 1, 3000, \
             86400000, {now}, {now}, {})",
            wrapper.0,
            wrapper.1,
            now + expires_in_ms
        ),
    );
}

/// A forged queue row of `job`.
fn forge_waiter(env: &TestEnv, job: &str, pass_id: &str, wrapper: (i32, u64)) {
    let (host, boot, ns) = here();
    let now = now_ms();
    store_exec(
        env,
        &format!(
            "INSERT INTO jobs (name, next_token, created_ms) VALUES ('{job}', 100, 0) \
             ON CONFLICT (name) DO NOTHING; \
             INSERT INTO waiters (job, pass_id, host, boot_id, pid_ns, wrapper_pid, \
             wrapper_start, argv, cwd, slots, lease_ms, arrived_ms, renewed_ms, expires_ms) \
             VALUES ('{job}', '{pass_id}', '{host}', '{boot}', '{ns}', {}, {}, '[\"x\"]', '/', \
             1, 3000, {now}, {now}, {})",
            wrapper.0,
            wrapper.1,
            now + 86_400_000
        ),
    );
}

/// Rows naming a stranger (a live process that is not jobrun) as wrapper
/// and command, and rows of dead holders whose pass ids point outside the
/// holders directory: stop-due, clear-locks (forced or not) and run signal
/// nothing and unlink nothing of theirs.
fn forged_rows_make_jobrun_signal_and_unlink_nothing(env: &TestEnv) {
    assert_eq!(
        env.run(&["run", "setup", "--", "true"]).status.code(),
        Some(0)
    );
    let stranger = Stranger::start(env);
    let me = (stranger.pid, stranger.start);
    let gone = (4_194_000, 1);
    let victim = env.path("victim.lock");
    fs::write(&victim, "precious").unwrap();
    let holders = format!("{}.holders", env.db);
    if env.kind == Kind::Sqlite {
        fs::write(format!("{holders}/0000000000cc.lock"), "").unwrap();
    }
    forge_lease(env, "stranger", "0000000000aa", me, Some(me), 60_000);
    forge_lease(
        env,
        "stranger-lapsed",
        "0000000000ab",
        me,
        Some(me),
        -60_000,
    );
    forge_lease(env, "dead-path", "../victim", gone, None, -60_000);
    forge_lease(env, "dead-path2", "../../victim", gone, Some(gone), 60_000);
    forge_lease(env, "dead-planted", "0000000000cc", gone, None, -60_000);

    // The stranger is not the pass's wrapper: no evidence, the lease decides.
    let s = env.slot("stranger");
    assert_eq!(s.verdict.liveness, Liveness::Unknown, "{s:?}");
    for args in [
        &["stop-due", "--all", "--wait", "2s", "--kill-after", "1s"][..],
        &["stop-due", "stranger", "stranger-lapsed"][..],
        &["clear-locks", "--all"][..],
        &["run", "-E", "75", "stranger", "--", "true"][..],
        &["run", "-E", "75", "dead-path", "--", "true"][..],
        &["clear-locks", "--all", "--force"][..],
    ] {
        let out = env.run(args);
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            !said.contains(&format!("signalled wrapper pid {}", stranger.pid)),
            "{args:?}: {said}"
        );
        assert!(
            alive(stranger.pid),
            "{args:?} signalled the stranger: {said}"
        );
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious", "{args:?}");
    }
    if env.kind == Kind::Sqlite {
        // A lock file this user made, of a dead pass: that one may go.
        assert!(!std::path::Path::new(&format!("{holders}/0000000000cc.lock")).exists());
    }
}

/// Rows naming the wrapper and command of another, real pass (under a
/// pass id that is not theirs, or none jobrun could make), or naming that
/// wrapper as the command of a dead holder: stop-due, even with its KILL,
/// signals none of them, and the real pass runs on undisturbed.
fn rows_naming_another_pass_signal_nothing(env: &TestEnv) {
    let victim = start_pass(env, "victim", "victim", "60s", &[]);
    let start = |pid: i32| (pid, start_of(pid));
    let (w, c) = (start(victim.wrapper as i32), start(victim.child));
    forge_lease(env, "forged-invalid", "notapassid", w, Some(c), 60_000);
    forge_lease(env, "forged-other", "0000000000f6", w, Some(c), 60_000);
    forge_lease(
        env,
        "forged-dead",
        "0000000000f4",
        (4_194_000, 1),
        Some(w),
        60_000,
    );
    // The real pass's own id, with a stranger as its wrapper and command.
    let stranger = Stranger::start(env);
    let s = (stranger.pid, stranger.start);
    let real_id = env.slot("victim").pass_id;
    forge_lease(env, "forged-theirs", &real_id, s, Some(s), 60_000);
    for job in [
        "forged-invalid",
        "forged-other",
        "forged-dead",
        "forged-theirs",
    ] {
        let s = env.find_slot(job);
        assert_ne!(
            s.as_ref().map(|s| s.verdict.liveness),
            Some(Liveness::Alive),
            "{job}: {s:?}"
        );
    }
    let out = env.run(&[
        "stop-due",
        "forged-invalid",
        "forged-other",
        "forged-dead",
        "forged-theirs",
        "--kill-after",
        "1s",
        "--wait",
        "2s",
    ]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("signalled 0 in-flight"), "{said}");
    assert!(!said.contains("sent KILL"), "{said}");
    assert!(
        alive(w.0) && alive(c.0),
        "the real pass was signalled: {said}"
    );
    assert!(alive(stranger.pid), "the stranger was signalled: {said}");
    assert!(!env.path("victim.termed").exists(), "{said}");
    assert_eq!(env.slot("victim").state, State::Running);
    fs::write(env.path("victim.stop"), "").unwrap();
    assert_eq!(env.wait_exit(victim.wrapper, BOUND), Some(0));
}

/// A lock file another user planted in a shared holders directory, held
/// and naming a real pass's wrapper, proves nothing: the lock of a pass is
/// a file of its wrapper's user.
#[test]
fn a_planted_lock_naming_another_users_wrapper_proves_nothing() {
    let Some(user) = TempUser::create("lk") else {
        return;
    };
    let env = TestEnv::sqlite();
    let victim = start_pass(&env, "victim", "victim", "60s", &[]);
    let w = (victim.wrapper as i32, start_of(victim.wrapper as i32));
    let c = (victim.child, start_of(victim.child));
    let planted = std::path::PathBuf::from(format!("{}.holders/0000000000fa.lock", env.db));
    fs::write(&planted, format!("{} {}\n", w.0, w.1)).unwrap();
    user.owns(&planted);
    let held = fs::File::open(&planted).unwrap();
    // SAFETY: flock on a file the test opened.
    assert_eq!(
        unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&held),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        },
        0
    );
    forge_lease(&env, "planted", "0000000000fa", w, Some(c), 60_000);
    let out = env.run(&["stop-due", "planted", "--wait", "2s", "--kill-after", "1s"]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("signalled 0 in-flight"), "{said}");
    assert!(alive(w.0) && alive(c.0), "{said}");
    assert!(!env.path("victim.termed").exists(), "{said}");
    drop(held);
    fs::write(env.path("victim.stop"), "").unwrap();
    assert_eq!(env.wait_exit(victim.wrapper, BOUND), Some(0));
}

/// A row whose instants no calendar can write (year 10000 and on) is shown
/// raw: status and a skipping run never panic on it.
fn instants_past_year_9999_are_shown_raw(env: &TestEnv) {
    assert_eq!(
        env.run(&["run", "setup", "--", "true"]).status.code(),
        Some(0)
    );
    let stranger = Stranger::start(env);
    forge_lease(
        env,
        "future",
        "0000000000f9",
        (stranger.pid, stranger.start),
        None,
        60_000,
    );
    store_exec(
        env,
        "UPDATE leases SET acquired_ms = 300000000000000 WHERE job = 'future'",
    );
    for args in [
        &["status"][..],
        &["status", "--json"][..],
        &["run", "-E", "75", "future", "--", "true"][..],
    ] {
        let out = env.run(args);
        let code = out.status.code();
        assert!(
            code == Some(0) || code == Some(75),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!shown.contains("panicked"), "{args:?}: {shown}");
    }
    let out = env.run(&["status", "future"]);
    assert!(
        text(&out.stdout).contains("@300000000000000ms"),
        "{}",
        text(&out.stdout)
    );
}

/// A queue row naming pid 1 (or any process that is not a jobrun wrapper)
/// is a ghost: it blocks nothing, and clear-locks removes it.
fn a_forged_waiter_naming_pid_1_is_a_ghost(env: &TestEnv) {
    assert_eq!(env.run(&["run", "j", "--", "true"]).status.code(), Some(0));
    forge_waiter(env, "j", "0000000000dd", (1, start_of(1)));
    let out = env.run(&["run", "-E", "75", "j", "--", "touch", "ran"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(env.path("ran").exists(), "{err}");
    assert!(err.contains("removed queued pass 0000000000dd"), "{err}");
    forge_waiter(env, "j", "0000000000de", (1, start_of(1)));
    let out = env.run(&["clear-locks", "j"]);
    let said = text(&out.stdout);
    assert!(
        said.contains("0000000000de") && said.contains("removed"),
        "{said}"
    );
    assert_eq!(env.job("j").queue.length, 0);
}

/// A FIFO planted where a pass's lock file would be: status, clear-locks
/// and run neither hang on it nor take it for evidence.
#[test]
fn a_fifo_where_a_lock_file_would_be_hangs_nothing() {
    let env = TestEnv::sqlite();
    assert_eq!(
        env.run(&["run", "setup", "--", "true"]).status.code(),
        Some(0)
    );
    let stranger = Stranger::start(&env);
    let fifo = format!("{}.holders/0000000000ee.lock", env.db);
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    forge_lease(&env, "f", "0000000000ee", (4_194_000, 1), None, -60_000);
    forge_lease(
        &env,
        "g",
        "0000000000ee",
        (stranger.pid, stranger.start),
        None,
        60_000,
    );
    for (i, args) in [
        &["status"][..],
        &["clear-locks", "--all", "--dry-run"][..],
        &["run", "-E", "75", "f", "--", "true"][..],
        &["stop-due", "--all"][..],
        &["run", "-E", "75", "g", "--", "true"][..],
    ]
    .iter()
    .enumerate()
    {
        let log = format!("bounded{i}");
        let pid = env.start(&log, args);
        let code = env.wait_exit(pid, BOUND);
        assert!(code.is_some(), "{args:?} hung: {}", env.stderr_of(&log));
    }
    assert!(alive(stranger.pid));
    // The forged holder of `f` was dead: its slot was freed and the pass ran.
    assert!(wait_until(BOUND, || env.held("f") == 0));
}

both_stores!(
    forged_rows_make_jobrun_signal_and_unlink_nothing,
    rows_naming_another_pass_signal_nothing,
    instants_past_year_9999_are_shown_raw,
    a_forged_waiter_naming_pid_1_is_a_ghost,
);
