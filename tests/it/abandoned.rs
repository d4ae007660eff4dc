//! Every pass is in history exactly once, whoever ends it: a pass killed
//! without unwinding is recorded `abandoned` by whoever frees its slot (the
//! next pass, clear-locks, stop-due) or removes its queue row, and a holder
//! evicted while alive replaces that row with how it really ended.

use std::time::Duration;

use jobrun::model::{Outcome, PassRecord};

use crate::support::{alive, both_stores, kill, kill_pass, start_pass, text, wait_until, TestEnv};

const WITHIN: Duration = Duration::from_secs(20);

/// The history rows of pass `pass_id`.
fn rows_of(env: &TestEnv, job: &str, pass_id: &str) -> Vec<PassRecord> {
    env.history(job)
        .into_iter()
        .filter(|p| p.pass_id == pass_id)
        .collect()
}

/// The one row of `pass_id`: abandoned, freed by a command starting with
/// `by`, for `reason`.
fn assert_abandoned(env: &TestEnv, job: &str, pass_id: &str, by: &str, reason: &str) {
    let rows = rows_of(env, job, pass_id);
    assert_eq!(rows.len(), 1, "one row per pass: {rows:#?}");
    let p = &rows[0];
    assert_eq!(p.outcome, Outcome::Abandoned, "{p:#?}");
    let freed = p.freed.as_ref().expect("who freed it");
    assert!(freed.by.starts_with(by), "{freed:?}");
    assert_eq!(freed.reason, reason, "{freed:?}");
}

fn a_killed_pass_freed_by_the_next_pass_is_recorded_once(env: &TestEnv) {
    let p = start_pass(env, "j", "first", "60s", &[]);
    let killed = env.slot("j").pass_id;
    kill_pass(env, p);
    let out = env.run(&["run", "j", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("freed slot 0"),
        "{}",
        text(&out.stderr)
    );
    assert_abandoned(env, "j", &killed, "pass ", "dead");
    let h = env.history("j");
    assert_eq!(h.len(), 2, "{h:#?}");
    assert!(h.iter().any(|p| p.outcome == Outcome::Ok));
    // The job's last pass is the one that ran last.
    assert_eq!(env.job("j").last.map(|l| l.outcome).as_deref(), Some("ok"));
}

fn a_killed_pass_freed_by_clear_locks_is_recorded_once(env: &TestEnv) {
    let p = start_pass(env, "j", "first", "60s", &[]);
    let killed = env.slot("j").pass_id;
    kill_pass(env, p);
    let out = env.run(&["clear-locks", "j"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("cleared 1"),
        "{}",
        text(&out.stdout)
    );
    assert_abandoned(env, "j", &killed, "clear-locks on ", "dead");
    // What the status line says of the job.
    assert_eq!(
        env.job("j").last.map(|l| l.outcome).as_deref(),
        Some("abandoned")
    );
}

/// stop-due frees an orphaned pass it stopped (its wrapper was killed, its
/// command ends on the forwarded TERM): the pass is recorded once.
fn an_orphaned_pass_freed_by_stop_due_is_recorded_once(env: &TestEnv) {
    let p = start_pass(env, "j", "orphan", "60s", &[]);
    let pass_id = env.slot("j").pass_id;
    kill(p.wrapper as i32, libc::SIGKILL);
    assert!(wait_until(WITHIN, || !alive(p.wrapper as i32)));
    let out = env.run(&["stop-due", "--all", "--wait", "10s"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("freed, its holder is dead"));
    assert_abandoned(env, "j", &pass_id, "stop-due on ", "dead");
}

/// A live holder forced out with clear-locks --force is recorded as
/// abandoned at once; when it ends by itself it replaces that row with how
/// it really ended, keeping who forced it out.
fn a_forced_out_holder_ends_in_one_row(env: &TestEnv) {
    let p = start_pass(env, "j", "first", "60s", &[]);
    let pass_id = env.slot("j").pass_id;
    let out = env.run(&["clear-locks", "--force", "j"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_abandoned(env, "j", &pass_id, "clear-locks --force on ", "forced");
    std::fs::write(env.path("first.stop"), b"").unwrap();
    assert_eq!(env.wait_exit(p.wrapper, WITHIN), Some(0));
    assert!(env
        .stderr_of("first")
        .contains("lock was no longer ours at release"));
    let rows = rows_of(env, "j", &pass_id);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0].outcome, Outcome::Ok);
    assert_eq!(
        rows[0].freed.as_ref().map(|f| f.reason.as_str()),
        Some("forced")
    );
}

/// A queued pass killed without unwinding is a ghost: whoever removes it
/// records it; it never ran.
fn a_ghost_waiter_removed_is_recorded_once(env: &TestEnv) {
    let holder = start_pass(env, "j", "holder", "60s", &[]);
    let waiter = env.start("waiter", &["run", "--wait", "60s", "j", "--", "true"]);
    assert!(wait_until(WITHIN, || env.job("j").queue.length == 1));
    let ghost = env.job("j").queue.waiters[0].pass_id.clone();
    // The wrapper and its held command, at once.
    kill(waiter as i32, libc::SIGKILL);
    assert!(env.wait_exit(waiter, WITHIN).is_some());
    assert!(wait_until(WITHIN, || env
        .job("j")
        .queue
        .waiters
        .first()
        .is_some_and(
            |w| w.verdict.liveness == jobrun::model::Liveness::Dead
        )));
    let out = env.run(&["clear-locks", "j"]);
    assert!(
        text(&out.stdout).contains("removed 1 ghost waiter(s)"),
        "{}",
        text(&out.stdout)
    );
    assert_abandoned(env, "j", &ghost, "clear-locks on ", "dead");
    let row = &rows_of(env, "j", &ghost)[0];
    assert_eq!(row.token, None, "a waiter never took a slot");
    assert_eq!(row.duration_ms, 0);
    // The summary counts it, and not as a pass that ran.
    let out = env.run(&["history", "j", "--json"]);
    let report: jobrun::model::HistoryReport = serde_json::from_slice(&out.stdout).unwrap();
    let summary = &report.summary[0];
    assert_eq!(summary.outcomes.get("abandoned"), Some(&1));
    assert_eq!(summary.count, 0, "{summary:?}");
    std::fs::write(env.path("holder.stop"), b"").unwrap();
    assert_eq!(env.wait_exit(holder.wrapper, WITHIN), Some(0));
}

both_stores!(
    a_killed_pass_freed_by_the_next_pass_is_recorded_once,
    a_killed_pass_freed_by_clear_locks_is_recorded_once,
    an_orphaned_pass_freed_by_stop_due_is_recorded_once,
    a_forced_out_holder_ends_in_one_row,
    a_ghost_waiter_removed_is_recorded_once,
);
