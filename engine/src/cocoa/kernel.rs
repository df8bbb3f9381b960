//! CoCoA's data-parallel half: a unit is a slot; its state is its dual variables (and its
//! rows, gathered on first use).

use super::layout::Layout;
use super::rows::SlotRows;
use super::solo::{self, OwnModel};
use super::solver::{
    FeatureWeights, ObjectiveTerms, Subproblem, local_objective_terms, local_solve, local_solve_per_feature,
    objective_terms,
};
use crate::algorithm::{Contribution, GridSource, Kernel, PhaseOutput, UnitOutput, decode, encode};
use crate::error::EngineError;
use crate::fixed::{Quantity, SumRange};
use crate::loss::Loss;
use crate::scd::fast_exp::Exp;
use serde::{Deserialize, Serialize};

/// What every worker needs to run any slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CocoaKernel {
    pub(super) loss: Loss,
    pub(super) lambda: f64,
    pub(super) sigma: f64,
    pub(super) local_passes: u32,
    pub(super) seed: u64,
    pub(super) layout: Layout,
    /// First global feature of each block; the last entry is the feature count.
    pub(super) block_offsets: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CocoaPhase {
    /// H local SDCA passes from the shared vector `v = X'alpha` of the epoch's start.
    /// Each slot adds `X_k' delta_alpha_k` (rounded once per feature, in ascending feature
    /// order) into a sparse sum of the feature count ([`crate::algorithm::Reduction::SparseSum`]:
    /// the master gets the entries of `v` that change), and returns its new dual variables
    /// as the payload.
    /// `spread`: per-feature aggregation ([`super::config::Aggregation::PerFeature`]), the
    /// number of slots holding each feature, from a [`CocoaPhase::Spread`]; `None`: the
    /// kernel's scalar `sigma'`. `tolerance`: the logistic step's inner tolerance for the
    /// epoch ([`super::step_tolerance`]; 0: exact).
    LocalSolve { epoch: u32, v: Vec<f64>, spread: Option<Vec<u32>>, tolerance: f64 },
    /// Each slot adds 1 for every feature its rows hold a non-zero of, into a range sum of
    /// the feature count: the master gets, exactly, how many slots share each feature.
    Spread,
    /// Exact sums of the losses at `w` and of the conjugates at `-alpha`.
    Evaluate { w: Vec<f64> },
    /// One slot, not accelerated ([`super::solo`]): H local SDCA passes on the slot's own
    /// model, which it keeps between epochs; nothing is summed. `report`: the payload is a
    /// [`solo::SoloReport`] of what changed (the iteration must be recoverable:
    /// [`crate::algorithm::Recovery::Needed`]); otherwise only the progress statistic, and the
    /// slot's duals and model stay on the slot until a [`CocoaPhase::SoloCollect`].
    SoloSolve { epoch: u32, tolerance: f64, report: bool },
    /// [`CocoaPhase::Evaluate`] at a lone slot's own model; the payload is its squared norm
    /// `|w|^2` (8 bytes, summed in ascending feature order as the master sums its copy), for
    /// the penalty of both objectives.
    EvaluateOwn,
    /// A lone slot's whole state, changing nothing: a [`solo::SoloReport`] of all its duals
    /// and every entry of its model (progress 0), which the master writes into its state
    /// after epochs that left them on the slot.
    SoloCollect,
}

/// What rebuilds a slot ([`Kernel::UnitBase`]): its committed dual variables and, when it
/// is a lone slot ([`super::solo`]), the model it keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotBase {
    /// The slot's dual variables, in row order.
    pub alpha: Vec<f64>,
    /// A lone slot's model over all features; empty for a slot that starts each epoch from
    /// the shared vector.
    pub w: Vec<f64>,
}

/// The master's record of the committed state every slot is rebuilt from
/// ([`Kernel::Mirror`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CocoaMirror {
    /// Every row's dual variable, in global row order.
    pub alpha: Vec<f64>,
    /// The lone slot's model ([`SlotBase::w`]); empty with more slots.
    pub w: Vec<f64>,
}

/// What a slot returns from a `LocalSolve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotReport {
    /// The slot's new dual variables, in row order.
    pub alpha: Vec<f64>,
    /// The solve's progress statistic ([`super::solver::LocalSolve::progress`]).
    pub progress: f64,
}

/// A slot between phases.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotState {
    /// Dual variables of the slot's rows, in row order.
    pub alpha: Vec<f64>,
    /// The slot's rows; gathered from the grid on first use.
    pub(super) rows: Option<SlotRows>,
    /// The per-feature weights of the last `spread` the slot solved with (they change only
    /// when the slots do, and then the slot is rebuilt).
    weights: Option<(Vec<u32>, FeatureWeights)>,
    /// A lone slot's model, its authority from epoch to epoch ([`super::solo`]); `None` for
    /// a slot that starts each epoch from the shared vector.
    pub(super) model: Option<OwnModel>,
}

impl SlotState {
    /// The slot's rows, once gathered (or merged from its old slots' at a scale-in).
    pub fn rows(&self) -> Option<&SlotRows> {
        self.rows.as_ref()
    }
}

impl CocoaKernel {
    pub fn features(&self) -> usize {
        *self.block_offsets.last().unwrap_or(&0)
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    fn slot_len(&self, slot: usize) -> usize {
        self.layout.slot_rows(slot).len()
    }

    /// A slot's state from its base, checked: the dual variables against its row count, a
    /// model against the feature count (and only for a lone slot).
    fn slot_from(&self, slot: usize, base: SlotBase) -> Result<SlotState, EngineError> {
        let SlotBase { alpha, w } = base;
        if alpha.len() != self.slot_len(slot) {
            return Err(EngineError::Corrupt(format!(
                "slot {slot}: {} dual variables for {} rows",
                alpha.len(),
                self.slot_len(slot)
            )));
        }
        let model = match w.is_empty() {
            true => None,
            false if w.len() == self.features() && self.units() == 1 => Some(OwnModel::Global(w)),
            false => {
                return Err(EngineError::Corrupt(format!(
                    "slot {slot} of {}: a model of {} for {} features",
                    self.units(),
                    w.len(),
                    self.features()
                )));
            }
        };
        Ok(SlotState { alpha, rows: None, weights: None, model })
    }

    /// A slot's objective terms as exact sums, refused when not finite.
    fn terms_output(&self, unit: usize, terms: ObjectiveTerms) -> Result<UnitOutput, EngineError> {
        if !(terms.loss.is_finite() && terms.conjugate.is_finite()) {
            return Err(EngineError::Corrupt(format!(
                "slot {unit}: objective terms {terms:?} are not finite (a dual variable left its domain)"
            )));
        }
        let range = SumRange::for_partials(self.layout.slots());
        let sums = vec![range.fixed(Quantity::Loss, terms.loss)?, range.fixed(Quantity::Loss, terms.conjugate)?];
        Ok(UnitOutput { sums: Contribution::Dense(sums), payload: Vec::new() })
    }

    /// The spread (slots sharing the feature) of each of the slot's local features, checked:
    /// every one is in `1..=K`, as the slot itself holds it.
    fn local_spread(&self, unit: usize, rows: &SlotRows, spread: &[u32]) -> Result<Vec<u32>, EngineError> {
        if spread.len() != self.features() {
            return Err(EngineError::Corrupt(format!("spread of {} for {}", spread.len(), self.features())));
        }
        let slots = self.layout.slots() as u32;
        let local: Vec<u32> = rows.globals.iter().map(|&j| spread[j as usize]).collect();
        match local.iter().position(|&s| s == 0 || s > slots) {
            Some(at) => Err(EngineError::Corrupt(format!(
                "slot {unit}: feature {} is held by {} of {slots} slots",
                rows.globals[at], local[at]
            ))),
            None => Ok(local),
        }
    }

    /// A slot's report from a `LocalSolve` payload, its dual variables checked against its
    /// row count.
    pub fn decode_payload(&self, slot: usize, payload: &[u8]) -> Result<SlotReport, EngineError> {
        let report: SlotReport = decode(payload, "cocoa slot report")?;
        if !(report.progress.is_finite() && report.progress >= 0.0) {
            return Err(EngineError::Corrupt(format!("slot {slot}: progress statistic {}", report.progress)));
        }
        if report.alpha.len() != self.slot_len(slot) {
            return Err(EngineError::Corrupt(format!(
                "slot {slot}: {} dual variables for {} rows",
                report.alpha.len(),
                self.slot_len(slot)
            )));
        }
        Ok(report)
    }
}

impl Kernel for CocoaKernel {
    type Phase = CocoaPhase;
    type UnitState = SlotState;
    type Mirror = CocoaMirror;
    type UnitBase = SlotBase;

    fn units(&self) -> usize {
        self.layout.slots()
    }

    /// Gathers the slot's rows at once, so a runner that creates its units before the run
    /// starts ([`crate::runner::LocalRunner::prepare`]) has the data in the solver's own
    /// layout before the first epoch, as LIBLINEAR has its problem before it trains. It also
    /// makes the process's one choice of `exp` ([`Exp::detect`]: ~1.9M instructions of probes,
    /// 7% of a whole rcv1-small run) here rather than inside the first epoch's solve.
    fn fresh<G: GridSource>(&self, unit: usize, grid: &G) -> Result<SlotState, G::Error> {
        if self.loss == Loss::Logistic {
            Exp::detect();
        }
        let rows = SlotRows::gather(&self.layout, &self.block_offsets, self.loss, unit, grid)?;
        // A lone slot starts from w = 0, as the master's state does ([`super::solo`]).
        let model = (self.units() == 1).then(|| OwnModel::Local(vec![0.0; rows.globals.len()]));
        Ok(SlotState { alpha: vec![0.0; self.slot_len(unit)], rows: Some(rows), weights: None, model })
    }

    /// A slot reads its gathered rows only; a merged slot takes its old slots' rows
    /// ([`Self::merge`]). (A slot restored from its base gathers again: the local runner,
    /// which keeps its units, restores none.)
    fn units_hold_their_data(&self) -> bool {
        true
    }

    fn run<G: GridSource>(
        &self,
        phase: &CocoaPhase,
        unit: usize,
        state: &mut SlotState,
        grid: &G,
    ) -> Result<UnitOutput, G::Error> {
        if state.rows.is_none() {
            state.rows = Some(SlotRows::gather(&self.layout, &self.block_offsets, self.loss, unit, grid)?);
        }
        let rows = state.rows.as_ref().expect("gathered above");
        match phase {
            CocoaPhase::LocalSolve { epoch, v, spread, tolerance } => {
                if v.len() != self.features() {
                    return Err(
                        EngineError::Corrupt(format!("shared vector of {} for {}", v.len(), self.features())).into()
                    );
                }
                let orders: Vec<Vec<u32>> =
                    (0..self.local_passes).map(|pass| self.layout.pass_order(unit, self.seed, *epoch, pass)).collect();
                let orders = orders.iter().map(Vec::as_slice);
                if !(tolerance.is_finite() && *tolerance >= 0.0) {
                    return Err(EngineError::Corrupt(format!("step tolerance {tolerance}")).into());
                }
                let mut problem =
                    Subproblem { loss: self.loss, lambda: self.lambda, sigma: self.sigma, tolerance: *tolerance };
                let solve = match spread {
                    None => local_solve(problem, rows, &mut state.alpha, v, orders),
                    Some(spread) => {
                        let local = self.local_spread(unit, rows, spread)?;
                        match local.first().filter(|&&s| local.iter().all(|&t| t == s)) {
                            // One weight for all the slot's features: the scalar problem.
                            Some(&s) => {
                                problem.sigma = s as f64;
                                local_solve(problem, rows, &mut state.alpha, v, orders)
                            }
                            None => {
                                if state.weights.as_ref().is_none_or(|(cached, _)| *cached != local) {
                                    let sigma = local.iter().map(|&s| s as f64).collect();
                                    state.weights = Some((local, FeatureWeights::new(rows, sigma)));
                                }
                                let weights = &state.weights.as_ref().expect("set above").1;
                                local_solve_per_feature(problem, weights, rows, &mut state.alpha, v, orders)
                            }
                        }
                    }
                };
                // Each slot's change of v is checked against the range that proves the sum
                // over all slots exact (crate::fixed).
                // Sized for every local feature up front: grown by doubling, the pairs were
                // copied twice over (criteo-sample: ~35,000 of 24 bytes an epoch).
                let range = SumRange::for_partials(self.layout.slots());
                let mut sums = Vec::with_capacity(rows.globals.len());
                for (&j, &x) in rows.globals.iter().zip(&solve.u) {
                    if x != 0.0 {
                        sums.push((j, range.fixed(Quantity::SharedVector, x)?));
                    }
                }
                let report = SlotReport { alpha: state.alpha.clone(), progress: solve.progress };
                Ok(UnitOutput { sums: Contribution::Sparse(sums), payload: encode(&report) })
            }
            CocoaPhase::Spread => {
                let one = SumRange::for_partials(self.layout.slots()).fixed(Quantity::SharedVector, 1.0)?;
                let sums = rows.globals.iter().map(|&j| (j, one)).collect();
                Ok(UnitOutput { sums: Contribution::Sparse(sums), payload: Vec::new() })
            }
            CocoaPhase::Evaluate { w } => {
                if w.len() != self.features() {
                    return Err(EngineError::Corrupt(format!("model of {} for {}", w.len(), self.features())).into());
                }
                Ok(self.terms_output(unit, objective_terms(self.loss, rows, &state.alpha, w))?)
            }
            CocoaPhase::SoloSolve { epoch, tolerance, report } => {
                Ok(solo::run(self, unit, state, *epoch, *tolerance, *report)?)
            }
            CocoaPhase::EvaluateOwn => {
                let SlotState { alpha, model, .. } = state;
                let model =
                    model.as_mut().ok_or_else(|| EngineError::Corrupt("a lone slot without its model".into()))?;
                let local = model.local(rows, self.features())?;
                let mut output = self.terms_output(unit, local_objective_terms(self.loss, rows, alpha, local))?;
                output.payload = solo::squared_norm(local).to_le_bytes().to_vec();
                Ok(output)
            }
            CocoaPhase::SoloCollect => Ok(solo::collect(self, state)?),
        }
    }

    /// A payload that does not decode leaves its slot's entries as they were: `commit`
    /// cannot fail, and [`super::Cocoa::next_iter`] refuses the same payload with an error
    /// before the epoch is recorded.
    fn commit(&self, mirror: &mut CocoaMirror, phase: &CocoaPhase, output: &PhaseOutput) {
        match phase {
            CocoaPhase::LocalSolve { .. } => {
                for (slot, payload) in output.payloads.iter().enumerate() {
                    if let Ok(report) = self.decode_payload(slot, payload) {
                        mirror.alpha[self.layout.slot_rows(slot)].copy_from_slice(&report.alpha);
                    }
                }
            }
            // A solve without its report is never committed: only a runner that cannot lose
            // a unit runs one, and such a runner keeps no mirror.
            CocoaPhase::SoloSolve { report: false, .. } => {}
            CocoaPhase::SoloSolve { report: true, .. } => {
                let (rows, features) = (mirror.alpha.len(), mirror.w.len());
                if let [payload] = output.payloads.as_slice()
                    && let Ok(report) = solo::decode_report(payload, rows, features)
                {
                    solo::apply(&report, &mut mirror.alpha, &mut mirror.w, |_, _| {});
                }
            }
            CocoaPhase::Spread | CocoaPhase::Evaluate { .. } | CocoaPhase::EvaluateOwn | CocoaPhase::SoloCollect => {}
        }
    }

    fn unit_base(&self, mirror: &CocoaMirror, unit: usize) -> SlotBase {
        SlotBase { alpha: mirror.alpha[self.layout.slot_rows(unit)].to_vec(), w: mirror.w.clone() }
    }

    fn restore<G: GridSource>(&self, unit: usize, base: &SlotBase, _grid: &G) -> Result<SlotState, G::Error> {
        Ok(self.slot_from(unit, base.clone())?)
    }

    /// A scale-in's slot takes over its m old slots when nothing but the slot count changed.
    fn merges_from(&self, old: &Self, unit: usize) -> Option<std::ops::Range<usize>> {
        let same = self.loss == old.loss && self.block_offsets == old.block_offsets;
        let m = self.layout.merge_factor(&old.layout).filter(|_| same)?;
        Some(unit * m..(unit + 1) * m)
    }

    /// The merged slot's rows are its old slots' rows put together ([`SlotRows::concat`],
    /// equal to gathering them); its dual variables are the committed ones, as a restored
    /// slot's. Parts without rows (never gathered) leave the gathering to the first phase.
    fn merge<G: GridSource>(
        &self,
        unit: usize,
        base: &SlotBase,
        parts: Vec<SlotState>,
        _grid: &G,
    ) -> Result<SlotState, G::Error> {
        let mut state = self.slot_from(unit, base.clone())?;
        let rows: Option<Vec<SlotRows>> = parts.into_iter().map(|p| p.rows).collect();
        state.rows = rows.map(|r| SlotRows::concat(&r)).filter(|r| r.len() == self.slot_len(unit));
        // A lone slot's model in its rows' numbering at once, as a fresh slot's.
        if let (Some(model), Some(rows)) = (&mut state.model, &state.rows) {
            model.local(rows, self.features())?;
        }
        Ok(state)
    }

    /// The slot's rows, once gathered: what a merge elsewhere needs (its dual variables
    /// come from the master's base).
    fn encode_part(&self, state: &SlotState) -> Option<Vec<u8>> {
        state.rows.as_ref().map(encode)
    }

    /// Rows from another worker, checked ([`SlotRows::checked`]); the dual variables are
    /// left empty, as [`Self::merge`] takes the committed ones from its base.
    fn decode_part(&self, bytes: &[u8]) -> Result<SlotState, EngineError> {
        let rows = decode::<SlotRows>(bytes, "cocoa slot rows")?.checked(self.features())?;
        Ok(SlotState { alpha: Vec::new(), rows: Some(rows), weights: None, model: None })
    }

    /// The slot's base: its dual variables and a lone slot's model.
    fn encode_state(&self, state: &SlotState) -> Vec<u8> {
        let w = state.model.as_ref().map_or_else(Vec::new, |m| m.global(state.rows.as_ref(), self.features()));
        encode(&SlotBase { alpha: state.alpha.clone(), w })
    }

    fn decode_state<G: GridSource>(&self, unit: usize, bytes: &[u8], _grid: &G) -> Result<SlotState, G::Error> {
        let base: SlotBase = decode(bytes, "cocoa slot state")?;
        Ok(self.slot_from(unit, base)?)
    }
}
