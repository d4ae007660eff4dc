//! `--coalesce`: a pass whose job, command and working directory equal a
//! pass already *queued* joins it instead of queueing again (a running pass
//! never absorbs a newcomer). Commands are compared as the store keeps them
//! (text, with bytes that are not UTF-8 written as `\xNN`), so a command
//! that is not valid UTF-8 never coalesces: two commands that differ only
//! in bytes the text form hides must not join.

use super::lease::WaiterRow;

/// What a newcomer runs, as the store keeps it.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    pub argv: &'a [String],
    pub cwd: &'a str,
    /// Every argument is valid UTF-8: only then is the text form exact.
    pub exact: bool,
}

/// The queued pass a newcomer joins: the first in arrival order that runs
/// the same command in the same directory. `queued` are the job's waiters
/// in arrival order.
pub fn joins<'a>(queued: &'a [WaiterRow], me: Invocation) -> Option<&'a WaiterRow> {
    if !me.exact {
        return None;
    }
    queued
        .iter()
        .find(|w| w.argv.as_slice() == me.argv && w.cwd == me.cwd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lease::{Clock, Holder, Proc, Stamps};

    fn queued(id: i64, argv: &[&str], cwd: &str) -> WaiterRow {
        let stamps = Stamps {
            acquired_ms: 0,
            renewed_ms: 0,
            acquired_boot_ms: None,
            renewed_boot_ms: None,
            lease_ms: 3000,
            max_hold_ms: i64::MAX,
        };
        let holder = Holder {
            host: "h".into(),
            boot_id: "b".into(),
            pid_ns: "n".into(),
            wrapper: Proc { pid: 1, start: 1 },
            child: None,
        };
        let clock = Clock {
            now_ms: 0,
            boot: None,
        };
        let argv = argv.iter().map(|a| a.to_string()).collect();
        WaiterRow::new(
            id,
            "j".into(),
            format!("p{id}"),
            holder,
            argv,
            cwd.into(),
            1,
            stamps,
            &clock,
        )
    }

    #[test]
    fn a_newcomer_joins_the_first_identical_queued_pass() {
        let q = vec![
            queued(1, &["sync", "a"], "/srv"),
            queued(2, &["sync", "b"], "/srv"),
            queued(3, &["sync", "b"], "/srv"),
        ];
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // (argv, cwd, exact) -> the id joined
        let table = [
            (argv(&["sync", "b"]), "/srv", true, Some(2)),
            (argv(&["sync", "a"]), "/srv", true, Some(1)),
            (argv(&["sync", "a"]), "/tmp", true, None),
            (argv(&["sync"]), "/srv", true, None),
            (argv(&["sync", "a"]), "/srv", false, None),
        ];
        for (argv, cwd, exact, want) in table {
            let me = Invocation {
                argv: &argv,
                cwd,
                exact,
            };
            assert_eq!(joins(&q, me).map(|w| w.id), want, "{argv:?} {cwd} {exact}");
        }
    }
}
