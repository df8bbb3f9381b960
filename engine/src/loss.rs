//! Losses as pure functions of (target, prediction): the value and derivatives the primal
//! solvers need, and (in [`dual`]) the convex conjugate and the SDCA coordinate step the
//! dual solvers need. One type, so no solver matches on the loss for its math.
//!
//! Conventions: squared loss is `(y - f)^2` (no 1/2, so ridge's closed form is
//! `(X'X + l2 I)^-1 X'y` for the objective `sum loss + l2 |theta|^2`); logistic loss takes
//! targets in {-1, +1} and is `log(1 + exp(-y f))`, LIBLINEAR's `-s 0` loss; hinge loss
//! takes targets in {-1, +1} and is `max(0, 1 - y f)`, LIBLINEAR's `-s 3` (L1-loss SVM).

mod dual;

pub use dual::SdcaStep;

use crate::error::EngineError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Loss {
    Squared,
    Logistic,
    /// The linear SVM's loss. Not differentiable at `y f = 1` and without curvature, so
    /// only dual methods (CoCoA/SDCA) train it; see [`Loss::has_curvature`].
    Hinge,
}

/// First and second derivative of a loss with respect to the prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Derivatives {
    pub first: f64,
    pub second: f64,
}

impl Loss {
    pub fn name(self) -> &'static str {
        match self {
            Loss::Squared => "squared",
            Loss::Logistic => "logistic",
            Loss::Hinge => "hinge",
        }
    }

    /// Whether the loss has a positive second derivative that Newton-type primal steps
    /// (SCD) can use. Hinge loss has none: it is piecewise linear.
    pub fn has_curvature(self) -> bool {
        match self {
            Loss::Squared | Loss::Logistic => true,
            Loss::Hinge => false,
        }
    }

    /// Whether targets are the classes -1 and +1 (and predictions margins).
    pub fn is_classification(self) -> bool {
        match self {
            Loss::Squared => false,
            Loss::Logistic | Loss::Hinge => true,
        }
    }

    /// Maps a stored label to the loss's target. Logistic and hinge accept {0, 1} and
    /// {-1, +1} (0 and -1 are the negative class); squared accepts any finite value.
    pub fn target(self, label: f64) -> Result<f64, EngineError> {
        match self {
            Loss::Squared if label.is_finite() => Ok(label),
            Loss::Logistic | Loss::Hinge if label == 1.0 => Ok(1.0),
            Loss::Logistic | Loss::Hinge if label == 0.0 || label == -1.0 => Ok(-1.0),
            _ => Err(EngineError::LabelDomain {
                label,
                loss: self.name(),
                domain: if self.is_classification() { "0/1 or -1/+1" } else { "a finite number" },
            }),
        }
    }

    /// The loss of one example; numerically stable for any |f|.
    #[inline]
    pub fn value(self, target: f64, prediction: f64) -> f64 {
        match self {
            Loss::Squared => {
                let r = target - prediction;
                r * r
            }
            // log(1 + e^z) with z = -y f, without overflow: z + log1p(e^-z) for z > 0.
            Loss::Logistic => softplus(-target * prediction),
            Loss::Hinge => (1.0 - target * prediction).max(0.0),
        }
    }

    #[inline(always)]
    pub fn derivatives(self, target: f64, prediction: f64) -> Derivatives {
        match self {
            Loss::Squared => Derivatives { first: 2.0 * (prediction - target), second: 2.0 },
            Loss::Logistic => logistic_derivatives(target, prediction, f64::exp),
            // A subgradient (the left derivative at the kink) and the curvature that is 0
            // almost everywhere; Newton-type solvers refuse hinge ([`Loss::has_curvature`]).
            Loss::Hinge => Derivatives { first: if target * prediction < 1.0 { -target } else { 0.0 }, second: 0.0 },
        }
    }

    /// Score reported to users: the probability of the positive class for logistic loss,
    /// the prediction itself for squared loss and the margin for hinge loss.
    pub fn score(self, prediction: f64) -> f64 {
        match self {
            Loss::Squared | Loss::Hinge => prediction,
            Loss::Logistic => 1.0 / (1.0 + (-prediction).exp()),
        }
    }
}

/// log(1 + e^z), stable for large |z|.
#[inline]
pub fn softplus(z: f64) -> f64 {
    softplus_with(z, f64::exp)
}

/// [`softplus`] with `exp` given (an inlined one with the library's bits, `scd::fast_exp`).
#[inline(always)]
pub fn softplus_with(z: f64, exp: impl Fn(f64) -> f64) -> f64 {
    if z > 0.0 { z + exp(-z).ln_1p() } else { exp(z).ln_1p() }
}

/// The logistic loss's derivatives with `exp` given, so the hot loops can pass an inlined
/// `exp` with the same bits (`scd::fast_exp`); [`Loss::derivatives`] passes `f64::exp`.
/// sigma(m) with m = y f computed from one exp of -|m|: l' = -y sigma(-m),
/// l'' = sigma(m) sigma(-m) = e / (1 + e)^2 with e = exp(-|m|). The statistics loop's
/// four-row copy (`scd::kernels`, `LogisticInline::at4`) repeats these operations lane by
/// lane; a change here must be made there too (its test compares the two).
#[inline(always)]
pub fn logistic_derivatives(target: f64, prediction: f64, exp: impl Fn(f64) -> f64) -> Derivatives {
    let margin = target * prediction;
    let e = exp(-margin.abs());
    let inv = 1.0 / (1.0 + e);
    let sigma_neg = if margin >= 0.0 { e * inv } else { inv };
    Derivatives { first: -target * sigma_neg, second: e * inv * inv }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn derivatives_match_finite_differences(f in -30f64..30.0, positive in any::<bool>(), squared in any::<bool>()) {
            let loss = if squared { Loss::Squared } else { Loss::Logistic };
            let y = if squared { 2.5 } else if positive { 1.0 } else { -1.0 };
            let h = 1e-4;
            let d = loss.derivatives(y, f);
            let first = (loss.value(y, f + h) - loss.value(y, f - h)) / (2.0 * h);
            let second = (loss.value(y, f + h) - 2.0 * loss.value(y, f) + loss.value(y, f - h)) / (h * h);
            prop_assert!((d.first - first).abs() <= 1e-6 * (1.0 + first.abs()), "{} vs {}", d.first, first);
            prop_assert!((d.second - second).abs() <= 1e-4 * (1.0 + second.abs()), "{} vs {}", d.second, second);
        }
    }

    #[test]
    fn logistic_loss_is_stable_at_extreme_margins() {
        assert_eq!(Loss::Logistic.value(1.0, 800.0), 0.0);
        assert!((Loss::Logistic.value(1.0, -800.0) - 800.0).abs() < 1e-9);
        assert!((Loss::Logistic.value(-1.0, 0.0) - std::f64::consts::LN_2).abs() < 1e-15);
        let d = Loss::Logistic.derivatives(1.0, -800.0);
        assert!(d.first.is_finite() && d.second.is_finite());
    }

    #[test]
    fn labels_outside_the_domain_are_refused() {
        assert_eq!(Loss::Logistic.target(0.0), Ok(-1.0));
        assert_eq!(Loss::Logistic.target(-1.0), Ok(-1.0));
        assert!(Loss::Logistic.target(2.0).is_err());
        assert!(Loss::Squared.target(f64::NAN).is_err());
        assert!(Loss::Squared.target(f64::INFINITY).is_err());
        assert_eq!(Loss::Squared.target(4.0), Ok(4.0));
        assert_eq!(Loss::Hinge.target(0.0), Ok(-1.0));
        assert_eq!(Loss::Hinge.target(1.0), Ok(1.0));
        assert!(Loss::Hinge.target(0.5).is_err());
    }

    #[test]
    fn hinge_loss_is_the_svm_loss() {
        assert_eq!(Loss::Hinge.value(1.0, 0.25), 0.75);
        assert_eq!(Loss::Hinge.value(-1.0, 0.25), 1.25);
        assert_eq!(Loss::Hinge.value(1.0, 3.0), 0.0);
        assert_eq!(Loss::Hinge.derivatives(-1.0, 0.25).first, 1.0);
        assert_eq!(Loss::Hinge.derivatives(1.0, 3.0).first, 0.0);
        assert!(!Loss::Hinge.has_curvature() && Loss::Logistic.has_curvature());
    }
}
