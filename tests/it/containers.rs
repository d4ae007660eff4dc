//! Work a pass hands to a container engine is part of the pass (`run
//! --containers podman`), driven through a real podman: a container that
//! outlives its wrapper and client keeps the slot until it ends, an engine
//! that cannot answer is unknown and never frees a slot, `stop-due` stops
//! containers by label (an orphaned pass's too), `clear-locks --force`
//! frees the slot and says the container runs on, a container that
//! outlives its command keeps its pass running, another host's container
//! pass is left to its lease, and a forged row makes jobrun ask about, and
//! stop, only containers with that row's exact label.
//!
//! Where no engine can run at all, each test says so and skips
//! (`Podman::new`).

use std::fs;
use std::time::{Duration, Instant};

use jobrun::model::{Liveness, Outcome, SlotStatus, State, StatusReport};

use crate::support::{
    alive, both_stores, kill, script, store_exec, wait_until, Jobrun, Kind, Podman, TestEnv, WEB2,
};

const START: Duration = Duration::from_secs(30);

/// A container pass in flight: its wrapper, its command (podman's client)
/// and its pass id.
struct Pass {
    wrapper: u32,
    child: i32,
    pass_id: String,
}

impl Pass {
    fn label(&self) -> String {
        format!("jobrun.pass={}", self.pass_id)
    }
}

/// `status --json` as a judge that asks the test's engine sees it.
fn status(env: &TestEnv, engine: &Podman) -> StatusReport {
    Jobrun::new(env)
        .envs(engine.vars())
        .args(["status", "--json"])
        .code(0)
        .json()
}

fn slot(env: &TestEnv, engine: &Podman, job: &str) -> Option<SlotStatus> {
    status(env, engine)
        .job(job)
        .and_then(|j| j.slots.first().cloned())
}

/// Start `jobrun run --containers podman JOB -- podman run ...` whose
/// container is `name`; back once the container runs and the store
/// records the command.
fn start(env: &TestEnv, engine: &Podman, job: &str, name: &str, lease: &str) -> Pass {
    start_pass(env, engine, job, name, lease, false)
}

/// As `start`; `detach`: the command is `podman run -d`, which returns as
/// soon as the container runs.
fn start_pass(
    env: &TestEnv,
    engine: &Podman,
    job: &str,
    name: &str,
    lease: &str,
    detach: bool,
) -> Pass {
    let command = engine.pass_command(name, detach);
    let mut args = vec![
        "run",
        "--lease",
        lease,
        "--kill-after",
        "2s",
        "--containers",
        "podman",
        job,
        "--",
    ];
    args.extend(command.iter().map(String::as_str));
    let vars = engine.vars();
    let wrapper = env.start_with(name, &args, &Podman::var_refs(&vars));
    assert!(
        engine.ready(name),
        "{name}: the container never ran: {}",
        env.stderr_of(name)
    );
    let mut recorded = None;
    assert!(
        wait_until(START, || {
            recorded = slot(env, engine, job).filter(|s| s.holder.pid == wrapper as i32);
            recorded.is_some()
        }),
        "{name}: the store never recorded the pass"
    );
    let s = recorded.unwrap();
    assert_eq!(s.containers.as_deref(), Some("podman"), "{s:?}");
    Pass {
        wrapper,
        child: s.holder.child_pid.expect("the command is on record"),
        pass_id: s.pass_id,
    }
}

/// SIGKILL the wrapper and the client's whole group: nothing unwinds, and
/// the container, kept by podman's conmon in a session of its own, runs on.
fn kill_wrapper_and_client(env: &TestEnv, p: &Pass) {
    kill(p.wrapper as i32, libc::SIGKILL);
    kill(-p.child, libc::SIGKILL);
    assert!(
        env.wait_exit(p.wrapper, START).is_some(),
        "wrapper survived"
    );
    assert!(wait_until(START, || !alive(p.child)), "client survived");
}

/// The wrapper and the client SIGKILLed while the container runs: the
/// pass is orphaned and keeps its slot, past its lease too, so the next
/// pass skips; once the container has ended the next pass runs. On SQLite
/// the holder is then dead at once (no process, no container, and the
/// engine was asked as the pass's own user: the owner of its lock file);
/// on PostgreSQL nothing records the pass's user, so "none" is no proof
/// and the lapsed lease decides.
fn a_container_outliving_its_wrapper_keeps_the_slot(env: &TestEnv) {
    let Some(engine) = Podman::new(env) else {
        return;
    };
    let p = start(env, &engine, "j", "first", "4s");
    let running = engine.running(&p.label());
    assert_eq!(running.len(), 1, "{running:?}");
    let short = &running[0][..12];
    let s = slot(env, &engine, "j").unwrap();
    assert_eq!(s.verdict.liveness, Liveness::Alive, "{s:?}");
    assert!(
        s.verdict
            .reason
            .starts_with(&format!("container {short} running; pid {}", p.wrapper)),
        "{s:?}"
    );

    kill_wrapper_and_client(env, &p);
    assert_eq!(engine.running(&p.label()), running, "the container died");
    let s = slot(env, &engine, "j").unwrap();
    assert_eq!(s.state, State::Orphaned, "{s:?}");
    assert_eq!(s.verdict.liveness, Liveness::Alive, "{s:?}");
    assert!(
        s.verdict.reason.starts_with(&format!(
            "container {short} runs on; pid {} is gone",
            p.wrapper
        )),
        "{s:?}"
    );
    // Past its lease, still held: the container is the pass.
    assert!(
        wait_until(START, || slot(env, &engine, "j")
            .is_some_and(|s| s.expires_in_ms <= 0)),
        "the lease never lapsed"
    );
    Jobrun::new(env)
        .envs(engine.vars())
        .args(["run", "-E", "75", "j", "--", "touch", "rival.ran"])
        .code(75)
        .stderr_contains("warning: lease lapsed")
        .stderr_contains("already running; skipping: held by")
        .stderr_contains(format!("(alive: container {short} runs on;"))
        .run();
    assert!(!env.path("rival.ran").exists(), "two passes ran at once");

    engine.finish("first");
    assert!(engine.gone(&p.label()), "the container did not end");
    let why = match env.kind {
        Kind::Sqlite => "dead: no process (".to_string(),
        Kind::Postgres => "lease lapsed".to_string(),
    };
    let ran = Jobrun::new(env)
        .envs(engine.vars())
        .args(["run", "-E", "75", "j", "--", "touch", "next.ran"])
        .code(0)
        .stderr_contains(format!("freed slot 0 (token {}) of holder", s.token))
        .stderr_contains(why)
        .run();
    let freed = ran.stderr;
    match env.kind {
        Kind::Sqlite => assert!(freed.contains("), no container with its label"), "{freed}"),
        Kind::Postgres => assert!(
            freed.contains(
                "unknown: podman shows this user none, but nothing here says which user ran \
                 the pass; no process ("
            ),
            "{freed}"
        ),
    }
    assert!(env.path("next.ran").exists());
    // History names the evidence the pass was freed on.
    let history = env.history("j");
    let first = history
        .iter()
        .find(|r| r.pass_id == p.pass_id)
        .unwrap_or_else(|| panic!("the freed pass is not in history: {history:?}"));
    assert_eq!(first.outcome, Outcome::Abandoned, "{first:?}");
    let evidence = first.freed.as_ref().and_then(|f| f.evidence.clone());
    let evidence = evidence.unwrap_or_default();
    let named = match env.kind {
        Kind::Sqlite => {
            evidence.starts_with("dead: no process (")
                && evidence.ends_with("), no container with its label")
        }
        Kind::Postgres => evidence.starts_with("unknown: podman shows this user none"),
    };
    assert!(named, "{first:?}");
}

/// The engine cannot answer: not installed in the judge's PATH, or hung
/// past the judge's deadline (5 s). The holder's processes are dead, its
/// container runs: unknown, so the slot is kept while the lease runs; the
/// hung engine is KILLed at the deadline, with what it started, and the
/// judge goes on.
fn an_engine_that_cannot_answer_keeps_the_slot(env: &TestEnv) {
    let Some(engine) = Podman::new(env) else {
        return;
    };
    let p = start(env, &engine, "j", "first", "60s");
    kill_wrapper_and_client(env, &p);

    // A PATH without podman: the command is named by its path.
    let empty = env.path("no-engine");
    fs::create_dir(&empty).unwrap();
    let rival = |path: &str, file: &str| {
        Jobrun::new(env)
            .envs(engine.vars())
            .env("PATH", path)
            .args(["run", "-E", "75", "j", "--", "/usr/bin/touch", file])
            .code(75)
            .stderr_contains("j: already running; skipping: held by")
            .run()
    };
    let ran = rival(&empty.to_string_lossy(), "rival1.ran");
    assert!(
        ran.stderr
            .contains("(unknown: podman is not installed (not in PATH); no process (pid"),
        "{}",
        ran.stderr
    );
    let s: StatusReport = Jobrun::new(env)
        .envs(engine.vars())
        .env("PATH", &empty)
        .args(["status", "--json"])
        .code(0)
        .json();
    let s = &s.job("j").unwrap().slots[0];
    assert_eq!(s.verdict.liveness, Liveness::Unknown, "{s:?}");
    assert!(!env.path("rival1.ran").exists());

    // A podman that never answers: it leaves its pid, then sleeps.
    let hung = env.path("hung-engine");
    fs::create_dir(&hung).unwrap();
    let fake = script(
        env,
        "hung-engine/podman",
        &format!(
            "sleep 600 & echo $! > {0}.tmp && mv {0}.tmp {0}; wait",
            env.path("hung.pid").display()
        ),
    );
    assert!(fake.ends_with("/podman"));
    let path = format!(
        "{}:{}",
        hung.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let began = Instant::now();
    let ran = rival(&path, "rival2.ran");
    let took = began.elapsed();
    assert!(
        ran.stderr
            .contains("(unknown: podman did not answer within 5s"),
        "{}",
        ran.stderr
    );
    // Asked once (the answer it never gave is remembered for the rest of
    // the command), KILLed at its deadline.
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(20),
        "{took:?}"
    );
    assert!(!env.path("rival2.ran").exists());
    let sleeper = env.pid_in("hung.pid");
    assert!(
        wait_until(Duration::from_secs(5), || !alive(sleeper)),
        "the hung engine's child {sleeper} was left behind"
    );

    // The real engine again: the container still runs, the pass is alive.
    let s = slot(env, &engine, "j").unwrap();
    assert_eq!(s.state, State::Orphaned, "{s:?}");
    assert_eq!(engine.running(&p.label()).len(), 1);
}

/// `stop-due` stops a container pass through its engine, by label: one
/// whose wrapper lives (which also gets its TERM, and releases), and an
/// orphaned one whose wrapper and client are gone (freed as dead once its
/// container is stopped). Nothing else of the engine is touched.
fn stop_due_stops_containers_by_label(env: &TestEnv) {
    let Some(engine) = Podman::new(env) else {
        return;
    };
    let bystander = engine.start_labelled("bystander", "jobrun.pass=0123456789ab");
    let live = start(env, &engine, "live", "live", "60s");
    let orphan = start(env, &engine, "orphan", "orphan", "60s");
    kill_wrapper_and_client(env, &orphan);
    let ids = |p: &Pass| engine.running(&p.label());
    let (live_ids, orphan_ids) = (ids(&live), ids(&orphan));
    assert_eq!((live_ids.len(), orphan_ids.len()), (1, 1));

    let ran = Jobrun::new(env)
        .envs(engine.vars())
        .args(["stop-due", "--dry-run", "--all"])
        .code(0)
        .stdout_contains(format!(
            "would stop container(s) {} by label {} (podman stop -t 10)",
            &orphan_ids[0][..12],
            orphan.label()
        ))
        .run();
    assert!(ran
        .stdout
        .contains("would signal 2 in-flight job process(es)"));
    assert_eq!(ids(&orphan), orphan_ids, "a dry run stopped a container");

    Jobrun::new(env)
        .envs(engine.vars())
        .args(["stop-due", "--all", "--wait", "60s"])
        .code(0)
        .stdout_contains(format!("signalled wrapper pid {} (TERM)", live.wrapper))
        .stdout_contains(format!(
            "stopping container(s) {} by label {} (podman stop -t 10)",
            &live_ids[0][..12],
            live.label()
        ))
        .stdout_contains(format!(
            "stopping container(s) {} by label {} (podman stop -t 10)",
            &orphan_ids[0][..12],
            orphan.label()
        ))
        .stdout_contains(format!("stopped container(s) {}", &orphan_ids[0][..12]))
        .stdout_contains("signalled 2 in-flight job process(es)")
        .stdout_contains("freed, its holder is dead (dead: no process (")
        .stdout_contains("all 2 signalled pass(es) released their locks")
        .run();
    assert!(ids(&live).is_empty() && ids(&orphan).is_empty());
    assert!(env.wait_exit(live.wrapper, START).is_some());
    let s = status(env, &engine);
    for job in ["live", "orphan"] {
        assert!(s.job(job).unwrap().slots.is_empty(), "{job}: {s:?}");
    }
    // Only the passes' containers, found by their labels, were stopped.
    assert_eq!(engine.all_running(), vec![bystander]);
}

/// `clear-locks` keeps an orphaned container pass (alive); `--force`
/// frees its slot and only that: the container runs on, and the operator
/// is told so, with what would stop it.
fn clear_locks_force_leaves_the_container_running(env: &TestEnv) {
    let Some(engine) = Podman::new(env) else {
        return;
    };
    let p = start(env, &engine, "j", "first", "60s");
    kill_wrapper_and_client(env, &p);
    let id = engine.running(&p.label()).remove(0);
    let short = &id[..12];
    Jobrun::new(env)
        .envs(engine.vars())
        .args(["clear-locks", "j"])
        .code(0)
        .stdout_contains(format!("(alive: container {short} runs on;"))
        .stdout_contains("kept: holder is alive (--force clears it)")
        .run();
    Jobrun::new(env)
        .envs(engine.vars())
        .args(["clear-locks", "--force", "j"])
        .code(0)
        .stdout_contains("cleared: forced over a live holder")
        .stdout_contains(format!(
            "its container(s) {short} still run: clear-locks never stops containers \
             (`podman stop {short}` does; `podman ps --filter label={}` lists them)",
            p.label()
        ))
        .stderr_contains("cleared by --force over a live holder")
        .run();
    assert!(status(env, &engine).job("j").unwrap().slots.is_empty());
    assert_eq!(
        engine.running(&p.label()),
        vec![id],
        "clear-locks stopped it"
    );
}

/// A command that returns while its container runs on (`podman run -d`):
/// the pass keeps its slot, renewed, until the container ends; a TERM to
/// the wrapper stops the container by label, then the pass releases.
fn a_detached_container_keeps_its_pass_running(env: &TestEnv) {
    let Some(engine) = Podman::new(env) else {
        return;
    };
    let p = start_pass(env, &engine, "j", "first", "3s", true);
    assert!(
        wait_until(START, || env
            .stderr_of("first")
            .contains("of the pass run on")),
        "{}",
        env.stderr_of("first")
    );
    assert!(!alive(p.child), "podman run -d returned");
    // Renewed while the container runs: held past a whole lease, never
    // lapsed, and a rival skips.
    let mut s = None;
    assert!(
        wait_until(START, || {
            s = slot(env, &engine, "j");
            s.as_ref().is_some_and(|s| s.held_ms > 4_000)
        }),
        "{s:?}"
    );
    let s = s.unwrap();
    assert!(s.expires_in_ms > 0, "not renewed: {s:?}");
    assert_eq!(s.state, State::Running, "{s:?}");
    assert!(s.verdict.reason.starts_with("container "), "{s:?}");
    Jobrun::new(env)
        .envs(engine.vars())
        .args(["run", "-E", "75", "j", "--", "touch", "rival.ran"])
        .code(75)
        .stderr_contains("(alive: container ")
        .run();
    kill(p.wrapper as i32, libc::SIGTERM);
    assert_eq!(env.wait_exit(p.wrapper, START), Some(0));
    assert!(engine.running(&p.label()).is_empty());
    let err = env.stderr_of("first");
    assert!(
        err.contains(&format!("by label {} (podman stop -t 2)", p.label())),
        "{err}"
    );
    assert!(
        err.contains("no container of the pass runs any more"),
        "{err}"
    );
    assert!(status(env, &engine).job("j").unwrap().slots.is_empty());
}

/// Forged rows: the one value jobrun takes from a row for the engine is
/// the pass id, and only one jobrun could have made. A row naming pass A
/// makes jobrun ask about, and stop, only containers labelled exactly
/// `jobrun.pass=A`; a row whose pass id or engine is anything else makes
/// jobrun run no engine at all. A logging podman in the judges' PATH
/// records every question.
fn forged_rows_reach_only_their_exact_label(env: &TestEnv) {
    let Some(engine) = Podman::new(env) else {
        return;
    };
    let named = "aaaaaaaaaaaa";
    let victim = engine.start_labelled("victim", &format!("jobrun.pass={named}"));
    let near = engine.start_labelled("near", "jobrun.pass=aaaaaaaaaaab");
    let longer = engine.start_labelled("longer", &format!("jobrun.pass={named}0"));
    let other_key = engine.start_labelled("key", &format!("jobrun.passes={named}"));
    let p = start(env, &engine, "j", "first", "60s");
    let own = engine.running(&p.label());
    assert_eq!(own.len(), 1);

    let shim = env.path("shim");
    fs::create_dir(&shim).unwrap();
    let log = env.path("engine.log");
    let real = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("podman"))
        .find(|p| p.is_file())
        .unwrap();
    script(
        env,
        "shim/podman",
        &format!(
            "printf '%s\\n' \"$*\" >> {}\nexec {} \"$@\"",
            log.display(),
            real.display()
        ),
    );
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let asked = || fs::read_to_string(&log).unwrap_or_default();

    store_exec(
        env,
        &format!("UPDATE leases SET pass_id = '{named}' WHERE job = 'j'"),
    );
    let s: StatusReport = Jobrun::new(env)
        .envs(engine.vars())
        .env("PATH", &path)
        .args(["status", "--json"])
        .code(0)
        .json();
    let s = &s.job("j").unwrap().slots[0];
    assert!(
        s.verdict
            .reason
            .starts_with(&format!("container {} running;", &victim[..12])),
        "{s:?}"
    );
    Jobrun::new(env)
        .envs(engine.vars())
        .env("PATH", &path)
        .args(["stop-due", "j"])
        .code(0)
        .stdout_contains(format!("stopped container(s) {}", &victim[..12]))
        .run();
    let lines = asked();
    assert!(!lines.is_empty(), "the engine was never asked");
    for line in lines.lines() {
        let ok = line
            == format!("ps --no-trunc --filter label=jobrun.pass={named} --format {{{{.ID}}}}")
            || line == format!("stop -t 10 {victim}");
        assert!(ok, "asked beyond the row's label: {line:?}\n{lines}");
    }
    assert!(lines.contains("stop -t 10"), "{lines}");
    assert!(engine.running(&format!("jobrun.pass={named}")).is_empty());
    let mut still = engine.all_running();
    still.sort();
    let mut want = vec![near, longer, other_key, own[0].clone()];
    want.sort();
    assert_eq!(
        still, want,
        "a container without the exact label was stopped"
    );
    assert!(alive(p.child), "the real pass's command was signalled");

    // A pass id jobrun never makes, an engine it does not know: no engine
    // is run, the verdict says why, nothing is stopped.
    fs::remove_file(&log).unwrap();
    for (pass_id, containers, why) in [
        (
            "aaaaaaaaaaa*",
            "podman",
            "its pass id is not one jobrun makes, so podman is not asked",
        ),
        (
            "aaaaaaaaaaaa --all",
            "podman",
            "its pass id is not one jobrun makes, so podman is not asked",
        ),
        (
            named,
            "/bin/sh -c id",
            "it declared containers of an engine this jobrun does not know (/bin/sh -c id)",
        ),
    ] {
        store_exec(
            env,
            &format!(
                "UPDATE leases SET pass_id = '{pass_id}', containers = '{containers}' \
                 WHERE job = 'j'"
            ),
        );
        let s: StatusReport = Jobrun::new(env)
            .envs(engine.vars())
            .env("PATH", &path)
            .args(["status", "--json"])
            .code(0)
            .json();
        let s = &s.job("j").unwrap().slots[0];
        assert!(s.verdict.reason.contains(why), "{pass_id}: {s:?}");
        // The row names a live wrapper it cannot be verified as: nothing is
        // signalled, and stop-due says with exit 1 that j may still run.
        Jobrun::new(env)
            .envs(engine.vars())
            .env("PATH", &path)
            .args(["stop-due", "j"])
            .code(1)
            .stdout_contains("not signalled")
            .run();
        assert_eq!(asked(), "", "{pass_id} {containers}: an engine was run");
    }
    assert_eq!(engine.all_running().len(), 4, "something was stopped");
}

/// A container pass recorded by another host: this host's engine is not
/// that host's, so it is not asked (even where, as here, it would see the
/// container): unknown, kept while the lease runs, never stopped from here,
/// and freed once the lease has lapsed.
fn another_hosts_container_pass_is_left_to_its_lease(env: &TestEnv) {
    let Some(engine) = Podman::new(env) else {
        return;
    };
    let mut vars = engine.vars();
    vars.extend(WEB2.iter().map(|(k, v)| (*k, v.to_string())));
    let mut args = vec!["run", "--lease", "4s", "--containers", "podman", "j", "--"];
    let command = engine.pass_command("remote", false);
    args.extend(command.iter().map(String::as_str));
    let wrapper = env.start_with("remote", &args, &Podman::var_refs(&vars));
    assert!(engine.ready("remote"), "{}", env.stderr_of("remote"));
    assert!(wait_until(START, || slot(env, &engine, "j")
        .is_some_and(|s| s.holder.child_pid.is_some())));
    let s = slot(env, &engine, "j").unwrap();
    let label = format!("jobrun.pass={}", s.pass_id);
    let unknown =
        "unknown: its containers run on web2, whose podman cannot be asked from here; other \
         host web2";
    assert_eq!(
        format!("{}: {}", s.verdict.liveness.as_str(), s.verdict.reason),
        unknown,
        "{s:?}"
    );
    Jobrun::new(env)
        .envs(engine.vars())
        .args(["run", "-E", "75", "j", "--", "touch", "rival.ran"])
        .code(75)
        .stderr_contains(format!("({unknown})"))
        .run();
    Jobrun::new(env)
        .envs(engine.vars())
        .args(["stop-due", "j"])
        .code(0)
        .stdout_contains(
            "containers not stopped: its containers run on web2, whose podman cannot be asked \
             from here",
        )
        .stdout_contains("signalled 0 in-flight job process(es)")
        .run();
    assert_eq!(engine.running(&label).len(), 1, "stopped from another host");
    // Its wrapper and client die: still unknown here, until the lease lapses.
    kill(wrapper as i32, libc::SIGKILL);
    kill(-s.holder.child_pid.unwrap(), libc::SIGKILL);
    assert!(env.wait_exit(wrapper, START).is_some());
    assert!(
        wait_until(START, || slot(env, &engine, "j")
            .is_some_and(|s| s.state == State::Stale)),
        "never stale"
    );
    Jobrun::new(env)
        .envs(engine.vars())
        .args(["run", "-E", "75", "j", "--", "touch", "next.ran"])
        .code(0)
        .stderr_contains("lease lapsed")
        .run();
    assert!(env.path("next.ran").exists());
}

both_stores!(
    a_container_outliving_its_wrapper_keeps_the_slot,
    forged_rows_reach_only_their_exact_label,
    another_hosts_container_pass_is_left_to_its_lease,
);

#[test]
fn sqlite_an_engine_that_cannot_answer_keeps_the_slot() {
    an_engine_that_cannot_answer_keeps_the_slot(&TestEnv::sqlite());
}

#[test]
fn sqlite_stop_due_stops_containers_by_label() {
    stop_due_stops_containers_by_label(&TestEnv::sqlite());
}

#[test]
fn sqlite_clear_locks_force_leaves_the_container_running() {
    clear_locks_force_leaves_the_container_running(&TestEnv::sqlite());
}

#[test]
fn sqlite_a_detached_container_keeps_its_pass_running() {
    a_detached_container_keeps_its_pass_running(&TestEnv::sqlite());
}
