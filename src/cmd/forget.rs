//! `jobrun forget NAME...`: remove jobs the store no longer needs to show,
//! with their history. Only a free job is forgotten (no holder, no waiter,
//! no pause standing on it): anything else would lose what an operator or a
//! pass still relies on, so it is refused with the reason. The check and the
//! removal are one transaction.
//!
//! A forgotten job seen again starts its fencing tokens at the store clock's
//! floor, above every token handed out before, so a token never repeats.

use anyhow::Result;

use crate::cli::ForgetArgs;
use crate::cmd::closest;
use crate::cmd::pause::{lifted_by, set_by};
use crate::exit;
use crate::report::escape;
use crate::say;
use crate::settings::stored_job_names;
use crate::store::{Forget, StoreSpec};

pub fn run(spec: StoreSpec, a: ForgetArgs) -> Result<i32> {
    let names = stored_job_names(&a.names)?;
    let mut store = spec.open_existing()?;
    let mut code = exit::OK;
    for name in &names {
        match store.forget(name)? {
            Forget::Forgotten => {
                say!(notice, "{name}: forgotten, with its history");
                continue;
            }
            Forget::Unknown => {
                let known: Vec<String> = store.jobs(&[])?.into_iter().map(|j| j.name).collect();
                let meant = closest(name, &known)
                    .map(|k| format!("; did you mean `{}`?", escape(k)))
                    .unwrap_or_default();
                say!(
                    error,
                    "{}: not forgotten: store {} does not know this job{meant}",
                    escape(name),
                    spec.display()
                )
            }
            Forget::Held(n) => {
                say!(
                    warning,
                    "{name}: not forgotten: a pass holds it ({n} slot(s) held; see jobrun status)"
                )
            }
            Forget::Queued(n) => {
                say!(
                    warning,
                    "{name}: not forgotten: {n} pass(es) wait for a slot"
                )
            }
            Forget::Paused(pauses) => {
                for p in &pauses {
                    say!(
                        warning,
                        "{name}: not forgotten: paused by {} ({} lifts it)",
                        set_by(p),
                        lifted_by(p)
                    );
                }
            }
        }
        code = exit::INCOMPLETE;
    }
    Ok(code)
}
