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
    /// A fixed-point quantity left its proven range ([`crate::fixed`]): nothing after it
    /// would be exact, so the run stops instead of returning a wrong model.
    #[error(
        "the {quantity} reached {value:.3e}, outside the exact fixed-point range ({range}); \
         rescale the feature values (or, for squared loss, the labels) into a smaller range"
    )]
    OutOfRange { quantity: String, value: f64, range: String },
}
