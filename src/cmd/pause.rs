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
use crate::policy::pause::{self, Pause, PauseScope};
use crate::report::escape;
use crate::say;
use crate::settings::PauseSettings;
use crate::store::StoreSpec;

pub fn pause(spec: StoreSpec, a: PauseArgs) -> Result<i32> {
    let PauseSettings { scopes, owner } = PauseSettings::resolve(&a.targets, a.owner.as_deref())?;
    let owner = owner.as_deref();
    let by = owner.map(|o| format!(" by {o}")).unwrap_or_default();
    let mut store = spec.open()?;
    let reason = a.reason.as_deref();
    for scope in &scopes {
        store.pause(scope, owner, reason)?;
        match scope {
            PauseScope::All => {
                say!("paused all jobs{by}, including jobs first seen while the pause stands")
            }
            PauseScope::Job(name) => say!("{name}: paused{by}"),
        }
    }
    Ok(exit::OK)
}

/// The command that set a pause, as an operator would type it.
pub fn set_by(p: &Pause) -> String {
    let mut s = String::from("pause");
    if p.is_all() {
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
    match &p.scope {
        PauseScope::All => s.push_str("--all"),
        PauseScope::Job(name) => s.push_str(&escape(name)),
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
    let PauseSettings { scopes, owner } = PauseSettings::resolve(&a.targets, a.owner.as_deref())?;
    let owner = owner.as_deref();
    let whose = match owner {
        Some(o) => format!(" owned by {o}"),
        None => " without an owner".into(),
    };
    let mut store = spec.open_existing()?;
    for scope in &scopes {
        let PauseScope::Job(name) = scope else {
            // --all: every pause of this owner, whatever its scope.
            let lifted = store.resume(None, owner)?;
            if lifted > 0 {
                say!("lifted {lifted} pause(s){whose}");
            } else {
                say!("no pause{whose} stood");
            }
            let remaining = store.pauses()?;
            for p in &remaining {
                let label = match &p.scope {
                    PauseScope::All => "all jobs".to_string(),
                    PauseScope::Job(name) => escape(name),
                };
                still(&label, p);
            }
            if remaining.is_empty() {
                say!("resumed all jobs");
            }
            continue;
        };
        let lifted = store.resume(Some(scope), owner)?;
        let pauses = store.pauses()?;
        let remaining = pause::standing(&pauses, name);
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
