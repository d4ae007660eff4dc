//! `jobrun run`: exit codes, the child's environment, the lease.

use std::time::Duration;

use crate::both_stores;
use crate::env::TestEnv;

fn exit_codes_pass_through(env: &TestEnv) {
    let code = |args: &[&str]| env.run(args).status.code();
    assert_eq!(code(&["run", "j", "--", "true"]), Some(0));
    assert_eq!(code(&["run", "j", "--", "sh", "-c", "exit 7"]), Some(7));
    assert_eq!(code(&["run", "j", "--", "sh", "-c", "kill -TERM $$"]), Some(143));
    assert_eq!(code(&["run", "j", "--", "/nonexistent/cmd"]), Some(127));
    assert_eq!(code(&["run", "j", "--", "/etc/hostname"]), Some(126));
    assert_eq!(code(&["run", "j", "--lease", "1s", "--", "true"]), Some(125));
    // Every pass that reached the store is recorded, nothing left held.
    assert_eq!(env.held("j"), 0);
    let outcomes: Vec<String> = env
        .history("j")
        .iter()
        .map(|p| p["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outcomes, ["spawn-failed", "spawn-failed", "killed", "failed", "ok"]);
}

fn child_sees_job_token_slot_and_pass(env: &TestEnv) {
    let out = env.run(&[
        "run",
        "feeds.poll",
        "--",
        "sh",
        "-c",
        "echo $JOBRUN_JOB $JOBRUN_TOKEN $JOBRUN_SLOT $JOBRUN_PASS",
    ]);
    let line = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&f[..3], ["feeds.poll", "1", "0"], "{line}");
    assert_eq!(f[3].len(), 12, "{line}");
    let _ = Duration::ZERO;
}

both_stores!(exit_codes_pass_through, child_sees_job_token_slot_and_pass);
