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
use crate::cmd::{all_known, open_to_write};
use crate::exit;
use crate::policy::pause::{self, Pause, PauseScope};
use crate::report::escape;
use crate::say;
use crate::settings::PauseSettings;
use crate::settings::StoreChoice;
use crate::store::{StoreError, StoreSpec};

pub fn pause(choice: &StoreChoice, a: PauseArgs) -> Result<i32> {
    let PauseSettings { scopes, owner } = PauseSettings::resolve(&a.targets, a.owner.as_deref())?;
    let owner = owner.as_deref();
    let by = owner.map(|o| format!(" by {o}")).unwrap_or_default();
    let names = PauseScope::jobs_named(&scopes);
    // A pause of all jobs, or of a job named as new, may come before any
    // pass: it may create the store. A named job must be one the store
    // knows, or it is a typo that would pause nothing that runs.
    let mut store = if a.new || names.is_empty() {
        open_to_write(choice)?
    } else {
        match choice.spec.open_existing() {
            Ok(store) => store,
            Err(StoreError::Missing(_)) => {
                for n in &names {
                    say!(
                        error,
                        "{}: store {} does not exist, so it knows no job; pause --new NAME \
                         pauses a job before its first pass",
                        escape(n),
                        choice.spec.display()
                    );
                }
                return Ok(exit::INCOMPLETE);
            }
            Err(e) => return Err(e.into()),
        }
    };
    let hint = "; pause --new NAME pauses a job before its first pass";
    if !a.new && !all_known(store.as_mut(), &names, &choice.spec, hint)? {
        return Ok(exit::INCOMPLETE);
    }
    let reason = a.reason.as_deref();
    for scope in &scopes {
        store.pause(scope, owner, reason)?;
        match scope {
            PauseScope::All => {
                say!(
                    notice,
                    "paused all jobs{by}, including jobs first seen while the pause stands"
                )
            }
            PauseScope::Job(name) => say!(notice, "{name}: paused{by}"),
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
        warning,
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
    let names = PauseScope::jobs_named(&scopes);
    if !all_known(store.as_mut(), &names, &spec, "")? {
        return Ok(exit::INCOMPLETE);
    }
    for scope in &scopes {
        let PauseScope::Job(name) = scope else {
            // --all: every pause of this owner, whatever its scope.
            let lifted = store.resume(None, owner)?;
            if lifted > 0 {
                say!(notice, "lifted {lifted} pause(s){whose}");
            } else {
                say!(info, "no pause{whose} stood");
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
                say!(notice, "resumed all jobs");
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
            (true, true) => say!(notice, "{name}: resumed"),
            (false, true) => say!(info, "{name}: was not paused"),
        }
    }
    Ok(exit::OK)
}
