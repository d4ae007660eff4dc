//! jobrun as installs build it (`scripts/build-release`, and `scripts/test`
//! here): `jobrun` without the PostgreSQL store hands that store's commands
//! to the `jobrun-pg` beside it, in its own process. Every PostgreSQL test
//! goes through that hand-over; these prove what only it could get wrong:
//! the pass stays the process its caller started, the command never sees
//! the hand-over, and a missing or odd `jobrun-pg` is one line, never a
//! pass run half-way or a loop. A jobrun built with the store (`cargo
//! test`'s default features) serves both itself: those tests say so and
//! stop.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::support::{held_child, script, text, wait_until, without_jobrun_env, TestEnv, BIN};

const HANDED_ENV: &str = "JOBRUN_HANDED_OVER";

/// Whether the jobrun under test hands PostgreSQL over (built without it).
fn hands_over() -> bool {
    if cfg!(feature = "postgres") {
        eprintln!("skipped: this jobrun is built with the PostgreSQL store and hands nothing over");
        return false;
    }
    true
}

/// A copy of the jobrun under test in `dir`, named `name`.
fn copy_as(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    fs::copy(BIN, &to).unwrap();
    fs::set_permissions(&to, fs::Permissions::from_mode(0o755)).unwrap();
    to
}

/// A server nobody listens on: nothing here may get as far as connecting.
const NOWHERE: &str = "postgres://nobody@127.0.0.1:1/jobrun";

#[test]
fn without_jobrun_pg_beside_it_a_postgres_store_is_one_line() {
    if !hands_over() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lone = copy_as(dir.path(), "jobrun");
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let out = run(
        &lone,
        &["run", "--db", NOWHERE, "j", "--", "sh", "-c", &touch],
        &[],
    );
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains(&format!(
            "this jobrun ({}) is built without the PostgreSQL store and finds no jobrun-pg beside it",
            lone.display()
        )) && said.contains("scripts/build-release"),
        "{said}"
    );
    assert!(!marker.exists(), "the command ran: {said}");
    // A monitoring plugin answers UNKNOWN, on stdout.
    let out = run(&lone, &["check", "--db", NOWHERE], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("JOBRUN UNKNOWN") && text(&out.stdout).contains("jobrun-pg"),
        "{}",
        text(&out.stdout)
    );
    // The same copy serves a SQLite store itself.
    let db = dir.path().join("s.db");
    let out = run(
        &lone,
        &[
            "run",
            "--db",
            db.to_str().unwrap(),
            "j",
            "--",
            "sh",
            "-c",
            &touch,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(marker.exists());
}

/// `bin ARGS` with `env` and no JOBRUN_* setting from the caller, to its
/// end, or killed and failed after 20 s (a hand-over in a loop never ends
/// by itself).
fn run(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = without_jobrun_env(bin)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if !wait_until(Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    }) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{} {args:?} did not end within 20 s", bin.display());
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_jobrun_pg_built_without_the_store_never_hands_over_again() {
    if !hands_over() {
        return;
    }
    // A copy named jobrun-pg, and a link to jobrun named so.
    let copied = tempfile::tempdir().unwrap();
    let linked = tempfile::tempdir().unwrap();
    let first = copy_as(copied.path(), "jobrun");
    let second = copy_as(copied.path(), "jobrun-pg");
    let lean = copy_as(linked.path(), "jobrun");
    std::os::unix::fs::symlink("jobrun", linked.path().join("jobrun-pg")).unwrap();
    for (bin, named) in [(&first, &second), (&second, &second), (&lean, &lean)] {
        let out = run(bin, &["status", "--db", NOWHERE], &[]);
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{said}");
        assert_eq!(
            said.trim_end(),
            format!(
                "jobrun: {} is built without the PostgreSQL store, and so is the jobrun-pg \
                 beside jobrun: build the two with scripts/build-release",
                named.display()
            ),
            "{}",
            bin.display()
        );
    }
}

#[test]
fn jobrun_pg_serves_a_hand_over_from_another_version_and_says_so() {
    if !hands_over() {
        return;
    }
    let pg = Path::new(BIN).with_file_name("jobrun-pg");
    assert!(
        pg.exists(),
        "no {} (scripts/test builds it: cargo build --bin jobrun-pg)",
        pg.display()
    );
    let env = TestEnv::sqlite();
    let seen = env.path("env.txt");
    let out = run(
        &pg,
        &[
            "run",
            "--db",
            &env.db,
            "j",
            "--",
            "sh",
            "-c",
            &format!("env > {}", seen.display()),
        ],
        &[(HANDED_ENV, "0.0.1 (git 000000000000)")],
    );
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("serves the PostgreSQL store for jobrun 0.0.1 (git 000000000000): install the two from one build"),
        "{said}"
    );
    assert!(
        !fs::read_to_string(&seen).unwrap().contains(HANDED_ENV),
        "the command saw the hand-over"
    );
}

/// On a real server: the pass is the process its caller started (the
/// holder's pid, which `stop-due` and `clear-locks` verify, is that pid),
/// and the command's environment is the caller's.
#[test]
fn a_handed_over_pass_keeps_its_pid_and_the_callers_environment() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let child = held_child(&env, "child", "");
    let seen = env.path("env.txt");
    let cmd = script(
        &env,
        "cmd.sh",
        &format!("env > {}; exec {child}", seen.display()),
    );
    let pid = env.start_with("pass", &["run", "j", "--", &cmd], &[("MARK", "from-cron")]);
    assert!(
        env.wait_for_file("child.ready", Duration::from_secs(10)),
        "{}",
        env.stderr_of("pass")
    );
    assert_eq!(env.slot("j").holder.pid, pid as i32);
    let seen = fs::read_to_string(&seen).unwrap();
    assert!(
        seen.contains("MARK=from-cron") && !seen.contains(HANDED_ENV),
        "{seen}"
    );
    // Handed over by its own build: nothing to say.
    assert_eq!(env.stderr_of("pass"), "");
    fs::write(env.path("child.done"), "").unwrap();
    assert_eq!(
        env.wait_exit(pid, Duration::from_secs(10)),
        Some(0),
        "{}",
        env.stderr_of("pass")
    );
}
