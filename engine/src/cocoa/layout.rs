//! Which rows each slot owns, and the seeded order it visits them in.
//!
//! The rows (numbered globally, shard after shard) are cut into P contiguous partitions of
//! near-equal size; slot k of K owns partitions `[k P/K, (k+1) P/K)`, a contiguous row
//! range. P is a multiple of K, so scaling in from K to K/m slots merges whole partitions
//! (Chicle, section 3.1) and a partition's rows and coordinate order never depend on the
//! slot that owns it.

use crate::rng::{SplitMix64, shuffle};
use serde::{Deserialize, Serialize};
use std::ops::Range;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Rows of each shard, in grid order.
    shard_rows: Vec<usize>,
    partitions: usize,
    slots: usize,
}

/// The part of a shard that falls into a row range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPart {
    pub shard: usize,
    /// Rows within the shard.
    pub rows: Range<usize>,
}

impl Layout {
    /// `partitions` must be a positive multiple of `slots` (the config checks it).
    pub fn new(shard_rows: Vec<usize>, partitions: usize, slots: usize) -> Self {
        debug_assert!(slots > 0 && partitions.is_multiple_of(slots));
        Self { shard_rows, partitions, slots }
    }

    /// The same partitions owned by `slots` slots (a scale-in); `slots` must divide P.
    pub fn with_slots(&self, slots: usize) -> Self {
        Self::new(self.shard_rows.clone(), self.partitions, slots)
    }

    /// How many slots of `old` each slot of this layout merges, when this is `old` scaled in
    /// (the same rows and partitions, the slot count a divisor of `old`'s): slot k then owns
    /// exactly old slots `k m..(k + 1) m`, their rows one after the other.
    pub fn merge_factor(&self, old: &Layout) -> Option<usize> {
        let same = self.shard_rows == old.shard_rows && self.partitions == old.partitions;
        (same && old.slots.is_multiple_of(self.slots)).then(|| old.slots / self.slots)
    }

    pub fn rows(&self) -> usize {
        self.shard_rows.iter().sum()
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Global rows of partition `p`: `[p n / P, (p+1) n / P)`.
    pub fn partition(&self, p: usize) -> Range<usize> {
        let n = self.rows() as u128;
        let at = |p: usize| (p as u128 * n / self.partitions as u128) as usize;
        at(p)..at(p + 1)
    }

    /// The partitions of slot `k`.
    pub fn slot_partitions(&self, k: usize) -> Range<usize> {
        let per = self.partitions / self.slots;
        k * per..(k + 1) * per
    }

    /// Global rows of slot `k`.
    pub fn slot_rows(&self, k: usize) -> Range<usize> {
        let parts = self.slot_partitions(k);
        self.partition(parts.start).start..self.partition(parts.end - 1).end
    }

    /// The shards that overlap global rows `range`, with the overlapping rows of each.
    pub fn shard_parts(&self, range: Range<usize>) -> Vec<ShardPart> {
        let mut parts = Vec::new();
        let mut first = 0;
        for (shard, &n) in self.shard_rows.iter().enumerate() {
            let (lo, hi) = (range.start.max(first), range.end.min(first + n));
            if lo < hi {
                parts.push(ShardPart { shard, rows: lo - first..hi - first });
            }
            first += n;
        }
        parts
    }

    /// The order in which slot `k` visits its rows (numbered from the slot's first row) in
    /// one local pass: each partition's rows in a permutation seeded by
    /// `(seed, epoch, pass, partition)`, the partitions interleaved row by row so that one
    /// pass mixes them as a single local problem.
    pub fn pass_order(&self, k: usize, seed: u64, epoch: u32, pass: u32) -> Vec<u32> {
        let base = self.slot_rows(k).start;
        let orders: Vec<Vec<u32>> = self
            .slot_partitions(k)
            .map(|p| {
                let range = self.partition(p);
                let mut order: Vec<u32> = (range.start - base..range.end - base).map(|i| i as u32).collect();
                shuffle(&mut order, order_seed(seed, epoch, pass, p));
                order
            })
            .collect();
        interleave(orders)
    }
}

/// The partitions' orders taken in turns (the first row of each, then the second, ...),
/// written into one vector of the right size: built by chained iterators it cost more than
/// the shuffles themselves (~65 instructions a row on higgs-sample, 6% of a K = 1 run).
fn interleave(mut orders: Vec<Vec<u32>>) -> Vec<u32> {
    if orders.len() == 1 {
        return orders.pop().expect("one order");
    }
    let longest = orders.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(orders.iter().map(Vec::len).sum());
    for r in 0..longest {
        for order in &orders {
            if let Some(&i) = order.get(r) {
                out.push(i);
            }
        }
    }
    out
}

/// One seed from the tuple, each component mixed through SplitMix64 so that neighbouring
/// tuples give unrelated orders.
fn order_seed(seed: u64, epoch: u32, pass: u32, partition: usize) -> u64 {
    [epoch as u64, pass as u64, partition as u64].iter().fold(seed, |s, &v| SplitMix64::new(s ^ v).next_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_own_whole_partitions_and_cover_every_row_once() {
        let layout = Layout::new(vec![7, 7, 3], 6, 3);
        assert_eq!(layout.rows(), 17);
        let mut next = 0;
        for k in 0..3 {
            let rows = layout.slot_rows(k);
            assert_eq!(rows.start, next);
            next = rows.end;
            let parts = layout.slot_partitions(k);
            assert_eq!(layout.partition(parts.start).start, rows.start);
            assert_eq!(layout.partition(parts.end - 1).end, rows.end);
        }
        assert_eq!(next, 17);
        assert_eq!(
            layout.shard_parts(5..15),
            vec![
                ShardPart { shard: 0, rows: 5..7 },
                ShardPart { shard: 1, rows: 0..7 },
                ShardPart { shard: 2, rows: 0..1 }
            ]
        );
    }

    #[test]
    fn pass_orders_are_seeded_permutations_of_the_slot() {
        let layout = Layout::new(vec![50, 50], 4, 2);
        let order = layout.pass_order(1, 9, 3, 0);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<u32>>());
        assert_eq!(order, layout.pass_order(1, 9, 3, 0));
        assert_ne!(order, layout.pass_order(1, 9, 3, 1));
        assert_ne!(order, layout.pass_order(1, 9, 4, 0));
        assert_ne!(order, layout.pass_order(1, 10, 3, 0));
        // A partition's order is its own: the same whichever slot owns it.
        let merged = Layout::new(vec![50, 50], 4, 1).pass_order(0, 9, 3, 0);
        let of_partition =
            |o: &[u32], range: Range<u32>| o.iter().copied().filter(|i| range.contains(i)).collect::<Vec<_>>();
        assert_eq!(
            of_partition(&merged, 75..100),
            of_partition(&order, 25..50).iter().map(|i| i + 50).collect::<Vec<_>>()
        );
    }
}
