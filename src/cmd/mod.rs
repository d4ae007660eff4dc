//! One module per subcommand, each with one entry point returning the exit
//! code.

pub mod clear_locks;
pub mod generate;
pub mod history;
pub mod pause;
pub mod run;
pub mod status;
pub mod stop_due;

use crate::lease::LeaseRow;
use crate::liveness::{judge, Identity, Verdict};
use crate::report::escape;
use crate::store::StoreSpec;

/// Judge every lease, probing outside any store transaction.
pub fn judged(leases: Vec<LeaseRow>, spec: &StoreSpec) -> Vec<(LeaseRow, Verdict)> {
    let me = Identity::current();
    let reach = spec.reach();
    leases
        .into_iter()
        .map(|l| {
            let v = judge(&l.holder, &me, reach);
            (l, v)
        })
        .collect()
}

/// `host:pid` of a holder, as every command shows it (the host is text from
/// the store: escaped).
pub fn holder_name(l: &LeaseRow) -> String {
    format!("{}:{}", escape(&l.holder.host), l.holder.wrapper.pid)
}
