//! `jobrun pause` / `jobrun resume`: hold new passes and queue promotion of
//! jobs while reconciliation goes on, e.g. for the length of an upgrade.

use anyhow::Result;

use crate::cli::{PauseArgs, Targets};
use crate::exit;
use crate::say;
use crate::settings::job_name;
use crate::store::StoreSpec;

/// Every name checked before any is acted on: one bad name changes nothing.
fn names(t: &Targets) -> Result<Vec<String>> {
    t.names.iter().map(|n| job_name(n)).collect()
}

pub fn pause(spec: StoreSpec, a: PauseArgs) -> Result<i32> {
    let names = names(&a.targets)?;
    let mut store = spec.open()?;
    let reason = a.reason.as_deref();
    if a.targets.all {
        store.pause(None, reason)?;
        say!("paused all jobs, including jobs first seen while the pause stands");
    } else {
        for name in names {
            store.pause(Some(&name), reason)?;
            say!("{name}: paused");
        }
    }
    Ok(exit::OK)
}

pub fn resume(spec: StoreSpec, t: Targets) -> Result<i32> {
    let names = names(&t)?;
    let mut store = spec.open_existing()?;
    if t.all {
        let lifted = store.resume(None)?;
        say!(
            "{}",
            if lifted {
                "resumed all jobs"
            } else {
                "nothing was paused"
            }
        );
        return Ok(exit::OK);
    }
    let all_paused = store.pauses()?.iter().any(|p| p.job == "*");
    for name in names {
        let lifted = store.resume(Some(&name))?;
        match (lifted, all_paused) {
            (_, true) => say!("{name}: still paused by pause --all (resume --all lifts it)"),
            (true, false) => say!("{name}: resumed"),
            (false, false) => say!("{name}: was not paused"),
        }
    }
    Ok(exit::OK)
}
