use thiserror::Error;

/// Every way a reconcile can fail. The category labels the error metric; whether it is
/// permanent decides the retry ([`crate::reconcile::error_policy`]).
#[derive(Debug, Error)]
pub enum OperatorError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(String),
    #[error("{0} has no {1}")]
    MissingField(String, &'static str),
    #[error("serializing {0}: {1}")]
    Serialize(&'static str, serde_json::Error),
}

impl OperatorError {
    /// Whether retrying cannot help until the job changes: a stored object missing what
    /// every stored object has, or one that does not serialize.
    pub fn is_permanent(&self) -> bool {
        matches!(self, OperatorError::MissingField(..) | OperatorError::Serialize(..))
    }

    /// The metric label of the error.
    pub fn category(&self) -> &'static str {
        match self {
            OperatorError::Kube(_) => "api",
            OperatorError::Finalizer(_) => "finalizer",
            OperatorError::MissingField(..) => "object",
            OperatorError::Serialize(..) => "serialize",
        }
    }
}

pub type Result<T, E = OperatorError> = std::result::Result<T, E>;
