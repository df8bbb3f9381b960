//! The settings of a CoCoA run, validated once.

use super::catalyst::AccelerateConfig;
use super::elastic::ElasticConfig;
use super::schedule::GapSchedule;
use crate::error::EngineError;
use crate::loss::Loss;
use serde::{Deserialize, Serialize};

/// How the slots' local problems are coupled: the weight of `|X_k' delta_alpha_k|^2` in
/// CoCoA+'s local subproblem, which must make the slots' local problems together a lower
/// bound of the dual's change when their updates are added (docs/algorithms.md, "Per-feature
/// aggregation").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Aggregation {
    /// One `sigma'` for every feature: `K` (Ma, Smith et al. 2015, Lemma 4), or
    /// `min(K, cap)` with [`CocoaConfig::with_sigma_cap`].
    Scalar,
    /// `sigma'_j = s_j`, the number of slots whose rows hold a non-zero of feature j: by
    /// Cauchy-Schwarz per feature, `|sum_k X_k' a_k|^2 <= sum_j s_j sum_k (X_k' a_k)_j^2`, so it is
    /// as safe as `K` (and `s_j <= K`); a feature one slot owns is not damped at all. The master
    /// counts `s` exactly at the start and after every scale-in. The default: never slower to
    /// converge per epoch in theory (CoCoA+'s rate with `sigma' sigma_k` replaced by a smaller
    /// constant), and measured (docs/benchmarks/elastic-cocoa.md, "Per-feature aggregation").
    #[default]
    PerFeature,
}

/// Validated CoCoA settings: only [`CocoaConfig::new`] makes one, so the solver never sees
/// a bad value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CocoaConfig {
    loss: Loss,
    l2: f64,
    slots: u32,
    partitions: u32,
    local_passes: u32,
    max_epochs: u32,
    gap_tolerance: f64,
    seed: u64,
    /// Chicle's scale-in policy; `None`: K stays as it is.
    elastic: Option<ElasticConfig>,
    /// CoCoA+'s `sigma'` is `min(K, cap)`; `None`: `K` (see [`Self::with_sigma_cap`]).
    sigma_cap: Option<f64>,
    /// One `sigma'` for every feature, or one per feature ([`Aggregation`]).
    aggregation: Aggregation,
    /// Catalyst's outer loop ([`super::catalyst`]); `None`: plain CoCoA.
    accelerate: Option<AccelerateConfig>,
    /// When the duality gap is computed ([`super::schedule`]).
    gap_schedule: GapSchedule,
}

const ACCELERATED_AND_ELASTIC: EngineError = EngineError::InvalidParameter {
    name: "accelerate",
    value: 1.0,
    why: "Catalyst acceleration and elastic scale-in cannot be combined (the scale-in policy would read \
          the accelerated gap curve's flat stretches as knees)",
};

const SIGMA_CAP_AND_PER_FEATURE: EngineError = EngineError::InvalidParameter {
    name: "sigma cap",
    value: 1.0,
    why: "a sigma' cap applies to the scalar aggregation only (per-feature aggregation uses the safe per-feature values)",
};

fn invalid(name: &'static str, value: f64, why: &'static str) -> EngineError {
    EngineError::InvalidParameter { name, value, why }
}

impl CocoaConfig {
    /// `l2` weighs `|w|^2` in `sum loss + l2 |w|^2` (the dual needs it positive); `slots` is
    /// the number of local problems K; `local_passes` the SDCA passes H over a slot's rows
    /// per epoch; the run stops when the duality gap relative to the primal is at most
    /// `gap_tolerance`, or after `max_epochs`; `seed` fixes the coordinate orders.
    /// The rows are split into as many partitions as slots; see [`Self::with_partitions`].
    pub fn new(
        loss: Loss,
        l2: f64,
        slots: u32,
        local_passes: u32,
        max_epochs: u32,
        gap_tolerance: f64,
        seed: u64,
    ) -> Result<Self, EngineError> {
        if !(l2.is_finite() && l2 > 0.0) {
            return Err(invalid("l2", l2, "must be finite and > 0 for the dual to exist"));
        }
        if slots == 0 {
            return Err(invalid("slots", 0.0, "must be >= 1"));
        }
        if local_passes == 0 {
            return Err(invalid("local_passes", 0.0, "must be >= 1"));
        }
        if max_epochs == 0 {
            return Err(invalid("max_epochs", 0.0, "must be >= 1"));
        }
        if !(gap_tolerance.is_finite() && gap_tolerance >= 0.0) {
            return Err(invalid("gap_tolerance", gap_tolerance, "must be finite and >= 0"));
        }
        Ok(Self {
            loss,
            l2,
            slots,
            partitions: slots,
            local_passes,
            max_epochs,
            gap_tolerance,
            seed,
            elastic: None,
            sigma_cap: None,
            aggregation: Aggregation::default(),
            accelerate: None,
            gap_schedule: GapSchedule::Adaptive,
        })
    }

    /// Splits the rows into `partitions` (P) instead of K: the least common multiple of every
    /// slot count a job may scale to, so that scaling in keeps whole partitions together.
    pub fn with_partitions(mut self, partitions: u32) -> Result<Self, EngineError> {
        let schedule = self.elastic.map_or(vec![self.slots], |e| e.schedule(self.slots));
        if partitions == 0 || schedule.iter().any(|&k| !partitions.is_multiple_of(k)) {
            return Err(invalid(
                "partitions",
                partitions as f64,
                "must be a positive multiple of every slot count the run can reach",
            ));
        }
        self.partitions = partitions;
        Ok(self)
    }

    /// Scales in from K slots as Chicle's policy decides; the rows are split into the least
    /// common multiple of every slot count the run can reach (or a multiple of it given
    /// later with [`Self::with_partitions`]).
    pub fn with_elastic(mut self, elastic: ElasticConfig) -> Result<Self, EngineError> {
        if self.accelerate.is_some() {
            return Err(ACCELERATED_AND_ELASTIC);
        }
        if elastic.min_slots() > self.slots {
            return Err(invalid("elastic min_slots", elastic.min_slots() as f64, "must be at most the slot count"));
        }
        let partitions = elastic.partitions(self.slots).ok_or(invalid(
            "slots",
            self.slots as f64,
            "the partition count for this scale-in schedule exceeds 2^32",
        ))?;
        self.partitions = partitions;
        self.elastic = Some(elastic);
        Ok(self)
    }

    /// Couples the slots' local problems with one `sigma' = min(K, cap)` for every feature
    /// ([`Aggregation::Scalar`]).
    ///
    /// `sigma' = K` (with the updates added) is safe for any data (Ma, Smith et al. 2015,
    /// Lemma 4); the bound it must meet is `sigma' >= max |X' alpha|^2 / sum_k |X_k' alpha_k|^2`,
    /// which is far below K when the slots' rows are nearly orthogonal. Below that bound an
    /// epoch can overshoot and the dual fall; the gap stays a valid certificate either way
    /// (every `alpha` stays in its domain and `w = X' alpha / lambda`).
    pub fn with_sigma_cap(mut self, cap: f64) -> Result<Self, EngineError> {
        if !(cap.is_finite() && cap >= 1.0) {
            return Err(invalid("sigma cap", cap, "must be finite and >= 1"));
        }
        self.aggregation = Aggregation::Scalar;
        self.sigma_cap = Some(cap);
        Ok(self)
    }

    /// Couples the slots' local problems as `aggregation` says; with
    /// [`Aggregation::PerFeature`] a sigma cap is refused (the per-feature weights are the
    /// safe ones; a cap below them has no guarantee).
    pub fn with_aggregation(mut self, aggregation: Aggregation) -> Result<Self, EngineError> {
        if aggregation == Aggregation::PerFeature && self.sigma_cap.is_some() {
            return Err(SIGMA_CAP_AND_PER_FEATURE);
        }
        self.aggregation = aggregation;
        Ok(self)
    }

    pub fn aggregation(&self) -> Aggregation {
        self.aggregation
    }

    /// Whether K = `slots` slots couple per feature: never at K = 1, where every `s_j` is 1
    /// and the scalar `sigma' = 1` is the same problem (and the same bits).
    pub fn per_feature(&self, slots: u32) -> bool {
        self.aggregation == Aggregation::PerFeature && slots > 1
    }

    /// CoCoA+'s `sigma'` for K = `slots`.
    pub fn sigma(&self, slots: u32) -> f64 {
        let k = slots as f64;
        self.sigma_cap.map_or(k, |cap| cap.min(k))
    }

    /// Runs CoCoA inside Catalyst's accelerated outer loop ([`super::catalyst`]).
    ///
    /// Not together with elastic scale-in: the policy reads a knee in the gap curve as the
    /// slow block-Jacobi mode that fewer slots remove, while the accelerated curve is a
    /// staircase of best-so-far values (flat within a subproblem, then a drop), whose flat
    /// stretches would read as knees; and both answer the same slow mode, in different ways.
    pub fn with_accelerate(mut self, accelerate: AccelerateConfig) -> Result<Self, EngineError> {
        if self.elastic.is_some() {
            return Err(ACCELERATED_AND_ELASTIC);
        }
        self.accelerate = Some(accelerate);
        Ok(self)
    }

    /// Computes the duality gap after every epoch, not only when [`GapSchedule::Adaptive`]
    /// expects it near the tolerance: a full gap curve (what the convergence tests record)
    /// for one data pass per epoch. The model after a given epoch is the same either way.
    pub fn with_gap_every_epoch(mut self) -> Self {
        self.gap_schedule = GapSchedule::EveryEpoch;
        self
    }

    /// The schedule in force: every epoch when the gap feeds a decision each epoch (the
    /// elastic policy reads the gap curve, Catalyst's outer loop its subproblem's gap).
    pub fn gap_schedule(&self) -> GapSchedule {
        if self.elastic.is_some() || self.accelerate.is_some() { GapSchedule::EveryEpoch } else { self.gap_schedule }
    }

    pub fn accelerate(&self) -> Option<&AccelerateConfig> {
        self.accelerate.as_ref()
    }

    pub fn elastic(&self) -> Option<&ElasticConfig> {
        self.elastic.as_ref()
    }

    pub fn loss(&self) -> Loss {
        self.loss
    }

    pub fn l2(&self) -> f64 {
        self.l2
    }

    /// `lambda = 2 l2`, the regularizer in the dual's `(lambda/2) |w|^2` form.
    pub fn lambda(&self) -> f64 {
        2.0 * self.l2
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    pub fn local_passes(&self) -> u32 {
        self.local_passes
    }

    pub fn max_epochs(&self) -> u32 {
        self.max_epochs
    }

    pub fn gap_tolerance(&self) -> f64 {
        self.gap_tolerance
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_once() {
        let ok = |l2, slots, passes, epochs, tol| CocoaConfig::new(Loss::Hinge, l2, slots, passes, epochs, tol, 0);
        assert!(ok(1.0, 4, 1, 10, 1e-6).is_ok());
        assert!(ok(0.0, 4, 1, 10, 1e-6).is_err());
        assert!(ok(f64::NAN, 4, 1, 10, 1e-6).is_err());
        assert!(ok(1.0, 0, 1, 10, 1e-6).is_err());
        assert!(ok(1.0, 4, 0, 10, 1e-6).is_err());
        assert!(ok(1.0, 4, 1, 0, 1e-6).is_err());
        assert!(ok(1.0, 4, 1, 10, -1.0).is_err());
        assert!(ok(1.0, 4, 1, 10, f64::INFINITY).is_err());
        let config = ok(1.0, 4, 1, 10, 0.0).unwrap();
        assert_eq!(config.partitions(), 4);
        assert_eq!(config.with_partitions(12).unwrap().partitions(), 12);
        assert!(config.with_partitions(6).is_err());
        assert!(config.with_partitions(0).is_err());
        let elastic = ElasticConfig::chicle(1, super::super::elastic::Clock::Epochs).unwrap();
        let scaled = ok(1.0, 8, 1, 10, 0.0).unwrap().with_elastic(elastic).unwrap();
        assert_eq!(scaled.partitions(), 8, "8 -> 2 -> 1");
        assert!(scaled.with_partitions(12).is_err(), "12 slots cannot be split into 8");
        assert!(
            ok(1.0, 2, 1, 10, 0.0).unwrap().with_elastic(ElasticConfig::chicle(3, elastic.clock()).unwrap()).is_err()
        );
        let accelerate = AccelerateConfig::new(None).unwrap();
        assert!(AccelerateConfig::new(Some(0.0)).is_err());
        assert!(AccelerateConfig::new(Some(f64::NAN)).is_err());
        assert!(scaled.with_accelerate(accelerate).is_err(), "elastic, then accelerated");
        let accelerated = ok(1.0, 8, 1, 10, 0.0).unwrap().with_accelerate(accelerate).unwrap();
        assert!(accelerated.with_elastic(elastic).is_err(), "accelerated, then elastic");
    }

    #[test]
    fn scd_refuses_hinge_and_says_why() {
        let err = crate::scd::ScdConfig::new(Loss::Hinge, 1.0, 0.0, 10, 1e-9, 0).unwrap_err();
        assert!(matches!(err, EngineError::UnsupportedLoss { loss: "hinge", algorithm: "scd", .. }), "{err}");
        assert!(crate::scd::ScdConfig::new(Loss::Logistic, 1.0, 0.0, 10, 1e-9, 0).is_ok());
    }
}
