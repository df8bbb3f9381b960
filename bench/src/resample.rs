//! Class-conditional column resampling: new rows from a small labelled sample.
//!
//! Row `i` of a generated set is a function of (seed, i) only, so any range of rows can be
//! written alone (in parallel, or resumed) and the output is the same bytes for the same
//! seed on every machine. Row `i`:
//!
//! 1. draws a sample row uniformly and takes its label (so the label rate is the sample's);
//! 2. fills each column independently with that column's value in a sample row drawn
//!    uniformly among the rows *with the same label* (an empty field stays empty).
//!
//! So every column's value distribution given the label is exactly the sample's (fill rate,
//! value frequencies, label rate given a value), while the columns are independent given
//! the label: rows are new combinations, not replicas, and the log-odds of the label are a
//! sum of one term per column value, so logistic regression on one-hot columns is well
//! specified (naive Bayes is the Bayes-optimal model). What is lost is the sample's
//! dependence between columns given the label.
//!
//! The random numbers are the engine's splitmix64 ([`SplitMix64::keyed`], Steele, Lea and
//! Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014) on a state seeded
//! from (seed, row): counter-based, so no state is carried between rows. A uniform index
//! below `n` is `(x * n) >> 64` (Lemire), whose bias is below `n / 2^64`.

use linea_engine::rng::SplitMix64;

/// A labelled sample: rows of text fields, the label first.
#[derive(Debug)]
pub struct Sample {
    /// Every row's fields after the label.
    rows: Vec<Vec<Box<str>>>,
    labels: Vec<u8>,
    /// Rows of each label (0, 1), by index into `rows`.
    by_label: [Vec<u32>; 2],
    columns: usize,
}

impl Sample {
    /// Parses `delimiter`-separated text whose first field is a 0/1 label (`-1` counts as 0);
    /// every non-empty line must have the same number of fields.
    pub fn parse(text: &str, delimiter: char) -> Result<Sample, String> {
        let mut sample =
            Sample { rows: Vec::new(), labels: Vec::new(), by_label: [Vec::new(), Vec::new()], columns: 0 };
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let mut fields = line.split(delimiter);
            let label = match fields.next().map(str::trim) {
                Some("1" | "+1") => 1,
                Some("0" | "-1") => 0,
                other => return Err(format!("line {}: label {other:?} is not 0/1 or -1/+1", n + 1)),
            };
            let row: Vec<Box<str>> = fields.map(Box::from).collect();
            if sample.rows.is_empty() {
                sample.columns = row.len();
            } else if row.len() != sample.columns {
                return Err(format!(
                    "line {}: {} fields after the label, expected {}",
                    n + 1,
                    row.len(),
                    sample.columns
                ));
            }
            sample.by_label[label as usize].push(sample.rows.len() as u32);
            sample.labels.push(label);
            sample.rows.push(row);
        }
        if sample.by_label.iter().any(Vec::is_empty) {
            return Err("the sample needs rows of both labels".into());
        }
        Ok(sample)
    }

    pub fn read(path: &str, delimiter: char) -> Result<Sample, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        Sample::parse(&text, delimiter).map_err(|e| format!("{path}: {e}"))
    }

    /// Columns after the label.
    pub fn columns(&self) -> usize {
        self.columns
    }

    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Row `r` of the sample: its label and fields.
    pub fn row(&self, r: usize) -> (u8, &[Box<str>]) {
        (self.labels[r], &self.rows[r])
    }

    /// Generated row `i` for `seed`: its label, and in `fields` (cleared first) one value
    /// per column, borrowed from the sample.
    pub fn generate<'a>(&'a self, seed: u64, i: u64, fields: &mut Vec<&'a str>) -> u8 {
        let mut rng = SplitMix64::keyed(seed, i);
        let label = self.labels[rng.below(self.rows.len())];
        let rows = &self.by_label[label as usize];
        fields.clear();
        for c in 0..self.columns {
            fields.push(&self.rows[rows[rng.below(rows.len())] as usize][c]);
        }
        label
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "1\ta\tx\n0\tb\t\n0\tc\ty\n";

    #[test]
    fn columns_are_drawn_from_rows_of_the_same_label() {
        let sample = Sample::parse(TEXT, '\t').unwrap();
        assert_eq!((sample.rows(), sample.columns()), (3, 2));
        let mut fields = Vec::new();
        let mut seen = [0usize; 2];
        for i in 0..2000 {
            let label = sample.generate(7, i, &mut fields);
            seen[label as usize] += 1;
            if label == 1 {
                assert_eq!(fields, ["a", "x"]);
            } else {
                assert!(["b", "c"].contains(&fields[0]) && ["", "y"].contains(&fields[1]), "{fields:?}");
            }
        }
        // One row in three is positive: 2000/3 = 667, sd 21.
        assert!((580..=750).contains(&seen[1]), "{seen:?}");
    }

    #[test]
    fn a_row_depends_on_the_seed_and_its_index_only() {
        let sample = Sample::parse(TEXT, '\t').unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let ra: Vec<_> = (0..50).map(|i| (sample.generate(3, i, &mut a), a.join(","))).collect();
        let rb: Vec<_> = (0..50).rev().map(|i| (sample.generate(3, i, &mut b), b.join(","))).collect();
        assert!(ra.iter().eq(rb.iter().rev()));
        let other: Vec<_> = (0..50).map(|i| (sample.generate(4, i, &mut a), a.join(","))).collect();
        assert_ne!(ra, other);
    }

    #[test]
    fn uniform_below_hits_every_value_evenly() {
        let mut rng = SplitMix64::keyed(1, 2);
        let mut counts = [0u32; 7];
        for _ in 0..70_000 {
            counts[rng.below(7)] += 1;
        }
        // 10,000 expected each, sd ~93.
        assert!(counts.iter().all(|&c| (9_600..=10_400).contains(&c)), "{counts:?}");
    }

    #[test]
    fn bad_samples_are_refused() {
        assert!(Sample::parse("1\ta\n0\ta\tb\n", '\t').unwrap_err().contains("expected 1"));
        assert!(Sample::parse("2\ta\n", '\t').unwrap_err().contains("not 0/1"));
        assert!(Sample::parse("1\ta\n1\tb\n", '\t').unwrap_err().contains("both labels"));
    }
}
