//! CoCoA+ with an SDCA local solver (Ma, Smith, Jaggi, Jordan, Richtárik, Takáč, *Adding
//! vs. Averaging in Distributed Primal-Dual Optimization*, ICML 2015; Chicle's slots and
//! partitions, `../shared/papers/elastic-cocoa-chicle.txt`), on the algorithm interface.
//!
//! It minimizes `P(w) = sum_i loss(y_i, x_i.w) + l2 |w|^2` (the bias is an always-on feature
//! of the grid, regularized like the others) through its dual, with `lambda = 2 l2`:
//! `D(alpha) = -sum_i loss*(-alpha_i) - |X'alpha|^2 / (2 lambda)`, `w(alpha) = X'alpha / lambda`.
//!
//! One epoch: every slot k runs H SDCA passes over its rows on CoCoA+'s local subproblem
//! with `sigma'_j` = the number of slots holding feature j (the default, as safe as CoCoA+'s
//! scalar `sigma' = K`, which [`config::Aggregation::Scalar`] keeps), from the shared vector
//! `v = X'alpha` ([`CocoaPhase::LocalSolve`]); the master adds the slots' changes `X_k' delta_alpha_k` into `v` (adding, not averaging); then
//! every slot sums its losses at `w = v / lambda` and its conjugates
//! ([`CocoaPhase::Evaluate`]), and the master forms the primal, the dual and their gap.
//! `P(w) - P* <= P(w) - D(alpha)`, so the gap certifies how far the model is from the
//! optimum; the run stops when it is small relative to the primal. The gap pass is a full
//! data pass, so it runs only after epochs the gap schedule picks ([`schedule`]: when a
//! free statistic of the local solves predicts the tolerance met), and the run stops only
//! after an epoch whose computed gap met the tolerance. Logistic steps are solved to an
//! inner tolerance that follows the previous epoch's progress ([`step_tolerance`], as
//! LIBLINEAR's dual solver does), never lowering the dual.
//!
//! Elastic ([`elastic`], Chicle): after an epoch the master may scale in from K to K/m slots;
//! each remaining slot takes the partitions and dual variables of m old slots and solves them
//! as one local problem (`sigma' = K/m`, or per feature the counts of the K/m slots, from
//! then on). The decision is part of the epoch's step, so a checkpoint replays it, and the runner rebuilds the merged slots from the
//! committed dual variables ([`Runner::reconfigure`]).
//!
//! Accelerated ([`catalyst`], `--accelerate`): the epochs solve a sequence of proximal
//! subproblems `P(w) + kappa/2 |w - y_k|^2` (Catalyst's outer loop, on the master), which
//! K > 1 slots solve much faster than the original problem; the gap reported stays the
//! original problem's.
//!
//! One slot ([`solo`]): with K = 1 (not accelerated) the sum of the slots' changes has one
//! term, so the lone slot keeps its model `w` between epochs and reports only what changed;
//! the master's state holds `w` instead of `v`.
//!
//! Determinism: a slot's coordinate order is seeded by (seed, epoch, pass, partition), its
//! local arithmetic is sequential, and everything that crosses slots is an exact
//! fixed-point sum (a lone slot's model crosses bit for bit). A run's bytes depend on the
//! data, the parameters and K — not on which process ran which slot, in what order, or how
//! often a slot was redone.

pub mod catalyst;
#[cfg(test)]
mod catalyst_tests;
pub mod config;
pub mod elastic;
mod gather;
pub mod kernel;
pub mod layout;
#[cfg(test)]
mod merge_tests;
#[cfg(test)]
mod per_feature_tests;
pub mod rows;
pub mod schedule;
#[cfg(test)]
mod schedule_tests;
#[cfg(test)]
mod sigma_cap_tests;
pub mod solo;
#[cfg(test)]
mod solo_tests;
pub mod solver;
pub mod state;
pub mod step_tolerance;
#[cfg(test)]
mod tests;

pub use catalyst::{AccelerateConfig, CatalystState, CatalystStep};
pub use config::{Aggregation, CocoaConfig};
pub use elastic::{Clock, ElasticConfig, ScaleIn};
pub use kernel::{CocoaKernel, CocoaMirror, CocoaPhase, SlotBase, SlotReport, SlotState};
pub use schedule::GapSchedule;
pub use state::{CocoaState, CocoaStep, EpochRecord};

use crate::algorithm::{
    Algorithm, Iteration, Kernel, PhaseRequest, Progress, Recovery, Reduction, Runner, ScalingDecision, StopReason,
};
use crate::error::EngineError;
use crate::fixed::from_fixed128;
use crate::grid::BlockShape;
use layout::Layout;

/// Seconds on some clock: the engine reads no clocks itself, so the caller that wants the
/// elastic policy on wall time passes one in ([`Cocoa::with_clock`]).
pub type WallClock = Box<dyn Fn() -> f64 + Send>;

pub struct Cocoa {
    config: CocoaConfig,
    /// Always the kernel of `state.slots`.
    kernel: CocoaKernel,
    state: CocoaState,
    clock: Option<WallClock>,
    /// The outer loop's constants when accelerated (its state is `state.catalyst`).
    catalyst: Option<catalyst::Catalyst>,
    /// Per-feature aggregation: the slot count and how many of its slots hold each feature.
    /// Counted by the slots when the slot count is new (the first epoch, a scale-in, a
    /// restarted master), never checkpointed: it is a function of the data and the layout.
    spread: Option<(u32, Vec<u32>)>,
    /// The lone slot holds duals and model entries the state lacks: epochs ran with
    /// [`Recovery::Deferred`] since it last reported ([`solo`]). Never checkpointed: a run
    /// that checkpoints runs every epoch `Needed`.
    behind: bool,
}

impl Cocoa {
    /// A run over a grid of blocks `shapes` and row shards of `shard_rows` rows.
    pub fn new(config: CocoaConfig, shapes: &[BlockShape], shard_rows: Vec<usize>) -> Result<Self, EngineError> {
        let mut block_offsets = vec![0];
        for shape in shapes {
            block_offsets.push(block_offsets.last().expect("starts non-empty") + shape.features);
        }
        let features = *block_offsets.last().expect("starts non-empty");
        let layout = Layout::new(shard_rows, config.partitions() as usize, config.slots() as usize);
        let rows = layout.rows();
        if rows == 0 || rows > u32::MAX as usize {
            return Err(EngineError::InvalidParameter { name: "rows", value: rows as f64, why: "must be in 1..2^32" });
        }
        if features > u32::MAX as usize {
            return Err(EngineError::InvalidParameter {
                name: "features",
                value: features as f64,
                why: "must be < 2^32",
            });
        }
        let catalyst = config
            .accelerate()
            .map(|a| catalyst::Catalyst::new(*a, config.loss(), rows, config.slots(), config.lambda()));
        let kernel = CocoaKernel {
            loss: config.loss(),
            // The slots solve Catalyst's subproblems, regularized by lambda + kappa.
            lambda: catalyst.map_or(config.lambda(), |c| c.inner_lambda()),
            sigma: config.sigma(config.slots()),
            local_passes: config.local_passes(),
            seed: config.seed(),
            layout,
            block_offsets,
        };
        let state = CocoaState {
            epoch: 0,
            v: vec![0; features],
            w: Vec::new(),
            alpha: vec![0.0; rows],
            history: Vec::new(),
            slots: config.slots(),
            scale_ins: Vec::new(),
            catalyst: catalyst.map(|_| catalyst::CatalystState::start(features)),
            progress: [0.0; 2],
        };
        let mut cocoa = Self { config, kernel, state, clock: None, catalyst, spread: None, behind: false };
        cocoa.sync_kernel();
        Ok(cocoa)
    }

    /// Measures each epoch with `clock` (seconds): the record's `seconds`, and the elastic
    /// policy's time on [`Clock::Wall`].
    pub fn with_clock(mut self, clock: WallClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The kernel of K slots: the same partitions, scalar `sigma'` for K (per-feature
    /// weights travel with each phase, [`Self::spread`]).
    fn kernel_for(&self, slots: u32) -> CocoaKernel {
        CocoaKernel {
            sigma: self.config.sigma(slots),
            layout: self.kernel.layout.with_slots(slots as usize),
            ..self.kernel.clone()
        }
    }

    /// Brings the kernel to the state's slot count (after a restore or a replayed scale-in),
    /// and the state to a lone slot's form when the run has one slot ([`solo`]): `w = v /
    /// lambda`, the model the exchange would start the next epoch from, and `v` dropped.
    fn sync_kernel(&mut self) {
        if self.kernel.units() != self.state.slots as usize {
            self.kernel = self.kernel_for(self.state.slots);
        }
        if self.solo() && !self.state.v.is_empty() {
            let lambda = self.config.lambda();
            self.state.w = self.state.v.iter().map(|&v| from_fixed128(v) / lambda).collect();
            self.state.v = Vec::new();
        }
    }

    /// The run has one slot and is not accelerated: the lone slot holds the model ([`solo`]).
    fn solo(&self) -> bool {
        self.state.slots == 1 && self.catalyst.is_none()
    }

    /// The epochs since the current slot count began, as the elastic policy sees them: the
    /// first is the epoch the last scale-in followed (or the first epoch), the level the
    /// rates start from.
    fn observations(&self) -> Vec<elastic::Observation> {
        let start = self.state.scale_ins.last().map_or(0, |s| s.epoch.saturating_sub(1) as usize);
        self.state.history[start.min(self.state.history.len())..]
            .iter()
            .map(|r| elastic::Observation { duration: r.seconds.unwrap_or(f64::NAN), gap: r.gap.relative })
            .collect()
    }

    /// Scales in to `to` slots after the epoch just run: the state made whole
    /// ([`Algorithm::settle`]), `to` slots, the scale-in recorded, the kernel synced and the
    /// runner reconfigured (each merged slot rebuilt from its old slots' rows). The elastic
    /// policy calls it from [`Algorithm::next_iter`]; a benchmark forces a schedule with it
    /// (such a run's steps do not replay: a replayed scale-in must be on the policy's
    /// schedule). The record holds the rates the policy reads (its window and clock; without a
    /// policy, Chicle's window on the run's clock, epochs when it has none), NaN until there
    /// are enough epochs. `to` must be fewer slots that split the partitions evenly.
    pub fn scale_in<R: Runner<CocoaKernel>>(&mut self, runner: &mut R, to: u32) -> Result<ScaleIn, R::Error> {
        let from = self.state.slots;
        if to == 0 || to >= from || !self.config.partitions().is_multiple_of(to) {
            let why = "must be fewer than the slots and divide the partitions";
            return Err(EngineError::InvalidParameter { name: "scale-in slots", value: to as f64, why }.into());
        }
        let (window, clock) = match (self.config.elastic(), &self.clock) {
            (Some(e), _) => (e.window(), e.clock()),
            (None, Some(_)) => (elastic::CHICLE_WINDOW, Clock::Wall),
            (None, None) => (elastic::CHICLE_WINDOW, Clock::Epochs),
        };
        let (short_rate, long_rate) =
            elastic::rates(&self.observations(), window as usize, clock).unwrap_or((f64::NAN, f64::NAN));
        let scale_in = ScaleIn { epoch: self.state.epoch, from, to, short_rate, long_rate, clock };
        // The merged slots are rebuilt from the state: it must be whole.
        self.settle(runner)?;
        self.state.slots = to;
        self.state.scale_ins.push(scale_in);
        self.sync_kernel();
        runner.reconfigure(self.kernel.clone(), self.mirror())?;
        Ok(scale_in)
    }

    /// A run over an in-memory grid.
    pub fn for_grid(config: CocoaConfig, grid: &crate::grid::InMemoryGrid) -> Result<Self, EngineError> {
        Self::new(config, &grid.shapes, grid.targets.iter().map(Vec::len).collect())
    }

    pub fn config(&self) -> &CocoaConfig {
        &self.config
    }

    /// The model `w = v / lambda`, all features in one vector; accelerated, the model of the
    /// smallest primal seen (the one the reported gap certifies). With one slot, the state's
    /// `w`: the slot's after a `Needed` epoch or [`Algorithm::settle`].
    pub fn flat_weights(&self) -> Vec<f64> {
        if let Some(state) = &self.state.catalyst {
            return state.best_w.clone();
        }
        if self.solo() {
            return self.state.w.clone();
        }
        let lambda = self.config.lambda();
        self.state.v.iter().map(|&v| from_fixed128(v) / lambda).collect()
    }

    /// Kappa when accelerated (resolved from the data when the configuration left it open).
    pub fn kappa(&self) -> Option<f64> {
        self.catalyst.map(|c| c.kappa())
    }

    /// The outer loop's state and constants, when accelerated and consistent.
    fn accelerated(&self) -> Option<(&catalyst::Catalyst, &CatalystState)> {
        self.catalyst.as_ref().zip(self.state.catalyst.as_ref())
    }

    /// How many slots hold each feature, for the current slot count: counted by a
    /// [`CocoaPhase::Spread`] when the slot count is new. The counts are exact integers.
    fn spread<R: Runner<CocoaKernel>>(&mut self, runner: &mut R) -> Result<Vec<u32>, R::Error> {
        let slots = self.state.slots;
        if let Some((counted, spread)) = &self.spread
            && *counted == slots
        {
            return Ok(spread.clone());
        }
        let features = self.kernel.features();
        let request = PhaseRequest {
            phase: CocoaPhase::Spread,
            reduction: Reduction::RangeSum { len: features },
            mutates: false,
        };
        let sums = runner.run(request)?.sums.sums;
        if sums.len() != features {
            return Err(EngineError::Corrupt(format!("spread of {} for {features} features", sums.len())).into());
        }
        let spread = sums
            .iter()
            .map(|&x| {
                let count = from_fixed128(x);
                let whole = count >= 0.0 && count <= slots as f64 && count.fract() == 0.0;
                whole
                    .then_some(count as u32)
                    .ok_or_else(|| EngineError::Corrupt(format!("a feature held by {count} of {slots} slots")))
            })
            .collect::<Result<Vec<u32>, EngineError>>()?;
        self.spread = Some((slots, spread.clone()));
        Ok(spread)
    }

    /// The primal, dual and gap at the current state, from an [`CocoaPhase::Evaluate`].
    fn evaluate<R: Runner<CocoaKernel>>(&self, runner: &mut R) -> Result<EpochRecord, R::Error> {
        // |X'alpha|^2 / (2 lambda) = (lambda / 2) |w|^2 = l2 |w|^2 at w = v / lambda: one
        // value for both objectives, so the gap carries no rounding of its own.
        let penalty = |w: &[f64]| self.config.l2() * w.iter().map(|x| x * x).sum::<f64>();
        // A lone slot evaluates its own model and sums its |w|^2 (the state's `w` may be
        // behind it: `Recovery::Deferred`), in the order the sum over the state's `w` has.
        let (phase, penalty) = match self.solo() {
            true => (CocoaPhase::EvaluateOwn, None),
            false => {
                let w = self.flat_weights();
                let penalty = penalty(&w);
                (CocoaPhase::Evaluate { w }, Some(penalty))
            }
        };
        let request = PhaseRequest { phase, reduction: Reduction::Sum { len: 2 }, mutates: false };
        let output = runner.run(request)?;
        let penalty = match (penalty, output.payloads.as_slice()) {
            (Some(penalty), _) => penalty,
            (None, [norm]) => self.config.l2() * solo::decode_scalar(norm, "squared norm")?,
            (None, payloads) => {
                return Err(EngineError::Corrupt(format!("{} payloads for one slot", payloads.len())).into());
            }
        };
        let sums = output.sums;
        let (loss, conjugate) = (from_fixed128(sums.sums[0]), from_fixed128(sums.sums[1]));
        Ok(EpochRecord::new(loss + penalty, -conjugate - penalty))
    }

    /// The local solves of an epoch with the exchange of the shared vector: every slot
    /// solves from `v`, and the master adds their changes into `v` exactly.
    fn exchange_epoch<R: Runner<CocoaKernel>>(
        &mut self,
        runner: &mut R,
        tolerance: f64,
    ) -> Result<EpochChanges, R::Error> {
        let epoch = self.state.epoch;
        let v: Vec<f64> = self.state.v.iter().map(|&x| from_fixed128(x)).collect();
        let v = match self.accelerated() {
            Some((catalyst, state)) => catalyst.shared(state, &v),
            None => v,
        };
        let spread = match self.config.per_feature(self.state.slots) {
            true => Some(self.spread(runner)?),
            false => None,
        };
        let request = PhaseRequest {
            phase: CocoaPhase::LocalSolve { epoch, v, spread, tolerance },
            // Sparse: on data with few rows per feature most entries of v change every epoch,
            // but not all (criteo-sample, K = 1: 86-100%), and a lone slot's pairs are the
            // total, so nothing of the feature count is zeroed, summed into or scanned.
            reduction: Reduction::SparseSum { len: self.kernel.features() },
            mutates: true,
        };
        let output = runner.run(request)?;
        if output.payloads.len() != self.kernel.units() {
            let got = output.payloads.len();
            return Err(EngineError::Corrupt(format!("{got} payloads for {} slots", self.kernel.units())).into());
        }
        let mut alpha_changes = Vec::new();
        let mut progress = 0.0;
        for (slot, payload) in output.payloads.iter().enumerate() {
            let report = self.kernel.decode_payload(slot, payload)?;
            progress += report.progress;
            let first = self.kernel.layout().slot_rows(slot).start;
            for (i, (old, new)) in self.state.alpha[first..].iter_mut().zip(report.alpha).enumerate() {
                if old.to_bits() != new.to_bits() {
                    *old = new;
                    alpha_changes.push(((first + i) as u32, new));
                }
            }
        }
        if let Some(&(j, _)) = output.pairs.iter().find(|&&(j, _)| j as usize >= self.state.v.len()) {
            return Err(EngineError::Corrupt(format!("a change of v at {j} of {}", self.state.v.len())).into());
        }
        // Collected rather than pushed: no capacity check per changed entry (most of the
        // feature count every epoch on criteo-sample).
        let state_v = &mut self.state.v;
        let v_changes: Vec<(u32, i128)> = output
            .pairs
            .iter()
            .map(|&(j, change)| {
                let v = &mut state_v[j as usize];
                *v = v.wrapping_add(change);
                (j, *v)
            })
            .collect();
        Ok(EpochChanges { alpha: alpha_changes, v: v_changes, w: Vec::new(), progress })
    }

    /// The local solve of an epoch with one slot ([`solo`]): the slot solves on its own
    /// model and, when the epoch must be recoverable, reports what changed, which the master
    /// writes into its state (first collecting what earlier epochs left on the slot).
    /// Otherwise only the progress statistic crosses, and the state falls behind the slot.
    fn solo_epoch<R: Runner<CocoaKernel>>(
        &mut self,
        runner: &mut R,
        tolerance: f64,
        recovery: Recovery,
    ) -> Result<EpochChanges, R::Error> {
        let report = recovery == Recovery::Needed;
        if report {
            self.settle(runner)?;
        }
        let phase = CocoaPhase::SoloSolve { epoch: self.state.epoch, tolerance, report };
        let output = runner.run(PhaseRequest { phase, reduction: Reduction::None, mutates: true })?;
        let [payload] = output.payloads.as_slice() else {
            return Err(EngineError::Corrupt(format!("{} payloads for one slot", output.payloads.len())).into());
        };
        if !report {
            self.behind = true;
            let progress = solo::decode_scalar(payload, "progress statistic")?;
            return Ok(EpochChanges { alpha: Vec::new(), v: Vec::new(), w: Vec::new(), progress });
        }
        let report = solo::decode_report(payload, self.state.alpha.len(), self.state.w.len())?;
        let mut alpha = Vec::new();
        solo::apply(&report, &mut self.state.alpha, &mut self.state.w, |i, a| alpha.push((i, a)));
        Ok(EpochChanges { alpha, v: Vec::new(), w: report.w, progress: report.progress })
    }
}

/// What an epoch's local solves changed in the state (a [`CocoaStep`]'s changes).
struct EpochChanges {
    alpha: Vec<(u32, f64)>,
    v: Vec<(u32, i128)>,
    w: Vec<(u32, f64)>,
    progress: f64,
}

impl Algorithm for Cocoa {
    type Kernel = CocoaKernel;
    type State = CocoaState;
    type Step = CocoaStep;

    fn name(&self) -> &'static str {
        "cocoa"
    }

    fn kernel(&self) -> &CocoaKernel {
        &self.kernel
    }

    fn mirror(&self) -> CocoaMirror {
        CocoaMirror { alpha: self.state.alpha.clone(), w: self.state.w.clone() }
    }

    fn state(&self) -> &CocoaState {
        &self.state
    }

    fn set_state(&mut self, state: CocoaState) {
        self.state = state;
        self.behind = false;
        self.sync_kernel();
    }

    fn replay(&mut self, step: CocoaStep) -> Result<(), EngineError> {
        let state = &mut self.state;
        if step.epoch != state.epoch + 1 {
            return Err(EngineError::Corrupt(format!(
                "step to epoch {} replayed onto epoch {}",
                step.epoch, state.epoch
            )));
        }
        let bad_index = step.alpha.iter().any(|&(i, _)| i as usize >= state.alpha.len())
            || step.v.iter().any(|&(j, _)| j as usize >= state.v.len())
            || step.w.iter().any(|&(j, _)| j as usize >= state.w.len());
        if bad_index {
            return Err(EngineError::Corrupt("step indexes beyond the state".into()));
        }
        // First, as it can still refuse the step: nothing else has changed then.
        match (&mut state.catalyst, step.catalyst) {
            (Some(outer), Some(inner)) => outer.apply(inner)?,
            (None, None) => {}
            _ => return Err(EngineError::Corrupt("an accelerated step replayed onto a plain run, or back".into())),
        }
        step.alpha.iter().for_each(|&(i, a)| state.alpha[i as usize] = a);
        step.v.iter().for_each(|&(j, v)| state.v[j as usize] = v);
        step.w.iter().for_each(|&(j, w)| state.w[j as usize] = w);
        if let Some(scale_in) = step.scale_in {
            let reachable =
                self.config.elastic().is_some_and(|e| e.schedule(self.config.slots()).contains(&scale_in.to));
            if scale_in.from != state.slots || !reachable {
                return Err(EngineError::Corrupt(format!(
                    "a scale-in {} -> {} replayed onto {} slots",
                    scale_in.from, scale_in.to, state.slots
                )));
            }
            state.slots = scale_in.to;
            state.scale_ins.push(scale_in);
        }
        if let Some(record) = step.record {
            if record.epoch != step.epoch {
                return Err(EngineError::Corrupt(format!(
                    "epoch {}'s step holds epoch {}'s record",
                    step.epoch, record.epoch
                )));
            }
            state.history.push(record);
        }
        state.epoch = step.epoch;
        state.progress = [step.progress, state.progress[0]];
        self.sync_kernel();
        Ok(())
    }

    /// One epoch: local solves, then the objectives, then (elastic) the scale-in decision.
    /// Only a lone slot's epoch differs with `recovery` ([`solo`]); a runner that can lose
    /// its slot always gets whole epochs, whatever it was told, so its mirror stays whole.
    fn next_iter<R: Runner<CocoaKernel>>(
        &mut self,
        runner: &mut R,
        recovery: Recovery,
    ) -> Result<Iteration<CocoaStep>, R::Error> {
        let recovery = if runner.loses_units() { Recovery::Needed } else { recovery };
        let elastic = self.config.elastic().copied();
        if elastic.is_some_and(|e| e.clock() == Clock::Wall) && self.clock.is_none() {
            return Err(EngineError::InvalidParameter {
                name: "elastic clock",
                value: 0.0,
                why: "the wall-clock policy needs a clock (Cocoa::with_clock)",
            }
            .into());
        }
        let started = self.clock.as_ref().map(|c| c());
        let epoch = self.state.epoch;
        let tolerance = step_tolerance::for_next_epoch(
            self.config.loss(),
            self.catalyst.is_some(),
            (epoch, self.state.progress),
            self.state.alpha.len(),
        );
        let changes = match self.solo() {
            true => self.solo_epoch(runner, tolerance, recovery)?,
            false => self.exchange_epoch(runner, tolerance)?,
        };
        let EpochChanges { alpha: alpha_changes, v: v_changes, w: w_changes, progress } = changes;
        let evaluate = schedule::evaluate_now(
            self.config.gap_schedule(),
            self.config.gap_tolerance(),
            epoch + 1,
            self.config.max_epochs(),
            &self.state.history,
            progress,
        );
        let (mut record, catalyst_step) = match self.accelerated() {
            // Accelerated runs compute the gap every epoch (CocoaConfig::gap_schedule).
            Some((catalyst, state)) => {
                let step = catalyst.evaluate(state, &self.state.v, runner)?;
                let outer = self.state.catalyst.as_mut().expect("accelerated");
                outer.apply(step.clone())?;
                (Some(EpochRecord::new(outer.best_primal, outer.best_dual)), Some(step))
            }
            None if evaluate => (Some(self.evaluate(runner)?), None),
            None => (None, None),
        };
        if let Some(record) = &mut record {
            record.epoch = epoch + 1;
            record.progress = progress;
            if let (Some(clock), Some(started)) = (&self.clock, started) {
                record.seconds = Some(clock() - started);
            }
            self.state.history.push(*record);
        }
        self.state.epoch = epoch + 1;
        self.state.progress = [progress, self.state.progress[0]];
        let decision = match elastic {
            Some(e) if self.stop_reason().is_none() => {
                elastic::decide(&e, self.state.slots, epoch + 1, &self.observations())
            }
            _ => None,
        };
        let scale_in = match decision {
            Some(decision) => Some(self.scale_in(runner, decision.to)?),
            None => None,
        };
        let note = scale_in
            .map(|s| format!("scale-in after epoch {}: {}", s.epoch, s.describe(elastic.map_or(0, |e| e.window()))));
        let step = CocoaStep {
            epoch: epoch + 1,
            alpha: alpha_changes,
            v: v_changes,
            w: w_changes,
            record,
            scale_in,
            catalyst: catalyst_step,
            progress,
        };
        Ok(Iteration { epoch_done: true, step, note })
    }

    /// A lone slot's duals and model into the state, after epochs that left them on the slot
    /// ([`CocoaPhase::SoloCollect`]: one phase, no unit state changed).
    fn settle<R: Runner<CocoaKernel>>(&mut self, runner: &mut R) -> Result<(), R::Error> {
        if !self.behind {
            return Ok(());
        }
        let request = PhaseRequest { phase: CocoaPhase::SoloCollect, reduction: Reduction::None, mutates: false };
        let output = runner.run(request)?;
        let [payload] = output.payloads.as_slice() else {
            return Err(EngineError::Corrupt(format!("{} payloads for one slot", output.payloads.len())).into());
        };
        let report = solo::decode_report(payload, self.state.alpha.len(), self.state.w.len())?;
        solo::apply(&report, &mut self.state.alpha, &mut self.state.w, |_, _| {});
        self.behind = false;
        Ok(())
    }

    /// The objective and gap of the last epoch whose gap was computed, `stale` when that is
    /// not the last epoch.
    fn progress(&self) -> Progress {
        let last = self.state.history.last();
        Progress {
            epoch: self.state.epoch,
            objective: last.map(|r| r.primal),
            gap: last.map(|r| r.gap),
            stale: last.is_some_and(|r| r.epoch != self.state.epoch),
            // Any number of processes can serve K static slots; an elastic run wants one per
            // slot, so a scale-in releases the rest.
            desired_workers: self.config.elastic().map(|_| self.state.slots),
            ..Progress::default()
        }
    }

    /// On the gap only when it was computed after the last epoch and met the tolerance.
    fn stop_reason(&self) -> Option<StopReason> {
        let last = self.state.history.last().filter(|r| r.epoch == self.state.epoch);
        if last.is_some_and(|r| r.gap.relative <= self.config.gap_tolerance()) {
            Some(StopReason::GapReached)
        } else if self.state.epoch >= self.config.max_epochs() {
            Some(StopReason::MaxEpochs)
        } else {
            None
        }
    }

    fn weights(&self) -> Vec<Vec<f64>> {
        let w = self.flat_weights();
        self.kernel.block_offsets.windows(2).map(|b| w[b[0]..b[1]].to_vec()).collect()
    }

    fn max_epochs(&self) -> u32 {
        self.config.max_epochs()
    }

    /// The checkpointed scale-ins, so a restarted master reports those it replayed too.
    fn scaling_decisions(&self) -> Vec<ScalingDecision> {
        let window = self.config.elastic().map_or(0, |e| e.window());
        let decision =
            |s: &ScaleIn| ScalingDecision { epoch: s.epoch, from: s.from, to: s.to, reason: s.describe(window) };
        self.state.scale_ins.iter().map(decision).collect()
    }
}
