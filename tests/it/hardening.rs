//! Hardening, round two: what an attacker or bad luck tried and what must
//! hold instead. A pass is recorded only in the store it started with; a
//! signal its caller ignored stays ignored; a name holds nothing that
//! cannot be seen; the pages say what the binary does; a password given to
//! jobrun is not handed on to the command.

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::Duration;

use jobrun::model::{HistoryReport, Outcome};

use crate::support::{both_stores, held_child, kill, script, wait_until, Jobrun, Kind, TestEnv};

/// Run SQL against the store's tables, `CHR(n)` spelled for each store.
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

/// Every pass the store records, of every job.
fn all_history(env: &TestEnv) -> HistoryReport {
    Jobrun::new(env)
        .args(["history", "--json", "--limit", "10000"])
        .json()
}

// ---- 9. A pass is recorded only in the store it started with ----

/// Make jobrun's schema in the (new, empty) database, as the first jobrun
/// to reach it would.
fn make_store(env: &TestEnv) {
    make_store_at(env, &env.db);
}

fn make_store_at(env: &TestEnv, db: &str) {
    for args in [&["pause", "--all"][..], &["resume", "--all"]] {
        Jobrun::new(env)
            .args(args)
            .env("JOBRUN_DB", db)
            .any_stderr("a new store announces itself")
            .run();
    }
}

/// A pass runs; its database is dropped and re-created under it (and gets
/// jobrun's schema from another jobrun); the pass ends: nothing of it is
/// written into the new store, whether its renewer noticed first (a short
/// lease: it reports the loss, and the pass once recorded itself there as
/// `lost-lease`) or only its release does.
#[test]
fn a_pass_is_not_recorded_in_a_database_recreated_under_it() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let child = held_child(&env, "h", "");
    let pass = env.start("pass", &["run", "--lease", "3s", "j", "--", &child]);
    assert!(env.wait_for_file("h.ready", Duration::from_secs(10)));
    let name = env.db.rsplit('/').next().unwrap().to_string();
    let mut admin =
        ::postgres::Client::connect(&format!("{}/postgres", env.server()), ::postgres::NoTls)
            .unwrap();
    for sql in [
        format!("DROP DATABASE {name} WITH (FORCE)"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin.batch_execute(&sql).unwrap();
    }
    make_store(&env);
    // The renewer (every second) finds another database and says so once.
    assert!(
        wait_until(Duration::from_secs(15), || env
            .stderr_of("pass")
            .contains("not the one this pass started with")),
        "{}",
        env.stderr_of("pass")
    );
    fs::write(env.path("h.done"), "").unwrap();
    assert_eq!(env.wait_exit(pass, Duration::from_secs(20)), Some(0));
    let err = env.stderr_of("pass");
    assert!(err.contains("the pass is not recorded"), "{err}");
    let h = all_history(&env);
    assert!(h.passes.iter().all(|p| p.job != "j"), "{h:#?}");
    assert!(env.find_job("j").is_none(), "the new store knows j");
}

/// The same for a schema dropped and re-created under a pass whose lease
/// is long: no renewal comes between, the release alone must tell. A pass
/// queued behind it finds at its next look that its store is gone: one
/// line, exit 125, and nothing of it in the new store either.
#[test]
fn a_pass_is_not_recorded_in_a_schema_recreated_under_it() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let child = held_child(&env, "h", "");
    let pass = env.start("pass", &["run", "j", "--", &child]);
    assert!(env.wait_for_file("h.ready", Duration::from_secs(10)));
    let waiter = env.start(
        "waiter",
        &["run", "--wait", "1h", "j", "--", "touch", "w.ran"],
    );
    assert!(wait_until(Duration::from_secs(10), || env
        .find_job("j")
        .is_some_and(|j| j.queue.length == 1)));
    // A new store made beside it (schema `fresh`) takes its place in one
    // transaction, so the waiter's polls never find the tables missing.
    write_rows(&env, "CREATE SCHEMA fresh");
    make_store_at(&env, &format!("{}?options=-csearch_path%3Dfresh", env.db));
    write_rows(
        &env,
        "DROP SCHEMA public CASCADE; ALTER SCHEMA fresh RENAME TO public",
    );
    // It looks at least every 5 s (the new store's NOTIFY wakes it sooner).
    assert_eq!(
        env.wait_exit(waiter, Duration::from_secs(20)),
        Some(125),
        "{}",
        env.stderr_of("waiter")
    );
    let err = env.stderr_of("waiter");
    assert!(
        err.contains("not the one this pass started with") && err.lines().count() == 1,
        "{err}"
    );
    assert!(!env.path("w.ran").exists());
    fs::write(env.path("h.done"), "").unwrap();
    assert_eq!(env.wait_exit(pass, Duration::from_secs(20)), Some(0));
    let err = env.stderr_of("pass");
    assert!(
        err.contains("not the one this pass started with") && err.contains("not recorded"),
        "{err}"
    );
    let h = all_history(&env);
    assert!(h.passes.iter().all(|p| p.job != "j"), "{h:#?}");
    assert!(env.find_job("j").is_none(), "the new store knows j");
}

// ---- 10. What the caller ignored stays ignored, but TERM ----

/// A jobrun started as `nohup` (and a non-interactive shell's `&`) starts
/// it: with `ignored` ignored (and, as some callers hand down, `blocked`
/// blocked). Its output goes to `<log>.err`/`.out`.
struct Ignoring {
    child: Child,
}

impl Ignoring {
    fn start(env: &TestEnv, log: &str, args: &[&str], ignored: &'static [i32]) -> Ignoring {
        Ignoring::masked(env, log, args, ignored, Vec::new())
    }

    fn masked(
        env: &TestEnv,
        log: &str,
        args: &[&str],
        ignored: &'static [i32],
        blocked: Vec<i32>,
    ) -> Ignoring {
        let mut c = env.cmd(args);
        c.stdin(Stdio::null())
            .stdout(fs::File::create(env.path(&format!("{log}.out"))).unwrap())
            .stderr(fs::File::create(env.path(&format!("{log}.err"))).unwrap());
        // SAFETY: between fork and exec only signal(2), sigemptyset,
        // sigaddset and sigprocmask, which are async-signal-safe.
        unsafe {
            c.pre_exec(move || {
                for &sig in ignored {
                    libc::signal(sig, libc::SIG_IGN);
                }
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                for &sig in &blocked {
                    libc::sigaddset(&mut set, sig);
                }
                libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        Ignoring {
            child: c.spawn().expect("start jobrun"),
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its exit code (128+N on signal), within `within`.
    fn wait(&mut self, within: Duration) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let mut code = None;
        wait_until(within, || match self.child.try_wait() {
            Ok(Some(s)) => {
                code = Some(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)));
                true
            }
            _ => false,
        });
        code
    }
}

impl Drop for Ignoring {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            kill(self.pid(), libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// The signals a process ignores, from /proc/PID/status `SigIgn`.
fn ignored_by(pid: i32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .unwrap()
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

/// A command that writes its pid, exits 0 on USR1, and otherwise runs on.
fn usr1_ends(env: &TestEnv, tag: &str) -> String {
    let pid = env.path(&format!("{tag}.pid"));
    script(
        env,
        &format!("{tag}.sh"),
        &format!(
            "trap 'exit 0' USR1\necho $$ > {0}.tmp && mv {0}.tmp {0}\n\
             while :; do sleep 0.05; done",
            pid.display()
        ),
    )
}

/// `nohup jobrun run ...` (HUP ignored), or a background job of a script
/// (INT and QUIT ignored): jobrun keeps them ignored, and so does the
/// command; a hangup neither stops the pass nor reaches the command. TERM,
/// ignored or not, is handled and forwarded: it still stops the pass.
#[test]
fn a_signal_ignored_at_start_stays_ignored_and_term_still_stops() {
    const IGNORED: &[i32] = &[libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM];
    let kept = bit(libc::SIGHUP) | bit(libc::SIGINT) | bit(libc::SIGQUIT);
    let env = TestEnv::sqlite();
    let child = usr1_ends(&env, "a");
    let mut jobrun = Ignoring::start(&env, "a", &["run", "a", "--", &child], IGNORED);
    assert!(env.wait_for_file("a.pid", Duration::from_secs(10)));
    let command = env.pid_in("a.pid");
    // Ignored in jobrun and in the command; TERM is neither's to ignore.
    let (mine, its) = (ignored_by(jobrun.pid()), ignored_by(command));
    assert_eq!(mine & kept, kept, "jobrun SigIgn {mine:x}");
    assert_eq!(its & kept, kept, "command SigIgn {its:x}");
    assert_eq!(mine & bit(libc::SIGTERM), 0, "jobrun SigIgn {mine:x}");
    assert_eq!(its & bit(libc::SIGTERM), 0, "command SigIgn {its:x}");
    // A hangup (and INT, QUIT) to jobrun, and to the command's group.
    for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
        kill(jobrun.pid(), sig);
        kill(-command, sig);
    }
    // The pass goes on: USR1 is still forwarded, and the command ends ok.
    kill(jobrun.pid(), libc::SIGUSR1);
    assert_eq!(
        jobrun.wait(Duration::from_secs(20)),
        Some(0),
        "{}",
        env.stderr_of("a")
    );
    assert_eq!(env.history("a")[0].outcome, Outcome::Ok);

    // TERM, though ignored by the caller, stops the pass.
    let child = usr1_ends(&env, "b");
    let jobrun = Ignoring::start(&env, "b", &["run", "b", "--", &child], IGNORED);
    term_stops(&env, "b", jobrun);
}

/// TERM to `jobrun`, running `usr1_ends(env, tag)` as job `tag`, stops
/// the pass.
fn term_stops(env: &TestEnv, tag: &str, mut jobrun: Ignoring) {
    assert!(env.wait_for_file(&format!("{tag}.pid"), Duration::from_secs(10)));
    kill(jobrun.pid(), libc::SIGTERM);
    assert_eq!(
        jobrun.wait(Duration::from_secs(20)),
        Some(128 + libc::SIGTERM),
        "{}",
        env.stderr_of(tag)
    );
    assert_eq!(env.history(tag)[0].outcome, Outcome::Stopped);
}

/// Without an inherited ignore nothing changes: a hangup stops the pass
/// (the command gets HUP with its default).
#[test]
fn a_hangup_not_ignored_still_stops_the_pass() {
    let env = TestEnv::sqlite();
    let child = usr1_ends(&env, "c");
    let mut jobrun = Ignoring::start(&env, "c", &["run", "c", "--", &child], &[]);
    assert!(env.wait_for_file("c.pid", Duration::from_secs(10)));
    assert_eq!(ignored_by(env.pid_in("c.pid")) & bit(libc::SIGHUP), 0);
    kill(jobrun.pid(), libc::SIGHUP);
    assert_eq!(
        jobrun.wait(Duration::from_secs(20)),
        Some(128 + libc::SIGHUP)
    );
    assert_eq!(env.history("c")[0].outcome, Outcome::Stopped);
}

/// A caller that hands down a mask blocking SIGCHLD, TERM and the signal
/// that ends a wait for the store's writers' line (the first real-time
/// signal + 5) stops nothing jobrun relies on: the command's end is seen,
/// TERM stops the pass, and a write held up in line gives up waiting at
/// its deadline and is made.
#[test]
fn signals_blocked_by_the_caller_still_reach_jobrun() {
    let blocked = vec![libc::SIGCHLD, libc::SIGTERM, libc::SIGRTMIN() + 5];
    let env = TestEnv::sqlite();
    let ends = script(&env, "ends.sh", "exit 3");
    let mut jobrun = Ignoring::masked(&env, "a", &["run", "a", "--", &ends], &[], blocked.clone());
    assert_eq!(
        jobrun.wait(Duration::from_secs(20)),
        Some(3),
        "the command's end went unseen: {}",
        env.stderr_of("a")
    );

    let child = usr1_ends(&env, "b");
    let jobrun = Ignoring::masked(&env, "b", &["run", "b", "--", &child], &[], blocked.clone());
    term_stops(&env, "b", jobrun);

    let mut line = crate::support::hold_the_line(&env, "line");
    let mut paused = Ignoring::masked(&env, "c", &["pause", "a"], &[], blocked);
    let code = paused.wait(Duration::from_secs(30));
    kill(-(line.id() as i32), libc::SIGKILL);
    line.wait().unwrap();
    assert_eq!(
        code,
        Some(0),
        "a wait in line never ended: {}",
        env.stderr_of("c")
    );
    assert!(env.job("a").paused.is_some(), "the pause was written");
}

// ---- 11. Invisible characters are not names ----

/// Names that look like `deploy` (or like nothing) on screen: a variation
/// selector, a soft hyphen, a Hangul filler, a tag character, a Mongolian
/// free variation selector, an unassigned and a private-use code point.
const HIDDEN: &[&str] = &[
    "deploy\u{FE00}",
    "dep\u{AD}loy",
    "\u{115F}deploy",
    "deploy\u{E0041}",
    "deploy\u{180B}",
    "deploy\u{0378}",
    "deploy\u{E000}",
    "deploy\u{1D173}",
];

fn invisible_names_are_refused(env: &TestEnv) {
    make_store(env);
    for name in HIDDEN {
        Jobrun::new(env)
            .args(["run", name, "--", "touch", "ran"])
            .refused()
            .stderr_contains_all(&["invalid job name", "U+"])
            // The raw name is never echoed.
            .stderr_lacks(*name)
            .run();
        Jobrun::new(env)
            .args(["pause", name])
            .refused()
            .stderr_lacks(*name)
            .run();
        // A pause tag is no place for them either.
        Jobrun::new(env)
            .args(["pause", "--all", "--as", name])
            .refused()
            .stderr_lacks(*name)
            .run();
    }
    assert!(!env.path("ran").exists());
    assert!(env.status().jobs.is_empty());
}

/// A job the store holds under such a name (written by an older jobrun, or
/// by anyone who can write the store) is shown escaped, found by its name,
/// and forgotten.
fn stored_invisible_names_are_shown_escaped_and_forgotten(env: &TestEnv) {
    make_store(env);
    // deploy + U+FE00 (65024), and the job `deploy` it would pass for.
    write_rows(
        env,
        "INSERT INTO jobs (name, next_token, created_ms) VALUES ('deploy' || CHR(65024), 1, 0); \
         INSERT INTO jobs (name, next_token, created_ms) VALUES ('deploy', 1, 0); \
         INSERT INTO history (job, pass_id, host, pid, started_ms, ended_ms, duration_ms, \
         outcome) VALUES ('deploy' || CHR(65024), 'p1', 'h', 1, 0, 1, 1, 'ok')",
    );
    let hidden = "deploy\u{FE00}";
    for args in [&["status"][..], &["history"], &["status", hidden]] {
        let out = Jobrun::new(env)
            .args(args)
            .stdout_contains("deploy\\u{fe00}")
            .run();
        assert!(!out.stdout.contains(hidden), "{args:?}: {}", out.stdout);
    }
    Jobrun::new(env)
        .args(["forget", hidden])
        .any_stderr("forget says what it removed")
        .run();
    let jobs: Vec<String> = env.status().jobs.into_iter().map(|j| j.name).collect();
    assert_eq!(jobs, vec!["deploy".to_string()]);
}

// ---- 13. jobrun(1) SIGNALS says what the binary does ----

/// The SIGNALS section of a committed page, as text.
fn signals_section(page: &str) -> String {
    let path = format!("{}/man/{page}", env!("CARGO_MANIFEST_DIR"));
    let text = fs::read_to_string(&path).unwrap();
    let from = text.find(".SH SIGNALS").expect("a SIGNALS section");
    let rest = &text[from + 3..];
    let to = rest.find(".SH ").unwrap_or(rest.len());
    rest[..to].replace("\\fB", "").replace("\\fR", "")
}

/// A command that handles TERM and exits 0 is recorded `ok` and exit 0,
/// and the pages say so; they never claim a TERM is always `stopped` and
/// 128+N.
#[test]
fn a_handled_term_is_ok_and_exit_0_as_the_pages_say() {
    let env = TestEnv::sqlite();
    let ready = env.path("t.ready");
    let child = script(
        &env,
        "t.sh",
        &format!(
            "trap 'exit 0' TERM\ntouch {}\nwhile :; do sleep 0.05; done",
            ready.display()
        ),
    );
    let pass = env.start("t", &["run", "t", "--", &child]);
    assert!(env.wait_for_file("t.ready", Duration::from_secs(10)));
    kill(pass as i32, libc::SIGTERM);
    assert_eq!(env.wait_exit(pass, Duration::from_secs(20)), Some(0));
    assert_eq!(env.history("t")[0].outcome, Outcome::Ok);
    for page in ["jobrun.1", "jobrun-run.1"] {
        let s = signals_section(page).replace('\n', " ");
        assert!(s.contains("ok and exit 0 when it exits 0"), "{page}: {s}");
        assert!(!s.contains("recorded as stopped"), "{page}: {s}");
        // No signal's entry promises an outcome or an exit code: those
        // follow how the command ended, in the paragraph below them.
        let entries = s.split(".PP").next().unwrap();
        for e in entries.split(".TP").skip(1) {
            assert!(!e.contains("stopped") && !e.contains("128+"), "{page}: {e}");
        }
        assert!(
            s.contains("stopped, and jobrun exits 128+N, only when the command dies"),
            "{page}: {s}"
        );
    }
}

// ---- 14. A password given to jobrun is not the command's ----

/// What the command saw of `JOBRUN_DB` and `PGPASSWORD`.
fn seen_by_command(env: &TestEnv, job: &str, db: &str, flag: Option<&str>) -> (String, String) {
    let print_to = |file: &std::path::Path| {
        format!(
            "printf '%s\\n%s' \"${{JOBRUN_DB-<unset>}}\" \"${{PGPASSWORD-<unset>}}\" > {}",
            file.display()
        )
    };
    let (seen, hooked) = (
        env.path(&format!("{job}.seen")),
        env.path(&format!("{job}.hook")),
    );
    let mut args = vec!["run".to_string()];
    if let Some(f) = flag {
        args.extend(["--db".to_string(), f.to_string()]);
    }
    // The success hook sees what the command sees.
    args.extend(["--on-success".into(), print_to(&hooked)]);
    args.extend([
        job.into(),
        "--".into(),
        "sh".into(),
        "-c".into(),
        print_to(&seen),
    ]);
    Jobrun::new(env)
        .args(&args)
        .env("JOBRUN_DB", db)
        .env("PGPASSWORD", "caller-secret")
        .run();
    let text = fs::read_to_string(&seen).unwrap();
    assert_eq!(
        fs::read_to_string(&hooked).unwrap(),
        text,
        "the hook's view"
    );
    let (db, pw) = text.split_once('\n').unwrap();
    (db.to_string(), pw.to_string())
}

fn a_password_in_jobrun_db_is_not_handed_to_the_command(env: &TestEnv) {
    let unset = "<unset>".to_string();
    let caller = "caller-secret".to_string();
    // Without a password JOBRUN_DB is kept: a jobrun inside the command
    // finds the same store.
    let (db, pw) = seen_by_command(env, "plain", &env.db, None);
    assert_eq!((db, pw.clone()), (env.db.clone(), caller.clone()));
    // With one (a URL's, or a keyword string's), it is removed; PGPASSWORD
    // is the caller's and stays.
    let with_password = match env.kind {
        // The test server trusts its users: the password is never asked.
        Kind::Postgres => env.db.replacen("@", ":hunter2pw@", 1),
        Kind::Sqlite => "postgres://jobrun:hunter2pw@db.invalid/jobs".to_string(),
    };
    // On SQLite the store is --db's; JOBRUN_DB only holds the password.
    let flag = (matches!(env.kind, Kind::Sqlite)).then_some(env.db.as_str());
    assert_eq!(
        seen_by_command(env, "url", &with_password, flag),
        (unset.clone(), caller.clone())
    );
    if matches!(env.kind, Kind::Sqlite) {
        let keywords = "host=db.invalid user=jobrun password=hunter2pw dbname=jobs";
        assert_eq!(
            seen_by_command(env, "keywords", keywords, flag),
            (unset, caller)
        );
    }
}

both_stores!(
    invisible_names_are_refused,
    stored_invisible_names_are_shown_escaped_and_forgotten,
    a_password_in_jobrun_db_is_not_handed_to_the_command
);
