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
    pub rows: Ids,
    /// Local feature number of each non-zero.
    pub local: Ids,
    /// Block feature index of each local feature, ascending.
    pub feature_ids: Vec<u32>,
    pub values: CellValues,
}

/// How many entries [`Ids`] can share: a shard's rows at the default of 16,384 rows a shard,
/// four times over.
const SHARED_IDS: usize = 1 << 16;

/// `0, 1, 2, ...`: the rows of every cell that holds every row of its shard once.
static ASCENDING: [u32; SHARED_IDS] = {
    let mut ids = [0; SHARED_IDS];
    let mut i = 0;
    while i < SHARED_IDS {
        ids[i] = i as u32;
        i += 1;
    }
    ids
};

/// The local feature numbers of every cell of one feature.
static ZEROS: [u32; SHARED_IDS] = [0; SHARED_IDS];

/// A cell's rows or local feature numbers, read as a slice. Dense numeric columns (protein,
/// higgs: one feature a block, a value in every row) would otherwise hold two `u32`s per
/// non-zero that say nothing: rows `0, 1, 2, ...` and local number 0 throughout, 41 MB each
/// of the 179 MB heap when SCD trained protein. Such runs are a prefix of one static array
/// that all cells share, so a cell holds only its values.
#[derive(Debug, Clone)]
pub enum Ids {
    Owned(Vec<u32>),
    /// The first `n` of `0, 1, 2, ...`.
    Ascending(usize),
    /// `n` zeros.
    Zeros(usize),
}

impl Ids {
    /// Heap bytes this holds (a shared run holds none).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Ids::Owned(ids) => ids.len() * 4,
            Ids::Ascending(_) | Ids::Zeros(_) => 0,
        }
    }
}

impl Default for Ids {
    fn default() -> Self {
        Ids::Owned(Vec::new())
    }
}

impl From<Vec<u32>> for Ids {
    /// A shared run where `ids` is one, else `ids` itself.
    fn from(ids: Vec<u32>) -> Self {
        let n = ids.len();
        if n > 0 && n <= SHARED_IDS {
            if ids.iter().all(|&id| id == 0) {
                return Ids::Zeros(n);
            }
            if ids.iter().enumerate().all(|(i, &id)| id as usize == i) {
                return Ids::Ascending(n);
            }
        }
        Ids::Owned(ids)
    }
}

impl std::ops::Deref for Ids {
    type Target = [u32];
    #[inline(always)]
    fn deref(&self) -> &[u32] {
        match self {
            Ids::Owned(ids) => ids,
            Ids::Ascending(n) => &ASCENDING[..*n],
            Ids::Zeros(n) => &ZEROS[..*n],
        }
    }
}

impl<'a> IntoIterator for &'a Ids {
    type Item = &'a u32;
    type IntoIter = std::slice::Iter<'a, u32>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Equal when the ids are, however they are held.
impl PartialEq for Ids {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

/// Values of a cell's non-zeros. Binary data (one-hot categoricals, a9a) stores none.
#[derive(Debug, Clone, Default)]
pub enum CellValues {
    #[default]
    Ones,
    Real(Vec<f64>),
    /// Values the grid stores as `f32`s (a cell whose values are all exactly `f32`s, as a
    /// fifth of protein's are), kept so when decoded: half the memory of
    /// [`CellValues::Real`], and each read as `f64` is the same number, so every sum has the
    /// same bits.
    Real32(Vec<f32>),
}

/// Equal when the values are the same numbers, however they are held.
impl PartialEq for CellValues {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (CellValues::Ones, CellValues::Ones) => true,
            (CellValues::Real(a), CellValues::Real(b)) => a == b,
            (CellValues::Real32(a), CellValues::Real32(b)) => a == b,
            (CellValues::Real(a), CellValues::Real32(b)) | (CellValues::Real32(b), CellValues::Real(a)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| x == y as f64)
            }
            _ => false,
        }
    }
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
            CellValues::Real32(v) => v[k] as f64,
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
        let (feature_ids, local): (Vec<u32>, Vec<u32>) = if features_end <= 4 * triples.len() + 1024 {
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
            rows: triples.iter().map(|t| t.0).collect::<Vec<_>>().into(),
            local: local.into(),
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

    #[test]
    fn a_dense_one_feature_cell_holds_only_its_values() {
        // A numeric column's cell with a value in every row of its shard.
        let dense = Cell::from_triples((0..1000).map(|row| (row, 3, 0.5 + row as f64)).collect());
        assert!(matches!(dense.rows, Ids::Ascending(1000)) && matches!(dense.local, Ids::Zeros(1000)));
        assert_eq!(dense.rows.heap_bytes() + dense.local.heap_bytes(), 0);
        assert_eq!((dense.rows[999], dense.local[999], dense.feature_ids.as_slice()), (999, 0, &[3][..]));
        // A row missing, or a second feature: its own vectors, as before.
        let gap = Cell::from_triples((0..1000).filter(|&row| row != 500).map(|row| (row, 3, 1.5)).collect());
        assert!(matches!(gap.rows, Ids::Owned(_)) && matches!(gap.local, Ids::Zeros(999)));
        let two = Cell::from_triples((0..1000).map(|row| (row, row % 2, 1.5)).collect());
        assert!(matches!(two.rows, Ids::Ascending(1000)) && matches!(two.local, Ids::Owned(_)));
        assert_eq!(two.local.heap_bytes(), 4000);
        // Past the shared runs' length: owned.
        let long: Ids = (0..SHARED_IDS as u32 + 1).collect::<Vec<_>>().into();
        assert!(matches!(long, Ids::Owned(_)));
        // Equal as slices, however held.
        assert_eq!(Ids::Ascending(3), Ids::Owned(vec![0, 1, 2]));
        assert_ne!(Ids::Zeros(3), Ids::Ascending(3));
        assert!(Ids::from(Vec::new()).is_empty());
    }

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
            prop_assert_eq!(&cell.rows[..], &expected.iter().map(|t| t.0).collect::<Vec<_>>()[..]);
            let global: Vec<u32> = cell.local.iter().map(|&l| cell.feature_ids[l as usize]).collect();
            prop_assert_eq!(global, expected.iter().map(|t| t.1).collect::<Vec<_>>());
            for (k, t) in expected.iter().enumerate() {
                prop_assert_eq!(cell.value(k), t.2);
            }
            prop_assert_eq!(matches!(cell.values, CellValues::Ones), expected.iter().all(|t| t.2 == 1.0));
        }
    }
}
