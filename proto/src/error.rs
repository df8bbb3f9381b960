//! The one error type of the API crate.

use std::path::PathBuf;
use thiserror::Error;

/// What can go wrong before a call is made: a bad secret or address, a master that does
/// not answer. Failed calls themselves are `tonic::Status`, as the generated clients return.
#[derive(Debug, Error)]
pub enum ProtoError {
    #[error("{0}")]
    InvalidSecret(String),
    #[error("no job secret: set {} or pass --secret-file", crate::auth::SECRET_ENV)]
    NoSecret,
    #[error("{path}: {source}")]
    SecretFile { path: PathBuf, source: std::io::Error },
    #[error("{address}: not a valid address: {message}")]
    InvalidAddress { address: String, message: String },
    #[error("{address}: unreachable ({source})")]
    Unreachable { address: String, source: tonic::transport::Error },
}

/// Whether trying again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// The caller's input is wrong: the same call fails the same way.
    Usage,
    /// The peer is away or slow: a later call may succeed.
    Unavailable,
}

impl ProtoError {
    pub fn category(&self) -> Category {
        match self {
            ProtoError::InvalidSecret(_)
            | ProtoError::NoSecret
            | ProtoError::SecretFile { .. }
            | ProtoError::InvalidAddress { .. } => Category::Usage,
            ProtoError::Unreachable { .. } => Category::Unavailable,
        }
    }
}

pub type Result<T, E = ProtoError> = std::result::Result<T, E>;
