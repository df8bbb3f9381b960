//! Batch and online-then-batch training on one kernel: L-BFGS on exact batch gradients
//! (Hall, Gilpin and Mann's "distributed gradient"), Agarwal et al.'s hybrid (one AdaGrad
//! pass per slot, averaged per feature by the accumulators, then L-BFGS warm-started from
//! it; `../shared/papers/terascale-linear-learning-allreduce.txt`, section 3.2), and Hall et
//! al.'s iterative parameter mixtures (`mapreduce-bigtable-distributed-optimization.txt`).
//!
//! All minimize `P(w) = sum_i loss(y_i, x_i.w) + l2 |w|^2` (the bias an always-on feature,
//! regularized like the others — the objective SCD and CoCoA minimize). A batch pass
//! ([`LinearPhase::Evaluate`]) returns the loss and its gradient as exact fixed-point sums
//! rounded once per grain of [`layout::GRAIN`] rows, so L-BFGS is the same bits for any
//! worker count *and* any slot count. The online passes ([`LinearPhase::Adagrad`],
//! [`LinearPhase::Mix`]) run over a slot's rows in a seeded order; their results are
//! combined by exact sums, so the hybrid and IPM are the same bits for any worker count
//! at a fixed slot count K.
//!
//! Not here: asynchronous SGD (Hall et al.'s third strategy). It cannot be deterministic —
//! its result depends on the order updates arrive in — so it is left out rather than built
//! behind a flag.
//!
//! L-BFGS (alone and in the hybrid) is preconditioned as Agarwal et al.'s is, by the
//! inverse of the objective's Hessian diagonal ([`Precondition`]): on data whose features'
//! curvatures differ by orders of magnitude (criteo's rare categories) the scalar initial
//! scaling costs many iterations. The diagonal comes from the same batch pass as the
//! gradient and is reduced by the same exact sums, so it keeps L-BFGS's bits independent of
//! the worker and slot count.
//!
//! The batch solver may instead be truncated Newton ([`BatchSolver::Newton`],
//! [`newton`]): CG on the exact Hessian, whose products ([`LinearPhase::Hessian`]) are
//! batch passes reduced by the same exact per-grain sums, so it too is the same bits for
//! any worker count (and, alone, any slot count).

#[cfg(test)]
mod certificate_tests;
pub mod config;
pub mod kernel;
pub mod layout;
pub mod lbfgs;
pub mod newton;
pub mod online;
mod pass;
pub mod state;
#[cfg(test)]
mod tests;

pub use config::{BatchSolver, LinearConfig, Mixing, Mode, Precondition};
pub use kernel::{LinearKernel, LinearPhase};
pub use state::{LinearState, LinearStep};

use crate::algorithm::{Algorithm, Iteration, PhaseRequest, Progress, Recovery, Reduction, Runner, StopReason};
use crate::error::EngineError;
use crate::fixed::from_fixed128;
use crate::grid::BlockShape;
use lbfgs::{Initial, Pair, Point, SearchFailure, direction, dot, line_search, norm};

pub struct Linear {
    config: LinearConfig,
    kernel: LinearKernel,
    state: LinearState,
    /// `|state.g|`, computed once whenever `g` changes (an epoch, a restored state, a
    /// replayed step): the stop rule and the certificate both read it every epoch, and it
    /// is a pass over every feature. Not part of the state: it follows from it.
    gradient_norm: f64,
}

/// What one L-BFGS iteration did, for the epoch's step and note.
struct LbfgsOutcome {
    /// The curvature pair it added, if the step gave one with `s.y > 0`.
    pair: Option<Pair>,
    /// How many of the oldest pairs it dropped.
    dropped: u32,
    /// Why the search fell back or stopped, for the trace.
    note: Option<String>,
    /// The preconditioner's diagonal, when this iteration recomputed it.
    diagonal: Option<Vec<f64>>,
}

impl Linear {
    /// A run over a grid of blocks `shapes` and row shards of `shard_rows` rows. L-BFGS
    /// alone uses one slot per grain (its result does not depend on the slots, so it takes
    /// all the parallelism there is); the others use the configured K.
    pub fn new(config: LinearConfig, shapes: &[BlockShape], shard_rows: Vec<usize>) -> Result<Self, EngineError> {
        let mut block_offsets = vec![0];
        for shape in shapes {
            block_offsets.push(block_offsets.last().expect("starts non-empty") + shape.features);
        }
        let features = *block_offsets.last().expect("starts non-empty");
        let rows: usize = shard_rows.iter().sum();
        if rows == 0 || rows > u32::MAX as usize {
            return Err(EngineError::InvalidParameter { name: "rows", value: rows as f64, why: "must be in 1..2^32" });
        }
        if features >= u32::MAX as usize / 2 {
            return Err(EngineError::InvalidParameter {
                name: "features",
                value: features as f64,
                why: "must be < 2^31",
            });
        }
        let grains = layout::Layout::grains_of(rows);
        let slots = if config.uses_slots() { config.slots() as usize } else { grains };
        if slots > grains {
            return Err(EngineError::InvalidParameter {
                name: "slots",
                value: slots as f64,
                why: "must be at most the number of grains (rows / 2048, rounded up): a slot owns whole grains",
            });
        }
        let mixing = match config.mode() {
            Mode::Ipm(mixing) => mixing,
            _ => Mixing::Uniform,
        };
        let kernel = LinearKernel {
            loss: config.loss(),
            l2: config.l2(),
            rate: config.rate(),
            seed: config.seed(),
            mixing,
            layout: layout::Layout::new(shard_rows, slots),
            block_offsets,
        };
        let state = LinearState { w: vec![0.0; features], ..LinearState::default() };
        Ok(Self { config, kernel, state, gradient_norm: 0.0 })
    }

    /// A run over an in-memory grid.
    pub fn for_grid(config: LinearConfig, grid: &crate::grid::InMemoryGrid) -> Result<Self, EngineError> {
        Self::new(config, &grid.shapes, grid.targets.iter().map(Vec::len).collect())
    }

    pub fn config(&self) -> &LinearConfig {
        &self.config
    }

    /// The objective and its gradient at `w`: one batch pass.
    pub fn evaluate<R: Runner<LinearKernel>>(&self, runner: &mut R, w: &[f64]) -> Result<Point, R::Error> {
        Ok(self.evaluate_with(runner, w, false)?.0)
    }

    /// [`Self::evaluate`], and with `curvature` the preconditioner's diagonal `H0` at `w`
    /// from the same pass: `1 / (sum_i l''_i x_ij^2 + 2 l2)` (the Hessian of `l2 |w|^2` is
    /// `2 l2`); 1 where that is not a positive number (a feature no row holds, unregularized).
    fn evaluate_with<R: Runner<LinearKernel>>(
        &self,
        runner: &mut R,
        w: &[f64],
        curvature: bool,
    ) -> Result<(Point, Option<Vec<f64>>), R::Error> {
        let features = self.kernel.features();
        let len = if curvature { 2 * features + 1 } else { features + 1 };
        let request = PhaseRequest {
            phase: LinearPhase::Evaluate { w: w.to_vec(), curvature },
            reduction: Reduction::AllReduce { len },
            mutates: false,
        };
        let sums = runner.run(request)?.sums.sums;
        let l2 = self.config.l2();
        let f = from_fixed128(sums[features]) + l2 * dot(w, w);
        let g = sums[..features].iter().zip(w).map(|(&s, &w)| from_fixed128(s) + 2.0 * l2 * w).collect();
        if !f.is_finite() {
            return Err(EngineError::Corrupt(format!("the objective at a trial point is {f}")).into());
        }
        let diagonal = curvature.then(|| {
            sums[features + 1..]
                .iter()
                .map(|&c| {
                    let h = from_fixed128(c) + 2.0 * l2;
                    if h > 0.0 && h.is_finite() { 1.0 / h } else { 1.0 }
                })
                .collect()
        });
        Ok((Point { f, g }, diagonal))
    }

    /// Whether the batch solver keeps the Hessian diagonal (never for IPM, which runs
    /// none): Newton always (its CG's preconditioner), L-BFGS when preconditioned.
    fn preconditioned(&self) -> bool {
        !matches!(self.config.mode(), Mode::Ipm(_))
            && (self.config.solver() == BatchSolver::Newton
                || matches!(self.config.precondition(), Precondition::Diagonal { .. } | Precondition::Scaled { .. }))
    }

    /// The Hessian of the objective at `w` times `v`: one batch pass for the data loss's,
    /// plus the regularizer's `2 l2 v`.
    fn hessian_vector<R: Runner<LinearKernel>>(
        &self,
        runner: &mut R,
        w: &[f64],
        v: &[f64],
    ) -> Result<Vec<f64>, R::Error> {
        let request = PhaseRequest {
            phase: LinearPhase::Hessian { w: w.to_vec(), v: v.to_vec() },
            reduction: Reduction::AllReduce { len: self.kernel.features() },
            mutates: false,
        };
        let sums = runner.run(request)?.sums.sums;
        let l2 = self.config.l2();
        Ok(sums.iter().zip(v).map(|(&s, &v)| from_fixed128(s) + 2.0 * l2 * v).collect())
    }

    /// One truncated Newton iteration from the state's point: CG on `H s = -g`
    /// preconditioned by the state's inverse Hessian diagonal, then a backtracking search
    /// along `s` whose every trial also sums the diagonal (the accepted one is the next
    /// preconditioner). A search that fails means the objective cannot be lowered at this
    /// precision, and the run stops.
    fn newton_step<R: Runner<LinearKernel>>(&mut self, runner: &mut R) -> Result<(Option<Vec<f64>>, String), R::Error> {
        let f0 = self.state.f.expect("evaluated before");
        let w = self.state.w.clone();
        if self.state.diagonal.len() != w.len() {
            return Err(EngineError::Corrupt("Newton's preconditioner does not fit the model".into()).into());
        }
        let max_steps = u32::try_from(w.len().max(5)).unwrap_or(u32::MAX);
        let solve =
            newton::pcg(&self.state.g, &self.state.diagonal, f0, max_steps, |v| self.hessian_vector(runner, &w, v))?;
        self.state.evaluations += u64::from(solve.steps);
        let slope = dot(&self.state.g, &solve.s);
        let mut evaluations = 0u64;
        let result = newton::backtrack(f0, slope, |t| {
            evaluations += 1;
            let trial: Vec<f64> = w.iter().zip(&solve.s).map(|(w, s)| w + t * s).collect();
            let (point, diagonal) = self.evaluate_with(runner, &trial, true)?;
            Ok::<_, R::Error>((point.f, (trial, point, diagonal)))
        })?;
        let cg = match solve.note {
            Some(why) => format!("{} CG steps ({why})", solve.steps),
            None => format!("{} CG steps", solve.steps),
        };
        self.state.evaluations += evaluations;
        let Some(accepted) = result else {
            self.state.stalled = true;
            return Ok((
                None,
                format!("Newton stopped after {cg}: no step along it lowers the objective at this precision"),
            ));
        };
        let (trial, point, diagonal) = accepted.at;
        self.state.w = trial;
        self.state.f = Some(point.f);
        self.state.g = point.g;
        Ok((diagonal, format!("Newton: {cg}, step {}", accepted.t)))
    }

    /// The two-loop recursion's `H0` for the next iteration: the configured kind, over the
    /// state's diagonal.
    pub fn initial(&self) -> Initial<'_> {
        match (self.config.precondition(), &self.state.diagonal[..]) {
            (_, []) | (Precondition::None, _) => Initial::Scalar,
            (Precondition::Diagonal { .. }, diagonal) => Initial::Diagonal(diagonal),
            (Precondition::Scaled { .. }, diagonal) => Initial::ScaledDiagonal(diagonal),
        }
    }

    /// L-BFGS iterations completed (the hybrid's first epoch is its online pass).
    fn lbfgs_iterations(&self) -> u32 {
        match self.config.mode() {
            Mode::Hybrid => self.state.epoch.saturating_sub(1),
            _ => self.state.epoch,
        }
    }

    /// Agarwal et al.'s warm start: every slot's AdaGrad pass, averaged per feature with
    /// the slots' accumulators as weights: the candidate the hybrid's first epoch weighs
    /// against the start.
    pub fn warm_start<R: Runner<LinearKernel>>(&self, runner: &mut R) -> Result<Vec<f64>, R::Error> {
        let features = self.kernel.features();
        let request = PhaseRequest {
            phase: LinearPhase::Adagrad,
            reduction: Reduction::AllReduce { len: 2 * features },
            mutates: false,
        };
        let sums = runner.run(request)?.sums.sums;
        let slots = self.kernel.layout().slots() as f64;
        Ok((0..features).map(|j| from_fixed128(sums[j]) / (slots + from_fixed128(sums[features + j]))).collect())
    }

    /// The hybrid's first epoch: the averaged AdaGrad model ([`Self::warm_start`]) if its
    /// objective is at most the objective at the start (`w = 0`), else the start itself —
    /// so the batch solver never begins from a worse point than it would without the warm
    /// start. Both objectives are exact sums, so the choice is the same for any worker
    /// count, tree shape and through a restart (the epoch's step records the point taken).
    /// With the preconditioner on, the diagonal is the chosen point's (a second pass at the
    /// start when the warm start is refused). Returns the note that says which was taken,
    /// and the diagonal.
    fn take_warm_start<R: Runner<LinearKernel>>(
        &mut self,
        runner: &mut R,
    ) -> Result<(String, Option<Vec<f64>>), R::Error> {
        let start = self.state.f.expect("evaluated before");
        let w = self.warm_start(runner)?;
        let (point, warm_diagonal) = self.evaluate_with(runner, &w, self.preconditioned())?;
        self.state.evaluations += 2;
        let slots = self.kernel.layout().slots();
        if point.f <= start {
            self.state.w = w;
            self.state.f = Some(point.f);
            self.state.g = point.g;
            let note = format!(
                "AdaGrad warm start over {slots} slots: objective {:.6e} (from {start:.6e} at the start): taken",
                point.f
            );
            return Ok((note, warm_diagonal));
        }
        let start_diagonal = if self.preconditioned() {
            self.state.evaluations += 1;
            self.evaluate_with(runner, &self.state.w.clone(), true)?.1
        } else {
            None
        };
        let note = format!(
            "AdaGrad warm start over {slots} slots: objective {:.6e}, worse than {start:.6e} at the start: not \
             taken, the batch solver starts from the start",
            point.f
        );
        Ok((note, start_diagonal))
    }

    /// One mixing round: every slot's online pass from `w`, their weighted changes added.
    fn mix<R: Runner<LinearKernel>>(&self, runner: &mut R) -> Result<Vec<f64>, R::Error> {
        let features = self.kernel.features();
        let request = PhaseRequest {
            phase: LinearPhase::Mix { epoch: self.state.epoch, w: self.state.w.clone() },
            reduction: Reduction::AllReduce { len: features },
            mutates: false,
        };
        let sums = runner.run(request)?.sums.sums;
        Ok(self.state.w.iter().zip(&sums).map(|(&w, &s)| w + from_fixed128(s)).collect())
    }

    /// One L-BFGS iteration from the state's point: the direction, a strong-Wolfe line
    /// search, the new pair. A failed search is retried once along the steepest descent
    /// with the memory cleared; a second failure means the objective cannot be lowered at
    /// this precision, and the run stops.
    fn lbfgs_step<R: Runner<LinearKernel>>(&mut self, runner: &mut R) -> Result<LbfgsOutcome, R::Error> {
        let f0 = self.state.f.expect("evaluated before");
        let g0 = self.state.g.clone();
        let mut pairs_used = self.state.pairs.len();
        let mut retried = false;
        // A refresh computes the diagonal in every trial: the search accepts the last one.
        let refresh = self.preconditioned() && self.config.precondition().refreshes_after(self.lbfgs_iterations() + 1);
        loop {
            let initial = self.initial();
            let d = direction(&g0, &self.state.pairs[..pairs_used], initial);
            let t0 = if pairs_used == 0 && initial == Initial::Scalar { (1.0 / norm(&g0)).min(1.0) } else { 1.0 };
            let w = self.state.w.clone();
            let mut evaluations = 0u64;
            let mut last_diagonal = None;
            let result = line_search(f0, &g0, &d, t0, |t| {
                evaluations += 1;
                let trial: Vec<f64> = w.iter().zip(&d).map(|(w, d)| w + t * d).collect();
                self.evaluate_with(runner, &trial, refresh).map(|(point, diagonal)| {
                    last_diagonal = diagonal;
                    point
                })
            })?;
            self.state.evaluations += evaluations;
            match result {
                Ok(accepted) => {
                    let trial: Vec<f64> = w.iter().zip(&d).map(|(w, d)| w + accepted.t * d).collect();
                    let s: Vec<f64> = trial.iter().zip(&w).map(|(a, b)| a - b).collect();
                    let y: Vec<f64> = accepted.point.g.iter().zip(&g0).map(|(a, b)| a - b).collect();
                    let mut dropped = (self.state.pairs.len() - pairs_used) as u32;
                    self.state.pairs.truncate(pairs_used);
                    let pair = (dot(&s, &y) > 0.0).then_some(Pair { s, y });
                    if let Some(pair) = &pair {
                        if self.state.pairs.len() == self.config.memory() {
                            self.state.pairs.remove(0);
                            dropped += 1;
                        }
                        self.state.pairs.push(pair.clone());
                    }
                    self.state.w = trial;
                    self.state.f = Some(accepted.point.f);
                    self.state.g = accepted.point.g;
                    if let Some(diagonal) = &last_diagonal {
                        self.state.diagonal = diagonal.clone();
                    }
                    let note = retried
                        .then(|| "line search failed along the quasi-Newton direction; memory cleared".to_string());
                    return Ok(LbfgsOutcome { pair, dropped, note, diagonal: last_diagonal });
                }
                Err(_) if pairs_used > 0 => {
                    pairs_used = 0;
                    retried = true;
                }
                Err(failure) => {
                    self.state.stalled = true;
                    let dropped = self.state.pairs.len() as u32;
                    self.state.pairs.clear();
                    let why = match failure {
                        SearchFailure::NotDescent => "the gradient gives no descent direction",
                        SearchFailure::Exhausted => "no step lowers the objective at this precision",
                    };
                    let note = Some(format!("L-BFGS stopped: {why}"));
                    return Ok(LbfgsOutcome { pair: None, dropped, note, diagonal: None });
                }
            }
        }
    }
}

impl Algorithm for Linear {
    type Kernel = LinearKernel;
    type State = LinearState;
    type Step = LinearStep;

    fn name(&self) -> &'static str {
        self.config.name()
    }

    fn gap_name(&self) -> &'static str {
        "gradient bound |g|^2/(4 l2)"
    }

    fn batch_solver(&self) -> Option<&'static str> {
        match (self.config.mode(), self.config.solver()) {
            (Mode::Ipm(_), _) | (_, BatchSolver::Lbfgs) => None,
            (Mode::Lbfgs | Mode::Hybrid, solver) => Some(solver.name()),
        }
    }

    fn kernel(&self) -> &LinearKernel {
        &self.kernel
    }

    fn mirror(&self) {}

    fn state(&self) -> &LinearState {
        &self.state
    }

    fn set_state(&mut self, state: LinearState) {
        self.state = state;
        self.gradient_norm = norm(&self.state.g);
    }

    fn replay(&mut self, step: LinearStep) -> Result<(), EngineError> {
        let state = &mut self.state;
        if step.epoch != state.epoch + 1 {
            return Err(EngineError::Corrupt(format!(
                "step to epoch {} replayed onto epoch {}",
                step.epoch, state.epoch
            )));
        }
        let features = self.kernel.features();
        let pair_ok = step.pair.as_ref().is_none_or(|p| p.s.len() == features && p.y.len() == features);
        if step.w.len() != features || step.g.len() != features || !pair_ok || step.dropped as usize > state.pairs.len()
        {
            return Err(EngineError::Corrupt("a step that does not fit the state".into()));
        }
        state.pairs.drain(..step.dropped as usize);
        state.pairs.extend(step.pair);
        state.epoch = step.epoch;
        state.w = step.w;
        state.f = Some(step.f);
        state.g = step.g;
        state.initial = step.initial;
        state.initial_gradient_norm = step.initial_gradient_norm;
        state.objectives.push(step.f);
        state.evaluations = step.evaluations;
        state.stalled = step.stalled;
        if let Some(diagonal) = step.diagonal {
            if diagonal.len() != features {
                return Err(EngineError::Corrupt("a preconditioner that does not fit the model".into()));
            }
            state.diagonal = diagonal;
        }
        self.gradient_norm = norm(&self.state.g);
        Ok(())
    }

    /// One epoch: (first) the objective at 0; then the warm start, an L-BFGS iteration or a
    /// mixing round.
    /// The state is all on the master: the same iteration whatever `recovery` says.
    fn next_iter<R: Runner<LinearKernel>>(
        &mut self,
        runner: &mut R,
        _recovery: Recovery,
    ) -> Result<Iteration<LinearStep>, R::Error> {
        let (mut pair, mut dropped, mut note, mut diagonal) = (None, 0, None, None);
        if self.state.f.is_none() {
            // L-BFGS alone starts here: its preconditioner is this point's.
            let curvature = self.preconditioned() && self.config.mode() == Mode::Lbfgs;
            let (start, start_diagonal) = self.evaluate_with(runner, &self.state.w.clone(), curvature)?;
            self.state.evaluations += 1;
            self.state.initial = Some(start.f);
            self.state.initial_gradient_norm = norm(&start.g);
            self.state.f = Some(start.f);
            self.state.g = start.g;
            if let Some(start_diagonal) = start_diagonal {
                self.state.diagonal = start_diagonal.clone();
                diagonal = Some(start_diagonal);
            }
        }
        match self.config.mode() {
            Mode::Hybrid if self.state.epoch == 0 => {
                let (warm_note, warm_diagonal) = self.take_warm_start(runner)?;
                diagonal = warm_diagonal;
                note = Some(warm_note);
            }
            Mode::Lbfgs | Mode::Hybrid if self.config.solver() == BatchSolver::Newton => {
                let (newton_diagonal, newton_note) = self.newton_step(runner)?;
                diagonal = newton_diagonal.or(diagonal);
                note = Some(newton_note);
            }
            Mode::Lbfgs | Mode::Hybrid => {
                let outcome = self.lbfgs_step(runner)?;
                (pair, dropped, note) = (outcome.pair, outcome.dropped, outcome.note);
                diagonal = outcome.diagonal.or(diagonal);
            }
            Mode::Ipm(_) => {
                let w = self.mix(runner)?;
                let point = self.evaluate(runner, &w)?;
                self.state.evaluations += 2;
                self.state.w = w;
                self.state.f = Some(point.f);
                self.state.g = point.g;
            }
        }
        let state = &mut self.state;
        if let Some(diagonal) = &diagonal {
            state.diagonal = diagonal.clone();
        }
        state.epoch += 1;
        let f = state.f.expect("evaluated above");
        state.objectives.push(f);
        let step = LinearStep {
            epoch: state.epoch,
            w: state.w.clone(),
            f,
            g: state.g.clone(),
            initial: state.initial,
            initial_gradient_norm: state.initial_gradient_norm,
            pair,
            dropped,
            evaluations: state.evaluations,
            stalled: state.stalled,
            diagonal,
        };
        self.gradient_norm = norm(&self.state.g);
        Ok(Iteration { epoch_done: true, step, note })
    }

    fn progress(&self) -> Progress {
        Progress {
            epoch: self.state.epoch,
            objective: self.state.objectives.last().copied(),
            gap: self.state.certificate(self.config.l2(), self.gradient_norm),
            initial_objective: self.state.initial,
            initial_gap: self.state.initial_certificate(self.config.l2()),
            ..Progress::default()
        }
    }

    fn stop_reason(&self) -> Option<StopReason> {
        self.state.stop_reason(&self.config, self.gradient_norm)
    }

    fn weights(&self) -> Vec<Vec<f64>> {
        self.kernel.block_offsets.windows(2).map(|b| self.state.w[b[0]..b[1]].to_vec()).collect()
    }

    fn max_epochs(&self) -> u32 {
        self.config.max_epochs()
    }
}
