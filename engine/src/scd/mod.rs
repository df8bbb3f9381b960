//! Scalable Coordinate Descent (Rendle et al., KDD 2016, Algorithm 2), as a step machine.
//!
//! [`Scd`] is the master's side, an [`Algorithm`]: it owns the parameters, picks blocks,
//! turns aggregated statistics into steps and decides convergence. The data-parallel side —
//! statistics, line-search sums, prediction updates, the loss — is [`kernel::ScdKernel`],
//! whose phases run on every row shard through a [`Runner`]: threads in one process, or
//! work items on workers. Both return exact fixed-point sums, so a model is the same bits
//! whichever runner produced it.

pub mod coarse;
pub mod fast_exp;
pub mod fast_log1p;
pub mod kernel;
pub mod kernels;
pub mod step;

use crate::algorithm::{Algorithm, Iteration, PhaseRequest, Progress, Recovery, Reduction, Runner, StopReason};
use crate::error::EngineError;
use crate::fixed::{ExactSums, PredictionRange};
use crate::grid::BlockShape;
use crate::loss::Loss;
use crate::objective::Regularization;
use kernel::{BlockWeights, ScdKernel, ScdParameters, ScdPhase};
use serde::{Deserialize, Serialize};

/// Epochs over which [`Scd::finished`] measures progress.
pub const STALL_EPOCHS: usize = 3;

/// SCD's phases as calls: each runs on every row shard and returns exact sums.
struct Phases<'r, R>(&'r mut R);

impl<R: Runner<ScdKernel>> Phases<'_, R> {
    fn run(&mut self, phase: ScdPhase, reduction: Reduction, mutates: bool) -> Result<ExactSums, R::Error> {
        Ok(self.0.run(PhaseRequest { phase, reduction, mutates })?.sums)
    }

    /// Exact sums of `l' x` and `l'' x^2` for every feature of `block`.
    fn statistics(
        &mut self,
        block: usize,
        next_block: Option<usize>,
        features: usize,
    ) -> Result<(ExactSums, ExactSums), R::Error> {
        let phase = ScdPhase::Statistics { block, next_block, features };
        let mut sums = self.run(phase, Reduction::RangeSum { len: 2 * features }, false)?.sums;
        let curvature = sums.split_off(features);
        Ok((ExactSums { sums }, ExactSums { sums: curvature }))
    }

    fn direction_sums(&mut self, block: usize, delta: &[f64], loss: Loss) -> Result<ExactSums, R::Error> {
        let len = kernels::DirectionSums::new(loss).0.len();
        self.run(ScdPhase::Direction { block, delta: delta.to_vec() }, Reduction::Sum { len }, false)
    }

    fn update_predictions(&mut self, block: usize, old: &BlockWeights, new: &BlockWeights) -> Result<(), R::Error> {
        let phase = ScdPhase::Update { block, old: old.clone(), new: new.clone(), shifts: Default::default() };
        self.run(phase, Reduction::None, true).map(drop)
    }

    fn loss_sum(&mut self) -> Result<i128, R::Error> {
        Ok(self.run(ScdPhase::Loss, Reduction::Sum { len: 1 }, false)?.sums[0])
    }

    fn snapshot(&mut self, keep: usize) -> Result<(), R::Error> {
        self.run(ScdPhase::Snapshot { keep }, Reduction::None, true).map(drop)
    }

    fn coarse_statistics(&mut self, blocks: bool, hessian_stride: usize, dims: usize) -> Result<ExactSums, R::Error> {
        let phase = ScdPhase::CoarseStatistics { blocks, hessian_stride };
        self.run(phase, Reduction::Sum { len: coarse::statistics_len(dims) }, false)
    }

    /// The line-search sums along the coarse direction, and the exact loss sum at the
    /// current predictions, from one pass.
    fn coarse_direction_sums(&mut self, blocks: bool, t: &[f64], loss: Loss) -> Result<(ExactSums, i128), R::Error> {
        let len = kernels::DirectionSums::new(loss).0.len() + 1;
        let mut sums = self.run(ScdPhase::CoarseDirection { blocks, t: t.to_vec() }, Reduction::Sum { len }, false)?;
        let loss_sum = sums.sums.pop().expect("len >= 1");
        Ok((sums, loss_sum))
    }
}

/// Validated settings of an SCD run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScdConfig {
    pub loss: Loss,
    pub reg: Regularization,
    pub max_epochs: u32,
    /// Stop when an epoch lowers the objective by less than this fraction of it.
    pub tolerance: f64,
    /// Seeds the block order; part of what determines the model.
    pub seed: u64,
    /// Which [`coarse`] correction ends each epoch.
    pub coarse: CoarseMode,
    /// The coarse correction's Hessian is taken on every this-many-th shard
    /// ([`coarse::hessian_stride`]).
    pub hessian_stride: usize,
    /// Most non-zeros of a row (bias included): bounds every prediction ([`PredictionRange`]).
    #[serde(default)]
    pub row_terms: u64,
}

/// The subspace of the epoch-ending [`coarse`] correction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CoarseMode {
    Off,
    /// The last epochs' moves only.
    History,
    /// Whole-block shifts and the last epochs' moves.
    BlocksAndHistory,
}

impl CoarseMode {
    /// Block shifts cost O(rows * K^2) per epoch. Measured on the shared datasets, they
    /// pay for themselves up to about a hundred blocks (protein's 78 dense blocks: 6 epochs
    /// instead of 261) and not beyond (w8a's 151 small blocks: 7x slower per epoch).
    pub fn for_grid(blocks: usize) -> CoarseMode {
        if blocks <= 128 { CoarseMode::BlocksAndHistory } else { CoarseMode::History }
    }
}

impl ScdConfig {
    pub fn new(loss: Loss, l2: f64, l1: f64, max_epochs: u32, tolerance: f64, seed: u64) -> Result<Self, EngineError> {
        if !loss.has_curvature() {
            return Err(EngineError::UnsupportedLoss {
                loss: loss.name(),
                algorithm: "scd",
                why: "SCD's Newton steps need a second derivative; train it with cocoa",
            });
        }
        if !(tolerance.is_finite() && tolerance >= 0.0) {
            return Err(EngineError::InvalidParameter {
                name: "tolerance",
                value: tolerance,
                why: "must be finite and >= 0",
            });
        }
        Ok(Self {
            loss,
            reg: Regularization::new(l2, l1)?,
            max_epochs,
            tolerance,
            seed,
            coarse: CoarseMode::BlocksAndHistory,
            hessian_stride: 1,
            row_terms: 1,
        })
    }

    /// Picks the coarse correction for a grid of `blocks` blocks and `rows` rows.
    pub fn fitted_to(mut self, blocks: usize, rows: u64) -> Self {
        self.coarse = CoarseMode::for_grid(blocks);
        let dims = if self.coarse == CoarseMode::BlocksAndHistory { blocks } else { 0 } + coarse::HISTORY;
        self.hessian_stride = coarse::hessian_stride(rows, dims);
        self
    }
}

/// What an iteration updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Update {
    /// One block's coordinates.
    Block(usize),
    /// The epoch's [`coarse`] correction: block shifts and recent epochs' moves.
    Coarse,
}

/// What one iteration did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationReport {
    pub epoch: u32,
    pub update: Update,
    /// Line-search step size (1 for pure blocks, 0 when nothing changed).
    pub step: f64,
    /// Largest |change| of a parameter in the block.
    pub max_change: f64,
}

/// The state of a run: everything a checkpoint must hold to resume bit for bit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScdState {
    /// Parameters, one vector per block.
    pub theta: Vec<BlockWeights>,
    /// Epochs completed.
    pub epoch: u32,
    /// Objective after each completed epoch; element 0 is the objective at theta = 0.
    pub objectives: Vec<f64>,
    /// Parameters at the end of the last [`coarse::HISTORY`] epochs, oldest first (the
    /// blocks an epoch did not move are the same vectors as the next entry's).
    pub history: Vec<Vec<BlockWeights>>,
    /// Block iterations of the current epoch already done: a checkpoint taken mid-epoch
    /// resumes at the next block of the same order.
    pub position: usize,
    /// The last coarse correction that had a subspace to search; `None` before the first.
    pub last_coarse: Option<CoarseRun>,
}

/// When a coarse correction ran and what it gained: the next one runs only where it pays
/// ([`Scd::coarse_pays`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CoarseRun {
    /// The epoch it ended.
    pub epoch: u32,
    /// How much it lowered the objective: 0 if its step was undone or not taken.
    pub gain: f64,
}

/// What one SCD iteration changed, for an incremental checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ScdStep {
    /// A block iteration: the block's new parameters and where the epoch is.
    Block { epoch: u32, position: usize, objectives: Vec<f64>, block: usize, theta: BlockWeights },
    /// An epoch's end (the coarse correction moves every block): the whole state.
    Epoch(ScdState),
}

pub struct Scd {
    pub config: ScdConfig,
    pub shapes: Vec<BlockShape>,
    pub state: ScdState,
    kernel: ScdKernel,
    /// The objective at the current parameters when the coarse correction has just measured
    /// it (after its step; or before a step it undid or did not take, from its line-search
    /// pass), so the epoch's end need not pass over the rows again for the same number. Not
    /// state: a resumed run recomputes it.
    measured_objective: Option<f64>,
}

impl Scd {
    /// SCD over a grid of `shards` row shards with blocks of `shapes`.
    pub fn new(config: ScdConfig, shapes: Vec<BlockShape>, shards: usize) -> Self {
        let theta = shapes.iter().map(|s| BlockWeights::from(vec![0.0; s.features])).collect();
        Self {
            kernel: ScdKernel::new(config.loss, shards),
            config,
            shapes,
            state: ScdState {
                theta,
                epoch: 0,
                objectives: Vec::new(),
                history: Vec::new(),
                position: 0,
                last_coarse: None,
            },
            measured_objective: None,
        }
    }

    /// The regularized objective at the current parameters.
    pub fn objective<R: Runner<ScdKernel>>(&self, runner: &mut R) -> Result<f64, R::Error> {
        self.objective_with(&mut Phases(runner))
    }

    fn objective_with<R: Runner<ScdKernel>>(&self, exec: &mut Phases<R>) -> Result<f64, R::Error> {
        Ok(self.objective_from(exec.loss_sum()?))
    }

    /// The objective at the current parameters given the exact loss sum at their predictions.
    fn objective_from(&self, loss_sum: i128) -> f64 {
        crate::fixed::from_fixed128(loss_sum) + self.config.reg.total(self.state.theta.iter().map(|b| b.as_slice()))
    }

    /// Block order of an epoch: a fresh pseudo-random permutation per epoch, seeded by
    /// (seed, epoch). Random permutations avoid the worst cases of a fixed cyclic order
    /// (Wright 2015, sec. 3) while every block is still visited once per epoch, and the
    /// seed makes the order — and so the model — reproducible.
    pub fn epoch_order(&self, epoch: u32) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.shapes.len()).collect();
        let seed = self.config.seed ^ (epoch as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        crate::rng::shuffle(&mut order, seed);
        order
    }

    /// One SCD iteration on `block`: statistics, step, line search for impure blocks,
    /// prediction update.
    /// One block iteration outside the epoch's bookkeeping (the sweep benchmark).
    pub fn iterate_block<R: Runner<ScdKernel>>(
        &mut self,
        block: usize,
        runner: &mut R,
    ) -> Result<IterationReport, R::Error> {
        self.iterate(block, None, &mut Phases(runner))
    }

    fn iterate<R: Runner<ScdKernel>>(
        &mut self,
        block: usize,
        next_block: Option<usize>,
        exec: &mut Phases<R>,
    ) -> Result<IterationReport, R::Error> {
        let (loss, reg) = (self.config.loss, self.config.reg);
        let shape = &self.shapes[block];
        let (g, h) = exec.statistics(block, next_block, shape.features)?;
        let (g, h) = (g.values(), h.values());
        let theta = &self.state.theta[block];
        let delta: Vec<f64> = (0..shape.features)
            .map(|j| match (loss, shape.pure) {
                (Loss::Logistic, true) => step::bounded_logistic_step(g[j], h[j], shape.max_abs[j], theta[j], &reg),
                _ => step::newton_step(g[j], h[j], theta[j], &reg),
            })
            .collect();
        let mut report =
            IterationReport { epoch: self.state.epoch, update: Update::Block(block), step: 0.0, max_change: 0.0 };
        if delta.iter().all(|&d| d == 0.0) {
            return Ok(report);
        }
        // Pure blocks: the features' updates are independent (Lemma 1), take them whole.
        let step = if shape.pure {
            1.0
        } else {
            let sums = exec.direction_sums(block, &delta, loss)?.values();
            match loss {
                Loss::Squared => step::squared_line_search(sums[0], sums[1], step::pairs(theta, &delta), &reg),
                Loss::Logistic => step::pick_logistic_step(&sums, step::pairs(theta, &delta), &reg),
                Loss::Hinge => unreachable!("ScdConfig::new refuses hinge"),
            }
        };
        if step == 0.0 {
            return Ok(report);
        }
        report.step = step;
        report.max_change = self.apply(block, step, &delta, exec)?;
        Ok(report)
    }

    /// Sets block `block` to `theta + step * delta` and moves the predictions with it;
    /// returns the largest |change|.
    fn apply<R: Runner<ScdKernel>>(
        &mut self,
        block: usize,
        step: f64,
        delta: &[f64],
        exec: &mut Phases<R>,
    ) -> Result<f64, R::Error> {
        let theta = &self.state.theta[block];
        let new = BlockWeights::from(theta.iter().zip(delta).map(|(&t, &d)| t + step * d).collect::<Vec<f64>>());
        PredictionRange::for_terms(self.config.row_terms).check(&new, &self.shapes[block].max_abs)?;
        exec.update_predictions(block, theta, &new)?;
        let change = theta.iter().zip(new.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        self.state.theta[block] = new;
        Ok(change)
    }

    /// The epoch's [`coarse`] correction: a line-searched Newton step in the subspace of
    /// whole-block shifts and recent epochs' moves.
    fn coarse_correction<R: Runner<ScdKernel>>(&mut self, exec: &mut Phases<R>) -> Result<IterationReport, R::Error> {
        let (loss, reg) = (self.config.loss, self.config.reg);
        let mut report =
            IterationReport { epoch: self.state.epoch, update: Update::Coarse, step: 0.0, max_change: 0.0 };
        // With L1, shifting a whole block would make its zero weights non-zero; the history
        // moves are zero wherever the weights stayed zero, so they keep sparsity.
        let blocks = self.config.coarse == CoarseMode::BlocksAndHistory && reg.l1 == 0.0;
        if !self.coarse_enabled() || (!blocks && self.state.history.is_empty()) || !self.coarse_pays(exec)? {
            return Ok(report);
        }
        self.state.last_coarse = Some(CoarseRun { epoch: self.state.epoch, gain: 0.0 });
        let k = if blocks { self.shapes.len() } else { 0 };
        // Directions in parameter space, block by block: e_k, then the moves theta -
        // theta_then. No vector of the feature count is made for them (five such vectors
        // and four moves cost 72 bytes per feature at this peak): every sum below walks
        // theta and history entries feature by feature in the order of the flat vectors it
        // replaces, so each is the same sum of the same terms, the same bits. `theta` and
        // `history` share the state's vectors (the undo below needs the old blocks).
        let theta = self.state.theta.clone();
        let history = self.state.history.clone();
        let sizes: Vec<usize> = theta.iter().map(|b| b.len()).collect();
        let dims = k + history.len();
        // Regularizer's gradient 2 l2 V'theta (+ l1 V'sign(theta), L1 being linear where
        // the weights are non-zero) and Gram matrix V'V, packed upper triangle.
        let sign = |t: f64| if t == 0.0 { 0.0 } else { t.signum() };
        let mut gradient: Vec<f64> = theta
            .iter()
            .take(k)
            .map(|b| 2.0 * reg.l2 * b.iter().sum::<f64>())
            .chain(history.iter().map(|then| {
                let to_theta: f64 = flat_pairs(&theta, then).map(|(x, y)| (x - y) * x).sum();
                let to_signs: f64 = flat_pairs(&theta, then).map(|(x, y)| (x - y) * sign(x)).sum();
                2.0 * reg.l2 * to_theta + reg.l1 * to_signs
            }))
            .collect();
        let mut gram = vec![0.0; dims * (dims + 1) / 2];
        let move_sums: Vec<Vec<f64>> = history
            .iter()
            .map(|then| theta.iter().zip(then).map(|(a, b)| a.iter().zip(b.iter()).map(|(x, y)| x - y).sum()).collect())
            .collect();
        let mut at = 0;
        for a in 0..dims {
            for b in a..dims {
                gram[at] = match (a < k, b < k) {
                    (true, true) => {
                        if a == b {
                            sizes[a] as f64
                        } else {
                            0.0
                        }
                    }
                    (true, false) => move_sums[b - k][a],
                    _ => move_dot(&theta, &history[a - k], &history[b - k]),
                } * 2.0
                    * reg.l2;
                at += 1;
            }
        }
        let sums = exec.coarse_statistics(blocks, self.config.hessian_stride, dims)?.values();
        let (rows, sampled) = (sums[sums.len() - 2], sums[sums.len() - 1]);
        gradient.iter_mut().zip(&sums[..dims]).for_each(|(g, s)| *g += s);
        gram.iter_mut().zip(&sums[dims..]).for_each(|(h, s)| *h += s * rows / sampled.max(1.0));
        let Some(t) = coarse::newton_direction(&gradient, &gram) else { return Ok(report) };
        let direction = Direction { theta: &theta, history: &history, shifts: &t[..k], moves: &t[k..] };
        let (sums, loss_sum) = exec.coarse_direction_sums(blocks, &t, loss)?;
        let sums = sums.values();
        // The objective before the step, from the same pass: the same number an objective
        // pass would give (the same row sums, rounded the same way), one pass fewer.
        let before = self.objective_from(loss_sum);
        self.measured_objective = Some(before);
        let step = match loss {
            Loss::Squared => step::squared_line_search(sums[0], sums[1], || direction.pairs(), &reg),
            Loss::Logistic => step::pick_logistic_step(&sums, || direction.pairs(), &reg),
            Loss::Hinge => unreachable!("ScdConfig::new refuses hinge"),
        };
        if step == 0.0 {
            return Ok(report);
        }
        // The history directions' row values are differences of fixed-point predictions,
        // exact to 2^-32 per term; a nearly singular subspace can amplify that into a step
        // the line search misjudges. So the step is measured, and undone if it cost.
        let mut changed = Vec::new();
        for block in 0..sizes.len() {
            let block_delta = direction.block(block);
            if block_delta.iter().any(|&d| d != 0.0) {
                report.max_change = report.max_change.max(self.apply(block, step, &block_delta, exec)?);
                changed.push(block);
            }
        }
        let saved = theta;
        let after = self.objective_with(exec)?;
        if after > before {
            for block in changed {
                exec.update_predictions(block, &self.state.theta[block], &saved[block])?;
            }
            // The integer predictions are back exactly (the updates telescope), and so is
            // the objective.
            self.state.theta = saved;
            self.measured_objective = Some(before);
            report.max_change = 0.0;
            return Ok(report);
        }
        self.measured_objective = Some(after);
        self.state.last_coarse = Some(CoarseRun { epoch: self.state.epoch, gain: before - after });
        report.step = step;
        Ok(report)
    }

    /// Whether the epoch ends with the coarse correction. The correction costs as much as the
    /// sweep (criteo) or twice it (a9a), and while the sweep still takes big steps it adds
    /// little. So once one has measured what it gains, the next runs only when the epoch's
    /// sweep gained no more (measured by a loss pass, which is the epoch's objective when the
    /// correction is skipped), or after [`coarse::HISTORY`] epochs without one, so that a
    /// correction that once gained nothing is tried again. The decision depends on exact
    /// objectives only, so every worker count makes the same one.
    fn coarse_pays<R: Runner<ScdKernel>>(&mut self, exec: &mut Phases<R>) -> Result<bool, R::Error> {
        let (Some(last), Some(&start)) = (self.state.last_coarse, self.state.objectives.last()) else {
            return Ok(true);
        };
        if self.state.epoch.saturating_sub(last.epoch) > coarse::HISTORY as u32 {
            return Ok(true);
        }
        let swept = self.objective_with(exec)?;
        self.measured_objective = Some(swept);
        Ok(start - swept <= last.gain)
    }

    /// The coarse correction is off beyond [`coarse::MAX_COARSE_BLOCKS`] blocks.
    fn coarse_enabled(&self) -> bool {
        self.config.coarse != CoarseMode::Off && self.shapes.len() <= coarse::MAX_COARSE_BLOCKS
    }

    /// Remembers the current parameters (and the executor its predictions) for the
    /// subspace of later coarse corrections.
    fn remember<R: Runner<ScdKernel>>(&mut self, exec: &mut Phases<R>) -> Result<(), R::Error> {
        if !self.coarse_enabled() {
            return Ok(());
        }
        exec.snapshot(coarse::HISTORY)?;
        self.state.history.push(self.state.theta.clone());
        if self.state.history.len() > coarse::HISTORY {
            self.state.history.remove(0);
        }
        Ok(())
    }

    /// One iteration: the next block of the epoch's order (from [`ScdState::position`]), or,
    /// after the last block, the coarse correction and the epoch's end.
    fn step<R: Runner<ScdKernel>>(&mut self, exec: &mut Phases<R>) -> Result<(IterationReport, ScdStep), R::Error> {
        if self.state.objectives.is_empty() {
            let initial = self.objective_with(exec)?;
            self.state.objectives.push(initial);
        }
        let order = self.epoch_order(self.state.epoch);
        if let Some(&block) = order.get(self.state.position) {
            let report = self.iterate(block, order.get(self.state.position + 1).copied(), exec)?;
            self.state.position += 1;
            let step = ScdStep::Block {
                epoch: self.state.epoch,
                position: self.state.position,
                objectives: self.state.objectives.clone(),
                block,
                theta: self.state.theta[block].clone(),
            };
            return Ok((report, step));
        }
        self.measured_objective = None;
        let report = self.coarse_correction(exec)?;
        self.remember(exec)?;
        self.state.epoch += 1;
        self.state.position = 0;
        // remember() moves no prediction, so a measured objective is still the objective.
        let objective = match self.measured_objective.take() {
            Some(measured) => measured,
            None => self.objective_with(exec)?,
        };
        self.state.objectives.push(objective);
        Ok((report, ScdStep::Epoch(self.state.clone())))
    }

    /// One whole epoch (tests and benchmarks); `on_iteration` sees every iteration.
    pub fn run_epoch<R: Runner<ScdKernel>>(
        &mut self,
        runner: &mut R,
        mut on_iteration: impl FnMut(&Self, &IterationReport, &mut R) -> Result<(), R::Error>,
    ) -> Result<f64, R::Error> {
        loop {
            let (report, step) = self.step(&mut Phases(runner))?;
            on_iteration(self, &report, runner)?;
            if matches!(step, ScdStep::Epoch(_)) {
                return Ok(*self.state.objectives.last().expect("an epoch ended"));
            }
        }
    }

    /// Whether the objective fell by less than the tolerance (relative) over the last
    /// [`STALL_EPOCHS`] epochs, or epochs ran out. One slow epoch is not enough: with the
    /// coarse correction, progress comes in steps, and a single flat epoch often precedes
    /// a large drop.
    pub fn finished(&self) -> bool {
        self.stop_reason().is_some()
    }
}

impl Algorithm for Scd {
    type Kernel = ScdKernel;
    type State = ScdState;
    type Step = ScdStep;

    fn name(&self) -> &'static str {
        "scd"
    }

    fn kernel(&self) -> &ScdKernel {
        &self.kernel
    }

    fn mirror(&self) -> ScdParameters {
        ScdParameters { theta: self.state.theta.clone(), snapshots: self.state.history.clone() }
    }

    fn state(&self) -> &ScdState {
        &self.state
    }

    fn set_state(&mut self, state: ScdState) {
        self.state = state;
    }

    fn replay(&mut self, step: ScdStep) -> Result<(), EngineError> {
        match step {
            ScdStep::Block { epoch, position, objectives, block, theta } => {
                let expected = self.state.theta.get(block).map(|b| b.len());
                if epoch != self.state.epoch || position != self.state.position + 1 || expected != Some(theta.len()) {
                    return Err(EngineError::Corrupt(format!(
                        "checkpoint step {epoch}/{position} does not follow {}/{}",
                        self.state.epoch, self.state.position
                    )));
                }
                self.state.theta[block] = theta;
                self.state.position = position;
                self.state.objectives = objectives;
            }
            ScdStep::Epoch(state) => self.state = state,
        }
        Ok(())
    }

    /// The state is all on the master: the same iteration whatever `recovery` says.
    fn next_iter<R: Runner<ScdKernel>>(
        &mut self,
        runner: &mut R,
        _recovery: Recovery,
    ) -> Result<Iteration<ScdStep>, R::Error> {
        let (_, step) = self.step(&mut Phases(runner))?;
        Ok(Iteration { epoch_done: matches!(step, ScdStep::Epoch(_)), step, note: None })
    }

    fn progress(&self) -> Progress {
        let objective = if self.state.epoch > 0 { self.state.objectives.last().copied() } else { None };
        Progress {
            epoch: self.state.epoch,
            objective,
            initial_objective: self.state.objectives.first().copied(),
            ..Progress::default()
        }
    }

    fn stop_reason(&self) -> Option<StopReason> {
        if self.state.epoch >= self.config.max_epochs {
            return Some(StopReason::MaxEpochs);
        }
        let objectives = &self.state.objectives;
        let stalled = objectives.len() > STALL_EPOCHS && {
            let (before, after) = (objectives[objectives.len() - 1 - STALL_EPOCHS], objectives[objectives.len() - 1]);
            before - after <= self.config.tolerance * after.abs()
        };
        stalled.then_some(StopReason::Converged)
    }

    fn weights(&self) -> Vec<Vec<f64>> {
        self.state.theta.iter().map(|b| b.to_vec()).collect()
    }

    fn max_epochs(&self) -> u32 {
        self.config.max_epochs
    }
}

/// `(theta_j, then_j)` of every feature, block by block: the order of the flat vectors the
/// coarse correction's sums were first written over.
fn flat_pairs<'a>(theta: &'a [BlockWeights], then: &'a [BlockWeights]) -> impl Iterator<Item = (f64, f64)> + 'a {
    theta.iter().zip(then).flat_map(|(a, b)| a.iter().copied().zip(b.iter().copied()))
}

/// The dot product of two moves, `(theta - p) . (theta - q)`, in the flat order.
fn move_dot(theta: &[BlockWeights], p: &[BlockWeights], q: &[BlockWeights]) -> f64 {
    theta
        .iter()
        .zip(p)
        .zip(q)
        .flat_map(|((t, p), q)| t.iter().zip(p.iter()).zip(q.iter()))
        .map(|((x, y), z)| (x - y) * (x - z))
        .sum()
}

/// The coarse step's direction `sum_b shifts_b e_b + sum_i moves_i (theta - history_i)`,
/// feature by feature: each value is built as the flat vector built it (the block's
/// shift, or 0, then each move's term in order), so it has the same bits, and is computed
/// again where it is needed instead of being held.
struct Direction<'a> {
    theta: &'a [BlockWeights],
    history: &'a [Vec<BlockWeights>],
    /// One per block, or none when the block shifts are left out.
    shifts: &'a [f64],
    moves: &'a [f64],
}

impl Direction<'_> {
    fn at(&self, block: usize, j: usize) -> f64 {
        let x = self.theta[block][j];
        let mut d = self.shifts.get(block).copied().unwrap_or(0.0);
        for (then, &s) in self.history.iter().zip(self.moves) {
            d += s * (x - then[block][j]);
        }
        d
    }

    fn block(&self, block: usize) -> Vec<f64> {
        (0..self.theta[block].len()).map(|j| self.at(block, j)).collect()
    }

    /// `(theta_j, direction_j)` of every feature in the flat order.
    fn pairs(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        (0..self.theta.len())
            .flat_map(move |b| (0..self.theta[b].len()).map(move |j| (self.theta[b][j], self.at(b, j))))
    }
}
