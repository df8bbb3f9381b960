use linea_engine::EngineError;
use std::path::PathBuf;
use thiserror::Error;

/// Every way a linea command can fail, each naming what it was working on.
#[derive(Debug, Error)]
pub enum LineaError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{file}:{line}: {message}")]
    Input { file: String, line: u64, message: String },
    #[error("{file}: {message}")]
    Data { file: String, message: String },
    #[error("{object}: {source}")]
    Engine { object: String, source: EngineError },
    /// A storage request that failed for good (after retries): the object and the last cause.
    #[error("{object}: {cause}")]
    Storage { object: String, cause: String },
    #[error("{object}: no such object")]
    NotFound { object: String },
    /// A storage request the store refused for good (access denied, invalid credentials, no
    /// such bucket, a bad request): trying again, or restarting, cannot help.
    #[error("{object}: {cause}")]
    Refused { object: String, cause: String },
    #[error("{0}")]
    Usage(String),
    /// A master or worker that refused or could not be reached, and why.
    #[error("{peer}: {message}")]
    Remote { peer: String, message: String },
    #[error("training failed: {0}")]
    Training(#[from] EngineError),
    /// The master stopped on SIGTERM or SIGINT with its last completed iteration in the
    /// checkpoint, or `linea train` with the model of the epochs done written (the text says
    /// which): not a failure, and not the end of the job.
    #[error("{0}")]
    Stopped(String),
}

/// Exit code of a master that stopped on a signal after checkpointing ([`LineaError::Stopped`]):
/// 128 + SIGTERM, what a shell and the kubelet report for a process SIGTERM ended, so a
/// master killed by SIGTERM before its handler ran (or an older one without it) reads the
/// same. The operator restarts such a master at once, without counting a failure. A
/// `linea train` stopped so (its model of the epochs done written) exits with it too: not
/// 0, since its model is not converged.
pub const EXIT_STOPPED: i32 = 143;

impl LineaError {
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LineaError {
        let path = path.into();
        move |source| LineaError::Io { path, source }
    }

    pub fn input(file: &str, line: u64, message: impl Into<String>) -> LineaError {
        LineaError::Input { file: file.to_string(), line, message: message.into() }
    }

    pub fn data(file: impl Into<String>, message: impl Into<String>) -> LineaError {
        LineaError::Data { file: file.into(), message: message.into() }
    }

    /// Process exit code: 2 for bad input, usage or storage that refuses the request (a
    /// restart cannot help), [`EXIT_STOPPED`] for a master stopped on a signal (restart it),
    /// 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            LineaError::Input { .. }
            | LineaError::Data { .. }
            | LineaError::Usage(_)
            | LineaError::Engine { .. }
            | LineaError::NotFound { .. }
            | LineaError::Refused { .. } => 2,
            LineaError::Io { .. }
            | LineaError::Storage { .. }
            | LineaError::Remote { .. }
            | LineaError::Training(_) => 1,
            LineaError::Stopped(_) => EXIT_STOPPED,
        }
    }
}

/// The API crate's errors read as the runtime's own: a bad secret or address is a usage
/// error, an unreadable secret file an I/O error, an absent master a remote one.
impl From<linea_proto::ProtoError> for LineaError {
    fn from(e: linea_proto::ProtoError) -> Self {
        use linea_proto::ProtoError;
        match e {
            ProtoError::SecretFile { path, source } | ProtoError::TlsRead { path, source } => {
                LineaError::Io { path, source }
            }
            ProtoError::Unreachable { address, source } => LineaError::Remote {
                peer: address,
                message: format!("unreachable ({})", linea_proto::error::chain(&source)),
            },
            e @ (ProtoError::InvalidSecret(_)
            | ProtoError::NoSecret
            | ProtoError::InvalidAddress { .. }
            | ProtoError::TlsFile { .. }
            | ProtoError::NoTls
            | ProtoError::TlsConflict
            | ProtoError::Certificate(_)) => LineaError::Usage(e.to_string()),
        }
    }
}

pub type Result<T, E = LineaError> = std::result::Result<T, E>;
