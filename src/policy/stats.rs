//! A job's running figures: how many of its passes ran a command, their
//! total, longest and quantiles of duration (a log-bucket sketch), and when
//! it last started, succeeded and failed. The store folds every history
//! row into them in the transaction that writes the row, so `history`'s
//! summary, `check` and `metrics` read one row per job instead of every
//! pass, and pruning history never lowers them.
//!
//! The sketch keeps a count per bucket; bucket `b ≥ 1` holds the
//! durations in `[GROWTH^(b-1), GROWTH^b)` ms and stands for their
//! geometric middle, so a quantile read from it is within 1% of the true
//! one (and exact below 50 ms, where a bucket holds one whole millisecond
//! at most). Bucket 0 holds 0 ms.

use std::collections::BTreeMap;

use super::outcome::{Outcome, PassRecord};

/// The ratio between the bounds of a bucket.
pub const GROWTH: f64 = 1.02;

/// The bounds `GROWTH^k` in turn, `k` = 0, 1, ..., up to the first past
/// the longest duration: each by one more multiplication, so every caller
/// computes the same floats (`ln` and `powf` would load libm into every
/// pass), and a pass computes only those up to its own duration.
fn bounds() -> impl Iterator<Item = f64> {
    std::iter::successors(Some(1.0), |&b| (b <= i64::MAX as f64).then_some(b * GROWTH))
}

/// The bucket of a duration (`ms ≤ 0`: bucket 0): `1 + ⌊log_GROWTH ms⌋`,
/// the number of bounds `GROWTH^k` at or below it.
pub fn bucket_of(ms: i64) -> i64 {
    if ms <= 0 {
        return 0;
    }
    let v = ms as f64;
    bounds().take_while(|&b| b <= v).count() as i64
}

/// The duration a bucket stands for: the geometric middle of its bounds
/// (`GROWTH^(b-1/2)`), to the millisecond; past the last bound, the last.
pub fn value_of(bucket: i64) -> i64 {
    if bucket <= 0 {
        return 0;
    }
    let low = bounds().take(bucket as usize).last().unwrap_or(1.0);
    (low * GROWTH.sqrt()).round() as i64
}

/// One pass's part in the figures: what `Stats::add` counts of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// It ran a command (its duration counts).
    pub ran: bool,
    pub duration_ms: i64,
    /// It took a slot: its start is the job's latest start.
    pub started_ms: Option<i64>,
    /// It ended ok / badly: its end is the job's latest success / failure.
    pub success_ms: Option<i64>,
    pub failure_ms: Option<i64>,
}

impl Part {
    /// What a recorded pass counts for (`PassRecord::ran`, `took_slot`,
    /// `ended_badly`: the same words `check` and the hooks use).
    pub fn of(p: &PassRecord) -> Part {
        Part {
            ran: p.ran(),
            duration_ms: p.duration_ms,
            started_ms: p.took_slot().then_some(p.started_at_ms),
            success_ms: (p.outcome == Outcome::Ok).then_some(p.ended_at_ms),
            failure_ms: p.ended_badly().then_some(p.ended_at_ms),
        }
    }
}

/// A job's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Passes that ran a command.
    pub ran: i64,
    pub sum_ms: i64,
    pub max_ms: i64,
    /// The duration of the latest pass counted that ran a command.
    pub last_duration_ms: Option<i64>,
    pub last_start_ms: Option<i64>,
    pub last_success_ms: Option<i64>,
    pub last_failure_ms: Option<i64>,
    /// Passes that ran, by bucket of duration.
    pub buckets: BTreeMap<i64, i64>,
}

/// The later of two instants, either possibly unknown.
fn later(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    a.max(b)
}

impl Stats {
    /// Count one more pass, later than those counted.
    pub fn add(&mut self, part: Part) {
        if part.ran {
            let d = part.duration_ms.max(0);
            self.ran += 1;
            self.sum_ms = self.sum_ms.saturating_add(d);
            self.max_ms = self.max_ms.max(d);
            self.last_duration_ms = Some(d);
            *self.buckets.entry(bucket_of(d)).or_default() += 1;
        }
        self.last_start_ms = later(self.last_start_ms, part.started_ms);
        self.last_success_ms = later(self.last_success_ms, part.success_ms);
        self.last_failure_ms = later(self.last_failure_ms, part.failure_ms);
    }

    /// Add the figures of passes counted after these.
    pub fn merge(&mut self, after: &Stats) {
        self.ran += after.ran;
        self.sum_ms = self.sum_ms.saturating_add(after.sum_ms);
        self.max_ms = self.max_ms.max(after.max_ms);
        self.last_duration_ms = after.last_duration_ms.or(self.last_duration_ms);
        self.last_start_ms = later(self.last_start_ms, after.last_start_ms);
        self.last_success_ms = later(self.last_success_ms, after.last_success_ms);
        self.last_failure_ms = later(self.last_failure_ms, after.last_failure_ms);
        for (b, n) in &after.buckets {
            *self.buckets.entry(*b).or_default() += n;
        }
    }

    /// The mean duration of the passes that ran (0 when none did).
    pub fn mean_ms(&self) -> i64 {
        if self.ran > 0 {
            self.sum_ms / self.ran
        } else {
            0
        }
    }

    /// The nearest-rank `p`th percentile of the durations, from the sketch
    /// (within 1%), never past the longest (0 when none ran).
    pub fn percentile_ms(&self, p: usize) -> i64 {
        let total: i64 = self.buckets.values().sum();
        if total <= 0 {
            return 0;
        }
        let rank = ((p as i64 * total + 99) / 100).max(1);
        let mut seen = 0;
        for (b, n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return value_of(*b).min(self.max_ms);
            }
        }
        self.max_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_stands_for_its_durations_within_one_percent() {
        // Exact to the millisecond below 50 ms; within 1% above.
        for ms in 0..50 {
            assert_eq!(value_of(bucket_of(ms)), ms, "{ms}");
        }
        for ms in (50..10_000_000).step_by(997) {
            let v = value_of(bucket_of(ms));
            assert!((v - ms).abs() * 100 <= ms, "{ms} -> {v}");
        }
        assert_eq!(bucket_of(-5), 0);
        // The bounds are the logarithm's (sketches written before agree),
        // up to the longest duration there is.
        for ms in (1..i64::MAX / 2).step_by(i64::MAX as usize / 4099) {
            let by_log = 1 + ((ms as f64).ln() / GROWTH.ln()).floor() as i64;
            assert!((bucket_of(ms) - by_log).abs() <= 1, "{ms}");
        }
        for ms in [1, 2, 3, 50, 51, 1000, 86_400_000] {
            let by_log = 1 + ((ms as f64).ln() / GROWTH.ln()).floor() as i64;
            assert_eq!(bucket_of(ms), by_log, "{ms}");
        }
        let top = bucket_of(i64::MAX);
        assert!(value_of(top) > 0 && value_of(top + 5) >= value_of(top));
        // A day fits in under a thousand buckets.
        assert!(bucket_of(86_400_000) < 1000);
    }

    #[test]
    fn buckets_are_those_of_sketches_already_stored() {
        // Stored sketches are numbered by the table earlier jobruns built
        // once per process, each bound by one more multiplication: every
        // duration keeps its bucket, and every bucket its value.
        let mut table = vec![1.0];
        let mut b: f64 = 1.0;
        while b <= i64::MAX as f64 {
            b *= GROWTH;
            table.push(b);
        }
        let by_table = |ms: i64| table.partition_point(|&b| b <= ms as f64) as i64;
        for &bound in &table[..table.len() - 1] {
            let ms = bound as i64;
            for m in [ms - 1, ms, ms.saturating_add(1)] {
                assert_eq!(bucket_of(m), by_table(m), "{m}");
            }
        }
        assert_eq!(bucket_of(i64::MAX), by_table(i64::MAX));
        for bucket in 1..table.len() as i64 + 3 {
            let low = table[(bucket as usize - 1).min(table.len() - 1)];
            assert_eq!(
                value_of(bucket),
                (low * GROWTH.sqrt()).round() as i64,
                "{bucket}"
            );
        }
    }

    fn ran(ms: i64) -> Part {
        Part {
            ran: true,
            duration_ms: ms,
            started_ms: Some(1),
            success_ms: Some(ms),
            failure_ms: None,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank_within_one_percent() {
        let mut s = Stats::default();
        for ms in 1..=1000 {
            s.add(ran(ms * 10));
        }
        let table = [(50, 5000), (95, 9500), (100, 10_000), (1, 100)];
        for (p, want) in table {
            let got = s.percentile_ms(p);
            assert!((got - want).abs() * 100 <= want, "p{p}: {got} vs {want}");
        }
        assert_eq!(s.mean_ms(), 5005);
        assert_eq!(s.max_ms, 10_000);
        assert_eq!(Stats::default().percentile_ms(50), 0);
        // Never past the longest, though its bucket's middle may be.
        let mut one = Stats::default();
        one.add(ran(10_001));
        assert_eq!(one.percentile_ms(95), 10_001);
    }

    #[test]
    fn what_each_pass_counts_for() {
        let mut s = Stats::default();
        s.add(ran(30));
        // Skipped: ran nothing, took no slot.
        s.add(Part {
            ran: false,
            duration_ms: 0,
            started_ms: None,
            success_ms: None,
            failure_ms: None,
        });
        s.add(Part {
            ran: true,
            duration_ms: 70,
            started_ms: Some(500),
            success_ms: None,
            failure_ms: Some(570),
        });
        assert_eq!((s.ran, s.sum_ms, s.max_ms), (2, 100, 70));
        assert_eq!(s.last_duration_ms, Some(70));
        assert_eq!(s.last_start_ms, Some(500));
        assert_eq!(s.last_success_ms, Some(30));
        assert_eq!(s.last_failure_ms, Some(570));
        // Merging later figures is adding their passes.
        let mut a = Stats::default();
        a.add(ran(30));
        let mut b = Stats::default();
        b.add(Part {
            ran: false,
            duration_ms: 0,
            started_ms: None,
            success_ms: None,
            failure_ms: None,
        });
        b.add(Part {
            ran: true,
            duration_ms: 70,
            started_ms: Some(500),
            success_ms: None,
            failure_ms: Some(570),
        });
        a.merge(&b);
        assert_eq!(a, s);
    }

    #[test]
    fn what_a_recorded_pass_counts_for() {
        let mut p = PassRecord {
            job: "j".into(),
            pass_id: "p".into(),
            token: Some(1),
            slot: Some(0),
            host: "h".into(),
            pid: 1,
            started_at_ms: 100,
            ended_at_ms: 150,
            duration_ms: 50,
            exit_code: Some(0),
            signal: None,
            outcome: Outcome::Ok,
            waited_ms: None,
            freed: None,
            window: None,
        };
        let ok = Part::of(&p);
        assert_eq!(
            (ok.ran, ok.started_ms, ok.success_ms, ok.failure_ms),
            (true, Some(100), Some(150), None)
        );
        p.outcome = Outcome::Failed;
        let failed = Part::of(&p);
        assert_eq!((failed.success_ms, failed.failure_ms), (None, Some(150)));
        // A waiter freed as abandoned never ran and never failed.
        p.outcome = Outcome::Abandoned;
        p.token = None;
        let ghost = Part::of(&p);
        assert_eq!(
            (ghost.ran, ghost.started_ms, ghost.failure_ms),
            (false, None, None)
        );
    }
}
