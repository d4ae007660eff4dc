//! What users trip over at the edges: a reader that goes away, a store path
//! with a typo, modes and permissions, names checked before anything is
//! changed, bytes that are not UTF-8, environment variables, usage hints.

use std::fs;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use jobrun::model::Outcome;

use crate::support::{
    alive, both_stores, exits, kill, script, wait_until, Jobrun, Kind, TestEnv, BIN,
};

/// A pipe whose reading end is already closed: writing to it fails with
/// EPIPE (and raises SIGPIPE).
fn closed_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills fds with two new descriptors we own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are ours; the reader is closed at once.
    unsafe {
        drop(OwnedFd::from_raw_fd(fds[0]));
        OwnedFd::from_raw_fd(fds[1])
    }
}

/// `jobrun status | head -1` and `jobrun history | head -1`: the reader
/// goes away, and the command ends quietly as `ls` does (killed by SIGPIPE,
/// 141 in the shell), never with a panic.
#[test]
fn operator_output_into_a_closed_pipe_ends_quietly() {
    let env = TestEnv::sqlite();
    for i in 0..30 {
        assert!(env
            .run(&["run", &format!("job{i}"), "--", "true"])
            .status
            .success());
    }
    for cmd in ["status", "history"] {
        let out = env
            .cmd(&[cmd])
            .stdout(Stdio::from(closed_pipe()))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{cmd}: {err}");
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{cmd}: {err}");
        assert!(err.is_empty(), "{cmd}: {err}");
    }
}

/// A wrapper whose stderr went away still runs its command to the end,
/// supervises it, releases and records the pass, though it has lines to say
/// (here: the command left a process in its group).
#[test]
fn a_pass_whose_stderr_is_gone_runs_to_completion() {
    let env = TestEnv::sqlite();
    let ran = env.path("ran");
    let child = script(
        &env,
        "child.sh",
        &format!("sleep 30 & touch {}; exit 0", ran.display()),
    );
    let out = env
        .cmd(&["run", "--kill-after", "2s", "lost.stderr", "--", &child])
        .stdout(Stdio::null())
        .stderr(Stdio::from(closed_pipe()))
        .status()
        .unwrap();
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(ran.exists());
    let h = env.history("lost.stderr");
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0].outcome, Outcome::Ok);
    assert_eq!(env.held("lost.stderr"), 0);
}

/// A wrapper started with stdin, stdout and stderr closed (a careless
/// init script: `jobrun ... <&- >&- 2>&-`) opens them on /dev/null first,
/// so its command finds them open as well: the command's writes and reads
/// succeed, and the pass is recorded ok, not failed by a "bad file
/// descriptor" the command never caused.
#[test]
fn a_pass_started_with_its_standard_descriptors_closed_gives_its_command_dev_null() {
    use std::os::unix::process::CommandExt;
    let env = TestEnv::sqlite();
    let child = script(&env, "child.sh", "echo out && cat && echo err >&2");
    assert!(env
        .run(&["run", "closed.fds", "--", "true"])
        .status
        .success());
    let mut c = env.cmd(&["run", "closed.fds", "--", &child]);
    // SAFETY: close(2) only, in the child before it executes jobrun.
    unsafe {
        c.pre_exec(|| {
            for fd in 0..3 {
                libc::close(fd);
            }
            Ok(())
        });
    }
    let out = c.status().unwrap();
    assert_eq!(out.code(), Some(0), "{out:?}");
    let h = env.history("closed.fds");
    assert_eq!(h.len(), 2, "{h:?}");
    assert!(h.iter().all(|p| p.outcome == Outcome::Ok), "{h:?}");
}

fn missing_store_is_refused_by_readers(env: &TestEnv) {
    // A store that does not exist (SQLite: in a directory that does not
    // exist either; PostgreSQL: a database without jobrun's schema).
    let db = match env.kind {
        Kind::Sqlite => env.path("typo/jobrun.db").display().to_string(),
        Kind::Postgres => env.db.clone(),
    };
    let cases: &[&[&str]] = &[
        &["stop-due", "--all", "--wait", "5s"],
        &["status"],
        &["status", "--json"],
        &["history"],
        &["clear-locks", "--all"],
        &["clear-locks", "--all", "--dry-run"],
        &["resume", "--all"],
        &["forget", "x"],
    ];
    let with_db = |args: &[&str]| Jobrun::new(env).args(args).env("JOBRUN_DB", &db);
    for args in cases {
        with_db(args)
            .code(125)
            .stderr_lines(1)
            .stderr_contains("no store at")
            .stderr_contains("--db")
            .stderr_contains("JOBRUN_DB")
            .stdout_empty()
            .run();
    }
    if env.kind == Kind::Sqlite {
        assert!(!env.path("typo").exists(), "a reader created the directory");
    }
    // Nothing was created: a reader still finds no store.
    with_db(&["status"])
        .code(125)
        .stderr_contains("no store at")
        .run();
    // A named store's missing directory is never made, not even by run
    // or pause --new (a typo there would start a new lock domain).
    if env.kind == Kind::Sqlite {
        for args in [&["run", "j", "--", "true"][..], &["pause", "--new", "j"]] {
            with_db(args)
                .refused()
                .stderr_contains("no directory")
                .stderr_contains("typo")
                .run();
        }
        assert!(!env.path("typo").exists(), "a directory was made");
        fs::create_dir(env.path("typo")).unwrap();
    }
    // run and pause --new create the store itself, and say so once.
    let made = with_db(&["pause", "--new", "j"]).stderr_contains("j: paused");
    match env.kind {
        Kind::Sqlite => made
            .stderr_lines(2)
            .stderr_contains("created a new store at")
            .run(),
        Kind::Postgres => made.stderr_lines(1).run(),
    };
    with_db(&["pause", "--new", "k"])
        .stderr_lines(1)
        .stderr_contains("k: paused")
        .run();
    with_db(&["status"]).stdout_contains("paused").run();
}

/// A file at the store path that is not an empty new file is never
/// written over: one byte, a bare header, text.
#[test]
fn a_short_or_foreign_file_is_never_made_a_store() {
    let env = TestEnv::sqlite();
    for (i, content) in [
        b"x".to_vec(),
        b"S".to_vec(),
        b"SQLite format 3\0".to_vec(),
        b"hello\n".to_vec(),
    ]
    .into_iter()
    .enumerate()
    {
        let p = env.path(&format!("bad{i}.db"));
        fs::write(&p, &content).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        for args in [
            &["run", "j", "--", "true"][..],
            &["pause", "j"],
            &["status"],
        ] {
            Jobrun::new(&env)
                .args(args)
                .env("JOBRUN_DB", &p)
                .refused()
                .stderr_contains("is corrupt or not a jobrun store")
                .run();
            assert_eq!(fs::read(&p).unwrap(), content, "{content:?} was rewritten");
        }
        assert!(!env.path(&format!("bad{i}.db-wal")).exists());
    }
}

#[test]
fn db_modes_that_let_others_write_are_refused() {
    let env = TestEnv::sqlite();
    for mode in ["0666", "0662", "0602"] {
        let db = env.path(&format!("m{mode}/store.db"));
        Jobrun::new(&env)
            .args(["--db-mode", mode, "run", "j", "--", "true"])
            .env("JOBRUN_DB", &db)
            .code(125)
            .stderr_contains("every user write")
            .run();
        assert!(!db.parent().unwrap().exists(), "{mode}: directory created");
    }
    Jobrun::new(&env)
        .args(["run", "j", "--", "true"])
        .env("JOBRUN_DB_MODE", "0660")
        .code(0)
        .run();
}

/// Run jobrun as nobody (the tests run as root).
fn as_nobody(env: &TestEnv, args: &[&str]) -> std::process::Output {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(args)
        .env("JOBRUN_DB", &env.db)
        .env("HOME", "/nonexistent")
        .current_dir("/");
    for (k, _) in std::env::vars() {
        if k.starts_with("JOBRUN_") && k != "JOBRUN_DB" {
            c.env_remove(k);
        }
    }
    c.output().unwrap()
}

/// A store the caller may not open: "permission denied", with the owner
/// and mode of the file, never "cannot create" or "unable to open".
#[test]
fn a_store_the_caller_may_not_open_says_permission_denied() {
    let env = TestEnv::sqlite();
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    assert!(env.run(&["run", "j", "--", "true"]).status.success());
    for args in [
        &["status"][..],
        &["run", "j", "--", "true"],
        &["pause", "j"],
    ] {
        let out = as_nobody(&env, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains("permission denied"), "{args:?}: {err}");
        assert!(err.contains("owner root (uid 0)"), "{args:?}: {err}");
        assert!(err.contains("mode 0600"), "{args:?}: {err}");
        assert!(!err.contains("cannot create"), "{err}");
        assert!(!err.contains("unable to open"), "{err}");
    }
    // A directory the caller may not enter: named, with its owner and mode.
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let out = as_nobody(&env, &["status"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("permission denied: directory"), "{err}");
    assert!(
        err.contains("mode 0700") && err.contains("cannot be entered"),
        "{err}"
    );
}

/// Refused with one line naming the bad name and why.
fn refuses_name(env: &TestEnv, args: &[&str], why: &str) {
    Jobrun::new(env)
        .args(args)
        .refused()
        .stderr_contains("invalid job name")
        .stderr_contains(why)
        .run();
}

fn every_name_is_checked_before_anything_changes(env: &TestEnv) {
    exits(env, 0, &["run", "seed", "--", "true"]);
    refuses_name(env, &["pause", "good", " bad"], "whitespace");
    let pauses = env
        .status()
        .jobs
        .iter()
        .filter(|j| j.paused.is_some())
        .count();
    assert_eq!(pauses, 0, "pause changed something before refusing");
    Jobrun::new(env)
        .args(["pause", "--new", "good"])
        .stderr_contains("good: paused")
        .run();
    refuses_name(env, &["resume", "good", "bad\n"], "control character");
    assert!(
        env.find_job("good").is_some_and(|j| j.paused.is_some()),
        "resume lifted a pause before refusing"
    );
    for args in [
        &["clear-locks", "good", " bad"][..],
        &["stop-due", "good", " bad"],
        &["status", "good", " bad"],
    ] {
        refuses_name(env, args, "whitespace");
    }
}

/// Command arguments that are not UTF-8 reach the command byte for byte,
/// as with `env` and `flock`.
fn non_utf8_arguments_pass_through(env: &TestEnv) {
    use std::ffi::OsStr;
    let name = OsStr::from_bytes(b"caf\xe9 \xff.txt");
    let out_file = env.path("args");
    let child = script(
        env,
        "child.sh",
        &format!("printf '%s' \"$1\" > {}", out_file.display()),
    );
    Jobrun::new(env)
        .args(["run", "bytes", "--", &child])
        .arg(name)
        .code(0)
        .run();
    assert_eq!(fs::read(&out_file).unwrap(), name.as_bytes());
    assert_eq!(env.history("bytes")[0].outcome, Outcome::Ok);
}

#[test]
fn a_bad_clock_skew_is_refused() {
    let env = TestEnv::sqlite();
    let skewed = |skew: &str| {
        Jobrun::new(&env)
            .args(["run", "j", "--", "true"])
            .env("JOBRUN_CLOCK_SKEW", skew)
    };
    for bad in ["garbage", "5 minutes please", "-", "1000000 years"] {
        skewed(bad)
            .code(125)
            .stderr_contains("JOBRUN_CLOCK_SKEW")
            .stderr_contains("like 90s")
            .run();
    }
    skewed("-5m").code(0).run();
}

/// The XDG spec: a relative XDG_STATE_HOME is ignored (the store goes to
/// ~/.local/state), never resolved against the working directory.
#[test]
fn a_relative_xdg_state_home_is_ignored() {
    let env = TestEnv::sqlite();
    let home = env.path("home");
    let cwd = env.path("cwd");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&cwd).unwrap();
    for d in [env.dir.path(), &home, &cwd] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o777)).unwrap();
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(["run", "xdg", "--", "true"])
        .env_remove("JOBRUN_DB")
        .env("XDG_STATE_HOME", "state")
        .env("HOME", &home)
        .current_dir(&cwd)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        !cwd.join("state").exists(),
        "used the relative XDG_STATE_HOME"
    );
    assert!(Path::new(&home.join(".local/state/jobrun/jobrun.db")).exists());
}

fn quiet_from_the_environment(env: &TestEnv) {
    let ready = env.path("hold.ready");
    let child = script(
        env,
        "hold.sh",
        &format!("touch {}; exec sleep 30", ready.display()),
    );
    let pid = env.start("holder", &["run", "q", "--", &child]);
    assert!(env.wait_for_file("hold.ready", Duration::from_secs(10)));
    let quiet = |value: &str| {
        Jobrun::new(env)
            .args(["run", "q", "--", "true"])
            .env("JOBRUN_QUIET", value)
    };
    quiet("1").code(0).stderr_empty().run();
    quiet("false").stderr_contains("already running").run();
    kill(pid as i32, libc::SIGTERM);
    assert!(wait_until(Duration::from_secs(10), || !alive(pid as i32)));
}

#[test]
fn a_command_without_the_separator_gets_a_hint() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env)
        .args(["run", "foo", "true"])
        .code(125)
        .stderr_lines(1)
        .stderr_contains("put -- before the command: jobrun run foo -- true")
        .run();
    Jobrun::new(&env)
        .args(["run", "--wait", "5s", "foo", "echo", "a b"])
        .code(125)
        .stderr_lines(1)
        .stderr_contains("jobrun run --wait 5s foo -- echo 'a b'")
        .run();
}

both_stores!(
    missing_store_is_refused_by_readers,
    every_name_is_checked_before_anything_changes,
    non_utf8_arguments_pass_through,
    quiet_from_the_environment,
);
