//! New bag-of-words rows from a labelled VW sample (rcv1) by class-conditional column
//! resampling, the sparse counterpart of `resample` (issue 14: rcv1 at Chicle's scale).
//!
//! Every feature of the sample is a column whose value is "absent" or a number. Row `i`: a
//! label drawn with the sample's label rate, then every column drawn independently from a
//! uniformly drawn sample row with that label: feature `j` is present with the rate at which
//! that label's rows hold it, and then takes the value of one of those rows, uniformly. Drawn
//! so, a row holds as many features on average as the label's rows do (~78 for rcv1-small).
//! Then the row is scaled to unit L2 norm, as RCV1's cosine-normalized tf-idf rows are.
//!
//! What this keeps and what it does not (docs/benchmarks.md, "Elastic CoCoA at Chicle's
//! scale"): each word's rate and tf-idf values per class are the sample's; the words are
//! independent given the label (a naive-Bayes text model), so topics — words that come
//! together — are gone, and two generated rows share fewer words than two documents do. The
//! vocabulary is the sample's (9,739 words for 1,000 documents, not RCV1's 47,236).

use linea_engine::rng::SplitMix64;
use std::collections::HashMap;
use std::io::{self, BufRead, Write};

/// One label's rows, as columns: the rows holding each feature and their values.
struct Group {
    label: String,
    rows: usize,
    /// (feature index into `SparseSample::names`, the values of the rows that hold it).
    features: Vec<(usize, Vec<f64>)>,
}

/// A VW sample (`label |ns name:value ...`, one namespace), its features by label.
pub struct SparseSample {
    namespace: String,
    names: Vec<String>,
    groups: Vec<Group>,
    group_of_row: Vec<usize>,
}

impl SparseSample {
    pub fn read(input: impl BufRead) -> io::Result<Self> {
        let bad = |n: usize, msg: &str| io::Error::new(io::ErrorKind::InvalidData, format!("line {}: {msg}", n + 1));
        let mut namespace: Option<String> = None;
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut names = Vec::new();
        let mut groups: Vec<(String, usize, HashMap<usize, Vec<f64>>)> = Vec::new();
        let mut group_of_row = Vec::new();
        for (n, line) in input.lines().enumerate() {
            let line = line?;
            let Some((label, rest)) = line.split_once('|') else {
                if line.trim().is_empty() {
                    continue;
                }
                return Err(bad(n, "no namespace"));
            };
            let label = label.split_whitespace().next().ok_or_else(|| bad(n, "no label"))?;
            if rest.contains('|') {
                return Err(bad(n, "more than one namespace"));
            }
            let mut tokens = rest.split_whitespace();
            let ns = tokens.next().unwrap_or_default();
            match &namespace {
                None => namespace = Some(ns.to_string()),
                Some(first) if first != ns => return Err(bad(n, "another namespace than the first line's")),
                Some(_) => {}
            }
            let g = match groups.iter().position(|(l, _, _)| l == label) {
                Some(g) => g,
                None => {
                    groups.push((label.to_string(), 0, HashMap::new()));
                    groups.len() - 1
                }
            };
            groups[g].1 += 1;
            group_of_row.push(g);
            for token in tokens {
                let (name, value) = match token.split_once(':') {
                    Some((name, value)) => (name, value.parse::<f64>().map_err(|_| bad(n, "a value is not a number"))?),
                    None => (token, 1.0),
                };
                let j = *index.entry(name.to_string()).or_insert_with(|| {
                    names.push(name.to_string());
                    names.len() - 1
                });
                groups[g].2.entry(j).or_default().push(value);
            }
        }
        if group_of_row.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the sample has no rows"));
        }
        let groups = groups
            .into_iter()
            .map(|(label, rows, features)| {
                let mut features: Vec<(usize, Vec<f64>)> = features.into_iter().collect();
                features.sort_unstable_by_key(|f| f.0);
                Group { label, rows, features }
            })
            .collect();
        Ok(Self { namespace: namespace.unwrap_or_default(), names, groups, group_of_row })
    }

    /// Writes `rows` new rows in VW format, deterministic from `seed`.
    pub fn write(&self, rows: u64, seed: u64, out: &mut impl Write) -> io::Result<()> {
        let mut rng = SplitMix64::new(seed);
        let mut row: Vec<(usize, f64)> = Vec::new();
        for _ in 0..rows {
            let group = &self.groups[self.group_of_row[rng.below(self.group_of_row.len())]];
            row.clear();
            for (j, values) in &group.features {
                // The drawn row holds feature j with probability values.len() / rows; given
                // that it does, it is any of those rows, uniformly.
                let drawn = rng.below(group.rows);
                if drawn < values.len() {
                    row.push((*j, values[drawn]));
                }
            }
            let norm = row.iter().map(|(_, v)| v * v).sum::<f64>().sqrt();
            write!(out, "{} |{}", group.label, self.namespace)?;
            for (j, v) in &row {
                let v = if norm > 0.0 { v / norm } else { *v };
                write!(out, " {}:{v:.7e}", self.names[*j])?;
            }
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 300 rows, label 1 one time in three. Label 1's rows hold word "a" one time in two and
    /// word "c" always; label -1's rows hold "b" always and "a" one time in five.
    fn sample() -> String {
        (0..300)
            .map(|i| {
                if i % 3 == 0 {
                    format!("1 |f c:0.5 {}\n", if i % 2 == 0 { "a:0.25" } else { "" })
                } else {
                    format!("-1 |f b:0.75 {}\n", if i % 5 == 0 { "a:2" } else { "" })
                }
            })
            .collect()
    }

    fn generate(rows: u64, seed: u64) -> Vec<(String, HashMap<String, f64>)> {
        let s = SparseSample::read(sample().as_bytes()).unwrap();
        let mut out = Vec::new();
        s.write(rows, seed, &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                let (label, rest) = l.split_once(" |f").unwrap();
                let features = rest
                    .split_whitespace()
                    .map(|t| {
                        let (n, v) = t.split_once(':').unwrap();
                        (n.to_string(), v.parse().unwrap())
                    })
                    .collect();
                (label.to_string(), features)
            })
            .collect()
    }

    #[test]
    fn label_rate_and_feature_rates_per_label_are_the_samples() {
        let rows = generate(30_000, 5);
        let ones: Vec<_> = rows.iter().filter(|r| r.0 == "1").collect();
        let rate = ones.len() as f64 / rows.len() as f64;
        assert!((rate - 1.0 / 3.0).abs() < 0.014, "label rate {rate}"); // 5 sd
        let with_a = |rs: &[&(String, HashMap<String, f64>)]| {
            rs.iter().filter(|r| r.1.contains_key("a")).count() as f64 / rs.len() as f64
        };
        assert!((with_a(&ones) - 0.5).abs() < 0.027, "{}", with_a(&ones));
        let minus: Vec<_> = rows.iter().filter(|r| r.0 == "-1").collect();
        assert!((with_a(&minus) - 0.2).abs() < 0.015, "{}", with_a(&minus));
        for (label, f) in &rows {
            // Words of the other label never appear; the always-held word always does.
            assert_eq!(f.contains_key("c"), label == "1");
            assert_eq!(f.contains_key("b"), label == "-1");
            // Unit norm, and the values' ratio is the sample's (c:a = 0.5:0.25, b:a = 0.75:2).
            let norm: f64 = f.values().map(|v| v * v).sum();
            assert!((norm - 1.0).abs() < 1e-6, "{f:?}");
            if let (Some(a), Some(c)) = (f.get("a"), f.get("c")) {
                assert!((c / a - 2.0).abs() < 1e-6);
            }
            if let (Some(a), Some(b)) = (f.get("a"), f.get("b")) {
                assert!((b / a - 0.375).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn reproducible_from_the_seed() {
        assert_eq!(generate(500, 1), generate(500, 1));
        assert_ne!(generate(500, 1), generate(500, 2));
    }

    #[test]
    fn refuses_what_it_cannot_resample() {
        assert!(SparseSample::read("1 |f a:1 |g b:2\n".as_bytes()).is_err());
        assert!(SparseSample::read("1 |f a:1\n-1 |g b:2\n".as_bytes()).is_err());
        assert!(SparseSample::read("1 |f a:x\n".as_bytes()).is_err());
        assert!(SparseSample::read("\n".as_bytes()).is_err());
    }
}
