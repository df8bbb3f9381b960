//! The data grid in memory: one [`Cell`] per (block, row shard), as in SCD section 4.1.

use serde::{Deserialize, Serialize};

/// The non-zeros of one block over one row shard, sorted by row.
///
/// Features are numbered locally (`local`) so a cell's statistics are a dense vector as
/// long as the cell's distinct features, however many features the block has; `feature_ids`
/// maps a local number to the feature's index within its block (ascending).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cell {
    /// Row of each non-zero within the shard, non-decreasing.
    pub rows: Vec<u32>,
    /// Local feature number of each non-zero.
    pub local: Vec<u32>,
    /// Block feature index of each local feature, ascending.
    pub feature_ids: Vec<u32>,
    pub values: CellValues,
}

/// Values of a cell's non-zeros. Binary data (one-hot categoricals, a9a) stores none.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum CellValues {
    #[default]
    Ones,
    Real(Vec<f64>),
}

impl Cell {
    pub fn nnz(&self) -> usize {
        self.rows.len()
    }

    /// The value of non-zero `k`.
    #[inline(always)]
    pub fn value(&self, k: usize) -> f64 {
        match &self.values {
            CellValues::Ones => 1.0,
            CellValues::Real(v) => v[k],
        }
    }

    /// Builds a cell from (row, block feature, value) triples in any order.
    ///
    /// `linea prepare` hands them over in row order, one shard of one variable at a time,
    /// so only rows whose features are out of order are sorted, and local feature numbers come
    /// from a table over the block's features when it is not much larger than the cell
    /// (a binary search per non-zero otherwise). Either way the cell is the same.
    pub fn from_triples(mut triples: Vec<(u32, u32, f64)>) -> Cell {
        if !triples.is_sorted_by_key(|t| (t.0, t.1)) {
            if triples.is_sorted_by_key(|t| t.0) {
                // Rows in order, features in first-seen order: sort within each row only
                // (stable, as the whole sort is, so repeated features keep their order).
                triples.chunk_by_mut(|a, b| a.0 == b.0).for_each(|row| row.sort_by_key(|t| t.1));
            } else {
                triples.sort_by_key(|t| (t.0, t.1));
            }
        }
        let features_end = triples.iter().map(|t| t.1 as usize + 1).max().unwrap_or(0);
        let (feature_ids, local) = if features_end <= 4 * triples.len() + 1024 {
            let mut local_of = vec![u32::MAX; features_end];
            triples.iter().for_each(|t| local_of[t.1 as usize] = 0);
            let mut feature_ids = Vec::new();
            for (feature, local) in local_of.iter_mut().enumerate() {
                if *local == 0 {
                    *local = feature_ids.len() as u32;
                    feature_ids.push(feature as u32);
                }
            }
            (feature_ids, triples.iter().map(|t| local_of[t.1 as usize]).collect())
        } else {
            let mut feature_ids: Vec<u32> = triples.iter().map(|t| t.1).collect();
            feature_ids.sort_unstable();
            feature_ids.dedup();
            let local =
                triples.iter().map(|t| feature_ids.binary_search(&t.1).expect("feature listed") as u32).collect();
            (feature_ids, local)
        };
        let all_ones = triples.iter().all(|t| t.2 == 1.0);
        Cell {
            rows: triples.iter().map(|t| t.0).collect(),
            local,
            values: if all_ones { CellValues::Ones } else { CellValues::Real(triples.iter().map(|t| t.2).collect()) },
            feature_ids,
        }
    }

    /// Whether some row has more than one non-zero here.
    pub fn has_repeated_rows(&self) -> bool {
        self.rows.windows(2).any(|w| w[0] == w[1])
    }
}

/// What the solver needs to know about a block, beyond its cells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockShape {
    /// Number of features (parameters) in the block.
    pub features: usize,
    /// Every example has at most one non-zero in the block (Definition 1 of the SCD paper),
    /// so the block's coordinate updates are independent and full steps are exact.
    pub pure: bool,
    /// Largest |x| of each feature over all rows; bounds the logistic Newton step.
    pub max_abs: Vec<f64>,
}

/// A whole grid in memory: cells `[block][shard]` and each shard's targets.
#[derive(Debug, Clone, Default)]
pub struct InMemoryGrid {
    pub shapes: Vec<BlockShape>,
    pub cells: Vec<Vec<Cell>>,
    pub targets: Vec<Vec<f64>>,
}

impl InMemoryGrid {
    pub fn nnz(&self) -> u64 {
        self.cells.iter().flatten().map(|c| c.nnz() as u64).sum()
    }

    pub fn rows(&self) -> usize {
        self.targets.iter().map(Vec::len).sum()
    }

    /// Drops every cell (the blocks stay, empty; the shapes and targets stay): for a run whose
    /// units hold their own copy of the rows ([`crate::algorithm::Kernel::units_hold_their_data`]).
    /// A cell read afterwards is an error, never a wrong value.
    pub fn release_cells(&mut self) {
        self.cells.iter_mut().for_each(|block| *block = Vec::new());
    }
}

impl crate::algorithm::GridSource for InMemoryGrid {
    type Error = crate::EngineError;
    type CellRef<'a> = &'a Cell;
    type TargetsRef<'a> = &'a [f64];

    fn blocks(&self) -> usize {
        self.cells.len()
    }

    fn shards(&self) -> usize {
        self.targets.len()
    }

    fn rows(&self, shard: usize) -> usize {
        self.targets[shard].len()
    }

    fn cell(&self, block: usize, shard: usize) -> Result<&Cell, crate::EngineError> {
        self.cells[block].get(shard).ok_or_else(|| {
            crate::EngineError::Corrupt(format!("cell ({block}, {shard}) read after the grid's cells were released"))
        })
    }

    fn targets(&self, shard: usize) -> Result<&[f64], crate::EngineError> {
        Ok(&self.targets[shard])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Both ways of numbering features (the table, the binary search for features far
        /// beyond the cell's size) and the three ways of sorting (none, within rows, all)
        /// give the cell of the definition:
        /// non-zeros by (row, feature), features numbered in increasing order.
        #[test]
        fn a_cell_is_its_triples_sorted_with_features_numbered_in_order(
            triples in prop::collection::vec((0u32..50, prop_oneof![0u32..40, 0u32..5_000_000], -2.0f64..2.0), 0..300),
            order in 0u8..3,
            ones in any::<bool>(),
        ) {
            let mut triples: Vec<(u32, u32, f64)> =
                triples.into_iter().map(|(r, f, v)| (r, f, if ones { 1.0 } else { v })).collect();
            triples.sort_by_key(|t| (t.0, t.1));
            triples.dedup_by_key(|t| (t.0, t.1));
            let expected = triples.clone();
            match order {
                0 => {}                                                                  // sorted
                1 => triples.reverse(),                                                  // rows out of order
                _ => triples.chunk_by_mut(|a, b| a.0 == b.0).for_each(|row| row.reverse()), // features
            }
            let cell = Cell::from_triples(triples);
            let mut features: Vec<u32> = expected.iter().map(|t| t.1).collect();
            features.sort_unstable();
            features.dedup();
            prop_assert_eq!(&cell.feature_ids, &features);
            prop_assert_eq!(&cell.rows, &expected.iter().map(|t| t.0).collect::<Vec<_>>());
            let global: Vec<u32> = cell.local.iter().map(|&l| cell.feature_ids[l as usize]).collect();
            prop_assert_eq!(global, expected.iter().map(|t| t.1).collect::<Vec<_>>());
            for (k, t) in expected.iter().enumerate() {
                prop_assert_eq!(cell.value(k), t.2);
            }
            prop_assert_eq!(matches!(cell.values, CellValues::Ones), expected.iter().all(|t| t.2 == 1.0));
        }
    }
}
