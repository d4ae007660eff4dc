//! The lease through the real binary and store, with a 3 s lease (renewed
//! every second) unless a test needs room around a tick: it outlives its
//! window while the pass runs, it is given back the moment the pass ends,
//! an abandoned one lapses within one window, a lost one is logged once,
//! the max hold ends it, and the fencing token only ever grows.

use std::time::{Duration, Instant};

use jobrun::model::{Liveness, Outcome, State};

use crate::support::{alive, both_stores, kill, script, wait_until, TestEnv};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A pass that records its pid, says it is ready, and runs until the test
/// creates `go` (at most a minute), then exits with `code`.
fn waiting_pass(env: &TestEnv, code: i32) -> String {
    script(
        env,
        "pass.sh",
        &format!(
            "echo $$ > child.pid\n\
             touch ready\n\
             i=0\n\
             while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n\
             exit {code}"
        ),
    )
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

fn code(out: &std::process::Output) -> Option<i32> {
    out.status.code()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn lock_outlives_its_lease_and_a_rival_skips(env: &TestEnv) {
    let pass = waiting_pass(env, 0);
    let holder = env.start("holder", &["run", "--lease", "3s", "j", "--", &pass]);
    assert!(env.wait_for_file("ready", secs(10)), "pass never started");
    let token = env.slot("j").token;

    // Past its 3 s window the lease is still held, by the same token, and
    // renewed within the last window.
    assert!(
        wait_until(secs(15), || env
            .find_slot("j")
            .is_some_and(|s| s.held_ms > 3500)),
        "lease not held past its window: {:?}",
        env.find_job("j")
    );
    let s = env.slot("j");
    assert_eq!(s.token, token, "{s:?}");
    assert_eq!(s.holder.pid, holder as i32, "{s:?}");
    assert!(s.renewed_ago_ms < 2500, "not renewed: {s:?}");
    assert!(
        s.expires_in_ms > 0,
        "lease lapsed while the pass runs: {s:?}"
    );
    assert_eq!(s.state, State::Running, "{s:?}");
    let host = s.holder.host;
    let since = s.since;

    // A rival launch skips: exit 0 by default, without running its command,
    // and one line naming the holder.
    let out = env.run(&["run", "--lease", "3s", "j", "--", "touch", "rival-ran"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let line = stderr(&out);
    assert_eq!(line.lines().count(), 1, "{line}");
    for part in [
        "j: already running; skipping".to_string(),
        format!("held by {host}:{holder} "),
        format!("since {since}"),
        "renewed ".to_string(),
        format!("token {token} "),
    ] {
        assert!(line.contains(&part), "{part:?} missing from {line}");
    }
    // -E sets the conflict code; -q silences the line.
    let out = env.run(&["run", "-E", "3", "j", "--", "touch", "rival-ran"]);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("token {token} ")),
        "{}",
        stderr(&out)
    );
    let out = env.run(&["run", "-q", "-E", "3", "j", "--", "touch", "rival-ran"]);
    assert_eq!(code(&out), Some(3));
    assert_eq!(stderr(&out), "");
    assert!(
        !env.path("rival-ran").exists(),
        "a rival ran while the job was held"
    );

    std::fs::write(env.path("go"), "").unwrap();
    assert_eq!(env.wait_exit(holder, secs(10)), Some(0));
    assert_eq!(env.held("j"), 0);
    let outcomes: Vec<Outcome> = env.history("j").iter().map(|p| p.outcome).collect();
    // Newest start first: the rivals started after the holder.
    assert_eq!(
        outcomes,
        [
            Outcome::Skipped,
            Outcome::Skipped,
            Outcome::Skipped,
            Outcome::Ok
        ]
    );
}

/// A 12 s lease, renewed every 4 s: a wrapper that waited for its
/// renewer's next tick would exit seconds after its child, far past any
/// delay a loaded machine adds.
const ROOMY_LEASE: &str = "12s";

/// The wrapper is gone promptly once its child ends, having released the
/// slot, with no renewal after the release.
fn assert_ended_promptly(env: &TestEnv, pid: u32, end_marker: &str, want: i32) {
    assert!(env.wait_for_file(end_marker, secs(15)), "child never ended");
    let ended = Instant::now();
    let code = env.wait_exit(pid, secs(10));
    let took = ended.elapsed();
    assert_eq!(code, Some(want));
    // Renewals tick every 4 s, and each child here ends just after one (or
    // before the first): an exit that waited for the next tick would take
    // most of 4 s.
    assert!(took < secs(2), "wrapper exited {took:?} after its child");
    assert_eq!(
        env.held("j"),
        0,
        "lease not released: {:?}",
        env.find_job("j")
    );
}

fn renewer_is_gone_after_a_normal_exit_and_a_failure(env: &TestEnv) {
    // A pass that ends before the first renewal tick.
    let quick = script(env, "quick.sh", "touch quick.end\nexit 0");
    let pid = env.start("quick", &["run", "--lease", ROOMY_LEASE, "j", "--", &quick]);
    assert_ended_promptly(env, pid, "quick.end", 0);

    // A pass that fails after it has been renewed at least once.
    let slow = script(
        env,
        "slow.sh",
        "touch slow.ready\n\
         i=0\n\
         while [ ! -e slow.go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n\
         touch slow.end\n\
         exit 3",
    );
    let pid = env.start("slow", &["run", "--lease", ROOMY_LEASE, "j", "--", &slow]);
    assert!(env.wait_for_file("slow.ready", secs(10)));
    assert!(
        wait_until(secs(15), || env
            .find_slot("j")
            .is_some_and(|s| s.held_ms - s.renewed_ago_ms > 500)),
        "never renewed: {:?}",
        env.find_job("j")
    );
    std::fs::write(env.path("slow.go"), "").unwrap();
    assert_ended_promptly(env, pid, "slow.end", 3);

    // The slot is free at once for the next pass, and neither wrapper saw a
    // renewal go wrong (a renewal after the release would find the row gone).
    let out = env.run(&["run", "--lease", "3s", "j", "--", "true"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    for log in ["quick", "slow"] {
        let err = env.stderr_of(log);
        assert!(!err.contains("lease lost"), "{log}: {err}");
        assert!(!err.contains("renewal"), "{log}: {err}");
        assert!(!err.contains("no longer ours"), "{log}: {err}");
    }
    let outcomes: Vec<Outcome> = env.history("j").iter().map(|p| p.outcome).collect();
    assert_eq!(outcomes, [Outcome::Ok, Outcome::Failed, Outcome::Ok]);
}

fn abandoned_holder_frees_within_one_window(env: &TestEnv) {
    // The holder claims another machine, so no evidence can judge it: only
    // its lease decides. A 6 s lease, renewed every 2 s: room for a loaded
    // machine to try a rival within it, and a lapse after one window still
    // far from two.
    let pass = waiting_pass(env, 0);
    let holder = env.start_with(
        "holder",
        &["run", "--lease", "6s", "j", "--", &pass],
        &[
            ("JOBRUN_HOST", "other-host"),
            ("JOBRUN_BOOT_ID", "other-boot"),
        ],
    );
    assert!(env.wait_for_file("ready", secs(10)));
    let child = env.pid_in("child.pid");
    assert!(
        wait_until(secs(15), || env
            .find_slot("j")
            .is_some_and(|s| s.held_ms - s.renewed_ago_ms > 500)),
        "never renewed: {:?}",
        env.find_job("j")
    );
    let token = env.slot("j").token;

    // Abandon it: no unwinding, no release.
    kill(holder as i32, libc::SIGKILL);
    kill(child, libc::SIGKILL);
    let killed = Instant::now();
    assert_eq!(env.wait_exit(holder, secs(5)), Some(137));
    assert!(wait_until(secs(5), || !alive(child)));
    let before = Instant::now();
    let s = env.slot("j");
    let read = before + (Instant::now() - before) / 2;
    let last_renewal = read - Duration::from_millis(s.renewed_ago_ms as u64);
    assert_eq!(s.token, token, "{s:?}");
    assert_eq!(s.verdict.liveness, Liveness::Unknown, "{s:?}");

    // Within its lease a rival skips, naming the abandoned holder.
    let out = env.run(&[
        "run",
        "-E",
        "3",
        "--lease",
        "6s",
        "j",
        "--",
        "touch",
        "rival-ran",
    ]);
    assert!(
        last_renewal.elapsed() < Duration::from_millis(5800),
        "the test was too slow to try a rival within the lease"
    );
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("other-host:{holder}")),
        "{}",
        stderr(&out)
    );

    // Once the lease lapses, the next rival frees the slot and runs.
    let mut freeing = String::new();
    let freed = wait_until(secs(10), || {
        let out = env.run(&[
            "run",
            "-q",
            "-E",
            "3",
            "--lease",
            "6s",
            "j",
            "--",
            "touch",
            "rival-ran",
        ]);
        freeing = stderr(&out);
        code(&out) == Some(0)
    });
    assert!(
        freed,
        "abandoned lease never freed: {:?}",
        env.find_job("j")
    );
    let after_renewal = last_renewal.elapsed();
    let after_kill = killed.elapsed();
    assert!(env.path("rival-ran").exists());
    assert!(
        (Duration::from_millis(5900)..=secs(8)).contains(&after_renewal),
        "freed {after_renewal:?} after the last renewal (lease 6s, tick 2s)"
    );
    assert!(
        after_kill <= secs(8),
        "freed {after_kill:?} after the holder died"
    );
    assert!(
        freeing.contains(&format!("freed slot 0 (token {token})")),
        "{freeing}"
    );
    assert!(freeing.contains("lease lapsed"), "{freeing}");
    assert_eq!(env.held("j"), 0);
}

fn deleted_lease_is_logged_once_and_the_pass_finishes(env: &TestEnv) {
    let pass = waiting_pass(env, 5);
    let holder = env.start("holder", &["run", "--lease", "3s", "j", "--", &pass]);
    assert!(env.wait_for_file("ready", secs(10)));
    let child = env.pid_in("child.pid");
    let token = env.slot("j").token;

    let out = env.run(&["clear-locks", "--force", "j"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(env.held("j"), 0);
    assert!(
        wait_until(secs(5), || env.stderr_of("holder").contains("lease lost")),
        "loss never logged: {}",
        env.stderr_of("holder")
    );
    // Logged once: several more renewal ticks add nothing.
    assert!(
        !wait_until(Duration::from_millis(2500), || count(
            &env.stderr_of("holder"),
            "lease lost"
        ) > 1),
        "{}",
        env.stderr_of("holder")
    );
    // The pass runs on (--on-lost continue), and the job is free for others,
    // under a larger token.
    assert!(alive(child), "child stopped after the lease was lost");
    assert_eq!(env.wait_exit(holder, Duration::ZERO), None);
    let out = env.run(&["run", "j", "--", "sh", "-c", "echo $JOBRUN_TOKEN"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let next: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(next > token, "token {next} after {token}");

    std::fs::write(env.path("go"), "").unwrap();
    assert_eq!(env.wait_exit(holder, secs(10)), Some(5));
    let err = env.stderr_of("holder");
    assert_eq!(count(&err, "lease lost"), 1, "{err}");
    let first = env
        .history("j")
        .into_iter()
        .find(|p| p.token == Some(token))
        .expect("first pass recorded");
    assert_eq!(first.outcome, Outcome::LostLease, "{first:?}");
    assert_eq!(first.exit_code, Some(5), "{first:?}");
}

fn max_hold_ends_the_lock_of_a_running_pass(env: &TestEnv) {
    let pass = waiting_pass(env, 0);
    let started = Instant::now();
    let holder = env.start(
        "holder",
        &["run", "--lease", "3s", "--max-hold", "4s", "j", "--", &pass],
    );
    assert!(env.wait_for_file("ready", secs(10)));
    let child = env.pid_in("child.pid");
    let token = env.slot("j").token;

    // A rival takes the job while the first pass still runs.
    let mut freeing = String::new();
    let taken = wait_until(secs(15), || {
        let out = env.run(&["run", "-q", "-E", "3", "j", "--", "touch", "rival-ran"]);
        freeing = stderr(&out);
        code(&out) == Some(0)
    });
    let at = started.elapsed();
    assert!(taken, "never freed: {:?}", env.find_job("j"));
    assert!(env.path("rival-ran").exists());
    assert!(
        at >= secs(4),
        "taken {at:?} after start, before the 4s max hold"
    );
    assert!(at < secs(8), "taken {at:?} after start");
    assert!(freeing.contains("past its max hold"), "{freeing}");
    assert!(alive(child), "the first pass was stopped");
    assert_eq!(
        env.wait_exit(holder, Duration::ZERO),
        None,
        "the first wrapper ended"
    );

    assert!(
        wait_until(secs(3), || env
            .stderr_of("holder")
            .contains("max hold 4s reached")),
        "{}",
        env.stderr_of("holder")
    );
    std::fs::write(env.path("go"), "").unwrap();
    assert_eq!(env.wait_exit(holder, secs(10)), Some(0));
    let first = env
        .history("j")
        .into_iter()
        .find(|p| p.token == Some(token))
        .expect("first pass recorded");
    assert_eq!(first.outcome, Outcome::LostLease, "{first:?}");
    assert_eq!(first.exit_code, Some(0), "{first:?}");
    assert!(first.duration_ms >= 4000, "{first:?}");
}

fn fencing_token_grows_across_passes_and_pruning(env: &TestEnv) {
    let token = || {
        let out = env.run(&[
            "run",
            "--keep-history",
            "2",
            "j",
            "--",
            "sh",
            "-c",
            "echo $JOBRUN_TOKEN",
        ]);
        assert_eq!(code(&out), Some(0), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let mut tokens: Vec<i64> = (0..6).map(|_| token()).collect();
    let history = env.history("j");
    assert_eq!(history.len(), 2, "history not pruned to 2");
    let kept: Vec<i64> = history.iter().map(|p| p.token.unwrap()).collect();
    assert_eq!(kept, [tokens[5], tokens[4]]);
    // A failed pass and a skipped one do not reuse a token either.
    let out = env.run(&["run", "--keep-history", "2", "j", "--", "false"]);
    assert_eq!(code(&out), Some(1));
    tokens.push(token());
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );
    assert_eq!(env.history("j").len(), 2);
}

both_stores!(
    lock_outlives_its_lease_and_a_rival_skips,
    renewer_is_gone_after_a_normal_exit_and_a_failure,
    abandoned_holder_frees_within_one_window,
    deleted_lease_is_logged_once_and_the_pass_finishes,
    max_hold_ends_the_lock_of_a_running_pass,
    fencing_token_grows_across_passes_and_pruning,
);
