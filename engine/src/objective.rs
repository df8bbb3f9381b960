//! The regularized objective: `sum_i loss(y_i, f_i) + l2 |theta|^2 + l1 |theta|_1`, the bias
//! included in theta (regularized like the other features, as LIBLINEAR `-B 1` does).

use crate::error::EngineError;
use serde::{Deserialize, Serialize};

/// Regularization strengths, validated once so the solvers never see a bad value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Regularization {
    pub l2: f64,
    pub l1: f64,
}

impl Regularization {
    pub fn new(l2: f64, l1: f64) -> Result<Self, EngineError> {
        for (name, value) in [("l2", l2), ("l1", l1)] {
            if !value.is_finite() || value < 0.0 {
                return Err(EngineError::InvalidParameter { name, value, why: "must be finite and >= 0" });
            }
        }
        Ok(Self { l2, l1 })
    }

    /// The penalty of one parameter.
    #[inline]
    pub fn penalty(&self, theta: f64) -> f64 {
        self.l2 * theta * theta + self.l1 * theta.abs()
    }

    /// The penalty of all parameters, summed block by block in feature order (a fixed order,
    /// so the value is reproducible).
    pub fn total<'a>(&self, blocks: impl IntoIterator<Item = &'a [f64]>) -> f64 {
        blocks.into_iter().map(|b| b.iter().map(|&t| self.penalty(t)).sum::<f64>()).sum()
    }
}
