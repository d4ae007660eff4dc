//! Hooks and logs. Hooks: `--on-start`, `--on-success`, `--on-failure`
//! (and their `JOBRUN_ON_*` twins) see the pass, are bounded by
//! `--hook-timeout`, run once the slot is released, and never change the
//! pass's exit code or outcome. Logs: each line's level reaches the journal
//! as its `<N>` prefix, and `--syslog` sends each pass's outcome line to
//! syslog, facility cron.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::{alive, both_stores, start_pass, wait_until, Jobrun, TestEnv, BIN};

/// The `JOBRUN_*` variables in a file a hook wrote with `env > FILE`.
fn vars(env: &TestEnv, file: &str) -> HashMap<String, String> {
    std::fs::read_to_string(env.path(file))
        .unwrap_or_else(|e| panic!("{file}: the hook did not write it: {e}"))
        .lines()
        .filter(|l| l.starts_with("JOBRUN_"))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn hooks_see_the_pass(env: &TestEnv) {
    Jobrun::new(env)
        .args(["run", "--on-start", "env > start.env"])
        .args(["--on-success", "env > end.env", "feeds.poll", "--"])
        .args(["sh", "-c", "sleep 0.05"])
        .run();
    let pass = &env.history("feeds.poll")[0];
    let (start, end) = (vars(env, "start.env"), vars(env, "end.env"));
    for v in [&start, &end] {
        assert_eq!(v["JOBRUN_JOB"], "feeds.poll", "{v:?}");
        assert_eq!(v["JOBRUN_PASS"], pass.pass_id, "{v:?}");
        assert_eq!(
            Some(v["JOBRUN_TOKEN"].clone()),
            pass.token.map(|t| t.to_string())
        );
        assert_eq!(v["JOBRUN_SLOT"], "0", "{v:?}");
    }
    // The start hook runs before the pass has an end.
    assert!(!start.contains_key("JOBRUN_OUTCOME"), "{start:?}");
    assert!(!start.contains_key("JOBRUN_EXIT_CODE"), "{start:?}");
    assert_eq!(end["JOBRUN_OUTCOME"], "ok");
    assert_eq!(end["JOBRUN_EXIT_CODE"], "0");
    assert_eq!(end["JOBRUN_DURATION_MS"], pass.duration_ms.to_string());
    assert!(pass.duration_ms >= 50, "{pass:?}");
}

fn the_failure_hook_fires_after_a_pass_that_ended_badly(env: &TestEnv) {
    // Set from the environment, as a crontab sets them once.
    Jobrun::new(env)
        .env("JOBRUN_ON_FAILURE", "env > failed.env")
        .env("JOBRUN_ON_SUCCESS", "touch success.ran")
        .args(["run", "j", "--", "sh", "-c", "exit 3"])
        .code(3)
        .run();
    let v = vars(env, "failed.env");
    assert_eq!(
        (v["JOBRUN_OUTCOME"].as_str(), v["JOBRUN_EXIT_CODE"].as_str()),
        ("failed", "3")
    );
    // A hook does not hand the hook settings on to what it runs.
    assert!(!v.contains_key("JOBRUN_ON_FAILURE"), "{v:?}");
    assert!(!v.contains_key("JOBRUN_ON_SUCCESS"), "{v:?}");
    assert!(!env.path("success.ran").exists());
    // A command that cannot start ended badly too: the pass took a slot.
    Jobrun::new(env)
        .env("JOBRUN_ON_FAILURE", "env > spawn.env")
        .args(["run", "j", "--", "/nonexistent/cmd"])
        .code(127)
        .stderr_contains("command not found")
        .run();
    let v = vars(env, "spawn.env");
    assert_eq!(
        (v["JOBRUN_OUTCOME"].as_str(), v["JOBRUN_EXIT_CODE"].as_str()),
        ("spawn-failed", "127")
    );
    // Killed by a signal: 128+N, as the pass exits.
    Jobrun::new(env)
        .env("JOBRUN_ON_FAILURE", "env > killed.env")
        .args(["run", "j", "--", "sh", "-c", "kill -KILL $$"])
        .code(137)
        .run();
    let v = vars(env, "killed.env");
    assert_eq!(
        (v["JOBRUN_OUTCOME"].as_str(), v["JOBRUN_EXIT_CODE"].as_str()),
        ("killed", "137")
    );
}

both_stores!(
    hooks_see_the_pass,
    the_failure_hook_fires_after_a_pass_that_ended_badly
);

/// The flags that set every hook to touch a file named after it.
const ALL_HOOKS: [&str; 6] = [
    "--on-start",
    "touch start.ran",
    "--on-success",
    "touch success.ran",
    "--on-failure",
    "touch failure.ran",
];

fn no_hook_ran(env: &TestEnv) {
    for f in ["start.ran", "success.ran", "failure.ran"] {
        assert!(!env.path(f).exists(), "{f}: a hook ran");
    }
}

#[test]
fn passes_whose_command_never_ran_fire_no_hook() {
    let env = TestEnv::sqlite();
    let holder = start_pass(&env, "j", "holder", "30s", &[]);
    Jobrun::new(&env)
        .args(["run", "-E", "3"])
        .args(ALL_HOOKS)
        .args(["j", "--", "true"])
        .code(3)
        .stderr_contains("already running; skipping")
        .run();
    Jobrun::new(&env)
        .args(["run", "-E", "3", "--wait", "0.2s"])
        .args(ALL_HOOKS)
        .args(["j", "--", "true"])
        .code(3)
        .stderr_contains("gave up waiting")
        .run();
    no_hook_ran(&env);
    std::fs::write(env.path("holder.stop"), "").unwrap();
    assert!(env
        .wait_exit(holder.wrapper, Duration::from_secs(10))
        .is_some());
    // Neither does a pass stopped by the operator (its own TERM).
    Jobrun::new(&env)
        .args(["run", "--on-success", "touch success.ran"])
        .args(["--on-failure", "touch failure.ran"])
        .args(["j", "--", "sh", "-c", "kill -TERM $PPID; sleep 5"])
        .code(143)
        .run();
    assert_eq!(env.history("j")[0].outcome.as_str(), "stopped");
    no_hook_ran(&env);
}

#[test]
fn a_failing_hook_changes_neither_exit_code_nor_outcome() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env)
        .args(["run", "--on-start", "exit 4", "--on-success", "exit 9"])
        .args(["j", "--", "true"])
        .stderr_contains_all(&[
            "jobrun: j: --on-start hook exited with code 4",
            "jobrun: j: --on-success hook exited with code 9",
        ])
        .stderr_lines(2)
        .run();
    Jobrun::new(&env)
        .args(["run", "--on-failure", "kill -KILL $$", "j", "--"])
        .args(["sh", "-c", "exit 5"])
        .code(5)
        .stderr_contains("jobrun: j: --on-failure hook died of signal 9")
        .run();
    let outcomes: Vec<_> = env
        .history("j")
        .iter()
        .map(|p| p.outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["failed", "ok"]);
}

#[test]
fn a_bad_hook_timeout_is_one_clear_line() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env)
        .env("JOBRUN_HOOK_TIMEOUT", "soon")
        .args(["run", "--on-success", "touch ran", "j", "--", "true"])
        .refused()
        .stderr_lines(1)
        .stderr_contains("invalid --hook-timeout/JOBRUN_HOOK_TIMEOUT 'soon'")
        .run();
    assert!(!env.path("ran").exists());
}

#[test]
fn a_slow_hook_is_killed_with_its_group_past_the_timeout() {
    let env = TestEnv::sqlite();
    // The hook leaves a process in its group and hangs itself.
    let hook = "sleep 300 & echo $! > bg.pid; echo $$ > hook.pid; wait";
    let at = Instant::now();
    let ran = Jobrun::new(&env)
        .args([
            "run",
            "--hook-timeout",
            "1s",
            "--on-failure",
            hook,
            "j",
            "--",
        ])
        .args(["sh", "-c", "exit 5"])
        .code(5)
        .stderr_lines(1)
        .stderr_contains(
            "jobrun: j: --on-failure hook still ran after --hook-timeout 1s; killed its \
             process group",
        )
        .run();
    assert!(at.elapsed() < Duration::from_secs(30), "{ran:?}");
    let (bg, sh) = (env.pid_in("bg.pid"), env.pid_in("hook.pid"));
    // Both gone, the shell reaped (no zombie left under jobrun, which has
    // exited) and its background process killed with the group.
    assert!(wait_until(Duration::from_secs(10), || !alive(bg) && !alive(sh)));
    assert_eq!(env.history("j")[0].outcome.as_str(), "failed");
    assert_eq!(env.held("j"), 0);
}

#[test]
fn the_start_hook_runs_beside_the_command_without_delaying_it() {
    let env = TestEnv::sqlite();
    // The hook waits for the command to have run: were the command held
    // back until the hook ended, this would only end at the timeout.
    let hook = "while [ ! -e cmd.ran ]; do sleep 0.01; done; touch hook.saw";
    Jobrun::new(&env)
        .args([
            "run",
            "--hook-timeout",
            "30s",
            "--on-start",
            hook,
            "j",
            "--",
        ])
        .args(["touch", "cmd.ran"])
        .run();
    // jobrun waited for its start hook before it exited.
    assert!(env.path("hook.saw").exists());
}

#[test]
fn end_hooks_run_once_the_slot_is_released() {
    let env = TestEnv::sqlite();
    // Inside the hook the job is free: status shows no holder, and a second
    // pass takes the slot (it would skip, exit 3, were the slot still held).
    let hook = format!(
        "{BIN} status --json j > status.json && {BIN} run -E 3 j -- true && touch second.ok"
    );
    Jobrun::new(&env)
        .env("JOBRUN_ON_SUCCESS", &hook)
        .args(["run", "j", "--", "true"])
        .run();
    assert!(env.path("second.ok").exists());
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.path("status.json")).unwrap()).unwrap();
    assert_eq!(
        status["jobs"][0]["slots"],
        serde_json::json!([]),
        "{status}"
    );
    // Two passes: the hook's own pass fired no hook of its own.
    assert_eq!(env.history("j").len(), 2);
}

/// Run jobrun with stderr in the file `err`, and JOURNAL_STREAM naming the
/// device and inode of the file `journal`: stderr's stderr is the journal
/// only when both are the same file. Returns what stderr got.
fn with_journal(env: &TestEnv, err: &str, journal: &str, args: &[&str]) -> String {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::create(env.path(err)).unwrap();
    if journal != err {
        std::fs::write(env.path(journal), "").unwrap();
    }
    let meta = std::fs::metadata(env.path(journal)).unwrap();
    let status = env
        .cmd(args)
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stdin(std::process::Stdio::null())
        .stderr(file)
        .status()
        .unwrap();
    assert!(status.code().is_some(), "{status:?}");
    std::fs::read_to_string(env.path(err)).unwrap()
}

#[test]
fn on_the_journal_each_line_carries_its_level() {
    let env = TestEnv::sqlite();
    let holder = start_pass(&env, "held", "holder", "30s", &[]);
    let journal = |args: &[&str]| with_journal(&env, "err", "err", args);
    assert_eq!(
        journal(&["run", "--on-success", "exit 9", "j", "--", "true"]),
        "<4>jobrun: j: --on-success hook exited with code 9\n"
    );
    assert_eq!(
        journal(&["run", "j", "--", "/nonexistent/cmd"]),
        "<3>jobrun: j: /nonexistent/cmd: command not found\n"
    );
    let skipped = journal(&["run", "held", "--", "true"]);
    assert!(
        skipped.starts_with("<5>jobrun: held: already running; skipping"),
        "{skipped}"
    );
    assert_eq!(
        journal(&["status", "nosuchjob"])
            .lines()
            .next()
            .map(|l| &l[..11]),
        Some("<3>jobrun: ")
    );
    // A forced eviction is a warning: `journalctl -p warning` finds it.
    let forced = journal(&["clear-locks", "--force", "held"]);
    assert!(
        forced
            .lines()
            .any(|l| l.starts_with("<4>jobrun: ") && l.contains("cleared by --force")),
        "{forced}"
    );
    // A child that inherited JOURNAL_STREAM with its stderr elsewhere: no
    // prefixes.
    let elsewhere = with_journal(
        &env,
        "err2",
        "journal",
        &["run", "--on-success", "exit 9", "j", "--", "true"],
    );
    assert_eq!(
        elsewhere,
        "jobrun: j: --on-success hook exited with code 9\n"
    );
    std::fs::write(env.path("holder.stop"), "").unwrap();
    assert!(env
        .wait_exit(holder.wrapper, Duration::from_secs(10))
        .is_some());
}

#[test]
fn syslog_gets_each_pass_outcome_with_facility_cron() {
    use std::os::unix::net::UnixDatagram;
    let env = TestEnv::sqlite();
    let path = env.path("log.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let socket = path.to_str().unwrap();
    let recv = || {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).expect("a syslog message within 10s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    Jobrun::new(&env)
        .env("JOBRUN_SYSLOG_SOCKET", socket)
        .args(["run", "--syslog", "feeds.poll", "--", "true"])
        .run();
    let pass = env.history("feeds.poll")[0].clone();
    let ok = recv();
    // Facility cron (9) at info (6): <78>.
    assert!(ok.starts_with("<78>"), "{ok}");
    assert!(
        ok.contains("jobrun[")
            && ok.contains(&format!(
                "]: feeds.poll: pass {} ok (exit 0, ran ",
                pass.pass_id
            )),
        "{ok}"
    );
    // From the environment, as a crontab sets it once; an error: <75>.
    Jobrun::new(&env)
        .env("JOBRUN_SYSLOG_SOCKET", socket)
        .env("JOBRUN_SYSLOG", "1")
        .args(["run", "feeds.poll", "--", "sh", "-c", "exit 3"])
        .code(3)
        .run();
    let failed = recv();
    assert!(failed.starts_with("<75>"), "{failed}");
    assert!(failed.contains(" failed (exit 3, ran "), "{failed}");
    // Without --syslog nothing is sent.
    Jobrun::new(&env)
        .env("JOBRUN_SYSLOG_SOCKET", socket)
        .args(["run", "feeds.poll", "--", "true"])
        .run();
    sock.set_nonblocking(true).unwrap();
    assert!(sock.recv(&mut [0u8; 16]).is_err());
    // A syslog nobody listens to: one warning, the pass unchanged.
    drop(sock);
    Jobrun::new(&env)
        .env("JOBRUN_SYSLOG_SOCKET", socket)
        .args(["run", "--syslog", "feeds.poll", "--", "true"])
        .stderr_lines(1)
        .stderr_contains("jobrun: feeds.poll: --syslog: cannot send to syslog")
        .run();
}
