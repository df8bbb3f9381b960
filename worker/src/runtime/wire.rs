//! Numeric vectors as little-endian bytes: f64 bit for bit, i64 predictions, i128 sums.

pub fn from_f64s(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn f64s(bytes: &[u8]) -> Vec<f64> {
    bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
}

pub fn from_i64s(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn i64s(bytes: &[u8]) -> Vec<i64> {
    bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
}

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
    fn vectors_round_trip_bit_for_bit() {
        let f = [0.1, -0.0, f64::MIN_POSITIVE, 1e300];
        assert_eq!(f64s(&from_f64s(&f)).iter().map(|v| v.to_bits()).collect::<Vec<_>>(), f.map(f64::to_bits));
        assert_eq!(i64s(&from_i64s(&[i64::MIN, -1, 7])), [i64::MIN, -1, 7]);
        assert_eq!(i128s(&from_i128s(&[i128::MAX, -3])), [i128::MAX, -3]);
    }
}
