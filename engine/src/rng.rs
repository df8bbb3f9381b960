//! A tiny deterministic generator (SplitMix64) for orders that must reproduce bit for bit
//! from a seed on every machine and every version of every dependency.

/// SplitMix64 (Steele, Lea, Flood 2014): passes BigCrush, one multiply-xorshift per draw.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function (a bijection of u64).
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The stream of item `key` (a generated row, say) under `seed`: its state mixes both,
    /// so any item's draws can be made alone and streams do not overlap in any way that
    /// depends on the items' order.
    pub fn keyed(seed: u64, key: u64) -> Self {
        Self(mix(seed ^ mix(key.wrapping_add(GOLDEN))))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// Uniform in `[0, 1)`: the top 53 bits of a draw, so every value is a multiple of 2^-53.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..bound` (Lemire's multiply-shift; the tiny bias is irrelevant here).
    pub fn below(&mut self, bound: usize) -> usize {
        ((self.next_u64() as u128 * bound as u128) >> 64) as usize
    }
}

/// Fisher–Yates shuffle driven by [`SplitMix64`].
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..items.len()).rev() {
        let j = rng.below(i + 1);
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_permutation_and_reproducible() {
        let mut a: Vec<u32> = (0..100).collect();
        let mut b = a.clone();
        shuffle(&mut a, 7);
        shuffle(&mut b, 7);
        assert_eq!(a, b);
        assert_ne!(a, (0..100).collect::<Vec<_>>());
        a.sort_unstable();
        assert_eq!(a, (0..100).collect::<Vec<_>>());
    }
}
