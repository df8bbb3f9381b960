use thiserror::Error;

/// Everything the pure engine can refuse. Callers add file names and line numbers.
#[derive(Debug, Error, PartialEq)]
pub enum EngineError {
    #[error("corrupt data: {0}")]
    Corrupt(String),
    #[error("checksum mismatch: expected crc32c {expected:08x}, found {actual:08x}")]
    Checksum { expected: u32, actual: u32 },
    #[error("invalid parameter {name} = {value}: {why}")]
    InvalidParameter { name: &'static str, value: f64, why: &'static str },
    #[error("the {loss} loss cannot be trained with {algorithm}: {why}")]
    UnsupportedLoss { loss: &'static str, algorithm: &'static str, why: &'static str },
    #[error("label {label} is outside the {loss} loss's domain ({domain})")]
    LabelDomain { label: f64, loss: &'static str, domain: &'static str },
    #[error("prediction overflow: |x * theta| exceeded the fixed-point range (2^31); rescale the features or labels")]
    PredictionOverflow,
}
