//! New dense rows from a labelled sample by class-conditional column resampling (issue 14:
//! higgs at Chicle's scale, where repeating the 7,000 sample rows adds no information).
//!
//! Row `i` of the output: a label drawn with the sample's label rate (the label of a uniformly
//! drawn sample row), then every column drawn independently from a uniformly drawn sample row
//! *with that label*, its text copied verbatim. So each column's distribution given the label
//! is exactly the sample's, the rows are new combinations (7,000 rows of 28 columns have
//! ~3,500^28 of them per label), and the columns are independent given the label: the
//! sample's within-class correlations are not kept. Deterministic from a seed; memory is the
//! sample's, whatever the number of rows written.

use linea_engine::rng::SplitMix64;
use std::io::{self, BufRead, Write};

/// A tab-separated sample, label first, its rows grouped by label.
pub struct DenseSample {
    /// Per distinct label (in order of first appearance): the label's text and its rows' columns.
    groups: Vec<(String, Vec<Vec<String>>)>,
    /// The group of every sample row, in file order (drawing from it gives the label rate).
    group_of_row: Vec<usize>,
    columns: usize,
}

impl DenseSample {
    /// Reads `label\tc1\t...\tcd` lines; empty lines are skipped; every row must have the
    /// first row's column count.
    pub fn read(input: impl BufRead) -> io::Result<Self> {
        let bad = |msg: String| io::Error::new(io::ErrorKind::InvalidData, msg);
        let mut sample = DenseSample { groups: Vec::new(), group_of_row: Vec::new(), columns: 0 };
        for (n, line) in input.lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let mut fields = line.trim_end_matches('\r').split('\t');
            let label = fields.next().unwrap_or_default();
            let columns: Vec<String> = fields.map(str::to_string).collect();
            if sample.group_of_row.is_empty() {
                sample.columns = columns.len();
            }
            if columns.len() != sample.columns || columns.is_empty() {
                return Err(bad(format!("line {}: {} columns, expected {}", n + 1, columns.len(), sample.columns)));
            }
            let group = match sample.groups.iter().position(|(l, _)| l == label) {
                Some(g) => g,
                None => {
                    sample.groups.push((label.to_string(), Vec::new()));
                    sample.groups.len() - 1
                }
            };
            sample.groups[group].1.push(columns);
            sample.group_of_row.push(group);
        }
        if sample.group_of_row.is_empty() {
            return Err(bad("the sample has no rows".into()));
        }
        Ok(sample)
    }

    pub fn columns(&self) -> usize {
        self.columns
    }

    /// Writes `rows` new rows in the sample's format, deterministic from `seed`.
    pub fn write(&self, rows: u64, seed: u64, out: &mut impl Write) -> io::Result<()> {
        let mut rng = SplitMix64::new(seed);
        for _ in 0..rows {
            let (label, group) = &self.groups[self.group_of_row[rng.below(self.group_of_row.len())]];
            out.write_all(label.as_bytes())?;
            for c in 0..self.columns {
                out.write_all(b"\t")?;
                out.write_all(group[rng.below(group.len())][c].as_bytes())?;
            }
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 400 rows, label 1 one time in four; column 0 depends on the label (1's rows hold
    /// 10..20, 0's hold 0..10); columns 1 and 2 name the row (every value distinct).
    fn sample() -> String {
        (0..400)
            .map(|i| format!("{}\t{}\tr{i}\ts{i}\n", u8::from(i % 4 == 0), if i % 4 == 0 { 10 + i % 10 } else { i % 10 }))
            .collect()
    }

    fn generate(rows: u64, seed: u64) -> Vec<Vec<String>> {
        let s = DenseSample::read(sample().as_bytes()).unwrap();
        let mut out = Vec::new();
        s.write(rows, seed, &mut out).unwrap();
        String::from_utf8(out).unwrap().lines().map(|l| l.split('\t').map(str::to_string).collect()).collect()
    }

    #[test]
    fn label_rate_and_class_conditional_columns_are_the_samples() {
        let rows = generate(40_000, 7);
        let ones = rows.iter().filter(|r| r[0] == "1").count() as f64 / rows.len() as f64;
        // Binomial(40,000, 1/4): sd 0.0022; 5 sd.
        assert!((ones - 0.25).abs() < 0.011, "label rate {ones}");
        for r in &rows {
            let v: u32 = r[1].parse().unwrap();
            // Column 0 given the label comes only from that label's rows.
            assert_eq!(r[0] == "1", v >= 10, "{r:?}");
            // Column 1 given the label: that label's row numbers.
            let i: u32 = r[2][1..].parse().unwrap();
            assert_eq!(r[0] == "1", i % 4 == 0, "{r:?}");
        }
        // Each of label 0's ten values of column 0 is drawn with its frequency among label 0's
        // 300 rows (i % 10 over the i not divisible by 4: 20 to 40 rows each).
        let zeros: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "0").collect();
        for v in 0..10 {
            let expected = (0..400).filter(|i| i % 4 != 0 && i % 10 == v).count() as f64 / 300.0;
            let f = zeros.iter().filter(|r| r[1] == v.to_string()).count() as f64 / zeros.len() as f64;
            assert!((f - expected).abs() < 0.012, "value {v}: {f}, expected {expected}");
        }
    }

    #[test]
    fn rows_are_new_combinations_and_reproducible() {
        let rows = generate(2_000, 3);
        // Columns 1 and 2 come from one sample row with probability 1/100 (label 1) or 1/300:
        // about 10 of 2,000 rows.
        let same_source = rows.iter().filter(|r| r[2][1..] == r[3][1..]).count();
        assert!(same_source < 40, "{same_source} of 2,000 rows take columns 1 and 2 from one row");
        assert_eq!(rows, generate(2_000, 3));
        assert_ne!(rows, generate(2_000, 4));
    }

    #[test]
    fn refuses_ragged_and_empty_samples() {
        assert!(DenseSample::read("1\t2\t3\n0\t4\n".as_bytes()).is_err());
        assert!(DenseSample::read("\n".as_bytes()).is_err());
        assert_eq!(DenseSample::read("1\t2\t3\n\n0\t4\t5\n".as_bytes()).unwrap().columns(), 2);
    }
}
