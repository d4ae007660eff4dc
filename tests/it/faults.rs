//! Never two at once, under faults: a pass killed at the worst instant, a
//! command that forks, a store deleted or re-created under a running pass,
//! a clock that jumps, durations that overflow. Each test reproduces the
//! fault through the real binary and checks, with an independent witness
//! where overlap is the question, that no two passes of a job ran at once.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jobrun::model::State;

use crate::support::{
    alive, both_stores, kill, script, start_pass, store_exec, text, wait_until, Kind, TestEnv,
};

const START: Duration = Duration::from_secs(10);

/// The processes whose parent is `ppid`.
fn children_of(ppid: i32) -> Vec<i32> {
    procs()
        .filter(|(_, s)| s.1 == ppid)
        .map(|(p, _)| p)
        .collect()
}

/// The running processes of process group `pgid`.
fn group_of(pgid: i32) -> Vec<i32> {
    procs()
        .filter(|(_, s)| s.2 == pgid && s.0 != 'Z')
        .map(|(p, _)| p)
        .collect()
}

/// Every process with (state, ppid, pgrp), from /proc.
fn procs() -> impl Iterator<Item = (i32, (char, i32, i32))> {
    fs::read_dir("/proc").unwrap().flatten().filter_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let mut f = stat[stat.rfind(')')? + 1..].split_whitespace();
        let state = f.next()?.chars().next()?;
        let ppid = f.next()?.parse().ok()?;
        let pgrp = f.next()?.parse().ok()?;
        Some((pid, (state, ppid, pgrp)))
    })
}

fn exe_name(pid: i32) -> String {
    fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn one_line(s: &str) -> bool {
    s.lines().count() == 1
}

/// The spawn-to-record window, made deterministic: the test holds the
/// store's write lock, so the pass cannot commit its slot. Its command is
/// forked and held, and never runs while it is not on record; a wrapper
/// SIGKILLed in that state leaves nothing running and nothing held.
#[test]
fn the_command_never_runs_before_it_is_on_record() {
    let env = TestEnv::sqlite();
    assert_eq!(env.run(&["run", "u", "--", "true"]).status.code(), Some(0));
    let witness = env.path("ran");
    let cmd = script(
        &env,
        "cmd.sh",
        &format!("touch {}; exec sleep 30", witness.display()),
    );

    let db = rusqlite::Connection::open(&env.db).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let wrapper = env.start("held", &["run", "--lease", "3s", "u", "--", &cmd]) as i32;
    let mut held = vec![];
    assert!(
        wait_until(START, || {
            held = children_of(wrapper);
            !held.is_empty()
        }),
        "the wrapper never forked its command"
    );
    let child = held[0];
    // Forked, in a group of its own, and still the jobrun image: held
    // before exec while its slot cannot be committed.
    assert_eq!(
        exe_name(child),
        exe_name(wrapper),
        "the command exec'd early"
    );
    assert_eq!(group_of(child), vec![child]);
    assert!(!witness.exists(), "the command ran before it was on record");

    // The wrapper dies at the worst instant: the held command exits
    // without ever running, and nothing was committed.
    kill(wrapper, libc::SIGKILL);
    assert!(env.wait_exit(wrapper as u32, START).is_some());
    assert!(
        wait_until(START, || !alive(child)),
        "the held command outlived its wrapper"
    );
    db.execute_batch("ROLLBACK").unwrap();
    assert!(!witness.exists(), "the command ran after its wrapper died");
    assert_eq!(env.held("u"), 0, "{:?}", env.find_job("u"));

    // Once the store is free, a pass runs at once, and the store names its
    // command from the start.
    let wrapper = env.start("next", &["run", "--lease", "3s", "u", "--", &cmd]);
    assert!(env.wait_for_file("ran", START), "{}", env.stderr_of("next"));
    let s = env.slot("u");
    let recorded = s.holder.child_pid.unwrap();
    assert!(
        children_of(wrapper as i32).contains(&recorded),
        "recorded child {recorded} is not the wrapper's: {s:?}"
    );
    assert!(wait_until(START, || exe_name(recorded) == "sleep"));
    kill(wrapper as i32, libc::SIGTERM);
    assert!(env.wait_exit(wrapper, START).is_some());
}

/// Wrapper and command SIGKILLed while a process the command started runs
/// on in the pass's process group: the pass is orphaned, not dead; the next
/// pass does not start; status names the live member; stop-due stops it.
fn a_grandchild_keeps_the_pass(env: &TestEnv) {
    let cmd = script(
        env,
        "forks.sh",
        "sleep 60 &\n\
         echo $! > gc.pid.tmp && mv gc.pid.tmp gc.pid\n\
         echo $$ > child.pid.tmp && mv child.pid.tmp child.pid\n\
         wait",
    );
    let wrapper = env.start("forks", &["run", "--lease", "3s", "g", "--", &cmd]);
    assert!(
        env.wait_for_file("gc.pid", START),
        "{}",
        env.stderr_of("forks")
    );
    assert!(env.wait_for_file("child.pid", START));
    let (child, grandchild) = (env.pid_in("child.pid"), env.pid_in("gc.pid"));
    assert!(wait_until(START, || env
        .find_slot("g")
        .is_some_and(|s| s.holder.child_pid == Some(child))));
    kill(wrapper as i32, libc::SIGKILL);
    kill(child, libc::SIGKILL);
    assert!(env.wait_exit(wrapper, START).is_some());
    assert!(wait_until(START, || !alive(child)));
    assert!(alive(grandchild));

    let out = env.run(&["run", "-E", "75", "g", "--", "touch", "rival"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(!env.path("rival").exists(), "a pass ran beside the orphan");
    let s = env.slot("g");
    assert_eq!(s.state, State::Orphaned, "{s:?}");
    let reason = &s.verdict.reason;
    assert!(
        reason.contains(&format!("pid {grandchild} of its process group runs on")),
        "{reason}"
    );

    let out = env.run(&["stop-due", "--all", "--wait", "10s"]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", text(&out.stderr));
    assert!(
        said.contains(&format!("of orphaned process group {child}")),
        "{said}"
    );
    assert!(wait_until(START, || !alive(grandchild)));
    assert_eq!(env.held("g"), 0, "{:?}", env.find_job("g"));
    let out = env.run(&["run", "-E", "75", "g", "--", "touch", "rival"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// stop-due's KILL escalation reaches every process of a live pass's group,
/// even one that cleared its environment: the group is led by the verified
/// wrapper's own command.
fn stop_due_kills_the_whole_group_of_a_live_pass(env: &TestEnv) {
    let cmd = script(
        env,
        "stubborn.sh",
        "trap '' TERM
         env -i sleep 60 &
         echo $! > bare.pid.tmp && mv bare.pid.tmp bare.pid
         wait",
    );
    let wrapper = env.start("stubborn", &["run", "--kill-after", "1h", "s", "--", &cmd]);
    assert!(
        env.wait_for_file("bare.pid", START),
        "{}",
        env.stderr_of("stubborn")
    );
    let bare = env.pid_in("bare.pid");
    let out = env.run(&["stop-due", "--all", "--wait", "15s", "--kill-after", "1s"]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("sent KILL to 2 process(es)"), "{said}");
    assert!(!alive(bare), "a process of the pass survived: {said}");
    assert!(env.wait_exit(wrapper, START).is_some());
    assert_eq!(env.held("s"), 0);
}

/// A small generator for the torture's choices; no test needs more.
struct Dice(u64);

impl Dice {
    fn new() -> Dice {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
        Dice(seed | 1)
    }

    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// SIGKILL torture: launchers loop `run` of a command that forks, while a
/// killer SIGKILLs wrappers, commands, the processes they start, or all of
/// a pass, at random. An independent lock (flock on a witness file, held by
/// every process of a pass) reports any overlap. Bounded in time.
fn kill_torture_never_overlaps(env: &TestEnv) {
    const LAUNCHERS: usize = 3;
    let run_for = Duration::from_secs(15);
    let witness = env.path("witness");
    let overlaps = env.path("overlaps");
    let body = format!(
        "flock -n -E 99 {w} sleep 0.2; [ $? -ne 99 ] || echo overlap >> {o}",
        w = witness.display(),
        o = overlaps.display()
    );
    let wrappers: Arc<Mutex<Vec<i32>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicUsize::new(0));
    let kills = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + run_for;
    std::thread::scope(|scope| {
        for _ in 0..LAUNCHERS {
            let (wrappers, stop, completed) = (&wrappers, &stop, &completed);
            let mut cmd = env.cmd(&["run", "-E", "75", "--lease", "3s", "t", "--", "sh", "-c"]);
            cmd.arg(&body)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            scope.spawn(move || {
                let mut cmd: Command = cmd;
                while !stop.load(Ordering::Relaxed) {
                    let mut child = cmd.spawn().expect("start jobrun");
                    let pid = child.id() as i32;
                    wrappers.lock().unwrap().push(pid);
                    let status = child.wait().unwrap();
                    wrappers.lock().unwrap().retain(|p| *p != pid);
                    if status.code() == Some(0) {
                        completed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let (wrappers, kills) = (&wrappers, &kills);
        scope.spawn(move || {
            let mut dice = Dice::new();
            while Instant::now() < deadline {
                // Pacing of the load, not synchronisation.
                std::thread::sleep(Duration::from_millis(20 + dice.roll(120)));
                let live = wrappers.lock().unwrap().clone();
                if live.is_empty() {
                    continue;
                }
                let wrapper = live[dice.roll(live.len() as u64) as usize];
                let command = children_of(wrapper);
                let group: Vec<i32> = command
                    .iter()
                    .flat_map(|c| group_of(*c))
                    .filter(|p| !command.contains(p))
                    .collect();
                let targets: Vec<i32> = match dice.roll(4) {
                    0 => vec![wrapper],
                    1 => command.clone(),
                    2 => group,
                    _ => [vec![wrapper], command.clone(), group].concat(),
                };
                for p in targets {
                    kill(p, libc::SIGKILL);
                    kills.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::Relaxed);
    });
    // Every pass of the torture has ended; what is left of killed passes
    // (a `sleep 0.2` at most) ends by itself.
    let found = fs::read_to_string(&overlaps).unwrap_or_default();
    let done = completed.load(Ordering::Relaxed);
    eprintln!(
        "[{:?}] kill torture: {} SIGKILLs, {done} passes completed, {} overlaps in {run_for:?}",
        env.kind,
        kills.load(Ordering::Relaxed),
        found.lines().count()
    );
    assert_eq!(found, "", "two passes of the job ran at once");
    // About 40 on an idle 2-core machine; a loaded one completes fewer.
    assert!(done >= 3, "only {done} passes completed in {run_for:?}");
    // The job is not left stuck: a pass runs once what is left has ended.
    assert!(
        wait_until(START, || env
            .run(&["run", "-E", "75", "t", "--", "true"])
            .status
            .code()
            == Some(0)),
        "the job stayed blocked: {:?}",
        env.find_job("t")
    );
}

/// Remove the store under a running pass: the files of a SQLite store, or
/// the schema of a PostgreSQL one (which the next pass then re-creates).
fn delete_store(env: &TestEnv) {
    match env.kind {
        Kind::Sqlite => {
            for suffix in ["", "-wal", "-shm"] {
                let _ = fs::remove_file(format!("{}{suffix}", env.db));
            }
        }
        Kind::Postgres => store_exec(
            env,
            "DROP TABLE jobs, leases, waiters, pauses, history, jobrun_schema, jobrun_store, \
             jobrun_meta",
        ),
    }
}

/// A store deleted under a running pass: the holder logs the loss within
/// a renewal interval (and does not record the pass into nowhere); a later
/// pass, in the new store, gets a larger token than every earlier one.
fn a_deleted_store_loses_the_lease_and_tokens_never_repeat(env: &TestEnv) {
    // A 9 s lease, renewed every 3 s: the next tick notices the store gone,
    // long before a window of failed renewals would lose the lease.
    let first = start_pass(env, "d", "first", "9s", &[]);
    let earlier = env.slot("d").token;
    delete_store(env);
    let mut replaced = Instant::now();
    if env.kind == Kind::Postgres {
        // The next pass re-creates the schema: a new store at the address,
        // which the holder can tell from its own from then on.
        let out = env.run(&["run", "d", "--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        replaced = Instant::now();
    }
    assert!(
        wait_until(START, || env.stderr_of("first").contains("lease lost")),
        "the holder never noticed: {}",
        env.stderr_of("first")
    );
    let noticed = replaced.elapsed();
    let said = env.stderr_of("first");
    let why = match env.kind {
        Kind::Sqlite => "was deleted",
        Kind::Postgres => "is not the one this pass started with",
    };
    assert!(said.contains(why), "{said}");
    // At the next tick, 3 s at most (a loaded machine adds a little);
    // a loss by an unrenewed window would come 6 s or more after.
    assert!(
        noticed < Duration::from_secs(5),
        "noticed after {noticed:?}"
    );
    assert_eq!(said.matches("lease lost").count(), 1, "{said}");

    let out = env.run(&["run", "d", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let later: Vec<i64> = env.history("d").iter().map(|p| p.token.unwrap()).collect();
    assert!(!later.is_empty());
    assert!(
        later.iter().all(|t| *t > earlier),
        "a token repeated or went back: {later:?} after {earlier}"
    );

    fs::write(env.path("first.stop"), "").unwrap();
    assert!(env.wait_exit(first.wrapper, START).is_some());
}

/// A holder past its max hold stops renewing; a rival takes its slot only
/// once its lease has lapsed too, and an acquirer whose clock is hours
/// ahead never takes a live holder's slot.
fn max_hold_never_judged_on_a_jumping_clock(env: &TestEnv) {
    let skewed = [("JOBRUN_CLOCK_SKEW", "2h")];
    let rival = |job: &str, ran: &str| {
        let mut c = env.cmd(&["run", "-E", "75", job, "--", "touch", ran]);
        let out = c.envs(skewed).output().unwrap();
        (out.status.code(), text(&out.stderr))
    };
    // `jobrun run --lease 6s --max-hold MAX JOB` of a command that runs
    // until `<name>.stop` exists; returns once the command runs.
    let start_holder = |name: &str, job: &str, max_hold: &str| {
        let cmd = script(
            env,
            &format!("{name}.sh"),
            &format!(
                "echo $$ > {name}.pid.tmp && mv {name}.pid.tmp {name}.pid\n\
                 while [ ! -e {name}.stop ]; do sleep 0.05; done"
            ),
        );
        let wrapper = env.start(
            name,
            &[
                "run",
                "--lease",
                "6s",
                "--max-hold",
                max_hold,
                job,
                "--",
                &cmd,
            ],
        );
        assert!(env.wait_for_file(&format!("{name}.pid"), START));
        wrapper
    };
    // A live holder well within its max hold of one hour, seen from two
    // hours ahead.
    let live = start_holder("live", "j", "1h");
    assert!(wait_until(START, || env.held("j") == 1));
    let (code, err) = rival("j", "rival1");
    assert_eq!(
        code,
        Some(75),
        "a skewed clock took a live holder's slot: {err}"
    );
    assert!(!env.path("rival1").exists());

    // A live holder past its max hold: it stops renewing, and keeps its
    // slot until its lease has run out.
    let holder = start_holder("hold", "h", "6s");
    assert!(
        wait_until(START, || env
            .stderr_of("hold")
            .contains("max hold 6s reached")),
        "{}",
        env.stderr_of("hold")
    );
    // Renewed at 2 s and 4 s, max hold at 6 s: about 4 s of lease left,
    // room for a loaded machine to look and try a rival within it.
    let left = env.find_slot("h").map_or(0, |s| s.expires_in_ms);
    assert!(left > 1000, "{left} ms left");
    let (code, err) = rival("h", "rival2");
    assert_eq!(code, Some(75), "taken before its lease lapsed: {err}");
    assert!(!env.path("rival2").exists());
    assert!(
        wait_until(START, || env
            .find_slot("h")
            .is_some_and(|s| s.expires_in_ms <= 0)),
        "{:?}",
        env.find_slot("h")
    );
    let (code, err) = rival("h", "rival3");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("past its max hold 6.0s"), "{err}");

    fs::write(env.path("hold.stop"), "").unwrap();
    fs::write(env.path("live.stop"), "").unwrap();
    for w in [holder, live] {
        assert!(env.wait_exit(w, START).is_some());
    }
}

/// Durations too large for the clocks or the store are refused at startup
/// with one line and exit 125, before anything is written.
#[test]
fn overflowing_durations_are_refused_and_nothing_is_written() {
    let env = TestEnv::sqlite();
    let db = env.path("never.db");
    let huge = "18446744073709551615s";
    let cases: [&[&str]; 7] = [
        &["run", "--lease", "10000000000000000s", "j", "--", "true"],
        &["run", "--lease", "31days", "j", "--", "true"],
        &["run", "--max-hold", huge, "j", "--", "true"],
        &["run", "--kill-after", huge, "j", "--", "true"],
        &["run", "--wait", huge, "j", "--", "true"],
        &["stop-due", "--all", "--wait", huge],
        &["stop-due", "--all", "--wait", "1s", "--kill-after", huge],
    ];
    for args in cases {
        let out = env.cmd(args).env("JOBRUN_DB", &db).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(one_line(&err), "{args:?}: {err}");
        assert!(
            err.contains("longer than the most allowed"),
            "{args:?}: {err}"
        );
        assert!(!Path::new(&db).exists(), "{args:?} wrote a store");
    }
    let out = env
        .cmd(&[
            "run",
            "--lease",
            "30days",
            "--max-hold",
            "100y",
            "j",
            "--",
            "true",
        ])
        .env("JOBRUN_DB", &db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

both_stores!(
    a_grandchild_keeps_the_pass,
    stop_due_kills_the_whole_group_of_a_live_pass,
    kill_torture_never_overlaps,
    a_deleted_store_loses_the_lease_and_tokens_never_repeat,
    max_hold_never_judged_on_a_jumping_clock,
);
