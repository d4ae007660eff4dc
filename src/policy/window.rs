//! Once per window: which window a pass belongs to, and whether it may
//! claim it.
//!
//! A window is a row keyed by (job, window key), claimed in the same
//! transaction that takes the slot, never upserted. Its key comes from the
//! store's clock (the server's on PostgreSQL), never a host's: for
//! `--once-per D`, the window's start in Unix seconds, windows aligned to
//! the epoch; for `--window KEY`, the key the operator gave (a calendar
//! day in local time, say). A window is done once a pass ended ok in it.
//! A claim whose pass did not end ok (any other outcome, `abandoned`
//! included, or no outcome at all once its slot is free) may be taken
//! again, by any host, until `--window-attempts` claims were made; then
//! the window is given up.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::outcome::Outcome;

/// Which windows a pass belongs to (`--once-per`, `--window`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowSpec {
    /// Windows of this many seconds, aligned to the Unix epoch.
    Every(u64),
    /// One window named by the operator.
    Key(String),
}

/// What a windowed pass asks of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowAsk {
    pub spec: WindowSpec,
    /// Claims a window allows before it is given up.
    pub attempts: u32,
}

impl WindowSpec {
    /// The key of the window that holds `now_ms` on the store's clock.
    pub fn key_at(&self, now_ms: i64) -> String {
        match self {
            WindowSpec::Every(secs) => start_of(now_ms, *secs).to_string(),
            WindowSpec::Key(k) => k.clone(),
        }
    }

    /// `--once-per D` as seconds: whole seconds, at least one.
    pub fn every(d: Duration) -> Option<WindowSpec> {
        (d.as_secs() >= 1 && d.subsec_nanos() == 0).then_some(WindowSpec::Every(d.as_secs()))
    }
}

/// The start, in Unix seconds, of the `every`-second window holding
/// `now_ms` (windows aligned to the epoch; before it too).
pub fn start_of(now_ms: i64, every: u64) -> i64 {
    let every = i64::try_from(every.max(1)).unwrap_or(i64::MAX);
    now_ms
        .div_euclid(1000)
        .div_euclid(every)
        .saturating_mul(every)
}

/// A window row as the store keeps it: its latest claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowRow {
    pub job: String,
    pub key: String,
    /// Claims made so far (the latest is `pass_id`'s).
    pub attempts: u32,
    /// The limit its latest claimer asked for (`--window-attempts`).
    pub max_attempts: u32,
    pub pass_id: String,
    pub host: String,
    /// When the latest claim was made, and when its pass ended (store
    /// clock, ms since the epoch).
    pub claimed_ms: i64,
    pub ended_ms: Option<i64>,
    /// How the latest claimer ended; `None` while it runs (or if it never
    /// recorded an end).
    pub outcome: Option<String>,
}

/// What a pass may do with the window it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Claim it: this is attempt `attempt` (1 for the first).
    Take { attempt: u32 },
    /// A pass ended ok in it: skip, as `done`.
    Done,
    /// Every allowed claim was made and none ended ok: skip.
    GivenUp,
}

/// The one rule: may a pass that found `row` (none: the window was never
/// claimed) with the slot free claim the window, allowing `max` claims?
/// A claim with no outcome whose slot is free is a pass that never
/// recorded its end: it did not end ok.
pub fn claim(row: Option<&WindowRow>, max: u32) -> Claim {
    match row {
        None => Claim::Take { attempt: 1 },
        Some(r) if r.outcome.as_deref() == Some(Outcome::Ok.as_str()) => Claim::Done,
        Some(r) if r.attempts >= max.max(1) => Claim::GivenUp,
        Some(r) => Claim::Take {
            attempt: r.attempts + 1,
        },
    }
}

/// A window's state as `status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WindowState {
    /// Its latest claimer has not recorded an end.
    Claimed,
    /// A pass ended ok in it.
    Done,
    /// Its latest claimer did not end ok; another claim is allowed.
    Failed,
    /// Every allowed claim was made and none ended ok.
    GivenUp,
}

impl WindowState {
    pub fn of(row: &WindowRow) -> WindowState {
        match row.outcome.as_deref() {
            None => WindowState::Claimed,
            Some(o) if o == Outcome::Ok.as_str() => WindowState::Done,
            Some(_) if row.attempts >= row.max_attempts.max(1) => WindowState::GivenUp,
            Some(_) => WindowState::Failed,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WindowState::Claimed => "claimed",
            WindowState::Done => "done",
            WindowState::Failed => "failed",
            WindowState::GivenUp => "given-up",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(attempts: u32, outcome: Option<&str>) -> WindowRow {
        WindowRow {
            job: "j".into(),
            key: "k".into(),
            attempts,
            max_attempts: 3,
            pass_id: "p".into(),
            host: "web1".into(),
            claimed_ms: 0,
            ended_ms: None,
            outcome: outcome.map(str::to_string),
        }
    }

    #[test]
    fn windows_are_aligned_to_the_epoch() {
        let every = WindowSpec::Every(300);
        assert_eq!(every.key_at(0), "0");
        assert_eq!(every.key_at(299_999), "0");
        assert_eq!(every.key_at(300_000), "300");
        assert_eq!(every.key_at(1_764_580_000_123), "1764579900");
        // Before the epoch (a clock gone very wrong): still aligned.
        assert_eq!(start_of(-1, 300), -300);
        assert_eq!(WindowSpec::Key("2026-12-01".into()).key_at(5), "2026-12-01");
        assert_eq!(
            WindowSpec::every(Duration::from_secs(60)),
            Some(WindowSpec::Every(60))
        );
        assert_eq!(WindowSpec::every(Duration::from_millis(500)), None);
        assert_eq!(WindowSpec::every(Duration::from_millis(1500)), None);
    }

    #[test]
    fn who_may_claim_a_window() {
        let table = [
            (None, 3, Claim::Take { attempt: 1 }),
            (Some(row(1, Some("ok"))), 3, Claim::Done),
            (Some(row(3, Some("ok"))), 3, Claim::Done),
            (Some(row(1, Some("failed"))), 3, Claim::Take { attempt: 2 }),
            (
                Some(row(2, Some("abandoned"))),
                3,
                Claim::Take { attempt: 3 },
            ),
            (Some(row(1, None)), 3, Claim::Take { attempt: 2 }),
            (Some(row(3, Some("failed"))), 3, Claim::GivenUp),
            (Some(row(3, None)), 3, Claim::GivenUp),
            (Some(row(1, Some("timeout"))), 1, Claim::GivenUp),
            (Some(row(4, Some("failed"))), 5, Claim::Take { attempt: 5 }),
        ];
        for (r, max, want) in table {
            assert_eq!(claim(r.as_ref(), max), want, "{r:?} {max}");
        }
    }

    #[test]
    fn window_states() {
        assert_eq!(WindowState::of(&row(1, None)), WindowState::Claimed);
        assert_eq!(WindowState::of(&row(2, Some("ok"))), WindowState::Done);
        assert_eq!(
            WindowState::of(&row(2, Some("failed"))),
            WindowState::Failed
        );
        assert_eq!(
            WindowState::of(&row(3, Some("killed"))),
            WindowState::GivenUp
        );
    }
}
