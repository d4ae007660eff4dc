//! The pure core: every rule jobrun keeps, decided once, with no I/O.
//!
//! Stores keep rows and commands gather evidence; both ask here what the
//! rows mean: which characters a name may hold, whether a lease lapsed or was forfeited (and on which clock),
//! which holder may be freed, how many slots a job has, whether a pause
//! stands, which queued pass a newcomer joins, which process is a member
//! of a pass, how a pass ended, how the evidence of its processes and of
//! its containers combine, what a pass counts for in its job's figures.
//! Each rule has exactly one deciding function and
//! a table-driven test.

pub mod coalesce;
pub mod containers;
pub mod delay;
pub mod lease;
pub mod member;
pub mod names;
pub mod outcome;
pub mod pause;
pub mod slots;
pub mod stats;
#[rustfmt::skip]
pub mod unicode;
pub mod watch;
pub mod window;

use serde::{Deserialize, Serialize};

/// What the evidence says of a holder: tri-state. `Unknown` never frees a
/// slot by itself; absence of evidence is not evidence of death.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    Alive,
    Dead,
    Unknown,
}

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Alive => "alive",
            Liveness::Dead => "dead",
            Liveness::Unknown => "unknown",
        }
    }
}
