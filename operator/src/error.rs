use thiserror::Error;

/// Every way a reconcile can fail. The category labels the error metric.
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
