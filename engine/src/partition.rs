//! Splitting a variable's features into blocks (SCD paper, section 3.2.3).
//!
//! A block is pure when no example has two non-zeros in it; pure blocks take exact full
//! steps. Two splits are offered, both deterministic functions of the data:
//!
//! * [`pure_coloring`] for inputs with no variables (libsvm): greedy first-fit coloring of
//!   the feature co-occurrence graph, so every block is pure. Features go in decreasing
//!   order of non-zeros, each into the first block none of whose rows it shares. At most
//!   [`MAX_COLOURS`] colours are opened: a feature that fits none of them (a row with more
//!   non-zeros than that, or a feature repeated within a row) goes to impure blocks of
//!   consecutive such features, at most [`OVERFLOW_FEATURES`] each. So a variable of `F`
//!   features makes at most `MAX_COLOURS + ceil(F / OVERFLOW_FEATURES)` blocks, and the
//!   work is at most `MAX_COLOURS` bit tests per non-zero however the rows are shaped.
//! * [`balanced_split`] for a set-valued variable: the paper's `N_Z(X^v) / |S|` blocks, so
//!   about one feature per example falls in each. Features go in decreasing order of
//!   non-zeros, each into the block it shares fewest rows with (ties: fewer non-zeros,
//!   then lower index), which keeps the blocks as pure and as even as the data allows.

/// Most pure blocks [`pure_coloring`] opens, and most blocks [`balanced_split`] is asked for.
pub const MAX_COLOURS: usize = 256;

/// Most features in one of the impure blocks that take what no colour can.
pub const OVERFLOW_FEATURES: usize = 65_536;

/// Rows (global indices) of each feature, ascending.
pub type FeatureRows = [Vec<u32>];

struct Bits(Vec<u64>);

impl Bits {
    fn new(rows: usize) -> Self {
        Bits(vec![0; rows.div_ceil(64)])
    }
    fn get(&self, r: u32) -> bool {
        self.0[r as usize / 64] >> (r % 64) & 1 == 1
    }
    fn set(&mut self, r: u32) {
        self.0[r as usize / 64] |= 1 << (r % 64);
    }
}

fn by_decreasing_nnz(features: &FeatureRows) -> Vec<usize> {
    let mut order: Vec<usize> = (0..features.len()).collect();
    order.sort_by_key(|&f| (std::cmp::Reverse(features[f].len()), f));
    order
}

/// Block of each feature: blocks `0..c` (`c <= MAX_COLOURS`) are pure colours; features
/// that fit none follow in impure blocks of at most [`OVERFLOW_FEATURES`], in index order.
pub fn pure_coloring(features: &FeatureRows, rows: usize) -> Vec<u32> {
    let mut blocks: Vec<Bits> = Vec::new();
    // Colours already used in each row: a row that has all of them rejects a feature at once.
    let mut used = vec![0u16; rows];
    let mut assignment = vec![u32::MAX; features.len()];
    for f in by_decreasing_nnz(features) {
        let rows_of = &features[f];
        if rows_of.windows(2).any(|w| w[0] == w[1]) || rows_of.iter().any(|&r| used[r as usize] as usize >= MAX_COLOURS)
        {
            continue; // no colour can take it
        }
        let fits = |b: &Bits| rows_of.iter().all(|&r| !b.get(r));
        let block = match blocks.iter().position(fits) {
            Some(b) => b,
            None if blocks.len() < MAX_COLOURS => {
                blocks.push(Bits::new(rows));
                blocks.len() - 1
            }
            None => continue,
        };
        for &r in rows_of {
            blocks[block].set(r);
            used[r as usize] += 1;
        }
        assignment[f] = block as u32;
    }
    let colours = blocks.len() as u32;
    for (overflow, a) in assignment.iter_mut().filter(|a| **a == u32::MAX).enumerate() {
        *a = colours + (overflow / OVERFLOW_FEATURES) as u32;
    }
    assignment
}

/// Block of each feature among `k` blocks.
pub fn balanced_split(features: &FeatureRows, rows: usize, k: usize) -> Vec<u32> {
    let k = k.max(1);
    let mut blocks: Vec<(Bits, usize)> = (0..k).map(|_| (Bits::new(rows), 0)).collect();
    let mut assignment = vec![0u32; features.len()];
    for f in by_decreasing_nnz(features) {
        let rows_of = &features[f];
        let block = (0..k)
            .min_by_key(|&b| (rows_of.iter().filter(|&&r| blocks[b].0.get(r)).count(), blocks[b].1, b))
            .expect("k >= 1");
        rows_of.iter().for_each(|&r| blocks[block].0.set(r));
        blocks[block].1 += rows_of.len();
        assignment[f] = block as u32;
    }
    assignment
}

/// Whether no row appears twice among the rows of `members` (features of one block).
pub fn members_are_pure(features: &FeatureRows, rows: usize, members: &[u32]) -> bool {
    let mut seen = Bits::new(rows);
    for &f in members {
        for &r in &features[f as usize] {
            if seen.get(r) {
                return false;
            }
            seen.set(r);
        }
    }
    true
}

/// Whether no row appears twice among the features assigned to each block.
pub fn is_pure(features: &FeatureRows, rows: usize, assignment: &[u32], block: u32) -> bool {
    let mut seen = Bits::new(rows);
    for rows_of in features.iter().zip(assignment).filter(|(_, b)| **b == block).map(|(r, _)| r) {
        for &r in rows_of {
            if seen.get(r) {
                return false;
            }
            seen.set(r);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coloring_gives_pure_blocks_and_groups_exclusive_features() {
        // Features 0-2 are one-hot over rows (exclusive); 3 co-occurs with all of them.
        let features = vec![vec![0, 1], vec![2], vec![3, 4], vec![0, 2, 4]];
        let blocks = pure_coloring(&features, 5);
        assert_eq!(blocks[0], blocks[1]);
        assert_eq!(blocks[1], blocks[2]);
        assert_ne!(blocks[3], blocks[0]);
        for b in 0..2 {
            assert!(is_pure(&features, 5, &blocks, b));
        }
    }

    #[test]
    fn one_long_row_makes_a_bounded_number_of_blocks_in_near_linear_time() {
        // Row 0 holds every feature; rows 1.. hold one each. Uncapped first-fit would open
        // one colour per feature; capped, the colours stop at MAX_COLOURS.
        let n = 3 * OVERFLOW_FEATURES;
        let features: Vec<Vec<u32>> =
            (0..n as u32).map(|f| if f % 2 == 0 { vec![0, f + 1] } else { vec![0] }).collect();
        let rows = n + 1;
        let blocks = pure_coloring(&features, rows);
        let count = *blocks.iter().max().unwrap() as usize + 1;
        assert!(count <= MAX_COLOURS + n.div_ceil(OVERFLOW_FEATURES), "{count} blocks");
        for b in 0..MAX_COLOURS as u32 {
            assert!(is_pure(&features, rows, &blocks, b), "colour {b} must be pure");
        }
        let overflow = blocks.iter().filter(|&&b| b as usize >= MAX_COLOURS).count();
        assert_eq!(overflow, n - MAX_COLOURS);
    }

    #[test]
    fn balanced_split_separates_co_occurring_features() {
        // Two "genres" per row: 0 with 1, 2 with 3.
        let features = vec![vec![0, 1], vec![0, 1], vec![2, 3], vec![2, 3]];
        let blocks = balanced_split(&features, 4, 2);
        assert_ne!(blocks[0], blocks[1]);
        assert_ne!(blocks[2], blocks[3]);
        assert!(is_pure(&features, 4, &blocks, 0) && is_pure(&features, 4, &blocks, 1));
    }
}
