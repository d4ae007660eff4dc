//! `jobrun pause` / `jobrun resume`: hold new passes and queue promotion of
//! jobs while reconciliation goes on, e.g. for the length of an upgrade.
//!
//! A pause may have an owner (`--as TAG`). A job is paused while any pause
//! on it (or on all jobs) stands, and each resume lifts only the pauses of
//! its own owner, so an upgrade's `resume --all --as upgrade` never lifts
//! the pause an operator set for disk maintenance. Whatever still stands
//! after a resume is named.

use anyhow::Result;

use crate::cli::{PauseArgs, ResumeArgs};
use crate::exit;
use crate::lease::Pause;
use crate::report::escape;
use crate::say;
use crate::settings::{job_names, pause_owner};
use crate::store::StoreSpec;

pub fn pause(spec: StoreSpec, a: PauseArgs) -> Result<i32> {
    let owner = a.owner.as_deref().map(pause_owner).transpose()?;
    let names = job_names(&a.targets.names)?;
    let by = owner
        .as_deref()
        .map(|o| format!(" by {o}"))
        .unwrap_or_default();
    let mut store = spec.open()?;
    let reason = a.reason.as_deref();
    if a.targets.all {
        store.pause(None, owner.as_deref(), reason)?;
        say!("paused all jobs{by}, including jobs first seen while the pause stands");
    } else {
        for name in &names {
            store.pause(Some(name), owner.as_deref(), reason)?;
            say!("{name}: paused{by}");
        }
    }
    Ok(exit::OK)
}

/// The command that set a pause, as an operator would type it.
pub fn set_by(p: &Pause) -> String {
    let mut s = String::from("pause");
    if p.job == "*" {
        s.push_str(" --all");
    }
    if let Some(o) = &p.owner {
        s.push_str(&format!(" --as {}", escape(o)));
    }
    s
}

/// The command that lifts a pause.
pub fn lifted_by(p: &Pause) -> String {
    let mut s = String::from("resume ");
    if p.job == "*" {
        s.push_str("--all");
    } else {
        s.push_str(&escape(&p.job));
    }
    if let Some(o) = &p.owner {
        s.push_str(&format!(" --as {}", escape(o)));
    }
    s
}

fn still(label: &str, p: &Pause) {
    let reason = p
        .reason
        .as_deref()
        .map(|r| format!(" ({})", escape(r)))
        .unwrap_or_default();
    say!(
        "{label}: still paused by {}{reason} ({} lifts it)",
        set_by(p),
        lifted_by(p)
    );
}

pub fn resume(spec: StoreSpec, a: ResumeArgs) -> Result<i32> {
    let owner = a.owner.as_deref().map(pause_owner).transpose()?;
    let names = job_names(&a.targets.names)?;
    let whose = owner
        .as_deref()
        .map(|o| format!(" owned by {o}"))
        .unwrap_or_else(|| " without an owner".into());
    let mut store = spec.open_existing()?;
    if a.targets.all {
        let lifted = store.resume(None, owner.as_deref())?;
        if lifted > 0 {
            say!("lifted {lifted} pause(s){whose}");
        } else {
            say!("no pause{whose} stood");
        }
        let remaining = store.pauses()?;
        for p in &remaining {
            let label = if p.job == "*" {
                "all jobs".to_string()
            } else {
                escape(&p.job)
            };
            still(&label, p);
        }
        if remaining.is_empty() {
            say!("resumed all jobs");
        }
        return Ok(exit::OK);
    }
    for name in &names {
        let lifted = store.resume(Some(name), owner.as_deref())?;
        let remaining: Vec<Pause> = store
            .pauses()?
            .into_iter()
            .filter(|p| p.job == *name || p.job == "*")
            .collect();
        for p in &remaining {
            still(name, p);
        }
        match (lifted > 0, remaining.is_empty()) {
            (_, false) => {}
            (true, true) => say!("{name}: resumed"),
            (false, true) => say!("{name}: was not paused"),
        }
    }
    Ok(exit::OK)
}
