//! `jobrun status`: every job the store knows, one row per job and slot,
//! with the evidence verdict on each holder and the queue behind it.

use anyhow::Result;
use serde_json::{json, Value};

use crate::cli::StatusArgs;
use crate::cmd::{evidence, judged};
use crate::exit;
use crate::lease::{LeaseRow, Pause, WaiterRow};
use crate::liveness::{Evidence, Liveness, Sight, Verdict};
use crate::report::{age_ms, escape, expiry_ms, expiry_words, human_ms, utc_ms};
use crate::say;
use crate::settings::job_names;
use crate::store::StoreSpec;

/// The state of one held slot, from its verdict and lease.
pub fn lease_state(l: &LeaseRow, v: &Verdict) -> &'static str {
    match v.liveness {
        Liveness::Alive if v.orphaned => "orphaned",
        Liveness::Alive => "running",
        Liveness::Dead => "dead",
        Liveness::Unknown if l.lapsed() => "stale",
        Liveness::Unknown => "running",
    }
}

/// Every pause that stands on `job`: its own, then those on all jobs.
fn pauses_for<'a>(pauses: &'a [Pause], job: &str) -> Vec<&'a Pause> {
    let own = pauses.iter().filter(|p| p.job == job);
    own.chain(pauses.iter().filter(|p| p.job == "*")).collect()
}

fn pause_json(p: &Pause) -> Value {
    json!({
        "owner": p.owner,
        "reason": p.reason,
        "since": utc_ms(p.since_ms),
        "all": p.job == "*",
    })
}

/// The state of a held slot as status shows it: a live wrapper on this
/// machine that is stopped (SIGSTOP, a debugger: `T` in `/proc`, as `ps`
/// shows it) is `stopped`, since it neither renews nor runs on.
fn shown_state(l: &LeaseRow, v: &Verdict, evidence: &Evidence) -> &'static str {
    let state = lease_state(l, v);
    if state == "running" && wrapper_stopped(l, evidence) {
        "stopped"
    } else {
        state
    }
}

/// The holder's wrapper is this boot's and namespace's process with the
/// recorded start time, and it is stopped.
fn wrapper_stopped(l: &LeaseRow, evidence: &Evidence) -> bool {
    let h = &l.holder;
    evidence.sight(h) == Sight::Pids
        && crate::liveness::stat(h.wrapper.pid)
            .is_some_and(|s| s.start == h.wrapper.start && matches!(s.state, 'T' | 't'))
}

fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('~');
        t
    }
}

pub fn run(spec: StoreSpec, a: StatusArgs) -> Result<i32> {
    let names = job_names(&a.names)?;
    let mut store = spec.open_existing()?;
    let jobs = store.jobs(&names)?;
    let unknown: Vec<&String> = names
        .iter()
        .filter(|n| !jobs.iter().any(|j| &j.name == *n))
        .collect();
    let evidence = evidence(&spec);
    let leases = judged(store.leases(&names)?, &evidence);
    let waiters = store.waiters(&names)?;
    let pauses = store.pauses()?;
    let waiter_verdicts: Vec<(WaiterRow, Verdict)> = waiters
        .into_iter()
        .map(|w| {
            let v = evidence.judge_waiter(&w.holder, &w.pass_id);
            (w, v)
        })
        .collect();

    let mut out = Vec::new();
    for job in &jobs {
        let standing = pauses_for(&pauses, &job.name);
        let pause = standing.first();
        let held: Vec<&(LeaseRow, Verdict)> =
            leases.iter().filter(|(l, _)| l.job == job.name).collect();
        let queue: Vec<&(WaiterRow, Verdict)> = waiter_verdicts
            .iter()
            .filter(|(w, _)| w.job == job.name)
            .collect();
        let state = if let Some((l, v)) = held.first() {
            shown_state(l, v, &evidence)
        } else if pause.is_some() {
            "paused"
        } else if !queue.is_empty() {
            "queued"
        } else {
            "free"
        };
        out.push(json!({
            "name": job.name,
            "state": state,
            "paused": pause.map(|p| pause_json(p)),
            "pauses": standing.iter().map(|p| pause_json(p)).collect::<Vec<_>>(),
            "slots": held.iter().map(|(l, v)| json!({
                "slot": l.slot,
                "state": shown_state(l, v, &evidence),
                "token": l.token,
                "pass_id": l.pass_id,
                "holder": {
                    "host": l.holder.host,
                    "pid": l.holder.wrapper.pid,
                    "child_pid": l.holder.child.map(|c| c.pid),
                },
                "verdict": {"liveness": v.liveness, "reason": v.reason},
                "since": utc_ms(l.acquired_at_ms),
                "held_ms": l.held_ms,
                // An age is never negative (a clock ahead of ours).
                "renewed_ago_ms": l.renewed_ago_ms.max(0),
                "expires_in_ms": l.expires_in_ms,
                "max_hold_ms": l.max_hold_ms,
                "command": l.argv,
            })).collect::<Vec<_>>(),
            "queue": {
                "length": queue.len(),
                "head_waited_ms": queue.first().map(|(w, _)| w.waited_ms),
                "waiters": queue.iter().enumerate().map(|(i, (w, v))| json!({
                    "position": i + 1,
                    "pass_id": w.pass_id,
                    "holder": {"host": w.holder.host, "pid": w.holder.wrapper.pid},
                    "verdict": {"liveness": v.liveness, "reason": v.reason},
                    "waited_ms": w.waited_ms,
                    "command": w.argv,
                })).collect::<Vec<_>>(),
            },
            "last": job.last_outcome.as_ref().map(|o| json!({
                "outcome": o,
                "duration_ms": job.last_duration_ms,
                "ended_ago_ms": job.last_ended_ms_ago,
            })),
        }));
    }
    if a.json {
        let doc = json!({ "store": spec.display(), "jobs": out });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("{}", trunc(&format!("store: {}", spec.display()), WIDTH));
        print_table(&out);
    }
    for n in &unknown {
        say!("{n}: store {} does not know this job", spec.display());
    }
    Ok(if unknown.is_empty() {
        exit::OK
    } else {
        exit::INCOMPLETE
    })
}

/// Human output fits 100 columns, whatever the names, hosts and reasons;
/// every text from the store is escaped first, so a row shows as one line.
const WIDTH: usize = 100;

macro_rules! row {
    ($($arg:tt)*) => {
        println!("{}", trunc(&format!($($arg)*), WIDTH))
    };
}

/// A text field of a row, escaped for the table.
fn text(v: &Value) -> String {
    escape(v.as_str().unwrap_or(""))
}

fn ms(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn print_table(jobs: &[Value]) {
    // 24+4+8+19+7+11 columns and their gaps leave 20 for LAST, the
    // longest outcome and duration ("spawn-failed 23h 59m"): no figure is
    // ever cut. Tokens (16 digits) are on the detail line.
    row!(
        "{:<24} {:>4} {:<8} {:<19} {:>7} {:>11}  LAST",
        "JOB",
        "SLOT",
        "STATE",
        "HOLDER",
        "RENEWED",
        "EXPIRES"
    );
    for j in jobs {
        let name = trunc(&text(&j["name"]), 24);
        let last = match &j["last"] {
            Value::Null => "-".to_string(),
            l => format!(
                "{} {}",
                trunc(&escape(l["outcome"].as_str().unwrap_or("-")), 12),
                human_ms(ms(&l["duration_ms"]))
            ),
        };
        let slots = j["slots"].as_array().cloned().unwrap_or_default();
        if slots.is_empty() {
            row!(
                "{name:<24} {:>4} {:<8} {:<19} {:>7} {:>11}  {last}",
                "-",
                j["state"].as_str().unwrap_or(""),
                "-",
                "-",
                "-"
            );
        }
        for s in &slots {
            let holder = format!("{}:{}", text(&s["holder"]["host"]), s["holder"]["pid"]);
            row!(
                "{name:<24} {:>4} {:<8} {:<19} {:>7} {:>11}  {last}",
                s["slot"].to_string(),
                s["state"].as_str().unwrap_or(""),
                trunc(&holder, 19),
                age_ms(ms(&s["renewed_ago_ms"])),
                expiry_ms(ms(&s["expires_in_ms"]))
            );
            row!(
                "    since {}, token {}, {}",
                s["since"].as_str().unwrap_or(""),
                s["token"],
                expiry_words(ms(&s["expires_in_ms"]))
            );
            row!(
                "    {}: {}",
                s["verdict"]["liveness"].as_str().unwrap_or(""),
                trunc(&text(&s["verdict"]["reason"]), 80)
            );
        }
        for p in j["pauses"].as_array().into_iter().flatten() {
            row!(
                "    paused{}{} since {}{}",
                p["owner"]
                    .as_str()
                    .map(|o| format!(" by {}", trunc(&escape(o), 20)))
                    .unwrap_or_default(),
                if p["all"].as_bool() == Some(true) {
                    " (all)"
                } else {
                    ""
                },
                p["since"].as_str().unwrap_or(""),
                p["reason"]
                    .as_str()
                    .map(|r| format!(": {}", trunc(&escape(r), 50)))
                    .unwrap_or_default()
            );
        }
        let q = &j["queue"];
        let len = q["length"].as_u64().unwrap_or(0);
        if len > 0 {
            row!(
                "    queue: {len} waiting, head waited {}",
                age_ms(ms(&q["head_waited_ms"]))
            );
            for w in q["waiters"].as_array().into_iter().flatten() {
                row!(
                    "      #{} {}:{} waited {} ({}: {})",
                    w["position"],
                    text(&w["holder"]["host"]),
                    w["holder"]["pid"],
                    age_ms(ms(&w["waited_ms"])),
                    w["verdict"]["liveness"].as_str().unwrap_or(""),
                    trunc(&text(&w["verdict"]["reason"]), 40)
                );
            }
        }
    }
}
