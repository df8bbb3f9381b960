//! Gathering a slot's rows from the grid, straight into CSR.
//!
//! The rows are written where they end up, one shard part at a time: a part's cells are
//! walked twice, once to count each row's non-zeros and once to place them, so nothing
//! per non-zero is held but the CSR itself. Building the CSR from a list of `(row, feature,
//! value)` entries instead held 16 bytes per non-zero for the list, 4 for each entry's local
//! feature and 8 for a value even where all are 1: 1.1 GB beside the 0.14 GB CSR on
//! criteo-1m's one slot, the peak of a whole CoCoA run
//! (docs/benchmarks/cocoa-criteo-1m.md). The CSR is the same, field by field.

use super::layout::Layout;
use super::rows::SlotRows;
use crate::algorithm::GridSource;
use crate::error::EngineError;
use crate::grid::{Cell, CellValues};
use crate::loss::Loss;
use std::ops::{Deref, Range};

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
        range: Range<usize>,
        grid: &G,
    ) -> Result<Self, G::Error> {
        let n = range.len();
        let (offsets, features) = block_offsets.split_at(block_offsets.len() - 1);
        let mut csr = Csr { starts: vec![0; n + 1], features: Vec::new(), values: None };
        let mut targets = Vec::with_capacity(n);
        let mut first = 0; // slot row of the shard part's first row
        for part in layout.shard_parts(range) {
            let cells = (0..offsets.len()).map(|block| grid.cell(block, part.shard)).collect::<Result<Vec<_>, _>>()?;
            let spans: Vec<(&Cell, Range<usize>)> = cells
                .iter()
                .map(|cell| {
                    let from = cell.rows.partition_point(|&r| (r as usize) < part.rows.start);
                    let to = cell.rows.partition_point(|&r| (r as usize) < part.rows.end);
                    (cell.deref(), from..to)
                })
                .collect();
            csr.add_part(first, &part.rows, offsets, &spans);
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
        Ok(csr.into_rows(targets, features[0]))
    }
}

/// The CSR while it is gathered: features are still global.
struct Csr {
    starts: Vec<usize>,
    features: Vec<u32>,
    /// `None` while every value so far is 1; from the first that is not, all of them (the
    /// earlier ones 1).
    values: Option<Vec<f64>>,
}

impl Csr {
    /// Appends one shard part's rows (slot rows `first..`, shard rows `rows`): `spans` is
    /// each block's cell and the range of its non-zeros in `rows`, `offsets` each block's
    /// first global feature. A row's non-zeros come block by block, in cell order.
    fn add_part(&mut self, first: usize, rows: &Range<usize>, offsets: &[usize], spans: &[(&Cell, Range<usize>)]) {
        let counts = &mut self.starts[first + 1..first + rows.len() + 1];
        let mut real = false;
        for (cell, span) in spans {
            cell.rows[span.clone()].iter().for_each(|&r| counts[r as usize - rows.start] += 1);
            real |= match &cell.values {
                CellValues::Ones => false,
                CellValues::Real(v) => v[span.clone()].iter().any(|&x| x != 1.0),
                CellValues::Real32(v) => v[span.clone()].iter().any(|&x| x != 1.0),
            };
        }
        for i in first..first + rows.len() {
            self.starts[i + 1] += self.starts[i];
        }
        let end = self.starts[first + rows.len()];
        if real && self.values.is_none() {
            self.values = Some(vec![1.0; self.features.len()]);
        }
        self.features.resize(end, 0);
        if let Some(values) = &mut self.values {
            values.resize(end, 1.0);
        }
        let mut next = self.starts[first..first + rows.len()].to_vec();
        for ((cell, span), &offset) in spans.iter().zip(offsets) {
            for k in span.clone() {
                let at = &mut next[cell.rows[k] as usize - rows.start];
                let feature = offset + cell.feature_ids[cell.local[k] as usize] as usize;
                self.features[*at] = feature as u32;
                if let Some(values) = &mut self.values {
                    values[*at] = cell.value(k);
                }
                *at += 1;
            }
        }
    }

    /// The slot's rows, features numbered locally (over `features` global ones), `|x_i|^2`
    /// of each row summed in the row's order.
    fn into_rows(self, targets: Vec<f64>, features: usize) -> SlotRows {
        let Csr { starts, features: mut local, values } = self;
        let norms = (0..targets.len())
            .map(|i| {
                let range = starts[i]..starts[i + 1];
                match &values {
                    Some(values) => values[range].iter().map(|x| x * x).sum(),
                    None => range.map(|_| 1.0f64).sum(),
                }
            })
            .collect();
        let globals = number_locally(&mut local, features);
        local.shrink_to_fit();
        SlotRows { starts, features: local, values, globals, targets, norms }
    }
}

/// Renumbers global features `ids` in place by their position among the distinct ones, and
/// returns those, ascending.
///
/// A dense table over the global features costs O(nnz + features) where sorting costs
/// O(nnz log nnz) and a binary search per non-zero (the slot's set-up before its first
/// epoch); it is used while the table is not much larger than the non-zeros.
fn number_locally(ids: &mut [u32], features: usize) -> Vec<u32> {
    const UNSEEN: u32 = u32::MAX;
    let dense = features <= 16 * ids.len().max(64) && ids.iter().all(|&j| (j as usize) < features);
    if dense {
        let mut table = vec![UNSEEN; features];
        ids.iter().for_each(|&j| table[j as usize] = 0);
        let mut globals = Vec::new();
        for (global, slot) in table.iter_mut().enumerate() {
            if *slot != UNSEEN {
                *slot = globals.len() as u32;
                globals.push(global as u32);
            }
        }
        ids.iter_mut().for_each(|j| *j = table[*j as usize]);
        globals
    } else {
        let mut globals = ids.to_vec();
        globals.sort_unstable();
        globals.dedup();
        ids.iter_mut().for_each(|j| *j = globals.binary_search(j).expect("listed above") as u32);
        globals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::InMemoryGrid;

    /// Row `row` of `grid` by the definition: block by block, its non-zeros in cell order,
    /// as (global feature, value).
    fn row_by_definition(grid: &InMemoryGrid, offsets: &[usize], row: usize) -> Vec<(u32, f64)> {
        let (mut shard, mut at) = (0, row);
        while at >= grid.targets[shard].len() {
            at -= grid.targets[shard].len();
            shard += 1;
        }
        let mut entries = Vec::new();
        for (block, cells) in grid.cells.iter().enumerate() {
            let cell = &cells[shard];
            for k in (0..cell.nnz()).filter(|&k| cell.rows[k] as usize == at) {
                entries
                    .push(((offsets[block] + cell.feature_ids[cell.local[k] as usize] as usize) as u32, cell.value(k)));
            }
        }
        entries
    }

    /// Gathered rows are the grid's rows: each row's non-zeros in the definition's order and
    /// values, `|x_i|^2` summed in that order (the same bits), local features ranked by
    /// global ones over exactly the features the rows hold, values kept only when one is
    /// not 1 — on real, binary and mixed grids (a slot whose first shards are binary and
    /// later ones real), over ranges that start and end inside shards.
    #[test]
    fn gathered_rows_are_the_grids_rows() {
        let real = crate::synthetic::problem(Loss::Hinge, 21, 300, 37).grid;
        let real_block = real.cells.iter().position(|c| matches!(c[0].values, CellValues::Real(_))).expect("one");
        let mut binary = real.clone();
        binary.cells.remove(real_block);
        binary.shapes.remove(real_block);
        let mut mixed = real.clone();
        let shards = mixed.cells[real_block].len();
        mixed.cells[real_block][..shards / 2].iter_mut().for_each(|cell| cell.values = CellValues::Ones);
        for (name, grid) in [("real", real), ("binary", binary), ("mixed", mixed)] {
            let mut offsets = vec![0];
            grid.shapes.iter().for_each(|s| offsets.push(offsets.last().unwrap() + s.features));
            let layout = Layout::new(grid.targets.iter().map(Vec::len).collect(), 1, 1);
            for range in [0..300, 5..290, 40..41, 74..150, 100..100] {
                let rows = SlotRows::gather_range(&layout, &offsets, Loss::Hinge, range.clone(), &grid).unwrap();
                let defined: Vec<Vec<(u32, f64)>> =
                    range.clone().map(|i| row_by_definition(&grid, &offsets, i)).collect();
                let mut globals: Vec<u32> = defined.iter().flatten().map(|e| e.0).collect();
                globals.sort_unstable();
                globals.dedup();
                assert_eq!(rows.globals, globals, "{name} {range:?}");
                let ones = defined.iter().flatten().all(|e| e.1 == 1.0);
                assert_eq!(rows.values.is_none(), ones, "{name} {range:?}: values kept exactly when one is not 1");
                for (i, row) in defined.iter().enumerate() {
                    let (features, values) = rows.row(i);
                    let got: Vec<(u32, f64)> = features
                        .iter()
                        .enumerate()
                        .map(|(k, &j)| (rows.globals[j as usize], values.map_or(1.0, |v| v[k])))
                        .collect();
                    assert_eq!(&got, row, "{name} {range:?}: row {i}");
                    let norm: f64 = row.iter().map(|e| e.1 * e.1).sum();
                    assert_eq!(rows.norms[i].to_bits(), norm.to_bits(), "{name} {range:?}: norm of row {i}");
                }
                let targets: Vec<f64> = grid.targets.iter().flatten().copied().collect();
                assert_eq!(rows.targets, targets[range], "{name}");
            }
        }
    }

    /// Both ways of numbering give the same local features: the dense table on a small
    /// feature space, the sort on one far larger than the non-zeros.
    #[test]
    fn dense_and_sorted_numbering_agree() {
        let mut rng = crate::rng::SplitMix64::new(3);
        let ids: Vec<u32> = (0..500).map(|_| (rng.next_u64() % 300) as u32 * 3 + 11).collect();
        let (mut dense, mut sorted) = (ids.clone(), ids.clone());
        let globals = number_locally(&mut dense, 1000);
        assert_eq!(globals, number_locally(&mut sorted, 1 << 30));
        assert_eq!(dense, sorted);
        assert!(globals.windows(2).all(|w| w[0] < w[1]), "globals ascend");
        for (&global, &local) in ids.iter().zip(&dense) {
            assert_eq!(globals[local as usize], global);
        }
    }
}
