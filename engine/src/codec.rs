//! Byte formats of the grid's files: cells, labels and feature dictionaries.
//!
//! Each is a small varint-framed layout compressed with zstd. Integers that grow (rows,
//! feature ids, line numbers) are delta-encoded so one-hot data costs about a byte per
//! non-zero before compression. Every file's CRC-32C is kept in the manifest and checked
//! by [`verify_checksum`] before a byte is decoded: a corrupt file is an error, never zeros.
//!
//! A file is outside input (storage, a peer), so no decoder trusts its lengths: each one is
//! told the most raw bytes the object may inflate to ([`cell_limit`], [`labels_limit`],
//! [`dictionary_limit`], from what the manifest says the object holds), so a small
//! compressed file can never ask for gigabytes, and every count is checked against the bytes
//! that are there before anything is allocated for it. fuzz/ checks all of it.

use crate::error::EngineError;
use crate::grid::{Cell, CellValues};

const CELL_MAGIC: &[u8; 4] = b"LCL1";
const LABELS_MAGIC: &[u8; 4] = b"LLB1";
const DICTIONARY_MAGIC: &[u8; 4] = b"LDC1";
const ZSTD_LEVEL: i32 = 3;

/// CRC-32C (Castagnoli), the checksum S3 also offers natively.
pub fn checksum(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

pub fn verify_checksum(bytes: &[u8], expected: u32) -> Result<(), EngineError> {
    let actual = checksum(bytes);
    if actual == expected { Ok(()) } else { Err(EngineError::Checksum { expected, actual }) }
}

/// The labels of one row shard and the input line each row came from, so that a label the
/// loss can't take is reported with its file and line at training time.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShardLabels {
    pub labels: Vec<f64>,
    pub lines: Vec<u64>,
}

/// One feature of a block's dictionary: the raw key it came from and its column statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct DictionaryEntry {
    pub key: String,
    pub nnz: u64,
    pub max_abs: f64,
}

pub fn encode_cell(cell: &Cell) -> Vec<u8> {
    let mut out = Vec::with_capacity(cell.nnz() * 2 + 16);
    out.extend_from_slice(CELL_MAGIC);
    put_varint(&mut out, cell.nnz() as u64);
    put_varint(&mut out, cell.feature_ids.len() as u64);
    put_deltas(&mut out, cell.feature_ids.iter().map(|&f| f as u64));
    put_deltas(&mut out, cell.rows.iter().map(|&r| r as u64));
    for &l in &cell.local {
        put_varint(&mut out, l as u64);
    }
    match &cell.values {
        CellValues::Ones => out.push(0),
        CellValues::Real(values) => put_floats(&mut out, values),
        CellValues::Real32(values) => put_floats(&mut out, &values.iter().map(|&v| v as f64).collect::<Vec<_>>()),
    }
    compress(&out)
}

/// The most raw bytes a cell of at most `nnz` non-zeros over at most `features` features
/// takes: every id and row fits a u32 (at most 5 varint bytes), every value an f64.
pub fn cell_limit(nnz: u64, features: u64) -> usize {
    let bytes = 4u64
        .saturating_add(10 + 10 + 1)
        .saturating_add(features.saturating_mul(5))
        .saturating_add(nnz.saturating_mul(5 + 5 + 8));
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// The most raw bytes a labels file of `rows` rows takes (f64 labels, u64 line deltas).
pub fn labels_limit(rows: u64) -> usize {
    usize::try_from(4u64.saturating_add(10 + 1).saturating_add(rows.saturating_mul(8 + 10))).unwrap_or(usize::MAX)
}

/// Longest key text a dictionary may hold per feature, on average. Keys are input tokens
/// (a VW feature, a CSV field); no real feature name comes near it.
pub const KEY_BYTES_PER_FEATURE: u64 = 4096;

/// The most raw bytes a dictionary of `features` entries takes.
pub fn dictionary_limit(features: u64) -> usize {
    let per_entry = 10 + 10 + 8 + KEY_BYTES_PER_FEATURE;
    usize::try_from(14u64.saturating_add(features.saturating_mul(per_entry))).unwrap_or(usize::MAX)
}

/// Decodes a cell; `limit` is the most bytes it may inflate to ([`cell_limit`]). A decoded
/// cell keeps the invariants [`Cell`] documents: rows non-decreasing, feature ids strictly
/// ascending u32s, every local feature number in range.
pub fn decode_cell(compressed: &[u8], limit: usize) -> Result<Cell, EngineError> {
    let raw = decompress(compressed, limit)?;
    let mut r = Reader::new(&raw, CELL_MAGIC, "cell")?;
    let nnz = r.length()?;
    let features = r.length()?;
    let feature_ids = r.ids(features, true)?;
    let rows = r.ids(nnz, false)?;
    let mut local = Vec::with_capacity(nnz);
    for _ in 0..nnz {
        let l = r.varint()?;
        if l as usize >= features {
            return Err(r.corrupt("local feature number out of range"));
        }
        local.push(l as u32);
    }
    let values = r.cell_values(nnz)?;
    r.finish()?;
    Ok(Cell { rows: rows.into(), local: local.into(), feature_ids, values })
}

pub fn encode_labels(shard: &ShardLabels) -> Vec<u8> {
    let mut out = Vec::with_capacity(shard.labels.len() * 3 + 16);
    out.extend_from_slice(LABELS_MAGIC);
    put_varint(&mut out, shard.labels.len() as u64);
    put_floats(&mut out, &shard.labels);
    put_deltas(&mut out, shard.lines.iter().copied());
    compress(&out)
}

/// Decodes a shard's labels; `limit` as [`labels_limit`] says.
pub fn decode_labels(compressed: &[u8], limit: usize) -> Result<ShardLabels, EngineError> {
    let raw = decompress(compressed, limit)?;
    let mut r = Reader::new(&raw, LABELS_MAGIC, "labels")?;
    let n = r.length()?;
    let labels = r.floats(n)?.unwrap_or_else(|| vec![1.0; n]);
    let lines = r.deltas(n)?;
    r.finish()?;
    Ok(ShardLabels { labels, lines })
}

pub fn encode_dictionary(entries: &[DictionaryEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(DICTIONARY_MAGIC);
    put_varint(&mut out, entries.len() as u64);
    for e in entries {
        put_varint(&mut out, e.key.len() as u64);
        out.extend_from_slice(e.key.as_bytes());
        put_varint(&mut out, e.nnz);
        out.extend_from_slice(&e.max_abs.to_le_bytes());
    }
    compress(&out)
}

/// Decodes a block's dictionary; `limit` as [`dictionary_limit`] says.
pub fn decode_dictionary(compressed: &[u8], limit: usize) -> Result<Vec<DictionaryEntry>, EngineError> {
    let raw = decompress(compressed, limit)?;
    let mut r = Reader::new(&raw, DICTIONARY_MAGIC, "dictionary")?;
    let n = r.length()?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.length()?;
        let key = String::from_utf8(r.bytes(len)?.to_vec()).map_err(|_| r.corrupt("key is not UTF-8"))?;
        let nnz = r.varint()?;
        let max_abs = f64::from_le_bytes(r.bytes(8)?.try_into().expect("8 bytes"));
        entries.push(DictionaryEntry { key, nnz, max_abs });
    }
    r.finish()?;
    Ok(entries)
}

fn compress(raw: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(raw, ZSTD_LEVEL).expect("zstd compression of an in-memory buffer cannot fail")
}

/// Inflates at most `limit` bytes: a frame that holds more is corrupt, found before more
/// than `limit` bytes are held. The buffer starts at the size the frame claims (every frame
/// written here records it), capped at `limit`, so a cell is inflated into one allocation
/// instead of a dozen doublings (each one above glibc's mmap threshold an mmap, a copy and
/// page faults); a false claim costs at most `limit`, which the object may hold anyway.
fn decompress(compressed: &[u8], limit: usize) -> Result<Vec<u8>, EngineError> {
    use std::io::Read;
    let zstd = |e: std::io::Error| EngineError::Corrupt(format!("zstd: {e}"));
    let decoder = zstd::stream::read::Decoder::with_buffer(compressed).map_err(zstd)?;
    let claimed = zstd::zstd_safe::get_frame_content_size(compressed).ok().flatten().unwrap_or(0);
    let mut raw = Vec::with_capacity(usize::try_from(claimed).unwrap_or(usize::MAX).min(limit));
    decoder.take((limit as u64).saturating_add(1)).read_to_end(&mut raw).map_err(zstd)?;
    if raw.len() > limit {
        return Err(EngineError::Corrupt(format!(
            "inflates to more than the {limit} bytes the object can hold; corrupt or not this grid's"
        )));
    }
    Ok(raw)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_deltas(out: &mut Vec<u8>, values: impl Iterator<Item = u64>) {
    let mut previous = 0u64;
    for v in values {
        debug_assert!(v >= previous, "delta-encoded values must not decrease");
        put_varint(out, v - previous);
        previous = v;
    }
}

/// Values as f32 when every one survives the round trip exactly, else f64; a lone tag 0
/// means "all ones".
fn put_floats(out: &mut Vec<u8>, values: &[f64]) {
    if values.iter().all(|&v| v == 1.0) {
        out.push(0);
    } else if values.iter().all(|&v| (v as f32) as f64 == v) {
        out.push(1);
        values.iter().for_each(|&v| out.extend_from_slice(&(v as f32).to_le_bytes()));
    } else {
        out.push(2);
        values.iter().for_each(|&v| out.extend_from_slice(&v.to_le_bytes()));
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], magic: &[u8; 4], what: &'static str) -> Result<Self, EngineError> {
        if bytes.len() < 4 || &bytes[..4] != magic {
            return Err(EngineError::Corrupt(format!("not a linea {what} file (bad magic)")));
        }
        Ok(Self { bytes, at: 4, what })
    }

    fn corrupt(&self, why: &str) -> EngineError {
        EngineError::Corrupt(format!("{} file at byte {}: {why}", self.what, self.at))
    }

    fn varint(&mut self) -> Result<u64, EngineError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at).ok_or_else(|| self.corrupt("truncated"))?;
            self.at += 1;
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(self.corrupt("varint too long"))
    }

    /// A count, bounded by the bytes left so a corrupt length can't ask for huge buffers.
    fn length(&mut self) -> Result<usize, EngineError> {
        let n = self.varint()?;
        if n > (self.bytes.len() as u64) * 8 + 8 {
            return Err(self.corrupt("length larger than the file"));
        }
        Ok(n as usize)
    }

    fn deltas(&mut self, n: usize) -> Result<Vec<u64>, EngineError> {
        let mut previous = 0u64;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            previous = previous.checked_add(self.varint()?).ok_or_else(|| self.corrupt("overflow"))?;
            out.push(previous);
        }
        Ok(out)
    }

    /// `n` delta-encoded u32s (feature ids, rows), each at least the one before it, and
    /// greater when `strictly`.
    fn ids(&mut self, n: usize, strictly: bool) -> Result<Vec<u32>, EngineError> {
        let mut out = Vec::with_capacity(n);
        let mut previous = 0u64;
        for i in 0..n {
            let delta = self.varint()?;
            if strictly && i > 0 && delta == 0 {
                return Err(self.corrupt("ids not ascending"));
            }
            previous = previous
                .checked_add(delta)
                .filter(|&v| v <= u32::MAX as u64)
                .ok_or_else(|| self.corrupt("id beyond 2^32"))?;
            out.push(previous as u32);
        }
        Ok(out)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], EngineError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| self.corrupt("truncated"))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn floats(&mut self, n: usize) -> Result<Option<Vec<f64>>, EngineError> {
        match self.bytes(1)?[0] {
            0 => Ok(None),
            1 => Ok(Some(
                self.bytes(n * 4)?.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            )),
            2 => Ok(Some(
                self.bytes(n * 8)?.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            )),
            _ => Err(self.corrupt("unknown value encoding")),
        }
    }

    /// A cell's values as [`Self::floats`] reads them, `f32`s kept as they are stored.
    fn cell_values(&mut self, n: usize) -> Result<CellValues, EngineError> {
        if self.bytes.get(self.at) != Some(&1) {
            return Ok(self.floats(n)?.map_or(CellValues::Ones, CellValues::Real));
        }
        self.at += 1;
        let bytes = self.bytes(n * 4)?;
        Ok(CellValues::Real32(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()))
    }

    fn finish(&self) -> Result<(), EngineError> {
        if self.at == self.bytes.len() { Ok(()) } else { Err(self.corrupt("trailing bytes")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 1 << 20;

    fn sample_cell() -> Cell {
        Cell::from_triples(vec![(0, 7, 0.5), (2, 3, 1.0), (2, 9, 0.1), (5, 7, -2.0)])
    }

    #[test]
    fn cells_round_trip_with_real_and_binary_values() {
        let cell = sample_cell();
        assert_eq!(decode_cell(&encode_cell(&cell), LIMIT).unwrap(), cell);
        let ones = Cell::from_triples(vec![(1, 4, 1.0), (3, 0, 1.0)]);
        assert_eq!(ones.values, CellValues::Ones);
        assert_eq!(decode_cell(&encode_cell(&ones), LIMIT).unwrap(), ones);
    }

    #[test]
    fn a_decoded_dense_column_shares_its_rows_and_local_numbers() {
        let dense = Cell::from_triples((0..500).map(|row| (row, 0, row as f64 / 7.0)).collect());
        let decoded = decode_cell(&encode_cell(&dense), LIMIT).unwrap();
        assert_eq!(decoded, dense);
        assert_eq!(decoded.rows.heap_bytes() + decoded.local.heap_bytes(), 0, "{:?}", (&decoded.rows, &decoded.local));
    }

    #[test]
    fn values_stored_as_f32_stay_f32_and_encode_to_the_same_bytes() {
        let big = 1e30f32 as f64;
        let single = Cell::from_triples(vec![(0, 1, 0.5), (1, 0, -3.25), (4, 1, big)]);
        let bytes = encode_cell(&single);
        let decoded = decode_cell(&bytes, LIMIT).unwrap();
        assert!(matches!(decoded.values, CellValues::Real32(_)), "{:?}", decoded.values);
        assert_eq!(decoded, single, "the same numbers as the f64 cell built from the triples");
        assert_eq!(encode_cell(&decoded), bytes);
        assert_eq!((0..3).map(|k| decoded.value(k)).collect::<Vec<_>>(), vec![0.5, -3.25, big]);
        // One value that is no f32: every value stays f64.
        let double = Cell::from_triples(vec![(0, 1, 0.5), (1, 0, 0.1)]);
        assert!(matches!(decode_cell(&encode_cell(&double), LIMIT).unwrap().values, CellValues::Real(_)));
    }

    #[test]
    fn a_flipped_byte_is_caught_by_the_checksum() {
        let mut bytes = encode_cell(&sample_cell());
        let sum = checksum(&bytes);
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x10;
        assert!(matches!(verify_checksum(&bytes, sum), Err(EngineError::Checksum { .. })));
    }

    #[test]
    fn truncated_or_foreign_bytes_are_corrupt_not_empty() {
        let bytes = encode_cell(&sample_cell());
        assert!(decode_cell(&bytes[..bytes.len() - 3], LIMIT).is_err());
        assert!(decode_cell(&compress(b"LCL1\xff"), LIMIT).is_err());
        assert!(decode_labels(&bytes, LIMIT).is_err()); // a cell is not a labels file
    }

    /// Raw (uncompressed) bytes of a file, varints given as numbers.
    fn raw(magic: &[u8; 4], varints: &[u64]) -> Vec<u8> {
        let mut out = magic.to_vec();
        varints.iter().for_each(|&v| put_varint(&mut out, v));
        out
    }

    #[test]
    fn a_small_file_that_inflates_past_its_limit_is_corrupt_before_it_is_held() {
        // 64 MiB of zeros compress to a few KiB: the limit, not the frame, decides.
        let bomb = compress(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        for result in [
            decode_cell(&bomb, LIMIT).map(|_| ()),
            decode_labels(&bomb, LIMIT).map(|_| ()),
            decode_dictionary(&bomb, LIMIT).map(|_| ()),
        ] {
            let error = result.unwrap_err().to_string();
            assert!(error.contains("inflates to more than the 1048576 bytes"), "{error}");
        }
        // A real cell passes with exactly the limit its shape gives, and not with less.
        let cell = sample_cell();
        let bytes = encode_cell(&cell);
        let limit = cell_limit(cell.nnz() as u64, cell.feature_ids.len() as u64);
        assert_eq!(decode_cell(&bytes, limit).unwrap(), cell);
        assert!(decode_cell(&bytes, 4).is_err());
    }

    #[test]
    fn ids_beyond_u32_or_out_of_order_are_corrupt_not_truncated() {
        // One feature whose id is 2^32 + 5 (it used to decode as 5).
        let wide = raw(CELL_MAGIC, &[0, 1, (1 << 32) + 5, 0]);
        assert!(decode_cell(&compress(&wide), LIMIT).unwrap_err().to_string().contains("beyond 2^32"));
        // Two features both 7: ids must be strictly ascending.
        let repeated = raw(CELL_MAGIC, &[0, 2, 7, 0, 0]);
        assert!(decode_cell(&compress(&repeated), LIMIT).unwrap_err().to_string().contains("not ascending"));
        // A row past 2^32 after a delta that overflows u32 only in sum.
        let rows = raw(CELL_MAGIC, &[2, 1, 0, u32::MAX as u64, 1, 0, 0, 0]);
        assert!(decode_cell(&compress(&rows), LIMIT).unwrap_err().to_string().contains("beyond 2^32"));
    }

    #[test]
    fn labels_and_dictionaries_round_trip() {
        let labels = ShardLabels { labels: vec![0.0, 1.0, 0.25], lines: vec![1, 2, 9] };
        assert_eq!(decode_labels(&encode_labels(&labels), LIMIT).unwrap(), labels);
        let dictionary = vec![
            DictionaryEntry { key: "a".into(), nnz: 3, max_abs: 1.0 },
            DictionaryEntry { key: "β".into(), nnz: 1, max_abs: 2.5 },
        ];
        assert_eq!(decode_dictionary(&encode_dictionary(&dictionary), LIMIT).unwrap(), dictionary);
    }
}
