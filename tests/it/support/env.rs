//! TestEnv: a temporary store (SQLite file, or a fresh database on the
//! PostgreSQL server the test script started), the real jobrun binary, and
//! the processes a test starts, which it ends by pid when it is dropped,
//! even when the test fails.

use std::cell::RefCell;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use jobrun::model::{HistoryReport, JobStatus, PassRecord, SlotStatus, StatusReport};

use super::assert::Jobrun;

pub const BIN: &str = env!("CARGO_BIN_EXE_jobrun");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub db: String,
    pub kind: Kind,
    pg: Option<(String, String)>,
    started: RefCell<Vec<Child>>,
}

/// Wait until `cond` holds, checking every 10 ms, for at most `within`.
/// `program` with none of the caller's JOBRUN_* settings in its
/// environment: a test sets those it means.
pub fn without_jobrun_env(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars() {
        if k.starts_with("JOBRUN_") {
            c.env_remove(k);
        }
    }
    c
}

pub fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The PostgreSQL server the test script started (`scripts/test` exports
/// `JOBRUN_TEST_PG`). `None`, with the reason printed, when it is unset: a
/// bare `cargo test` skips the PostgreSQL tests. Set, it must be a server
/// the tests can reach, or they fail.
pub fn pg_server() -> Option<String> {
    match std::env::var("JOBRUN_TEST_PG") {
        Ok(url) if url.trim().is_empty() => {
            panic!("JOBRUN_TEST_PG is set but empty: unset it to skip the PostgreSQL tests")
        }
        Ok(url) => Some(url),
        Err(std::env::VarError::NotPresent) => {
            skip_postgres();
            None
        }
        Err(e) => panic!("JOBRUN_TEST_PG: {e}"),
    }
}

/// Say why a PostgreSQL test passes without running: in its own output
/// (`cargo test -- --show-output`), and once per test binary where a bare
/// `cargo test` shows it, past the harness's capture.
fn skip_postgres() {
    const WHY: &str = "JOBRUN_TEST_PG is unset: the PostgreSQL tests are skipped \
                       (scripts/test starts a server and runs them)";
    eprintln!("skipped: {WHY}");
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "note: {WHY}");
    });
}

impl TestEnv {
    /// A SQLite store that exists, with nothing in it: made as an operator
    /// would make one before the first pass (`pause --all`, then
    /// `resume --all`), so the line a new store announces itself with is
    /// said here, not in the test.
    pub fn sqlite() -> TestEnv {
        let env = TestEnv::sqlite_not_made();
        for args in [&["pause", "--all"][..], &["resume", "--all"]] {
            let out = env.run(args);
            assert!(
                out.status.success(),
                "making the test store: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        env
    }

    /// A SQLite store path where no store exists yet.
    pub fn sqlite_not_made() -> TestEnv {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("store.db").to_string_lossy().into_owned();
        TestEnv {
            dir,
            db,
            kind: Kind::Sqlite,
            pg: None,
            started: RefCell::new(vec![]),
        }
    }

    /// A fresh database on the server the test script started; `None`
    /// (skip the test) when there is none, a bare `cargo test`.
    pub fn postgres() -> Option<TestEnv> {
        pg_server().map(|server| TestEnv::postgres_on(&server))
    }

    /// A fresh database on the given server (`postgres://user@host:port`),
    /// which must answer.
    pub fn postgres_on(server: &str) -> TestEnv {
        let server = server.to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        let name = format!(
            "jobrun_t_{}_{}",
            std::process::id(),
            dir.path()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .to_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "")
        );
        let mut admin = postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
            .unwrap_or_else(|e| {
                let why = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(": ");
                panic!("cannot reach the PostgreSQL test server at {server}: {why}")
            });
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create test database");
        TestEnv {
            dir,
            db: format!("{server}/{name}"),
            kind: Kind::Postgres,
            pg: Some((server, name)),
            started: RefCell::new(vec![]),
        }
    }

    /// The PostgreSQL server this env's database is on.
    pub fn server(&self) -> &str {
        match &self.pg {
            Some((server, _)) => server,
            None => panic!("a SQLite env has no server"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A jobrun command against this store, with no JOBRUN_* settings
    /// leaking in from the caller's environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = without_jobrun_env(BIN);
        c.env("JOBRUN_DB", &self.db)
            .args(args)
            .current_dir(self.dir.path());
        c
    }

    /// Run jobrun to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args)
            .stdin(Stdio::null())
            .output()
            .expect("run jobrun")
    }

    /// Start jobrun in the background; its stderr goes to `<log>.err` and
    /// stdout to `<log>.out` in the temp dir. The process is ended by pid
    /// when the env is dropped.
    pub fn start(&self, log: &str, args: &[&str]) -> u32 {
        self.start_with(log, args, &[])
    }

    pub fn start_with(&self, log: &str, args: &[&str], env: &[(&str, &str)]) -> u32 {
        let out = fs::File::create(self.path(&format!("{log}.out"))).unwrap();
        let err = fs::File::create(self.path(&format!("{log}.err"))).unwrap();
        let mut c = self.cmd(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start jobrun");
        let pid = child.id();
        self.started.borrow_mut().push(child);
        pid
    }

    /// Wait for a started jobrun to exit; its exit code (128+N on signal).
    pub fn wait_exit(&self, pid: u32, within: Duration) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let mut started = self.started.borrow_mut();
        let child = started.iter_mut().find(|c| c.id() == pid)?;
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = child.try_wait().ok()? {
                return Some(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)));
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn stderr_of(&self, log: &str) -> String {
        fs::read_to_string(self.path(&format!("{log}.err"))).unwrap_or_default()
    }

    pub fn stdout_of(&self, log: &str) -> String {
        fs::read_to_string(self.path(&format!("{log}.out"))).unwrap_or_default()
    }

    /// Wait for a file (a readiness marker a child writes) to exist.
    pub fn wait_for_file(&self, name: &str, within: Duration) -> bool {
        let p = self.path(name);
        wait_until(within, || p.exists())
    }

    /// `status --json`, parsed (it must succeed and say nothing on stderr).
    pub fn status(&self) -> StatusReport {
        Jobrun::new(self).args(["status", "--json"]).json()
    }

    /// The status entry of one job, `None` while the store does not know it.
    pub fn find_job(&self, name: &str) -> Option<JobStatus> {
        self.status().jobs.into_iter().find(|j| j.name == name)
    }

    /// The status entry of a job the store knows.
    pub fn job(&self, name: &str) -> JobStatus {
        let status = self.status();
        match status.job(name) {
            Some(j) => j.clone(),
            None => panic!("status does not list {name}: {status:#?}"),
        }
    }

    /// Slot 0 of `job` in status, `None` while nobody holds it.
    pub fn find_slot(&self, job: &str) -> Option<SlotStatus> {
        self.find_job(job).and_then(|j| j.slots.into_iter().next())
    }

    /// Slot 0 of a job that is held.
    pub fn slot(&self, job: &str) -> SlotStatus {
        let j = self.job(job);
        match j.slots.first() {
            Some(s) => s.clone(),
            None => panic!("{job} holds no slot: {j:#?}"),
        }
    }

    /// How many slots of `name` are held right now.
    pub fn held(&self, name: &str) -> usize {
        self.find_job(name).map_or(0, |j| j.slots.len())
    }

    /// `history --json` passes of a job the store knows, newest first.
    pub fn history(&self, name: &str) -> Vec<PassRecord> {
        Jobrun::new(self)
            .args(["history", name, "--json", "--limit", "10000"])
            .json::<HistoryReport>()
            .passes
    }

    /// Read a pid a child wrote into a file.
    pub fn pid_in(&self, name: &str) -> i32 {
        fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no pid in {name}"))
    }
}

/// Send `sig` to a pid this test started (directly or as a recorded child).
pub fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid the test owns.
    unsafe {
        libc::kill(pid, sig);
    }
}

pub fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); read its state.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s[s.rfind(')').unwrap() + 2..].chars().next();
            !matches!(state, Some('Z') | Some('X'))
        }
        Err(_) => false,
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        for child in self.started.borrow_mut().iter_mut() {
            if child.try_wait().ok().flatten().is_none() {
                kill(child.id() as i32, libc::SIGTERM);
            }
        }
        for child in self.started.borrow_mut().iter_mut() {
            let pid = child.id() as i32;
            if !wait_until(Duration::from_secs(3), || {
                child.try_wait().ok().flatten().is_some()
            }) {
                kill(pid, libc::SIGKILL);
                let _ = child.wait();
            }
        }
        // Children a test recorded in *.pid files (orphans of a killed wrapper).
        if let Ok(entries) = fs::read_dir(self.dir.path()) {
            for e in entries.flatten() {
                if e.path().extension().is_some_and(|x| x == "pid") {
                    if let Ok(pid) = fs::read_to_string(e.path())
                        .unwrap_or_default()
                        .trim()
                        .parse::<i32>()
                    {
                        if alive(pid) {
                            kill(pid, libc::SIGKILL);
                        }
                    }
                }
            }
        }
        if let Some((server, name)) = &self.pg {
            if let Ok(mut admin) =
                postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
            {
                let _ =
                    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            }
        }
    }
}

/// Write a shell script into the env's directory and return its path.
pub fn script(env: &TestEnv, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = env.path(name);
    fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p.to_string_lossy().into_owned()
}

/// A child script that touches `<name>.ready` once it runs, then holds until
/// the test creates `<name>.done`, then runs `after` (may be empty).
pub fn held_child(env: &TestEnv, name: &str, after: &str) -> String {
    let ready = env.path(&format!("{name}.ready"));
    let done = env.path(&format!("{name}.done"));
    script(
        env,
        &format!("{name}.sh"),
        &format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done; {after}",
            ready.display(),
            done.display()
        ),
    )
}
