//! Speculative execution (Agarwal et al., "A Reliable Effective Terascale Linear Learning
//! System", section 3): an item that runs much longer than the others of its phase is
//! started on an idle worker too, and the first result counts. The policy is here, pure;
//! the [`super::scheduler`] applies it, and the master's hub asks it to every
//! [`TICK`] (nothing else would notice a worker that has gone quiet).
//!
//! "Much longer" is `factor` times the median time of the items of the same phase and kind
//! already done, and at least `floor`; it is judged only once half of them are done, so
//! the median is the phase's own. The items of one phase do the same work on equal row
//! shards, and a worker holds at most two per thread (one running, one queued behind it),
//! so an item that waited its turn takes up to about twice the median: a factor of 4 never
//! copies that normal spread, and the floor keeps millisecond items on a busy machine (a
//! descheduled process, a page fault storm) from being copied for a pause that the copy
//! would not beat. What it copies is a stall: a stopped or swapping process, a dying disk,
//! a worker whose peer fetch hangs.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

/// How often the master looks for stragglers.
pub const TICK: Duration = Duration::from_millis(100);

/// When an item counts as a straggler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speculation {
    /// An item is a straggler once it has run this many times the median of the items of
    /// its phase and kind already done; `None`: never (no speculative copies).
    pub factor: Option<f64>,
    /// ... and at least this long.
    pub floor: Duration,
}

impl Default for Speculation {
    fn default() -> Self {
        Self { factor: Some(4.0), floor: Duration::from_secs(1) }
    }
}

impl Speculation {
    pub const OFF: Speculation = Speculation { factor: None, floor: Duration::ZERO };

    /// The longest an item may run before it is a straggler, given how long the `done`
    /// items of its phase and kind took of `total`; `None` while fewer than half are done.
    pub fn limit(&self, done: &[Duration], total: usize) -> Option<Duration> {
        let factor = self.factor?;
        if done.is_empty() || done.len() * 2 < total {
            return None;
        }
        Some(median(done).mul_f64(factor).max(self.floor))
    }
}

/// The lower median.
fn median(durations: &[Duration]) -> Duration {
    let mut sorted = durations.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len().saturating_sub(1) / 2).copied().unwrap_or_default()
}

/// What two copies of one item must agree on: their sums and payload.
pub fn fingerprint(sums: &[u8], payload: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    (sums, payload).hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn the_limit_is_factor_times_the_median_above_the_floor_once_half_are_done() {
        let s = Speculation { factor: Some(4.0), floor: Duration::from_millis(100) };
        assert_eq!(s.limit(&ms(&[10, 30, 20]), 8), None, "3 of 8 done: no median yet");
        assert_eq!(
            s.limit(&ms(&[10, 300, 20, 40]), 8),
            Some(Duration::from_millis(100)),
            "4 x 20 ms is below the floor"
        );
        assert_eq!(s.limit(&ms(&[100, 300, 200, 50]), 8), Some(Duration::from_millis(400)));
        assert_eq!(s.limit(&ms(&[]), 0), None);
        assert_eq!(Speculation::OFF.limit(&ms(&[1, 1, 1]), 3), None);
    }

    #[test]
    fn fingerprints_tell_sums_from_payload() {
        assert_eq!(fingerprint(b"ab", b"c"), fingerprint(b"ab", b"c"));
        assert_ne!(fingerprint(b"ab", b"c"), fingerprint(b"a", b"bc"));
    }
}
