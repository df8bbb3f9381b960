//! The per-job secret that authenticates every master-worker, worker-worker and
//! operator-master call.
//!
//! It comes from `LINEA_JOB_SECRET` or a file (a mounted Kubernetes Secret; the operator
//! derives it from its key and the job's uid), travels as `authorization: Bearer ...`, and
//! is compared in constant time. It is never printed: `Debug` shows a fixed string. It is
//! the authorization; the channel under it is TLS with the job's certificates
//! ([`crate::tls`]), so the secret never crosses the network in the clear (docs/security.md).

use crate::error::{ProtoError, Result};
use std::sync::Arc;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

pub const SECRET_ENV: &str = "LINEA_JOB_SECRET";

#[derive(Clone)]
pub struct JobSecret(Arc<MetadataValue<Ascii>>);

impl std::fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobSecret(<redacted>)")
    }
}

impl JobSecret {
    pub fn new(secret: &str) -> Result<Self> {
        let secret = secret.trim();
        if secret.len() < 16 || !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ProtoError::InvalidSecret(
                "the job secret must be at least 16 printable ASCII characters without spaces".into(),
            ));
        }
        let mut value: MetadataValue<Ascii> =
            format!("Bearer {secret}").parse().map_err(|_| ProtoError::InvalidSecret("invalid job secret".into()))?;
        // Shown as "Sensitive" by the header's Debug (a library's debug log of a request),
        // and never entered into HPACK's compression table.
        value.set_sensitive(true);
        Ok(Self(Arc::new(value)))
    }

    /// From `--secret-file` if given, else from `LINEA_JOB_SECRET`.
    pub fn load(file: Option<&str>) -> Result<Self> {
        match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| ProtoError::SecretFile { path: path.into(), source })?;
                Self::new(&text)
            }
            None => match std::env::var(SECRET_ENV) {
                Ok(value) => Self::new(&value),
                Err(_) => Err(ProtoError::NoSecret),
            },
        }
    }

    /// A fresh random secret for a job run on this machine.
    pub fn generate() -> Self {
        let bytes: [u8; 24] = rand::random();
        Self::new(&bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()).expect("hex is valid")
    }

    /// The secret itself, to hand to child processes through their environment.
    pub fn expose(&self) -> &str {
        self.0.to_str().expect("ascii").trim_start_matches("Bearer ")
    }

    /// Server side: refuses calls without the secret.
    pub fn check(&self) -> Check {
        Check(self.0.clone())
    }

    /// Client side: adds the secret to every call.
    pub fn attach(&self) -> Attach {
        Attach(self.0.clone())
    }
}

/// The client interceptor of [`JobSecret::attach`].
#[derive(Clone)]
pub struct Attach(Arc<MetadataValue<Ascii>>);

impl Interceptor for Attach {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request.metadata_mut().insert("authorization", (*self.0).clone());
        Ok(request)
    }
}

/// The server interceptor of [`JobSecret::check`]: UNAUTHENTICATED unless the call carries
/// the secret.
#[derive(Clone)]
pub struct Check(Arc<MetadataValue<Ascii>>);

impl Interceptor for Check {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let given = request.metadata().get("authorization").map(|v| v.as_bytes()).unwrap_or_default();
        if constant_time_eq(given, self.0.as_bytes()) {
            Ok(request)
        } else {
            Err(Status::unauthenticated("wrong or missing job secret"))
        }
    }
}

/// A client channel that authenticates every call.
pub type Authenticated = tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Attach>;

/// Equal without an early exit, so the time taken does not tell how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_is_checked_and_never_shown() {
        let secret = JobSecret::new("0123456789abcdef-secret").unwrap();
        assert!(!format!("{secret:?}").contains("0123456789abcdef"));
        let attached = secret.attach().call(Request::new(())).unwrap();
        assert!(!format!("{:?}", attached.metadata()).contains("0123456789abcdef"), "{:?}", attached.metadata());
        let mut check = secret.check();
        assert!(check.call(secret.attach().call(Request::new(())).unwrap()).is_ok());
        let other = JobSecret::new("0123456789abcdef-other").unwrap();
        let refused = check.call(other.attach().call(Request::new(())).unwrap()).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        assert_eq!(check.call(Request::new(())).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert!(matches!(JobSecret::new("short"), Err(ProtoError::InvalidSecret(_))));
        assert!(JobSecret::new("0123456789abcdef with spaces").is_err());
        assert_eq!(JobSecret::new(secret.expose()).unwrap().expose(), secret.expose());
    }

    #[test]
    fn a_missing_secret_file_names_the_file() {
        let error = JobSecret::load(Some("/nonexistent/linea-secret")).unwrap_err();
        assert!(error.to_string().starts_with("/nonexistent/linea-secret: "), "{error}");
    }
}
