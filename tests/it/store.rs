//! The SQLite store's files: created with 0600 (or the configured mode)
//! from their first byte. A store named with --db lives in a directory
//! its operator made (jobrun makes only its default store's directory).

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::support::{script, text, TestEnv};

fn mode_of(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn store_files_are_private_by_default() {
    let env = TestEnv::sqlite();
    let db = env.path("new/dir/store.db");
    std::fs::create_dir_all(env.path("new/dir")).unwrap();
    let out = env
        .cmd(&["run", "j", "--", "true"])
        .env("JOBRUN_DB", &db)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(mode_of(&db), 0o600);
    assert_eq!(mode_of(&env.path("new/dir/store.db.holders")), 0o700);
}

#[test]
fn a_configured_mode_holds_past_the_umask() {
    let env = TestEnv::sqlite();
    let db = env.path("shared/store.db");
    std::fs::create_dir(env.path("shared")).unwrap();
    let ready = env.path("ready");
    let child = script(
        &env,
        "child.sh",
        &format!("touch {}; exec sleep 30", ready.display()),
    );
    env.start_with(
        "pass",
        &["run", "j", "--", &child],
        &[
            ("JOBRUN_DB", db.to_str().unwrap()),
            ("JOBRUN_DB_MODE", "0660"),
        ],
    );
    assert!(env.wait_for_file("ready", Duration::from_secs(10)));
    assert_eq!(mode_of(&db), 0o660);
    let holders = env.path("shared/store.db.holders");
    assert_eq!(mode_of(&holders), 0o770);
    let lock = std::fs::read_dir(&holders)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(mode_of(&lock), 0o660, "{}", lock.display());
    let bad = env
        .cmd(&["run", "j", "--db-mode", "0755", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(125));
}

/// A long write-ahead log is copied back into the store file while the
/// pass's command runs, not once it has ended: the command sees the file
/// take in what the log held (the copy's syncs no longer hold up the end
/// of the pass).
#[test]
fn a_long_log_is_copied_back_while_the_command_runs() {
    let env = TestEnv::sqlite();
    let out = env.run(&["run", "j", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Another connection makes the log long, as other passes would, and
    // stays open (its close would copy the log back itself).
    let other = rusqlite::Connection::open(&env.db).unwrap();
    other
        .execute_batch(
            "PRAGMA wal_autocheckpoint=0; CREATE TABLE filler(b); \
             INSERT INTO filler VALUES (zeroblob(1000000));",
        )
        .unwrap();
    let before = std::fs::metadata(&env.db).unwrap().len();
    let child = script(
        &env,
        "child.sh",
        &format!(
            "i=0; while [ $i -lt 1000 ]; do \
               if [ $(stat -c %s {db}) -ge {want} ]; then touch {copied}; exit 0; fi; \
               sleep 0.02; i=$((i+1)); \
             done; exit 3",
            db = env.db,
            want = before + 1_000_000,
            copied = env.path("copied").display(),
        ),
    );
    let out = env.run(&["run", "j", "--", &child]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(env.path("copied").exists());
    drop(other);
}
