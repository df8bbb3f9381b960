//! Cutting a vector of exact sums into the chunks that travel the tree one after another
//! (so a chunk goes up one level while the next is summed below it: the pipeline), the
//! exact combine, and a digest of the total.

use std::ops::Range;

/// Sums per chunk by default: 16,384 i128 sums are 256 KiB, large enough that a call's
/// cost is small against its bytes, small enough that a 1e7-long vector is 611 chunks in
/// flight along the tree's levels at once.
pub const CHUNK_LEN: usize = 16_384;

/// The chunks of a vector of `len` sums: `ceil(len / chunk)` ranges (one empty range for
/// `len == 0`, so even an empty reduce is one round trip that proves the tree is whole).
pub fn ranges(len: usize, chunk: usize) -> Vec<Range<usize>> {
    let chunk = chunk.max(1);
    if len == 0 {
        return std::iter::once(0..0).collect();
    }
    (0..len.div_ceil(chunk)).map(|c| c * chunk..((c + 1) * chunk).min(len)).collect()
}

/// Adds `from` into `into`, element by element, with wrapping i128 additions: exact, and
/// the same bits in any order and grouping (engine::fixed proves the range).
pub fn combine(into: &mut [i128], from: &[i128]) {
    debug_assert_eq!(into.len(), from.len());
    for (a, b) in into.iter_mut().zip(from) {
        *a = a.wrapping_add(*b);
    }
}

/// FNV-1a over the sums' little-endian bytes: what every worker reports of the total it
/// received, so the master can check the broadcast reached every worker bit for bit
/// without receiving the vector from each.
pub fn digest(sums: &[i128]) -> u64 {
    let mut d = Digest::default();
    d.add(sums);
    d.finish()
}

/// [`digest`] taken chunk by chunk (the same value as over the whole vector).
#[derive(Debug, Clone, Copy)]
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0xcbf2_9ce4_8422_2325)
    }
}

impl Digest {
    pub fn add(&mut self, sums: &[i128]) {
        for v in sums {
            for b in v.to_le_bytes() {
                self.0 ^= b as u64;
                self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }

    pub fn finish(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::allreduce::tree::Tree;

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // a vector of one range is what is meant
    fn chunks_cover_the_vector_in_order_once() {
        assert_eq!(ranges(10, 4), [0..4, 4..8, 8..10]);
        assert_eq!(ranges(8, 4), [0..4, 4..8]);
        assert_eq!(ranges(3, 100), [0..3]);
        assert_eq!(ranges(0, 4), [0..0]);
        assert_eq!(ranges(5, 0), ranges(5, 1), "a zero chunk length is one sum per chunk, not a loop");
        for len in [1, 999, 16_384, 16_385, 1_000_000] {
            let r = ranges(len, CHUNK_LEN);
            assert_eq!(r.first().unwrap().start, 0);
            assert_eq!(r.last().unwrap().end, len);
            assert!(r.windows(2).all(|w| w[0].end == w[1].start && !w[1].is_empty()));
        }
    }

    /// A reference reduce of `partials` over `tree`: each node adds its children's subtree
    /// sums chunk by chunk into its own partial; the root's vector is the total.
    fn tree_sum(tree: &Tree<usize>, partials: &[Vec<i128>], chunk: usize) -> Vec<i128> {
        fn subtree(tree: &Tree<usize>, node: usize, partials: &[Vec<i128>], range: &Range<usize>) -> Vec<i128> {
            let mut sums = partials[node][range.clone()].to_vec();
            for &c in tree.children(&node) {
                combine(&mut sums, &subtree(tree, c, partials, range));
            }
            sums
        }
        let len = partials[0].len();
        ranges(len, chunk).iter().flat_map(|r| subtree(tree, *tree.root().unwrap(), partials, r)).collect()
    }

    /// Partials rounded from floats of wildly different magnitudes (where float sums in
    /// different orders differ): every tree shape, member order and chunk length gives the
    /// same total bits, equal to the sequential sum.
    #[test]
    fn the_total_is_the_same_bits_whatever_the_tree_s_shape_and_chunking() {
        let (workers, len) = (9, 1000);
        let mut seed = 7u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let partials: Vec<Vec<i128>> = (0..workers)
            .map(|_| {
                (0..len)
                    .map(|_| {
                        let mantissa = (next() % 2_000_000) as f64 - 1e6;
                        let scale = 2f64.powi((next() % 80) as i32 - 40);
                        linea_engine::fixed::to_fixed128(mantissa * scale)
                    })
                    .collect()
            })
            .collect();
        let mut sequential = vec![0i128; len];
        for p in &partials {
            combine(&mut sequential, p);
        }
        for (order, chunk) in [
            ((0..workers).collect::<Vec<_>>(), 7),
            ((0..workers).rev().collect(), 1000),
            (vec![4, 0, 8, 2, 6, 1, 7, 3, 5], 64),
        ] {
            let tree = Tree::new(1, order);
            assert_eq!(tree_sum(&tree, &partials, chunk), sequential);
        }
        for n in 1..=workers {
            let mut expected = vec![0i128; len];
            for p in &partials[..n] {
                combine(&mut expected, p);
            }
            assert_eq!(tree_sum(&Tree::new(1, (0..n).collect()), &partials[..n], 100), expected);
        }
        assert_eq!(digest(&sequential), digest(&sequential.clone()));
        let mut changed = sequential.clone();
        changed[500] = changed[500].wrapping_add(1);
        assert_ne!(digest(&changed), digest(&sequential), "one unit in the last place shows");
        let mut streamed = Digest::default();
        for r in ranges(len, 300) {
            streamed.add(&sequential[r]);
        }
        assert_eq!(streamed.finish(), digest(&sequential), "chunk by chunk is the same digest");
    }
}
