//! The figures operators read: a pass's duration apart from its wait, an
//! outcome that follows how the command ended, columns that never cut a
//! figure or show a negative age, and a stopped wrapper shown as stopped.

use std::time::{Duration, Instant};

use jobrun::model::{HistoryReport, Outcome, State};

use crate::support::{
    alive, both_stores, held_child, kill, script, wait_until, Jobrun, Kind, TestEnv,
};

/// A pass that queued for a while and then ran a 0.1 s command: its
/// duration is the command's, its wait is recorded apart (JSON and table),
/// and the summary's figures use the duration only.
fn duration_is_measured_from_the_command_start(env: &TestEnv) {
    let holder = held_child(env, "holder", "");
    env.start("holder", &["run", "w", "--", &holder]);
    assert!(env.wait_for_file("holder.ready", Duration::from_secs(10)));
    let waiter = env.start(
        "waiter",
        &["run", "--wait", "60s", "w", "--", "sleep", "0.1"],
    );
    assert!(wait_until(Duration::from_secs(10), || {
        env.find_job("w").is_some_and(|j| j.queue.length == 1)
    }));
    // The waiter is queued; hold the slot for 1.5 s more before releasing.
    let queued = Instant::now();
    assert!(!wait_until(Duration::from_millis(1500), || env
        .find_job("w")
        .is_some_and(|j| j.queue.length == 0)));
    std::fs::write(env.path("holder.done"), "").unwrap();
    assert_eq!(env.wait_exit(waiter, Duration::from_secs(20)), Some(0));
    let waited_at_least = queued.elapsed().as_millis() as i64 - 200;
    let h = env.history("w");
    let pass = h
        .iter()
        .find(|p| p.waited_ms.unwrap_or(0) >= 1500)
        .unwrap_or_else(|| panic!("no pass waited: {h:#?}"));
    let duration = pass.duration_ms;
    let waited = pass.waited_ms.unwrap();
    // The 0.1 s command's own time, however loaded the machine: not the
    // wait. The wrapper stamps the start just after it lets the command
    // run, so a loaded machine can cut a few ms off the 100.
    assert!(duration >= 50 && duration < waited, "{pass:#?}");
    assert!(waited >= waited_at_least.min(1500), "{pass:#?}");
    let out = env.run(&["history", "w"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("STARTED") && l.contains("WAITED")),
        "{text}"
    );
    let out = env.run(&["history", "w", "--json"]);
    let v: HistoryReport = serde_json::from_slice(&out.stdout).unwrap();
    // The summary is over durations: its p50 (of two passes, the waiter's)
    // is the waiter's 0.1 s run (within the sketch's 1%), not its wait.
    let p50 = v.summary[0].p50_ms;
    assert!(
        (p50 - duration).abs() * 100 <= duration && p50 < waited,
        "the summary counts the wait: {v:#?}"
    );
}

/// The outcome follows how the command ended, not which signal the
/// wrapper forwarded.
#[test]
fn outcome_follows_how_the_command_ended() {
    let env = TestEnv::sqlite();
    // (job, trap, signal, expected outcome, expected exit)
    let cases: &[(&str, &str, i32, Outcome, i32)] = &[
        (
            "term-handled",
            "trap 'exit 0' TERM",
            libc::SIGTERM,
            Outcome::Ok,
            0,
        ),
        (
            "hup-handled",
            "trap 'exit 0' HUP",
            libc::SIGHUP,
            Outcome::Ok,
            0,
        ),
        (
            "term-failed",
            "trap 'exit 3' TERM",
            libc::SIGTERM,
            Outcome::Failed,
            3,
        ),
        ("term-default", "", libc::SIGTERM, Outcome::Stopped, 143),
        (
            "term-ignored",
            "trap '' TERM",
            libc::SIGTERM,
            Outcome::Stopped,
            137,
        ),
    ];
    let mut pids = vec![];
    for (job, trap, _, _, _) in cases {
        let ready = env.path(&format!("{job}.ready"));
        let body = format!(
            "{trap}\ntouch {}\nwhile :; do sleep 0.05; done",
            ready.display()
        );
        let child = script(&env, &format!("{job}.sh"), &body);
        pids.push(env.start(job, &["run", "--kill-after", "1s", job, "--", &child]));
    }
    for ((job, _, sig, outcome, code), pid) in cases.iter().zip(&pids) {
        assert!(env.wait_for_file(&format!("{job}.ready"), Duration::from_secs(10)));
        kill(*pid as i32, *sig);
        assert_eq!(
            env.wait_exit(*pid, Duration::from_secs(20)),
            Some(*code),
            "{job}: {}",
            env.stderr_of(job)
        );
        let h = env.history(job);
        assert_eq!(h[0].outcome, *outcome, "{job}: {h:#?}");
    }
    // A command that handles the forwarded TERM and runs on, and is then
    // KILLed by an operator (as `stop-due --kill-after` does), was stopped.
    let pidfile = env.path("op.pid");
    let termed = env.path("op.termed");
    let child = script(
        &env,
        "op.sh",
        &format!(
            "trap 'touch {1}' TERM\necho $$ > {0}.tmp && mv {0}.tmp {0}\n\
             while :; do sleep 0.05; done",
            pidfile.display(),
            termed.display()
        ),
    );
    let pid = env.start("op", &["run", "--kill-after", "1h", "op", "--", &child]);
    assert!(env.wait_for_file("op.pid", Duration::from_secs(10)));
    let child_pid = env.pid_in("op.pid");
    kill(pid as i32, libc::SIGTERM);
    // The command got the TERM: the wrapper has taken note of the stop.
    assert!(env.wait_for_file("op.termed", Duration::from_secs(10)));
    // -pgid: the command's whole group, as stop-due would.
    kill(-child_pid, libc::SIGKILL);
    assert_eq!(env.wait_exit(pid, Duration::from_secs(20)), Some(137));
    assert_eq!(env.history("op")[0].outcome, Outcome::Stopped);
}

/// A renewal stamped ahead of this host's clock, and a lease that expired:
/// no negative age, "expired N ago", and no figure cut by the columns.
fn columns_never_cut_a_figure_or_show_a_negative_age(env: &TestEnv) {
    // A LAST as wide as "lost-lease 12s" and wider.
    assert_eq!(
        env.run(&["run", "last", "--", "/nonexistent/command"])
            .status
            .code(),
        Some(127)
    );
    // A holder on a host whose clock runs an hour fast, unknown to us (another
    // boot id): its renewal is in our future; its lease 3 s.
    let child = held_child(env, "fast", "");
    env.start_with(
        "fast",
        &["run", "--lease", "3s", "fast", "--", &child],
        &[
            ("JOBRUN_CLOCK_SKEW", "1h"),
            ("JOBRUN_HOST", "fasthost"),
            ("JOBRUN_BOOT_ID", "another-boot"),
        ],
    );
    assert!(env.wait_for_file("fast.ready", Duration::from_secs(10)));
    // A holder whose clock runs an hour slow: its lease expired long ago as
    // we see it.
    let child = held_child(env, "slow", "");
    env.start_with(
        "slow",
        &["run", "--lease", "3s", "slow", "--", &child],
        &[
            ("JOBRUN_CLOCK_SKEW", "-1h"),
            ("JOBRUN_HOST", "slowhost"),
            ("JOBRUN_BOOT_ID", "another-boot"),
        ],
    );
    assert!(env.wait_for_file("slow.ready", Duration::from_secs(10)));
    let out = env.run(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "{line}");
        assert!(!line.contains('~'), "a value was cut: {line}");
        let negative = line.match_indices('-').any(|(i, _)| {
            line[i + 1..].starts_with(|c: char| c.is_ascii_digit()) && line[..i].ends_with(' ')
        });
        assert!(!negative, "a negative figure: {line}");
    }
    // LAST: the outcome and how long ago it ended, whole; the duration on
    // the detail line.
    assert!(text.contains("  spawn-failed 0s ago"), "{text}");
    assert!(
        text.contains("last pass spawn-failed 0s ago, took 0.0s"),
        "{text}"
    );
    let slow = text
        .lines()
        .skip_while(|l| !l.starts_with("slow"))
        .take(3)
        .collect::<Vec<_>>()
        .join("\n");
    if env.kind == Kind::Sqlite {
        // SQLite ages rows on this host's clock: the slow host's renewal
        // is an hour old, its lease expired.
        assert!(slow.contains("expired 59m"), "{text}");
        assert!(slow.contains("ago"), "{text}");
    }
    let v = env.status();
    for j in &v.jobs {
        for s in &j.slots {
            assert!(s.renewed_ago_ms >= 0, "{s:#?}");
        }
    }
    // Tokens are 16 digits: on the detail line, whole.
    let token = v.job("fast").unwrap().slots[0].token.to_string();
    assert!(text.contains(&format!("token {token}")), "{text}");
}

/// A wrapper stopped by SIGSTOP shows as `stopped`, as `ps` shows it, in
/// the table and in the JSON; continued, it is `running` again.
fn a_stopped_wrapper_shows_as_stopped(env: &TestEnv) {
    let child = held_child(env, "p", "");
    let pid = env.start("p", &["run", "paused.pass", "--", &child]);
    assert!(env.wait_for_file("p.ready", Duration::from_secs(10)));
    kill(pid as i32, libc::SIGSTOP);
    assert!(wait_until(Duration::from_secs(10), || {
        env.find_job("paused.pass")
            .is_some_and(|j| j.state == State::Stopped)
    }));
    assert_eq!(env.job("paused.pass").slots[0].state, State::Stopped);
    let out = env.run(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text.lines().find(|l| l.starts_with("paused.pass")).unwrap();
    assert!(row.contains(" stopped "), "{text}");
    kill(pid as i32, libc::SIGCONT);
    assert!(wait_until(Duration::from_secs(10), || {
        env.find_job("paused.pass")
            .is_some_and(|j| j.state == State::Running)
    }));
    std::fs::write(env.path("p.done"), "").unwrap();
    assert_eq!(env.wait_exit(pid, Duration::from_secs(10)), Some(0));
    assert!(!alive(pid as i32));
}

/// The summary counts every pass the store recorded, pruned ones too;
/// with --since or --outcome it covers the kept passes that match. An age
/// limit prunes the passes that ended longer ago, the newest always kept,
/// and lowers no count; a bad one is refused and records nothing. metrics
/// still knows a success older than anything history keeps.
fn pruning_lowers_no_figure(env: &TestEnv) {
    let run = |args: &[&str], code: i32| {
        Jobrun::new(env)
            .arg("run")
            .args(args.iter().copied())
            .code(code)
            .run()
    };
    let summary = |extra: &[&str]| {
        let mut args = vec!["history", "p", "--json"];
        args.extend(extra);
        let r = Jobrun::new(env).args(args).json::<HistoryReport>();
        let s = r.summary.first().cloned().expect("a summary of p");
        let outcomes: Vec<(String, usize)> = s.outcomes.clone().into_iter().collect();
        (r.passes.len(), s.count, outcomes)
    };
    for _ in 0..3 {
        run(&["--keep-history", "2", "p", "--", "true"], 0);
    }
    run(&["--keep-history", "2", "p", "--", "false"], 1);
    let counted = |ok: usize| vec![("failed".to_string(), 1), ("ok".to_string(), ok)];
    assert_eq!(summary(&[]), (2, 4, counted(3)), "two kept, four counted");
    let kept = summary(&["--since", "1h"]);
    assert_eq!((kept.0, kept.1), (2, 2), "--since: the kept passes only");
    run(&["--keep-history-for", "1ms", "p", "--", "true"], 0);
    assert_eq!(summary(&[]), (1, 5, counted(4)), "the newest alone stays");
    Jobrun::new(env)
        .args(["run", "--keep-history-for", "0", "p", "--", "true"])
        .code(125)
        .stderr_contains("--keep-history-for 0")
        .run();
    assert_eq!(
        summary(&[]),
        (1, 5, counted(4)),
        "refused, nothing recorded"
    );
    // The success is pruned away by the failures after it.
    run(&["--keep-history", "1", "q", "--", "true"], 0);
    for _ in 0..2 {
        run(&["--keep-history", "1", "q", "--", "false"], 1);
    }
    let metrics = Jobrun::new(env).arg("metrics").run().stdout;
    assert!(
        metrics.contains("jobrun_last_success_timestamp_seconds{job=\"q\"}"),
        "{metrics}"
    );
}

both_stores!(
    pruning_lowers_no_figure,
    duration_is_measured_from_the_command_start,
    columns_never_cut_a_figure_or_show_a_negative_age,
    a_stopped_wrapper_shows_as_stopped,
);
