//! Readers of raw training data. Each turns one input format into [`RawExample`]s: a label,
//! the input line it came from, and (variable, key, value) features, where a variable is
//! what SCD makes a block of (a VW namespace, a Criteo/CSV/Parquet column; libsvm has one
//! variable `f`) and a key names one feature of it.
//!
//! [`FeatureSpec`] says how to read a format; it is stored in the grid manifest and in the
//! model, so `eval` and `predict` featurize new input exactly as `prepare` did.

pub mod batch;
mod delimited;
mod libsvm;
mod parquet;
pub mod ranges;
pub mod source;
mod vw;

use crate::error::{LineaError, Result};
use serde::{Deserialize, Serialize};
use std::io::BufRead;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `label index:value ...` (LIBSVM / SVMlight).
    Libsvm,
    /// Vowpal Wabbit text: `label |namespace feature[:value] ...`.
    Vw,
    /// Criteo display-ads TSV: label, 13 integer columns I1-I13, 26 categorical C1-C26 (and
    /// any further columns, as many on every line as on the first, categorical C27, ...).
    Criteo,
    /// Comma- or tab-separated text, with or without a header.
    Csv,
    /// Apache Parquet (any codec the parquet crate reads, Brotli included).
    Parquet,
}

impl Format {
    /// Whether its variables are columns, with one value a row at most (CSV, Criteo,
    /// Parquet), rather than sets of features (LIBSVM's one variable, VW's namespaces).
    pub fn has_columns(self) -> bool {
        matches!(self, Format::Criteo | Format::Csv | Format::Parquet)
    }
}

/// What becomes of a numeric column (CSV, Parquet, Criteo's integer columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum NumericMode {
    /// One feature carrying the raw value (a dense, pure one-feature block).
    Dense,
    /// One-hot over logarithmic buckets `sign(x) * floor(2 log2(1 + |x|))`: a pure
    /// categorical block that lets a linear model fit a non-linear response to counts.
    Buckets,
}

/// How to read one input format. Everything `prepare` was told, minus file names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureSpec {
    pub format: Format,
    /// Label column name (CSV with header, Parquet) or 0-based index; default: the first.
    pub label: Option<String>,
    /// A label equal to this string is 1, any other is 0.
    pub positive: Option<String>,
    pub numeric: NumericMode,
    /// Columns that are not features (ids).
    pub ignore: Vec<String>,
}

impl FeatureSpec {
    /// Numeric mode when the user gave none: Criteo's integer columns are heavy-tailed
    /// counts, so they are bucketized; other numeric columns stay dense.
    pub fn default_numeric(format: Format) -> NumericMode {
        if format == Format::Criteo { NumericMode::Buckets } else { NumericMode::Dense }
    }
}

/// One example as read: label, source line and features as (variable, key, value).
#[derive(Debug, Default)]
pub struct RawExample {
    /// NaN for an unlabelled example (VW only).
    pub label: f64,
    /// 1-based line (row, for Parquet) in the input file.
    pub line: u64,
    keys: String,
    features: Vec<(u32, u32, u32, f64)>,
}

impl RawExample {
    fn clear(&mut self) {
        self.keys.clear();
        self.features.clear();
    }

    fn push(&mut self, variable: u32, key: &str, value: f64) {
        self.push_written(variable, value, |keys| keys.push_str(key));
    }

    /// Pushes a feature whose key `write_key` appends to the key buffer (no `String` of its
    /// own: this runs for every value read).
    fn push_written(&mut self, variable: u32, value: f64, write_key: impl FnOnce(&mut String)) {
        let start = self.keys.len() as u32;
        write_key(&mut self.keys);
        self.features.push((variable, start, self.keys.len() as u32, value));
    }

    /// Pushes a numeric column's feature as the spec says; zero dense values are absent.
    fn push_numeric(&mut self, variable: u32, value: f64, mode: NumericMode) {
        match mode {
            NumericMode::Dense if value != 0.0 => self.push(variable, "", value),
            NumericMode::Dense => {}
            NumericMode::Buckets => {
                let bucket = (2.0 * value.abs().ln_1p() / std::f64::consts::LN_2).floor() as i64;
                self.push_written(variable, 1.0, |keys| {
                    if value < 0.0 {
                        keys.push('-');
                    }
                    keys.push_str(itoa::Buffer::new().format(bucket));
                });
            }
        }
    }

    pub fn features(&self) -> impl Iterator<Item = (u32, &str, f64)> {
        self.features.iter().map(|&(v, s, e, x)| (v, &self.keys[s as usize..e as usize], x))
    }
}

/// A source of examples.
pub trait ExampleReader {
    /// Reads the next example into `example`; `false` at the end of input.
    fn read(&mut self, example: &mut RawExample) -> Result<bool>;
    /// Name of variable `v` (VW namespaces are discovered as they appear).
    fn variable_name(&self, v: u32) -> &str;
    /// Whether a variable holds one numeric value (its single feature has key "").
    fn is_dense(&self, v: u32) -> bool;
    /// Variables known so far, numbered `0..count` (VW namespaces are numbered as they are
    /// discovered, including those whose features were all zero).
    fn variable_count(&self) -> u32;
}

/// Opens `path` in the format `spec` names.
pub fn open(path: &str, spec: &FeatureSpec) -> Result<Box<dyn ExampleReader>> {
    Ok(match spec.format {
        Format::Libsvm => Box::new(libsvm::LibsvmReader::new(Lines::open(path)?)),
        Format::Vw => Box::new(vw::VwReader::new(Lines::open(path)?)),
        Format::Criteo => Box::new(delimited::DelimitedReader::criteo(path, spec)?),
        Format::Csv => Box::new(delimited::DelimitedReader::open(delimited::Layout::csv(path, spec)?.into())?),
        Format::Parquet => Box::new(parquet::ParquetReader::open(path, spec)?),
    })
}

/// Lines of a text file with their numbers, for readers and their error messages.
pub struct Lines {
    pub file: String,
    reader: Box<dyn BufRead>,
    pub line: u64,
    pub text: String,
}

impl Lines {
    pub fn open(path: &str) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(LineaError::io(path))?;
        Ok(Self::over(path, Box::new(std::io::BufReader::with_capacity(1 << 20, file))))
    }

    /// Lines of `reader`, a part of `file` that starts at the beginning of a line; they are
    /// numbered from 1 at the part's start.
    pub fn over(file: &str, reader: Box<dyn BufRead>) -> Self {
        Self { file: file.to_string(), reader, line: 0, text: String::new() }
    }

    /// Advances to the next line that is not blank; `false` at the end.
    pub fn next_line(&mut self) -> Result<bool> {
        loop {
            self.text.clear();
            let n = self.reader.read_line(&mut self.text).map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => LineaError::input(&self.file, self.line + 1, "not valid UTF-8 text"),
                _ => LineaError::io(&self.file)(e),
            })?;
            if n == 0 {
                return Ok(false);
            }
            self.line += 1;
            let trimmed = self.text.trim_end_matches(['\n', '\r']).len();
            self.text.truncate(trimmed);
            if !self.text.trim().is_empty() {
                return Ok(true);
            }
        }
    }

    pub fn error(&self, message: impl Into<String>) -> LineaError {
        LineaError::input(&self.file, self.line, message)
    }

    /// Parses a finite number, or says which field of which line is not one. `what` is
    /// formatted only for the message (callers pass `format_args!`: this runs per value).
    pub fn number(&self, text: &str, what: impl std::fmt::Display) -> Result<f64> {
        finite(text, what).map_err(|m| self.error(m))
    }

    /// Parses a numeric label (libsvm, VW).
    pub fn label(&self, text: &str) -> Result<f64> {
        label(text, None).map_err(|m| self.error(m))
    }
}

/// A finite number, or the message saying why `text` (the line's `what`) is not one.
fn finite(text: &str, what: impl std::fmt::Display) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(v) => Err(format!("{what} is {v}; only finite numbers are allowed")),
        Err(_) => Err(format!("{what} {text:?} is not a number")),
    }
}

/// A label: 1 or 0 by comparison with `positive`, else a finite number.
fn label(text: &str, positive: Option<&str>) -> Result<f64, String> {
    let text = text.trim();
    match positive {
        Some(p) => Ok(if text == p { 1.0 } else { 0.0 }),
        None => finite(text, "label").map_err(|m| format!("{m} (use --positive VALUE for string labels)")),
    }
}
