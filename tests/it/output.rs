//! `run --output quiet-unless-failed` (like chronic): the command's output
//! spooled in the order written, printed only when the pass did not end
//! ok, bounded, its spool private and removed; and `--keep-output`: the
//! tail of a pass that ended badly kept with its history row, shown by
//! `history --show`, removed with its row.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{alive, both_stores, dump_store, exits, kill, Jobrun, TestEnv};

const QUIET: [&str; 2] = ["--output", "quiet-unless-failed"];

/// A private runtime directory for the env's passes: their spools go to
/// `<it>/jobrun-output.d`.
fn runtime(env: &TestEnv) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = env.path("run");
    if !dir.exists() {
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    dir
}

fn spool_dir(env: &TestEnv) -> PathBuf {
    runtime(env).join("jobrun-output.d")
}

/// The spools in `dir` (none when it does not exist).
fn spools(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(_) => vec![],
    }
}

/// `jobrun run JOB --output quiet-unless-failed ARGS -- sh -c BODY`, with
/// the env's runtime directory.
fn quiet<'a>(env: &'a TestEnv, job: &str, args: &[&str], body: &str) -> Jobrun<'a> {
    Jobrun::new(env)
        .env("XDG_RUNTIME_DIR", runtime(env))
        .args(["run", job])
        .args(QUIET)
        .args(args)
        .args(["--", "sh", "-c", body])
}

/// The pass id of the job's newest pass.
fn last_pass(env: &TestEnv, job: &str) -> String {
    env.history(job)[0].pass_id.clone()
}

/// How many passes' output the store keeps.
fn kept_rows(env: &TestEnv) -> usize {
    let dump = dump_store(env);
    let line = dump
        .iter()
        .find(|l| l.starts_with("table pass_output:"))
        .unwrap_or_else(|| panic!("no pass_output table in {dump:?}"));
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

fn an_ok_pass_is_silent_and_leaves_no_spool(env: &TestEnv) {
    quiet(env, "j", &[], "echo to stdout; echo to stderr >&2")
        .stdout_empty()
        .run();
    // The environment twin says the same.
    Jobrun::new(env)
        .env("XDG_RUNTIME_DIR", runtime(env))
        .env("JOBRUN_OUTPUT", "quiet-unless-failed")
        .args(["run", "j", "--", "sh", "-c", "echo hello"])
        .stdout_empty()
        .run();
    assert_eq!(spools(&spool_dir(env)), Vec::<PathBuf>::new());
    // Nothing is kept of a pass that ended ok.
    let pass = last_pass(env, "j");
    Jobrun::new(env)
        .args(["history", "--show", &pass])
        .code(1)
        .stderr_lines(1)
        .stderr_contains(format!("no output kept for pass {pass}"))
        .run();
    // The default is unchanged: the command writes to jobrun's own.
    Jobrun::new(env)
        .args(["run", "j", "--", "sh", "-c", "echo plain; echo err >&2"])
        .stdout_contains("plain")
        .stderr_contains("err")
        .run();
}

fn a_failed_pass_prints_its_output_in_order_and_removes_the_spool(env: &TestEnv) {
    // stdout and stderr interleaved, each line flushed as written: they
    // come out as they were written, all on jobrun's stdout.
    let ran = quiet(
        env,
        "j",
        &[],
        "echo out1; echo err1 >&2; echo out2; echo err2 >&2; echo out3; exit 3",
    )
    .code(3)
    .run();
    assert_eq!(ran.stdout, "out1\nerr1\nout2\nerr2\nout3\n");
    assert_eq!(spools(&spool_dir(env)), Vec::<PathBuf>::new());
    assert_eq!(env.history("j")[0].outcome.as_str(), "failed");
}

/// The spool is mode 0600 whatever --db-mode says, and removed when the
/// command was killed by SIGKILL (its output printed: it ended badly).
fn a_killed_command_still_prints_and_removes_its_spool(env: &TestEnv) {
    let pid = env.path("cmd.pid");
    let ready = env.path("cmd.ready");
    let body = format!(
        "echo $$ > {}; echo before the kill; touch {}; exec sleep 60",
        pid.display(),
        ready.display()
    );
    let started = env.start_with(
        "w",
        &[
            "--db-mode",
            "0660",
            "run",
            "j",
            QUIET[0],
            QUIET[1],
            "--",
            "sh",
            "-c",
            &body,
        ],
        &[("XDG_RUNTIME_DIR", runtime(env).to_str().unwrap())],
    );
    assert!(env.wait_for_file("cmd.ready", Duration::from_secs(10)));
    let held = spools(&spool_dir(env));
    assert_eq!(held.len(), 1, "{held:?}");
    let mode = std::fs::metadata(&held[0]).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let cmd: i32 = std::fs::read_to_string(&pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill(cmd, libc::SIGKILL);
    assert_eq!(env.wait_exit(started, Duration::from_secs(10)), Some(137));
    assert_eq!(env.stdout_of("w"), "before the kill\n");
    assert!(!held[0].exists());
}

/// A command that starts a daemon (a process that leaves its group and
/// keeps the pipe open) still ends its pass when its group is gone, with
/// what it wrote printed.
fn a_daemon_holding_the_pipe_does_not_hold_the_pass(env: &TestEnv) {
    let daemon_pid = env.path("daemon.pid");
    // The command ends once its daemon is out of its group (past setsid).
    let body = format!(
        "setsid sh -c 'echo $$ > {p}.new; mv {p}.new {p}; exec sleep 60' & \
         until [ -e {p} ]; do sleep 0.01; done; echo started; exit 2",
        p = daemon_pid.display()
    );
    let t = Instant::now();
    let ran = quiet(env, "j", &[], &body).code(2).run();
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert_eq!(ran.stdout, "started\n");
    // The daemon outlived the pass (it left the group).
    let pid: i32 = std::fs::read_to_string(&daemon_pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    kill(pid, libc::SIGKILL);
}

/// Past --output-limit the head and the tail are kept, with a line that
/// marks the cut.
fn the_limit_keeps_the_head_and_the_tail_and_marks_the_cut(env: &TestEnv) {
    let ran = quiet(env, "j", &[], "seq 1 20000; exit 1")
        .env("JOBRUN_OUTPUT_LIMIT", "4KiB")
        .code(1)
        .run();
    let out = ran.stdout;
    assert!(out.starts_with("1\n2\n3\n"), "{}", &out[..40]);
    assert!(out.ends_with("19999\n20000\n"));
    let total = (1..=20000)
        .map(|n: u32| n.to_string().len() + 1)
        .sum::<usize>();
    let cut = total - 4096;
    let mark = format!("\n[jobrun: {cut} bytes of output cut here (--output-limit)]\n");
    assert!(out.contains(&mark), "no {mark:?}");
    assert_eq!(out.len(), 4096 + mark.len());
    // A limit too small to hold a head, a tail and the mark is refused.
    quiet(env, "j", &["--output-limit", "100"], "true")
        .refused()
        .stderr_contains("--output-limit 100 is too small")
        .run();
    quiet(env, "j", &["--output-limit", "lots"], "true")
        .refused()
        .stderr_contains("like 64KiB, 10MiB or 0")
        .run();
}

/// A pass that ended badly keeps the tail of its output; `history --show`
/// prints it with control characters escaped (but newlines and tabs);
/// `forget` removes it.
fn the_tail_is_kept_shown_escaped_and_forgotten(env: &TestEnv) {
    let body = "seq 1 1000; printf 'tab\\there\\n\\033[31mred\\r\\n'; exit 4";
    quiet(env, "j", &[], body)
        .env("JOBRUN_KEEP_OUTPUT", "1KiB")
        .code(4)
        .stdout_contains("\x1b[31mred")
        .run();
    let pass = last_pass(env, "j");
    let shown = exits(env, 0, &["history", "--show", &pass]).stdout;
    assert!(
        shown.ends_with("999\n1000\ntab\there\n\\e[31mred\\r\n"),
        "{shown}"
    );
    assert!(!shown.contains('\x1b') && !shown.contains('\r'));
    // The tail only: 1KiB of it, escapes aside.
    assert!(!shown.starts_with("1\n"));
    assert!(shown.len() <= 1024 + 4, "{}", shown.len());
    assert_eq!(kept_rows(env), 1);
    Jobrun::new(env)
        .args(["forget", "j"])
        .stderr_contains("forgotten")
        .run();
    assert_eq!(kept_rows(env), 0);
    Jobrun::new(env)
        .args(["history", "--show", &pass])
        .code(1)
        .stderr_lines(1)
        .stderr_contains("no output kept")
        .run();
    // Under --output inherit nothing is kept.
    Jobrun::new(env)
        .args(["run", "k", "--", "sh", "-c", "echo loud; exit 1"])
        .code(1)
        .stdout_contains("loud")
        .run();
    assert_eq!(kept_rows(env), 0);
    // And --keep-output 0 keeps nothing either.
    quiet(env, "k", &["--keep-output", "0"], "echo x; exit 1")
        .code(1)
        .run();
    assert_eq!(kept_rows(env), 0);
}

/// History pruning removes the kept output with its row; past the
/// store-wide cap the oldest kept output goes first.
fn pruning_and_the_store_cap_drop_kept_output(env: &TestEnv) {
    let fail = "seq 1 400; exit 1";
    quiet(env, "a", &["--keep-history", "1"], fail)
        .code(1)
        .run();
    let first = last_pass(env, "a");
    assert_eq!(kept_rows(env), 1);
    quiet(env, "a", &["--keep-history", "1"], "true").run();
    assert_eq!(kept_rows(env), 0, "the pruned pass's output stays");
    Jobrun::new(env)
        .args(["history", "--show", &first])
        .code(1)
        .stderr_contains("no output kept")
        .run();
    // 1KiB each, at most 2KiB in the store: the oldest is dropped.
    let cap = ["--keep-output", "1KiB"];
    let mut passes = vec![];
    for _ in 0..3 {
        quiet(env, "b", &cap, fail)
            .env("JOBRUN_KEEP_OUTPUT_TOTAL", "2KiB")
            .code(1)
            .run();
        passes.push(last_pass(env, "b"));
    }
    assert_eq!(kept_rows(env), 2);
    Jobrun::new(env)
        .args(["history", "--show", &passes[0]])
        .code(1)
        .stderr_contains("no output kept")
        .run();
    for p in &passes[1..] {
        exits(env, 0, &["history", "--show", p]);
    }
}

both_stores!(
    an_ok_pass_is_silent_and_leaves_no_spool,
    a_failed_pass_prints_its_output_in_order_and_removes_the_spool,
    a_killed_command_still_prints_and_removes_its_spool,
    a_daemon_holding_the_pipe_does_not_hold_the_pass,
    the_limit_keeps_the_head_and_the_tail_and_marks_the_cut,
    the_tail_is_kept_shown_escaped_and_forgotten,
    pruning_and_the_store_cap_drop_kept_output,
);

/// The wrapper killed by SIGKILL cannot remove its spool: the next pass
/// that spools in the same directory does, and never a live pass's. Here
/// beside a SQLite store (no XDG_RUNTIME_DIR).
#[test]
fn a_killed_wrapper_leaves_a_spool_that_the_next_pass_removes() {
    let env = TestEnv::sqlite();
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(env.path(".")).unwrap());
    let dir = PathBuf::from(format!("{}.output-{uid}", env.db));
    let ready = env.path("held.ready");
    let body = format!(
        "echo $$ > {}; touch {}; exec sleep 60",
        env.path("held.pid").display(),
        ready.display()
    );
    let killed = env.start_with(
        "k",
        &["run", "k", QUIET[0], QUIET[1], "--", "sh", "-c", &body],
        &[("XDG_RUNTIME_DIR", "")],
    );
    assert!(env.wait_for_file("held.ready", Duration::from_secs(10)));
    let stale = spools(&dir);
    assert_eq!(stale.len(), 1, "{stale:?}");
    kill(killed as i32, libc::SIGKILL);
    assert_eq!(env.wait_exit(killed, Duration::from_secs(10)), Some(137));
    assert!(stale[0].exists());
    // A live pass's spool is left alone by the sweep.
    let live_body = format!("touch {}; exec sleep 60", env.path("live.ready").display());
    let live = env.start_with(
        "l",
        &["run", "l", QUIET[0], QUIET[1], "--", "sh", "-c", &live_body],
        &[("XDG_RUNTIME_DIR", "")],
    );
    assert!(env.wait_for_file("live.ready", Duration::from_secs(10)));
    assert!(!stale[0].exists(), "the next pass removes the stale spool");
    assert_eq!(spools(&dir).len(), 1);
    Jobrun::new(&env)
        .env("XDG_RUNTIME_DIR", "")
        .args(["run", "m", QUIET[0], QUIET[1], "--", "true"])
        .run();
    assert_eq!(spools(&dir).len(), 1, "the live pass's spool stays");
    kill(live as i32, libc::SIGTERM);
    assert_eq!(env.wait_exit(live, Duration::from_secs(10)), Some(143));
    assert_eq!(spools(&dir).len(), 0);
}

/// The spool directory is jobrun's own: a symbolic link planted in its
/// place is refused with one line before anything runs or is taken.
#[test]
fn a_planted_spool_directory_is_refused() {
    let env = TestEnv::sqlite();
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(env.path(".")).unwrap());
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, format!("{}.output-{uid}", env.db)).unwrap();
    let ran = env.path("ran");
    Jobrun::new(&env)
        .env("XDG_RUNTIME_DIR", "")
        .args(["run", "j", QUIET[0], QUIET[1], "--", "touch"])
        .arg(&ran)
        .refused()
        .stderr_contains("is a symbolic link")
        .run();
    assert!(!ran.exists());
    assert_eq!(spools(&elsewhere), Vec::<PathBuf>::new());
    assert_eq!(env.held("j"), 0);
}
