//! A slot's rows as CSR, gathered from the grid's cells of the shards it overlaps.
//!
//! Features are renumbered locally (the slot's distinct features, ascending by global
//! index), so the local vectors of a slot are as long as the features it sees, however
//! many the model has.

use super::layout::Layout;
use crate::algorithm::GridSource;
use crate::error::EngineError;
use crate::loss::Loss;
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
    /// Reads slot `slot`'s rows: global feature = the block's offset + the feature's index
    /// within its block; within a row, non-zeros come block by block in cell order.
    /// `block_offsets` has one entry per block and the feature count last.
    pub fn gather<G: GridSource>(
        layout: &Layout,
        block_offsets: &[usize],
        loss: Loss,
        slot: usize,
        grid: &G,
    ) -> Result<Self, G::Error> {
        Self::gather_range(layout, block_offsets, loss, layout.slot_rows(slot), grid)
    }

    /// Reads the global rows `range` (any contiguous range, across shard boundaries), as
    /// [`Self::gather`] reads a slot's.
    pub fn gather_range<G: GridSource>(
        layout: &Layout,
        block_offsets: &[usize],
        loss: Loss,
        range: std::ops::Range<usize>,
        grid: &G,
    ) -> Result<Self, G::Error> {
        let n = range.len();
        // (row within the slot, global feature, value), gathered cell by cell.
        let mut entries: Vec<(u32, u32, f64)> = Vec::new();
        let mut targets = Vec::with_capacity(n);
        let mut first = 0; // slot row of the shard part's first row
        for part in layout.shard_parts(range) {
            for (block, &offset) in block_offsets[..block_offsets.len() - 1].iter().enumerate() {
                let cell = grid.cell(block, part.shard)?;
                let from = cell.rows.partition_point(|&r| (r as usize) < part.rows.start);
                let to = cell.rows.partition_point(|&r| (r as usize) < part.rows.end);
                for k in from..to {
                    let row = first + cell.rows[k] as usize - part.rows.start;
                    let feature = offset + cell.feature_ids[cell.local[k] as usize] as usize;
                    entries.push((row as u32, feature as u32, cell.value(k)));
                }
            }
            let shard_targets = grid.targets(part.shard)?;
            for &y in &shard_targets[part.rows.clone()] {
                let valid = if loss.is_classification() { y == 1.0 || y == -1.0 } else { y.is_finite() };
                if !valid {
                    return Err(EngineError::LabelDomain {
                        label: y,
                        loss: loss.name(),
                        domain: "targets of -1 or +1 (or finite for squared loss)",
                    }
                    .into());
                }
                targets.push(y);
            }
            first += part.rows.len();
        }
        Ok(Self::from_entries(n, entries, targets, block_offsets[block_offsets.len() - 1]))
    }

    /// CSR from `(row, global feature, value)` entries over `features` global features: a
    /// stable counting sort by row keeps each row's non-zeros in the order they were gathered.
    fn from_entries(n: usize, entries: Vec<(u32, u32, f64)>, targets: Vec<f64>, features: usize) -> Self {
        let (globals, local) = local_numbering(&entries, features);
        let mut starts = vec![0usize; n + 1];
        for e in &entries {
            starts[e.0 as usize + 1] += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let mut next = starts.clone();
        let mut features = vec![0u32; entries.len()];
        let mut values = vec![0f64; entries.len()];
        for (&(row, _, value), &feature) in entries.iter().zip(&local) {
            let at = next[row as usize];
            next[row as usize] += 1;
            features[at] = feature;
            values[at] = value;
        }
        let norms = (0..n).map(|i| values[starts[i]..starts[i + 1]].iter().map(|x| x * x).sum()).collect();
        let values = if values.iter().all(|&x| x == 1.0) { None } else { Some(values) };
        Self { starts, features, values, globals, targets, norms }
    }

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

/// The distinct global features of `entries`, ascending, and each entry's local feature (its
/// global's position in that list).
///
/// A dense table over the global features costs O(nnz + features) where sorting costs
/// O(nnz log nnz) and a binary search per non-zero (the slot's set-up before its first
/// epoch); it is used while the table is not much larger than the entries.
fn local_numbering(entries: &[(u32, u32, f64)], features: usize) -> (Vec<u32>, Vec<u32>) {
    const UNSEEN: u32 = u32::MAX;
    let dense = features <= 16 * entries.len().max(64) && entries.iter().all(|e| (e.1 as usize) < features);
    if dense {
        let mut table = vec![UNSEEN; features];
        for e in entries {
            table[e.1 as usize] = 0;
        }
        let mut globals = Vec::new();
        for (global, slot) in table.iter_mut().enumerate() {
            if *slot != UNSEEN {
                *slot = globals.len() as u32;
                globals.push(global as u32);
            }
        }
        let local = entries.iter().map(|e| table[e.1 as usize]).collect();
        (globals, local)
    } else {
        let mut globals: Vec<u32> = entries.iter().map(|e| e.1).collect();
        globals.sort_unstable();
        globals.dedup();
        let local = entries.iter().map(|e| globals.binary_search(&e.1).expect("listed above") as u32).collect();
        (globals, local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of numbering give the same local features: the dense table on a small
    /// feature space, the sort on one far larger than the entries.
    #[test]
    fn dense_and_sorted_numbering_agree() {
        let mut rng = crate::rng::SplitMix64::new(3);
        let entries: Vec<(u32, u32, f64)> =
            (0..500).map(|i| (i / 7, (rng.next_u64() % 300) as u32 * 3 + 11, 1.0)).collect();
        let dense = local_numbering(&entries, 1000);
        let sorted = local_numbering(&entries, 1 << 30);
        assert_eq!(dense, sorted);
        let (globals, local) = dense;
        assert!(globals.windows(2).all(|w| w[0] < w[1]), "globals ascend");
        for (e, &l) in entries.iter().zip(&local) {
            assert_eq!(globals[l as usize], e.1);
        }
    }
}
