//! A store shared with the jobrun released before this one: a fleet
//! upgrades one host at a time, and on one machine passes started by the
//! old binary run on while the new one is installed. The old binary is
//! built from that release by `scripts/test` (`JOBRUN_TEST_OLD_BIN`);
//! without it these tests are skipped with the reason printed.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::support::{
    both_stores, dump_store, text, wait_until, without_jobrun_env, Kind, TestEnv,
};

/// The previous release's binary, or `None` (said) when none was built.
fn old_bin() -> Option<String> {
    match std::env::var("JOBRUN_TEST_OLD_BIN") {
        Ok(bin) if !bin.is_empty() => Some(bin),
        _ => {
            eprintln!(
                "skipped: JOBRUN_TEST_OLD_BIN is not set (scripts/test builds the previous \
                 release when the checkout has its history)"
            );
            None
        }
    }
}

/// The old binary against `env`'s store, with no JOBRUN_* settings of the
/// caller's.
fn old_cmd(bin: &str, env: &TestEnv, args: &[&str]) -> Command {
    let mut c = without_jobrun_env(bin);
    c.env("JOBRUN_DB", &env.db)
        .args(args)
        .current_dir(env.dir.path());
    c
}

fn old(bin: &str, env: &TestEnv, args: &[&str]) -> Output {
    old_cmd(bin, env, args)
        .output()
        .expect("run the old jobrun")
}

/// Old passes started in the background, ended (by pid) when dropped.
struct Started(Vec<Child>);

impl Drop for Started {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A long command that writes its pid to `NAME.pid` and runs until
/// `NAME.stop` appears.
fn long(name: &str) -> String {
    format!("echo $$ > {name}.pid.tmp && mv {name}.pid.tmp {name}.pid; while [ ! -e {name}.stop ]; do sleep 0.05; done")
}

const WITHIN: Duration = Duration::from_secs(20);

/// The schema this jobrun leaves behind: the old marker still at 4 (what
/// the previous release checks), the version and its minimum reader in
/// `jobrun_meta`.
fn assert_additive_schema(env: &TestEnv) {
    let read = |sql: &str| -> i64 {
        match env.kind {
            Kind::Sqlite => rusqlite::Connection::open(&env.db)
                .unwrap()
                .query_row(sql, [], |r| r.get(0))
                .unwrap(),
            Kind::Postgres => ::postgres::Client::connect(&env.db, ::postgres::NoTls)
                .unwrap()
                .query_one(sql, &[])
                .unwrap()
                .get(0),
        }
    };
    let legacy = match env.kind {
        Kind::Sqlite => read("PRAGMA user_version"),
        Kind::Postgres => read("SELECT max(version) FROM jobrun_schema"),
    };
    assert_eq!(legacy, 4, "the marker the previous release checks");
    assert!(read("SELECT value FROM jobrun_meta WHERE key = 'schema'") >= 5);
    assert_eq!(
        read("SELECT value FROM jobrun_meta WHERE key = 'min_reader'"),
        4
    );
}

/// A store the previous release made and used is adopted: its passes,
/// pauses and history read on, and it runs new passes.
fn a_store_of_the_previous_release_is_adopted(env: &TestEnv) {
    let Some(bin) = old_bin() else { return };
    let out = old(&bin, env, &["run", "a", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = old(&bin, env, &["pause", "--as", "upgrade", "b"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let b = env.job("b");
    assert_eq!(b.paused.and_then(|p| p.owner).as_deref(), Some("upgrade"));
    let out = env.run(&["run", "a", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(env.history("a").len(), 2);
    // The counters were backfilled from the history the migration found.
    let out = env.run(&["metrics"]);
    assert!(
        text(&out.stdout).contains("jobrun_passes_total{job=\"a\",outcome=\"ok\"} 2\n"),
        "{}",
        text(&out.stdout)
    );
    let out = env.run(&["resume", "--as", "upgrade", "b"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(env.job("b").paused.is_none());
    assert_additive_schema(env);
}

/// After this jobrun migrated the store, the previous release still runs,
/// queues, shows and excludes passes alongside it.
fn the_previous_release_keeps_working_on_a_migrated_store(env: &TestEnv) {
    let Some(bin) = old_bin() else { return };
    let out = env.run(&["run", "first", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_additive_schema(env);
    let mut started = Started(vec![]);

    // An old pass holds j: a new one skips it, a new waiter runs after it.
    started.0.push(
        old_cmd(&bin, env, &["run", "j", "--", "sh", "-c", &long("old")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        env.wait_for_file("old.pid", WITHIN),
        "the old pass never ran"
    );
    let old_child = env.pid_in("old.pid");
    assert!(wait_until(WITHIN, || env
        .find_slot("j")
        .is_some_and(|s| s.holder.child_pid == Some(old_child))));
    let out = env.run(&["run", "j", "--", "touch", "overlap"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("already running; skipping"));
    let waiter = env.start(
        "waiter",
        &["run", "--wait", "60s", "j", "--", "touch", "new.ran"],
    );
    assert!(wait_until(WITHIN, || env.job("j").queue.length == 1));
    std::fs::write(env.path("old.stop"), b"").unwrap();
    assert_eq!(
        env.wait_exit(waiter, WITHIN),
        Some(0),
        "{}",
        env.stderr_of("waiter")
    );
    assert!(env.path("new.ran").exists());
    assert!(!env.path("overlap").exists());

    // A new pass holds k: the old binary skips it and shows it.
    let holder = env.start("holder", &["run", "k", "--", "sh", "-c", &long("new")]);
    assert!(env.wait_for_file("new.pid", WITHIN));
    let new_child = env.pid_in("new.pid");
    assert!(wait_until(WITHIN, || env
        .find_slot("k")
        .is_some_and(|s| s.holder.child_pid == Some(new_child))));
    let out = old(&bin, env, &["run", "k", "--", "touch", "overlap"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("already running; skipping"));
    let out = old(&bin, env, &["status", "k"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("running"),
        "{}",
        text(&out.stdout)
    );
    std::fs::write(env.path("new.stop"), b"").unwrap();
    assert_eq!(env.wait_exit(holder, WITHIN), Some(0));
    assert!(!env.path("overlap").exists());

    // A pause of this jobrun's holds the old binary's passes back.
    let out = env.run(&["pause", "--all", "--as", "upgrade"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = old(&bin, env, &["run", "m", "--", "touch", "paused.ran"]);
    assert!(
        text(&out.stderr).contains("paused"),
        "{}",
        text(&out.stderr)
    );
    assert!(!env.path("paused.ran").exists());
    let out = env.run(&["resume", "--all", "--as", "upgrade"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = old(&bin, env, &["history", "j"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Rows of what the previous release does not know (windows, the outcomes
/// `done`, `timeout` and `wait-expired`) leave it working: it shows them
/// as outcomes it does not know, and its own passes of a windowed job
/// change nothing of the window.
fn the_previous_release_works_beside_windows_and_new_outcomes(env: &TestEnv) {
    let Some(bin) = old_bin() else { return };
    for args in [
        &["run", "--window", "w", "j", "--", "true"][..],
        &["run", "--window", "w", "j", "--", "true"],
        &["run", "--timeout", "1s", "t", "--", "sleep", "5"],
    ] {
        let out = env.run(args);
        assert!(
            [Some(0), Some(124)].contains(&out.status.code()),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    for args in [
        &["history", "j"][..],
        &["history", "t", "--json"],
        &["status"],
        &["run", "j", "--", "true"],
    ] {
        let out = old(&bin, env, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    let out = env.run(&["run", "--window", "w", "j", "--", "touch", "ran"]);
    assert!(
        text(&out.stderr).contains("window w done"),
        "{}",
        text(&out.stderr)
    );
    assert!(!env.path("ran").exists());
    let outcomes: Vec<_> = env
        .history("j")
        .iter()
        .map(|p| p.outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["done", "ok", "done", "ok"]);
}

both_stores!(
    a_store_of_the_previous_release_is_adopted,
    the_previous_release_keeps_working_on_a_migrated_store,
    the_previous_release_works_beside_windows_and_new_outcomes,
);

/// A store the previous release made and filled is migrated with every
/// job's history folded into its figures and its latest passes at once:
/// a job that never runs again reads as quickly as one that does, and the
/// figures count the passes the previous release recorded.
#[test]
fn a_migrated_store_has_its_history_folded_at_once() {
    let Some(bin) = old_bin() else { return };
    let env = TestEnv::sqlite_not_made();
    for _ in 0..3 {
        let out = old(&bin, &env, &["run", "retired", "--", "true"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let out = env.run(&["status"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dump = dump_store(&env);
    let row = |table: &str| {
        dump.iter()
            .find(|r| r.starts_with(&format!("{table}: \"retired\"|")))
            .cloned()
            .unwrap_or_else(|| panic!("no {table} row: {dump:#?}"))
    };
    // job, counted_id, ran: three passes ran.
    assert_eq!(row("job_stats").split('|').nth(2), Some("3"), "{dump:#?}");
    assert_eq!(
        row("job_recent").matches(r#"\"ok\""#).count(),
        3,
        "{dump:#?}"
    );
}

/// A store whose minimum reader is newer than this jobrun is refused with
/// the upgrade order, and left as it is.
#[test]
fn a_store_that_needs_a_newer_jobrun_names_the_upgrade_order() {
    let env = TestEnv::sqlite();
    let out = env.run(&["run", "a", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let c = rusqlite::Connection::open(&env.db).unwrap();
    c.execute_batch(
        "UPDATE jobrun_meta SET value = 99 WHERE key = 'schema'; \
         UPDATE jobrun_meta SET value = 98 WHERE key = 'min_reader';",
    )
    .unwrap();
    drop(c);
    let before = std::fs::read(&env.db).unwrap();
    for args in [&["run", "a", "--", "true"][..], &["status"]] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("schema 98 or later"), "{err}");
        assert!(err.contains("Upgrade jobrun on this host"), "{err}");
    }
    assert_eq!(std::fs::read(&env.db).unwrap(), before);
    // A newer store whose minimum this jobrun knows is used as it is.
    let c = rusqlite::Connection::open(&env.db).unwrap();
    c.execute_batch("UPDATE jobrun_meta SET value = 4 WHERE key = 'min_reader';")
        .unwrap();
    drop(c);
    let out = env.run(&["run", "a", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}
