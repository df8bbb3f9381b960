//! Which rows each slot owns, and the grains exact sums are rounded over.
//!
//! The rows (numbered globally, shard after shard) are cut into *grains* of [`GRAIN`] rows
//! (the last may be shorter). A slot owns a contiguous run of whole grains. Every batch sum
//! (loss, gradient) is taken in `f64` over one grain in row order and rounded once to fixed
//! point, so it depends on the grains alone — not on how grains are grouped into slots, nor
//! on which worker runs a slot: L-BFGS gives the same bits for any slot and worker count.

use crate::cocoa::layout::Layout as RowLayout;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Rows per grain: small enough that a9a has 16 and slots can be many, large enough that
/// a grain's sparse gradient is much shorter than its rows.
pub const GRAIN: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    rows: RowLayout,
    slots: usize,
}

impl Layout {
    /// `slots` must be in `1..=grains` (the config checks it against [`Self::grains_of`]).
    pub fn new(shard_rows: Vec<usize>, slots: usize) -> Self {
        Self { rows: RowLayout::new(shard_rows, 1, 1), slots }
    }

    /// The grain count of `rows` rows.
    pub fn grains_of(rows: usize) -> usize {
        rows.div_ceil(GRAIN)
    }

    pub fn rows(&self) -> usize {
        self.rows.rows()
    }

    pub fn grains(&self) -> usize {
        Self::grains_of(self.rows())
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Grains of slot `k`: `[k G / K, (k+1) G / K)`.
    pub fn slot_grains(&self, k: usize) -> Range<usize> {
        let g = self.grains();
        k * g / self.slots..(k + 1) * g / self.slots
    }

    /// Global rows of slot `k`.
    pub fn slot_rows(&self, k: usize) -> Range<usize> {
        let grains = self.slot_grains(k);
        (grains.start * GRAIN).min(self.rows())..(grains.end * GRAIN).min(self.rows())
    }

    /// The grid layout the row gatherer reads shards through.
    pub fn row_layout(&self) -> &RowLayout {
        &self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_own_whole_grains_and_cover_every_row_once() {
        let layout = Layout::new(vec![5000, 3000, 2500], 3);
        assert_eq!(layout.grains(), 6);
        let mut next = 0;
        for k in 0..3 {
            let rows = layout.slot_rows(k);
            assert_eq!(rows.start, next);
            assert_eq!(rows.start % GRAIN, 0);
            next = rows.end;
        }
        assert_eq!(next, 10_500);
        assert_eq!(Layout::new(vec![10], 1).slot_rows(0), 0..10);
    }
}
