//! What an operator reads and tidies: `status` and `history` name the store
//! they read and refuse a job it never saw; history is ordered by start and
//! filtered; `forget` removes only a free job, and a job seen again after it
//! still gets larger fencing tokens; pauses have owners.

use std::fs;
use std::time::Duration;

use jobrun::model::{HistoryReport, PassRecord, State, StatusReport};

use crate::support::{
    both_stores, exits, kill, start_pass, store_exec, text, wait_until, Jobrun, Kind, TestEnv,
};

/// The store as `status` names it for this env (a URL without password).
fn shown_store(env: &TestEnv) -> String {
    env.db.clone()
}

/// `status` and `history` say which store they read, first thing; a job
/// the store never saw is an error naming it (exit 1), not an empty table.
fn status_and_history_name_the_store(env: &TestEnv) {
    exits(env, 0, &["run", "known", "--", "true"]);
    for args in [&["status"][..], &["history"][..]] {
        let said = exits(env, 0, args).stdout;
        assert_eq!(
            said.lines().next(),
            Some(format!("store: {}", shown_store(env)).as_str()),
            "{args:?}: {said}"
        );
        let json = Jobrun::new(env).args(args).arg("--json");
        let store = if args[0] == "status" {
            json.json::<StatusReport>().store
        } else {
            json.json::<HistoryReport>().store
        };
        assert_eq!(store, shown_store(env), "{args:?}");
    }
    for cmd in ["status", "history"] {
        Jobrun::new(env)
            .args([cmd, "nosuch.job"])
            .code(1)
            .stderr_contains("nosuch.job: store ")
            .stderr_contains("does not know this job")
            .run();
    }
    // A known job still shows, beside the unknown one that fails.
    Jobrun::new(env)
        .args(["status", "known", "nosuch.job"])
        .code(1)
        .stdout_contains("known")
        .stderr_lines(1)
        .stderr_contains("nosuch.job: store ")
        .run();
    if env.kind == Kind::Postgres {
        // A password in the URL never shows (the test server trusts anyone).
        let with_password = env.db.replacen("postgres@", "postgres:hunter2@", 1);
        let out = Jobrun::new(env)
            .args(["status", "--json"])
            .env("JOBRUN_DB", &with_password)
            .code(0)
            .stdout_lacks("hunter2")
            .stderr_lacks("hunter2")
            .run();
        let v: StatusReport = out.json();
        assert!(v.store.contains("127.0.0.1"), "{v:?}");
    }
}

/// Move a recorded pass's start back by `ms` (as if it ran that long ago).
fn age_pass(env: &TestEnv, pass_id: &str, ms: i64) {
    store_exec(
        env,
        &format!(
            "UPDATE history SET started_ms = started_ms - {ms}, ended_ms = ended_ms - {ms} \
             WHERE pass_id = '{pass_id}'"
        ),
    );
}

fn history_json(env: &TestEnv, args: &[&str]) -> Vec<PassRecord> {
    Jobrun::new(env)
        .args(["history", "--json"])
        .args(args)
        .code(0)
        .json::<HistoryReport>()
        .passes
}

fn jobs_of(passes: &[PassRecord]) -> Vec<String> {
    passes.iter().map(|p| p.job.clone()).collect()
}

/// History lists passes by start time, newest first (`--reverse`: oldest
/// first), whatever order they ended in; `--since` and `--outcome` filter.
fn history_is_ordered_by_start_and_filtered(env: &TestEnv) {
    // "long" starts first and ends last; "short" starts and ends meanwhile.
    let long = start_pass(env, "long", "long", "60s", &[]);
    // The store's clock has moved on since long started: short starts
    // later, to the millisecond.
    assert!(wait_until(Duration::from_secs(10), || env
        .slot("long")
        .held_ms
        >= 2));
    let out = env.run(&["run", "short", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    fs::write(env.path("long.stop"), "").unwrap();
    assert_eq!(
        env.wait_exit(long.wrapper, Duration::from_secs(10)),
        Some(0)
    );

    assert_eq!(jobs_of(&history_json(env, &[])), ["short", "long"]);
    assert_eq!(
        jobs_of(&history_json(env, &["--reverse"])),
        ["long", "short"]
    );
    let out = env.run(&["history"]);
    let said = text(&out.stdout);
    let rows: Vec<&str> = said
        .lines()
        .filter(|l| l.contains(" short ") || l.contains(" long "))
        .take(2)
        .collect();
    assert!(
        rows[0].contains(" short ") && rows[1].contains(" long "),
        "{said}"
    );
    // --limit keeps the newest.
    assert_eq!(jobs_of(&history_json(env, &["--limit", "1"])), ["short"]);
    assert_eq!(
        jobs_of(&history_json(env, &["--limit", "1", "--reverse"])),
        ["short"]
    );
    assert_eq!(
        jobs_of(&history_json(env, &["--outcome", "failed"])),
        ["short"]
    );
    assert_eq!(jobs_of(&history_json(env, &["--outcome", "ok"])), ["long"]);
    let long_pass = history_json(env, &["long"])[0].pass_id.clone();
    age_pass(env, &long_pass, 2 * 3600 * 1000);
    assert_eq!(jobs_of(&history_json(env, &["--since", "1h"])), ["short"]);
    assert_eq!(
        jobs_of(&history_json(env, &["--since", "3h"])),
        ["short", "long"]
    );
    let out = env.run(&["history", "--outcome", "fine"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("fine"), "{}", text(&out.stderr));
    let out = env.run(&["history", "--since", "soon"]);
    assert_eq!(out.status.code(), Some(125));
}

fn token_of(env: &TestEnv, job: &str) -> i64 {
    env.history(job)
        .iter()
        .filter_map(|p| p.token)
        .max()
        .unwrap_or_else(|| panic!("no token for {job}"))
}

/// `forget` refuses a job that is held, queued or paused, naming why;
/// removes a free one with its history; a job seen again afterwards gets
/// a larger token than any before.
fn forget_removes_only_free_jobs_and_tokens_keep_growing(env: &TestEnv) {
    assert_eq!(env.run(&["run", "j", "--", "true"]).status.code(), Some(0));
    let before = token_of(env, "j");

    let out = env.run(&["forget", "nosuch.job"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("nosuch.job: not forgotten: store"),
        "{}",
        text(&out.stderr)
    );

    let p = start_pass(env, "j", "held", "60s", &[]);
    let out = env.run(&["forget", "j"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("j: not forgotten: a pass holds it"),
        "{}",
        text(&out.stderr)
    );
    fs::write(env.path("held.stop"), "").unwrap();
    assert_eq!(env.wait_exit(p.wrapper, Duration::from_secs(10)), Some(0));

    assert!(env
        .run(&["pause", "--new", "j", "--as", "repair"])
        .status
        .success());
    let waiter = env.start("waiter", &["run", "--wait", "60s", "j", "--", "true"]);
    assert!(wait_until(Duration::from_secs(10), || {
        env.find_job("j").is_some_and(|j| j.queue.length == 1)
    }));
    let out = env.run(&["forget", "j"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("j: not forgotten: 1 pass(es) wait for a slot"),
        "{}",
        text(&out.stderr)
    );
    kill(waiter as i32, libc::SIGTERM);
    env.wait_exit(waiter, Duration::from_secs(10));
    assert!(wait_until(Duration::from_secs(10), || {
        env.find_job("j").is_some_and(|j| j.queue.length == 0)
    }));
    let out = env.run(&["forget", "j"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "j: not forgotten: paused by pause --as repair (resume j --as repair lifts it)"
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(env.find_job("j").is_some());
    assert!(env.run(&["resume", "j", "--as", "repair"]).status.success());

    let out = env.run(&["forget", "j"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("j: forgotten"));
    assert!(env.find_job("j").is_none(), "still listed");
    assert_eq!(env.run(&["history", "j"]).status.code(), Some(1));
    assert_eq!(env.run(&["status", "j"]).status.code(), Some(1));

    assert_eq!(env.run(&["run", "j", "--", "true"]).status.code(), Some(0));
    let after = token_of(env, "j");
    assert!(
        after > before,
        "token {after} after forget, {before} before"
    );
    assert_eq!(env.history("j").len(), 1, "old history came back");
}

/// Pauses have owners: a job is paused while any stands; each resume lifts
/// only its owner's, and a bare resume names what still stands.
fn pause_owners_lift_only_their_own(env: &TestEnv) {
    let run = |job: &str| {
        let out = env.run(&["run", "-E", "75", job, "--", "true"]);
        (out.status.code(), text(&out.stderr))
    };
    assert!(env
        .run(&["pause", "--new", "db", "--reason", "disk maintenance"])
        .status
        .success());
    let out = env.run(&["pause", "--all", "--as", "upgrade", "--reason", "upgrade"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, err) = run("other");
    assert_eq!(code, Some(75), "{err}");
    assert!(err.contains("paused by upgrade (pause --all)"), "{err}");

    let db = env.job("db");
    let pauses = &db.pauses;
    assert_eq!(pauses.len(), 2, "{db:?}");
    assert_eq!(pauses[0].owner, None, "{db:?}");
    assert_eq!(
        pauses[0].reason.as_deref(),
        Some("disk maintenance"),
        "{db:?}"
    );
    assert!(pauses[0].since.starts_with("20"), "{db:?}");
    assert_eq!(pauses[1].owner.as_deref(), Some("upgrade"), "{db:?}");
    assert!(pauses[1].all, "{db:?}");
    let table = text(&env.run(&["status", "db"]).stdout);
    assert!(table.contains("paused since 20"), "{table}");
    assert!(table.contains(": disk maintenance"), "{table}");
    assert!(
        table.contains("paused by upgrade (all) since 20"),
        "{table}"
    );

    // A bare resume of the job lifts the operator's pause, names the other.
    let out = env.run(&["resume", "--all"]);
    let err = text(&out.stderr);
    assert!(
        err.contains("all jobs: still paused by pause --all --as upgrade (upgrade) (resume --all --as upgrade lifts it)"),
        "{err}"
    );
    assert_eq!(run("db").0, Some(75));
    assert_eq!(env.job("db").pauses.len(), 1);
    assert!(env
        .run(&["pause", "--new", "db", "--reason", "disk maintenance"])
        .status
        .success());

    // The upgrade lifts its own pause only.
    let out = env.run(&["resume", "--all", "--as", "upgrade"]);
    let err = text(&out.stderr);
    assert!(err.contains("lifted 1 pause(s) owned by upgrade"), "{err}");
    assert!(
        err.contains("db: still paused by pause (disk maintenance) (resume db lifts it)"),
        "{err}"
    );
    assert_eq!(run("other").0, Some(0));
    let (code, err) = run("db");
    assert_eq!(code, Some(75), "{err}");
    assert!(err.contains("disk maintenance"), "{err}");

    // An owned pause survives a bare resume of the job, which names it.
    assert!(env
        .run(&["pause", "--new", "db", "--as", "deploy"])
        .status
        .success());
    let out = env.run(&["resume", "db"]);
    let err = text(&out.stderr);
    assert!(
        err.contains("db: still paused by pause --as deploy (resume db --as deploy lifts it)"),
        "{err}"
    );
    assert_eq!(run("db").0, Some(75));
    let out = env.run(&["resume", "db", "--as", "deploy"]);
    assert!(
        text(&out.stderr).contains("db: resumed"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(run("db").0, Some(0));
    assert_eq!(env.job("db").state, State::Free);

    let out = env.run(&["pause", "db", "--as", "bad tag"]);
    assert_eq!(out.status.code(), Some(125));
}

both_stores!(
    status_and_history_name_the_store,
    history_is_ordered_by_start_and_filtered,
    forget_removes_only_free_jobs_and_tokens_keep_growing,
    pause_owners_lift_only_their_own,
);
