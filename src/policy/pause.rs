//! Pauses: who holds a job back, and on which scope.
//!
//! A pause stands on one job or on all of them (`pause --all`), on behalf
//! of an owner (`--as TAG`) or of nobody. A job is paused while any pause on
//! it or on all jobs stands, whoever owns it. The scope is a type: the
//! "all jobs" scope is never a job name (`*` is refused as one), and how
//! the store writes it down is decided here once.

use serde::Serialize;

/// What a pause stands on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum PauseScope {
    Job(String),
    All,
}

impl PauseScope {
    /// How the store's `pauses.job` column writes the scope: the job name,
    /// or `*` for all jobs (as every jobrun before the scope became a type
    /// wrote it, so their pauses keep meaning what they meant).
    pub const ALL_KEY: &'static str = "*";

    pub fn key(&self) -> &str {
        match self {
            PauseScope::Job(name) => name,
            PauseScope::All => PauseScope::ALL_KEY,
        }
    }

    /// The jobs `scopes` name one by one (the all-jobs scope names none).
    pub fn jobs_named(scopes: &[PauseScope]) -> Vec<String> {
        scopes
            .iter()
            .filter_map(|s| match s {
                PauseScope::Job(n) => Some(n.clone()),
                PauseScope::All => None,
            })
            .collect()
    }

    /// The scope a stored key names.
    pub fn from_key(key: &str) -> PauseScope {
        if key == PauseScope::ALL_KEY {
            PauseScope::All
        } else {
            PauseScope::Job(key.to_string())
        }
    }

    /// Whether a pause of this scope holds `job` back.
    pub fn covers(&self, job: &str) -> bool {
        match self {
            PauseScope::All => true,
            PauseScope::Job(name) => name == job,
        }
    }
}

/// A pause that stands (`pause NAME` or `pause --all`).
#[derive(Debug, Clone, Serialize)]
pub struct Pause {
    pub scope: PauseScope,
    /// The tag of `pause --as TAG`; `None` for an operator's bare pause.
    pub owner: Option<String>,
    pub reason: Option<String>,
    pub since_ms: i64,
}

impl Pause {
    pub fn is_all(&self) -> bool {
        self.scope == PauseScope::All
    }
}

/// Every pause that stands on `job`: its own first, then those on all
/// jobs, each group oldest first (as `status` lists them).
pub fn standing<'a>(pauses: &'a [Pause], job: &str) -> Vec<&'a Pause> {
    let mut own: Vec<&Pause> = pauses
        .iter()
        .filter(|p| p.scope == PauseScope::Job(job.to_string()))
        .collect();
    let mut all: Vec<&Pause> = pauses.iter().filter(|p| p.is_all()).collect();
    own.sort_by(|a, b| (a.since_ms, &a.owner).cmp(&(b.since_ms, &b.owner)));
    all.sort_by(|a, b| (a.since_ms, &a.owner).cmp(&(b.since_ms, &b.owner)));
    own.extend(all);
    own
}

/// The pause a pass of `job` reports when it is held back: the oldest of
/// those that stand on it, whatever their scope.
pub fn holding_back<'a>(pauses: &'a [Pause], job: &str) -> Option<&'a Pause> {
    pauses
        .iter()
        .filter(|p| p.scope.covers(job))
        .min_by(|a, b| (a.since_ms, &a.owner).cmp(&(b.since_ms, &b.owner)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(scope: PauseScope, owner: Option<&str>, since_ms: i64) -> Pause {
        Pause {
            scope,
            owner: owner.map(str::to_string),
            reason: None,
            since_ms,
        }
    }

    #[test]
    fn the_all_scope_is_written_as_it_always_was() {
        assert_eq!(PauseScope::All.key(), "*");
        assert_eq!(PauseScope::from_key("*"), PauseScope::All);
        let job = PauseScope::Job("feeds.poll".into());
        assert_eq!(PauseScope::from_key(job.key()), job);
    }

    #[test]
    fn a_job_is_held_back_by_its_own_pauses_and_those_on_all_jobs() {
        let job = |n: &str| PauseScope::Job(n.into());
        let pauses = vec![
            pause(PauseScope::All, Some("upgrade"), 30),
            pause(job("a"), None, 20),
            pause(job("b"), None, 10),
            pause(job("a"), Some("disk"), 5),
        ];
        // (job) -> (owners standing, in status order; the one a pass names)
        type Case<'a> = (&'a str, &'a [Option<&'a str>], Option<i64>);
        let table: [Case; 3] = [
            ("a", &[Some("disk"), None, Some("upgrade")], Some(5)),
            ("b", &[None, Some("upgrade")], Some(10)),
            ("c", &[Some("upgrade")], Some(30)),
        ];
        for (name, owners, first) in table {
            let got: Vec<Option<&str>> = standing(&pauses, name)
                .iter()
                .map(|p| p.owner.as_deref())
                .collect();
            assert_eq!(got, owners, "{name}");
            assert_eq!(holding_back(&pauses, name).map(|p| p.since_ms), first);
        }
        assert!(holding_back(&pauses[1..2], "b").is_none());
    }
}
