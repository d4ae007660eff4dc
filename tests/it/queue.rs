//! The queue (`run --slots N --wait D --coalesce`): FIFO by arrival, no
//! overshoot of N, ghosts judged by evidence, coalescing only into queued
//! passes, pause holding promotion, and the queue as `status` shows it.
//!
//! Children record what they did with `>>` (O_APPEND) into a shared file, so
//! the file's line order is the order things happened; overlap and order are
//! checked from it afterwards.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::time::{Duration, Instant};

use jobrun::model::{Liveness, Outcome};

use crate::support::{alive, both_stores, kill, script, text, wait_until, TestEnv};

const LONG: Duration = Duration::from_secs(30);

/// A pass that appends `start <i> <ms> <slot>` to `log`, waits until the
/// test creates `release.<i>` (giving up after a minute), then appends
/// `end <i> <ms> <slot>`.
fn held_pass(env: &TestEnv) -> String {
    script(
        env,
        "held.sh",
        r#"i=$1
echo "start $i $(date +%s%3N) $JOBRUN_SLOT" >> log
n=0
while [ ! -e "release.$i" ]; do
  n=$((n+1)); if [ $n -gt 3000 ]; then exit 3; fi
  sleep 0.02
done
echo "end $i $(date +%s%3N) $JOBRUN_SLOT" >> log"#,
    )
}

/// Create the store before anything runs concurrently: these tests are
/// about the queue, not about many processes creating one store at once.
fn create_store(env: &TestEnv) {
    // Only run and pause create a store.
    let out = env.run(&["run", "store.created", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn release(env: &TestEnv, i: &str) {
    fs::write(env.path(&format!("release.{i}")), "").unwrap();
}

/// The lines of a file a child appends to (empty when it does not exist).
fn lines(env: &TestEnv, name: &str) -> Vec<String> {
    fs::read_to_string(env.path(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The pass numbers of the `start` lines in `log`, in the order they ran.
fn starts(env: &TestEnv) -> Vec<String> {
    lines(env, "log")
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// Wrapper pids holding a slot of `job`, and those queued, in queue order
/// (none while the store does not know the job).
fn holders(env: &TestEnv, job: &str) -> (Vec<i64>, Vec<i64>) {
    let Some(job) = env.find_job(job) else {
        return (vec![], vec![]);
    };
    let running = job.slots.iter().map(|s| i64::from(s.holder.pid)).collect();
    let queued = job
        .queue
        .waiters
        .iter()
        .map(|w| i64::from(w.holder.pid))
        .collect();
    (running, queued)
}

/// Wait until the pass of wrapper `pid` holds a slot or sits in the queue,
/// so that the next pass a test starts arrives after it.
fn wait_visible(env: &TestEnv, job: &str, pid: u32) {
    let pid = pid as i64;
    assert!(
        wait_until(LONG, || {
            let (r, q) = holders(env, job);
            r.contains(&pid) || q.contains(&pid)
        }),
        "pass of wrapper {pid} never showed up in status: {:?}",
        env.find_job(job)
    );
}

fn wait_queued(env: &TestEnv, job: &str, pid: u32) {
    let pid = pid as i64;
    assert!(
        wait_until(LONG, || holders(env, job).1.contains(&pid)),
        "wrapper {pid} never queued: {:?}",
        env.find_job(job)
    );
}

/// Check `cond` over and over for `span`: the state must hold the whole
/// time (this watches a status, it does not wait for an event).
fn holds_for(span: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + span;
    while Instant::now() < end {
        if !cond() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    cond()
}

fn exit_of(env: &TestEnv, pid: u32) -> Option<i32> {
    env.wait_exit(pid, Duration::from_secs(60))
}

/// Walk `+`/`-` (or `start`/`end`) lines in file order: the most passes
/// inside at once. Panics when two passes inside at once share a slot.
fn max_overlap(lines: &[String]) -> usize {
    let mut inside: BTreeMap<String, String> = BTreeMap::new();
    let mut most = 0;
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (pass, slot) = (f[1].to_string(), f[f.len() - 1].to_string());
        match f[0] {
            "start" | "+" => {
                if let Some(other) = inside.insert(slot.clone(), pass.clone()) {
                    panic!("passes {other} and {pass} both inside slot {slot}: {lines:#?}");
                }
                most = most.max(inside.len());
            }
            _ => {
                assert_eq!(inside.remove(&slot), Some(pass), "end without start: {l}");
            }
        }
    }
    most
}

fn five_passes_two_slots_run_in_arrival_order(env: &TestEnv) {
    create_store(env);
    let pass = held_pass(env);
    let mut pids = Vec::new();
    for i in 0..5 {
        let n = i.to_string();
        let pid = env.start(
            &format!("p{i}"),
            &["run", "--slots", "2", "--wait", "60s", "q", "--", &pass, &n],
        );
        wait_visible(env, "q", pid);
        if i < 2 {
            // The first two take a slot at once: let each child write its
            // start line before the next pass exists, so that two children
            // racing to append cannot reorder what the queue did not order.
            assert!(
                wait_until(LONG, || starts(env).len() > i),
                "pass {i} never started"
            );
        }
        pids.push(pid);
    }
    let (running, queued) = holders(env, "q");
    assert_eq!(running.len(), 2, "{:?}", env.find_job("q"));
    assert_eq!(
        queued,
        pids[2..].iter().map(|p| *p as i64).collect::<Vec<_>>()
    );
    // Free one slot at a time (so exactly one waiter, the head, is due),
    // releasing passes in the order they started so that a wrong order
    // cannot deadlock: both slots are busy before each release.
    for k in 0..5 {
        assert!(
            wait_until(LONG, || starts(env).len() >= (k + 2).min(5)),
            "only {:?} started",
            starts(env)
        );
        release(env, &starts(env)[k]);
    }
    for (i, pid) in pids.iter().enumerate() {
        assert_eq!(
            exit_of(env, *pid),
            Some(0),
            "pass {i}: {}",
            env.stderr_of(&format!("p{i}"))
        );
    }
    let log = lines(env, "log");
    assert_eq!(log.len(), 10, "{log:#?}");
    assert_eq!(max_overlap(&log), 2, "{log:#?}");
    assert_eq!(starts(env), ["0", "1", "2", "3", "4"], "{log:#?}");
    let ok = env
        .history("q")
        .iter()
        .filter(|p| p.outcome == Outcome::Ok)
        .count();
    assert_eq!(ok, 5);
}

/// Ten waiters behind one slot, each pass quick: every release leaves all
/// the rest competing, and only the head may win.
fn ten_waiters_run_in_arrival_order(env: &TestEnv) {
    create_store(env);
    let hold = script(
        env,
        "hold.sh",
        "while [ ! -e release.r ]; do sleep 0.02; done",
    );
    let note = script(env, "note.sh", "echo \"start $1 $(date +%s%3N) 0\" >> log");
    let r = env.start("r", &["run", "q", "--", &hold]);
    wait_visible(env, "q", r);
    let mut waiters = Vec::new();
    for i in 0..10 {
        let n = i.to_string();
        let pid = env.start(
            &format!("w{i}"),
            &["run", "--wait", "60s", "q", "--", &note, &n],
        );
        wait_queued(env, "q", pid);
        waiters.push(pid);
    }
    release(env, "r");
    for (i, pid) in waiters.iter().enumerate() {
        assert_eq!(
            exit_of(env, *pid),
            Some(0),
            "w{i}: {}",
            env.stderr_of(&format!("w{i}"))
        );
    }
    let expected: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    assert_eq!(starts(env), expected);
}

fn fifty_waiters_never_overshoot_three_slots(env: &TestEnv) {
    create_store(env);
    let pass = script(
        env,
        "short.sh",
        r#"echo "+ $JOBRUN_PASS $JOBRUN_SLOT" >> herd.log
sleep 0.05
echo "- $JOBRUN_PASS $JOBRUN_SLOT" >> herd.log"#,
    );
    // Of 50 waiters, 45 are told to wait long enough to run; 5 are told
    // 100 ms and may run (a free slot) or time out, but nothing else. Ten
    // passes that do not wait race them: they run or skip.
    let mut pids = Vec::new();
    for i in 0..60 {
        let wait = match i % 6 {
            5 => "0",
            _ if i % 10 == 9 => "100ms",
            _ => "120s",
        };
        let pid = env.start(
            &format!("w{i}"),
            &[
                "run", "--slots", "3", "--wait", wait, "-E", "75", "herd", "--", &pass,
            ],
        );
        pids.push((pid, wait));
    }
    let codes: Vec<Option<i32>> = pids
        .iter()
        .map(|(pid, _)| env.wait_exit(*pid, Duration::from_secs(150)))
        .collect();
    let log = lines(env, "herd.log");
    let most = max_overlap(&log);
    assert!((1..=3).contains(&most), "{most} passes at once: {log:#?}");
    let ran: BTreeSet<String> = log
        .iter()
        .filter_map(|l| l.strip_prefix("+ "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let history = env.history("herd");
    let (mut timed_out, mut skipped) = (0, 0);
    for (i, ((pid, wait), code)) in pids.iter().zip(&codes).enumerate() {
        let err = env.stderr_of(&format!("w{i}"));
        let rec = history
            .iter()
            .find(|p| p.pid == *pid as i32)
            .unwrap_or_else(|| panic!("pass {i} left no history: {err}"));
        let id = rec.pass_id.as_str();
        match (rec.outcome, *wait) {
            (Outcome::Ok, _) => {
                assert_eq!(*code, Some(0), "waiter {i}: {err}");
                assert!(ran.contains(id), "waiter {i} ok but its child never ran");
            }
            (Outcome::WaitExpired, "100ms") => {
                assert_eq!(*code, Some(75), "waiter {i}: {err}");
                assert!(err.contains("gave up waiting"), "waiter {i}: {err}");
                assert!(!ran.contains(id), "waiter {i} timed out but its child ran");
                timed_out += 1;
            }
            (Outcome::Skipped, "0") => {
                assert_eq!(*code, Some(75), "pass {i}: {err}");
                assert!(err.contains("skipping"), "pass {i}: {err}");
                assert!(!ran.contains(id), "pass {i} skipped but its child ran");
                skipped += 1;
            }
            (o, w) => panic!("pass {i} told to wait {w} ended {}: {err}", o.as_str()),
        }
    }
    assert_eq!(ran.len() + timed_out + skipped, 60, "{log:#?}");
    assert!(ran.len() >= 45, "only {} ran", ran.len());
    assert_eq!(env.held("herd"), 0);
    assert_eq!(env.job("herd").queue.length, 0);
    eprintln!(
        "{} passes ran, {timed_out} timed out as told, {skipped} skipped, at most {most} at once",
        ran.len()
    );
}

fn sigkilled_head_waiter_does_not_stall_the_queue(env: &TestEnv) {
    create_store(env);
    let hold = script(
        env,
        "hold.sh",
        r#"while [ ! -e release.a ]; do sleep 0.02; done
date +%s%3N > a.end"#,
    );
    let a = env.start("a", &["run", "q", "--", &hold]);
    wait_visible(env, "q", a);
    let b = env.start("b", &["run", "--wait", "60s", "q", "--", "true"]);
    wait_queued(env, "q", b);
    let c = env.start(
        "c",
        &[
            "run",
            "--wait",
            "60s",
            "q",
            "--",
            "sh",
            "-c",
            "date +%s%3N > c.start",
        ],
    );
    wait_queued(env, "q", c);
    let ghost = env.job("q").queue.waiters[0].pass_id.clone();
    kill(b as i32, libc::SIGKILL);
    assert_eq!(env.wait_exit(b, LONG), Some(137));
    release(env, "a");
    assert!(env.wait_for_file("c.start", LONG), "{}", env.stderr_of("c"));
    assert_eq!(exit_of(env, a), Some(0));
    assert_eq!(exit_of(env, c), Some(0), "{}", env.stderr_of("c"));
    let ms = |f: &str| -> i64 {
        fs::read_to_string(env.path(f))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let stall = ms("c.start") - ms("a.end");
    eprintln!("stall behind a SIGKILLed head waiter: {stall} ms");
    // A ghost that held the queue would stall it for its lease (5 min);
    // a loaded machine's hand-off takes a second or so.
    assert!(
        (0..3000).contains(&stall),
        "next waiter started {stall} ms after the release"
    );
    let err = env.stderr_of("c");
    assert!(
        err.contains(&format!("removed queued pass {ghost}")),
        "{err}"
    );
    assert_eq!(env.job("q").queue.length, 0);
}

/// A waiter SIGKILLed at the tail has nobody behind it to remove it; the
/// next plain `run` that looks must judge it, not skip behind it for good.
fn sigkilled_last_waiter_does_not_block_later_runs(env: &TestEnv) {
    create_store(env);
    let hold = script(
        env,
        "hold.sh",
        "while [ ! -e release.a ]; do sleep 0.02; done",
    );
    let a = env.start("a", &["run", "q", "--", &hold]);
    wait_visible(env, "q", a);
    let b = env.start("b", &["run", "--wait", "60s", "q", "--", "true"]);
    wait_queued(env, "q", b);
    kill(b as i32, libc::SIGKILL);
    assert_eq!(env.wait_exit(b, LONG), Some(137));
    release(env, "a");
    assert_eq!(exit_of(env, a), Some(0));
    let out = env.run(&["run", "-E", "75", "q", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("removed queued pass"), "{err}");
    assert_eq!(env.job("q").queue.length, 0);
}

/// A ghost (a SIGKILLed identical waiter) must not absorb a --coalesce
/// newcomer: its work would never run. The newcomer removes it and queues,
/// also while the job is paused (when nothing else looks at the queue).
fn coalesce_never_joins_a_ghost(env: &TestEnv) {
    create_store(env);
    assert!(env.run(&["pause", "--new", "q"]).status.success());
    let args = ["run", "--wait", "60s", "--coalesce", "q", "--", "true"];
    let b = env.start("b", &args);
    wait_queued(env, "q", b);
    kill(b as i32, libc::SIGKILL);
    assert_eq!(env.wait_exit(b, LONG), Some(137));
    let c = env.start("c", &args);
    wait_queued(env, "q", c);
    assert!(env.run(&["resume", "q"]).status.success());
    assert_eq!(exit_of(env, c), Some(0), "{}", env.stderr_of("c"));
    let err = env.stderr_of("c");
    assert!(!err.contains("coalesced"), "joined a ghost: {err}");
    assert!(err.contains("removed queued pass"), "{err}");
    let ok = env
        .history("q")
        .iter()
        .filter(|p| p.outcome == Outcome::Ok)
        .count();
    assert_eq!(ok, 1, "the newcomer's pass did not run");
}

/// clear-locks --force evicts live holders, never live waiters: they hold
/// nothing, and an operator clearing one hung pass must not empty the queue.
fn clear_locks_force_leaves_live_waiters(env: &TestEnv) {
    create_store(env);
    let hold = script(
        env,
        "hold.sh",
        "while [ ! -e release.a ]; do sleep 0.02; done",
    );
    let a = env.start("a", &["run", "q", "--", &hold]);
    wait_visible(env, "q", a);
    let b = env.start("b", &["run", "--wait", "60s", "q", "--", "true"]);
    wait_queued(env, "q", b);
    let out = env.run(&["clear-locks", "--force", "q"]);
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("cleared 1"), "{said}");
    assert!(!said.contains("queued pass"), "touched the waiter: {said}");
    // The waiter was not removed: it runs once the slot is free.
    assert_eq!(exit_of(env, b), Some(0), "{}", env.stderr_of("b"));
    assert!(
        !env.stderr_of("b").contains("removed"),
        "{}",
        env.stderr_of("b")
    );
    release(env, "a");
    assert_eq!(exit_of(env, a), Some(0));
}

fn coalesce_joins_only_a_queued_pass(env: &TestEnv) {
    create_store(env);
    // Every pass holds until the test creates release.<its pass id>.
    let work = script(
        env,
        "work.sh",
        r#"echo "ran $1 $JOBRUN_TOKEN" >> work.log
n=0
while [ ! -e "release.$JOBRUN_PASS" ]; do
  n=$((n+1)); if [ $n -gt 3000 ]; then exit 3; fi
  sleep 0.02
done"#,
    );
    let r = env.start("r", &["run", "q", "--", &work, "x"]);
    wait_visible(env, "q", r);
    // Only a running pass: an identical --coalesce newcomer skips (without
    // --wait) or queues (with it): it never joins the running pass.
    let out = env.run(&["run", "--coalesce", "-E", "75", "q", "--", &work, "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert!(err.contains("already running; skipping"), "{err}");
    assert!(!err.contains("coalesced"), "{err}");
    let queued = env.start(
        "queued",
        &["run", "--coalesce", "--wait", "60s", "q", "--", &work, "x"],
    );
    wait_queued(env, "q", queued);
    let queued_id = env.job("q").queue.waiters[0].pass_id.clone();
    // Running + queued: an identical newcomer returns at once, naming the
    // queued pass.
    let t = Instant::now();
    let out = env.run(&[
        "run",
        "--coalesce",
        "--wait",
        "60s",
        "--coalesced-exit-code",
        "3",
        "q",
        "--",
        &work,
        "x",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("coalesced into queued pass {queued_id}")),
        "{err}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    // Without --wait it coalesces too, with the default exit code 0.
    let out = env.run(&["run", "--coalesce", "-E", "75", "q", "--", &work, "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("coalesced into queued pass {queued_id}")),
        "{err}"
    );
    // A different argv queues normally.
    let other = env.start(
        "other",
        &["run", "--coalesce", "--wait", "60s", "q", "--", &work, "y"],
    );
    wait_queued(env, "q", other);
    let job = env.job("q");
    assert_eq!(job.queue.length, 2);
    assert!(alive(r as i32), "the running pass ended early");
    let other_id = &job.queue.waiters[1].pass_id;
    let running_id = &job.slots[0].pass_id;
    for id in [running_id, &queued_id, other_id] {
        release(env, id);
    }
    for (name, pid) in [("r", r), ("queued", queued), ("other", other)] {
        assert_eq!(
            exit_of(env, pid),
            Some(0),
            "{name}: {}",
            env.stderr_of(name)
        );
    }
    // x ran twice (the running pass, then the queued one that absorbed the
    // newcomers), then y: in that order, under growing tokens.
    let ran = lines(env, "work.log");
    let words: Vec<(&str, i64)> = ran
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[1], f[2].parse().unwrap())
        })
        .collect();
    assert_eq!(
        words.iter().map(|w| w.0).collect::<Vec<_>>(),
        ["x", "x", "y"],
        "{ran:?}"
    );
    assert!(words.windows(2).all(|w| w[0].1 < w[1].1), "{ran:?}");
    let outcomes: Vec<Outcome> = env.history("q").iter().map(|p| p.outcome).collect();
    let count = |o: Outcome| outcomes.iter().filter(|x| **x == o).count();
    assert_eq!(
        (
            count(Outcome::Ok),
            count(Outcome::Coalesced),
            count(Outcome::Skipped)
        ),
        (3, 2, 1),
        "{outcomes:?}"
    );
}

fn pause_holds_promotion_and_resume_releases_in_order(env: &TestEnv) {
    create_store(env);
    let hold = script(
        env,
        "hold.sh",
        "while [ ! -e release.r ]; do sleep 0.02; done",
    );
    let note = script(env, "note.sh", "echo \"start $1 $(date +%s%3N) 0\" >> log");
    let r = env.start("r", &["run", "q", "--", &hold]);
    wait_visible(env, "q", r);
    let mut waiters = Vec::new();
    for i in 1..=3 {
        let n = i.to_string();
        let pid = env.start(
            &format!("w{i}"),
            &["run", "--wait", "60s", "q", "--", &note, &n],
        );
        wait_queued(env, "q", pid);
        waiters.push(pid);
    }
    assert!(env.run(&["pause", "--new", "q"]).status.success());
    release(env, "r");
    assert_eq!(exit_of(env, r), Some(0));
    let held_back = || {
        env.find_job("q")
            .is_some_and(|j| j.slots.is_empty() && j.queue.length == 3)
            && starts(env).is_empty()
    };
    assert!(
        holds_for(Duration::from_secs(2), held_back),
        "{:?}",
        env.find_job("q")
    );
    // A waiter on a paused job still times out as told.
    let t = Instant::now();
    let late = env.start(
        "late",
        &["run", "--wait", "2s", "-E", "75", "q", "--", "true"],
    );
    let code = env.wait_exit(late, Duration::from_secs(15));
    let waited = t.elapsed();
    let err = env.stderr_of("late");
    assert_eq!(code, Some(75), "{err}");
    assert!(err.contains("paused"), "{err}");
    assert!(err.contains("gave up waiting"), "{err}");
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(15),
        "waited {waited:?}"
    );
    assert!(held_back(), "{:?}", env.find_job("q"));
    assert!(env.run(&["resume", "q"]).status.success());
    for (i, pid) in waiters.iter().enumerate() {
        assert_eq!(
            exit_of(env, *pid),
            Some(0),
            "w{}: {}",
            i + 1,
            env.stderr_of(&format!("w{}", i + 1))
        );
    }
    assert_eq!(starts(env), ["1", "2", "3"]);
}

fn status_shows_the_queue(env: &TestEnv) {
    create_store(env);
    let hold = script(
        env,
        "hold.sh",
        "while [ ! -e release.r ]; do sleep 0.02; done",
    );
    let r = env.start("r", &["run", "q", "--", &hold]);
    wait_visible(env, "q", r);
    let spawned = Instant::now();
    let w1 = env.start("w1", &["run", "--wait", "60s", "q", "--", "true"]);
    wait_queued(env, "q", w1);
    let seen = Instant::now();
    // Let the head's age grow measurably before the second arrives
    // (watching status, not sleeping).
    assert!(wait_until(LONG, || env
        .find_job("q")
        .and_then(|j| j.queue.head_waited_ms)
        .is_some_and(|ms| ms >= 300)));
    let w2 = env.start("w2", &["run", "--wait", "60s", "q", "--", "true"]);
    wait_queued(env, "q", w2);
    // The head arrived between `spawned` and `seen`: its age lies between.
    let lo = seen.elapsed().as_millis() as i64;
    let j = env.job("q");
    let hi = spawned.elapsed().as_millis() as i64;
    let q = &j.queue;
    assert_eq!(q.length, 2, "{j:?}");
    let head = q.head_waited_ms.unwrap();
    assert!(
        head + 50 >= lo && head <= hi + 50,
        "head waited {head} ms, expected {lo}..{hi}"
    );
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    for (i, pid) in [w1, w2].iter().enumerate() {
        let w = &q.waiters[i];
        assert_eq!(w.position, i + 1, "{j:?}");
        assert_eq!(w.holder.pid, *pid as i32, "{j:?}");
        assert_eq!(w.holder.host, host, "{j:?}");
        assert_eq!(w.verdict.liveness, Liveness::Alive, "{j:?}");
        // Its waited_ms is a number: `env.job` parsed it as one.
    }
    let tail = q.waiters[1].waited_ms;
    assert!(head >= tail + 250, "head waited {head} ms, tail {tail} ms");
    // A dead waiter at the tail shows as dead until someone removes it.
    kill(w2 as i32, libc::SIGKILL);
    assert_eq!(env.wait_exit(w2, LONG), Some(137));
    // Its held command ends once it sees its wrapper gone (a moment later).
    assert!(
        wait_until(LONG, || env.find_job("q").is_some_and(|j| j
            .queue
            .waiters
            .get(1)
            .is_some_and(|w| w.verdict.liveness == Liveness::Dead))),
        "{:?}",
        env.find_job("q")
    );
    let out = env.run(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("queue: 2 waiting, head waited"), "{text}");
    assert!(text.contains(&format!(":{w1} waited")), "{text}");
    release(env, "r");
    assert_eq!(exit_of(env, w1), Some(0), "{}", env.stderr_of("w1"));
}

/// Holders take --slots 3, a waiter asks --slots 2: while it waits or
/// holds, 2 binds for everyone, including a waiter ahead of it.
fn smallest_slots_among_holders_and_waiters_binds(env: &TestEnv) {
    create_store(env);
    let pass = held_pass(env);
    let start = |name: &str, slots: &str, wait: &str| {
        env.start(
            name,
            &[
                "run", "--slots", slots, "--wait", wait, "q", "--", &pass, name,
            ],
        )
    };
    let a = start("a", "3", "0");
    wait_visible(env, "q", a);
    let b = start("b", "3", "0");
    wait_visible(env, "q", b);
    // The asker's own smaller N binds it.
    let out = env.run(&["run", "--slots", "2", "-E", "75", "q", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = start("c", "3", "0");
    wait_visible(env, "q", c);
    assert_eq!(env.held("q"), 3);
    let w1 = start("w1", "3", "60s");
    wait_queued(env, "q", w1);
    let w2 = start("w2", "2", "60s");
    wait_queued(env, "q", w2);
    // One of three frees, but w2's N of 2 binds: two held is full.
    release(env, "a");
    assert_eq!(exit_of(env, a), Some(0));
    let stays = || {
        let (r, q) = holders(env, "q");
        r.len() == 2 && q == [w1 as i64, w2 as i64]
    };
    assert!(
        holds_for(Duration::from_secs(2), stays),
        "{:?}",
        env.find_job("q")
    );
    release(env, "b");
    assert!(wait_until(LONG, || starts(env).contains(&"w1".to_string())));
    // c and w1 hold; w2 (N 2, now a waiter at the head) must keep waiting.
    assert!(holds_for(Duration::from_secs(1), || {
        let (r, q) = holders(env, "q");
        r.len() == 2 && q == [w2 as i64]
    }));
    // Once w2 holds, its N of 2 binds a --slots 3 newcomer too.
    release(env, "c");
    assert!(wait_until(LONG, || starts(env).contains(&"w2".to_string())));
    let out = env.run(&["run", "--slots", "3", "-E", "75", "q", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    release(env, "w1");
    release(env, "w2");
    for (name, pid) in [("b", b), ("c", c), ("w1", w1), ("w2", w2)] {
        assert_eq!(
            exit_of(env, pid),
            Some(0),
            "{name}: {}",
            env.stderr_of(name)
        );
    }
    assert_eq!(max_overlap(&lines(env, "log")), 3);
}

both_stores!(
    coalesce_never_joins_a_ghost,
    clear_locks_force_leaves_live_waiters,
    five_passes_two_slots_run_in_arrival_order,
    ten_waiters_run_in_arrival_order,
    fifty_waiters_never_overshoot_three_slots,
    sigkilled_head_waiter_does_not_stall_the_queue,
    sigkilled_last_waiter_does_not_block_later_runs,
    coalesce_joins_only_a_queued_pass,
    pause_holds_promotion_and_resume_releases_in_order,
    status_shows_the_queue,
    smallest_slots_among_holders_and_waiters_binds,
);
