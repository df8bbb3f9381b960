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
    pub fn from_triples(mut triples: Vec<(u32, u32, f64)>) -> Cell {
        triples.sort_by_key(|t| (t.0, t.1));
        let mut feature_ids: Vec<u32> = triples.iter().map(|t| t.1).collect();
        feature_ids.sort_unstable();
        feature_ids.dedup();
        let local_of = |f: u32| feature_ids.binary_search(&f).expect("feature listed") as u32;
        let all_ones = triples.iter().all(|t| t.2 == 1.0);
        Cell {
            rows: triples.iter().map(|t| t.0).collect(),
            local: triples.iter().map(|t| local_of(t.1)).collect(),
            values: if all_ones { CellValues::Ones } else { CellValues::Real(triples.iter().map(|t| t.2).collect()) },
            feature_ids: feature_ids.clone(),
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
        Ok(&self.cells[block][shard])
    }

    fn targets(&self, shard: usize) -> Result<&[f64], crate::EngineError> {
        Ok(&self.targets[shard])
    }
}
