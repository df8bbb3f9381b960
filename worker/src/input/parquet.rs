//! Apache Parquet through the parquet crate's row API: numeric and boolean columns are
//! numeric variables, strings (and anything else) categorical, nulls missing.
//!
//! The file is outside input and the parquet crate panics on some malformed metadata (it
//! documents, e.g., `ColumnChunkMetaData::byte_range` panicking on a negative offset). So
//! the metadata is checked before any row is read (every column chunk inside the file), and
//! every call into the crate runs under `catch_unwind`: a panic there is this file's error,
//! never the process's. fuzz/ (target read_parquet) found the negative offset.

use super::{ExampleReader, FeatureSpec, NumericMode, RawExample};
use crate::error::{LineaError, Result};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{Field, Row};

pub struct ParquetReader {
    file: String,
    rows: Box<dyn Iterator<Item = parquet::errors::Result<Row>> + Send>,
    names: Vec<String>,
    dense: Vec<bool>,
    label: usize,
    ignored: Vec<bool>,
    positive: Option<String>,
    numeric: NumericMode,
    row: u64,
}

impl ParquetReader {
    pub fn open(path: &str, spec: &FeatureSpec) -> Result<Self> {
        let handle = std::fs::File::open(path).map_err(LineaError::io(path))?;
        let bytes = handle.metadata().map_err(LineaError::io(path))?.len();
        let unreadable = |why: String| LineaError::data(path, format!("not a readable Parquet file: {why}"));
        let reader = guarded(|| SerializedFileReader::new(handle))
            .map_err(unreadable)?
            .map_err(|e| unreadable(e.to_string()))?;
        check_chunks(&reader, bytes).map_err(unreadable)?;
        let schema = reader.metadata().file_metadata().schema_descr_ptr();
        let names: Vec<String> = schema.columns().iter().map(|c| c.name().to_string()).collect();
        if reader.metadata().file_metadata().num_rows() == 0 {
            return Err(LineaError::data(path, "no examples: the file has no rows"));
        }
        let label = match &spec.label {
            None => 0,
            Some(l) => names.iter().position(|n| n == l).ok_or_else(|| {
                LineaError::Usage(format!("{path}: no label column {l:?}; columns are {}", names.join(", ")))
            })?,
        };
        for ignored in &spec.ignore {
            if !names.contains(ignored) {
                return Err(LineaError::Usage(format!(
                    "{path}: no column {ignored:?} to ignore; columns are {}",
                    names.join(", ")
                )));
            }
        }
        use parquet::basic::Type;
        let numeric: Vec<bool> = schema
            .columns()
            .iter()
            .map(|c| {
                matches!(c.physical_type(), Type::BOOLEAN | Type::INT32 | Type::INT64 | Type::FLOAT | Type::DOUBLE)
            })
            .collect();
        let rows = guarded(|| reader.into_iter()).map_err(unreadable)?;
        Ok(Self {
            file: path.to_string(),
            rows: Box::new(rows),
            ignored: names.iter().map(|n| spec.ignore.contains(n)).collect(),
            dense: numeric.iter().map(|&n| n && spec.numeric == NumericMode::Dense).collect(),
            names,
            label,
            positive: spec.positive.clone(),
            numeric: spec.numeric,
            row: 0,
        })
    }

    fn error(&self, message: impl Into<String>) -> LineaError {
        LineaError::Input { file: self.file.clone(), line: self.row, message: message.into() }
    }
}

/// Runs a call into the parquet crate; its panic becomes the message of an error.
fn guarded<T>(call: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).map_err(|panic| {
        let message =
            panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
        format!("the parquet reader failed ({})", message.unwrap_or_else(|| "no message".into()))
    })
}

/// Every column chunk the metadata lists lies inside the file (`bytes` long).
fn check_chunks(reader: &SerializedFileReader<std::fs::File>, bytes: u64) -> std::result::Result<(), String> {
    for (g, group) in reader.metadata().row_groups().iter().enumerate() {
        for column in group.columns() {
            let start = column.dictionary_page_offset().unwrap_or(column.data_page_offset());
            let end = u64::try_from(start)
                .ok()
                .zip(u64::try_from(column.compressed_size()).ok())
                .and_then(|(start, len)| start.checked_add(len));
            if end.is_none_or(|end| end > bytes) {
                return Err(format!(
                    "column {} of row group {g} lies outside the file ({start} + {} of {bytes} bytes)",
                    column.column_path(),
                    column.compressed_size()
                ));
            }
        }
    }
    Ok(())
}

fn number(field: &Field) -> Option<f64> {
    Some(match field {
        Field::Bool(b) => *b as u8 as f64,
        Field::Byte(v) => *v as f64,
        Field::Short(v) => *v as f64,
        Field::Int(v) => *v as f64,
        Field::Long(v) => *v as f64,
        Field::UByte(v) => *v as f64,
        Field::UShort(v) => *v as f64,
        Field::UInt(v) => *v as f64,
        Field::ULong(v) => *v as f64,
        Field::Float(v) => *v as f64,
        Field::Double(v) => *v,
        _ => return None,
    })
}

fn text(field: &Field) -> String {
    match field {
        Field::Str(s) => s.clone(),
        other => other.to_string(),
    }
}

impl ExampleReader for ParquetReader {
    fn read(&mut self, example: &mut RawExample) -> Result<bool> {
        let rows = &mut self.rows;
        let next = guarded(|| rows.next()).map_err(|why| self.error(format!("unreadable: {why}")))?;
        let Some(row) = next else { return Ok(false) };
        self.row += 1;
        let row = row.map_err(|e| self.error(format!("unreadable: {e}")))?;
        example.clear();
        example.line = self.row;
        for (c, (_, field)) in row.get_column_iter().enumerate() {
            if c == self.label {
                example.label = match (&self.positive, number(field)) {
                    (Some(p), _) => (text(field).trim() == p) as u8 as f64,
                    (None, Some(v)) if v.is_finite() => v,
                    (None, Some(v)) => return Err(self.error(format!("label is {v}; only finite numbers are allowed"))),
                    (None, None) if matches!(field, Field::Null) => return Err(self.error("label is missing")),
                    (None, None) => {
                        return Err(self.error(format!(
                            "label {:?} is not a number (use --positive VALUE for string labels)",
                            text(field)
                        )));
                    }
                };
                continue;
            }
            if self.ignored[c] || matches!(field, Field::Null) {
                continue;
            }
            match number(field) {
                Some(v) if !v.is_finite() => {
                    return Err(self.error(format!("column {} is {v}; only finite numbers are allowed", self.names[c])));
                }
                Some(v) => example.push_numeric(c as u32, v, self.numeric),
                None => example.push(c as u32, &text(field), 1.0),
            }
        }
        Ok(true)
    }

    fn variable_name(&self, v: u32) -> &str {
        &self.names[v as usize]
    }

    fn is_dense(&self, v: u32) -> bool {
        self.dense[v as usize]
    }

    fn variable_count(&self) -> u32 {
        self.names.len() as u32
    }
}
