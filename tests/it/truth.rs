//! What jobrun says is true, complete and actionable: a typo'd name or
//! store is refused with what was meant, a new store announces itself, a
//! fresh install answers, status says when, and errors say what to do.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use jobrun::model::{HistoryReport, StatusReport};

use crate::support::{both_stores, start_pass, text, Jobrun, Kind, TestEnv, BIN};

fn a_typo_is_refused_with_what_was_meant(env: &TestEnv) {
    Jobrun::new(env).args(["run", "crashy", "--", "true"]).run();
    for args in [
        &["pause", "crashyy"][..],
        &["resume", "crashyy"],
        &["clear-locks", "crashyy"],
        &["stop-due", "crashyy"],
        &["status", "crashyy"],
        &["history", "crashyy"],
        &["forget", "crashyy"],
    ] {
        Jobrun::new(env)
            .args(args)
            .code(1)
            .stderr_lines(1)
            .stderr_contains("crashyy")
            .stderr_contains("does not know this job")
            .stderr_contains("did you mean `crashy`?")
            .run();
    }
    // Nothing was paused, and no job was made of the typo.
    let status = env.status();
    assert!(
        status.jobs.iter().all(|j| j.paused.is_none()),
        "{status:#?}"
    );
    assert!(status.job("crashyy").is_none(), "{status:#?}");
    // A name nothing resembles gets no suggestion.
    Jobrun::new(env)
        .args(["pause", "backup"])
        .code(1)
        .stderr_contains("does not know this job")
        .stderr_lacks("did you mean")
        .run();
}

fn pause_new_pauses_a_job_before_its_first_pass(env: &TestEnv) {
    Jobrun::new(env)
        .args([
            "pause",
            "--new",
            "later",
            "--reason",
            "not before the migration",
        ])
        .stderr_contains("later: paused")
        .run();
    assert!(env.job("later").paused.is_some());
    Jobrun::new(env)
        .args(["run", "later", "--", "touch", "ran"])
        .stderr_contains("paused")
        .stderr_contains("skipping")
        .run();
    assert!(!env.path("ran").exists());
}

fn star_is_not_a_job_name(env: &TestEnv) {
    Jobrun::new(env).args(["run", "seed", "--", "true"]).run();
    for args in [
        &["pause", "*"][..],
        &["resume", "*"],
        &["run", "*", "--", "true"],
    ] {
        Jobrun::new(env)
            .args(args)
            .refused()
            .stderr_contains("`*` is not a job name")
            .stderr_contains("use --all")
            .run();
    }
    let status = env.status();
    assert_eq!(status.jobs.len(), 1, "{status:#?}");
    assert!(status.jobs[0].paused.is_none(), "{status:#?}");
}

both_stores!(
    a_typo_is_refused_with_what_was_meant,
    pause_new_pauses_a_job_before_its_first_pass,
    star_is_not_a_job_name,
    status_says_when,
    history_summary_follows_what_is_shown,
);

/// A typo in --db or JOBRUN_DB never makes a new lock domain: its missing
/// directory is named and nothing is created.
#[test]
fn a_typod_store_path_is_refused_and_nothing_made() {
    let env = TestEnv::sqlite();
    let typo = env.path("srv/app/jobrn.db");
    for via_env in [false, true] {
        let mut j = Jobrun::new(&env);
        j = if via_env {
            j.env("JOBRUN_DB", &typo)
        } else {
            j.arg("--db").arg(&typo)
        };
        j = j.args(["run", "j", "--", "touch", "ran"]);
        j.refused()
            .stderr_contains(format!("no directory {}", env.path("srv/app").display()))
            .run();
    }
    assert!(!env.path("srv").exists(), "a directory was made");
    assert!(!env.path("ran").exists());
}

/// A new store says so once, even under -q, so cron mails it the first
/// time; later passes say nothing.
#[test]
fn a_new_store_announces_itself_once() {
    for quiet in [false, true] {
        let env = TestEnv::sqlite_not_made();
        let args: &[&str] = if quiet {
            &["run", "-q", "j", "--", "true"]
        } else {
            &["run", "j", "--", "true"]
        };
        Jobrun::new(&env)
            .args(args)
            .stderr_lines(1)
            .stderr_contains(format!("jobrun: created a new store at {}", env.db))
            .run();
        Jobrun::new(&env).args(args).run();
    }
}

/// A user with no store yet (the default location, nothing run): status
/// and history answer instead of failing; the first pass makes the
/// default directory, private; an explicit --db that does not exist stays
/// an error.
#[test]
fn a_fresh_install_answers() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running as another user needs root");
        return;
    }
    let home = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let chown = Command::new("chown")
        .args(["65534:65534"])
        .arg(home.path())
        .status()
        .unwrap();
    assert!(chown.success());
    let as_user = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home.path())
            .current_dir(home.path());
        c.output().unwrap()
    };
    let store = home.path().join(".local/state/jobrun/jobrun.db");
    let out = as_user(&["status"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("no jobs yet (no store at {})", store.display())),
        "{err}"
    );
    // Root's jobs are elsewhere: said when they may be there.
    assert_eq!(
        err.contains("root's jobs are in /var/lib/jobrun"),
        std::path::Path::new("/var/lib/jobrun").is_dir(),
        "{err}"
    );
    let out = as_user(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let report: StatusReport = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.jobs.is_empty());
    let out = as_user(&["history"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Metrics from root's crontab before the first pass: no figures, and
    // nothing for cron to mail.
    let out = as_user(&["metrics"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    assert!(!store.exists(), "a reader made the store");
    // The first pass makes the default directory and the store.
    let out = as_user(&["run", "j", "--", "true"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("created a new store at"), "{err}");
    let mode = std::fs::metadata(store.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    // A named store that does not exist is still an error.
    let missing = home.path().join("missing.db");
    let out = as_user(&["--db", missing.to_str().unwrap(), "status"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no store at"));
}

/// status says when: LAST is the outcome and how long ago it ended; the
/// detail line gives the duration and a later skip; the JSON has
/// `last_attempt`. Verdicts are wrapped, never cut mid-word, and --wide
/// shows them whole.
fn status_says_when(env: &TestEnv) {
    Jobrun::new(env).args(["run", "j", "--", "true"]).run();
    Jobrun::new(env)
        .args(["pause", "j"])
        .stderr_contains("j: paused")
        .run();
    Jobrun::new(env)
        .args(["run", "j", "--", "true"])
        .stderr_contains("skipping")
        .run();
    Jobrun::new(env)
        .args(["resume", "j"])
        .stderr_contains("j: resumed")
        .run();
    let table = Jobrun::new(env).args(["status", "j"]).run().stdout;
    let row = table.lines().find(|l| l.starts_with("j ")).unwrap();
    assert!(row.contains("  ok 0s ago"), "{table}");
    assert!(
        table.contains("    last pass ok 0s ago, took 0.0s; last attempt skipped 0s ago"),
        "{table}"
    );
    let job = env.job("j");
    let attempt = job.last_attempt.expect("last_attempt");
    assert_eq!(attempt.outcome, "skipped");
    assert_eq!(job.last.map(|l| l.outcome).as_deref(), Some("ok"));

    // A holder on another host, with a long name: its verdict is long.
    let host = format!("{}.example.internal", "web-frontend-".repeat(6));
    let _p = start_pass(
        env,
        "far",
        "far",
        "60s",
        &[("JOBRUN_HOST", &host), ("JOBRUN_BOOT_ID", "far-boot")],
    );
    let table = Jobrun::new(env).args(["status", "far"]).run().stdout;
    for line in table.lines() {
        assert!(line.chars().count() <= 100, "{line}");
    }
    // Wrapped, never cut: the whole verdict is there, across lines.
    let verdict: String = table
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("unknown: "))
        .take_while(|l| l.trim_start().starts_with("unknown: ") || l.starts_with("             "))
        .map(str::trim)
        .collect();
    assert_eq!(
        verdict.replace(' ', ""),
        format!("unknown:otherhost{host}"),
        "{table}"
    );
    let wide = Jobrun::new(env)
        .args(["status", "--wide", "far"])
        .run()
        .stdout;
    assert!(
        wide.lines()
            .any(|l| l == format!("    unknown: other host {host}")),
        "{wide}"
    );
    std::fs::write(env.path("far.stop"), b"").unwrap();
}

/// The summary follows --since and --outcome as the rows do (never only
/// the --limit shown), and a job with no pass that ran shows `-`.
fn history_summary_follows_what_is_shown(env: &TestEnv) {
    for cmd in ["true", "true", "false"] {
        Jobrun::new(env)
            .args(["run", "j", "--", cmd])
            .any_code("false exits 1")
            .run();
    }
    Jobrun::new(env)
        .args(["pause", "--new", "idle"])
        .stderr_contains("idle: paused")
        .run();
    Jobrun::new(env)
        .args(["run", "idle", "--", "true"])
        .stderr_contains("skipping")
        .run();
    let json = |args: &[&str]| -> HistoryReport { Jobrun::new(env).args(args).run().json() };
    let failed = json(&["history", "j", "--outcome", "failed", "--json"]);
    assert_eq!(failed.passes.len(), 1);
    assert_eq!(failed.summary[0].count, 1);
    assert_eq!(failed.summary[0].outcomes.len(), 1, "{failed:?}");
    let limited = json(&["history", "j", "--limit", "1", "--json"]);
    assert_eq!(limited.passes.len(), 1);
    assert_eq!(
        limited.summary[0].count, 3,
        "the summary is not the --limit"
    );
    let table = Jobrun::new(env).args(["history", "idle"]).run().stdout;
    let row = table
        .lines()
        .rev()
        .find(|l| l.starts_with("idle "))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[1..6], &["0", "-", "-", "-", "-"], "{table}");
    if env.kind == Kind::Sqlite {
        assert!(!table.contains("0.0s  skipped"), "{table}");
    }
}

/// Usage errors keep clap's suggestions in one line; commands that need
/// names say NAME... or --all; a bad JOBRUN_* value blames the variable;
/// a shell line given as the command gets the sh -c hint; --since explains
/// what it takes.
#[test]
fn errors_say_what_to_do() {
    let env = TestEnv::sqlite();
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], i32, &'a str);
    let cases: &[Case] = &[
        (&["statsu"], &[], 125, "did you mean `status`?"),
        (
            &["run", "--slot", "2", "j", "--", "true"],
            &[],
            125,
            "did you mean `--slots`?",
        ),
        (
            &["history", "--outcome", "skip"],
            &[],
            125,
            "it takes ok, failed, skipped",
        ),
        (
            &["clear-locks"],
            &[],
            125,
            "clear-locks needs NAME... or --all",
        ),
        (&["stop-due"], &[], 125, "stop-due needs NAME... or --all"),
        (
            &["run", "j", "--", "true"],
            &[("JOBRUN_QUIET", "maybe")],
            125,
            "in JOBRUN_QUIET (from the environment; it sets --quiet)",
        ),
        (
            &["history", "--since", "yesterday"],
            &[],
            125,
            "how long ago: --since 2h, 7d; not a date",
        ),
        (
            &["run", "j", "--", "echo hi; date"],
            &[],
            127,
            "jobrun runs the command without a shell: use -- sh -c",
        ),
    ];
    for (args, vars, code, says) in cases {
        Jobrun::new(&env)
            .args(*args)
            .envs(vars.iter().copied())
            .code(*code)
            .stderr_lines(1)
            .stderr_contains(*says)
            .run();
    }
}
