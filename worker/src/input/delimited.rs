//! Delimited text: Criteo's fixed TSV layout, and general CSV/TSV whose delimiter, header
//! and column types are inferred.
//!
//! CSV inference reads the file twice: the first pass decides the delimiter (tab if the
//! first line has one, else comma), whether the first line is a header (every field is
//! non-numeric and some column of the next line is numeric, or there is no next line) and
//! each column's type
//! (numeric if every non-empty value parses as a number). Empty fields are missing values.

use super::{ExampleReader, FeatureSpec, Lines, NumericMode, RawExample};
use crate::error::{LineaError, Result};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Label,
    Ignored,
    Numeric,
    Categorical,
}

/// What is decided once per file: the delimiter, whether the first line is a header, and
/// each column's name and kind. Readers of the whole file and of its ranges share it.
#[derive(Debug)]
pub struct Layout {
    file: String,
    delimiter: u8,
    header: bool,
    kinds: Vec<Kind>,
    names: Vec<String>,
    positive: Option<String>,
    numeric: NumericMode,
}

pub struct DelimitedReader {
    layout: std::sync::Arc<Layout>,
    reader: csv::Reader<Box<dyn std::io::Read + Send>>,
    record: csv::StringRecord,
}

impl Layout {
    /// Criteo's label, I1-I13 and C1-C26, and any further columns of the first line as
    /// categorical C27, C28, ... (hashed crosses, as `criteo-gen` appends them); every line
    /// must have as many fields as the first.
    pub fn criteo(path: &str, spec: &FeatureSpec) -> Result<Self> {
        let fields = first_line(path)?.split('\t').count();
        if fields < 40 {
            return Err(LineaError::input(path, 1, format!("{fields} fields, expected 40 (label, I1-I13, C1-C26)")));
        }
        let mut names = vec!["label".to_string()];
        let mut kinds = vec![Kind::Label];
        for i in 1..=13 {
            names.push(format!("I{i}"));
            kinds.push(Kind::Numeric);
        }
        for i in 1..fields - 13 {
            names.push(format!("C{i}"));
            kinds.push(Kind::Categorical);
        }
        Ok(Self::build(path, b'\t', false, names, kinds, spec))
    }

    pub fn csv(path: &str, spec: &FeatureSpec) -> Result<Self> {
        let first = first_line(path)?;
        let delimiter = if first.contains('\t') { b'\t' } else { b',' };
        let mut head = reader(path, delimiter, false)?;
        let mut records = head.records();
        let err = |e: csv::Error| csv_error(path, e);
        let Some(first) = records.next().transpose().map_err(err)? else {
            return Err(LineaError::data(path, "no examples: the file is empty"));
        };
        let second = records.next().transpose().map_err(err)?;
        let numeric = |s: &str| s.trim().parse::<f64>().is_ok();
        // A file of one all-text line is a header without data (and then has no examples).
        let has_header = first.iter().all(|f| !f.trim().is_empty() && !numeric(f))
            && second.as_ref().is_none_or(|s| s.iter().any(numeric));
        let names: Vec<String> = if has_header {
            first.iter().map(|s| s.trim().to_string()).collect()
        } else {
            (0..first.len()).map(|i| format!("c{i}")).collect()
        };
        let label = match &spec.label {
            None => 0,
            Some(l) => {
                names.iter().position(|n| n == l).or_else(|| l.parse().ok().filter(|&i| i < names.len())).ok_or_else(
                    || LineaError::Usage(format!("{path}: no label column {l:?}; columns are {}", names.join(", "))),
                )?
            }
        };
        for ignored in &spec.ignore {
            if !names.contains(ignored) {
                return Err(LineaError::Usage(format!(
                    "{path}: no column {ignored:?} to ignore; columns are {}",
                    names.join(", ")
                )));
            }
        }
        // Type inference over the whole file.
        let mut all_numeric = vec![true; names.len()];
        let mut scan = reader(path, delimiter, has_header)?;
        let mut record = csv::StringRecord::new();
        while scan.read_record(&mut record).map_err(err)? {
            for (c, field) in record.iter().enumerate().take(names.len()) {
                let field = field.trim();
                if field.is_empty() || !all_numeric[c] {
                    continue;
                }
                match field.parse::<f64>() {
                    Ok(v) if !v.is_finite() && c != label => {
                        let line = record.position().map_or(0, |p| p.line());
                        return Err(LineaError::input(
                            path,
                            line,
                            format!("column {} is {v}; only finite numbers are allowed", names[c]),
                        ));
                    }
                    Ok(_) => {}
                    Err(_) => all_numeric[c] = false,
                }
            }
        }
        let kinds = (0..names.len())
            .map(|c| match () {
                _ if c == label => Kind::Label,
                _ if spec.ignore.contains(&names[c]) => Kind::Ignored,
                _ if all_numeric[c] => Kind::Numeric,
                _ => Kind::Categorical,
            })
            .collect();
        Ok(Self::build(path, delimiter, has_header, names, kinds, spec))
    }

    fn build(
        file: &str,
        delimiter: u8,
        header: bool,
        names: Vec<String>,
        kinds: Vec<Kind>,
        spec: &FeatureSpec,
    ) -> Self {
        Self {
            file: file.to_string(),
            delimiter,
            header,
            kinds,
            names,
            positive: spec.positive.clone(),
            numeric: spec.numeric,
        }
    }
}

impl DelimitedReader {
    /// Reads `source`, which starts at the beginning of a line of the file; `first`: it starts
    /// at the beginning of the file (where the header is). Lines are numbered from 1 at the
    /// source's start.
    pub fn new(layout: std::sync::Arc<Layout>, source: Box<dyn std::io::Read + Send>, first: bool) -> Self {
        let reader = builder(layout.delimiter, layout.header && first).from_reader(source);
        Self { layout, reader, record: csv::StringRecord::new() }
    }

    /// The whole file.
    pub fn open(layout: std::sync::Arc<Layout>) -> Result<Self> {
        let file = std::fs::File::open(&layout.file).map_err(LineaError::io(&layout.file))?;
        Ok(Self::new(layout, Box::new(file), true))
    }

    fn line(&self) -> u64 {
        self.record.position().map_or(0, |p| p.line())
    }

    fn error(&self, message: impl Into<String>) -> LineaError {
        LineaError::input(&self.layout.file, self.line(), message)
    }

    fn number(&self, text: &str, what: impl std::fmt::Display) -> Result<f64> {
        super::finite(text, what).map_err(|m| self.error(m))
    }
}

impl ExampleReader for DelimitedReader {
    fn read(&mut self, example: &mut RawExample) -> Result<bool> {
        if !self.reader.read_record(&mut self.record).map_err(|e| csv_error(&self.layout.file, e))? {
            return Ok(false);
        }
        let layout = &*self.layout;
        if self.record.len() != layout.kinds.len() {
            return Err(self.error(format!("{} fields, expected {}", self.record.len(), layout.kinds.len())));
        }
        example.clear();
        example.line = self.line();
        for c in 0..layout.kinds.len() {
            let field = self.record[c].trim();
            match layout.kinds[c] {
                Kind::Label => {
                    example.label = super::label(field, layout.positive.as_deref()).map_err(|m| self.error(m))?
                }
                Kind::Ignored => {}
                _ if field.is_empty() => {}
                Kind::Numeric => {
                    let value = self.number(field, format_args!("column {}", layout.names[c]))?;
                    example.push_numeric(c as u32, value, layout.numeric);
                }
                Kind::Categorical => example.push(c as u32, field, 1.0),
            }
        }
        Ok(true)
    }

    fn variable_name(&self, v: u32) -> &str {
        &self.layout.names[v as usize]
    }

    fn is_dense(&self, v: u32) -> bool {
        self.layout.kinds[v as usize] == Kind::Numeric && self.layout.numeric == NumericMode::Dense
    }

    fn variable_count(&self) -> u32 {
        self.layout.names.len() as u32
    }
}

fn first_line(path: &str) -> Result<String> {
    let mut lines = Lines::open(path)?;
    if !lines.next_line()? {
        return Err(LineaError::data(path, "no examples: the file is empty"));
    }
    Ok(lines.text.clone())
}

fn builder(delimiter: u8, header: bool) -> csv::ReaderBuilder {
    let mut builder = csv::ReaderBuilder::new();
    builder.delimiter(delimiter).has_headers(header).flexible(true);
    builder
}

fn reader(path: &str, delimiter: u8, header: bool) -> Result<csv::Reader<std::fs::File>> {
    builder(delimiter, header).from_path(path).map_err(|e| csv_error(path, e))
}

fn csv_error(path: &str, e: csv::Error) -> LineaError {
    let line = e.position().map_or(0, |p| p.line());
    match e.into_kind() {
        csv::ErrorKind::Io(io) => LineaError::io(path)(io),
        csv::ErrorKind::Utf8 { .. } => LineaError::input(path, line, "not valid UTF-8 text"),
        other => LineaError::input(path, line, format!("{other:?}")),
    }
}
