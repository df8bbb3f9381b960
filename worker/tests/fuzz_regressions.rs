//! Every input the fuzzer crashed on (fuzz/, docs/fuzzing.md), kept in
//! tests/fuzz-regressions/ as `TARGET-what`, exactly as the fuzzer saved it (a first byte
//! choosing the options, then the file), read again as the target read it: each must now
//! be a clear error. A new crash is added here with the error it must give.

use linea_worker::input::{self, FeatureSpec, Format, NumericMode, RawExample};
use std::path::Path;

/// (file, format, what the error must say). A message naming "the parquet reader failed" is
/// a panic inside the parquet crate that linea contained (input/parquet.rs): only the cases
/// that say so may end that way; the others must be refused by linea's own checks.
const CASES: &[(&str, Format, &str)] = &[
    (
        // Row group metadata with a negative column chunk offset: the parquet crate asserted.
        "read_parquet-negative-chunk-offset",
        Format::Parquet,
        "lies outside the file",
    ),
    (
        // Dictionary-encoded data pages without their dictionary page: the parquet crate
        // panics ("Decoder for dict should have been set"); linea contains it.
        "read_parquet-dictionary-page-missing",
        Format::Parquet,
        "the parquet reader failed",
    ),
];

/// Reads `data` as the fuzz target does (fuzz/src/lib.rs `read`) and returns the first error.
fn read(format: Format, data: &[u8], dir: &Path) -> Result<usize, String> {
    let (&selector, data) = data.split_first().expect("a selector byte");
    let spec = FeatureSpec {
        format,
        label: (selector & 1 == 1).then(|| "label".to_string()),
        positive: (selector & 2 == 2).then(|| "1".to_string()),
        numeric: if selector & 4 == 4 { NumericMode::Buckets } else { NumericMode::Dense },
        ignore: if selector & 8 == 8 { vec!["c1".to_string()] } else { Vec::new() },
    };
    let path = dir.join("input");
    std::fs::write(&path, data).unwrap();
    let mut reader = input::open(&path.to_string_lossy(), &spec).map_err(|e| e.to_string())?;
    let mut example = RawExample::default();
    let mut rows = 0;
    while reader.read(&mut example).map_err(|e| e.to_string())? {
        rows += 1;
    }
    Ok(rows)
}

#[test]
fn every_input_the_fuzzer_crashed_on_is_now_a_clear_error() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    let mut files: Vec<String> =
        std::fs::read_dir(&folder).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    let mut listed: Vec<String> = CASES.iter().map(|c| c.0.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed, "every kept crash has a case, every case its file");
    for &(name, format, expected) in CASES {
        let dir = tempfile::tempdir().unwrap();
        let data = std::fs::read(folder.join(name)).unwrap();
        let error = read(format, &data, dir.path()).expect_err(name);
        assert!(error.contains(expected), "{name}: {error}");
        if !expected.contains("the parquet reader failed") {
            assert!(!error.contains("the parquet reader failed"), "{name}: checked, not caught: {error}");
        }
    }
}
