//! Byte formats of the grid's files: cells, labels and feature dictionaries.
//!
//! Each is a small varint-framed layout compressed with zstd. Integers that grow (rows,
//! feature ids, line numbers) are delta-encoded so one-hot data costs about a byte per
//! non-zero before compression. Every file's CRC-32C is kept in the manifest and checked
//! by [`verify_checksum`] before a byte is decoded: a corrupt file is an error, never zeros.

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
    }
    compress(&out)
}

pub fn decode_cell(compressed: &[u8]) -> Result<Cell, EngineError> {
    let raw = decompress(compressed)?;
    let mut r = Reader::new(&raw, CELL_MAGIC, "cell")?;
    let nnz = r.length()?;
    let features = r.length()?;
    let feature_ids = r.deltas(features)?.into_iter().map(|f| f as u32).collect::<Vec<_>>();
    let rows = r.deltas(nnz)?.into_iter().map(|v| v as u32).collect();
    let mut local = Vec::with_capacity(nnz);
    for _ in 0..nnz {
        let l = r.varint()?;
        if l as usize >= features {
            return Err(r.corrupt("local feature number out of range"));
        }
        local.push(l as u32);
    }
    let values = match r.floats(nnz)? {
        None => CellValues::Ones,
        Some(v) => CellValues::Real(v),
    };
    r.finish()?;
    Ok(Cell { rows, local, feature_ids, values })
}

pub fn encode_labels(shard: &ShardLabels) -> Vec<u8> {
    let mut out = Vec::with_capacity(shard.labels.len() * 3 + 16);
    out.extend_from_slice(LABELS_MAGIC);
    put_varint(&mut out, shard.labels.len() as u64);
    put_floats(&mut out, &shard.labels);
    put_deltas(&mut out, shard.lines.iter().copied());
    compress(&out)
}

pub fn decode_labels(compressed: &[u8]) -> Result<ShardLabels, EngineError> {
    let raw = decompress(compressed)?;
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

pub fn decode_dictionary(compressed: &[u8]) -> Result<Vec<DictionaryEntry>, EngineError> {
    let raw = decompress(compressed)?;
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

fn decompress(compressed: &[u8]) -> Result<Vec<u8>, EngineError> {
    zstd::stream::decode_all(compressed).map_err(|e| EngineError::Corrupt(format!("zstd: {e}")))
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

    fn finish(&self) -> Result<(), EngineError> {
        if self.at == self.bytes.len() { Ok(()) } else { Err(self.corrupt("trailing bytes")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_cell() -> Cell {
        Cell::from_triples(vec![(0, 7, 0.5), (2, 3, 1.0), (2, 9, 0.1), (5, 7, -2.0)])
    }

    #[test]
    fn cells_round_trip_with_real_and_binary_values() {
        let cell = sample_cell();
        assert_eq!(decode_cell(&encode_cell(&cell)).unwrap(), cell);
        let ones = Cell::from_triples(vec![(1, 4, 1.0), (3, 0, 1.0)]);
        assert_eq!(ones.values, CellValues::Ones);
        assert_eq!(decode_cell(&encode_cell(&ones)).unwrap(), ones);
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
        assert!(decode_cell(&bytes[..bytes.len() - 3]).is_err());
        assert!(decode_cell(&compress(b"LCL1\xff")).is_err());
        assert!(decode_labels(&bytes).is_err()); // a cell is not a labels file
    }

    #[test]
    fn labels_and_dictionaries_round_trip() {
        let labels = ShardLabels { labels: vec![0.0, 1.0, 0.25], lines: vec![1, 2, 9] };
        assert_eq!(decode_labels(&encode_labels(&labels)).unwrap(), labels);
        let dictionary = vec![
            DictionaryEntry { key: "a".into(), nnz: 3, max_abs: 1.0 },
            DictionaryEntry { key: "β".into(), nnz: 1, max_abs: 2.5 },
        ];
        assert_eq!(decode_dictionary(&encode_dictionary(&dictionary)).unwrap(), dictionary);
    }
}
