//! Column statistics of labelled rows, and their comparison with a sample's: how a
//! generated set ([`crate::resample`]) is checked against the sample it came from.
//!
//! A generated set draws from the sample's empirical distribution, so the sample's figures
//! are the true parameters and the only difference is the generated set's sampling noise:
//! each comparison is a z-score with the generated counts' binomial standard deviation.
//! Where the sample's proportion is 0 or 1 the generated one must be equal exactly.

use std::collections::HashMap;

/// Counts of rows, per column: filled rows and each value's rows and positives.
#[derive(Default)]
pub struct ColumnStats {
    pub rows: u64,
    pub positives: u64,
    columns: Vec<Column>,
}

#[derive(Default)]
struct Column {
    filled: u64,
    values: HashMap<Box<str>, (u64, u64)>,
}

/// A value's share of the rows and the label rate among its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct TopValue {
    pub value: String,
    pub frequency: f64,
    pub label_rate: f64,
}

impl ColumnStats {
    pub fn add(&mut self, label: u8, fields: &[&str]) {
        if self.columns.len() < fields.len() {
            self.columns.resize_with(fields.len(), Column::default);
        }
        self.rows += 1;
        self.positives += label as u64;
        for (column, field) in self.columns.iter_mut().zip(fields) {
            if field.is_empty() {
                continue;
            }
            column.filled += 1;
            let counts = match column.values.get_mut(*field) {
                Some(c) => c,
                None => column.values.entry(Box::from(*field)).or_default(),
            };
            counts.0 += 1;
            counts.1 += label as u64;
        }
    }

    pub fn columns(&self) -> usize {
        self.columns.len()
    }

    pub fn label_rate(&self) -> f64 {
        self.positives as f64 / self.rows as f64
    }

    pub fn fill_rate(&self, c: usize) -> f64 {
        self.columns[c].filled as f64 / self.rows as f64
    }

    pub fn distinct(&self, c: usize) -> usize {
        self.columns[c].values.len()
    }

    /// The `k` most frequent values of column `c` (ties by value, for a stable order).
    pub fn top(&self, c: usize, k: usize) -> Vec<TopValue> {
        let mut values: Vec<_> = self.columns[c].values.iter().collect();
        values.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| a.0.cmp(b.0)));
        values
            .into_iter()
            .take(k)
            .map(|(v, &(n, pos))| TopValue {
                value: v.to_string(),
                frequency: n as f64 / self.rows as f64,
                label_rate: pos as f64 / n as f64,
            })
            .collect()
    }

    /// Rows and positives of value `v` in column `c`.
    pub fn value_counts(&self, c: usize, v: &str) -> (u64, u64) {
        self.columns[c].values.get(v).copied().unwrap_or((0, 0))
    }
}

/// One figure of the generated set against the sample's.
#[derive(Debug, Clone)]
pub struct Check {
    pub what: String,
    pub sample: f64,
    pub generated: f64,
    /// (generated - sample) / sd, 0 if equal; infinite if the sample's proportion is 0 or 1
    /// and the generated one differs.
    pub z: f64,
}

fn check(what: String, p: f64, observed: f64, n: u64) -> Check {
    let sd = (p * (1.0 - p) / n as f64).sqrt();
    let z = if observed == p {
        0.0
    } else if sd == 0.0 || n == 0 {
        f64::INFINITY
    } else {
        (observed - p) / sd
    };
    Check { what, sample: p, generated: observed, z }
}

/// The label rate; per column its fill rate and, for the sample's `top` most frequent values,
/// their frequency and the label rate among their rows. `names[c]` names column `c`.
pub fn compare(sample: &ColumnStats, generated: &ColumnStats, top: usize, names: &[String]) -> Vec<Check> {
    let mut checks = vec![check("label rate".into(), sample.label_rate(), generated.label_rate(), generated.rows)];
    for (c, name) in names.iter().enumerate().take(sample.columns()) {
        checks.push(check(format!("{name} fill rate"), sample.fill_rate(c), generated.fill_rate(c), generated.rows));
        for t in sample.top(c, top) {
            let (n, pos) = generated.value_counts(c, &t.value);
            checks.push(check(format!("{name}={} frequency", t.value), t.frequency, n as f64 / generated.rows as f64, generated.rows));
            let rate = if n == 0 { f64::NAN } else { pos as f64 / n as f64 };
            checks.push(check(format!("{name}={} label rate", t.value), t.label_rate, rate, n));
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fill_values_and_label_rates() {
        let mut s = ColumnStats::default();
        s.add(1, &["a", ""]);
        s.add(0, &["a", "x"]);
        s.add(1, &["b", "x"]);
        s.add(0, &["a", ""]);
        assert_eq!((s.rows, s.label_rate()), (4, 0.5));
        assert_eq!((s.fill_rate(0), s.fill_rate(1)), (1.0, 0.5));
        assert_eq!((s.distinct(0), s.distinct(1)), (2, 1));
        let top = s.top(0, 1);
        assert_eq!(top, vec![TopValue { value: "a".into(), frequency: 0.75, label_rate: 1.0 / 3.0 }]);
    }

    #[test]
    fn z_scores_are_binomial_and_certain_proportions_must_match() {
        let c = check("x".into(), 0.5, 0.55, 100);
        assert!((c.z - 1.0).abs() < 1e-12, "{c:?}");
        assert_eq!(check("x".into(), 1.0, 1.0, 10).z, 0.0);
        assert!(check("x".into(), 1.0, 0.9, 10).z.is_infinite());
        assert!(check("x".into(), 0.3, f64::NAN, 0).z.is_infinite());
    }
}
