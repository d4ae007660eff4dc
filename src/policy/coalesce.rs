//! `--coalesce`: a pass whose job, command and working directory equal a
//! pass already *queued* joins it instead of queueing again (a running pass
//! never absorbs a newcomer). Commands are compared as the store keeps them
//! (text, with bytes that are not UTF-8 written as `\xNN`), so a command
//! that is not valid UTF-8 never coalesces: two commands that differ only
//! in bytes the text form hides must not join. Nor do passes that declare
//! different container engines (`--containers`): the pass that runs must
//! be judged by the evidence both asked for.

use super::containers::Engine;
use super::lease::WaiterRow;

/// What a newcomer runs, as the store keeps it.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    pub argv: &'a [String],
    pub cwd: &'a str,
    /// Every argument is valid UTF-8: only then is the text form exact.
    pub exact: bool,
    /// The container engine it declares.
    pub containers: Option<Engine>,
}

/// The queued pass a newcomer joins: the first in arrival order that runs
/// the same command in the same directory. `queued` are the job's waiters
/// in arrival order.
pub fn joins<'a>(queued: &'a [WaiterRow], me: Invocation) -> Option<&'a WaiterRow> {
    if !me.exact {
        return None;
    }
    queued.iter().find(|w| {
        w.argv.as_slice() == me.argv
            && w.cwd == me.cwd
            && w.containers.as_deref() == me.containers.map(Engine::as_str)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lease::{Clock, Holder, Proc, Stamps};

    fn queued(id: i64, argv: &[&str], cwd: &str, containers: Option<Engine>) -> WaiterRow {
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
            time_ns: None,
            session: None,
            wrapper: Proc { pid: 1, start: 1 },
            child: None,
        };
        let clock = Clock {
            now_ms: 0,
            boot: None,
        };
        let argv = argv.iter().map(|a| a.to_string()).collect();
        let mut row = WaiterRow::new(
            id,
            "j".into(),
            format!("p{id}"),
            holder,
            argv,
            cwd.into(),
            1,
            stamps,
            &clock,
        );
        row.containers = containers.map(|e| e.as_str().to_string());
        row
    }

    #[test]
    fn a_newcomer_joins_the_first_identical_queued_pass() {
        let podman = Some(Engine::Podman);
        let q = vec![
            queued(1, &["sync", "a"], "/srv", None),
            queued(2, &["sync", "b"], "/srv", None),
            queued(3, &["sync", "b"], "/srv", None),
            queued(4, &["sync", "c"], "/srv", podman),
        ];
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // (argv, cwd, exact, containers) -> the id joined
        let table = [
            (argv(&["sync", "b"]), "/srv", true, None, Some(2)),
            (argv(&["sync", "a"]), "/srv", true, None, Some(1)),
            (argv(&["sync", "a"]), "/tmp", true, None, None),
            (argv(&["sync"]), "/srv", true, None, None),
            (argv(&["sync", "a"]), "/srv", false, None, None),
            (argv(&["sync", "c"]), "/srv", true, podman, Some(4)),
            (argv(&["sync", "c"]), "/srv", true, None, None),
            (
                argv(&["sync", "c"]),
                "/srv",
                true,
                Some(Engine::Docker),
                None,
            ),
            (argv(&["sync", "b"]), "/srv", true, podman, None),
        ];
        for (argv, cwd, exact, containers, want) in table {
            let me = Invocation {
                argv: &argv,
                cwd,
                exact,
                containers,
            };
            assert_eq!(
                joins(&q, me).map(|w| w.id),
                want,
                "{argv:?} {cwd} {exact} {containers:?}"
            );
        }
    }
}
