//! A slot's rows as CSR, gathered from the grid's cells of the shards it overlaps
//! ([`super::gather`]).
//!
//! Features are renumbered locally (the slot's distinct features, ascending by global
//! index), so the local vectors of a slot are as long as the features it sees, however
//! many the model has.

use crate::error::EngineError;
use serde::{Deserialize, Serialize};

/// Serialized whole, as a scale-in's part sent from the worker that held the slot to the one
/// that merges it ([`SlotRows::checked`] on arrival).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotRows {
    /// Row `i`'s non-zeros are `starts[i]..starts[i + 1]`.
    pub(super) starts: Vec<usize>,
    /// Local feature of each non-zero.
    pub(super) features: Vec<u32>,
    /// Value of each non-zero; `None` when all are 1 (binary data such as a9a).
    pub(super) values: Option<Vec<f64>>,
    /// Global feature of each local one, ascending.
    pub globals: Vec<u32>,
    pub targets: Vec<f64>,
    /// `|x_i|^2` of each row.
    pub norms: Vec<f64>,
}

impl SlotRows {
    /// The rows of consecutive slots as one slot's, equal field by field to gathering the
    /// union of their row ranges from the grid (a scale-in's merged slot, built from rows a
    /// worker already holds instead of from the grid).
    ///
    /// Why it is the same: a row's non-zeros come in the same order whichever slot gathers
    /// it (block by block, cell order within a block: the row lies in one shard), its norm
    /// is summed in that order, and local features are ranked by global feature. So the
    /// merged CSR is the parts' CSR one after the other, each part's local features mapped
    /// through a table from its own numbering to the union's.
    pub fn concat(parts: &[SlotRows]) -> Self {
        let mut globals: Vec<u32> = parts.iter().flat_map(|p| p.globals.iter().copied()).collect();
        globals.sort_unstable();
        globals.dedup();
        let rows: usize = parts.iter().map(SlotRows::len).sum();
        let nnz: usize = parts.iter().map(|p| p.features.len()).sum();
        let mut starts = Vec::with_capacity(rows + 1);
        starts.push(0);
        let mut features = Vec::with_capacity(nnz);
        let real = parts.iter().any(|p| p.values.is_some());
        let mut values = Vec::with_capacity(if real { nnz } else { 0 });
        let (mut targets, mut norms) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
        for part in parts {
            // Both lists ascend, so one walk numbers the part's features in the union's.
            let mut at = 0;
            let table: Vec<u32> = part
                .globals
                .iter()
                .map(|&g| {
                    at += globals[at..].partition_point(|&u| u < g);
                    at as u32
                })
                .collect();
            let base = features.len();
            starts.extend(part.starts[1..].iter().map(|&s| base + s));
            features.extend(part.features.iter().map(|&j| table[j as usize]));
            if real {
                match &part.values {
                    Some(v) => values.extend_from_slice(v),
                    None => values.resize(values.len() + part.features.len(), 1.0),
                }
            }
            targets.extend_from_slice(&part.targets);
            norms.extend_from_slice(&part.norms);
        }
        // A part with values has one that is not 1 (`from_entries` keeps none otherwise), so
        // the union has values exactly when a gathering of it would.
        let values = real.then_some(values);
        Self { starts, features, values, globals, targets, norms }
    }

    /// Rows that came from elsewhere (another worker's part of a merge), checked against
    /// everything [`Self::gather`] guarantees and the solver's loops index by: CSR starts
    /// from 0 up to the non-zeros, local features within the slot's, global features
    /// ascending below `features`, one target and norm per row, and values only when one
    /// is not 1 (as gathering keeps them, so a merge of these gives a gathering's bytes).
    pub fn checked(self, features: usize) -> Result<Self, EngineError> {
        let corrupt = |what: &str| Err(EngineError::Corrupt(format!("a slot's rows: {what}")));
        let n = self.targets.len();
        if self.starts.len() != n + 1 || self.norms.len() != n {
            return corrupt(&format!("{} starts and {} norms for {n} rows", self.starts.len(), self.norms.len()));
        }
        if self.starts[0] != 0 || self.starts[n] != self.features.len() || self.starts.windows(2).any(|w| w[0] > w[1]) {
            return corrupt("row starts do not ascend from 0 to the non-zeros");
        }
        if self.features.iter().any(|&j| j as usize >= self.globals.len()) {
            return corrupt("a local feature beyond the slot's");
        }
        if self.globals.windows(2).any(|w| w[0] >= w[1]) || self.globals.last().is_some_and(|&g| g as usize >= features)
        {
            return corrupt(&format!("global features not ascending below {features}"));
        }
        if let Some(values) = &self.values
            && (values.len() != self.features.len() || values.iter().all(|&x| x == 1.0))
        {
            return corrupt("values that do not match the non-zeros");
        }
        if !self.targets.iter().chain(&self.norms).all(|x| x.is_finite()) {
            return corrupt("a target or norm that is not finite");
        }
        Ok(self)
    }

    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// The CSR arrays, for loops that hoist the value kind out of their rows: row starts
    /// (row `i` is `starts[i]..starts[i + 1]`), local features, values (`None`: all 1).
    #[inline]
    pub(crate) fn csr(&self) -> (&[usize], &[u32], Option<&[f64]>) {
        (&self.starts, &self.features, self.values.as_deref())
    }

    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// `x_i . z` for a vector `z` over the local features, summed in the row's order from
    /// `-0.0` (the bits of `Iterator::sum`), four non-zeros a turn: the loop's own
    /// bookkeeping was a third of the instructions of a dense row's dot product.
    #[inline]
    pub fn dot(&self, i: usize, z: &[f64]) -> f64 {
        let range = self.starts[i]..self.starts[i + 1];
        let features = &self.features[range.clone()];
        let mut sum = -0.0;
        match &self.values {
            None => {
                let mut f = features.chunks_exact(4);
                for f in &mut f {
                    sum += z[f[0] as usize];
                    sum += z[f[1] as usize];
                    sum += z[f[2] as usize];
                    sum += z[f[3] as usize];
                }
                f.remainder().iter().for_each(|&j| sum += z[j as usize]);
            }
            Some(values) => {
                let (mut f, mut x) = (features.chunks_exact(4), values[range].chunks_exact(4));
                for (f, x) in (&mut f).zip(&mut x) {
                    sum += z[f[0] as usize] * x[0];
                    sum += z[f[1] as usize] * x[1];
                    sum += z[f[2] as usize] * x[2];
                    sum += z[f[3] as usize] * x[3];
                }
                f.remainder().iter().zip(x.remainder()).for_each(|(&j, &x)| sum += z[j as usize] * x);
            }
        }
        sum
    }

    /// Row `i`'s non-zeros: local features, and their values (`None`: all 1).
    #[inline]
    pub fn row(&self, i: usize) -> (&[u32], Option<&[f64]>) {
        let range = self.starts[i]..self.starts[i + 1];
        (&self.features[range.clone()], self.values.as_ref().map(|v| &v[range]))
    }

    /// `y_j += (b scale_j) x_ij` (per-feature CoCoA: the local model moves by each
    /// feature's own `sigma'_j / lambda`).
    #[inline]
    pub fn add_scaled(&self, i: usize, b: f64, scale: &[f64], y: &mut [f64]) {
        let range = self.starts[i]..self.starts[i + 1];
        let features = &self.features[range.clone()];
        match &self.values {
            None => features.iter().for_each(|&j| y[j as usize] += b * scale[j as usize]),
            Some(values) => {
                features.iter().zip(&values[range]).for_each(|(&j, &x)| y[j as usize] += (b * scale[j as usize]) * x)
            }
        }
    }

    /// `sum_j weight_j x_ij^2` for a weight per local feature.
    pub fn weighted_norm(&self, i: usize, weight: &[f64]) -> f64 {
        let range = self.starts[i]..self.starts[i + 1];
        let features = &self.features[range.clone()];
        match &self.values {
            None => features.iter().map(|&j| weight[j as usize]).sum(),
            Some(values) => features.iter().zip(&values[range]).map(|(&j, &x)| weight[j as usize] * x * x).sum(),
        }
    }

    /// Asks the cache for what a step on row `i` reads first: its entry of the row starts,
    /// its target and norm (and, by the caller, its dual variable). `prefetch` is a hint
    /// that never faults and never changes a value ([`super::solver`]'s sweep passes the
    /// CPU's prefetch instruction, or nothing).
    #[inline(always)]
    pub(super) fn prefetch_head(&self, i: usize, prefetch: impl Fn(*const i8)) {
        prefetch((&self.starts[i] as *const usize).cast());
        prefetch((&self.targets[i] as *const f64).cast());
        prefetch((&self.norms[i] as *const f64).cast());
    }

    /// Asks the cache for row `i`'s local features (and values), one request per 64-byte
    /// line they span. Reads `starts[i]`, so it comes after [`Self::prefetch_head`] of the
    /// same row by a few steps.
    #[inline(always)]
    pub(super) fn prefetch_row(&self, i: usize, prefetch: impl Fn(*const i8)) {
        let range = self.starts[i]..self.starts[i + 1];
        let features = &self.features[range.clone()];
        // 16 features of 4 bytes a line; the last one covers the row's end.
        features.iter().step_by(16).chain(features.last()).for_each(|f| prefetch((f as *const u32).cast()));
        if let Some(values) = &self.values {
            values[range].iter().step_by(8).for_each(|x| prefetch((x as *const f64).cast()));
        }
    }

    /// `z += scale * x_i`, in the row's order, four non-zeros a turn (as [`Self::dot`]).
    #[inline]
    pub fn add_to(&self, i: usize, scale: f64, z: &mut [f64]) {
        let range = self.starts[i]..self.starts[i + 1];
        let features = &self.features[range.clone()];
        match &self.values {
            None => {
                let mut f = features.chunks_exact(4);
                for f in &mut f {
                    z[f[0] as usize] += scale;
                    z[f[1] as usize] += scale;
                    z[f[2] as usize] += scale;
                    z[f[3] as usize] += scale;
                }
                f.remainder().iter().for_each(|&j| z[j as usize] += scale);
            }
            Some(values) => {
                let (mut f, mut x) = (features.chunks_exact(4), values[range].chunks_exact(4));
                for (f, x) in (&mut f).zip(&mut x) {
                    z[f[0] as usize] += scale * x[0];
                    z[f[1] as usize] += scale * x[1];
                    z[f[2] as usize] += scale * x[2];
                    z[f[3] as usize] += scale * x[3];
                }
                f.remainder().iter().zip(x.remainder()).for_each(|(&j, &x)| z[j as usize] += scale * x);
            }
        }
    }
}
