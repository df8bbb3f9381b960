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
    /// must have as many fields as the first. The caller reads `first_line` from the stream
    /// it then parses, so a pipe (`--input /dev/stdin`) loses no line to the count.
    pub fn criteo(path: &str, first_line: &[u8], spec: &FeatureSpec) -> Result<Self> {
        if first_line.is_empty() {
            return Err(LineaError::data(path, "no examples: the file is empty"));
        }
        let fields = first_line.split(|&b| b == b'\t').count();
        if fields < 40 {
            return Err(LineaError::input(path, 1, format!("{fields} fields, expected 40")));
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
        if !is_regular_file(path)? {
            // Each read below would consume lines the next one then never sees.
            return Err(LineaError::Usage(format!(
                "{path}: CSV input is read more than once (the header, each column's type, then the rows): give a file, not a pipe"
            )));
        }
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

    /// The whole Criteo file or pipe: its first line is read here to count the columns, and
    /// handed to the reader ahead of the rest.
    pub fn criteo(path: &str, spec: &FeatureSpec) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(LineaError::io(path))?;
        let mut source = std::io::BufReader::with_capacity(1 << 20, file);
        let mut first = Vec::new();
        std::io::BufRead::read_until(&mut source, b'\n', &mut first).map_err(LineaError::io(path))?;
        let layout = Layout::criteo(path, &first, spec)?;
        Ok(Self::new(layout.into(), Box::new(std::io::Read::chain(std::io::Cursor::new(first), source)), true))
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

/// Whether `path` can be read more than once (a pipe or a terminal cannot).
fn is_regular_file(path: &str) -> Result<bool> {
    Ok(std::fs::metadata(path).map_err(LineaError::io(path))?.is_file())
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

#[cfg(test)]
mod tests {
    use super::super::{FeatureSpec, Format, NumericMode, RawExample, open};

    fn criteo_spec() -> FeatureSpec {
        FeatureSpec {
            format: Format::Criteo,
            label: None,
            positive: None,
            numeric: NumericMode::Buckets,
            ignore: vec![],
        }
    }

    fn line(label: &str, extra: &[&str]) -> String {
        let mut fields = vec![label.to_string()];
        fields.extend((1..=13).map(|i| i.to_string()));
        fields.extend((1..=26).map(|i| format!("c{i}")));
        fields.extend(extra.iter().map(|s| s.to_string()));
        fields.join("\t")
    }

    #[test]
    fn criteo_columns_after_c26_are_categorical_and_counted_from_the_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.tsv");
        let text = [line("1", &["ab", ""]), line("0", &["", "cd"]), line("1", &["ef"])].join("\n");
        std::fs::write(&path, text).unwrap();
        let mut reader = open(path.to_str().unwrap(), &criteo_spec()).unwrap();
        assert_eq!(reader.variable_count(), 42);
        assert_eq!((reader.variable_name(40), reader.variable_name(41)), ("C27", "C28"));
        let mut example = RawExample::default();
        assert!(reader.read(&mut example).unwrap());
        let extra: Vec<(u32, String)> =
            example.features().filter(|f| f.0 >= 40).map(|f| (f.0, f.1.to_string())).collect();
        assert_eq!(extra, [(40, "ab".to_string())]);
        assert!(reader.read(&mut example).unwrap());
        assert_eq!(example.features().filter(|f| f.0 >= 40).map(|f| f.0).collect::<Vec<_>>(), [41]);
        let error = reader.read(&mut example).unwrap_err().to_string();
        assert!(error.ends_with(":3: 41 fields, expected 42"), "{error}");
    }

    fn fifo(dir: &std::path::Path) -> std::path::PathBuf {
        let fifo = dir.join("rows");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        fifo
    }

    /// Writes `lines` into a new fifo from a thread; the fifo's path and the writer.
    fn piped(dir: &std::path::Path, lines: &[String]) -> (std::path::PathBuf, std::thread::JoinHandle<()>) {
        let fifo = fifo(dir);
        let (path, text) = (fifo.clone(), lines.join("\n") + "\n");
        (fifo, std::thread::spawn(move || std::fs::write(path, text).unwrap()))
    }

    /// From a pipe the first line is read once, to count the columns (crosses too), and
    /// then parsed: every line arrives, with its extra column.
    #[test]
    fn criteo_from_a_pipe_loses_no_line_and_counts_its_columns() {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = (0..3).map(|i| line(&(i % 2).to_string(), &[&format!("x{i}")])).collect();
        let (fifo, writer) = piped(dir.path(), &lines);
        let mut reader = open(fifo.to_str().unwrap(), &criteo_spec()).unwrap();
        assert_eq!(reader.variable_count(), 41);
        let mut example = RawExample::default();
        let mut crosses = Vec::new();
        while reader.read(&mut example).unwrap() {
            crosses.extend(example.features().filter(|f| f.0 == 40).map(|f| f.1.to_string()));
        }
        writer.join().unwrap();
        assert_eq!(crosses, ["x0", "x1", "x2"]);
    }

    /// `prepare`'s path (ranges parsed on threads) from a pipe: the column count comes from
    /// the first range, which still holds the first line.
    #[test]
    fn criteo_ranges_from_a_pipe_lose_no_line_and_count_their_columns() {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = (0..50).map(|i| line(&(i % 2).to_string(), &[&format!("x{i}"), "y"])).collect();
        let (fifo, writer) = piped(dir.path(), &lines);
        let (mut rows, mut variables) = (0, 0);
        super::super::batch::read_batches(fifo.to_str().unwrap(), &criteo_spec(), 2, 256, &mut |batch| {
            rows += batch.rows();
            variables = variables.max(batch.variables.len());
            batch.error.map_or(Ok(()), Err)
        })
        .unwrap();
        writer.join().unwrap();
        assert_eq!((rows, variables), (50, 42));
    }

    /// CSV is read more than once: from a pipe it is refused before anything is read.
    #[test]
    fn csv_from_a_pipe_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo(dir.path());
        let spec = FeatureSpec { format: Format::Csv, ..criteo_spec() };
        let error = open(fifo.to_str().unwrap(), &spec).err().expect("refused").to_string();
        assert!(error.contains("give a file, not a pipe"), "{error}");
    }
}
