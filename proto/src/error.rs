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
    #[error("{address}: unreachable ({})", chain(source))]
    Unreachable { address: String, source: tonic::transport::Error },
    #[error("{}: {source}", path.display())]
    TlsRead { path: PathBuf, source: std::io::Error },
    #[error("{}: {message}", path.display())]
    TlsFile { path: PathBuf, message: String },
    #[error(
        "no TLS certificates: pass --tls-dir (or set {}) to the job's certificate folder (its Secret, \
         `linea certs`, or the folder the master printed), or --insecure for plain text",
        crate::tls::TLS_DIR_ENV
    )]
    NoTls,
    #[error("--insecure and --tls-dir exclude each other")]
    TlsConflict,
    #[error("certificate: {0}")]
    Certificate(String),
}

/// An error and its sources, "outer: inner: innermost": tonic's transport errors say only
/// "transport error" themselves, and the reason (refused, a certificate the peer does not
/// trust) is in the sources.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
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
            | ProtoError::InvalidAddress { .. }
            | ProtoError::TlsRead { .. }
            | ProtoError::TlsFile { .. }
            | ProtoError::NoTls
            | ProtoError::TlsConflict
            | ProtoError::Certificate(_) => Category::Usage,
            ProtoError::Unreachable { .. } => Category::Unavailable,
        }
    }
}

pub type Result<T, E = ProtoError> = std::result::Result<T, E>;
