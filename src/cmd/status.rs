//! `jobrun status`: every job the store knows, one row per job and slot,
//! with the evidence verdict on each holder and the queue behind it.

use anyhow::Result;

use crate::cli::StatusArgs;
use crate::cmd::{all_known, evidence_of, judged, open_to_read};
use crate::evidence::{Evidence, Sight, Verdict};
use crate::exit;
use crate::model::{
    self, JobStatus, LastAttempt, LastPass, PauseStatus, QueueStatus, SlotHolder, SlotStatus,
    State, StatusReport, VerdictStatus, WaiterHolder, WaiterStatus, WindowStatus,
};
use crate::policy::lease::{LeaseRow, WaiterRow};
use crate::policy::pause::{self, Pause};
use crate::policy::window::{WindowRow, WindowState};
use crate::policy::Liveness;
use crate::report::{age_ms, escape, expiry_ms, expiry_words, human_ms, utc_ms};
use crate::settings::stored_job_names;
use crate::settings::StoreChoice;
use crate::store::JobRow;

/// The state of one held slot, from its verdict and lease.
pub fn lease_state(l: &LeaseRow, v: &Verdict) -> State {
    match v.liveness {
        Liveness::Alive if v.orphaned => State::Orphaned,
        Liveness::Alive => State::Running,
        Liveness::Dead => State::Dead,
        Liveness::Unknown if l.lapsed() => State::Stale,
        Liveness::Unknown => State::Running,
    }
}

fn pause_status(p: &Pause) -> PauseStatus {
    PauseStatus {
        owner: p.owner.clone(),
        reason: p.reason.clone(),
        since: utc_ms(p.since_ms),
        all: p.is_all(),
    }
}

/// The state of a held slot as status shows it: a live wrapper on this
/// machine that is stopped (SIGSTOP, a debugger: `T` in `/proc`, as `ps`
/// shows it) is `stopped`, since it neither renews nor runs on.
fn shown_state(l: &LeaseRow, v: &Verdict, evidence: &Evidence) -> State {
    let state = lease_state(l, v);
    if state == State::Running && wrapper_stopped(l, evidence) {
        State::Stopped
    } else {
        state
    }
}

/// The holder's wrapper is this boot's and namespace's process with the
/// recorded start time, and it is stopped.
fn wrapper_stopped(l: &LeaseRow, evidence: &Evidence) -> bool {
    let h = &l.holder;
    evidence.sight(h) == Sight::Pids
        && crate::process::stat(h.wrapper.pid)
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

fn verdict_status(v: &Verdict) -> VerdictStatus {
    VerdictStatus {
        liveness: v.liveness,
        reason: v.reason.clone(),
    }
}

fn slot_status(l: &LeaseRow, v: &Verdict, evidence: &Evidence) -> SlotStatus {
    SlotStatus {
        slot: l.slot,
        state: shown_state(l, v, evidence),
        token: l.token,
        pass_id: l.pass_id.clone(),
        holder: SlotHolder {
            host: l.holder.host.clone(),
            pid: l.holder.wrapper.pid,
            child_pid: l.holder.child.map(|c| c.pid),
        },
        verdict: verdict_status(v),
        since: utc_ms(l.acquired_at_ms),
        held_ms: l.held_ms,
        // An age is never negative (a clock ahead of ours).
        renewed_ago_ms: l.renewed_ago_ms.max(0),
        expires_in_ms: l.expires_in_ms,
        renewal_late: crate::policy::lease::renewal_late(l.lease_ms, l.renewed_ago_ms),
        max_hold_ms: l.max_hold_ms,
        command: l.argv.clone(),
        containers: l.containers.clone(),
    }
}

fn queue_status(queue: &[&(WaiterRow, Verdict)]) -> QueueStatus {
    QueueStatus {
        length: queue.len(),
        head_waited_ms: queue.first().map(|(w, _)| w.waited_ms),
        waiters: queue
            .iter()
            .enumerate()
            .map(|(i, (w, v))| WaiterStatus {
                position: i + 1,
                pass_id: w.pass_id.clone(),
                holder: WaiterHolder {
                    host: w.holder.host.clone(),
                    pid: w.holder.wrapper.pid,
                },
                verdict: verdict_status(v),
                waited_ms: w.waited_ms,
                command: w.argv.clone(),
            })
            .collect(),
    }
}

/// What the store read (leases and waiters judged) says of one job.
fn job_status(
    job: &JobRow,
    pauses: &[Pause],
    leases: &[(LeaseRow, Verdict)],
    waiters: &[(WaiterRow, Verdict)],
    windows: &[WindowRow],
    evidence: &Evidence,
) -> JobStatus {
    let pauses: Vec<PauseStatus> = pause::standing(pauses, &job.name)
        .into_iter()
        .map(pause_status)
        .collect();
    let slots: Vec<SlotStatus> = leases
        .iter()
        .filter(|(l, _)| l.job == job.name)
        .map(|(l, v)| slot_status(l, v, evidence))
        .collect();
    let queue: Vec<&(WaiterRow, Verdict)> =
        waiters.iter().filter(|(w, _)| w.job == job.name).collect();
    let state = if let Some(s) = slots.first() {
        s.state
    } else if !pauses.is_empty() {
        State::Paused
    } else if !queue.is_empty() {
        State::Queued
    } else {
        State::Free
    };
    JobStatus {
        name: job.name.clone(),
        state,
        paused: pauses.first().cloned(),
        pauses,
        slots,
        queue: queue_status(&queue),
        last: job.last_outcome.as_ref().map(|o| LastPass {
            outcome: o.clone(),
            duration_ms: job.last_duration_ms,
            ended_ago_ms: job.last_ended_ms_ago,
        }),
        last_attempt: job.attempt_outcome.as_ref().map(|o| LastAttempt {
            outcome: o.clone(),
            ended_ago_ms: job.attempt_ended_ms_ago,
        }),
        window: windows
            .iter()
            .find(|w| w.job == job.name)
            .map(window_status),
    }
}

fn window_status(w: &WindowRow) -> WindowStatus {
    WindowStatus {
        key: w.key.clone(),
        state: WindowState::of(w),
        attempts: w.attempts,
        max_attempts: w.max_attempts,
        pass_id: w.pass_id.clone(),
        host: w.host.clone(),
        claimed: utc_ms(w.claimed_ms),
        ended: w.ended_ms.map(utc_ms),
        outcome: w.outcome.clone(),
    }
}

/// The detail line of a job's latest window.
fn window_line(w: &WindowStatus, t: &Layout) -> String {
    let by = format!(
        "pass {} on {}",
        escape(&w.pass_id),
        t.cut(&escape(&w.host), 24)
    );
    let what = match w.state {
        WindowState::Claimed => format!("claimed by {by} at {}", w.claimed),
        WindowState::Done => format!(
            "done by {by} at {}",
            w.ended.as_deref().unwrap_or(&w.claimed)
        ),
        WindowState::Failed | WindowState::GivenUp => {
            format!("{} by {by}", escape(w.outcome.as_deref().unwrap_or("?")))
        }
    };
    let state = match w.state {
        WindowState::GivenUp => "given up, ",
        WindowState::Failed => "may be claimed again, ",
        _ => "",
    };
    format!(
        "    window {}: {state}{what} (attempt {} of {})",
        t.cut(&escape(&w.key), 30),
        w.attempts,
        w.max_attempts
    )
}

pub fn run(choice: &StoreChoice, a: StatusArgs) -> Result<i32> {
    let spec = &choice.spec;
    let names = stored_job_names(&a.names)?;
    let Some(mut store) = open_to_read(choice)? else {
        // A fresh install: nothing has run yet.
        if a.json {
            let empty = StatusReport {
                store: spec.display(),
                jobs: vec![],
            };
            println!("{}", model::to_json(&empty)?);
        }
        return Ok(if names.is_empty() {
            exit::OK
        } else {
            exit::INCOMPLETE
        });
    };
    let known = all_known(store.as_mut(), &names, spec, "")?;
    let jobs = store.jobs(&names)?;
    let evidence = evidence_of(spec, store.as_mut())?;
    let leases = judged(store.leases(&names)?, &evidence);
    let waiters = store.waiters(&names)?;
    let pauses = store.pauses()?;
    let windows = store.windows(&names)?;
    let waiter_verdicts: Vec<(WaiterRow, Verdict)> = waiters
        .into_iter()
        .map(|w| {
            let v = evidence.judge_waiter(&w.holder, &w.pass_id);
            (w, v)
        })
        .collect();

    let report = StatusReport {
        store: spec.display(),
        jobs: jobs
            .iter()
            .map(|j| job_status(j, &pauses, &leases, &waiter_verdicts, &windows, &evidence))
            .collect(),
    };
    if a.json {
        println!("{}", model::to_json(&report)?);
    } else {
        let head = format!("store: {}", report.store);
        println!("{}", if a.wide { head } else { trunc(&head, WIDTH) });
        print_table(&report.jobs, &Layout { wide: a.wide });
    }
    Ok(if known { exit::OK } else { exit::INCOMPLETE })
}

/// Human output fits 100 columns, whatever the names, hosts and reasons
/// (unless `--wide`); every text from the store is escaped first, so a row
/// shows as one line.
const WIDTH: usize = 100;

/// How the table lays text out: cut to its column, or (`--wide`) in full.
struct Layout {
    wide: bool,
}

impl Layout {
    /// `s` cut to `n` characters, unless wide.
    fn cut(&self, s: &str, n: usize) -> String {
        if self.wide {
            s.to_string()
        } else {
            trunc(s, n)
        }
    }

    fn row(&self, line: String) {
        println!("{}", self.cut(&line, WIDTH));
    }

    /// `text` after `head`, wrapped at word boundaries to the table's width
    /// with continuation lines indented under the text: never cut mid-word
    /// (a word longer than a whole line is the only thing ever cut).
    fn wrapped(&self, head: &str, text: &str) {
        if self.wide {
            println!("{head}{text}");
            return;
        }
        let indent = " ".repeat(head.chars().count());
        let room = WIDTH.saturating_sub(indent.len()).max(20);
        let mut line = String::new();
        let mut first = true;
        let flush = |line: &mut String, first: &mut bool| {
            let lead = if *first { head } else { indent.as_str() };
            println!("{lead}{}", trunc(line, room));
            line.clear();
            *first = false;
        };
        for word in text.split(' ') {
            let needed =
                line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
            if !line.is_empty() && needed > room {
                flush(&mut line, &mut first);
            }
            if !line.is_empty() {
                line.push(' ');
            }
            // A word longer than a whole line continues on the next.
            let mut rest: Vec<char> = word.chars().collect();
            while line.chars().count() + rest.len() > room {
                let fits = room - line.chars().count();
                line.extend(rest.drain(..fits));
                flush(&mut line, &mut first);
            }
            line.extend(rest);
        }
        flush(&mut line, &mut first);
    }
}

/// An age as the LAST column shows it, in one unit: `45s`, `12m`, `3h`,
/// `5d`, so that the longest outcome and its age fit the column.
fn coarse_age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3_599 => format!("{}m", s / 60),
        3_600..=172_799 => format!("{}h", s / 3_600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `ok 3h ago`: an outcome and how long ago it ended.
fn outcome_ago(outcome: &str, ended_ago_ms: Option<i64>) -> String {
    match ended_ago_ms {
        Some(ms) => format!("{} {} ago", escape(outcome), coarse_age(ms)),
        None => escape(outcome),
    }
}

fn print_table(jobs: &[JobStatus], t: &Layout) {
    // 24+4+8+19+7+11 columns and their gaps leave 20 for LAST, the
    // longest outcome and its age ("spawn-failed 47h ago"): no figure is
    // ever cut. Tokens (16 digits) and durations are on the detail lines.
    t.row(format!(
        "{:<24} {:>4} {:<8} {:<19} {:>7} {:>11}  LAST",
        "JOB", "SLOT", "STATE", "HOLDER", "RENEWED", "EXPIRES"
    ));
    for j in jobs {
        let name = t.cut(&escape(&j.name), 24);
        let last = match &j.last {
            None => "-".to_string(),
            Some(l) => outcome_ago(&l.outcome, l.ended_ago_ms),
        };
        if j.slots.is_empty() {
            t.row(format!(
                "{name:<24} {:>4} {:<8} {:<19} {:>7} {:>11}  {last}",
                "-",
                j.state.as_str(),
                "-",
                "-",
                "-"
            ));
        }
        for s in &j.slots {
            let holder = format!("{}:{}", escape(&s.holder.host), s.holder.pid);
            t.row(format!(
                "{name:<24} {:>4} {:<8} {:<19} {:>7} {:>11}  {last}",
                s.slot.to_string(),
                s.state.as_str(),
                t.cut(&holder, 19),
                age_ms(s.renewed_ago_ms),
                expiry_ms(s.expires_in_ms)
            ));
            t.row(format!(
                "    since {}, token {}, {}{}{}",
                s.since,
                s.token,
                expiry_words(s.expires_in_ms),
                if s.renewal_late && s.expires_in_ms > 0 {
                    ", renewal late (store busy)"
                } else {
                    ""
                },
                s.containers
                    .as_ref()
                    .map(|c| format!(", containers: {}", t.cut(&escape(c), 10)))
                    .unwrap_or_default()
            ));
            t.wrapped(
                &format!("    {}: ", s.verdict.liveness.as_str()),
                &escape(&s.verdict.reason),
            );
        }
        if let Some(line) = when_line(j) {
            t.row(line);
        }
        if let Some(w) = &j.window {
            t.row(window_line(w, t));
        }
        for p in &j.pauses {
            t.row(format!(
                "    paused{}{} since {}{}",
                p.owner
                    .as_ref()
                    .map(|o| format!(" by {}", t.cut(&escape(o), 20)))
                    .unwrap_or_default(),
                if p.all { " (all)" } else { "" },
                p.since,
                p.reason
                    .as_ref()
                    .map(|r| format!(": {}", t.cut(&escape(r), 50)))
                    .unwrap_or_default()
            ));
        }
        let q = &j.queue;
        if q.length > 0 {
            t.row(format!(
                "    queue: {} waiting, head waited {}",
                q.length,
                age_ms(q.head_waited_ms.unwrap_or(0))
            ));
            for w in &q.waiters {
                t.wrapped(
                    &format!(
                        "      #{} {}:{} waited {} ",
                        w.position,
                        escape(&w.holder.host),
                        w.holder.pid,
                        age_ms(w.waited_ms),
                    ),
                    &format!(
                        "({}: {})",
                        w.verdict.liveness.as_str(),
                        escape(&w.verdict.reason)
                    ),
                );
            }
        }
    }
}

/// The detail line that says when: how the last pass that ran ended and
/// how long it took, and the last attempt when that came later (a skip).
fn when_line(j: &JobStatus) -> Option<String> {
    let mut parts = vec![];
    if let Some(l) = &j.last {
        let took = l
            .duration_ms
            .map(|d| format!(", took {}", human_ms(d)))
            .unwrap_or_default();
        parts.push(format!(
            "last pass {}{took}",
            outcome_ago(&l.outcome, l.ended_ago_ms)
        ));
    }
    if let Some(a) = &j.last_attempt {
        let later = match (&j.last, a.ended_ago_ms) {
            (None, _) => true,
            (Some(l), Some(ago)) => l.ended_ago_ms.is_none_or(|last| ago < last),
            (Some(_), None) => false,
        };
        if later {
            parts.push(format!(
                "last attempt {}",
                outcome_ago(&a.outcome, a.ended_ago_ms)
            ));
        }
    }
    (!parts.is_empty()).then(|| format!("    {}", parts.join("; ")))
}
