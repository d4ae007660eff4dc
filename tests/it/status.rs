//! `status` for people: every line fits 100 columns, whatever the names,
//! hosts and reasons; and the JSON carries what the README documents.

use std::time::Duration;

use jobrun::model::{Liveness, State, StatusReport};

use crate::support::{both_stores, script, Jobrun, TestEnv};

fn human_status_fits_100_columns(env: &TestEnv) {
    let long = "a".repeat(200);
    let ready = env.path("ready");
    let child = script(
        env,
        "child.sh",
        &format!("touch {}; exec sleep 30", ready.display()),
    );
    let host = "h".repeat(80);
    env.start_with(
        "pass",
        &["run", &long, "--", &child],
        &[("JOBRUN_HOST", &host), ("JOBRUN_BOOT_ID", "elsewhere")],
    );
    assert!(env.wait_for_file("ready", Duration::from_secs(10)));
    Jobrun::new(env)
        .args(["run", "short", "--", "sh", "-c", "exit 3"])
        .code(3)
        .run();
    Jobrun::new(env)
        .args(["pause", "short", "--reason"])
        .arg("r".repeat(300))
        .stderr_contains("short: paused")
        .run();
    let out = Jobrun::new(env).args(["status"]).code(0).run().output;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().count() >= 4, "{text}");
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    // The row still says what matters.
    assert!(text.contains("running"), "{text}");
    assert!(text.contains("unknown: other host"), "{text}");
    assert!(text.contains("paused"), "{text}");
    assert!(text.contains("failed"), "{text}");
}

fn json_status_has_the_documented_fields(env: &TestEnv) {
    let ready = env.path("ready");
    let child = script(
        env,
        "child.sh",
        &format!("touch {}; exec sleep 30", ready.display()),
    );
    env.start(
        "pass",
        &["run", "feeds.poll", "--lease", "7s", "--", &child],
    );
    assert!(env.wait_for_file("ready", Duration::from_secs(10)));
    let out = Jobrun::new(env).args(["status", "--json"]).code(0).run();
    let report: StatusReport = out.json();
    let job = report.job("feeds.poll").expect("listed");
    assert_eq!(job.state, State::Running);
    // The keys as printed, apart from the models: the documented contract.
    let printed: serde_json::Value = out.json();
    let slot = &printed["jobs"][0]["slots"][0];
    for key in [
        "slot",
        "state",
        "token",
        "pass_id",
        "holder",
        "verdict",
        "since",
        "held_ms",
        "renewed_ago_ms",
        "expires_in_ms",
        "renewal_late",
        "max_hold_ms",
        "command",
    ] {
        assert!(!slot[key].is_null(), "slot lacks {key}: {slot}");
    }
    let slot = &job.slots[0];
    assert_eq!(slot.verdict.liveness, Liveness::Alive);
    assert!(slot.holder.child_pid.is_some(), "{slot:?}");
    let expires = slot.expires_in_ms;
    assert!((1..=7000).contains(&expires), "{expires}");
    assert_eq!(slot.command[0], child);
    assert_eq!(job.queue.length, 0);
    assert!(job.paused.is_none());
}

both_stores!(
    human_status_fits_100_columns,
    json_status_has_the_documented_fields
);
