//! A release wakes only the waiters it lets in, head first: never the whole
//! queue (which then stampeded the store). Waiters are SIGSTOPped so that a
//! wake-up written to their FIFO stays there for the test to see.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

use crate::support::{both_stores, held_child, kill, wait_until, Kind, TestEnv};

/// Where the waiters of this env keep their wake FIFOs.
fn wake_dir(env: &TestEnv) -> PathBuf {
    match env.kind {
        Kind::Sqlite => env.path("store.db.holders"),
        Kind::Postgres => env.path("run/jobrun-postgres.wake.d"),
    }
}

fn vars(env: &TestEnv) -> Vec<(&'static str, String)> {
    let run = env.path("run");
    fs::create_dir_all(&run).unwrap();
    fs::set_permissions(&run, fs::Permissions::from_mode(0o700)).unwrap();
    vec![("XDG_RUNTIME_DIR", run.to_string_lossy().into_owned())]
}

/// The wake-ups waiting unread in a FIFO (its owner is stopped).
fn unread(path: &std::path::Path) -> usize {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut buf = [0u8; 64];
    match f.read(&mut buf) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => panic!("{e}"),
    }
}

/// A holder of job `j` (one slot) and `n` waiters queued in order: the
/// holder's pid and the waiters' (pid, pass id).
fn queue_of(env: &TestEnv, n: usize) -> (u32, Vec<(u32, String)>) {
    let vars = vars(env);
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let holder = held_child(env, "h", "");
    let h = env.start_with("holder", &["run", "j", "--", &holder], &vars);
    assert!(env.wait_for_file("h.ready", Duration::from_secs(10)));
    let mut waiters = vec![];
    for i in 0..n {
        let ran = env.path(&format!("w{i}.ran"));
        let touch = format!("touch {}", ran.display());
        let pid = env.start_with(
            &format!("w{i}"),
            &["run", "--wait", "60s", "j", "--", "sh", "-c", &touch],
            &vars,
        );
        assert!(wait_until(Duration::from_secs(10), || {
            env.find_job("j").is_some_and(|j| j.queue.length == i + 1)
        }));
        let pass = env.job("j").queue.waiters[i].pass_id.clone();
        assert!(wake_dir(env).join(format!("{pass}.wake")).exists());
        waiters.push((pid, pass));
    }
    (h, waiters)
}

fn release(env: &TestEnv, holder: u32) {
    fs::write(env.path("h.done"), "").unwrap();
    assert_eq!(
        env.wait_exit(holder, Duration::from_secs(10)),
        Some(0),
        "{}",
        env.stderr_of("holder")
    );
}

/// Release the holder, then how many wake-ups each waiter has not read.
fn woken_by_release(env: &TestEnv, holder: u32, waiters: &[(u32, String)]) -> Vec<usize> {
    release(env, holder);
    let dir = wake_dir(env);
    waiters
        .iter()
        .map(|(_, pass)| unread(&dir.join(format!("{pass}.wake"))))
        .collect()
}

fn drain(env: &TestEnv, waiters: &[(u32, String)]) {
    for (pid, _) in waiters {
        kill(*pid as i32, libc::SIGCONT);
    }
    for (i, (pid, _)) in waiters.iter().enumerate() {
        assert_eq!(
            env.wait_exit(*pid, Duration::from_secs(30)),
            Some(0),
            "{}",
            env.stderr_of(&format!("w{i}"))
        );
    }
}

fn a_release_wakes_only_the_head(env: &TestEnv) {
    let (h, waiters) = queue_of(env, 4);
    for (pid, _) in &waiters {
        kill(*pid as i32, libc::SIGSTOP);
    }
    let woken = woken_by_release(env, h, &waiters);
    assert!(woken[0] >= 1, "the head was not woken: {woken:?}");
    assert_eq!(&woken[1..], &[0, 0, 0], "waiters behind were woken");
    drain(env, &waiters);
}

/// A ghost at the head (SIGKILLed: its FIFO has no reader) is passed over:
/// the next waiter is woken, and it removes the ghost and its FIFO.
fn a_ghost_at_the_head_is_passed_over(env: &TestEnv) {
    let (h, mut waiters) = queue_of(env, 3);
    let (ghost, ghost_pass) = waiters.remove(0);
    // The others stopped first: none of them can remove the ghost before
    // the release.
    for (pid, _) in &waiters {
        kill(*pid as i32, libc::SIGSTOP);
    }
    kill(ghost as i32, libc::SIGKILL);
    assert_eq!(env.wait_exit(ghost, Duration::from_secs(10)), Some(137));
    let woken = woken_by_release(env, h, &waiters);
    assert_eq!(woken, [1, 0], "not the next live waiter: {woken:?}");
    drain(env, &waiters);
    assert!(env.path("w1.ran").exists() && env.path("w2.ran").exists());
    // The ghost's wake FIFO went with its queue row.
    assert!(!wake_dir(env).join(format!("{ghost_pass}.wake")).exists());
}

both_stores!(
    a_release_wakes_only_the_head,
    a_ghost_at_the_head_is_passed_over
);
