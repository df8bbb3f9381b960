//! `spec.rawData`: raw input the operator turns into the job's grid before training.
//!
//! A job names its data in one of two ways: a grid that `linea prepare` already wrote
//! (`datasetUri` alone), or raw input (`rawData`) together with where its grid goes
//! (`datasetUri`). In the second case the operator first runs a prepare pod
//! (`linea prepare --input <rawData.uri> ... --output <datasetUri> --reuse`), then the master
//! and workers. The fields are those of `linea prepare`, with the same meaning.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Format of the raw input, as `linea prepare --format` takes it.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum RawFormat {
    /// `label index:value ...` (LIBSVM / SVMlight).
    Libsvm,
    /// Vowpal Wabbit text: `label |namespace feature[:value] ...`.
    Vw,
    /// Criteo display-ads TSV: label, 13 integer columns, 26 categorical columns.
    Criteo,
    /// Comma- or tab-separated text, with or without a header.
    Csv,
    /// Apache Parquet.
    Parquet,
}

impl RawFormat {
    /// The value of `linea prepare --format`.
    pub fn as_str(self) -> &'static str {
        match self {
            RawFormat::Libsvm => "libsvm",
            RawFormat::Vw => "vw",
            RawFormat::Criteo => "criteo",
            RawFormat::Csv => "csv",
            RawFormat::Parquet => "parquet",
        }
    }
}

/// What numeric columns become, as `linea prepare --numeric` takes it.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum NumericMode {
    /// One feature carrying the raw value.
    Dense,
    /// One-hot over logarithmic buckets (the default for criteo).
    Buckets,
}

impl NumericMode {
    /// The value of `linea prepare --numeric`.
    pub fn as_str(self) -> &'static str {
        match self {
            NumericMode::Dense => "dense",
            NumericMode::Buckets => "buckets",
        }
    }
}

/// Raw training data in S3 and how to read it. The grid prepared from it is written to
/// `datasetUri`; a grid already there that was prepared from the same object (same URI,
/// size and ETag) with the same options is kept instead of being prepared again, so jobs on
/// the same input share one preparation.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RawData {
    /// The raw input file as an S3 object, `s3://bucket/key`. Must differ from datasetUri
    /// and modelUri.
    #[x_kube(validation = Rule::new(S3_OBJECT_RULE).message(crate::validation::MSG_RAW_DATA_URI_SCHEME))]
    #[schemars(length(min = 1, max = 2048))]
    pub uri: String,
    /// The input format: libsvm, vw, criteo, csv or parquet.
    pub format: RawFormat,
    /// Label column of csv/parquet input: a name or a 0-based index (default: the first
    /// column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub label: Option<String>,
    /// Label value that means the positive class (e.g. `>50K`); every other value is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub positive: Option<String>,
    /// Columns that are not features (ids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "ignore_schema")]
    pub ignore: Vec<String>,
    /// Numeric columns: `dense` (one feature with the value) or `buckets` (one-hot log
    /// buckets). Default: buckets for criteo, dense otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numeric: Option<NumericMode>,
    /// Examples per row shard, the unit of parallel work (default 16384).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1_i64, max = 4_294_967_295_i64))]
    pub rows_per_shard: Option<i64>,
}

/// Schema of `rawData.ignore`: bounded names (the CEL rule comparing rawData on update must
/// have a bounded cost), each documented for `kubectl explain`.
fn ignore_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Columns that are not features (ids).",
        "type": "array",
        "maxItems": 1024,
        "items": {
            "description": "A column name, or a 0-based column index.",
            "type": "string",
            "minLength": 1,
            "maxLength": 256,
        },
    })
}

/// The CEL rule of rawData.uri: an object (a key after the bucket), not only a bucket.
pub(crate) const S3_OBJECT_RULE: &str = "self.matches('^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/.+$')";

impl RawData {
    /// The `linea prepare` arguments after `--input` and `--format`, in the command line's
    /// order; `--output` and `--reuse` are the operator's.
    pub fn options(&self) -> Vec<(String, String)> {
        let mut args = Vec::new();
        if let Some(label) = &self.label {
            args.push(("--label".into(), label.clone()));
        }
        if let Some(positive) = &self.positive {
            args.push(("--positive".into(), positive.clone()));
        }
        if !self.ignore.is_empty() {
            args.push(("--ignore".into(), self.ignore.join(",")));
        }
        if let Some(numeric) = self.numeric {
            args.push(("--numeric".into(), numeric.as_str().into()));
        }
        if let Some(rows) = self.rows_per_shard {
            args.push(("--rows-per-shard".into(), rows.to_string()));
        }
        args
    }
}
