//! Pauses: who holds a job back, and on which scope.

use serde::Serialize;

/// A pause that stands (`pause NAME` or `pause --all`). A job is paused
/// while any pause on it or on all jobs stands, whoever owns it.
#[derive(Debug, Clone, Serialize)]
pub struct Pause {
    /// The job name, or `*` for `pause --all`.
    pub job: String,
    /// The tag of `pause --as TAG`; `None` for an operator's bare pause.
    pub owner: Option<String>,
    pub reason: Option<String>,
    pub since_ms: i64,
}
