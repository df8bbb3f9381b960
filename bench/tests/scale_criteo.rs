//! `scale-criteo`, which makes the scaled Criteo sets of the benchmarks and the chaos soak:
//! what it promises in its doc comment, checked on the first rows of the shared sample.

use std::path::Path;
use std::process::Command;

fn scale(input: &Path, rows: usize) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_scale-criteo")).arg(input).arg(rows.to_string()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn replicas_keep_labels_and_counts_and_rename_categories_per_replica() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/criteo-sample/train.tsv");
    let head: Vec<String> = std::fs::read_to_string(&sample).unwrap().lines().take(10).map(String::from).collect();
    let dir = std::env::temp_dir().join(format!("scale-criteo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("head.tsv");
    std::fs::write(&input, head.join("\n") + "\n").unwrap();

    // 10 rows in, 170 out: replicas 0..16 and the first of a 17th, which wraps to replica 0.
    let scaled = scale(&input, 170);
    assert_eq!(scaled, scale(&input, 170), "deterministic");
    let rows: Vec<Vec<&str>> = scaled.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 170);
    for (i, row) in rows.iter().enumerate() {
        let original: Vec<&str> = head[i % 10].split('\t').collect();
        assert_eq!(row.len(), original.len(), "row {i}");
        assert_eq!(row[..14], original[..14], "label and integer columns are copied (row {i})");
        for c in 14..row.len() {
            assert_eq!(row[c].is_empty(), original[c].is_empty(), "missing stays missing (row {i}, column {c})");
            assert!(row[c].is_empty() || (row[c].len() == 16 && u64::from_str_radix(row[c], 16).is_ok()));
        }
    }
    // Within a replica, equal values get equal names and different values different ones
    // (the sample's category frequencies are kept); the next replica renames them, and the
    // names come back 16 replicas later.
    let original: Vec<Vec<&str>> = head.iter().map(|l| l.split('\t').collect()).collect();
    for c in 14..original[0].len() {
        for i in 0..10 {
            for j in 0..10 {
                assert_eq!(original[i][c] == original[j][c], rows[i][c] == rows[j][c], "rows {i}, {j}, column {c}");
            }
        }
    }
    let column = 14;
    assert_ne!(rows[0][column], rows[10][column], "replica 1 renames categories");
    assert_eq!(rows[0][column], rows[160][column], "replica 16 is replica 0 again");
    std::fs::remove_dir_all(&dir).unwrap();
}
