//! `jobrun run`: exit codes, the child's environment, the lease.

use std::time::{Duration, Instant};

use crate::support::procfs::parent_of;
use crate::support::{alive, both_stores, exits, kill, script, wait_until, Jobrun, TestEnv};

/// A command that cannot start: exit `code` and one line saying why.
fn cannot_start(env: &TestEnv, code: i32, command: &str, says: &str) {
    Jobrun::new(env)
        .args(["run", "j", "--", command])
        .code(code)
        .stderr_lines(1)
        .stderr_contains(format!("jobrun: j: {command}: {says}"))
        .run();
}

fn exit_codes_pass_through(env: &TestEnv) {
    exits(env, 0, &["run", "j", "--", "true"]);
    exits(env, 7, &["run", "j", "--", "sh", "-c", "exit 7"]);
    exits(env, 143, &["run", "j", "--", "sh", "-c", "kill -TERM $$"]);
    cannot_start(env, 127, "/nonexistent/cmd", "command not found");
    cannot_start(env, 126, "/etc/hostname", "cannot execute");
    Jobrun::new(env)
        .args(["run", "j", "--lease", "1s", "--", "true"])
        .refused()
        .stderr_contains("--lease 1s is too short")
        .run();
    // Every pass that reached the store is recorded, nothing left held.
    assert_eq!(env.held("j"), 0);
    assert_eq!(
        outcomes(env, "j"),
        ["spawn-failed", "spawn-failed", "killed", "failed", "ok"]
    );
}

fn child_sees_job_token_slot_and_pass(env: &TestEnv) {
    let line = Jobrun::new(env)
        .args(["run", "feeds.poll", "--", "sh", "-c"])
        .arg("echo $JOBRUN_JOB $JOBRUN_TOKEN $JOBRUN_SLOT $JOBRUN_PASS")
        .run()
        .stdout;
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!((f[0], f[2]), ("feeds.poll", "0"), "{line}");
    assert_eq!(f[3].len(), 12, "{line}");
    // The token the child saw is the one history recorded for the pass.
    let pass = &env.history("feeds.poll")[0];
    assert_eq!(
        Some(f[1].to_string()),
        pass.token.map(|t| t.to_string()),
        "{line} {pass:?}"
    );
    assert_eq!(f[3], pass.pass_id, "{line} {pass:?}");
}

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

/// The process state letter in /proc (None once the pid is gone).
fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 2..].chars().next()
}

fn more_exit_codes(env: &TestEnv) {
    // Any code N passes through, the extremes included.
    exits(env, 1, &["run", "j", "--", "false"]);
    exits(env, 255, &["run", "j", "--", "sh", "-c", "exit 255"]);
    // 128+N for other signals than TERM.
    exits(env, 137, &["run", "j", "--", "sh", "-c", "kill -KILL $$"]);
    exits(env, 130, &["run", "j", "--", "sh", "-c", "kill -INT $$"]);
    // Not found on PATH (not only by path), and a directory is not
    // executable.
    cannot_start(env, 127, "jobrun-no-such-command", "command not found");
    cannot_start(env, 126, "/", "cannot execute");
    // jobrun's own failure: a settings error, before anything ran.
    Jobrun::new(env)
        .args(["run", "--max-hold", "1s", "j", "--", "true"])
        .refused()
        .stderr_contains("--max-hold 1s is shorter than --lease")
        .run();
    assert_eq!(
        outcomes(env, "j"),
        [
            "spawn-failed",
            "spawn-failed",
            "killed",
            "killed",
            "failed",
            "failed"
        ]
    );
    assert_eq!(env.held("j"), 0);
}

/// A child that traps `sig`: it notes the signal, takes a moment to finish,
/// notes its end, then dies of that same signal.
fn trapping_child(env: &TestEnv, sig: &str) -> String {
    script(
        env,
        "child.sh",
        &format!(
            "echo $$ > child.pid\n\
             trap 'touch got-{sig}; sleep 0.5; touch child-done; trap - {sig}; kill -{sig} $$' {sig}\n\
             touch ready\n\
             i=0\n\
             while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"
        ),
    )
}

fn forwarded(env: &TestEnv, sig: i32, name: &str, want: i32) {
    let child = trapping_child(env, name);
    let pid = env.start("w", &["run", "j", "--", &child]);
    assert!(env.wait_for_file("ready", secs(10)));
    let child_pid = env.pid_in("child.pid");
    kill(pid as i32, sig);
    assert_eq!(
        env.wait_exit(pid, secs(10)),
        Some(want),
        "{}",
        env.stderr_of("w")
    );
    // The child saw the signal, and the wrapper exited only after it ended.
    assert!(env.path(format!("got-{name}").as_str()).exists());
    assert!(
        env.path("child-done").exists(),
        "wrapper exited before its child"
    );
    assert!(!alive(child_pid));
    assert_eq!(outcomes(env, "j"), ["stopped"]);
    assert_eq!(env.held("j"), 0);
}

fn term_reaches_the_child_and_the_wrapper_exits_143(env: &TestEnv) {
    forwarded(env, libc::SIGTERM, "TERM", 143);
}

fn int_reaches_the_child_and_the_wrapper_exits_130(env: &TestEnv) {
    forwarded(env, libc::SIGINT, "INT", 130);
}

fn child_ignoring_term_is_killed_after_kill_after(env: &TestEnv) {
    let child = script(
        env,
        "child.sh",
        "echo $$ > child.pid\n\
         trap '' TERM\n\
         touch ready\n\
         i=0\n\
         while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
    );
    let pid = env.start("w", &["run", "--kill-after", "2s", "j", "--", &child]);
    assert!(env.wait_for_file("ready", secs(10)));
    let child_pid = env.pid_in("child.pid");
    let sent = Instant::now();
    kill(pid as i32, libc::SIGTERM);
    assert_eq!(
        env.wait_exit(pid, secs(10)),
        Some(137),
        "{}",
        env.stderr_of("w")
    );
    let took = sent.elapsed();
    // Not before the 2 s grace period; after it, only the release and the
    // record (a loaded machine's second or so), never a second grace period.
    assert!(
        (secs(2)..secs(4)).contains(&took),
        "KILL came {took:?} after TERM (--kill-after 2s)"
    );
    assert!(!alive(child_pid));
    assert!(
        env.stderr_of("w").contains("sending KILL"),
        "{}",
        env.stderr_of("w")
    );
    assert_eq!(env.held("j"), 0);
}

fn on_lost_term_stops_the_child_when_the_lease_is_cleared(env: &TestEnv) {
    let child = trapping_child(env, "TERM");
    let pid = env.start(
        "w",
        &[
            "run",
            "--lease",
            "3s",
            "--on-lost",
            "term",
            "j",
            "--",
            &child,
        ],
    );
    assert!(env.wait_for_file("ready", secs(10)));
    Jobrun::new(env)
        .args(["clear-locks", "--force", "j"])
        .stdout_contains("cleared 1")
        .stderr_lines(1)
        .stderr_contains("cleared by --force over a live holder")
        .run();
    // The renewer notices at its next tick (every second).
    assert!(
        env.wait_for_file("got-TERM", secs(5)),
        "{}",
        env.stderr_of("w")
    );
    assert_eq!(env.wait_exit(pid, secs(10)), Some(143));
    let err = env.stderr_of("w");
    assert_eq!(err.matches("lease lost").count(), 1, "{err}");
    assert!(err.contains("--on-lost term"), "{err}");
    assert_eq!(outcomes(env, "j"), ["lost-lease"]);
}

fn no_zombie_is_left_once_the_wrapper_has_ended_the_group(env: &TestEnv) {
    // The child exits at once, leaving a process that ignores TERM in its
    // group: the wrapper spends --kill-after ending it. Meanwhile the child
    // stays the wrapper's unreaped zombie (so the group's id cannot be
    // reused while the wrapper signals it); it is reaped once the group is
    // ended, and nothing is left when the wrapper exits.
    let child = script(
        env,
        "child.sh",
        "echo $$ > child.pid\n\
         trap '' TERM\n\
         sleep 60 &\n\
         echo $! > leftover.pid\n\
         touch ready\n\
         exit 4",
    );
    // 5 s of --kill-after: the child must have exited (within 4 s, however
    // loaded the machine) while the wrapper still ends its group.
    let pid = env.start("w", &["run", "--kill-after", "5s", "j", "--", &child]);
    assert!(env.wait_for_file("ready", secs(10)));
    let child_pid = env.pid_in("child.pid");
    let leftover = env.pid_in("leftover.pid");
    assert!(
        wait_until(secs(4), || proc_state(child_pid) == Some('Z')),
        "child pid {child_pid} is {:?} while its wrapper ends the group",
        proc_state(child_pid)
    );
    assert_eq!(
        env.wait_exit(pid, Duration::ZERO),
        None,
        "wrapper did not wait for the group"
    );
    assert!(alive(leftover));
    assert_eq!(env.wait_exit(pid, secs(10)), Some(4));
    assert_eq!(proc_state(child_pid), None, "the child was left a zombie");
    assert!(
        wait_until(secs(2), || !alive(leftover)),
        "leftover {leftover} survived"
    );
    let err = env.stderr_of("w");
    assert!(err.contains("left processes"), "{err}");
    assert!(err.contains("sending KILL"), "{err}");
}

fn the_lease_is_renewed_while_leftovers_are_ended(env: &TestEnv) {
    // The child exits long before the first renewal is due (2 s into a
    // 6 s lease), leaving a process that ignores TERM: the pass holds its
    // slot for --kill-after, longer than its lease, and renews it meanwhile.
    let child = script(
        env,
        "child.sh",
        "trap '' TERM\n\
         sleep 60 &\n\
         echo $! > leftover.pid\n\
         touch ready\n\
         exit 0",
    );
    let pid = env.start(
        "w",
        &[
            "run",
            "--lease",
            "6s",
            "--kill-after",
            "60s",
            "j",
            "--",
            &child,
        ],
    );
    assert!(env.wait_for_file("ready", secs(10)));
    let leftover = env.pid_in("leftover.pid");
    // Past its first lease window, the pass still holds a live lease.
    assert!(
        wait_until(secs(20), || env
            .find_slot("j")
            .is_some_and(|s| s.held_ms > 7_000)),
        "{:?}",
        env.find_job("j")
    );
    let slot = env.slot("j");
    assert!(
        slot.held_ms - slot.renewed_ago_ms > 500 && slot.expires_in_ms > 0,
        "not renewed while its leftovers were ended: {slot:?}"
    );
    assert!(alive(leftover));
    kill(leftover, libc::SIGKILL);
    assert_eq!(env.wait_exit(pid, secs(10)), Some(0));
    let err = env.stderr_of("w");
    assert!(err.contains("left processes"), "{err}");
    assert!(!err.contains("lease"), "{err}");
    assert_eq!(outcomes(env, "j"), ["ok"]);
}

fn leftovers_of_the_group_end_with_the_pass(env: &TestEnv) {
    let child = script(
        env,
        "child.sh",
        "sleep 60 &\n\
         echo $! > leftover.pid\n\
         touch ready\n\
         exit 0",
    );
    let pid = env.start("w", &["run", "j", "--", &child]);
    assert!(env.wait_for_file("ready", secs(10)));
    let leftover = env.pid_in("leftover.pid");
    assert_eq!(env.wait_exit(pid, secs(10)), Some(0));
    assert!(
        wait_until(secs(2), || !alive(leftover)),
        "leftover {leftover} survived the pass"
    );
    assert_eq!(outcomes(env, "j"), ["ok"]);
}

fn orphans_of_the_command_are_adopted_and_reaped_at_once(env: &TestEnv) {
    // The wrapper is the subreaper of what the command orphans: a process
    // of the group, a daemon in a session of its own, and a job of a job
    // control shell (a group of its own, as `timeout` makes), all come to
    // it. Each that ends while the pass runs on is reaped then, not left a
    // zombie under the wrapper until the pass ends.
    let child = script(
        env,
        "child.sh",
        "sh -c 'sleep 60 & echo $! > member.pid'\n\
         sh -c 'setsid sleep 60 & echo $! > daemon.pid'\n\
         bash -c 'set -m; sleep 60 & echo $! > job.pid' 2>/dev/null\n\
         touch ready\n\
         exec sleep 60",
    );
    let pid = env.start("w", &["run", "j", "--", &child]);
    assert!(
        env.wait_for_file("ready", secs(10)),
        "{}",
        env.stderr_of("w")
    );
    for name in ["member.pid", "daemon.pid", "job.pid"] {
        let orphan = env.pid_in(name);
        assert_eq!(parent_of(orphan), pid as i32, "{name}: pid {orphan}");
        kill(orphan, libc::SIGKILL);
        assert!(
            wait_until(secs(5), || proc_state(orphan).is_none()),
            "{name}: pid {orphan} is {:?} while the pass runs",
            proc_state(orphan)
        );
    }
    assert_eq!(
        env.wait_exit(pid, Duration::ZERO),
        None,
        "the pass ended early"
    );
    kill(pid as i32, libc::SIGTERM);
    assert_eq!(env.wait_exit(pid, secs(10)), Some(143));
}

both_stores!(
    exit_codes_pass_through,
    child_sees_job_token_slot_and_pass,
    more_exit_codes,
    term_reaches_the_child_and_the_wrapper_exits_143,
    int_reaches_the_child_and_the_wrapper_exits_130,
    child_ignoring_term_is_killed_after_kill_after,
    on_lost_term_stops_the_child_when_the_lease_is_cleared,
    no_zombie_is_left_once_the_wrapper_has_ended_the_group,
    leftovers_of_the_group_end_with_the_pass,
    the_lease_is_renewed_while_leftovers_are_ended,
    orphans_of_the_command_are_adopted_and_reaped_at_once,
);

/// A pass whose command ends before its first renewal is due runs on one
/// thread: its signals, its command's exit and its renewer need none of
/// their own until then (SQLite: the PostgreSQL client runs threads of its
/// own).
#[test]
fn a_short_pass_runs_on_one_thread() {
    let env = TestEnv::sqlite();
    let out = Jobrun::new(&env)
        .args(["run", "j", "--", "sh", "-c", "ls /proc/$PPID/task | wc -l"])
        .run()
        .stdout;
    assert_eq!(
        out.trim(),
        "1",
        "threads of the wrapper while its command ran"
    );
}
