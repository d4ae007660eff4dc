//! One module per subcommand, each with one entry point returning the exit
//! code.

pub mod clear_locks;
pub mod forget;
pub mod generate;
pub mod history;
pub mod pause;
pub mod run;
pub mod status;
pub mod stop_due;

use crate::evidence::{Evidence, Verdict};
use crate::files::Holders;
use crate::policy::lease::LeaseRow;
use crate::process::Identity;
use crate::report::escape;
use crate::store::StoreSpec;

/// What judging holders of this store needs: who we are, how far the store
/// reaches, where its holders keep their kernel locks.
pub fn evidence(spec: &StoreSpec) -> Evidence {
    let holders = spec.lock_dir().map(|d| Holders::new(d, spec.modes().0));
    Evidence::new(Identity::current(), spec.reach(), holders)
}

/// Judge every lease, probing outside any store transaction.
pub fn judged(leases: Vec<LeaseRow>, evidence: &Evidence) -> Vec<(LeaseRow, Verdict)> {
    leases
        .into_iter()
        .map(|l| {
            let v = evidence.judge(&l.holder, &l.pass_id);
            (l, v)
        })
        .collect()
}

/// `host:pid` of a holder, as every command shows it (the host is text from
/// the store: escaped).
pub fn holder_name(l: &LeaseRow) -> String {
    format!("{}:{}", escape(&l.holder.host), l.holder.wrapper.pid)
}

/// A queue row with its verdict, as every command shows it:
/// `queued pass ID of host:pid (verdict)`.
pub fn queued_pass(w: &crate::policy::lease::WaiterRow, v: &Verdict) -> String {
    format!(
        "queued pass {} of {}:{} ({})",
        escape(&w.pass_id),
        escape(&w.holder.host),
        w.holder.wrapper.pid,
        escape(&v.to_string())
    )
}
