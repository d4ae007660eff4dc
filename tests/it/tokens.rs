//! Fencing tokens through the binary, whatever a writer of the store or a
//! clock does: they never repeat, never go backwards (not even after
//! `forget`), and are never below 1; a counter that cannot grow refuses the
//! pass with one line rather than hand out a token twice.

use crate::support::{both_stores, store_exec, Jobrun, TestEnv};

/// Run a pass of `job` whose command prints its token; the token.
fn token_of_a_pass(env: &TestEnv, job: &str, vars: &[(&str, &str)]) -> u64 {
    let ran = Jobrun::new(env)
        .envs(vars.iter().copied())
        .args(["run", job, "--", "sh", "-c", "echo \"$JOBRUN_TOKEN\""])
        .run();
    ran.stdout
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("token {:?}: {e}", ran.stdout))
}

/// A writer of the store sets the counter to its largest value: the next
/// pass is refused with one line, its command never runs, and nothing holds
/// the job; never the same token twice.
fn a_counter_that_cannot_grow_refuses_the_pass(env: &TestEnv) {
    token_of_a_pass(env, "full", &[]);
    store_exec(
        env,
        "UPDATE jobs SET next_token = 9223372036854775807 WHERE name = 'full'",
    );
    let ran = Jobrun::new(env)
        .args(["run", "full", "--", "touch"])
        .arg(env.path("ran"))
        .refused()
        .stderr_contains("cannot grow")
        .run();
    assert!(!env.path("ran").exists(), "{}", ran.stderr);
    assert!(env.find_job("full").is_some_and(|j| j.slots.is_empty()));
}

/// A clock 60 years behind still gives a token of at least 1, and the
/// command reads it as the positive number it is.
fn a_clock_far_behind_gives_a_token_above_zero(env: &TestEnv) {
    let token = token_of_a_pass(env, "old", &[("JOBRUN_CLOCK_SKEW", "-60y")]);
    assert!(token >= 1 && token < i64::MAX as u64, "{token}");
}

/// A job whose counter ran far ahead of the clock (a clock set a year
/// ahead, then corrected) is forgotten and seen again: its tokens stay
/// above every token it was given before.
fn tokens_after_forget_stay_above_the_high_water_mark(env: &TestEnv) {
    let ahead = token_of_a_pass(env, "ahead", &[("JOBRUN_CLOCK_SKEW", "365d")]);
    let forgotten = Jobrun::new(env)
        .args(["forget", "ahead"])
        .any_stderr("forget may say what it removed")
        .run();
    assert_eq!(forgotten.code, Some(0), "{}", forgotten.stderr);
    let again = token_of_a_pass(env, "ahead", &[]);
    assert!(again > ahead, "{again} after {ahead}");
}

both_stores!(
    a_counter_that_cannot_grow_refuses_the_pass,
    a_clock_far_behind_gives_a_token_above_zero,
    tokens_after_forget_stay_above_the_high_water_mark,
);
