//! Genuinely new Criteo rows: the sample's columns resampled per label ([`crate::resample`])
//! plus hashed crosses of categorical column pairs, written as Criteo TSV.
//!
//! A generated line is the label, the 13 integer and 26 categorical columns (values drawn
//! as [`crate::resample`] says), then one column per cross `k` of [`CROSSES`]: for the pair
//! (Ca, Cb) the 8 hex digits of the low 32 bits of `fnv1a(Ca's value, Cb's value, k)`, empty
//! if either value is empty. 32-bit hashes are what Criteo's own categorical columns hold.
//! Crosses are what makes the feature count grow with the data as a click log's does: the
//! sample's columns have at most 4,136 values each, a cross up to the product of two.
//! `linea prepare --format criteo` reads the extra columns as categorical C27, C28, ...

use crate::resample::Sample;
use std::io::{self, Write};

/// Columns of a Criteo line after the label: 13 integer, 26 categorical.
pub const CRITEO_COLUMNS: usize = 39;

/// The crossed pairs, as categorical column numbers (C1..C26), in the order crosses are
/// added. Chosen among columns the sample fills in nearly every row, from few values
/// (C5 x C14: 51 x 22) to many (C3 x C4: 4,136 x 3,100), so cross cardinalities span
/// four orders of magnitude.
pub const CROSSES: [(usize, usize); 12] = [
    (1, 2),
    (5, 14),
    (3, 4),
    (7, 10),
    (11, 13),
    (15, 18),
    (2, 24),
    (8, 23),
    (1, 9),
    (12, 16),
    (6, 17),
    (20, 21),
];

/// 64-bit FNV-1a over `parts`, each part followed by the byte 0xff so that ("ab", "c") and
/// ("a", "bc") hash differently.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Generates Criteo lines from the sample.
pub struct CriteoGenerator {
    sample: Sample,
    seed: u64,
    crosses: usize,
}

impl CriteoGenerator {
    /// `crosses`: how many of [`CROSSES`] to append (at most 12).
    pub fn new(sample: Sample, seed: u64, crosses: usize) -> Result<Self, String> {
        if sample.columns() != CRITEO_COLUMNS {
            return Err(format!("a Criteo sample has {CRITEO_COLUMNS} columns after the label, not {}", sample.columns()));
        }
        if crosses > CROSSES.len() {
            return Err(format!("at most {} crosses, not {crosses}", CROSSES.len()));
        }
        Ok(Self { sample, seed, crosses })
    }

    pub fn sample(&self) -> &Sample {
        &self.sample
    }

    /// Columns of a generated line after the label.
    pub fn columns(&self) -> usize {
        CRITEO_COLUMNS + self.crosses
    }

    /// Row `i`: its label, and its columns in `fields` (cleared first). `crosses` holds
    /// the cross columns' text.
    pub fn row<'a>(&'a self, i: u64, fields: &mut Vec<&'a str>, crosses: &mut CrossText) -> u8 {
        let label = self.sample.generate(self.seed, i, fields);
        for (k, &(a, b)) in CROSSES[..self.crosses].iter().enumerate() {
            let (va, vb) = (fields[13 + a - 1], fields[13 + b - 1]);
            crosses.set(k, (!va.is_empty() && !vb.is_empty()).then(|| fnv1a(&[va.as_bytes(), vb.as_bytes(), &[k as u8]])));
        }
        label
    }

    /// Writes rows `range` as tab-separated lines.
    pub fn write(&self, range: std::ops::Range<u64>, out: &mut impl Write) -> io::Result<()> {
        let mut fields = Vec::with_capacity(CRITEO_COLUMNS);
        let mut crosses = CrossText::default();
        for i in range {
            let label = self.row(i, &mut fields, &mut crosses);
            out.write_all(if label == 1 { b"1" } else { b"0" })?;
            for f in &fields {
                out.write_all(b"\t")?;
                out.write_all(f.as_bytes())?;
            }
            for k in 0..self.crosses {
                out.write_all(b"\t")?;
                out.write_all(crosses.get(k).as_bytes())?;
            }
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

/// The text of a row's cross columns: 8 hex digits each, or empty.
#[derive(Default)]
pub struct CrossText {
    text: Vec<[u8; 8]>,
    present: Vec<bool>,
}

impl CrossText {
    fn set(&mut self, k: usize, hash: Option<u64>) {
        if self.text.len() <= k {
            self.text.resize(k + 1, [0; 8]);
            self.present.resize(k + 1, false);
        }
        self.present[k] = hash.is_some();
        if let Some(h) = hash {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let low = h as u32;
            for (d, byte) in self.text[k].iter_mut().enumerate() {
                *byte = HEX[((low >> (28 - 4 * d)) & 0xf) as usize];
            }
        }
    }

    pub fn get(&self, k: usize) -> &str {
        if self.present[k] { std::str::from_utf8(&self.text[k]).expect("hex digits") } else { "" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sample {
        let mut text = String::new();
        for (label, c) in [(1, "u"), (0, "v"), (0, "")] {
            let mut fields = vec![label.to_string()];
            fields.extend((1..=13).map(|i| i.to_string()));
            fields.extend((1..=26).map(|i| if i == 2 { c.to_string() } else { format!("c{i}") }));
            text.push_str(&fields.join("\t"));
            text.push('\n');
        }
        Sample::parse(&text, '\t').unwrap()
    }

    #[test]
    fn crosses_hash_the_pair_and_are_empty_when_a_value_is() {
        let generator = CriteoGenerator::new(sample(), 5, 2).unwrap();
        let (mut fields, mut crosses) = (Vec::new(), CrossText::default());
        let mut empty = 0;
        for i in 0..200 {
            generator.row(i, &mut fields, &mut crosses);
            // Cross 0 is (C1, C2); C2 is empty in one row of label 0.
            let expected = if fields[14].is_empty() {
                empty += 1;
                String::new()
            } else {
                format!("{:08x}", fnv1a(&[b"c1", fields[14].as_bytes(), &[0]]) as u32)
            };
            assert_eq!(crosses.get(0), expected);
            assert_eq!(crosses.get(1), format!("{:08x}", fnv1a(&[b"c5", b"c14", &[1]]) as u32));
        }
        assert!(empty > 0);
    }

    #[test]
    fn written_lines_have_the_label_and_every_column() {
        let generator = CriteoGenerator::new(sample(), 5, 3).unwrap();
        let mut out = Vec::new();
        generator.write(10..20, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 10);
        for line in text.lines() {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 1 + 39 + 3);
            assert!(["0", "1"].contains(&fields[0]));
        }
        // Any range is the same bytes as the same rows of a longer run.
        let mut whole = Vec::new();
        generator.write(0..30, &mut whole).unwrap();
        let whole = String::from_utf8(whole).unwrap();
        assert_eq!(whole.lines().skip(10).take(10).collect::<Vec<_>>(), text.lines().collect::<Vec<_>>());
    }

    #[test]
    fn the_shape_is_checked() {
        assert!(CriteoGenerator::new(sample(), 0, 13).is_err());
        let small = Sample::parse("1\ta\n0\tb\n", '\t').unwrap();
        assert!(CriteoGenerator::new(small, 0, 0).is_err());
    }
}
