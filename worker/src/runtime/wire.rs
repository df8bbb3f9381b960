//! Exact sums as little-endian bytes: the i128 of engine::fixed, bit for bit. Everything
//! else an algorithm sends travels in its kernel's own encoding (engine::algorithm).

pub fn from_i128s(values: &[i128]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The sums in `bytes`; `None` unless they are whole i128s (a trailing part of one would
/// otherwise be dropped without a word).
pub fn i128s(bytes: &[u8]) -> Option<Vec<i128>> {
    if !bytes.len().is_multiple_of(16) {
        return None;
    }
    Some(bytes.chunks_exact(16).map(|c| i128::from_le_bytes(c.try_into().expect("16 bytes"))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_round_trip_bit_for_bit() {
        assert_eq!(i128s(&from_i128s(&[i128::MAX, -3, i128::MIN])).unwrap(), [i128::MAX, -3, i128::MIN]);
        assert_eq!(i128s(&[0; 17]), None, "a partial sum is not dropped");
    }
}
