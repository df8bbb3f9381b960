//! Exact sums as little-endian bytes: the i128 of engine::fixed, bit for bit. Everything
//! else an algorithm sends travels in its kernel's own encoding (engine::algorithm).

pub fn from_i128s(values: &[i128]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn i128s(bytes: &[u8]) -> Vec<i128> {
    bytes.chunks_exact(16).map(|c| i128::from_le_bytes(c.try_into().expect("16 bytes"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_round_trip_bit_for_bit() {
        assert_eq!(i128s(&from_i128s(&[i128::MAX, -3, i128::MIN])), [i128::MAX, -3, i128::MIN]);
    }
}
