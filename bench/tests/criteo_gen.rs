//! `criteo-gen`'s rows against the Criteo sample they are drawn from: the column statistics the
//! generator promises (docs/benchmarks/past-the-memory-wall.md, "Past the memory wall"), at 200,000
//! rows.

use linea_bench::column_stats::{ColumnStats, compare};
use linea_bench::criteo_gen::{CriteoGenerator, CrossText};
use linea_bench::resample::Sample;
use std::collections::HashSet;
use std::path::Path;

const ROWS: u64 = 200_000;

fn sample() -> Sample {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/criteo-sample/train.tsv");
    Sample::read(path.to_str().unwrap(), '\t').unwrap()
}

fn stats_of_sample(sample: &Sample) -> ColumnStats {
    let mut stats = ColumnStats::default();
    for r in 0..sample.rows() {
        let (label, fields) = sample.row(r);
        stats.add(label, &fields.iter().map(|f| &**f).collect::<Vec<_>>());
    }
    stats
}

#[test]
fn generated_columns_have_the_samples_statistics_and_rows_are_new() {
    let generator = CriteoGenerator::new(sample(), 11, 4).unwrap();
    let of_sample = stats_of_sample(generator.sample());
    let sample_rows: HashSet<String> =
        (0..generator.sample().rows()).map(|r| generator.sample().row(r).1.join("\t")).collect();
    let (mut generated, mut at_20k) = (ColumnStats::default(), Vec::new());
    let (mut fields, mut crosses, mut lines) = (Vec::new(), CrossText::default(), HashSet::new());
    for i in 0..ROWS {
        let label = generator.row(i, &mut fields, &mut crosses);
        let line = fields.join("\t");
        assert!(!sample_rows.contains(&line), "row {i} is a sample row");
        lines.insert(line);
        let row: Vec<&str> = fields.iter().copied().chain((0..4).map(|k| crosses.get(k))).collect();
        generated.add(label, &row);
        if i + 1 == 20_000 {
            at_20k = (0..43).map(|c| generated.distinct(c)).collect();
        }
    }
    assert_eq!(lines.len() as u64, ROWS, "every generated row is distinct");

    // Label rate, fill rates, the 5 most frequent values' frequencies and label rates (C9,
    // C20 have 3 values): 422 binomial z-scores (the largest of 422 normals is ~3.5).
    let names: Vec<String> = (0..39).map(|c| format!("column {c}")).collect();
    let checks = compare(&of_sample, &generated, 5, &names);
    assert_eq!(checks.len(), 1 + (0..39).map(|c| 1 + 2 * of_sample.distinct(c).min(5)).sum::<usize>());
    let worst = checks.iter().max_by(|a, b| a.z.abs().total_cmp(&b.z.abs())).unwrap();
    assert!(worst.z.abs() < 5.5, "{worst:?}");

    for c in 0..39 {
        // No value the sample lacks; at 200,000 rows nearly every sample value appears (C3's
        // rarest hold 1/7200 of a label's rows: expected 200000/7200 = 28 draws).
        assert!(generated.distinct(c) <= of_sample.distinct(c), "column {c}");
        assert!(generated.distinct(c) as f64 >= 0.99 * of_sample.distinct(c) as f64, "column {c}");
    }
    // Crosses (C1xC2, C5xC14, C3xC4, C7xC10) grow with the rows: the wide ones 10x the rows
    // bring several times the values, and C3xC4 outgrows either column alone.
    for c in [39, 41, 42] {
        assert!(
            generated.distinct(c) > 2 * at_20k[c],
            "cross {}: {} at 20k, {} at 200k",
            c - 39,
            at_20k[c],
            generated.distinct(c)
        );
    }
    assert!(generated.distinct(41) > 10 * of_sample.distinct(15));
}
