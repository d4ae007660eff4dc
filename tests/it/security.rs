//! The store is input: others may write it (a group-shared SQLite store, a
//! fleet's PostgreSQL role, a world-writable directory) and jobrun often
//! runs as root. Each test plants what such a writer could and checks that
//! jobrun refuses it, escapes it, or carries on without it.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::process::{Command, Output};
use std::time::Duration;

use jobrun::model::HistoryReport;

use crate::support::{both_stores, held_child, kill, wait_until, Jobrun, Kind, TempUser, TestEnv};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mkfifo(p: &std::path::Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success(), "mkfifo {}", p.display());
}

/// FNV-1a of a file's bytes: "unchanged" in one comparable number.
fn hash(p: &std::path::Path) -> (usize, u64) {
    let b = fs::read(p).unwrap();
    let h = b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3)
    });
    (b.len(), h)
}

// ---- 1. Wake files never block and are never followed ----

/// A holder of `j` (its child held until `<tag>.done`), and one waiter
/// queued behind it with `vars`: their pids and the waiter's pass id.
fn waiter_behind_holder(env: &TestEnv, tag: &str, vars: &[(&str, &str)]) -> (u32, u32, String) {
    let holder = held_child(env, tag, "");
    let h = env.start_with(&format!("{tag}.holder"), &["run", "j", "--", &holder], vars);
    assert!(env.wait_for_file(&format!("{tag}.ready"), Duration::from_secs(10)));
    let ran = env.path(&format!("{tag}.waiter.ran"));
    let touch = format!("touch {}", ran.display());
    let w = env.start_with(
        &format!("{tag}.waiter"),
        &["run", "--wait", "60s", "j", "--", "sh", "-c", &touch],
        vars,
    );
    assert!(wait_until(Duration::from_secs(10), || {
        env.find_job("j").is_some_and(|j| j.queue.length == 1)
    }));
    let pass = env.job("j").queue.waiters[0].pass_id.clone();
    (h, w, pass)
}

/// Release the holder: it exits at once (no planted file hangs it), and the
/// waiter still gets the slot (by polling, when its wake file was taken).
fn release_and_drain(env: &TestEnv, tag: &str, holder: u32, waiter: u32) {
    fs::write(env.path(&format!("{tag}.done")), "").unwrap();
    assert_eq!(
        env.wait_exit(holder, Duration::from_secs(10)),
        Some(0),
        "the release hung: {}",
        env.stderr_of(&format!("{tag}.holder"))
    );
    assert_eq!(
        env.wait_exit(waiter, Duration::from_secs(20)),
        Some(0),
        "{}",
        env.stderr_of(&format!("{tag}.waiter"))
    );
    assert!(env.path(&format!("{tag}.waiter.ran")).exists());
}

fn sqlite_wake_file(env: &TestEnv, pass: &str) -> std::path::PathBuf {
    env.path(&format!("store.db.holders/{pass}.wake"))
}

#[test]
fn a_regular_file_planted_as_a_waiters_wake_file_is_never_written() {
    let env = TestEnv::sqlite();
    let (h, w, pass) = waiter_behind_holder(&env, "h", &[]);
    let wake = sqlite_wake_file(&env, &pass);
    assert!(is_fifo(&wake), "the waiter has no wake FIFO");
    fs::remove_file(&wake).unwrap();
    fs::write(&wake, "planted\n").unwrap();
    fs::set_permissions(&wake, fs::Permissions::from_mode(0o600)).unwrap();
    let before = fs::metadata(&wake).unwrap().modified().unwrap();
    release_and_drain(&env, "h", h, w);
    assert_eq!(fs::read(&wake).unwrap(), b"planted\n");
    assert_eq!(fs::metadata(&wake).unwrap().modified().unwrap(), before);
}

fn is_fifo(p: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_fifo())
}

/// Open a FIFO's reading end without blocking.
fn fifo_reader(p: &std::path::Path) -> fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)
        .unwrap()
}

#[test]
fn a_waiter_whose_wake_file_is_refused_still_polls_and_honours_term() {
    let env = TestEnv::sqlite();
    // A waiter stopped by TERM while queued leaves no wake file behind; a
    // waiter whose wake FIFO was replaced by one nobody reads gets the slot
    // by polling, and the releaser does not block on it.
    let (h, stopped, _) = waiter_behind_holder(&env, "h", &[]);
    kill(stopped as i32, libc::SIGTERM);
    assert_eq!(
        env.wait_exit(stopped, Duration::from_secs(10)),
        Some(128 + libc::SIGTERM),
        "{}",
        env.stderr_of("h.waiter")
    );
    // Its wake file went with it.
    let left: Vec<_> = fs::read_dir(env.path("store.db.holders"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wake"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let ran = env.path("after.ran");
    let touch = format!("touch {}", ran.display());
    let w = env.start(
        "after",
        &["run", "--wait", "60s", "j", "--", "sh", "-c", &touch],
    );
    assert!(wait_until(Duration::from_secs(10), || {
        env.find_job("j").is_some_and(|j| j.queue.length == 1)
    }));
    let pass = env.job("j").queue.waiters[0].pass_id.clone();
    let wake = sqlite_wake_file(&env, &pass);
    fs::remove_file(&wake).unwrap();
    mkfifo(&wake);
    fs::write(env.path("h.done"), "").unwrap();
    assert_eq!(env.wait_exit(h, Duration::from_secs(10)), Some(0));
    assert_eq!(
        env.wait_exit(w, Duration::from_secs(20)),
        Some(0),
        "{}",
        env.stderr_of("after")
    );
    assert!(ran.exists());
}

#[test]
fn a_symlink_planted_as_a_waiters_wake_file_is_not_followed() {
    let env = TestEnv::sqlite();
    let target = env.path("elsewhere");
    let (h, w, pass) = waiter_behind_holder(&env, "h", &[]);
    let wake = sqlite_wake_file(&env, &pass);
    fs::remove_file(&wake).unwrap();
    symlink(&target, &wake).unwrap();
    release_and_drain(&env, "h", h, w);
    assert!(!target.exists(), "the wake file's symlink was followed");
}

#[test]
fn a_wake_file_of_another_user_is_not_used() {
    let Some(user) = TempUser::create("w") else {
        return;
    };
    let env = TestEnv::sqlite();
    let (h, w, pass) = waiter_behind_holder(&env, "h", &[]);
    let wake = sqlite_wake_file(&env, &pass);
    fs::remove_file(&wake).unwrap();
    mkfifo(&wake);
    fs::set_permissions(&wake, fs::Permissions::from_mode(0o600)).unwrap();
    user.owns(&wake);
    // Read by the test: a byte written to it would stay there.
    let mut reader = fifo_reader(&wake);
    release_and_drain(&env, "h", h, w);
    let mut buf = [0u8; 8];
    let got = std::io::Read::read(&mut reader, &mut buf);
    assert!(
        // Nothing to read: end of file (no writer has it open) or "would block".
        matches!(&got, Ok(0))
            || matches!(&got, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "another user's wake FIFO was written: {got:?}"
    );
}

#[test]
fn the_postgres_wake_files_live_where_only_its_user_writes() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let uid = unsafe { libc::geteuid() };
    let tmp = env.path("tmp");
    fs::create_dir(&tmp).unwrap();
    let tmp_s = tmp.to_string_lossy().into_owned();
    // A planted symlink in place of the per-user directory is refused.
    let elsewhere = env.path("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, tmp.join(format!("jobrun-{uid}"))).unwrap();
    let vars = [("TMPDIR", tmp_s.as_str()), ("XDG_RUNTIME_DIR", "")];
    let (h, w, _) = waiter_behind_holder(&env, "a", &vars);
    release_and_drain(&env, "a", h, w);
    let err = env.stderr_of("a.waiter");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
    // Its own 0700 directories are created and used.
    fs::remove_file(tmp.join(format!("jobrun-{uid}"))).unwrap();
    let (h, w, pass) = waiter_behind_holder(&env, "b", &vars);
    let dir = tmp.join(format!("jobrun-{uid}"));
    for d in [dir.clone(), dir.join("wake.d")] {
        let mode = fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    assert!(is_fifo(&dir.join(format!("wake.d/{pass}.wake"))));
    release_and_drain(&env, "b", h, w);
    assert!(env.stderr_of("b.waiter").is_empty());
    assert!(!dir.join(format!("wake.d/{pass}.wake")).exists());
    // $XDG_RUNTIME_DIR, when ours and 0700, is preferred.
    let runtime = env.path("runtime");
    fs::create_dir(&runtime).unwrap();
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o700)).unwrap();
    let runtime_s = runtime.to_string_lossy().into_owned();
    let vars = [("TMPDIR", tmp_s.as_str()), ("XDG_RUNTIME_DIR", &runtime_s)];
    let (h, w, pass) = waiter_behind_holder(&env, "c", &vars);
    assert!(is_fifo(
        &runtime.join(format!("jobrun-postgres.wake.d/{pass}.wake"))
    ));
    release_and_drain(&env, "c", h, w);
}

// ---- 2. Ownership checks on the SQLite store ----

#[test]
fn a_symlink_planted_as_the_store_is_refused_and_its_target_untouched() {
    let env = TestEnv::sqlite_not_made();
    // Dangling: the target must not be created.
    let missing = env.path("made-by-jobrun");
    symlink(&missing, &env.db).unwrap();
    Jobrun::new(&env)
        .args(["run", "j", "--", "touch", "ran"])
        .refused()
        .stderr_contains_all(&[&env.db, "symbolic link", "owner", "mode"])
        .run();
    assert!(!missing.exists(), "the symlink's target became a file");
    assert!(!env.path("ran").exists());
    // To an existing file: its bytes stay as they are.
    fs::remove_file(&env.db).unwrap();
    let victim = env.path("victim");
    fs::write(&victim, "precious\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    symlink(&victim, &env.db).unwrap();
    let before = hash(&victim);
    Jobrun::new(&env)
        .args(["status"])
        .refused()
        .stderr_contains_all(&[&env.db, "symbolic link"])
        .run();
    assert_eq!(hash(&victim), before);
}

#[test]
fn a_store_writable_beyond_its_mode_is_refused() {
    let env = TestEnv::sqlite();
    assert_eq!(env.run(&["run", "j", "--", "true"]).status.code(), Some(0));
    fs::set_permissions(&env.db, fs::Permissions::from_mode(0o666)).unwrap();
    Jobrun::new(&env)
        .args(["run", "j", "--", "touch", "ran"])
        .refused()
        .stderr_contains_all(&[
            &env.db,
            "0666",
            "writable by anyone, which no --db-mode allows",
        ])
        .run();
    assert!(!env.path("ran").exists());
    // A group-shared mode allows group write, not more.
    Jobrun::new(&env)
        .args(["--db-mode", "0660", "status"])
        .refused()
        .stderr_contains_all(&[&env.db, "writable by anyone"])
        .run();
    fs::set_permissions(&env.db, fs::Permissions::from_mode(0o660)).unwrap();
    assert_eq!(
        env.run(&["--db-mode", "0660", "status"]).status.code(),
        Some(0)
    );
    // Without --db-mode the store is read with the mode its owner gave
    // it; a --db-mode narrower than the file still refuses it.
    assert_eq!(env.run(&["status"]).status.code(), Some(0));
    Jobrun::new(&env)
        .args(["--db-mode", "0600", "status"])
        .refused()
        .stderr_contains_all(&[&env.db, "writable by its group"])
        .run();
}

#[test]
fn a_symlink_planted_as_the_wal_is_refused() {
    let env = TestEnv::sqlite();
    assert_eq!(env.run(&["run", "j", "--", "true"]).status.code(), Some(0));
    let wal = format!("{}-wal", env.db);
    let _ = fs::remove_file(&wal);
    let victim = env.path("victim");
    fs::write(&victim, "precious\n").unwrap();
    symlink(&victim, &wal).unwrap();
    let before = hash(&victim);
    Jobrun::new(&env)
        .args(["run", "j", "--", "touch", "ran"])
        .refused()
        .stderr_contains_all(&[&wal, "symbolic link"])
        .run();
    assert_eq!(hash(&victim), before);
    assert!(!env.path("ran").exists());
}

/// The writers' line beside the store (`<store>-writers`) is judged as the
/// store's other files: a symlink planted there is refused with one line
/// naming it, and its target is never created, opened or locked.
#[test]
fn a_symlink_planted_as_the_writers_line_is_refused() {
    let env = TestEnv::sqlite();
    assert_eq!(env.run(&["run", "j", "--", "true"]).status.code(), Some(0));
    let line = format!("{}-writers", env.db);
    fs::remove_file(&line).unwrap();
    let victim = env.path("victim");
    symlink(&victim, &line).unwrap();
    Jobrun::new(&env)
        .args(["run", "j", "--", "touch", "ran"])
        .refused()
        .stderr_contains_all(&[&line, "symbolic link"])
        .run();
    assert!(!victim.exists(), "the symlink's target was created");
    assert!(!env.path("ran").exists());
}

#[test]
fn a_store_owned_by_another_user_is_refused() {
    let Some(user) = TempUser::create("s") else {
        return;
    };
    let env = TestEnv::sqlite();
    assert_eq!(env.run(&["run", "j", "--", "true"]).status.code(), Some(0));
    user.owns(std::path::Path::new(&env.db));
    let before = hash(std::path::Path::new(&env.db));
    Jobrun::new(&env)
        .args(["run", "j", "--", "touch", "ran"])
        .refused()
        .stderr_contains_all(&[&env.db, &user.name, &format!("uid {}", user.uid), "0600"])
        .run();
    assert!(!env.path("ran").exists());
    assert_eq!(hash(std::path::Path::new(&env.db)), before);
    // A -shm of theirs beside a store of ours is refused too.
    let st = Command::new("chown")
        .arg("0")
        .arg(&env.db)
        .status()
        .unwrap();
    assert!(st.success());
    let shm = format!("{}-shm", env.db);
    if !std::path::Path::new(&shm).exists() {
        fs::write(&shm, "").unwrap();
    }
    fs::set_permissions(&shm, fs::Permissions::from_mode(0o600)).unwrap();
    user.owns(std::path::Path::new(&shm));
    Jobrun::new(&env)
        .args(["status"])
        .refused()
        .stderr_contains_all(&[&shm, &user.name])
        .run();
}

#[test]
fn a_symlink_planted_by_another_user_as_the_store_is_refused() {
    let Some(user) = TempUser::create("l") else {
        return;
    };
    let env = TestEnv::sqlite_not_made();
    let target = env.path("etc-file");
    fs::write(&target, "root's file\n").unwrap();
    symlink(&target, &env.db).unwrap();
    user.owns(std::path::Path::new(&env.db));
    let before = hash(&target);
    Jobrun::new(&env)
        .args(["run", "j", "--", "touch", "ran"])
        .refused()
        .stderr_contains_all(&[&env.db, "symbolic link", &user.name])
        .run();
    assert_eq!(hash(&target), before);
}

// ---- 3. Not a jobrun store? Touch nothing ----

fn refused_untouched(env: &TestEnv, file: &std::path::Path, needles: &[&str]) {
    let before = hash(file);
    for args in [
        &["run", "j", "--", "touch", "ran"][..],
        &["status"],
        &["pause", "j"],
    ] {
        Jobrun::new(env)
            .args(args)
            .env("JOBRUN_DB", file)
            .refused()
            .stderr_contains_all(needles)
            .run();
        assert_eq!(hash(file), before, "{args:?} changed {}", file.display());
    }
    assert!(!env.path("ran").exists());
    let wal = format!("{}-wal", file.display());
    assert!(!std::path::Path::new(&wal).exists(), "a WAL was started");
}

#[test]
fn another_applications_database_is_left_untouched() {
    let env = TestEnv::sqlite();
    let other = env.path("other.db");
    let c = rusqlite::Connection::open(&other).unwrap();
    c.execute_batch("CREATE TABLE notes (body TEXT); PRAGMA user_version=1;")
        .unwrap();
    drop(c);
    fs::set_permissions(&other, fs::Permissions::from_mode(0o600)).unwrap();
    refused_untouched(&env, &other, &["other.db", "not a jobrun store", "notes"]);
    // One that marks itself as another application's.
    let marked = env.path("marked.db");
    let c = rusqlite::Connection::open(&marked).unwrap();
    c.execute_batch("PRAGMA application_id=42; CREATE TABLE t (x);")
        .unwrap();
    drop(c);
    fs::set_permissions(&marked, fs::Permissions::from_mode(0o600)).unwrap();
    refused_untouched(&env, &marked, &["marked.db", "application_id is 0x2a"]);
}

#[test]
fn a_short_or_random_file_is_left_untouched() {
    let env = TestEnv::sqlite();
    let one = env.path("one.db");
    fs::write(&one, "x").unwrap();
    fs::set_permissions(&one, fs::Permissions::from_mode(0o600)).unwrap();
    refused_untouched(&env, &one, &["one.db", "not a SQLite database"]);
    let random = env.path("random.db");
    let bytes: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(&random, bytes).unwrap();
    fs::set_permissions(&random, fs::Permissions::from_mode(0o600)).unwrap();
    refused_untouched(&env, &random, &["random.db", "not a"]);
}

fn application_id(db: &str) -> i64 {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap()
}

/// The schema an earlier jobrun (schema version 1, no application_id)
/// created, as it created it.
const V1_SCHEMA: &str = r#"
CREATE TABLE jobs (
    name TEXT PRIMARY KEY,
    next_token INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE leases (
    job TEXT NOT NULL,
    slot INTEGER NOT NULL,
    token INTEGER NOT NULL,
    pass_id TEXT NOT NULL,
    host TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    pid_ns TEXT NOT NULL,
    wrapper_pid INTEGER NOT NULL,
    wrapper_start INTEGER NOT NULL,
    child_pid INTEGER,
    child_start INTEGER,
    lock_path TEXT,
    argv TEXT NOT NULL,
    cwd TEXT NOT NULL,
    slots INTEGER NOT NULL,
    lease_ms INTEGER NOT NULL,
    max_hold_ms INTEGER NOT NULL,
    acquired_ms INTEGER NOT NULL,
    renewed_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (job, slot)
);
CREATE TABLE waiters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    pass_id TEXT NOT NULL,
    host TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    pid_ns TEXT NOT NULL,
    wrapper_pid INTEGER NOT NULL,
    wrapper_start INTEGER NOT NULL,
    child_pid INTEGER,
    child_start INTEGER,
    lock_path TEXT,
    argv TEXT NOT NULL,
    cwd TEXT NOT NULL,
    slots INTEGER NOT NULL,
    lease_ms INTEGER NOT NULL,
    arrived_ms INTEGER NOT NULL,
    renewed_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX waiters_by_job ON waiters (job, id);
CREATE TABLE pauses (
    job TEXT PRIMARY KEY,
    reason TEXT,
    since_ms INTEGER NOT NULL
);
CREATE TABLE history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    pass_id TEXT NOT NULL,
    token INTEGER,
    slot INTEGER,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    ended_ms INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    exit_code INTEGER,
    signal INTEGER,
    outcome TEXT NOT NULL
);
CREATE INDEX history_by_job ON history (job, id);
"#;

#[test]
fn a_new_store_is_marked_and_an_earlier_jobruns_store_is_adopted() {
    let env = TestEnv::sqlite();
    assert_eq!(env.run(&["run", "j", "--", "true"]).status.code(), Some(0));
    assert_eq!(application_id(&env.db), 0x6a6f_6272);
    // As an earlier jobrun left it: schema 1, no application_id, a pass
    // in its history.
    let old = env.path("old.db");
    let c = rusqlite::Connection::open(&old).unwrap();
    c.execute_batch(V1_SCHEMA).unwrap();
    c.execute_batch(
        "PRAGMA user_version=1; PRAGMA journal_mode=WAL; \
         INSERT INTO jobs (name, next_token, created_ms) VALUES ('j', 8, 0); \
         INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
         duration_ms, exit_code, signal, outcome) \
         VALUES ('j', 'aaaaaaaaaaaa', 7, 0, 'h', 1, 0, 1, 1, 0, NULL, 'ok');",
    )
    .unwrap();
    drop(c);
    fs::set_permissions(&old, fs::Permissions::from_mode(0o600)).unwrap();
    let out = env
        .cmd(&["run", "j", "--", "true"])
        .env("JOBRUN_DB", &old)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let old = old.to_str().unwrap();
    assert_eq!(application_id(old), 0x6a6f_6272);
    let out = env
        .cmd(&["history", "j", "--json"])
        .env("JOBRUN_DB", old)
        .output()
        .unwrap();
    let v: HistoryReport = serde_json::from_slice(&out.stdout).unwrap();
    let passes = &v.passes;
    assert_eq!(passes.len(), 2, "its history was kept: {v:?}");
    assert!(passes[0].token.unwrap() > 7, "{v:?}");
}

// ---- 4. Text from the store is data ----

const FORGED: &str = "a\nFAKE: jobrun: x\x1b[2J";

/// Lines of `text` mentioning the forged text's parts.
fn forged_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.contains("FAKE")).collect()
}

fn shows_forged_text_escaped(what: &str, text: &str) {
    assert!(!text.contains('\x1b'), "{what}: a raw ESC: {text:?}");
    let lines = forged_lines(text);
    assert_eq!(lines.len(), 1, "{what}: {text:?}");
    assert!(
        lines[0].contains("a\\nFAKE: jobrun: x\\e[2J"),
        "{what}: {:?}",
        lines[0]
    );
    assert!(
        !text.lines().any(|l| l.starts_with("FAKE")),
        "{what}: {text:?}"
    );
}

fn pause_reasons_are_escaped(env: &TestEnv) {
    let out = env.run(&["pause", "--new", "j", "--reason", FORGED]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = env.run(&["run", "j", "--", "touch", "ran"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!env.path("ran").exists());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    shows_forged_text_escaped("run", &err);
    let out = env.run(&["status"]);
    shows_forged_text_escaped("status", &String::from_utf8_lossy(&out.stdout));
    // JSON keeps the text as it is, escaped by JSON itself.
    assert_eq!(env.job("j").paused.unwrap().reason.as_deref(), Some(FORGED));
}

/// Run SQL against the env's store, as another writer of it could.
/// `CHR(n)` in `sql` is the character with code n, on either store.
fn write_rows(env: &TestEnv, sql: &str) {
    match env.kind {
        Kind::Sqlite => {
            let c = rusqlite::Connection::open(&env.db).unwrap();
            c.busy_timeout(Duration::from_secs(5)).unwrap();
            c.execute_batch(&sql.replace("CHR(", "char(")).unwrap();
        }
        Kind::Postgres => {
            let mut c = ::postgres::Client::connect(&env.db, ::postgres::NoTls).unwrap();
            c.batch_execute(&sql.replace("CHR(", "chr(")).unwrap();
        }
    }
}

fn hosts_and_names_from_rows_are_escaped(env: &TestEnv) {
    let holder = held_child(env, "h", "");
    env.start("holder", &["run", "j", "--", &holder]);
    assert!(env.wait_for_file("h.ready", Duration::from_secs(10)));
    write_rows(
        env,
        "UPDATE leases SET host = 'web1\nFAKE: jobrun: x' || CHR(27) || '[2J' \
         WHERE job = 'j'",
    );
    let out = env.run(&["run", "j", "--", "touch", "ran"]);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        !err.contains('\x1b') && err.contains("web1\\nFAKE: jobrun: x\\e[2J"),
        "{err:?}"
    );
    let out = env.run(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text.contains('\x1b'), "{text:?}");
    assert!(!text.lines().any(|l| l.starts_with("FAKE")), "{text:?}");
    // A job name no command line could give (bidi override) shows escaped.
    write_rows(
        env,
        "INSERT INTO history (job, pass_id, host, pid, started_ms, ended_ms, duration_ms, \
         outcome) VALUES ('x' || CHR(8238) || 'y', 'p' || CHR(10) || 'FAKE', 'h', 1, 0, 1, \
         1, 'ok')",
    );
    let out = env.run(&["history", "--limit", "100"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("p\\nFAKE"), "{text:?}");
    assert!(!text.lines().any(|l| l.starts_with("FAKE")), "{text:?}");
    fs::write(env.path("h.done"), "").unwrap();
}

both_stores!(
    pause_reasons_are_escaped,
    hosts_and_names_from_rows_are_escaped
);

#[test]
fn a_job_name_with_a_bidi_override_is_refused() {
    let env = TestEnv::sqlite();
    for name in ["a\u{202e}b", "a\u{2066}b", "a\u{200b}b", "\u{feff}ab"] {
        Jobrun::new(&env)
            .args(["run", name, "--", "touch", "ran"])
            .refused()
            .stderr_contains_all(&["invalid job name", "bidirectional or zero-width"])
            // The raw name is never echoed.
            .stderr_lacks(name)
            .run();
    }
    assert!(!env.path("ran").exists());
}

// ---- 5. Secrets stay secret ----

#[test]
fn a_libpq_keyword_string_is_a_postgres_store_never_a_file_or_an_echo() {
    let env = TestEnv::sqlite();
    let listing = || {
        let mut v: Vec<_> = fs::read_dir(env.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let before = listing();
    for (db, says) in [
        (
            "host=127.0.0.1 port=1 user=jobrun password=hunter2pw dbname=jobs",
            "postgres://jobrun@127.0.0.1:1/jobs",
        ),
        ("password=hunter2pw", "postgres://127.0.0.1:1/"),
        (
            "dbname = jobs password = hunter2pw",
            "postgres://127.0.0.1:1/jobs",
        ),
        (
            "host=127.0.0.1 port=1 password='hunter2pw' pasword=hunter2pw",
            "invalid connection option \"pasword\"",
        ),
    ] {
        // Nothing listens there: the string is taken as a server, fails to
        // connect, and says so in one line without its password.
        Jobrun::new(&env)
            .args(["run", "j", "--", "touch", "ran"])
            .env("JOBRUN_DB", db)
            .env("PGHOST", "127.0.0.1")
            .env("PGPORT", "1")
            .refused()
            .stderr_contains(says)
            .stderr_lacks("hunter2pw")
            .stdout_lacks("hunter2pw")
            .run();
    }
    assert_eq!(listing(), before, "a file was created");
}

#[test]
fn passwords_in_urls_never_reach_messages() {
    let env = TestEnv::sqlite();
    for db in [
        "postgres://jobrun:hunter2pw@127.0.0.1:1/jobs",
        "postgres://jobrun@127.0.0.1:1/jobs?password=hunter2pw",
        "postgresql://127.0.0.1:1/jobs?sslmode=disable&PASSWORD=hunter2pw",
        "postgres://127.0.0.1:1/jobs?connect_timeout=1&sslpassword=hunter2pw",
    ] {
        let out = env.cmd(&["status"]).env("JOBRUN_DB", db).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{db}: {err}");
        assert!(!err.contains("hunter2pw"), "{db}: {err}");
        assert!(err.contains("127.0.0.1"), "{db}: {err}");
    }
}
