//! Monitoring: `check` answers as a monitoring plugin from what the store
//! recorded (exit code and line), driven through the binary from real
//! stores. Time passes by rows written into the store in the past, or by
//! `JOBRUN_CLOCK_SKEW`, never by sleeping.

use std::time::Duration;

use jobrun::model::{Basis, CheckReport, Severity};

use crate::support::procfs::now_ms;
use crate::support::{
    both_stores, kill, kill_pass, start_pass, store_exec, wait_until, Jobrun, TestEnv,
};

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;
const WITHIN: Duration = Duration::from_secs(20);

/// One recorded pass: started `ago` ms ago on `host`, ended `outcome`
/// after `ran` ms.
struct Row<'a> {
    ago: i64,
    host: &'a str,
    outcome: &'a str,
    ran: i64,
}

fn ok(ago: i64) -> Row<'static> {
    Row {
        ago,
        host: "web1",
        outcome: "ok",
        ran: 1_000,
    }
}

fn ended(ago: i64, outcome: &str) -> Row<'_> {
    Row {
        ago,
        host: "web1",
        outcome,
        ran: 1_000,
    }
}

/// Write passes of `job` into the store as a jobrun would have recorded
/// them, the job's row first when the store does not know it.
fn record(env: &TestEnv, job: &str, rows: &[Row]) {
    // The store and the job, made as jobrun makes them (only run and pause
    // create a store), with no pass of its own.
    for cmd in [&["pause", "--new", job][..], &["resume", job]] {
        Jobrun::new(env)
            .args(cmd)
            .any_stderr("pause and resume say what they did")
            .run();
    }
    let now = now_ms();
    let mut sql = format!(
        "INSERT INTO jobs (name, next_token, created_ms) VALUES ('{job}', 100, 0) \
         ON CONFLICT (name) DO NOTHING;"
    );
    for (i, r) in rows.iter().enumerate() {
        let started = now - r.ago;
        let token = if r.outcome == "skipped" { "NULL" } else { "7" };
        sql.push_str(&format!(
            "INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
             duration_ms, exit_code, outcome, waited_ms) VALUES ('{job}', 'p{i}-{started}', \
             {token}, 0, '{}', 1, {started}, {}, {}, 0, '{}', 0);",
            r.host,
            started + r.ran,
            r.ran,
            r.outcome
        ));
    }
    store_exec(env, &sql);
}

fn check<'a>(env: &'a TestEnv, args: &[&str]) -> Jobrun<'a> {
    Jobrun::new(env).arg("check").args(args)
}

fn late_by_a_declared_interval(env: &TestEnv) {
    Jobrun::new(env)
        .args(["run", "--every", "10m", "feeds.poll", "--", "true"])
        .run();
    check(env, &[])
        .stdout_contains("JOBRUN OK - 1 job(s) checked | 'late'=0;;;0")
        .run();
    // Started 16 minutes ago: past 10m and the grace of 5m. History is
    // rewritten under the store: the latest passes kept beside it go (as in
    // a store an earlier jobrun wrote), and check reads history itself.
    store_exec(
        env,
        "UPDATE history SET started_ms = started_ms - 960000, ended_ms = ended_ms - 960000; \
         DELETE FROM job_recent",
    );
    check(env, &[])
        .code(1)
        .stdout_contains("JOBRUN WARNING - 1 late | 'late'=1;;;0")
        .stdout_contains("feeds.poll: late: last started 16m ")
        .stdout_contains(" ago, runs every 10m 0s (declared on run), grace 5m 0s")
        .run();
    // Late by more than one further interval: critical.
    store_exec(
        env,
        "UPDATE history SET started_ms = started_ms - 600000, ended_ms = ended_ms - 600000; \
         DELETE FROM job_recent",
    );
    check(env, &[])
        .code(2)
        .stdout_contains("JOBRUN CRITICAL - 1 late")
        .run();
    // check's own thresholds override: -w and -c as a duration or a
    // multiple of the interval; --every overrides the declared interval.
    check(env, &["-w", "20m", "-c", "3x"]).code(0).run();
    check(env, &["-w", "1m", "-c", "3x"]).code(1).run();
    check(env, &["--every", "1h"]).code(0).run();
    check(env, &["--grace", "30m"]).code(0).run();
    // The latest declaration wins.
    Jobrun::new(env)
        .args(["run", "--every", "1h", "feeds.poll", "--", "true"])
        .run();
    let report: CheckReport = check(env, &["--json"]).json();
    let basis = report.job("feeds.poll").unwrap().lateness.basis.clone();
    assert_eq!(
        basis,
        Some(Basis::Every {
            interval_ms: HOUR,
            by_check: false
        })
    );
    check(env, &["-w", "bad"])
        .code(3)
        .stdout_contains("JOBRUN UNKNOWN - invalid --warning")
        .run();
}

fn late_by_a_learned_cadence(env: &TestEnv) {
    let rows: Vec<Row> = (0..20).map(|i| ok(4 * MIN + i * 5 * MIN)).collect();
    record(env, "learned", &rows);
    check(env, &["-v"])
        .stdout_contains("learned: OK: runs every 5m 0s (learned from 20 starts), grace 2m 30s")
        .run();
    // Nine minutes since the last start: 4 past the 5m gap, grace 2m 30s.
    store_exec(env, "UPDATE history SET started_ms = started_ms - 300000");
    check(env, &["learned"])
        .code(1)
        .stdout_contains("learned: late: last started 9m ")
        .stdout_contains(" ago, runs every 5m 0s (learned from 20 starts), grace 2m 30s")
        .run();
    // Fewer than 5 attempts: no lateness verdict, and -v and --json say why.
    record(
        env,
        "young",
        &[ok(HOUR), ok(2 * HOUR), ok(3 * HOUR), ok(4 * HOUR)],
    );
    check(env, &["-v", "young"])
        .stdout_contains(
            "young: OK: no lateness verdict: 4 attempt(s) recorded, a cadence is learned from 5",
        )
        .run();
    let report: CheckReport = check(env, &["--json", "young"]).json();
    let young = report.job("young").unwrap();
    assert_eq!(young.lateness.basis, None);
    assert!(young
        .lateness
        .no_verdict
        .as_deref()
        .unwrap()
        .contains("4 attempt(s)"));
}

/// Monday to Friday at 09:00 for four weeks, the last a Friday: not late
/// over the weekend (a gap it has had before), late once Monday passed.
fn a_weekday_job_is_not_late_over_a_weekend(env: &TestEnv) {
    let friday_ago = 2 * DAY + 12 * HOUR; // Sunday 21:00
    let rows: Vec<Row> = (0..28)
        .filter(|d| d % 7 < 5)
        .map(|d| ok(friday_ago + (25 - d) * DAY))
        .collect();
    record(env, "weekdays", &rows);
    check(env, &["-v"])
        .stdout_contains("weekdays: OK: runs every 1d 0h, gaps up to 3d 0h (learned from 20")
        .run();
    // Tuesday 10:00 and still nothing since Friday: Monday was missed.
    store_exec(
        env,
        &format!(
            "UPDATE history SET started_ms = started_ms - {}",
            DAY + 13 * HOUR
        ),
    );
    check(env, &[])
        .code(1)
        .stdout_contains("weekdays: late: last started 4d 1h ago")
        .run();
}

fn failing_after_n_recovers_after_m(env: &TestEnv) {
    record(env, "f", &[ended(3 * MIN, "ok"), ended(2 * MIN, "failed")]);
    check(env, &[])
        .code(2)
        .stdout_contains("JOBRUN CRITICAL - 1 failing | 'late'=0;;;0 'failing'=1;;;0")
        .stdout_contains(
            "f: failing: the last 1 pass(es) that ran ended badly (latest: failed, exit 0",
        )
        .run();
    check(env, &["--failures", "2"]).code(0).run();
    // Passes that never ran their command, and an operator's stop, are not
    // failures and do not break a run of them.
    record(
        env,
        "f",
        &[
            ended(MIN + 3, "skipped"),
            ended(MIN + 2, "stopped"),
            ended(MIN, "killed"),
        ],
    );
    check(env, &["--failures", "2"])
        .code(2)
        .stdout_contains("the last 2 pass(es) that ran ended badly (latest: killed")
        .run();
    // One ok pass: recovered with M = 1, not yet with M = 2.
    record(env, "f", &[ended(30_000, "ok")]);
    check(env, &["--failures", "2"]).code(0).run();
    check(env, &["--failures", "2", "--recover", "2"])
        .code(2)
        .stdout_contains("f: failing: 1 of the 2 ok pass(es) in a row it needs to recover")
        .run();
    record(env, "f", &[ended(10_000, "ok")]);
    check(env, &["--failures", "2", "--recover", "2"])
        .code(0)
        .run();
}

fn stuck_dead_queued_and_paused(env: &TestEnv) {
    // Ten passes of about a second: a pass held over three times that is
    // stuck by the p95; --max-running replaces the rule.
    let rows: Vec<Row> = (0..10).map(|i| ok(HOUR + i * MIN)).collect();
    record(env, "s", &rows);
    let p = start_pass(env, "s", "s", "1h", &[]);
    check(env, &["--every", "1h", "s"]).code(0).run();
    store_exec(
        env,
        "UPDATE leases SET acquired_ms = acquired_ms - 5000, \
         acquired_boot_ms = acquired_boot_ms - 5000",
    );
    check(env, &["--every", "1h", "s"])
        .code(1)
        .stdout_contains("JOBRUN WARNING - 1 stuck")
        .stdout_contains("s: stuck: pass ")
        .stdout_contains("over 3x its p95 of 1.0s (from 10 passes)")
        .run();
    check(env, &["--every", "1h", "--max-running", "1m", "s"])
        .code(0)
        .run();
    store_exec(
        env,
        "UPDATE leases SET acquired_ms = acquired_ms - 120000, \
         acquired_boot_ms = acquired_boot_ms - 120000",
    );
    check(env, &["--every", "1h", "--max-running", "1m", "s"])
        .code(1)
        .stdout_contains("past --max-running 1m 0s")
        .run();
    // A waiter behind it: a long queue past --max-wait.
    let waiter = env.start("waiter", &["run", "--wait", "60s", "s", "--", "true"]);
    assert!(wait_until(WITHIN, || env.job("s").queue.length == 1));
    check(
        env,
        &[
            "--every",
            "1h",
            "--max-running",
            "1h",
            "--max-wait",
            "1m",
            "s",
        ],
    )
    .code(0)
    .run();
    store_exec(env, "UPDATE waiters SET arrived_ms = arrived_ms - 120000");
    check(
        env,
        &[
            "--every",
            "1h",
            "--max-running",
            "1h",
            "--max-wait",
            "1m",
            "s",
        ],
    )
    .code(1)
    .stdout_contains("JOBRUN WARNING - 1 long queue")
    .stdout_contains(
        "s: long queue: its first waiter has waited 2m 0s, past --max-wait 1m 0s (1 queued)",
    )
    .run();
    // The holder dies without unwinding. Its waiter would free it: the
    // waiter dies first, so the dead row stays.
    kill(waiter as i32, libc::SIGKILL);
    assert!(env.wait_exit(waiter, WITHIN).is_some());
    kill_pass(env, p);
    check(env, &["--every", "1h", "--max-running", "1h", "s"])
        .code(1)
        .stdout_contains("JOBRUN WARNING - 1 dead holder")
        .stdout_contains("s: dead holder not yet freed: pass ")
        .run();
    // An old pause.
    Jobrun::new(env)
        .args(["pause", "--reason", "disk swap", "p"])
        .args(["--new"])
        .stderr_contains("paused")
        .run();
    check(env, &["--max-paused", "1d", "p"]).code(0).run();
    store_exec(
        env,
        &format!("UPDATE pauses SET since_ms = since_ms - {}", 2 * DAY),
    );
    check(env, &["--max-paused", "1d", "p"])
        .code(1)
        .stdout_contains("p: old pause: paused 2d 0h ago (disk swap), past --max-paused 1d 0h")
        .run();
}

fn unknown_is_exit_3(env: &TestEnv) {
    record(env, "feeds.poll", &[ok(MIN)]);
    check(env, &["feeds.pol"])
        .code(3)
        .stdout_contains("JOBRUN UNKNOWN - feeds.pol: store ")
        .stdout_contains("does not know this job; did you mean `feeds.poll`?")
        .run();
    check(env, &["--no-such-flag"])
        .code(3)
        .stdout_contains("JOBRUN UNKNOWN - unexpected argument '--no-such-flag'")
        .run();
    check(env, &["--all", "feeds.poll"]).code(3).run();
    check(env, &["--max-wait", "soon"])
        .code(3)
        .stdout_contains("JOBRUN UNKNOWN - invalid --max-wait")
        .run();
}

both_stores!(
    late_by_a_declared_interval,
    late_by_a_learned_cadence,
    a_weekday_job_is_not_late_over_a_weekend,
    failing_after_n_recovers_after_m,
    stuck_dead_queued_and_paused,
    unknown_is_exit_3,
    metrics_follow_the_exposition_format,
    idle_passes_are_stuck_until_they_touch,
);

/// The same crontab on three hosts (three identities): the ticks are
/// learned, not the seconds between the hosts' starts.
#[test]
fn three_hosts_learn_the_tick_not_the_gap_between_them() {
    let env = TestEnv::sqlite();
    for tick in 0..6 {
        for (i, host) in ["web1", "web2", "web3"].iter().enumerate() {
            let ago = (6 - tick) * 5 * 60 - i as i64;
            Jobrun::new(&env)
                .args(["run", "fleet.sync", "--", "true"])
                .env("JOBRUN_HOST", host)
                .env("JOBRUN_CLOCK_SKEW", format!("-{ago}s"))
                .run();
        }
    }
    // The last tick was 5 minutes ago: due now, within its grace.
    check(&env, &["-v"])
        .stdout_contains("fleet.sync: OK: runs every 5m 0s (learned from 6 starts)")
        .run();
    let late = check(&env, &[])
        .env("JOBRUN_CLOCK_SKEW", "3m")
        .code(1)
        .stdout_contains("fleet.sync: late: last started 8m ")
        .stdout_contains(" ago, runs every 5m 0s (learned from 6 starts)")
        .run();
    assert!(!late.stdout.contains("CRITICAL"), "{}", late.stdout);
}

#[test]
fn a_missing_store_is_unknown() {
    let env = TestEnv::sqlite_not_made();
    check(&env, &[])
        .code(3)
        .stdout_contains("JOBRUN UNKNOWN - no store at ")
        .run();
    let _ = Severity::Unknown;
}

/// `JOBRUN_CLOCK_SKEW` that moves this host's clock to `utc`.
fn skew_to(utc: &str) -> String {
    let at = utc.parse::<jiff::Timestamp>().unwrap().as_millisecond();
    let d = at - now_ms();
    if d < 0 {
        format!("-{}ms", -d)
    } else {
        format!("{d}ms")
    }
}

/// A daily 9:00 in New York: the day the clocks go forward, 9:00 is 13:00
/// UTC, not 14:00.
#[test]
fn late_by_a_cron_schedule_across_a_dst_change() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env)
        .args(["run", "--schedule", "0 9 * * *", "--tz", "America/New_York"])
        .args(["daily", "--", "true"])
        .env("JOBRUN_CLOCK_SKEW", skew_to("2026-03-07T14:00:00Z"))
        .run();
    check(&env, &["--grace", "15m", "-v"])
        .env("JOBRUN_CLOCK_SKEW", skew_to("2026-03-08T13:10:00Z"))
        .stdout_contains(
            "daily: OK: runs on '0 9 * * *' in America/New_York (declared on run), grace 15m 0s",
        )
        .run();
    check(&env, &["--grace", "15m"])
        .env("JOBRUN_CLOCK_SKEW", skew_to("2026-03-08T13:20:00Z"))
        .code(1)
        .stdout_contains("daily: late: last started 23h ")
        .stdout_contains("ago, runs on '0 9 * * *' in America/New_York (declared on run)")
        .run();
    // check's own schedule overrides the job's.
    check(
        &env,
        &["--grace", "15m", "--schedule", "0 9 * * *", "--tz", "UTC"],
    )
    .env("JOBRUN_CLOCK_SKEW", skew_to("2026-03-08T09:20:00Z"))
    .code(1)
    .run();
    // A schedule or zone that cannot be read is refused on run.
    Jobrun::new(&env)
        .args(["run", "--schedule", "every day", "daily", "--", "true"])
        .code(125)
        .stderr_contains("--schedule: 'every day' is not a cron schedule")
        .run();
    Jobrun::new(&env)
        .args([
            "run",
            "--schedule",
            "0 9 * * *",
            "--tz",
            "Mars/Olympus",
            "daily",
            "--",
            "true",
        ])
        .code(125)
        .stderr_contains("time zone 'Mars/Olympus' is not in this system's zoneinfo")
        .run();
}

/// One sample of an exposition: family, labels (unescaped), value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Parse the text exposition format strictly: every sample's family has
/// its HELP and TYPE first, label values are escaped, values are numbers,
/// and no sample has a timestamp.
fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut typed: Vec<String> = vec![];
    let mut out = vec![];
    assert!(text.ends_with('\n'), "{text}");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["gauge", "counter"].contains(&kind), "{line}");
            assert!(!typed.contains(&name.to_string()), "TYPE twice: {line}");
            typed.push(name.into());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (name, rest) = line.split_once('{').unwrap_or_else(|| panic!("{line}"));
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        assert_eq!(typed.last().map(String::as_str), Some(name), "{line}");
        let mut labels = vec![];
        let mut chars = rest.chars();
        loop {
            let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
            assert_eq!(chars.next(), Some('"'), "{line}");
            let mut value = String::new();
            loop {
                match chars.next().unwrap_or_else(|| panic!("{line}")) {
                    '\\' => match chars.next() {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => panic!("bad escape {other:?} in {line}"),
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.push((key, value));
            match chars.next() {
                Some(',') => continue,
                Some('}') => break,
                other => panic!("{other:?} in {line}"),
            }
        }
        let rest: String = chars.collect();
        let words: Vec<&str> = rest.split_whitespace().collect();
        assert_eq!(words.len(), 1, "a value and no timestamp: {line}");
        let value: f64 = words[0].parse().unwrap_or_else(|_| panic!("{line}"));
        out.push(Sample {
            name: name.into(),
            labels,
            value,
        });
    }
    out
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(k2, v2)| k2 == k && v2 == v))
        })
        .map(|s| s.value)
}

fn promtool_accepts(text: &str) {
    use std::io::Write;
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("promtool is not installed (Debian's prometheus): only the parser checked");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        crate::support::text(&out.stdout),
        crate::support::text(&out.stderr)
    );
}

fn metrics_follow_the_exposition_format(env: &TestEnv) {
    let odd = r#"we"ird\name"#;
    for _ in 0..3 {
        Jobrun::new(env)
            .args([
                "run",
                "--keep-history",
                "1",
                "--every",
                "5m",
                odd,
                "--",
                "true",
            ])
            .run();
    }
    Jobrun::new(env)
        .args(["run", "broken", "--", "sh", "-c", "exit 3"])
        .code(3)
        .run();
    Jobrun::new(env)
        .args(["pause", "--new", "held"])
        .stderr_contains("paused")
        .run();
    let text = Jobrun::new(env).arg("metrics").run().stdout;
    promtool_accepts(&text);
    let s = parse_exposition(&text);
    // Pruned to one row, counted three times.
    let passes = |job, outcome| {
        value(
            &s,
            "jobrun_passes_total",
            &[("job", job), ("outcome", outcome)],
        )
    };
    assert_eq!(passes(odd, "ok"), Some(3.0), "{text}");
    assert_eq!(passes("broken", "failed"), Some(1.0), "{text}");
    let one = |name, job| value(&s, name, &[("job", job)]);
    assert_eq!(one("jobrun_expected_interval_seconds", odd), Some(300.0));
    assert_eq!(one("jobrun_check_status", odd), Some(0.0));
    assert_eq!(one("jobrun_check_status", "broken"), Some(2.0));
    assert_eq!(one("jobrun_paused", "held"), Some(1.0));
    assert_eq!(one("jobrun_paused", odd), Some(0.0));
    assert_eq!(one("jobrun_running", odd), Some(0.0));
    assert_eq!(one("jobrun_queue_length", odd), Some(0.0));
    assert!(one("jobrun_last_failure_timestamp_seconds", "broken").is_some());
    assert!(one("jobrun_last_failure_timestamp_seconds", odd).is_none());
    let now = now_ms() as f64 / 1000.0;
    let success = one("jobrun_last_success_timestamp_seconds", odd).unwrap();
    assert!(
        (now - 60.0..=now + 1.0).contains(&success),
        "{success} {now}"
    );
    assert!(one("jobrun_last_start_timestamp_seconds", odd).unwrap() <= success);
    assert!(one("jobrun_last_duration_seconds", odd).is_some());
    // A held pass is running.
    let p = start_pass(env, "busy", "busy", "1h", &[]);
    let s = parse_exposition(&Jobrun::new(env).arg("metrics").run().stdout);
    assert_eq!(value(&s, "jobrun_running", &[("job", "busy")]), Some(1.0));
    std::fs::write(env.path("busy.stop"), "").unwrap();
    assert!(env.wait_exit(p.wrapper, WITHIN).is_some());
}

/// `--textfile` replaces the file whole: a reader polling it while it is
/// rewritten always reads every job's lines; nothing is left beside it.
#[test]
fn the_textfile_is_replaced_whole() {
    let env = TestEnv::sqlite();
    for i in 0..150 {
        record(&env, &format!("job.{i:03}"), &[ok(MIN)]);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jobrun.prom");
    let writer = {
        let mut cmd = env.cmd(&["metrics", "--textfile"]);
        cmd.arg(&file);
        std::thread::spawn(move || {
            for _ in 0..15 {
                let out = cmd.output().unwrap();
                assert!(out.status.success(), "{out:?}");
            }
        })
    };
    let mut reads = 0;
    while !writer.is_finished() || reads == 0 {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let n = text
                .lines()
                .filter(|l| l.starts_with("jobrun_check_status{"))
                .count();
            assert_eq!(n, 150, "a read saw part of the file:\n{text}");
            parse_exposition(&text);
            reads += 1;
        }
    }
    writer.join().unwrap();
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("jobrun.prom")]);
    eprintln!("{reads} reads, every one whole");
}

/// With JOBRUN_METRICS_TEXTFILE set, each pass refreshes the file.
#[test]
fn run_refreshes_the_textfile_after_each_pass() {
    let env = TestEnv::sqlite();
    let file = env.path("jobrun.prom");
    for n in 1..=2 {
        Jobrun::new(&env)
            .args(["run", "j", "--", "true"])
            .env("JOBRUN_METRICS_TEXTFILE", &file)
            .run();
        let s = parse_exposition(&std::fs::read_to_string(&file).unwrap());
        let got = value(
            &s,
            "jobrun_passes_total",
            &[("job", "j"), ("outcome", "ok")],
        );
        assert_eq!(got, Some(n as f64));
    }
    // A file that cannot be written is said, and the pass's code stands.
    Jobrun::new(&env)
        .args(["run", "j", "--", "sh", "-c", "exit 4"])
        .env(
            "JOBRUN_METRICS_TEXTFILE",
            env.path("no/such/dir/jobrun.prom"),
        )
        .code(4)
        .stderr_contains("JOBRUN_METRICS_TEXTFILE: cannot write the metrics to")
        .run();
}

fn touch_as<'a>(env: &'a TestEnv, job: &str, pass: &str, token: i64) -> Jobrun<'a> {
    Jobrun::new(env)
        .arg("touch")
        .env("JOBRUN_JOB", job)
        .env("JOBRUN_PASS", pass)
        .env("JOBRUN_TOKEN", token.to_string())
}

/// A pass run with --max-idle that has not touched for that long is stuck
/// for check; a touch (with the holder's own token only) makes it OK
/// again; a pass without --max-idle is never judged idle.
fn idle_passes_are_stuck_until_they_touch(env: &TestEnv) {
    let p = start_pass(env, "idle", "idle", "1h", &[("JOBRUN_MAX_IDLE", "2h")]);
    let q = start_pass(env, "plain", "plain", "1h", &[]);
    check(env, &["--every", "1d"]).run();
    store_exec(
        env,
        "UPDATE leases SET acquired_ms = acquired_ms - 10800000, \
         acquired_boot_ms = acquired_boot_ms - 10800000",
    );
    check(env, &["--every", "1d"])
        .code(1)
        .stdout_contains("JOBRUN WARNING - 1 stuck")
        .stdout_contains("idle: stuck: pass ")
        .stdout_contains("made no progress (jobrun touch) for 3h 0m, past its --max-idle 2h 0m")
        .stdout_lacks("plain:")
        .run();
    let slot = env.slot("idle");
    touch_as(env, "idle", &slot.pass_id, slot.token - 1)
        .code(1)
        .stderr_contains(format!(
            "idle: refusing the touch: token {} is not the current holder's",
            slot.token - 1
        ))
        .run();
    check(env, &["--every", "1d"]).code(1).run();
    touch_as(env, "idle", &slot.pass_id, slot.token).run();
    check(env, &["--every", "1d"]).run();
    touch_as(env, "idle", "000000000000", slot.token)
        .code(1)
        .stderr_contains("holds no slot of the job")
        .run();
    Jobrun::new(env)
        .arg("touch")
        .code(125)
        .stderr_contains("JOBRUN_JOB is not set: jobrun touch runs inside a pass")
        .run();
    for (name, pass) in [("idle", p), ("plain", q)] {
        std::fs::write(env.path(&format!("{name}.stop")), "").unwrap();
        assert!(env.wait_exit(pass.wrapper, WITHIN).is_some());
    }
}

/// --max-idle on the renewer: a pass that never touches stops renewing,
/// and once its lease lapsed a later pass takes the slot (the hung pass
/// forfeited it, alive or not); a pass that keeps touching keeps its slot
/// past its max idle.
#[test]
fn max_idle_frees_a_hung_pass_and_spares_one_that_touches() {
    let env = TestEnv::sqlite();
    let hung = start_pass(&env, "hung", "hung", "3s", &[("JOBRUN_MAX_IDLE", "3s")]);
    assert!(
        wait_until(WITHIN, || env.stderr_of("hung").contains(
            "no progress (jobrun touch) for --max-idle 3s: the pass is hung"
        )),
        "{}",
        env.stderr_of("hung")
    );
    let took = wait_until(WITHIN, || {
        env.run(&["run", "-E", "75", "-q", "hung", "--", "true"])
            .status
            .code()
            == Some(0)
    });
    assert!(
        took,
        "no later pass took the slot: {:?}",
        env.find_slot("hung")
    );
    let freed = env.history("hung");
    assert!(
        freed
            .iter()
            .any(|p| p.freed.as_ref().is_some_and(|f| f.reason == "forfeited")),
        "{freed:?}"
    );
    std::fs::write(env.path("hung.stop"), "").unwrap();
    assert!(env.wait_exit(hung.wrapper, WITHIN).is_some());

    // A pass that touches every half second keeps its slot for twice its
    // max idle and more.
    let child = crate::support::script(
        &env,
        "toucher.sh",
        &format!(
            "while [ ! -e toucher.stop ]; do {bin} touch && echo >> touched; sleep 0.5; done",
            bin = crate::support::BIN
        ),
    );
    let toucher = env.start_with(
        "toucher",
        &["run", "--lease", "3s", "busy", "--", &child],
        &[("JOBRUN_MAX_IDLE", "3s")],
    );
    let touches = || {
        std::fs::read_to_string(env.path("touched"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    assert!(
        wait_until(Duration::from_secs(30), || touches() >= 14),
        "{}",
        env.stderr_of("toucher")
    );
    let slot = env.slot("busy");
    assert!(slot.held_ms >= 6_000, "{slot:?}");
    assert!(
        !env.stderr_of("toucher").contains("no progress"),
        "{}",
        env.stderr_of("toucher")
    );
    std::fs::write(env.path("toucher.stop"), "").unwrap();
    assert_eq!(
        env.wait_exit(toucher, WITHIN),
        Some(0),
        "{}",
        env.stderr_of("toucher")
    );
}
