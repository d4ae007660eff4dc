//! What only the PostgreSQL store has to prove: a dropped or stopped server
//! costs renewals, not the lease, until a whole window has passed; hosts
//! contend through the server; expiry is judged on the server's clock.

use std::time::{Duration, Instant};

use jobrun::model::Outcome;

use crate::support::{held_child, kill, script, wait_until, OwnServer, TestEnv};

fn token_of(env: &TestEnv, job: &str) -> Option<i64> {
    env.find_slot(job).map(|s| s.token)
}

fn renewed_ago(env: &TestEnv, job: &str) -> Option<i64> {
    env.find_slot(job).map(|s| s.renewed_ago_ms)
}

/// Whether the job's lease was renewed after `since`, however long the
/// status read takes: a renewal before `since` is older, when status reads
/// it, than the time elapsed since `since` when the read began.
fn renewed_since(env: &TestEnv, job: &str, since: Instant) -> bool {
    let before = since.elapsed().as_millis() as i64;
    // A few ms for the two clocks' rounding.
    renewed_ago(env, job).is_some_and(|ago| ago + 5 < before)
}

const OTHER_HOST: [(&str, &str); 2] = [("JOBRUN_HOST", "host-b"), ("JOBRUN_BOOT_ID", "boot-b")];

#[test]
fn terminated_backend_is_reconnected_and_the_lease_kept() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let child = held_child(&env, "child", "");
    let done = env.path("child.done");
    let pid = env.start("pass", &["run", "j", "--lease", "3s", "--", &child]);
    assert!(env.wait_for_file("child.ready", Duration::from_secs(10)));
    let token = token_of(&env, "j").expect("held");
    // Wait for the first renewal, so the renewer has its own connection.
    assert!(
        wait_until(Duration::from_secs(10), || env
            .find_slot("j")
            .is_some_and(|s| s.held_ms - s.renewed_ago_ms > 0)),
        "never renewed"
    );
    // Terminate every jobrun backend of this database (the pass's and its
    // renewer's connections).
    let dbname = env.db.rsplit('/').next().unwrap().to_string();
    let mut admin = postgres::Client::connect(&env.db, postgres::NoTls).unwrap();
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = $1 AND application_name = 'jobrun'",
            &[&dbname],
        )
        .unwrap()
        .get(0);
    assert!(killed >= 1, "no jobrun backend to terminate");
    // The next tick fails and says why; the one after reconnects.
    assert!(
        wait_until(Duration::from_secs(10), || env
            .stderr_of("pass")
            .contains("renewal failed")),
        "no renewal failure logged: {}",
        env.stderr_of("pass")
    );
    let failed = Instant::now();
    let err = env.stderr_of("pass");
    assert!(
        err.contains("terminat") || err.contains("closed"),
        "error not shown: {err}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || renewed_since(&env, "j", failed)),
        "no renewal after the reconnect: {:?}",
        env.find_slot("j")
    );
    assert_eq!(
        token_of(&env, "j"),
        Some(token),
        "lock not held under the same token"
    );
    std::fs::write(&done, "").unwrap();
    assert_eq!(env.wait_exit(pid, Duration::from_secs(10)), Some(0));
    assert!(!env.stderr_of("pass").contains("lease lost"));
    assert_eq!(env.history("j")[0].outcome, Outcome::Ok);
}

#[test]
fn a_short_outage_costs_renewals_not_the_lease() {
    let Some(server) = OwnServer::start() else {
        return;
    };
    let env = TestEnv::postgres_on(&server.url);
    let child = held_child(&env, "child", "");
    let done = env.path("child.done");
    // A 9 s window renewed every 3 s; the server is away for about 4 s.
    let pid = env.start("pass", &["run", "j", "--lease", "9s", "--", &child]);
    assert!(env.wait_for_file("child.ready", Duration::from_secs(10)));
    let token = token_of(&env, "j").expect("held");
    server.halt();
    let down = Instant::now();
    assert!(
        wait_until(Duration::from_secs(8), || env
            .stderr_of("pass")
            .contains("renewal failed")),
        "no failed renewal while the server was down"
    );
    // The outage itself: about 4 s, past one renewal tick.
    while down.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(50));
    }
    server.restart();
    let back = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || renewed_since(&env, "j", back)),
        "not renewed after the server came back: {:?}",
        env.find_slot("j")
    );
    assert_eq!(token_of(&env, "j"), Some(token));
    std::fs::write(&done, "").unwrap();
    assert_eq!(env.wait_exit(pid, Duration::from_secs(10)), Some(0));
    assert!(
        !env.stderr_of("pass").contains("lease lost"),
        "{}",
        env.stderr_of("pass")
    );
    assert_eq!(env.history("j")[0].outcome, Outcome::Ok);
}

#[test]
fn a_long_outage_loses_the_lease_once_and_another_host_takes_over() {
    let Some(server) = OwnServer::start() else {
        return;
    };
    let env = TestEnv::postgres_on(&server.url);
    let child = held_child(&env, "child", "echo finished");
    let done = env.path("child.done");
    let pid = env.start("pass", &["run", "j", "--lease", "3s", "--", &child]);
    assert!(env.wait_for_file("child.ready", Duration::from_secs(10)));
    server.halt();
    assert!(
        wait_until(Duration::from_secs(10), || env
            .stderr_of("pass")
            .contains("lease lost")),
        "lease not reported lost: {}",
        env.stderr_of("pass")
    );
    server.restart();
    // Another host sees the lease lapsed (server clock) and takes the job.
    let rival = env
        .cmd(&["run", "j", "--lease", "3s", "--", "true"])
        .envs(OTHER_HOST)
        .output()
        .unwrap();
    assert_eq!(rival.status.code(), Some(0));
    assert_eq!(
        env.history("j")[0].outcome,
        Outcome::Ok,
        "rival did not run: {}",
        String::from_utf8_lossy(&rival.stderr)
    );
    // The first pass went on (default policy) and finished by itself.
    std::fs::write(&done, "").unwrap();
    assert_eq!(env.wait_exit(pid, Duration::from_secs(10)), Some(0));
    assert_eq!(env.stdout_of("pass").trim(), "finished");
    assert_eq!(env.stderr_of("pass").matches("lease lost").count(), 1);
    // It started before the rival: the oldest pass in history.
    assert_eq!(env.history("j").last().unwrap().outcome, Outcome::LostLease);
}

/// Start a pass of `job` as another host; returns (wrapper pid, child pid file).
fn start_as(env: &TestEnv, log: &str, host: &str, job: &str, lease: &str) -> u32 {
    let ready = env.path(&format!("{log}.ready"));
    let pidfile = env.path(&format!("{log}.pid"));
    let child = script(
        env,
        &format!("{log}.sh"),
        &format!(
            "echo $$ > {}; touch {}; exec sleep 60",
            pidfile.display(),
            ready.display()
        ),
    );
    env.start_with(
        log,
        &["run", job, "--lease", lease, "--", &child],
        &[
            ("JOBRUN_HOST", host),
            ("JOBRUN_BOOT_ID", &format!("{host}-boot")),
        ],
    )
}

#[test]
fn a_killed_holder_on_one_host_is_taken_over_by_another_only_after_its_lease() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let wrapper = start_as(&env, "a", "host-a", "j", "4s");
    assert!(env.wait_for_file("a.ready", Duration::from_secs(10)));
    let child = env.pid_in("a.pid");
    kill(wrapper as i32, libc::SIGKILL);
    kill(child, libc::SIGKILL);
    let killed = Instant::now();
    let last_renewal_ago = renewed_ago(&env, "j").unwrap_or(0);
    // Host B retries until it gets the job.
    let mut took = None;
    while killed.elapsed() < Duration::from_secs(15) {
        let tried = killed.elapsed();
        let out = env
            .cmd(&["run", "j", "--lease", "4s", "--", "true"])
            .env("JOBRUN_HOST", "host-b")
            .env("JOBRUN_BOOT_ID", "host-b-boot")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        if env.history("j")[0].outcome == Outcome::Ok {
            took = Some((tried, killed.elapsed()));
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The attempt that took over began at `tried` and ended at `took`.
    let (tried, took) = took.expect("host b never took over");
    let lease_left = Duration::from_millis((4000 - last_renewal_ago).max(0) as u64);
    eprintln!("takeover after {tried:?}..{took:?} (lease had {lease_left:?} left)");
    assert!(
        took + Duration::from_millis(150) >= lease_left,
        "taken over before the lease lapsed: {took:?}"
    );
    // The attempt before it, on a loaded machine, can take a second or two.
    assert!(
        tried <= lease_left + Duration::from_secs(3),
        "takeover too late: began {tried:?}"
    );
}

#[test]
fn two_hosts_never_hold_one_job_at_once() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let log = env.path("overlap.log");
    let child = script(
        &env,
        "pass.sh",
        &format!(
            "echo \"+ $JOBRUN_HOST $JOBRUN_TOKEN\" >> {log}; sleep 0.2; echo \"- $JOBRUN_HOST $JOBRUN_TOKEN\" >> {log}",
            log = log.display()
        ),
    );
    let hosts = ["host-a", "host-b", "host-a", "host-b", "host-a", "host-b"];
    let pids: Vec<u32> = (0..hosts.len())
        .map(|i| {
            // Each retries with --wait: the queue serialises them across hosts.
            env.start_with(
                &format!("p{i}"),
                &["run", "j", "--wait", "60s", "--", &child],
                &[("JOBRUN_HOST", hosts[i]), ("JOBRUN_BOOT_ID", hosts[i])],
            )
        })
        .collect();
    for pid in pids {
        assert_eq!(env.wait_exit(pid, Duration::from_secs(60)), Some(0));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let mut inside = 0;
    let mut tokens = vec![];
    for line in text.lines() {
        if line.starts_with('+') {
            inside += 1;
            tokens.push(line.split_whitespace().nth(2).unwrap().to_string());
        } else {
            inside -= 1;
        }
        assert!(inside <= 1, "two passes at once:\n{text}");
    }
    assert_eq!(tokens.len(), hosts.len(), "{text}");
    let mut sorted = tokens.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), tokens.len(), "a token repeated: {tokens:?}");
}

#[test]
fn a_host_with_a_fast_clock_cannot_steal_a_live_lease() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let wrapper = start_as(&env, "a", "host-a", "j", "3s");
    assert!(env.wait_for_file("a.ready", Duration::from_secs(10)));
    let token = token_of(&env, "j").unwrap();
    // Host B's clock is an hour ahead; by its clock the lease lapsed long
    // ago. The server's clock decides, so it must skip, every time.
    for _ in 0..3 {
        let out = env
            .cmd(&["run", "j", "--lease", "3s", "--", "true"])
            .env("JOBRUN_HOST", "host-b")
            .env("JOBRUN_BOOT_ID", "host-b-boot")
            .env("JOBRUN_CLOCK_SKEW", "1h")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("already running"),
            "host b stole the lease: {err}"
        );
        assert_eq!(token_of(&env, "j"), Some(token));
    }
    assert_eq!(env.slot("j").holder.host, "host-a");
    kill(wrapper as i32, libc::SIGTERM);
}

#[test]
fn a_role_with_table_privileges_only_can_run_passes() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    // The owner's first use creates the schema.
    assert_eq!(env.run(&["run", "j", "--", "true"]).status.code(), Some(0));
    let role = format!("jobrun_dml_{}", std::process::id());
    let dbname = env.db.rsplit('/').next().unwrap().to_string();
    let mut admin = postgres::Client::connect(&env.db, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; \
             GRANT CONNECT ON DATABASE {dbname} TO {role}; \
             GRANT USAGE ON SCHEMA public TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}; \
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};"
        ))
        .unwrap();
    let url = env
        .db
        .replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    let out = env
        .cmd(&["run", "j", "--", "true"])
        .env("JOBRUN_DB", &url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let status = env
        .cmd(&["status", "--json"])
        .env("JOBRUN_DB", &url)
        .output()
        .unwrap();
    // Drop the role before asserting, so a failure leaves nothing behind.
    drop(admin);
    let mut admin = postgres::Client::connect(&env.db, postgres::NoTls).unwrap();
    let _ = admin.batch_execute(&format!(
        "REASSIGN OWNED BY {role} TO postgres; DROP OWNED BY {role}; DROP ROLE {role};"
    ));
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(env.history("j").len(), 2);
}

#[test]
fn a_waiter_keeps_its_place_through_a_server_restart() {
    let Some(server) = OwnServer::start() else {
        return;
    };
    let env = TestEnv::postgres_on(&server.url);
    let holder = held_child(&env, "holder", "");
    let h = env.start("holder", &["run", "--lease", "9s", "j", "--", &holder]);
    assert!(env.wait_for_file("holder.ready", Duration::from_secs(10)));
    let w = env.start(
        "waiter",
        &["run", "--lease", "9s", "--wait", "60s", "j", "--", "true"],
    );
    assert!(
        wait_until(Duration::from_secs(10), || env
            .find_job("j")
            .is_some_and(|j| j.queue.length == 1)),
        "the waiter never queued"
    );
    server.halt();
    assert!(
        wait_until(Duration::from_secs(10), || env
            .stderr_of("waiter")
            .contains("store unavailable while queued")),
        "the waiter did not notice the outage: {}",
        env.stderr_of("waiter")
    );
    server.restart();
    std::fs::write(env.path("holder.done"), "").unwrap();
    assert_eq!(
        env.wait_exit(h, Duration::from_secs(20)),
        Some(0),
        "{}",
        env.stderr_of("holder")
    );
    assert_eq!(
        env.wait_exit(w, Duration::from_secs(30)),
        Some(0),
        "{}",
        env.stderr_of("waiter")
    );
    let outcomes: Vec<Outcome> = env.history("j").iter().map(|p| p.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::Ok, Outcome::Ok],
        "the waiter's pass did not run"
    );
}
