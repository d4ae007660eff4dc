//! `jobrun clear-locks`: show each held lock with its evidence verdict and
//! clear those whose holder is dead, or whose lease lapsed with no evidence
//! of life. A holder believed alive is cleared only with `--force`, the
//! operator's deliberate override, and that is logged. Clearing frees the
//! slot and nothing else: it never signals a process nor stops a
//! container, and says which of a pass's containers still run.

use anyhow::Result;

use crate::cli::ClearArgs;
use crate::cmd::{all_known, evidence_of, holder_name, judged, queued_pass};
use crate::engine::{self, Seen};
use crate::evidence::Evidence;
use crate::exit;
use crate::files::{remove_stale_lock, remove_stray_locks, STRAY_AGE};
use crate::policy::containers::Engine;
use crate::policy::lease::{decide, decide_waiter, Decision, FreeReason, LeaseRow, WaiterDecision};
use crate::policy::Liveness;
use crate::report::escape;
use crate::say;
use crate::settings::stored_job_names;
use crate::store::{operator, StoreSpec};

/// What runs on of a container pass whose slot was just freed: clearing a
/// lock never stops containers (only `stop-due` does, by label), so the
/// operator is told what still runs, as the engine says it now.
fn containers_left(l: &LeaseRow, evidence: &Evidence) -> Option<String> {
    let engine = Engine::parse(l.containers.as_deref()?)?;
    let label = engine::label(&l.pass_id)?;
    let name = engine.as_str();
    match evidence.ask_engine(engine, &l.holder, &l.pass_id) {
        Seen::Running(ids) => {
            let ids: Vec<&str> = ids.iter().map(|i| i.short()).collect();
            Some(format!(
                "its container(s) {} still run: clear-locks never stops containers \
                 (`{name} stop {}` does; `{name} ps --filter label={label}` lists them)",
                ids.join(", "),
                ids.join(" ")
            ))
        }
        Seen::NoneRunning => None,
        Seen::NoAnswer(why) => Some(format!(
            "its containers (label {label}) may still run: {}",
            escape(&why)
        )),
    }
}

pub fn run(spec: StoreSpec, a: ClearArgs) -> Result<i32> {
    let names = stored_job_names(&a.targets.names)?;
    let mut store = spec.open_existing()?;
    if !all_known(store.as_mut(), &names, &spec, "")? {
        return Ok(exit::INCOMPLETE);
    }
    let (mut cleared, mut kept_alive, mut kept_unknown) = (0, 0, 0);
    let would = if a.dry_run { "would " } else { "" };
    let evidence = evidence_of(&spec, store.as_mut())?;
    let by = operator(if a.force {
        "clear-locks --force"
    } else {
        "clear-locks"
    });
    for (l, v) in judged(store.leases(&names)?, &evidence) {
        let head = format!(
            "{} slot {} token {} held by {} ({})",
            escape(&l.job),
            l.slot,
            l.token,
            holder_name(&l),
            escape(&v.to_string())
        );
        match decide(&l, v.liveness, a.force) {
            Decision::Free(ev, reason) => {
                let forced = reason == FreeReason::Forced;
                let why = reason.as_str();
                if a.dry_run {
                    println!("{head}: would clear: {why}");
                    cleared += 1;
                } else if store.evict(&l.job, &ev.with_evidence(v.to_string()), &by)? {
                    if let Some(dir) = &evidence.lock_dir {
                        remove_stale_lock(dir, &l.pass_id);
                    }
                    if forced {
                        say!(warning, "{head}: cleared by --force over a live holder");
                    }
                    println!("{head}: cleared: {why}");
                    if let Some(left) = containers_left(&l, &evidence) {
                        println!("{head}: {left}");
                    }
                    cleared += 1;
                } else {
                    println!("{head}: kept: it changed while being cleared (renewed or released)");
                }
            }
            Decision::Keep if v.liveness == Liveness::Alive => {
                println!("{head}: kept: holder is alive (--force clears it)");
                kept_alive += 1;
            }
            Decision::Keep => {
                println!(
                    "{head}: kept: lease still valid for {} (holder unknown)",
                    crate::report::human_ms(l.expires_in_ms)
                );
                kept_unknown += 1;
            }
        }
    }
    // Ghost waiters: queue rows whose process is dead, or unknown with a
    // lapsed lease. A live waiter holds nothing; --force leaves it alone.
    let mut ghosts = 0;
    for w in store.waiters(&names)? {
        let v = evidence.judge_waiter(&w.holder, &w.pass_id);
        let remove = decide_waiter(&w, v.liveness);
        if remove == WaiterDecision::Keep {
            continue;
        }
        let head = format!("{} {}", escape(&w.job), queued_pass(&w, &v));
        if a.dry_run {
            println!("{head}: would remove from the queue");
            ghosts += 1;
        } else if store.remove_ghost(w.id, remove, &by)? {
            crate::cmd::run::wake::remove_stale(&spec, &w.pass_id);
            println!("{head}: removed from the queue");
            ghosts += 1;
        }
    }
    // Lock files of no pass (what a failed start or a freed dead pass
    // left) belong to no job: `--all` removes them.
    let strays = match &evidence.lock_dir {
        Some(holders) if names.is_empty() => {
            let mut known: Vec<String> =
                store.leases(&[])?.into_iter().map(|l| l.pass_id).collect();
            known.extend(store.waiters(&[])?.into_iter().map(|w| w.pass_id));
            remove_stray_locks(holders, &known, a.dry_run)
        }
        _ => 0,
    };
    let mut summary = format!("{would}clear {cleared}");
    if !a.dry_run {
        summary = format!("cleared {cleared}");
    }
    let kept = kept_alive + kept_unknown;
    let mut reasons = vec![];
    if kept_alive > 0 {
        reasons.push(format!("{kept_alive} alive"));
    }
    if kept_unknown > 0 {
        reasons.push(format!("{kept_unknown} unknown within lease"));
    }
    let keep_word = if a.dry_run { "keep" } else { "kept" };
    if kept > 0 {
        summary.push_str(&format!(", {keep_word} {kept} ({})", reasons.join(", ")));
    } else {
        summary.push_str(&format!(", {keep_word} 0"));
    }
    if ghosts > 0 {
        let verb = if a.dry_run { "would remove" } else { "removed" };
        summary.push_str(&format!("; {verb} {ghosts} ghost waiter(s)"));
    }
    if strays > 0 {
        let verb = if a.dry_run { "would remove" } else { "removed" };
        summary.push_str(&format!(
            "; {verb} {strays} stray lock file(s) of no pass (unlocked, unchanged for {})",
            humantime::format_duration(STRAY_AGE)
        ));
    }
    println!("{summary}");
    Ok(exit::OK)
}
