//! The evidence of a pass's containers, joined to that of its processes.
//!
//! A pass declared with `--containers ENGINE` hands its work to a
//! container engine, whose containers outlive the client the pass started.
//! Its processes are judged as any pass's are (`Evidence::judge`); then
//! the engine is asked about the pass's label (`engine::running`) and
//! `policy::containers::combine` decides what the two say together. The
//! verdict names both, so an operator knows which ground truth was asked.
//!
//! What the engine says is evidence only where it can see the pass's
//! containers: on the pass's host (a judge elsewhere cannot ask this host's
//! engine), and as the pass's user (podman, and a rootless docker, show
//! each user only their own containers). Anything else is no answer, and
//! unknown never frees a slot: the lease decides.

use super::{Evidence, Sight, Verdict};
use crate::engine::{self, Seen};
use crate::files::open_lock;
use crate::policy::containers::{combine, Engine, Sighting};
use crate::policy::lease::Holder;
use crate::policy::Liveness;
use crate::process::{self, State};

impl Evidence {
    /// Join to `processes`, the verdict on the processes of pass `pass_id`,
    /// what the engine the pass declared (`declared`, as the store keeps
    /// it) says of the pass's containers. Runs the engine: outside any
    /// store transaction.
    pub fn with_containers(
        &self,
        holder: &Holder,
        pass_id: &str,
        declared: &str,
        processes: Verdict,
    ) -> Verdict {
        let seen = match Engine::parse(declared) {
            Some(engine) => self.ask_engine(engine, holder, pass_id),
            None => Seen::NoAnswer(format!(
                "it declared containers of an engine this jobrun does not know ({declared})"
            )),
        };
        joined(processes, &seen)
    }

    /// What `engine` says of pass `pass_id`'s containers, where it can see
    /// them (`engine::ENGINE_TIMEOUT` at most).
    pub fn ask_engine(&self, engine: Engine, holder: &Holder, pass_id: &str) -> Seen {
        let name = engine.as_str();
        if self.sight(holder) == Sight::OtherHost {
            return Seen::NoAnswer(format!(
                "its containers run on {}, whose {name} cannot be asked from here",
                holder.host
            ));
        }
        match engine::running(engine, pass_id, engine::ENGINE_TIMEOUT) {
            Seen::NoneRunning => match self.pass_user(holder, pass_id) {
                Some(uid) if uid == nix::unistd::geteuid().as_raw() => Seen::NoneRunning,
                Some(uid) => Seen::NoAnswer(format!(
                    "{name} shows this user none, but the pass ran as uid {uid}, whose \
                     containers it may not show"
                )),
                None => Seen::NoAnswer(format!(
                    "{name} shows this user none, but nothing here says which user ran the \
                     pass"
                )),
            },
            seen => seen,
        }
    }

    /// The user that ran pass `pass_id`: the owner of its wrapper's lock
    /// file (a one-machine store), else of its wrapper while it runs.
    fn pass_user(&self, holder: &Holder, pass_id: &str) -> Option<u32> {
        use std::os::unix::fs::MetadataExt;
        if let Some(file) = self.lock_of(pass_id).and_then(|p| open_lock(None, &p)) {
            return file.metadata().ok().map(|m| m.uid());
        }
        if self.sight(holder) == Sight::Pids && process::read(holder.wrapper) == State::Running {
            return process::uid_of(holder.wrapper.pid);
        }
        None
    }
}

/// The verdict on a pass from the verdict on its processes and what its
/// engine said of its containers: the liveness as `combine` decides it, the
/// reason naming both, what decided first.
pub fn joined(processes: Verdict, seen: &Seen) -> Verdict {
    let sighting = match seen {
        Seen::Running(_) => Sighting::Running,
        Seen::NoneRunning => Sighting::NoneRunning,
        Seen::NoAnswer(_) => Sighting::NoAnswer,
    };
    let liveness = combine(processes.liveness, sighting);
    let was = processes.liveness;
    let of_processes = processes.reason;
    let reason = match seen {
        Seen::Running(ids) => {
            let shown: Vec<&str> = ids.iter().map(|i| i.short()).collect();
            let (what, verb) = match shown.len() {
                1 => (
                    "container",
                    if was == Liveness::Dead {
                        "runs on"
                    } else {
                        "running"
                    },
                ),
                _ => (
                    "containers",
                    if was == Liveness::Dead {
                        "run on"
                    } else {
                        "running"
                    },
                ),
            };
            format!("{what} {} {verb}; {of_processes}", shown.join(", "))
        }
        Seen::NoneRunning if was == Liveness::Dead => {
            format!("no process ({of_processes}), no container with its label")
        }
        Seen::NoneRunning => format!("{of_processes}; no container with its label"),
        Seen::NoAnswer(why) if was == Liveness::Alive => format!("{of_processes}; {why}"),
        Seen::NoAnswer(why) if was == Liveness::Dead => {
            format!("{why}; no process ({of_processes})")
        }
        Seen::NoAnswer(why) => format!("{why}; {of_processes}"),
    };
    Verdict {
        liveness,
        reason,
        // The wrapper is gone, and something of the pass runs on: its
        // group, or its containers.
        orphaned: processes.orphaned || (was == Liveness::Dead && liveness == Liveness::Alive),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn processes(liveness: Liveness, orphaned: bool) -> Verdict {
        Verdict {
            liveness,
            reason: "P".into(),
            orphaned,
        }
    }

    fn running() -> Seen {
        let id = "0d98a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e";
        Seen::Running(vec![engine::ContainerId::parse(id).unwrap()])
    }

    /// Every combination reads as the operator should read it: which
    /// evidence was asked, and what it said.
    #[test]
    fn a_verdict_names_the_evidence_it_rests_on() {
        use Liveness::{Alive, Dead, Unknown};
        let none = Seen::NoneRunning;
        let silent = Seen::NoAnswer("podman is not installed (not in PATH)".into());
        // (processes, orphaned, engine) -> (liveness, orphaned, reason)
        let table = [
            (
                Alive,
                false,
                running(),
                Alive,
                false,
                "container 0d98a1b2c3d4 running; P",
            ),
            (
                Dead,
                false,
                running(),
                Alive,
                true,
                "container 0d98a1b2c3d4 runs on; P",
            ),
            (
                Unknown,
                false,
                running(),
                Alive,
                false,
                "container 0d98a1b2c3d4 running; P",
            ),
            (
                Alive,
                true,
                none.clone(),
                Alive,
                true,
                "P; no container with its label",
            ),
            (
                Dead,
                false,
                none.clone(),
                Dead,
                false,
                "no process (P), no container with its label",
            ),
            (
                Unknown,
                false,
                none,
                Unknown,
                false,
                "P; no container with its label",
            ),
            (
                Dead,
                false,
                silent.clone(),
                Unknown,
                false,
                "podman is not installed (not in PATH); no process (P)",
            ),
            (
                Unknown,
                false,
                silent.clone(),
                Unknown,
                false,
                "podman is not installed (not in PATH); P",
            ),
            (
                Alive,
                false,
                silent,
                Alive,
                false,
                "P; podman is not installed (not in PATH)",
            ),
        ];
        for (was, orphan, seen, liveness, orphaned, reason) in table {
            let v = joined(processes(was, orphan), &seen);
            assert_eq!(
                (v.liveness, v.orphaned, v.reason.as_str()),
                (liveness, orphaned, reason),
                "{was:?} {seen:?}"
            );
        }
    }
}
