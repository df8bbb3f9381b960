//! The data-parallel half of L-BFGS, the hybrid and parameter mixtures: a unit is a slot
//! (a run of whole grains, [`super::layout`]); its state is its rows, gathered on first use
//! and rebuilt from the grid alone, so no unit keeps anything the master must mirror.

use super::config::Mixing;
use super::layout::{GRAIN, Layout};
use super::online::{adagrad_pass, perceptron_pass, sgd_pass};
use super::pass::grain_pass;
use crate::algorithm::{Contribution, GridSource, Kernel, PhaseOutput, UnitOutput};
use crate::cocoa::rows::SlotRows;
use crate::error::EngineError;
use crate::fixed::{Quantity, SumRange};
use crate::loss::Loss;
use crate::rng::{SplitMix64, shuffle};
use serde::{Deserialize, Serialize};

/// What every worker needs to run any slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinearKernel {
    pub(super) loss: Loss,
    pub(super) l2: f64,
    pub(super) rate: f64,
    pub(super) seed: u64,
    pub(super) mixing: Mixing,
    pub(super) layout: Layout,
    /// First global feature of each block; the last entry is the feature count.
    pub(super) block_offsets: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LinearPhase {
    /// The data loss and its gradient at `w`: a range sum of `F + 1` (the gradient, then the
    /// loss), each grain's part rounded once. With `curvature`, `F` more: the data loss's
    /// Hessian diagonal `sum_i l''_i x_ij^2` (the Jacobi preconditioner's), rounded the same
    /// way, so it too is the same bits for any worker and slot count.
    Evaluate { w: Vec<f64>, curvature: bool },
    /// One AdaGrad pass from `w = 0`; a range sum of `2F`: `G_j w_j` of each feature the
    /// slot touched, then `G_j - 1` (the accumulators start at 1, so an untouched feature
    /// weighs 1 with its value 0: the master adds those weights).
    Adagrad,
    /// One online pass from the mixed `w` (SGD; the averaged perceptron for hinge), the
    /// slot's change of each touched feature times its mixing weight: a range sum of `F`.
    Mix { epoch: u32, w: Vec<f64> },
    /// The data loss's Hessian at `w` times `v`, `sum_i l''(y_i, x_i.w) (x_i.v) x_i`: a
    /// range sum of `F`, each grain's part rounded once (one CG step of the Newton
    /// solver, so the same bits for any worker and slot count, as `Evaluate`'s).
    Hessian { w: Vec<f64>, v: Vec<f64> },
}

/// A slot between phases: only its rows (everything else lives on the master).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SlotData {
    rows: Option<SlotRows>,
    /// The local features each of the slot's grains touches, ascending: the entries of a
    /// grain's gradient, found once with the rows rather than on every pass.
    grain_features: Vec<Vec<u32>>,
    /// `l''` of each row at the point of the last [`LinearPhase::Hessian`]: CG takes many
    /// products at one point, and this saves each one the margins and their `exp`. A memo
    /// only: it is recomputed whenever the point differs, so no result depends on it.
    curvature: Option<RowCurvature>,
}

/// The rows' second derivatives at one point (the slot's local weights).
#[derive(Debug, Clone, PartialEq, Default)]
struct RowCurvature {
    w: Vec<f64>,
    second: Vec<f64>,
}

impl LinearKernel {
    pub fn features(&self) -> usize {
        *self.block_offsets.last().unwrap_or(&0)
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The visiting order of slot `unit`'s rows in online pass `epoch`.
    fn order(&self, unit: usize, epoch: u32, len: usize) -> Vec<u32> {
        let mut order: Vec<u32> = (0..len as u32).collect();
        let seed = [epoch as u64, unit as u64].iter().fold(self.seed, |s, &v| SplitMix64::new(s ^ v).next_u64());
        shuffle(&mut order, seed);
        order
    }

    fn check_len(&self, w: &[f64]) -> Result<(), EngineError> {
        if w.len() != self.features() {
            return Err(EngineError::Corrupt(format!("model of {} for {} features", w.len(), self.features())));
        }
        Ok(())
    }

    /// Rows `from..to` of slot `unit` (slot-local numbering) of each of its grains.
    fn grain_rows(&self, unit: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let first = self.layout.slot_rows(unit).start;
        self.layout
            .slot_grains(unit)
            .map(move |grain| grain * GRAIN - first..((grain + 1) * GRAIN).min(self.layout.rows()) - first)
    }

    /// The local features each grain of slot `unit` touches, ascending. A slot of one grain
    /// (L-BFGS alone runs one per grain) touches every local feature: they are numbered
    /// from the slot's rows.
    fn grain_features(&self, unit: usize, rows: &SlotRows) -> Vec<Vec<u32>> {
        if self.layout.slot_grains(unit).len() == 1 {
            return vec![(0..rows.globals.len() as u32).collect()];
        }
        let mut seen = vec![false; rows.globals.len()];
        self.grain_rows(unit)
            .map(|range| {
                let mut touched = Vec::new();
                for i in range {
                    for &j in rows.row(i).0 {
                        if !seen[j as usize] {
                            seen[j as usize] = true;
                            touched.push(j);
                        }
                    }
                }
                touched.sort_unstable();
                touched.iter().for_each(|&j| seen[j as usize] = false);
                touched
            })
            .collect()
    }

    /// The loss and gradient sums of a slot, one exact partial per grain (each grain's
    /// touched features, then its loss).
    /// With `curvature`, each grain's Hessian diagonal too, at `F + 1 + j`.
    fn evaluate(&self, unit: usize, data: &SlotData, w: &[f64], curvature: bool) -> Result<Contribution, EngineError> {
        let rows = data.rows.as_ref().expect("gathered before");
        let local: Vec<f64> = rows.globals.iter().map(|&j| w[j as usize]).collect();
        let range = SumRange::for_partials(self.layout.grains());
        let mut acc = vec![0.0; local.len()];
        let mut diagonal = if curvature { vec![0.0; local.len()] } else { Vec::new() };
        let per_feature = if curvature { 2 } else { 1 };
        let entries = data.grain_features.iter().map(|t| per_feature * t.len() + 1).sum();
        let mut sums = Vec::with_capacity(entries);
        let features = self.features() as u32;
        for (rows_of_grain, touched) in self.grain_rows(unit).zip(&data.grain_features) {
            let loss =
                grain_pass(self.loss, rows, rows_of_grain, &local, &mut acc, curvature.then_some(&mut diagonal[..]));
            emit(&mut sums, range, Quantity::Gradient, 0, touched, &rows.globals, &mut acc)?;
            sums.push((features, range.fixed(Quantity::Loss, loss)?));
            if curvature {
                emit(&mut sums, range, Quantity::Curvature, features + 1, touched, &rows.globals, &mut diagonal)?;
            }
        }
        Ok(Contribution::Sparse(sums))
    }

    /// The Hessian-vector sums of a slot, one exact partial per grain: `l''_i (x_i.v) x_i`
    /// added in row order over the grain's rows, for each feature the grain touches.
    fn hessian(&self, unit: usize, data: &mut SlotData, w: &[f64], v: &[f64]) -> Result<Contribution, EngineError> {
        let rows = data.rows.as_ref().expect("gathered before");
        let local_w: Vec<f64> = rows.globals.iter().map(|&j| w[j as usize]).collect();
        if data.curvature.as_ref().is_none_or(|c| c.w != local_w) {
            let second = (0..rows.len()).map(|i| self.loss.derivatives(rows.targets[i], rows.dot(i, &local_w)).second);
            data.curvature = Some(RowCurvature { second: second.collect(), w: local_w });
        }
        let second = &data.curvature.as_ref().expect("set above").second;
        let local_v: Vec<f64> = rows.globals.iter().map(|&j| v[j as usize]).collect();
        let range = SumRange::for_partials(self.layout.grains());
        let mut acc = vec![0.0; local_v.len()];
        let mut sums = Vec::with_capacity(data.grain_features.iter().map(Vec::len).sum());
        for (rows_of_grain, touched) in self.grain_rows(unit).zip(&data.grain_features) {
            for i in rows_of_grain {
                rows.add_to(i, second[i] * rows.dot(i, &local_v), &mut acc);
            }
            emit(&mut sums, range, Quantity::HessianVector, 0, touched, &rows.globals, &mut acc)?;
        }
        Ok(Contribution::Sparse(sums))
    }
}

/// Appends one grain's sums of `values` (local features `touched`) at `offset` plus each
/// feature's global index, and clears them for the next grain.
fn emit(
    sums: &mut Vec<(u32, i128)>,
    range: SumRange,
    quantity: Quantity,
    offset: u32,
    touched: &[u32],
    globals: &[u32],
    values: &mut [f64],
) -> Result<(), EngineError> {
    for &j in touched {
        let j = j as usize;
        sums.push((offset + globals[j], range.fixed(quantity, values[j])?));
        values[j] = 0.0;
    }
    Ok(())
}

impl Kernel for LinearKernel {
    type Phase = LinearPhase;
    type UnitState = SlotData;
    /// Nothing: units hold no state the master must keep.
    type Mirror = ();
    type UnitBase = ();

    fn units(&self) -> usize {
        self.layout.slots()
    }

    fn fresh<G: GridSource>(&self, _unit: usize, _grid: &G) -> Result<SlotData, G::Error> {
        Ok(SlotData::default())
    }

    fn run<G: GridSource>(
        &self,
        phase: &LinearPhase,
        unit: usize,
        state: &mut SlotData,
        grid: &G,
    ) -> Result<UnitOutput, G::Error> {
        if state.rows.is_none() {
            let range = self.layout.slot_rows(unit);
            let layout = self.layout.row_layout();
            let rows = SlotRows::gather_range(layout, &self.block_offsets, self.loss, range, grid)?;
            state.grain_features = self.grain_features(unit, &rows);
            state.rows = Some(rows);
        }
        if let LinearPhase::Hessian { w, v } = phase {
            self.check_len(w)?;
            self.check_len(v)?;
            return Ok(UnitOutput { sums: self.hessian(unit, state, w, v)?, payload: Vec::new() });
        }
        let rows = state.rows.as_ref().expect("gathered above");
        let partials = SumRange::for_partials(self.layout.slots());
        let sums = match phase {
            LinearPhase::Evaluate { w, curvature } => {
                self.check_len(w)?;
                self.evaluate(unit, state, w, *curvature)?
            }
            LinearPhase::Adagrad => {
                let mut local = vec![0.0; rows.globals.len()];
                let order = self.order(unit, 0, rows.len());
                let r = 2.0 * self.l2 / self.layout.rows() as f64;
                let g2 = adagrad_pass(self.loss, rows, &mut local, self.rate, r, &order);
                let f = self.features() as u32;
                let mut sums = Vec::with_capacity(2 * local.len());
                for ((&j, &x), &g) in rows.globals.iter().zip(&local).zip(&g2) {
                    if g != 1.0 {
                        sums.push((j, partials.fixed(Quantity::SharedVector, g * x)?));
                        sums.push((f + j, partials.fixed(Quantity::SharedVector, g - 1.0)?));
                    }
                }
                Contribution::Sparse(sums)
            }
            LinearPhase::Mix { epoch, w } => {
                self.check_len(w)?;
                let start: Vec<f64> = rows.globals.iter().map(|&j| w[j as usize]).collect();
                let mut local = start.clone();
                let order = self.order(unit, *epoch, rows.len());
                if self.loss == Loss::Hinge {
                    perceptron_pass(rows, &mut local, &order);
                } else {
                    // Steps shrink with the epoch as 1/(epoch + 1): a mixture of SGD passes
                    // with a fixed step stalls at the step's noise level.
                    let rate = self.rate / (1.0 + *epoch as f64);
                    sgd_pass(self.loss, rows, &mut local, rate, self.l2, self.layout.rows() as f64, &order);
                }
                let weight = match self.mixing {
                    Mixing::Uniform => 1.0 / self.layout.slots() as f64,
                    Mixing::Examples => rows.len() as f64 / self.layout.rows() as f64,
                };
                let sums = rows
                    .globals
                    .iter()
                    .zip(local.iter().zip(&start))
                    .filter(|(_, (a, b))| a != b)
                    .map(|(&j, (a, b))| Ok((j, partials.fixed(Quantity::SharedVector, weight * (a - b))?)))
                    .collect::<Result<_, EngineError>>()?;
                Contribution::Sparse(sums)
            }
            LinearPhase::Hessian { .. } => unreachable!("answered above"),
        };
        Ok(UnitOutput { sums, payload: Vec::new() })
    }

    fn commit(&self, _mirror: &mut (), _phase: &LinearPhase, _output: &PhaseOutput) {}

    fn unit_base(&self, _mirror: &(), _unit: usize) {}

    /// Every slot is rebuilt from the grid alone: one base for all.
    fn base_key(&self, _unit: usize) -> usize {
        0
    }

    fn restore<G: GridSource>(&self, unit: usize, _base: &(), grid: &G) -> Result<SlotData, G::Error> {
        self.fresh(unit, grid)
    }

    fn encode_state(&self, _state: &SlotData) -> Vec<u8> {
        Vec::new()
    }

    fn decode_state<G: GridSource>(&self, unit: usize, _bytes: &[u8], grid: &G) -> Result<SlotData, G::Error> {
        self.fresh(unit, grid)
    }
}
