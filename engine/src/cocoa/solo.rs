//! One slot without the exchange of the shared vector (K = 1, not accelerated).
//!
//! With K slots every epoch ends with the exact fixed-point sum of the slots' changes of `v =
//! X'alpha`, converted back to `f64` for the next epoch: that sum is what makes a run's bytes
//! independent of which process served which slot. With one slot it is a sum of one term and buys
//! nothing, while its per-entry work (each changed entry of `v` converted to fixed point on the
//! slot, added on the master, every entry converted back and sent, the slot's model rebuilt from it
//! and its change read off) was about half of an epoch outside the solve on criteo-sample
//! (docs/benchmarks/cocoa-k1-against-liblinear.md, "A sparse sum for the change of `v`").
//!
//! So a lone slot keeps its local model `w` from epoch to epoch and is its authority
//! ([`CocoaPhase::SoloSolve`](super::CocoaPhase::SoloSolve)): after an epoch it reports only
//! what the master's state needs — the dual variables and the entries of `w` that moved, bit
//! for bit ([`SoloReport`]) — which the master writes into its state (the checkpoint's step)
//! and the runner's mirror (what a redone or handed-over slot is rebuilt from). The gap pass
//! runs on the slot's own model ([`CocoaPhase::EvaluateOwn`](super::CocoaPhase::EvaluateOwn)),
//! which also sums `|w|^2` for the penalty.
//!
//! That report serves only recovery, so it is sent only when an epoch must be recoverable
//! ([`Recovery::Needed`](crate::algorithm::Recovery): a checkpoint follows, or the runner
//! can lose the slot). Otherwise the slot returns its progress statistic alone and the master's
//! duals and `w` fall behind, until a [`CocoaPhase::SoloCollect`](super::CocoaPhase::SoloCollect)
//! brings the whole of them ([`collect`]: at the run's end, before a `Needed` epoch).
//!
//! Bytes: `w` is the slot's sequence of `f64` sparse additions from zero, as LIBLINEAR's `w`
//! is, no longer rounded through the fixed-point `v` at each epoch's end; so a K = 1 run's
//! bytes differ from the exchange's in the last bits, and remain a function of the data, the
//! parameters and the seed: a restored slot takes its model bit for bit from the mirror,
//! whichever process serves it. A run that scales in to one slot switches here with
//! `w = v / lambda`, the model the exchange would have started its next epoch from.

use super::kernel::{CocoaKernel, SlotState};
use super::rows::SlotRows;
use super::solver::{Subproblem, solo_solve};
use crate::algorithm::{Contribution, Kernel, UnitOutput};
use crate::error::EngineError;

/// What a lone slot returns from a `SoloSolve`, bit for bit. As bytes ([`encode_report`]):
/// the progress statistic, the two counts, the dual variables, then the changed entries'
/// indices and values, all little-endian arrays written in place — a few instructions a
/// value where postcard's per-value writes took tens (criteo-sample: ~37,000 values an
/// epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct SoloReport {
    /// The slot's dual variables, all of them, in row order: most change every epoch (83-100%
    /// of the rows take a step), so indices would cost more than they save.
    pub alpha: Vec<f64>,
    /// `(global feature, new model value)` for every entry of `w` that changed, ascending.
    pub w: Vec<(u32, f64)>,
    /// The solve's progress statistic ([`super::solver::LocalSolve::progress`]).
    pub progress: f64,
}

/// A lone slot's model.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnModel {
    /// Over all features, as a base or a handover brings it, until the slot's rows are
    /// gathered.
    Global(Vec<f64>),
    /// Over the slot's local features ([`SlotRows::globals`]): what the solve updates.
    Local(Vec<f64>),
}

impl OwnModel {
    /// The model over all features (`features` long; a feature the slot holds no non-zero
    /// of is 0). `rows` must be the slot's when the model is local.
    pub fn global(&self, rows: Option<&SlotRows>, features: usize) -> Vec<f64> {
        match (self, rows) {
            (OwnModel::Global(w), _) => w.clone(),
            (OwnModel::Local(local), Some(rows)) => {
                let mut w = vec![0.0; features];
                rows.globals.iter().zip(local).for_each(|(&j, &x)| w[j as usize] = x);
                w
            }
            (OwnModel::Local(_), None) => unreachable!("a local model exists only beside its rows"),
        }
    }

    /// The model over the slot's local features, converted from a global one on first use.
    pub fn local(&mut self, rows: &SlotRows, features: usize) -> Result<&mut Vec<f64>, EngineError> {
        if let OwnModel::Global(w) = self {
            if w.len() != features {
                return Err(EngineError::Corrupt(format!("a lone slot's model of {} for {features}", w.len())));
            }
            *self = OwnModel::Local(rows.globals.iter().map(|&j| w[j as usize]).collect());
        }
        match self {
            OwnModel::Local(local) => Ok(local),
            OwnModel::Global(_) => unreachable!("converted above"),
        }
    }
}

/// The entries of `after` whose bits differ from `before`'s, as `(index(k), after[k])`.
fn changes(before: &[f64], after: &[f64], index: impl Fn(usize) -> u32) -> Vec<(u32, f64)> {
    let mut changed = Vec::with_capacity(after.len());
    for (k, (b, &a)) in before.iter().zip(after).enumerate() {
        if b.to_bits() != a.to_bits() {
            changed.push((index(k), a));
        }
    }
    changed
}

/// Runs a `SoloSolve` on `unit`, whose rows are gathered: H SDCA passes on its own model.
/// With `report`, the payload is what changed ([`encode_report`]); without, the progress
/// statistic alone ([`decode_scalar`]): the model is not copied before the solve nor
/// compared after it, and neither the duals nor the changes are written.
pub(super) fn run(
    kernel: &CocoaKernel,
    unit: usize,
    state: &mut SlotState,
    epoch: u32,
    tolerance: f64,
    report: bool,
) -> Result<UnitOutput, EngineError> {
    if kernel.units() != 1 {
        return Err(EngineError::Corrupt(format!("a solo solve on {} slots", kernel.units())));
    }
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        return Err(EngineError::Corrupt(format!("step tolerance {tolerance}")));
    }
    let features = kernel.features();
    let SlotState { alpha, rows, model, .. } = state;
    let rows = rows.as_ref().expect("the kernel gathers the rows first");
    let model = model.as_mut().ok_or_else(|| EngineError::Corrupt("a lone slot without its model".into()))?;
    let model = model.local(rows, features)?;
    let orders: Vec<Vec<u32>> =
        (0..kernel.local_passes).map(|pass| kernel.layout.pass_order(unit, kernel.seed, epoch, pass)).collect();
    let problem = Subproblem { loss: kernel.loss, lambda: kernel.lambda, sigma: kernel.sigma, tolerance };
    let orders = orders.iter().map(Vec::as_slice);
    if !report {
        let progress = solo_solve(problem, rows, alpha, model, orders);
        return Ok(UnitOutput { sums: Contribution::Nothing, payload: progress.to_le_bytes().to_vec() });
    }
    let before = model.clone();
    let progress = solo_solve(problem, rows, alpha, model, orders);
    let w = changes(&before, model, |k| rows.globals[k]);
    Ok(UnitOutput { sums: Contribution::Nothing, payload: encode_report(alpha, &w, progress) })
}

/// A `SoloCollect` on a lone slot whose rows are gathered: all its duals and every entry of
/// its model over its local features (ascending, as [`SlotRows::globals`] is), progress 0.
/// The features it holds no non-zero of are 0 in the master's model as in the slot's.
pub(super) fn collect(kernel: &CocoaKernel, state: &mut SlotState) -> Result<UnitOutput, EngineError> {
    let SlotState { alpha, rows, model, .. } = state;
    let rows = rows.as_ref().expect("the kernel gathers the rows first");
    let model = model.as_mut().ok_or_else(|| EngineError::Corrupt("a lone slot without its model".into()))?;
    let local = model.local(rows, kernel.features())?;
    let w: Vec<(u32, f64)> = rows.globals.iter().copied().zip(local.iter().copied()).collect();
    Ok(UnitOutput { sums: Contribution::Nothing, payload: encode_report(alpha, &w, 0.0) })
}

/// `|w|^2` of a lone slot's local model, summed in ascending feature order: the bits the
/// master's sum over all features gives (the features the slot does not hold add `+0.0`).
pub fn squared_norm(local: &[f64]) -> f64 {
    local.iter().map(|x| x * x).sum()
}

/// The 8 little-endian bytes of an `EvaluateOwn`'s squared norm, or of a `SoloSolve`'s
/// progress statistic when it sent no report: checked finite and not negative.
pub fn decode_scalar(payload: &[u8], what: &str) -> Result<f64, EngineError> {
    let bytes: [u8; 8] = payload
        .try_into()
        .map_err(|_| EngineError::Corrupt(format!("lone slot: {what} of {} bytes", payload.len())))?;
    let value = f64::from_le_bytes(bytes);
    match value.is_finite() && value >= 0.0 {
        true => Ok(value),
        false => Err(EngineError::Corrupt(format!("lone slot: {what} {value}"))),
    }
}

/// A report as bytes (the layout is [`SoloReport`]'s).
pub fn encode_report(alpha: &[f64], w: &[(u32, f64)], progress: f64) -> Vec<u8> {
    let mut bytes = vec![0u8; 16 + 8 * alpha.len() + 12 * w.len()];
    let (head, rest) = bytes.split_at_mut(16);
    head[..8].copy_from_slice(&progress.to_le_bytes());
    head[8..12].copy_from_slice(&(alpha.len() as u32).to_le_bytes());
    head[12..].copy_from_slice(&(w.len() as u32).to_le_bytes());
    let (duals, rest) = rest.split_at_mut(8 * alpha.len());
    duals.chunks_exact_mut(8).zip(alpha).for_each(|(b, a)| b.copy_from_slice(&a.to_le_bytes()));
    let (indices, values) = rest.split_at_mut(4 * w.len());
    indices.chunks_exact_mut(4).zip(w).for_each(|(b, &(j, _))| b.copy_from_slice(&j.to_le_bytes()));
    values.chunks_exact_mut(8).zip(w).for_each(|(b, &(_, x))| b.copy_from_slice(&x.to_le_bytes()));
    bytes
}

/// A report from bytes; `None` when they are not one (short, long, or counts beyond them:
/// nothing is allocated before the bytes for it are known to be there).
fn parse_report(bytes: &[u8]) -> Option<SoloReport> {
    let f64_at = |b: &[u8]| f64::from_le_bytes(b.try_into().expect("8 bytes"));
    let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
    let (head, rest) = bytes.split_at_checked(16)?;
    let (rows, changed) = (u32_at(&head[8..12]) as usize, u32_at(&head[12..]) as usize);
    let (duals, rest) = rest.split_at_checked(rows * 8)?;
    let (indices, values) = rest.split_at_checked(changed * 4)?;
    if values.len() != changed * 8 {
        return None;
    }
    let alpha = duals.chunks_exact(8).map(f64_at).collect();
    let w = indices.chunks_exact(4).map(u32_at).zip(values.chunks_exact(8).map(f64_at)).collect();
    Some(SoloReport { alpha, w, progress: f64_at(&head[..8]) })
}

/// A `SoloSolve`'s report, checked against `rows` rows and `features` features: indices in
/// range and ascending, values finite, the progress statistic finite and not negative.
pub fn decode_report(payload: &[u8], rows: usize, features: usize) -> Result<SoloReport, EngineError> {
    let report = parse_report(payload)
        .ok_or_else(|| EngineError::Corrupt(format!("a lone slot's report of {} bytes", payload.len())))?;
    let w = &report.w;
    let fits = w.windows(2).all(|p| p[0].0 < p[1].0)
        && w.last().is_none_or(|&(at, _)| (at as usize) < features)
        && w.iter().all(|&(_, x)| x.is_finite());
    if !(report.progress.is_finite() && report.progress >= 0.0) {
        return Err(EngineError::Corrupt(format!("lone slot: progress statistic {}", report.progress)));
    }
    if report.alpha.len() != rows {
        return Err(EngineError::Corrupt(format!("lone slot: {} dual variables for {rows} rows", report.alpha.len())));
    }
    if !fits {
        return Err(EngineError::Corrupt("lone slot: a change of w out of range, out of order or not finite".into()));
    }
    Ok(report)
}

/// Writes a report into `alpha` (all of it) and `w` (its changes; both checked by
/// [`decode_report`]), telling `changed` each `(row, dual)` that changed, in row order (the
/// epoch's step lists them; a collect or the mirror does not, and so keeps no list of up to
/// one pair per row: 16 MB on criteo-1m at the end of a run).
pub fn apply(report: &SoloReport, alpha: &mut [f64], w: &mut [f64], mut changed: impl FnMut(u32, f64)) {
    for (i, (old, &new)) in alpha.iter_mut().zip(&report.alpha).enumerate() {
        if old.to_bits() != new.to_bits() {
            *old = new;
            changed(i as u32, new);
        }
    }
    report.w.iter().for_each(|&(j, x)| w[j as usize] = x);
}
