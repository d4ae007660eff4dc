//! `--jitter` and `--spread`: how long a pass waits before it tries for a
//! slot, so that a fleet whose crontabs all fire at `*/5` does not arrive
//! at the store in one burst.
//!
//! `--spread D` is a stable offset in [0, D) drawn from the host identity
//! and the job name (systemd's `FixedRandomDelay=`): each host keeps its
//! own place in the spread, pass after pass. `--jitter D` is drawn afresh
//! in [0, D) each pass (`RandomizedDelaySec=`), from a number the caller
//! gives: the kernel's randomness, or `JOBRUN_JITTER_SEED` in tests. The
//! two add up. The arithmetic is pinned here (FNV-1a, then a SplitMix64
//! finaliser) so that one host's spread stays where it was across jobrun
//! versions and machines.

use std::time::Duration;

/// The seam that makes `--jitter` reproducible: its draw comes from this
/// text instead of the kernel's randomness.
pub const SEED_ENV: &str = "JOBRUN_JITTER_SEED";

/// A 64-bit hash of `parts`, stable across versions and machines: FNV-1a
/// over each part and a separator, mixed by SplitMix64's finaliser so that
/// names that differ in one character land far apart.
pub fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    mix(h)
}

/// SplitMix64's finaliser.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `draw` scaled into [0, `within`), in whole milliseconds.
pub fn within(draw: u64, within: Duration) -> Duration {
    let ms = within.as_millis().min(u128::from(u64::MAX)) as u64;
    let picked = (u128::from(draw) * u128::from(ms)) >> 64;
    Duration::from_millis(picked as u64)
}

/// The stable `--spread` offset of `job` on `host`.
pub fn spread(host: &str, job: &str, d: Duration) -> Duration {
    within(stable_hash(&[host.as_bytes(), job.as_bytes()]), d)
}

/// The `--jitter` wait of one pass, from a fresh random `draw`.
pub fn jitter(draw: u64, d: Duration) -> Duration {
    within(mix(draw), d)
}

/// The whole wait before a pass tries for a slot: its spread offset, then
/// its jitter.
pub fn before_pass(
    host: &str,
    job: &str,
    spread_over: Option<Duration>,
    jitter_over: Option<Duration>,
    draw: u64,
) -> Duration {
    let s = spread_over.map_or(Duration::ZERO, |d| spread(host, job, d));
    let j = jitter_over.map_or(Duration::ZERO, |d| jitter(draw, d));
    s.saturating_add(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_stay_in_their_range() {
        let d = Duration::from_secs(300);
        for draw in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            assert!(jitter(draw, d) < d, "{draw}");
            assert!(within(draw, d) < d, "{draw}");
        }
        assert_eq!(within(u64::MAX, Duration::ZERO), Duration::ZERO);
        assert_eq!(within(0, d), Duration::ZERO);
        // Near the top of the range, never at it.
        assert_eq!(within(u64::MAX, d), Duration::from_millis(299_999));
        for i in 0..1000u64 {
            assert!(spread(&format!("web{i}"), "feeds.poll", d) < d);
        }
    }

    #[test]
    fn spread_is_stable_per_host_and_job_and_spreads_a_fleet() {
        let d = Duration::from_secs(60);
        assert_eq!(spread("web1", "j", d), spread("web1", "j", d));
        assert_ne!(spread("web1", "j", d), spread("web2", "j", d));
        assert_ne!(spread("web1", "j", d), spread("web1", "k", d));
        // The parts are kept apart: ("ab", "c") is not ("a", "bc").
        assert_ne!(spread("ab", "c", d), spread("a", "bc", d));
        // Pinned: a host keeps its place across jobrun versions.
        assert_eq!(
            stable_hash(&[b"web1", b"feeds.poll"]),
            0x9f5e_7ad6_254b_655e
        );
        // Fifty hosts land in most of ten buckets of the minute.
        let mut buckets = [0; 10];
        for i in 0..50 {
            let s = spread(&format!("web{i}"), "feeds.poll", d);
            buckets[(s.as_secs() / 6) as usize] += 1;
        }
        assert!(
            buckets.iter().filter(|&&n| n > 0).count() >= 8,
            "{buckets:?}"
        );
    }

    #[test]
    fn the_wait_adds_spread_and_jitter() {
        let (s, j) = (Duration::from_secs(10), Duration::from_secs(5));
        assert_eq!(before_pass("h", "j", None, None, 7), Duration::ZERO);
        let both = before_pass("h", "j", Some(s), Some(j), 7);
        assert_eq!(both, spread("h", "j", s) + jitter(7, j));
        assert!(both < s + j);
    }
}
