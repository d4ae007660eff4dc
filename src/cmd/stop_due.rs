//! `jobrun stop-due`: for upgrade scripts. Send TERM to every in-flight pass
//! it can verify as the recorded holder, so each forwards to its child,
//! waits, releases its lock at once and records the pass as stopped.
//! Anything it cannot verify (another host, boot or PID namespace, a reused
//! pid) is listed and never signalled. The containers of a pass that
//! declared a container engine are stopped through that engine, by the
//! pass's label (`engine`), whether its wrapper lives or not.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cli::StopArgs;
use crate::cmd::{all_known, evidence_of, holder_name, judge_lease};
use crate::engine::{self, Seen, Stopping};
use crate::evidence::{Evidence, OfPass, Sight, Verified};
use crate::exit;
use crate::policy::containers::Engine;
use crate::policy::lease::{decide, Decision, FreeReason, LeaseRow, Proc};
use crate::process::stat;
use crate::report::escape;
use crate::say;
use crate::settings::StopSettings;
use crate::signal::{signal_group, signal_verified, Members, NotSignalled, PassGroup};
use crate::store::{operator, StoreSpec};

/// What stop-due signals for a pass it can verify.
#[derive(Debug, Clone)]
enum Target {
    /// The wrapper: it forwards to the command's group, waits, releases.
    Wrapper(Proc),
    /// An orphaned pass (its wrapper is gone): every running process of its
    /// group (whose id is the recorded child's pid) that is a member of the
    /// pass (`evidence::verify_member`).
    Group(i32, String, Option<i32>),
}

impl Target {
    fn signal(&self, sig: i32, dry_run: bool) -> Result<String, NotSignalled> {
        match self {
            Target::Wrapper(p) => {
                signal_verified(*p, sig, dry_run).map(|()| format!("wrapper pid {}", p.pid))
            }
            Target::Group(pgid, pass_id, session) => {
                let group = PassGroup::Recorded {
                    pgid: *pgid,
                    members: Members::OfPass(OfPass {
                        id: pass_id,
                        group: *pgid,
                        session: *session,
                    }),
                };
                signal_group(group, sig, dry_run)
                    .map(|n| format!("{n} process(es) of orphaned process group {pgid}"))
            }
        }
    }
}

/// What to signal for a lease, if this process can verify it: the
/// wrapper, or for an orphaned pass its process group.
fn target(l: &LeaseRow, evidence: &Evidence) -> Result<Target, String> {
    match evidence.sight(&l.holder) {
        Sight::Pids => {}
        Sight::PreviousBoot | Sight::OtherHost => {
            return Err(format!(
                "recorded on another host or boot ({})",
                escape(&l.holder.host)
            ))
        }
        Sight::OtherNamespace => {
            return Err(format!(
                "recorded in another pid namespace ({})",
                escape(&l.holder.pid_ns)
            ))
        }
        Sight::OtherClock => {
            return Err(format!(
                "recorded in another time namespace ({})",
                escape(l.holder.time_ns.as_deref().unwrap_or_default())
            ))
        }
    }
    // Only a process verified as this pass's wrapper (it holds the pass's
    // kernel lock; on a fleet store, it runs jobrun and its command carries
    // the pass's id) is signalled; a row is not proof.
    let wrapper_err = match signal_verified(l.holder.wrapper, 0, true) {
        Ok(()) => match evidence.verify_wrapper(&l.holder, &l.pass_id) {
            Verified::Yes(_) => return Ok(Target::Wrapper(l.holder.wrapper)),
            Verified::No(why) | Verified::Likely(why) | Verified::Cannot(why) => why,
        },
        Err(e) => format!("wrapper pid {}: {e}", l.holder.wrapper.pid),
    };
    // The processes alone: an orphaned group is signalled member by member.
    let v = evidence.judge(&l.holder, &l.pass_id);
    match l.holder.child {
        Some(c) if v.orphaned => Ok(Target::Group(c.pid, l.pass_id.clone(), l.holder.session)),
        _ => Err(wrapper_err),
    }
}

/// Whether a pass stop-due did not signal may still run on this host and
/// boot (its processes are not known to be gone): then stop-due failed at
/// what it was asked, and says so with its exit code. A pass on another
/// host of a fleet (or recorded on a previous boot) is reported, never a
/// failure: `upgrade.sh --all` on one host stops that host's passes.
fn left_running_here(l: &LeaseRow, evidence: &Evidence) -> bool {
    match evidence.sight(&l.holder) {
        Sight::Pids | Sight::OtherNamespace | Sight::OtherClock => {
            judge_lease(evidence, l).liveness != crate::policy::Liveness::Dead
        }
        Sight::PreviousBoot | Sight::OtherHost => false,
    }
}

pub fn run(spec: StoreSpec, a: StopArgs) -> Result<i32> {
    let StopSettings {
        names,
        wait,
        kill_after,
        dry_run,
    } = StopSettings::resolve(&a)?;
    let mut store = spec.open_existing()?;
    if !all_known(store.as_mut(), &names, &spec, "")? {
        return Ok(exit::INCOMPLETE);
    }
    let evidence = evidence_of(&spec, store.as_mut())?;
    let mut signalled: Vec<LeaseRow> = Vec::new();
    let mut stopping: Vec<(String, Stopping)> = Vec::new();
    let mut failed = 0;
    // The engine's TERM-then-KILL, as a pass's own --kill-after does it.
    let grace = kill_after.unwrap_or(engine::STOP_GRACE);
    for l in store.leases(&names)? {
        let head = format!(
            "{} slot {} token {} held by {}",
            escape(&l.job),
            l.slot,
            l.token,
            holder_name(&l)
        );
        // The engine is asked first: what runs when stop-due comes is what
        // it stops (the TERM a wrapper forwards may end a container a moment
        // later, and the stop then finds it gone).
        let listed = l
            .containers
            .as_deref()
            .map(|declared| match Engine::parse(declared) {
                Some(engine) => (
                    Some(engine),
                    evidence.ask_engine(engine, &l.holder, &l.pass_id),
                ),
                None => (
                    None,
                    Seen::NoAnswer(format!(
                        "it declared an engine this jobrun does not know ({declared})"
                    )),
                ),
            });
        let mut acted = false;
        let mut unsignalled = false;
        match target(&l, &evidence) {
            Ok(t) => match t.signal(libc::SIGTERM, dry_run) {
                Ok(what) => {
                    let verb = if dry_run { "would signal" } else { "signalled" };
                    println!("{head}: {verb} {what} (TERM)");
                    acted = true;
                }
                // Verified, yet the signal failed (EPERM: another user's
                // pass): it still runs, and the caller must know.
                Err(NotSignalled::Failed(e)) => {
                    println!("{head}: could not signal it: {e}");
                    failed += 1;
                }
                Err(e) => {
                    println!("{head}: not signalled: {e}");
                    unsignalled = true;
                }
            },
            Err(why) => {
                println!("{head}: not signalled: {why}");
                unsignalled = true;
            }
        }
        match listed {
            Some((Some(engine), Seen::Running(ids))) => {
                let verb = if dry_run { "would stop" } else { "stopping" };
                let shown: Vec<&str> = ids.iter().map(|i| i.short()).collect();
                println!(
                    "{head}: {verb} container(s) {} by label {} ({} stop -t {})",
                    shown.join(", "),
                    engine::label(&l.pass_id).unwrap_or_default(),
                    engine.as_str(),
                    engine::stop_seconds(grace)
                );
                if !dry_run {
                    let stop = Stopping::start(engine, &l.pass_id, ids, grace);
                    stopping.push((head.clone(), stop));
                }
                acted = true;
            }
            Some((_, Seen::NoAnswer(why))) => {
                println!("{head}: containers not stopped: {}", escape(&why));
            }
            _ => {}
        }
        // Neither its processes nor its containers stopped, and it may
        // still run here: stop-due failed at what it was asked.
        if unsignalled && !acted && left_running_here(&l, &evidence) {
            failed += 1;
        }
        if acted {
            signalled.push(l);
        }
    }
    if dry_run {
        println!("would signal {} in-flight job process(es)", signalled.len());
        return Ok(exit::OK);
    }
    // The engines stop their containers at once, each within its grace.
    let mut stopped = 0;
    for (head, s) in stopping {
        match s.finish() {
            Ok(ids) => {
                println!("{head}: stopped container(s) {ids}");
                stopped += 1;
            }
            Err(why) => {
                println!("{head}: {}", escape(&why));
                failed += 1;
            }
        }
    }
    println!("signalled {} in-flight job process(es)", signalled.len());
    if stopped > 0 {
        println!("stopped the containers of {stopped} pass(es) by label");
    }
    if failed > 0 {
        println!("could not signal {failed} in-flight job process(es)");
    }
    let Some(wait) = wait else {
        return Ok(if failed > 0 {
            exit::INCOMPLETE
        } else {
            exit::OK
        });
    };
    let sent = Instant::now();
    let deadline = crate::clock::deadline_after(wait);
    let mut killed = false;
    loop {
        let current = store.leases(&names)?;
        let mut remaining: Vec<&LeaseRow> = current
            .iter()
            .filter(|l| signalled.iter().any(|s| s.key() == l.key()))
            .collect();
        // A pass whose holder is now dead (an orphaned pass whose command
        // was stopped; a wrapper whose release failed) releases nothing by
        // itself: free it by the evidence rules, as clear-locks would.
        let mut freed = 0;
        for l in &remaining {
            let v = judge_lease(&evidence, l);
            if let Decision::Free(ev, FreeReason::Dead) = decide(l, v.liveness, false) {
                let ev = ev.with_evidence(v.to_string());
                if store.evict(&l.job, &ev, &operator("stop-due"))? {
                    println!(
                        "{} slot {} token {}: freed, its holder is dead ({})",
                        escape(&l.job),
                        l.slot,
                        l.token,
                        escape(&v.to_string())
                    );
                    freed += 1;
                }
            }
        }
        if freed > 0 {
            continue;
        }
        if remaining.is_empty() {
            println!(
                "all {} signalled pass(es) released their locks",
                signalled.len()
            );
            return Ok(if failed > 0 {
                exit::INCOMPLETE
            } else {
                exit::OK
            });
        }
        if let Some(k) = kill_after {
            if !killed && sent.elapsed() >= k {
                killed = true;
                for l in &remaining {
                    // KILL the command's process group as the store records
                    // it now: its wrapper then reaps the command and
                    // releases. A wrapper is never KILLed: its command would
                    // run on unsupervised.
                    let Some(child) = l.holder.child else {
                        say!(
                            warning,
                            "{} slot {}: still held {} after TERM, no command recorded; \
                             not escalating",
                            escape(&l.job),
                            l.slot,
                            humantime::format_duration(k)
                        );
                        continue;
                    };
                    // The group id is the child's pid: a pid now owned by
                    // another process means the pass's group is gone.
                    let members = match stat(child.pid) {
                        Some(s) if s.start != child.start => Err(NotSignalled::Reused),
                        // The command of a verified live wrapper leads its
                        // group: all of it is the pass's, whatever its
                        // members did to their environment.
                        Some(s)
                            if s.ppid == l.holder.wrapper.pid
                                && matches!(
                                    evidence.verify_wrapper(&l.holder, &l.pass_id),
                                    Verified::Yes(_)
                                ) =>
                        {
                            Ok(Members::Led)
                        }
                        _ => Ok(Members::OfPass(OfPass {
                            id: &l.pass_id,
                            group: child.pid,
                            session: l.holder.session,
                        })),
                    };
                    let sent = members.and_then(|members| {
                        let group = PassGroup::Recorded {
                            pgid: child.pid,
                            members,
                        };
                        signal_group(group, libc::SIGKILL, false)
                    });
                    match sent {
                        Ok(n) => {
                            say!(warning,
                            "{} slot {}: still held {} after TERM; sent KILL to {n} process(es) \
                             of process group {}",
                            escape(&l.job),
                            l.slot,
                            humantime::format_duration(k),
                            child.pid
                        )
                        }
                        Err(e) => say!(
                            error,
                            "{} slot {}: cannot KILL pid {}: {e}",
                            escape(&l.job),
                            l.slot,
                            child.pid
                        ),
                    }
                }
            }
        }
        if Instant::now() >= deadline {
            remaining.sort_by_key(|l| (l.job.clone(), l.slot));
            for l in &remaining {
                println!(
                    "still held after {}: {} slot {} token {} by {}",
                    humantime::format_duration(wait),
                    escape(&l.job),
                    l.slot,
                    l.token,
                    holder_name(l)
                );
            }
            return Ok(exit::INCOMPLETE);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
