//! Work a pass hands to a container engine is part of the pass: the rule
//! that combines what the engine says of a pass's containers with what the
//! processes say, decided once.
//!
//! A container outlives the engine's client that started it (the daemon,
//! or podman's `conmon` in a session of its own, keeps it), so a pass
//! whose wrapper and client are gone may still be running. The engine is
//! asked about the pass's label, and its answer is tri-state like every
//! other evidence: containers running, none, or no answer.

use serde::Serialize;

use super::Liveness;

/// The container engines a pass may declare (`run --containers`). The
/// store keeps the name, never a command or a path: a judge runs its own
/// engine of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Docker,
    Podman,
}

impl Engine {
    pub const ALL: [Engine; 2] = [Engine::Docker, Engine::Podman];

    /// The name as the store keeps it, and the command a judge runs.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman => "podman",
        }
    }

    /// A name as read from the store: only the exact names above.
    pub fn parse(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.as_str() == name)
    }
}

/// What the engine said of the containers labelled with a pass's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sighting {
    /// At least one is running.
    Running,
    /// The engine answered: none runs.
    NoneRunning,
    /// No answer that can be trusted: the engine is missing, its daemon
    /// unreachable, the question timed out, it runs on another host, or it
    /// may not see the pass's containers (another user's).
    NoAnswer,
}

/// The one rule: a pass is alive if its processes or its containers are;
/// dead only when its processes are dead and the engine says no container
/// runs; unknown otherwise (and unknown never frees a slot by itself).
pub fn combine(processes: Liveness, containers: Sighting) -> Liveness {
    match (processes, containers) {
        (Liveness::Alive, _) | (_, Sighting::Running) => Liveness::Alive,
        (Liveness::Dead, Sighting::NoneRunning) => Liveness::Dead,
        _ => Liveness::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_combination_table() {
        use Liveness::{Alive, Dead, Unknown};
        use Sighting::{NoAnswer, NoneRunning, Running};
        // (processes, containers) -> the pass
        let table = [
            (Alive, Running, Alive),
            (Alive, NoneRunning, Alive),
            (Alive, NoAnswer, Alive),
            (Dead, Running, Alive),
            (Dead, NoneRunning, Dead),
            (Dead, NoAnswer, Unknown),
            (Unknown, Running, Alive),
            (Unknown, NoneRunning, Unknown),
            (Unknown, NoAnswer, Unknown),
        ];
        for (processes, containers, want) in table {
            assert_eq!(
                combine(processes, containers),
                want,
                "{processes:?} {containers:?}"
            );
        }
    }

    #[test]
    fn only_the_exact_names_are_engines() {
        for e in Engine::ALL {
            assert_eq!(Engine::parse(e.as_str()), Some(e));
        }
        for bad in [
            "",
            "Docker",
            "podman ",
            "/usr/bin/podman",
            "nerdctl",
            "docker;id",
        ] {
            assert_eq!(Engine::parse(bad), None, "{bad:?}");
        }
    }
}
