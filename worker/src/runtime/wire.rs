//! Exact sums as little-endian bytes: the i128 of engine::fixed, bit for bit. Everything
//! else an algorithm sends travels in its kernel's own encoding (engine::algorithm).

/// The sums as bytes, in one allocation of the exact size (collecting a `flat_map` grew the
/// buffer by doubling: a range's 128 KiB took eight reallocations, the last ones mmaps).
pub fn from_i128s(values: &[i128]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(values.len() * 16);
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes
}

/// The sums in `bytes`, read as they are used (no copy); `None` unless they are whole i128s
/// (a trailing part of one would otherwise be dropped without a word).
pub fn i128s(bytes: &[u8]) -> Option<impl ExactSizeIterator<Item = i128> + '_> {
    if !bytes.len().is_multiple_of(16) {
        return None;
    }
    Some(bytes.chunks_exact(16).map(|c| i128::from_le_bytes(c.try_into().expect("16 bytes"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_round_trip_bit_for_bit() {
        let back: Vec<i128> = i128s(&from_i128s(&[i128::MAX, -3, i128::MIN])).unwrap().collect();
        assert_eq!(back, [i128::MAX, -3, i128::MIN]);
        assert!(i128s(&[0; 17]).is_none(), "a partial sum is not dropped");
    }
}
