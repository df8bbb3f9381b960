//! Chicle's scale-in policy (`../shared/papers/elastic-cocoa-chicle.txt`, section 3.2): CoCoA
//! with many slots is fast early and flattens at a *knee*; fewer slots reach lower gaps
//! faster, so the run drops from K to K/m slots once the duality gap's recent rate of decrease
//! falls behind its rate since the last scale-in.
//!
//! Rates are decreases of `ln(gap)` per unit of the policy's clock: seconds ([`Clock::Wall`],
//! as the paper measures, so a decision depends on timing) or epochs ([`Clock::Epochs`],
//! fully reproducible). With `S_l` the rate since the last scale-in and `S_s` the rate over
//! the last N epochs, the policy scales in when `S_s * d < S_l`.
//!
//! Two guards keep noise from faking a knee:
//! * the gap is taken as its running minimum (the best certificate so far), so a CoCoA epoch
//!   whose primal went up (hinge loss does that) is not read as a slowdown;
//! * on the wall clock an epoch counts at most [`OUTLIER_FACTOR`] times the median epoch time
//!   since the last scale-in: an epoch slowed by a preemption, a replaced worker or a slow
//!   node made the same progress per epoch as its neighbours, and the policy asks whether the
//!   *algorithm* slowed down, not the machines. The first epoch after a scale-in (which
//!   gathers the merged slots' rows) is clipped the same way.

use crate::error::EngineError;
use serde::{Deserialize, Serialize};

/// An epoch counts at most this many times the median epoch time (wall clock).
pub const OUTLIER_FACTOR: f64 = 1.5;

/// Chicle's short-term window N, in epochs (section 3.2).
pub const CHICLE_WINDOW: u32 = 2;

/// What the policy measures time in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// Seconds, as Chicle does: decisions depend on how fast epochs ran.
    Wall,
    /// Epochs: the same data and parameters give the same decisions and model bytes.
    Epochs,
}

/// Validated policy settings; only [`ElasticConfig::new`] makes one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ElasticConfig {
    min_slots: u32,
    factor: u32,
    window: u32,
    threshold: f64,
    clock: Clock,
}

fn invalid(name: &'static str, value: f64, why: &'static str) -> EngineError {
    EngineError::InvalidParameter { name, value, why }
}

impl ElasticConfig {
    /// Never fewer than `min_slots`; scale in by `factor` (m); the short-term rate is over the
    /// last `window` epochs (N); scale in when it times `threshold` (d) falls below the
    /// long-term rate. Chicle's measured defaults: [`ElasticConfig::chicle`].
    pub fn new(min_slots: u32, factor: u32, window: u32, threshold: f64, clock: Clock) -> Result<Self, EngineError> {
        if min_slots == 0 {
            return Err(invalid("elastic min_slots", 0.0, "must be >= 1"));
        }
        if factor < 2 {
            return Err(invalid("elastic factor", factor as f64, "must be >= 2"));
        }
        if window == 0 {
            return Err(invalid("elastic window", 0.0, "must be >= 1"));
        }
        if !(threshold.is_finite() && threshold >= 1.0) {
            return Err(invalid("elastic threshold", threshold, "must be finite and >= 1"));
        }
        Ok(Self { min_slots, factor, window, threshold, clock })
    }

    /// N = 2, d = 1.25, m = 4 (Chicle, section 3.2), down to `min_slots`.
    pub fn chicle(min_slots: u32, clock: Clock) -> Result<Self, EngineError> {
        Self::new(min_slots, 4, CHICLE_WINDOW, 1.25, clock)
    }

    pub fn min_slots(&self) -> u32 {
        self.min_slots
    }

    pub fn factor(&self) -> u32 {
        self.factor
    }

    pub fn window(&self) -> u32 {
        self.window
    }

    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The slot count after one scale-in from `slots`; `None` at the minimum.
    pub fn next_slots(&self, slots: u32) -> Option<u32> {
        (slots > self.min_slots).then(|| (slots / self.factor).max(self.min_slots))
    }

    /// Every slot count a run starting at `slots` can reach, largest first.
    pub fn schedule(&self, slots: u32) -> Vec<u32> {
        std::iter::successors(Some(slots), |&k| self.next_slots(k)).collect()
    }

    /// The partition count P: the least common multiple of the schedule, so every scale-in
    /// merges whole partitions (Chicle, section 3.1). `None` past `u32`.
    pub fn partitions(&self, slots: u32) -> Option<u32> {
        self.schedule(slots)
            .into_iter()
            .try_fold(1u64, |p, k| {
                let p = p / gcd(p, k as u64) * k as u64;
                (p <= u32::MAX as u64).then_some(p)
            })
            .map(|p| p as u32)
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// One epoch as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// The epoch's wall time in seconds (not used on [`Clock::Epochs`]).
    pub duration: f64,
    /// The relative duality gap after the epoch.
    pub gap: f64,
}

/// A scale-in and why it happened; recorded in the checkpoint so a restarted master replays
/// the run's decisions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScaleIn {
    /// The epoch after which the slot count changed.
    pub epoch: u32,
    pub from: u32,
    pub to: u32,
    /// Decrease of `ln(gap)` per clock unit over the last N epochs.
    pub short_rate: f64,
    /// The same since the last scale-in (or the start).
    pub long_rate: f64,
    pub clock: Clock,
}

impl ScaleIn {
    /// For logs and events: "duality gap rate 0.31/s over the last 2 epochs vs 0.52/s since
    /// 16 slots: 16 -> 4".
    pub fn describe(&self, window: u32) -> String {
        let unit = match self.clock {
            Clock::Wall => "s",
            Clock::Epochs => "epoch",
        };
        format!(
            "duality gap rate {:.3}/{unit} over the last {window} epochs vs {:.3}/{unit} since {} slots: {} -> {}",
            self.short_rate, self.long_rate, self.from, self.from, self.to
        )
    }
}

/// The rates of decrease of `ln(gap)` (running minimum) over `epochs`, which start with the
/// epoch the current slot count began after (its gap is the starting level; its duration
/// is not used): `(short over the last window, long over all)`. `None` until the long span
/// is longer than the short one.
pub fn rates(epochs: &[Observation], window: usize, clock: Clock) -> Option<(f64, f64)> {
    if window == 0 || epochs.len() < window + 2 {
        return None;
    }
    let durations: Vec<f64> = epochs[1..].iter().map(|o| o.duration).collect();
    let cap = match clock {
        Clock::Wall => OUTLIER_FACTOR * median(&durations),
        Clock::Epochs => f64::INFINITY,
    };
    // Cumulative clock and running-minimum log gap at each epoch.
    let mut points = Vec::with_capacity(epochs.len());
    let (mut t, mut best) = (0.0, f64::INFINITY);
    for (i, o) in epochs.iter().enumerate() {
        if i > 0 {
            t += match clock {
                Clock::Wall => o.duration.min(cap).max(0.0),
                Clock::Epochs => 1.0,
            };
        }
        best = best.min(o.gap.max(f64::MIN_POSITIVE));
        points.push((t, best.ln()));
    }
    let rate = |from: (f64, f64), to: (f64, f64)| {
        let span = to.0 - from.0;
        (span > 0.0).then(|| (from.1 - to.1) / span)
    };
    let now = *points.last()?;
    let short = rate(points[points.len() - 1 - window], now)?;
    let long = rate(points[0], now)?;
    Some((short, long))
}

fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return f64::INFINITY;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 { sorted[mid] } else { 0.5 * (sorted[mid - 1] + sorted[mid]) }
}

/// Chicle's rule after `epoch` at `slots` slots: scale in when `S_s * d < S_l`.
pub fn decide(config: &ElasticConfig, slots: u32, epoch: u32, since_scale_in: &[Observation]) -> Option<ScaleIn> {
    let to = config.next_slots(slots)?;
    let (short_rate, long_rate) = rates(since_scale_in, config.window as usize, config.clock)?;
    (short_rate * config.threshold < long_rate).then_some(ScaleIn {
        epoch,
        from: slots,
        to,
        short_rate,
        long_rate,
        clock: config.clock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(min: u32, clock: Clock) -> ElasticConfig {
        ElasticConfig::chicle(min, clock).unwrap()
    }

    /// Epochs of one second whose log gap falls by `rates[i]` each.
    fn curve(start: f64, rates: &[f64]) -> Vec<Observation> {
        let mut gap = start;
        let mut out = vec![Observation { duration: f64::NAN, gap }];
        for r in rates {
            gap *= (-r).exp();
            out.push(Observation { duration: 1.0, gap });
        }
        out
    }

    #[test]
    fn settings_are_validated_and_the_schedule_keeps_whole_partitions() {
        assert!(ElasticConfig::new(0, 4, 2, 1.25, Clock::Wall).is_err());
        assert!(ElasticConfig::new(1, 1, 2, 1.25, Clock::Wall).is_err());
        assert!(ElasticConfig::new(1, 4, 0, 1.25, Clock::Wall).is_err());
        assert!(ElasticConfig::new(1, 4, 2, 0.9, Clock::Wall).is_err());
        assert!(ElasticConfig::new(1, 4, 2, f64::NAN, Clock::Wall).is_err());
        let c = config(1, Clock::Epochs);
        assert_eq!(c.schedule(16), vec![16, 4, 1]);
        assert_eq!(c.partitions(16), Some(16));
        assert_eq!(config(2, Clock::Epochs).schedule(16), vec![16, 4, 2]);
        assert_eq!(c.schedule(6), vec![6, 1]);
        assert_eq!(ElasticConfig::new(1, 2, 2, 1.25, Clock::Wall).unwrap().partitions(6), Some(6));
        assert_eq!(ElasticConfig::new(2, 4, 2, 1.25, Clock::Wall).unwrap().partitions(10), Some(10));
        assert_eq!(ElasticConfig::new(3, 4, 2, 1.25, Clock::Wall).unwrap().partitions(14), Some(42));
        assert_eq!(c.schedule(1), vec![1]);
        assert_eq!(c.next_slots(1), None);
    }

    #[test]
    fn a_straight_line_never_triggers_and_a_knee_does() {
        let c = config(1, Clock::Wall);
        let straight = curve(1.0, &[0.5; 12]);
        for end in 2..straight.len() {
            assert_eq!(decide(&c, 16, end as u32, &straight[..=end]), None, "epoch {end}");
        }
        // Fast for 6 epochs, then a knee: the rate drops to a fifth. The first slow epoch
        // halves the short rate (0.5 and 0.1 over two epochs) against a long one of 3.1/7.
        let knee = curve(1.0, &[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.1, 0.1, 0.1]);
        let first = (2..knee.len()).find(|&e| decide(&c, 16, e as u32, &knee[..=e]).is_some()).unwrap();
        assert_eq!(first, 7);
        let s = decide(&c, 16, 7, &knee[..=7]).unwrap();
        assert_eq!((s.from, s.to, s.epoch), (16, 4, 7));
        assert!((s.short_rate - 0.3).abs() < 1e-12 && (s.long_rate - 3.1 / 7.0).abs() < 1e-12, "{s:?}");
        assert!(s.describe(2).contains("0.300/s over the last 2 epochs vs 0.443/s since 16 slots: 16 -> 4"));
    }

    #[test]
    fn never_below_the_minimum() {
        let knee = curve(1.0, &[0.5, 0.5, 0.5, 0.5, 0.1, 0.1, 0.1]);
        assert_eq!(decide(&config(4, Clock::Epochs), 4, 7, &knee), None);
        assert_eq!(decide(&config(2, Clock::Epochs), 4, 7, &knee).map(|s| s.to), Some(2));
    }

    #[test]
    fn a_slow_epoch_on_the_wall_clock_is_an_outlier_not_a_knee() {
        let c = config(1, Clock::Wall);
        let mut slowed = curve(1.0, &[0.5; 8]);
        slowed[7].duration = 6.0; // a preemption: the same progress, six times the time
        // Unclipped, the short rate would be (0.5 + 0.5) / 7 = 0.14 against ~0.43.
        let (short, long) = rates(&slowed, 2, Clock::Wall).unwrap();
        assert!(short * 1.25 >= long, "short {short} long {long}");
        assert_eq!(decide(&c, 16, 7, &slowed), None);
        // On the epoch clock durations do not count at all.
        assert_eq!(decide(&config(1, Clock::Epochs), 16, 7, &slowed), None);
    }

    #[test]
    fn a_gap_that_rises_counts_as_no_progress_not_as_lost_progress() {
        // Hinge-loss CoCoA: the primal (and so the gap) can rise for an epoch. Taken as it
        // is, the short rate would be (0.5 - ln 1.5) / 2 = 0.047; the best gap so far makes it
        // 0.5 / 2.
        let mut gaps = curve(1.0, &[0.5; 8]);
        gaps[7].gap = gaps[6].gap * 1.5;
        let (short, long) = rates(&gaps[..=7], 2, Clock::Epochs).unwrap();
        assert!((short - 0.25).abs() < 1e-12 && (long - 3.0 / 7.0).abs() < 1e-12, "{short} {long}");
        // The next epoch's progress counts from the best level, so the rate is back.
        gaps[8].gap = gaps[6].gap * (-1.0f64).exp();
        assert_eq!(decide(&config(1, Clock::Epochs), 16, 8, &gaps), None);
    }

    #[test]
    fn nothing_is_decided_before_the_long_span_exceeds_the_short() {
        let c = config(1, Clock::Epochs);
        let knee = curve(1.0, &[0.5, 0.01, 0.01]);
        assert_eq!(rates(&knee[..3], 2, Clock::Epochs), None);
        assert!(decide(&c, 16, 3, &knee).is_some());
    }
}
