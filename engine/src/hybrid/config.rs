//! The settings of an L-BFGS, hybrid or parameter-mixture run, validated once.

use crate::error::EngineError;
use crate::loss::Loss;
use serde::{Deserialize, Serialize};

/// Which member of the family runs (they share one kernel, see [`super`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Batch gradients and L-BFGS from zero: Hall et al.'s "distributed gradient".
    Lbfgs,
    /// One AdaGrad pass per slot, the passes averaged per feature by their accumulators,
    /// then L-BFGS from that average (Agarwal et al., section 3.2).
    Hybrid,
    /// Iterative parameter mixtures (Hall, Gilpin and Mann): every epoch each slot runs an
    /// online pass from the mixed parameters, and the master mixes the results.
    Ipm(Mixing),
}

/// How the parameter mixtures are weighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mixing {
    /// Every slot's model counts the same.
    Uniform,
    /// A slot's model counts by its share of the rows.
    Examples,
}

/// The batch solver of distributed gradient and of the hybrid after its online pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BatchSolver {
    /// L-BFGS with a strong-Wolfe line search ([`super::lbfgs`]), preconditioned by
    /// [`Precondition`].
    Lbfgs,
    /// Truncated Newton: preconditioned CG on the exact Hessian, one batch pass per CG
    /// step, and a backtracking line search ([`super::newton`], LIBLINEAR's `newton.cpp`).
    /// Its preconditioner is always the Jacobi diagonal at the current point.
    Newton,
}

impl BatchSolver {
    pub fn name(self) -> &'static str {
        match self {
            BatchSolver::Lbfgs => "lbfgs",
            BatchSolver::Newton => "newton",
        }
    }
}

/// L-BFGS's initial inverse Hessian `H0` (the hybrid's and distributed gradient's too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precondition {
    /// The scalar `s.y / y.y` of the newest pair (Nocedal and Wright's eq. 7.20).
    None,
    /// Agarwal et al.'s "standard Jacobi preconditioner": `H0 = diag(1 / (sum_i l''_i x_ij^2
    /// + 2 l2))`, the inverse of the objective's Hessian diagonal, from a batch pass at the
    /// starting point and then every `refresh` iterations (`0`: never again).
    Diagonal { refresh: u32 },
    /// The same diagonal `D`, scaled by `s.y / y'Dy` of the newest pair
    /// ([`super::lbfgs::Initial::ScaledDiagonal`]); computed and refreshed as `Diagonal`.
    Scaled { refresh: u32 },
}

impl Precondition {
    /// The default: the diagonal, recomputed every 15 iterations (L-BFGS's default memory) —
    /// docs/benchmarks/algorithms-side-by-side.md, "The Jacobi preconditioner", measures it against
    /// none, once, and every iteration.
    pub const DEFAULT: Precondition = Precondition::Diagonal { refresh: 15 };

    /// Whether the diagonal is recomputed in the iteration after `iterations` L-BFGS
    /// iterations.
    pub fn refreshes_after(self, iterations: u32) -> bool {
        match self {
            Precondition::None | Precondition::Diagonal { refresh: 0 } | Precondition::Scaled { refresh: 0 } => false,
            Precondition::Diagonal { refresh } | Precondition::Scaled { refresh } => iterations.is_multiple_of(refresh),
        }
    }
}

/// Validated settings: only [`LinearConfig::new`] makes one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinearConfig {
    mode: Mode,
    loss: Loss,
    l2: f64,
    slots: u32,
    memory: u32,
    max_epochs: u32,
    tolerance: f64,
    gradient_tolerance: f64,
    gap_tolerance: f64,
    rate: f64,
    seed: u64,
    precondition: Precondition,
    solver: BatchSolver,
}

fn invalid(name: &'static str, value: f64, why: &'static str) -> EngineError {
    EngineError::InvalidParameter { name, value, why }
}

/// A relative tolerance: finite and in `[0, 1)`.
fn fraction(name: &'static str, value: f64) -> Result<(), EngineError> {
    if value.is_finite() && (0.0..1.0).contains(&value) {
        Ok(())
    } else {
        Err(invalid(name, value, "must be in [0, 1)"))
    }
}

impl Mode {
    /// The short name of the member, as the CLI, the model header and the wire use it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Lbfgs => "lbfgs",
            Mode::Hybrid => "hybrid",
            Mode::Ipm(_) => "ipm",
        }
    }
}

impl LinearConfig {
    /// `l2` weighs `|w|^2` in `sum loss + l2 |w|^2`; `slots` is the number of online
    /// learners (hybrid, IPM; L-BFGS's result does not depend on it); `memory` the L-BFGS
    /// pairs kept (m); the run stops when 3 epochs together lower the objective by less than
    /// `tolerance` of it, when the gradient's norm falls to `gradient_tolerance` of its
    /// first value, or after `max_epochs`; `rate` is the online passes' learning rate and
    /// `seed` fixes their row orders.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mode: Mode,
        loss: Loss,
        l2: f64,
        slots: u32,
        memory: u32,
        max_epochs: u32,
        tolerance: f64,
        gradient_tolerance: f64,
        rate: f64,
        seed: u64,
    ) -> Result<Self, EngineError> {
        let name = mode.name();
        let online_only = matches!(mode, Mode::Ipm(_));
        if loss == Loss::Hinge && !online_only {
            return Err(EngineError::UnsupportedLoss {
                loss: "hinge",
                algorithm: name,
                why: "L-BFGS needs a differentiable loss and truncated Newton a twice-differentiable one (hinge has no \
                      Hessian; the squared hinge, with only a generalized one, is not offered); train hinge with \
                      cocoa, or ipm (averaged perceptron)",
            });
        }
        if !(l2.is_finite() && l2 >= 0.0) {
            return Err(invalid("l2", l2, "must be finite and >= 0"));
        }
        if l2 == 0.0 && loss == Loss::Logistic && !online_only {
            return Err(invalid("l2", l2, "must be > 0: unregularized logistic loss has no minimum on separable data"));
        }
        if slots == 0 {
            return Err(invalid("slots", 0.0, "must be >= 1"));
        }
        if memory == 0 || memory > 1000 {
            return Err(invalid("memory", memory as f64, "must be in 1..=1000"));
        }
        if max_epochs == 0 {
            return Err(invalid("max_epochs", 0.0, "must be >= 1"));
        }
        fraction("tolerance", tolerance)?;
        fraction("gradient_tolerance", gradient_tolerance)?;
        if !(rate.is_finite() && rate > 0.0 && rate <= 100.0) {
            return Err(invalid("rate", rate, "must be in (0, 100]"));
        }
        let (precondition, solver) = (Precondition::DEFAULT, BatchSolver::Lbfgs);
        Ok(Self {
            mode,
            loss,
            l2,
            slots,
            memory,
            max_epochs,
            tolerance,
            gradient_tolerance,
            gap_tolerance: 0.0,
            rate,
            seed,
            precondition,
            solver,
        })
    }

    /// The same settings with L-BFGS's initial inverse Hessian chosen (IPM runs no L-BFGS
    /// and ignores it).
    pub fn with_precondition(mut self, precondition: Precondition) -> Self {
        self.precondition = precondition;
        self
    }

    /// The same settings, also stopping once the certified relative distance to the optimum
    /// ([`super::state::LinearState::certificate`]) is at most `gap_tolerance`, as CoCoA stops
    /// on its duality gap; `0` (the default of [`LinearConfig::new`]): never on it.
    pub fn with_gap_tolerance(mut self, gap_tolerance: f64) -> Result<Self, EngineError> {
        fraction("gap_tolerance", gap_tolerance)?;
        self.gap_tolerance = gap_tolerance;
        Ok(self)
    }

    /// The same settings with the batch solver chosen (IPM runs none and ignores it).
    pub fn with_solver(mut self, solver: BatchSolver) -> Self {
        self.solver = solver;
        self
    }

    pub fn solver(&self) -> BatchSolver {
        self.solver
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }
    pub fn loss(&self) -> Loss {
        self.loss
    }
    pub fn l2(&self) -> f64 {
        self.l2
    }
    pub fn slots(&self) -> u32 {
        self.slots
    }
    pub fn memory(&self) -> usize {
        self.memory as usize
    }
    pub fn max_epochs(&self) -> u32 {
        self.max_epochs
    }
    pub fn tolerance(&self) -> f64 {
        self.tolerance
    }
    pub fn gradient_tolerance(&self) -> f64 {
        self.gradient_tolerance
    }
    pub fn gap_tolerance(&self) -> f64 {
        self.gap_tolerance
    }
    pub fn rate(&self) -> f64 {
        self.rate
    }
    pub fn seed(&self) -> u64 {
        self.seed
    }
    pub fn precondition(&self) -> Precondition {
        self.precondition
    }

    /// The algorithm's short name, as the CLI, the model header and the wire use it.
    pub fn name(&self) -> &'static str {
        self.mode.name()
    }

    /// Whether the model depends on the slot count (not for L-BFGS alone).
    pub fn uses_slots(&self) -> bool {
        self.mode != Mode::Lbfgs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_once() {
        let make = |mode, loss, l2, slots, memory, rate| {
            LinearConfig::new(mode, loss, l2, slots, memory, 100, 1e-9, 1e-10, rate, 0)
        };
        let ipm = Mode::Ipm(Mixing::Uniform);
        assert!(make(Mode::Lbfgs, Loss::Logistic, 1.0, 1, 15, 0.5).is_ok());
        assert!(make(ipm, Loss::Hinge, 1.0, 4, 15, 0.5).is_ok(), "IPM trains hinge by the averaged perceptron");
        let hinge = make(Mode::Hybrid, Loss::Hinge, 1.0, 4, 15, 0.5).unwrap_err();
        assert!(matches!(hinge, EngineError::UnsupportedLoss { algorithm: "hybrid", .. }), "{hinge}");
        assert!(make(Mode::Lbfgs, Loss::Logistic, 0.0, 1, 15, 0.5).is_err());
        assert!(make(Mode::Lbfgs, Loss::Squared, 0.0, 1, 15, 0.5).is_ok());
        assert!(make(Mode::Lbfgs, Loss::Logistic, f64::NAN, 1, 15, 0.5).is_err());
        assert!(make(Mode::Hybrid, Loss::Logistic, 1.0, 0, 15, 0.5).is_err());
        assert!(make(Mode::Hybrid, Loss::Logistic, 1.0, 2, 0, 0.5).is_err());
        assert!(make(Mode::Hybrid, Loss::Logistic, 1.0, 2, 15, 0.0).is_err());
        assert!(make(Mode::Hybrid, Loss::Logistic, 1.0, 2, 15, f64::INFINITY).is_err());
        let tol = LinearConfig::new(Mode::Lbfgs, Loss::Squared, 1.0, 1, 15, 100, 1.5, 0.0, 0.5, 0);
        assert!(tol.is_err());
    }
}
