//! Bad input: every mistake a cron line or an operator can make gets one
//! line on stderr and exit 125, runs nothing, and leaves the store exactly
//! as it was.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{both_stores, exits, Jobrun, Kind, TestEnv};

/// What the store holds: for SQLite every file beside it, byte for byte;
/// for PostgreSQL its rows.
fn store_state(env: &TestEnv) -> String {
    match env.kind {
        Kind::Sqlite => dir_state(env.dir.path()),
        Kind::Postgres => {
            let mut c = ::postgres::Client::connect(&env.db, ::postgres::NoTls).unwrap();
            let mut state = String::new();
            for q in [
                "SELECT name || ' ' || next_token FROM jobs ORDER BY name",
                "SELECT id || ' ' || job || ' ' || coalesce(token, 0) || ' ' || outcome \
                 FROM history ORDER BY id",
                "SELECT job || ' ' || slot || ' ' || token FROM leases ORDER BY job, slot",
                "SELECT 'waiter ' || id FROM waiters ORDER BY id",
                "SELECT 'pause ' || job FROM pauses ORDER BY job",
            ] {
                for row in c.query(q, &[]).unwrap() {
                    state.push_str(row.get::<_, &str>(0));
                    state.push('\n');
                }
            }
            state
        }
    }
}

/// Every file under `dir` by size and hash. SQLite's shared-memory index
/// (`-shm`) is a cache rebuilt from the log, and an empty write-ahead log
/// holds nothing: opening a store may create either without changing it.
fn dir_state(dir: &Path) -> String {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    let mut state = String::new();
    for e in entries {
        let p = e.path();
        let name = p.to_string_lossy();
        if p.is_dir() {
            state.push_str(&format!("{name}/\n{}", dir_state(&p)));
            continue;
        }
        let bytes = fs::read(&p).unwrap();
        if name.ends_with("-shm") || (name.ends_with("-wal") && bytes.is_empty()) {
            continue;
        }
        state.push_str(&format!(
            "{name}: {} bytes, fnv {:016x}\n",
            bytes.len(),
            fnv(&bytes)
        ));
    }
    state
}

/// The file's bytes are what they were (without printing them all).
fn assert_same_bytes(path: &str, before: &[u8]) {
    let after = fs::read(path).unwrap();
    assert!(
        after == before,
        "{path} changed: {} bytes (fnv {:016x}), was {} bytes (fnv {:016x})",
        after.len(),
        fnv(&after),
        before.len(),
        fnv(before)
    );
}

/// FNV-1a: enough to tell two versions of a file apart in a message.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A store that has seen one pass, so "untouched" means something.
fn used_store(env: &TestEnv) {
    exits(env, 0, &["run", "j", "--", "true"]);
}

/// `args` fails with exit 125 and one line containing every `needle`, runs
/// no command (commands here `touch ran`), and changes nothing in the store.
fn refused(env: &TestEnv, args: &[&str], vars: &[(&str, &str)], needles: &[&str]) {
    let before = store_state(env);
    Jobrun::new(env)
        .args(args)
        .envs(vars.iter().copied())
        .refused()
        .stderr_contains_all(needles)
        .stdout_empty()
        .run();
    assert!(!env.path("ran").exists(), "{args:?} ran its command");
    assert_eq!(
        store_state(env),
        before,
        "{args:?} {vars:?} changed the store"
    );
}

fn usage_errors(env: &TestEnv) {
    used_store(env);
    let none: &[(&str, &str)] = &[];
    refused(
        env,
        &["run", "--bogus", "j", "--", "touch", "ran"],
        none,
        &["--bogus"],
    );
    refused(env, &["frobnicate", "j"], none, &["frobnicate"]);
    refused(
        env,
        &["run", "-E", "300", "j", "--", "touch", "ran"],
        none,
        &["300"],
    );
    refused(
        env,
        &["run", "--slots", "0", "j", "--", "touch", "ran"],
        none,
        &["--slots"],
    );
    // A missing command, however it is missing.
    refused(env, &["run", "j"], none, &["COMMAND"]);
    refused(env, &["run", "j", "--"], none, &["COMMAND"]);
    refused(env, &["run", "j", "--", ""], none, &["missing command"]);
    refused(env, &["run", "j", "touch", "ran"], none, &["touch"]);
}

fn bad_durations_show_an_example(env: &TestEnv) {
    used_store(env);
    for flag in ["--lease", "--max-hold", "--kill-after", "--wait"] {
        refused(
            env,
            &["run", flag, "5 minutes please", "j", "--", "touch", "ran"],
            &[],
            &[flag, "'5 minutes please'", "like 90s"],
        );
    }
    for var in [
        "JOBRUN_LEASE",
        "JOBRUN_MAX_HOLD",
        "JOBRUN_KILL_AFTER",
        "JOBRUN_WAIT",
    ] {
        refused(
            env,
            &["run", "j", "--", "touch", "ran"],
            &[(var, "soon")],
            &[var, "'soon'", "like 90s"],
        );
    }
}

fn short_lease_and_short_max_hold_are_refused(env: &TestEnv) {
    used_store(env);
    let args = |lease: &'static str, hold: &'static str| {
        [
            "run",
            "--lease",
            lease,
            "--max-hold",
            hold,
            "j",
            "--",
            "touch",
            "ran",
        ]
    };
    refused(env, &args("2s", "1h"), &[], &["--lease 2s", "under 3s"]);
    refused(
        env,
        &args("2999ms", "1h"),
        &[],
        &["--lease 2999ms", "under 3s"],
    );
    refused(
        env,
        &["run", "j", "--", "touch", "ran"],
        &[("JOBRUN_LEASE", "1s")],
        &["under 3s"],
    );
    refused(
        env,
        &args("10s", "9s"),
        &[],
        &["--max-hold 9s", "shorter than --lease 10s"],
    );
    refused(
        env,
        &["run", "j", "--", "touch", "ran"],
        &[("JOBRUN_MAX_HOLD", "1m")],
        &["--max-hold 1m", "shorter than --lease 5m"],
    );
    // The limits themselves are accepted.
    exits(env, 0, &args("3s", "3s"));
    assert!(env.path("ran").exists());
}

fn bad_job_names_are_refused(env: &TestEnv) {
    used_store(env);
    let long = "x".repeat(201);
    for (name, why) in [
        ("", "it is empty"),
        (" j", "whitespace"),
        ("j ", "whitespace"),
        ("a\tb", "control character"),
        ("a\nb", "control character"),
        ("a\u{7f}b", "control character"),
        (long.as_str(), "201 characters"),
    ] {
        refused(
            env,
            &["run", name, "--", "touch", "ran"],
            &[],
            &["invalid job name", why],
        );
    }
    // Operator commands check names the same way.
    refused(env, &["status", " j"], &[], &["invalid job name"]);
    refused(env, &["clear-locks", "a\tb"], &[], &["invalid job name"]);
    // 200 characters is the limit, not past it.
    exits(env, 0, &["run", &"x".repeat(200), "--", "touch", "ran"]);
}

both_stores!(
    usage_errors,
    bad_durations_show_an_example,
    short_lease_and_short_max_hold_are_refused,
    bad_job_names_are_refused,
);

// What only a store file can get wrong.

#[test]
fn unwritable_store_directory() {
    let env = TestEnv::sqlite();
    // Root may write anywhere; nobody can make a directory under a file.
    let file = env.path("file");
    fs::write(&file, "a regular file\n").unwrap();
    let before = dir_state(env.dir.path());
    for db in [file.join("store.db"), file.join("sub/store.db")] {
        let db = db.to_string_lossy().into_owned();
        refused(
            &env,
            &["run", "j", "--", "touch", "ran"],
            &[("JOBRUN_DB", &db)],
            &[&db],
        );
        refused(&env, &["--db", &db, "status"], &[], &[&db]);
    }
    assert_eq!(dir_state(env.dir.path()), before);
}

#[test]
fn corrupt_store_is_refused_and_kept() {
    let env = TestEnv::sqlite();
    // Garbage where the store should be.
    let garbage: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(&env.db, &garbage).unwrap();
    for args in [
        &["run", "j", "--", "touch", "ran"][..],
        &["status"],
        &["clear-locks", "--all"],
    ] {
        refused(&env, args, &[], &[&env.db, "corrupt"]);
    }
    assert_same_bytes(&env.db, &garbage);

    // Someone else's SQLite database: refused, not migrated, not switched
    // to WAL.
    fs::remove_file(&env.db).unwrap();
    let c = rusqlite::Connection::open(&env.db).unwrap();
    c.execute_batch(
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY); INSERT INTO accounts VALUES (7);",
    )
    .unwrap();
    drop(c);
    let bytes = fs::read(&env.db).unwrap();
    refused(
        &env,
        &["run", "j", "--", "touch", "ran"],
        &[],
        &[&env.db, "no jobrun schema version"],
    );
    assert_same_bytes(&env.db, &bytes);
}

#[test]
fn newer_schema_is_refused_and_kept() {
    let env = TestEnv::sqlite();
    used_store(&env);
    let c = rusqlite::Connection::open(&env.db).unwrap();
    c.pragma_update(None, "user_version", 99).unwrap();
    drop(c);
    let bytes = fs::read(&env.db).unwrap();
    for args in [
        &["run", "j", "--", "touch", "ran"][..],
        &["status"],
        &["history"],
    ] {
        refused(&env, args, &[], &[&env.db, "newer jobrun", "schema 99"]);
    }
    assert_same_bytes(&env.db, &bytes);

    // The same from a store not (yet) in WAL mode: not even its journal
    // mode is changed.
    let old = env.path("rollback.db").to_string_lossy().into_owned();
    let c = rusqlite::Connection::open(&old).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode=DELETE; CREATE TABLE jobs (name TEXT); PRAGMA user_version=99; \
         PRAGMA application_id=1785684594;",
    )
    .unwrap();
    drop(c);
    let bytes = fs::read(&old).unwrap();
    refused(
        &env,
        &["run", "j", "--", "touch", "ran"],
        &[("JOBRUN_DB", &old)],
        &[&old, "schema 99"],
    );
    assert_same_bytes(&old, &bytes);
}

#[test]
fn store_locked_past_the_busy_timeout() {
    let env = TestEnv::sqlite();
    used_store(&env);
    let before = store_state(&env);
    // Another writer holds the store's write lock (and, closing, must not
    // checkpoint: the comparison below is about what jobrun did).
    let c = rusqlite::Connection::open(&env.db).unwrap();
    c.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .unwrap();
    c.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let started = Instant::now();
    Jobrun::new(&env)
        .args(["run", "j", "--", "touch", "ran"])
        .code(125)
        .stderr_lines(1)
        .stderr_contains_all(&[&env.db, "busy"])
        .run();
    let took = started.elapsed();
    assert!(!env.path("ran").exists());
    // It waited for the busy timeout (5s), not forever.
    assert!(
        (Duration::from_millis(4900)..Duration::from_secs(15)).contains(&took),
        "gave up after {took:?}"
    );
    c.execute_batch("ROLLBACK").unwrap();
    drop(c);
    assert_eq!(store_state(&env), before, "the store changed");
    // Nothing was recorded: the store holds the one earlier pass.
    assert_eq!(env.history("j").len(), 1);
    assert_eq!(env.held("j"), 0);
}
