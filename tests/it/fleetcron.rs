//! What cron users reach for beside a lock wrapper, one flag each on
//! `jobrun run`: `--timeout` (as `timeout(1)`), `--jitter` and `--spread`
//! (systemd's `RandomizedDelaySec=` and `FixedRandomDelay=`), and once per
//! window across a fleet.

use std::time::{Duration, Instant};

use crate::support::procfs::now_ms;
use crate::support::{
    alive, both_stores, exits, kill, script, store_exec, wait_until, Jobrun, TestEnv,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The outcomes of a job's passes, newest first, as history names them.
fn outcomes(env: &TestEnv, job: &str) -> Vec<&'static str> {
    env.history(job)
        .iter()
        .map(|p| p.outcome.as_str())
        .collect()
}

/// A command that ignores TERM and leaves two grandchildren in its group,
/// one of which ignores TERM too; each records its pid.
fn stubborn_group(env: &TestEnv) -> String {
    script(
        env,
        "stubborn.sh",
        "trap '' TERM\n\
         echo $$ > child.pid\n\
         sleep 60 &\n\
         echo $! > sleeper.pid\n\
         sh -c 'trap \"\" TERM; echo $$ > deaf.pid.tmp; mv deaf.pid.tmp deaf.pid; \
                while :; do sleep 0.1; done' &\n\
         while [ ! -e deaf.pid ]; do sleep 0.02; done\n\
         touch ready\n\
         while :; do sleep 0.1; done",
    )
}

fn timeout_ends_the_whole_group_and_exits_124(env: &TestEnv) {
    let child = stubborn_group(env);
    let started = Instant::now();
    let pid = env.start(
        "w",
        &[
            "run",
            "--timeout",
            "2s",
            "--kill-after",
            "1s",
            "j",
            "--",
            &child,
        ],
    );
    assert!(
        env.wait_for_file("ready", secs(10)),
        "{}",
        env.stderr_of("w")
    );
    let pids: Vec<i32> = ["child.pid", "sleeper.pid", "deaf.pid"]
        .iter()
        .map(|f| env.pid_in(f))
        .collect();
    assert_eq!(env.held("j"), 1);
    assert_eq!(
        env.wait_exit(pid, secs(15)),
        Some(124),
        "{}",
        env.stderr_of("w")
    );
    let took = started.elapsed();
    // TERM at 2 s, ignored; KILL 1 s later; then the release.
    assert!(
        (secs(3)..secs(6)).contains(&took),
        "the pass took {took:?} with --timeout 2s --kill-after 1s"
    );
    // Nothing of the group outlived the pass (a KILLed member may wait a
    // moment for init to reap it).
    for p in &pids {
        assert!(
            wait_until(secs(2), || !alive(*p)),
            "pid {p} of the group survived the timeout"
        );
    }
    let err = env.stderr_of("w");
    assert!(err.contains("timed out after 2s; sending TERM"), "{err}");
    assert!(err.contains("sending KILL"), "{err}");
    // The slot was released as the pass ended: the next pass runs at once.
    assert_eq!(env.held("j"), 0);
    exits(env, 0, &["run", "j", "--", "true"]);
    assert_eq!(outcomes(env, "j"), ["ok", "timeout"]);
    let timed = &env.history("j")[1];
    assert!(
        (1900..4000).contains(&timed.duration_ms),
        "duration {} ms of a pass timed out at 2s",
        timed.duration_ms
    );
}

fn timeout_is_124_however_the_command_then_ends(env: &TestEnv) {
    // It handles TERM and exits 0: still a timeout, as timeout(1) has it.
    let child = script(
        env,
        "polite.sh",
        "exec 2>/dev/null\n\
         trap 'exit 0' TERM\n\
         while :; do sleep 0.05; done",
    );
    Jobrun::new(env)
        .args(["run", "j", "--", &child])
        .env("JOBRUN_TIMEOUT", "1s")
        .code(124)
        .stderr_lines(1)
        .stderr_contains("timed out after 1s; sending TERM")
        .run();
    // A command done before its timeout is judged by its own code.
    exits(
        env,
        3,
        &["run", "--timeout", "30s", "j", "--", "sh", "-c", "exit 3"],
    );
    // 0: no timeout.
    exits(env, 0, &["run", "--timeout", "0", "j", "--", "true"]);
    assert_eq!(outcomes(env, "j"), ["ok", "failed", "timeout"]);
    Jobrun::new(env)
        .args(["run", "--timeout", "soon", "j", "--", "true"])
        .refused()
        .stderr_contains("invalid --timeout/JOBRUN_TIMEOUT 'soon'")
        .run();
}

/// A `--wait` that ran out is `wait-expired`; `history --outcome` still
/// understands the name earlier jobruns gave it, and finds the rows they
/// write into a store they share.
fn a_wait_that_ran_out_is_wait_expired(env: &TestEnv) {
    let child = crate::support::held_child(env, "h", "");
    let pid = env.start("h", &["run", "j", "--", &child]);
    assert!(env.wait_for_file("h.ready", secs(10)));
    Jobrun::new(env)
        .args(["run", "--wait", "100ms", "j", "--", "true"])
        .stderr_lines(1)
        .stderr_contains("gave up waiting")
        .run();
    std::fs::write(env.path("h.done"), "").unwrap();
    assert_eq!(env.wait_exit(pid, secs(10)), Some(0));
    assert_eq!(outcomes(env, "j"), ["wait-expired", "ok"]);
    // A row an earlier jobrun wrote after the store was migrated.
    store_exec(
        env,
        "INSERT INTO history (job, pass_id, host, pid, started_ms, ended_ms, duration_ms, \
         outcome) VALUES ('j', 'old0pass0000', 'web1', 1, 1, 2, 0, 'timed-out');",
    );
    for name in ["wait-expired", "timed-out"] {
        let got: Vec<_> = Jobrun::new(env)
            .args(["history", "j", "--json", "--outcome", name])
            .json::<jobrun::model::HistoryReport>()
            .passes
            .into_iter()
            .map(|p| (p.outcome.as_str(), p.pass_id.len()))
            .collect();
        assert_eq!(got, [("wait-expired", 12), ("wait-expired", 12)], "{name}");
    }
}

/// A store whose history an earlier jobrun wrote `timed-out` into is
/// migrated: the rows say `wait-expired`.
fn stored_timed_out_rows_are_migrated(env: &TestEnv) {
    exits(env, 0, &["run", "j", "--", "true"]);
    // The store as schema 9 left it, with a row of a wait that ran out.
    store_exec(
        env,
        "ALTER TABLE history DROP COLUMN window_key; DROP TABLE windows; \
         INSERT INTO history (job, pass_id, host, pid, started_ms, ended_ms, duration_ms, \
         outcome) VALUES ('j', 'old0pass0000', 'web1', 1, 1, 2, 0, 'timed-out'); \
         UPDATE jobrun_meta SET value = 9 WHERE key = 'schema';",
    );
    exits(env, 0, &["run", "j", "--", "true"]);
    let dump = crate::support::dump_store(env).join("\n");
    assert!(!dump.contains("timed-out"), "{dump}");
    assert_eq!(outcomes(env, "j"), ["ok", "ok", "wait-expired"]);
}

/// How long `jobrun run ARGS -- true` takes with `vars`, and the pass it
/// recorded: the wait before the pass is most of it.
fn delayed_pass(
    env: &TestEnv,
    args: &[&str],
    vars: &[(&str, &str)],
) -> (Duration, jobrun::model::PassRecord) {
    let before_ms = now_ms();
    let started = Instant::now();
    Jobrun::new(env)
        .arg("run")
        .args(args)
        .args(["j", "--", "true"])
        .envs(vars.iter().copied())
        .run();
    let took = started.elapsed();
    let pass = env.history("j").remove(0);
    // The pass itself began after the wait.
    assert!(
        pass.started_at_ms >= before_ms,
        "{pass:?} began before the test started it"
    );
    (took, pass)
}

/// `took` is the wait `want` and the pass itself (a loaded machine's second
/// at most), never more; the wait counted in neither the pass's wait nor
/// its duration.
fn waited(took: Duration, want: Duration, pass: &jobrun::model::PassRecord) {
    assert!(
        (want..want + Duration::from_millis(1500)).contains(&took),
        "the pass took {took:?}, its wait should be {want:?}"
    );
    assert!(
        pass.waited_ms.unwrap_or(0) < 1000 && pass.duration_ms < 1000,
        "the wait counted in the pass: {pass:?}"
    );
}

fn jitter_is_drawn_in_its_range_from_the_seed(env: &TestEnv) {
    // The draws these seeds give for job j (policy::delay pins the
    // arithmetic): a long one and a short one within 3 s.
    let (took, pass) = delayed_pass(env, &["--jitter", "3s"], &[("JOBRUN_JITTER_SEED", "a")]);
    waited(took, Duration::from_millis(2222), &pass);
    let (took, pass) = delayed_pass(
        env,
        &[],
        &[("JOBRUN_JITTER", "3s"), ("JOBRUN_JITTER_SEED", "d")],
    );
    waited(took, Duration::from_millis(789), &pass);
    // Without a seed, a fresh draw each pass, always within the range.
    for _ in 0..2 {
        let (took, _) = delayed_pass(env, &["--jitter", "1s"], &[]);
        assert!(took < Duration::from_millis(2500), "{took:?}");
    }
    assert_eq!(env.history("j").len(), 4);
}

fn spread_is_stable_per_host_and_job(env: &TestEnv) {
    // web1's place in a 3 s spread of job j, twice; web3's is early.
    for _ in 0..2 {
        let (took, pass) = delayed_pass(env, &["--spread", "3s"], &[("JOBRUN_HOST", "web1")]);
        waited(took, Duration::from_millis(2944), &pass);
        assert_eq!(pass.host, "web1");
    }
    let (took, pass) = delayed_pass(
        env,
        &[],
        &[("JOBRUN_SPREAD", "3s"), ("JOBRUN_HOST", "web3")],
    );
    waited(took, Duration::from_millis(167), &pass);
}

/// Whether `pid` has a handler for TERM (its SigCgt mask): jobrun installs
/// its handlers first, so from then on a TERM is its to act on.
fn catches_term(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGTERM - 1)) != 0)
}

fn term_during_the_wait_ends_the_pass_at_once(env: &TestEnv) {
    exits(env, 0, &["run", "other", "--", "true"]);
    // Seed a: some 44 minutes of a one-hour jitter.
    let pid = env.start_with(
        "w",
        &["run", "--jitter", "1h", "j", "--", "touch", "ran"],
        &[("JOBRUN_JITTER_SEED", "a")],
    );
    assert!(
        wait_until(secs(10), || catches_term(pid)),
        "{}",
        env.stderr_of("w")
    );
    // Waiting: alive, and nothing held or even known to the store.
    assert!(env.find_job("j").is_none());
    assert!(alive(pid as i32));
    let sent = Instant::now();
    kill(pid as i32, libc::SIGTERM);
    assert_eq!(
        env.wait_exit(pid, secs(10)),
        Some(143),
        "{}",
        env.stderr_of("w")
    );
    assert!(sent.elapsed() < secs(2), "{:?}", sent.elapsed());
    let err = env.stderr_of("w");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("j: stopped by signal 15 before trying for a slot"),
        "{err}"
    );
    assert!(err.contains("nothing was taken"), "{err}");
    assert!(!env.path("ran").exists());
    // Nothing recorded as run: the store never heard of the pass.
    assert!(env.find_job("j").is_none());
}

/// The identity of host `webN` of a fleet, through the evidence seam.
fn web(n: usize) -> [(String, String); 2] {
    [
        ("JOBRUN_HOST".into(), format!("web{n}")),
        ("JOBRUN_BOOT_ID".into(), format!("web{n}-boot")),
    ]
}

/// A windowed pass on host `webN`, with what it must do.
fn on_web<'a>(env: &'a TestEnv, n: usize, args: &[&str]) -> Jobrun<'a> {
    Jobrun::new(env).arg("run").args(args).envs(web(n))
}

fn window_of(env: &TestEnv, job: &str) -> jobrun::model::WindowStatus {
    env.job(job).window.expect("status shows the job's window")
}

fn a_failed_claimer_is_taken_over_then_the_window_is_done(env: &TestEnv) {
    on_web(env, 1, &["--window", "w1", "j", "--", "sh", "-c", "exit 3"])
        .code(3)
        .run();
    let ran = on_web(
        env,
        2,
        &[
            "--window",
            "w1",
            "j",
            "--",
            "sh",
            "-c",
            "echo $JOBRUN_WINDOW",
        ],
    )
    .run();
    assert_eq!(ran.stdout, "w1\n");
    let ok = env.history("j").remove(0);
    assert_eq!((ok.outcome.as_str(), ok.host.as_str()), ("ok", "web2"));
    // Every later pass, on any host, skips naming the pass that did it.
    let line = format!(
        "j: window w1 done: pass {} on web2 ended ok at ",
        ok.pass_id
    );
    on_web(env, 3, &["--window", "w1", "j", "--", "touch", "ran"])
        .stderr_lines(1)
        .stderr_contains(&line)
        .run();
    on_web(
        env,
        1,
        &["-E", "3", "--window", "w1", "j", "--", "touch", "ran"],
    )
    .code(3)
    .stderr_contains(&line)
    .run();
    on_web(env, 1, &["-q", "--window", "w1", "j", "--", "touch", "ran"]).run();
    assert!(!env.path("ran").exists());
    let h = env.history("j");
    let seen: Vec<_> = h
        .iter()
        .map(|p| (p.outcome.as_str(), p.window.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("done", Some("w1")),
            ("done", Some("w1")),
            ("done", Some("w1")),
            ("ok", Some("w1")),
            ("failed", Some("w1"))
        ]
    );
    let w = window_of(env, "j");
    assert_eq!(
        (
            w.key.as_str(),
            w.state.as_str(),
            w.attempts,
            w.host.as_str()
        ),
        ("w1", "done", 2, "web2")
    );
    // A window whose claims all failed is given up after --window-attempts.
    for n in [1, 2] {
        on_web(
            env,
            n,
            &[
                "--window",
                "w2",
                "--window-attempts",
                "2",
                "j",
                "--",
                "false",
            ],
        )
        .code(1)
        .run();
    }
    on_web(
        env,
        3,
        &[
            "--window",
            "w2",
            "--window-attempts",
            "2",
            "j",
            "--",
            "touch",
            "ran",
        ],
    )
    .stderr_lines(1)
    .stderr_contains("j: window w2 given up after 2 attempts (the last: pass ")
    .stderr_contains(" on web2, failed at ")
    .run();
    assert!(!env.path("ran").exists());
    assert_eq!(env.history("j")[0].outcome.as_str(), "skipped");
    let w = window_of(env, "j");
    assert_eq!(
        (w.key.as_str(), w.state.as_str(), w.attempts),
        ("w2", "given-up", 2)
    );
    Jobrun::new(env)
        .args(["status", "j"])
        .stdout_contains("window w2: given up, failed by pass ")
        .stdout_contains("(attempt 2 of 2)")
        .run();
}

/// A claimer killed without unwinding (its host gone) is taken over in
/// the same window by another host once its lease lapsed; that pass
/// queued meanwhile (`--wait`) and claims the window as it is promoted.
fn a_killed_claimer_is_taken_over_in_the_same_window(env: &TestEnv) {
    let child = script(
        env,
        "claimer.sh",
        "echo $$ > claimer.pid\n\
         touch claimer.ready\n\
         while :; do sleep 0.1; done",
    );
    let ids = web(1);
    let ids: Vec<(&str, &str)> = ids.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let pid = env.start_with(
        "claimer",
        &["run", "--window", "w", "--lease", "3s", "j", "--", &child],
        &ids,
    );
    assert!(env.wait_for_file("claimer.ready", secs(10)));
    let child = env.pid_in("claimer.pid");
    kill(pid as i32, libc::SIGKILL);
    kill(-child, libc::SIGKILL);
    assert!(env.wait_exit(pid, secs(10)).is_some());
    assert!(wait_until(secs(5), || !alive(child)));
    assert_eq!(window_of(env, "j").state.as_str(), "claimed");
    let ran = on_web(
        env,
        2,
        &[
            "--window",
            "w",
            "--wait",
            "30s",
            "j",
            "--",
            "sh",
            "-c",
            "echo $JOBRUN_WINDOW",
        ],
    )
    .stderr_lines(2)
    .stderr_contains("j: freed slot 0")
    .stderr_contains("(unknown: other host web1)")
    .stderr_contains("j: took slot 0 with new token")
    .run();
    assert_eq!(ran.stdout, "w\n");
    let h = env.history("j");
    let seen: Vec<_> = h
        .iter()
        .map(|p| (p.outcome.as_str(), p.host.as_str(), p.window.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [("ok", "web2", Some("w")), ("abandoned", "web1", Some("w"))]
    );
    let w = window_of(env, "j");
    assert_eq!(
        (w.state.as_str(), w.attempts, w.host.as_str()),
        ("done", 2, "web2")
    );
}

/// A waiter whose turn comes once its window is done ends as `done`.
fn a_waiter_promoted_into_a_done_window_ends_done(env: &TestEnv) {
    let child = crate::support::held_child(env, "h", "");
    let ids = web(1);
    let ids: Vec<(&str, &str)> = ids.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let holder = env.start_with("h", &["run", "--window", "w", "j", "--", &child], &ids);
    assert!(env.wait_for_file("h.ready", secs(10)));
    let ids = web(2);
    let ids: Vec<(&str, &str)> = ids.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let waiter = env.start_with(
        "w",
        &[
            "run", "--window", "w", "--wait", "30s", "j", "--", "touch", "ran",
        ],
        &ids,
    );
    assert!(
        wait_until(secs(10), || env.job("j").queue.length == 1),
        "{}",
        env.stderr_of("w")
    );
    std::fs::write(env.path("h.done"), "").unwrap();
    assert_eq!(env.wait_exit(holder, secs(10)), Some(0));
    assert_eq!(env.wait_exit(waiter, secs(30)), Some(0));
    let err = env.stderr_of("w");
    assert!(err.contains("j: window w done: pass "), "{err}");
    assert!(err.contains(" on web1 ended ok at "), "{err}");
    assert!(!env.path("ran").exists());
    let seen: Vec<_> = env
        .history("j")
        .iter()
        .map(|p| (p.outcome.as_str(), p.host.clone()))
        .collect();
    assert_eq!(seen, [("done", "web2".into()), ("ok", "web1".into())]);
    assert_eq!(env.job("j").queue.length, 0);
}

fn windowed_passes_refuse_what_would_run_a_window_twice(env: &TestEnv) {
    exits(env, 0, &["run", "other", "--", "true"]);
    for (args, says) in [
        (
            &["--once-per", "1h", "--slots", "2"][..],
            "--once-per runs one pass per window: it cannot be given --slots 2",
        ),
        (
            &["--window", "w", "--coalesce"][..],
            "--window cannot be given --coalesce",
        ),
        (
            &["--once-per", "1500ms"][..],
            "invalid --once-per/JOBRUN_ONCE_PER '1500ms': windows are whole seconds",
        ),
        (
            &["--window", " w"][..],
            "invalid --window/JOBRUN_WINDOW_KEY: the key \" w\": it starts or ends with whitespace",
        ),
    ] {
        Jobrun::new(env)
            .arg("run")
            .args(args)
            .args(["j", "--", "true"])
            .refused()
            .stderr_contains(says)
            .run();
    }
    Jobrun::new(env)
        .args(["run", "j", "--", "true"])
        .env("JOBRUN_WINDOW_KEY", "a\u{202e}b")
        .refused()
        .stderr_contains("invalid --window/JOBRUN_WINDOW_KEY")
        .run();
    // Nothing reached the store.
    assert!(env.find_job("j").is_none());
}

/// Three hosts fire the same crontab line (`--once-per 1s`) about three
/// times a window, for seven windows: exactly one pass ran each window,
/// and every window saw one.
fn three_hosts_run_a_job_once_per_window(env: &TestEnv) {
    let cmd = script(
        env,
        "work.sh",
        "echo \"$JOBRUN_WINDOW $JOBRUN_PASS\" >> runs\nsleep 0.1",
    );
    let t0 = Instant::now();
    let tick = Duration::from_millis(350);
    let mut round = 0u32;
    while t0.elapsed() < secs(7) {
        // The schedule: each host's cron fires at this tick.
        let at = t0 + tick * round;
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        let pids: Vec<u32> = (1..=3)
            .map(|n| {
                let ids = web(n);
                let ids: Vec<(&str, &str)> =
                    ids.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                env.start_with(
                    &format!("r{round}-{n}"),
                    &["run", "--once-per", "1s", "j", "--", &cmd],
                    &ids,
                )
            })
            .collect();
        for (n, pid) in pids.into_iter().enumerate() {
            assert_eq!(
                env.wait_exit(pid, secs(30)),
                Some(0),
                "{}",
                env.stderr_of(&format!("r{round}-{}", n + 1))
            );
        }
        round += 1;
    }
    let h = env.history("j");
    let mut ok: Vec<(&str, &str)> = h
        .iter()
        .filter(|p| p.outcome.as_str() == "ok")
        .map(|p| (p.window.as_deref().unwrap(), p.pass_id.as_str()))
        .collect();
    ok.sort();
    let windows: std::collections::BTreeSet<&str> = ok.iter().map(|(w, _)| *w).collect();
    assert_eq!(windows.len(), ok.len(), "a window ran twice: {ok:?}");
    assert!(
        windows.len() >= 6,
        "only {} windows ran: {ok:?}",
        windows.len()
    );
    // Every window a pass found (claimed, done) ran once.
    for p in &h {
        if let Some(w) = p.window.as_deref() {
            assert!(windows.contains(w), "window {w} never ran: {p:?}");
        }
    }
    assert!(h.iter().any(|p| p.outcome.as_str() == "done"));
    // The commands saw their window, and nothing else ran.
    let runs = std::fs::read_to_string(env.path("runs")).unwrap();
    let mut seen: Vec<(&str, &str)> = runs.lines().map(|l| l.split_once(' ').unwrap()).collect();
    seen.sort();
    assert_eq!(seen, ok);
}

/// Hosts whose clocks disagree by hours agree on the window: it is the
/// store's clock that says which window it is.
fn skewed_hosts_agree_on_the_window(env: &TestEnv) {
    let now = now_ms() / 1000;
    let ran = Jobrun::new(env)
        .args([
            "run",
            "--once-per",
            "1h",
            "j",
            "--",
            "sh",
            "-c",
            "echo $JOBRUN_WINDOW",
        ])
        .envs(web(1))
        .env("JOBRUN_CLOCK_SKEW", "2h")
        .run();
    let start: i64 = ran.stdout.trim().parse().unwrap();
    assert_eq!(start % 3600, 0);
    assert!(
        (now - 3600..=now + 60).contains(&start),
        "window {start} is not the store's hour (now {now})"
    );
    let ok = env.history("j").remove(0);
    Jobrun::new(env)
        .args(["run", "--once-per", "1h", "j", "--", "touch", "ran"])
        .envs(web(2))
        .env("JOBRUN_CLOCK_SKEW", "-3h")
        .stderr_lines(1)
        .stderr_contains(format!(
            "j: window {start} done: pass {} on web1",
            ok.pass_id
        ))
        .run();
    assert!(!env.path("ran").exists());
}

both_stores!(
    jitter_is_drawn_in_its_range_from_the_seed,
    spread_is_stable_per_host_and_job,
    term_during_the_wait_ends_the_pass_at_once,
    timeout_ends_the_whole_group_and_exits_124,
    timeout_is_124_however_the_command_then_ends,
    a_wait_that_ran_out_is_wait_expired,
    stored_timed_out_rows_are_migrated,
    a_failed_claimer_is_taken_over_then_the_window_is_done,
    a_killed_claimer_is_taken_over_in_the_same_window,
    a_waiter_promoted_into_a_done_window_ends_done,
    windowed_passes_refuse_what_would_run_a_window_twice,
    three_hosts_run_a_job_once_per_window,
    a_windowed_pass_that_lost_its_lease_is_stopped,
);

mod postgres_only {
    #[test]
    fn skewed_hosts_agree_on_the_window() {
        if let Some(env) = crate::support::TestEnv::postgres() {
            super::skewed_hosts_agree_on_the_window(&env)
        }
    }
}

/// A windowed pass always runs with `--on-lost term`: one that lost its
/// lease is stopped before anyone can claim its window again.
fn a_windowed_pass_that_lost_its_lease_is_stopped(env: &TestEnv) {
    let child = script(
        env,
        "child.sh",
        "trap 'touch got-TERM; exit 0' TERM\n\
         touch ready\n\
         while :; do sleep 0.1; done",
    );
    let pid = env.start(
        "w",
        &["run", "--lease", "3s", "--window", "w", "j", "--", &child],
    );
    assert!(env.wait_for_file("ready", secs(10)));
    Jobrun::new(env)
        .args(["clear-locks", "--force", "j"])
        .stdout_contains("cleared 1")
        .stderr_lines(1)
        .stderr_contains("cleared by --force over a live holder")
        .run();
    assert!(
        env.wait_for_file("got-TERM", secs(5)),
        "{}",
        env.stderr_of("w")
    );
    assert_eq!(env.wait_exit(pid, secs(10)), Some(0));
    assert!(env.stderr_of("w").contains("--on-lost term"));
    assert_eq!(env.history("j")[0].outcome.as_str(), "lost-lease");
    // Its window may be claimed again.
    assert_eq!(window_of(env, "j").state.as_str(), "failed");
}
