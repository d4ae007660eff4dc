//! `jobrun stop-due`: for upgrade scripts. Send TERM to every in-flight pass
//! it can verify as the recorded holder, so each forwards to its child,
//! waits, releases its lock at once and records the pass as stopped.
//! Anything it cannot verify (another host, boot or PID namespace, a reused
//! pid) is listed and never signalled.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cli::StopArgs;
use crate::cmd::holder_name;
use crate::exit;
use crate::lease::{LeaseKey, LeaseRow, Proc};
use crate::liveness::{signal_verified, Identity};
use crate::say;
use crate::settings::{duration, job_name};
use crate::store::StoreSpec;

/// The process to signal for a lease, if this process can verify it: the
/// wrapper, or for an orphaned pass its child.
fn target(l: &LeaseRow, me: &Identity) -> Result<(Proc, &'static str), String> {
    if l.holder.boot_id != me.boot_id {
        return Err(format!(
            "recorded on another host or boot ({})",
            l.holder.host
        ));
    }
    if l.holder.pid_ns != me.pid_ns {
        return Err(format!(
            "recorded in another pid namespace ({})",
            l.holder.pid_ns
        ));
    }
    match signal_verified(l.holder.wrapper, 0, true) {
        Ok(()) => Ok((l.holder.wrapper, "wrapper")),
        Err(wrapper_err) => match l.holder.child {
            Some(c) if signal_verified(c, 0, true).is_ok() => Ok((c, "orphaned child")),
            _ => Err(format!(
                "wrapper pid {}: {wrapper_err}",
                l.holder.wrapper.pid
            )),
        },
    }
}

pub fn run(spec: StoreSpec, a: StopArgs) -> Result<i32> {
    let names = a
        .targets
        .names
        .iter()
        .map(|n| job_name(n))
        .collect::<Result<Vec<_>>>()?;
    let wait = a
        .wait
        .as_deref()
        .map(|w| duration("--wait", w))
        .transpose()?;
    let kill_after = a
        .kill_after
        .as_deref()
        .map(|k| duration("--kill-after", k))
        .transpose()?;
    if kill_after.is_some() && wait.is_none() {
        anyhow::bail!("--kill-after needs --wait: it escalates only while waiting for releases");
    }
    let mut store = spec.open()?;
    let me = Identity::current();
    let mut signalled: Vec<(LeaseRow, Proc)> = Vec::new();
    for l in store.leases(&names)? {
        let head = format!(
            "{} slot {} token {} held by {}",
            l.job,
            l.slot,
            l.token,
            holder_name(&l)
        );
        match target(&l, &me) {
            Ok((p, what)) => match signal_verified(p, libc::SIGTERM, a.dry_run) {
                Ok(()) => {
                    let verb = if a.dry_run {
                        "would signal"
                    } else {
                        "signalled"
                    };
                    println!("{head}: {verb} {what} pid {} (TERM)", p.pid);
                    signalled.push((l, p));
                }
                Err(e) => println!("{head}: not signalled: {e}"),
            },
            Err(why) => println!("{head}: not signalled: {why}"),
        }
    }
    if a.dry_run {
        println!("would signal {} in-flight job process(es)", signalled.len());
        return Ok(exit::OK);
    }
    println!("signaled {} in-flight job process(es)", signalled.len());
    let Some(wait) = wait else {
        return Ok(exit::OK);
    };
    let sent = Instant::now();
    let deadline = sent + wait;
    let mut killed = false;
    loop {
        let held: Vec<LeaseKey> = store.leases(&names)?.iter().map(|l| l.key()).collect();
        let remaining: Vec<&(LeaseRow, Proc)> = signalled
            .iter()
            .filter(|(l, _)| held.contains(&l.key()))
            .collect();
        if remaining.is_empty() {
            println!(
                "all {} signalled pass(es) released their locks",
                signalled.len()
            );
            return Ok(exit::OK);
        }
        if let Some(k) = kill_after {
            if !killed && sent.elapsed() >= k {
                killed = true;
                for (l, p) in &remaining {
                    // KILL the child: its wrapper then reaps and releases.
                    // A hung wrapper with no child left gets the KILL itself.
                    let target = l.holder.child.unwrap_or(*p);
                    match signal_verified(target, libc::SIGKILL, false) {
                        Ok(()) => say!(
                            "{} slot {}: still held {} after TERM; sent KILL to pid {}",
                            l.job,
                            l.slot,
                            humantime::format_duration(k),
                            target.pid
                        ),
                        Err(e) => say!("{} slot {}: cannot KILL: {e}", l.job, l.slot),
                    }
                }
            }
        }
        if Instant::now() >= deadline {
            for (l, _) in &remaining {
                println!(
                    "still held after {}: {} slot {} token {} by {}",
                    humantime::format_duration(wait),
                    l.job,
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
