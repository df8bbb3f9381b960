//! The grid's byte formats (engine::codec): cells, labels, dictionaries. The first byte
//! picks the decoder. A decoded object must keep its documented invariants, and encoding it
//! again must decode to the same thing (bit for bit: compared as encodings, so NaN counts).
//! The limit every decoder is given must hold: the capped allocator aborts on more.
use linea_engine::codec;
use linea_engine::{Cell, CellValues};

/// What a fuzz input may inflate to: 16 x its own size, at most 1 MiB.
fn limit(data: &[u8]) -> usize {
    (data.len() * 16).min(1 << 20)
}

fn cell(data: &[u8]) {
    let Ok(cell) = codec::decode_cell(data, limit(data)) else { return };
    check(&cell);
    let again = codec::decode_cell(&codec::encode_cell(&cell), usize::MAX).expect("a re-encoded cell decodes");
    assert_eq!(codec::encode_cell(&again), codec::encode_cell(&cell));
    assert!(
        codec::encode_cell(&cell).len() <= codec::cell_limit(cell.nnz() as u64, cell.feature_ids.len() as u64) + 64
    );
}

/// What prepare, gridload and SCD rely on in a cell.
fn check(cell: &Cell) {
    assert!(cell.rows.windows(2).all(|w| w[0] <= w[1]), "rows non-decreasing");
    assert!(cell.feature_ids.windows(2).all(|w| w[0] < w[1]), "feature ids ascending");
    assert_eq!(cell.local.len(), cell.rows.len());
    assert!(cell.local.iter().all(|&l| (l as usize) < cell.feature_ids.len()));
    if let CellValues::Real(v) = &cell.values {
        assert_eq!(v.len(), cell.rows.len());
    }
}

fn labels(data: &[u8]) {
    let Ok(labels) = codec::decode_labels(data, limit(data)) else { return };
    assert_eq!(labels.labels.len(), labels.lines.len());
    assert!(labels.lines.windows(2).all(|w| w[0] <= w[1]), "lines non-decreasing");
    let bytes = codec::encode_labels(&labels);
    let again = codec::decode_labels(&bytes, usize::MAX).expect("re-encoded labels decode");
    assert_eq!(codec::encode_labels(&again), bytes);
}

fn dictionary(data: &[u8]) {
    let Ok(entries) = codec::decode_dictionary(data, limit(data)) else { return };
    let bytes = codec::encode_dictionary(&entries);
    let again = codec::decode_dictionary(&bytes, usize::MAX).expect("a re-encoded dictionary decodes");
    assert_eq!(codec::encode_dictionary(&again), bytes);
}

pub fn run(data: &[u8]) {
    let Some((&which, data)) = data.split_first() else { return };
    match which % 3 {
        0 => cell(data),
        1 => labels(data),
        _ => dictionary(data),
    }
}
