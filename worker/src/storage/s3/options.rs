//! Tunables of the S3 backend and its request counts.

use super::super::retry::RetryPolicy;
use crate::error::{LineaError, Result};
use aws_sdk_s3::config::Credentials;
use std::time::Duration;

/// Tunables of the S3 backend; [`S3Options::from_env`] reads the `LINEA_S3_*` overrides.
#[derive(Debug, Clone)]
pub struct S3Options {
    pub retry: RetryPolicy,
    /// Send a second GET when the first has not finished after this long (None: never).
    pub hedge_after: Option<Duration>,
    /// Objects of this size or more are uploaded in parts.
    pub multipart_threshold: usize,
    /// Size of each part but the last (S3 wants at least 5 MiB).
    pub part_size: usize,
    pub connect_timeout: Duration,
    /// From sending a request (body included) to the response's head; a server that
    /// accepted the connection and went silent is given up on after this.
    pub response_timeout: Duration,
    /// Path-style (`endpoint/bucket/key`) rather than virtual-hosted addressing; None:
    /// path-style exactly when a custom endpoint is set.
    pub path_style: Option<bool>,
    /// Endpoint, region and credentials given in code (tests, and a runtime that gets
    /// them from elsewhere); None: from the standard AWS chain.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub credentials: Option<Credentials>,
}

impl Default for S3Options {
    fn default() -> Self {
        S3Options {
            retry: RetryPolicy::default(),
            // Well above a healthy GET of a cell (tens of milliseconds to first byte plus
            // transfer), so only the slow tail is duplicated.
            hedge_after: Some(Duration::from_secs(2)),
            multipart_threshold: 64 << 20,
            part_size: 16 << 20,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(30),
            path_style: None,
            endpoint: None,
            region: None,
            credentials: None,
        }
    }
}

impl S3Options {
    /// Defaults with the overrides `LINEA_S3_ATTEMPTS`, `LINEA_S3_ATTEMPT_TIMEOUT_MS`,
    /// `LINEA_S3_BACKOFF_MS`, `LINEA_S3_HEDGE_MS` (0: no hedging), `LINEA_S3_MULTIPART_MB`,
    /// `LINEA_S3_PART_MB` and `LINEA_S3_PATH_STYLE` (true/false).
    pub fn from_env() -> Result<S3Options> {
        fn var<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
            match std::env::var(name) {
                Ok(text) => text
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| LineaError::Usage(format!("{name}={text}: not a valid value"))),
                Err(_) => Ok(None),
            }
        }
        let mut o = S3Options::default();
        if let Some(n) = var::<u32>("LINEA_S3_ATTEMPTS")? {
            o.retry.attempts = n.max(1);
        }
        if let Some(ms) = var("LINEA_S3_ATTEMPT_TIMEOUT_MS")? {
            o.retry.attempt_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = var("LINEA_S3_BACKOFF_MS")? {
            o.retry.base = Duration::from_millis(ms);
        }
        if let Some(ms) = var::<u64>("LINEA_S3_HEDGE_MS")? {
            o.hedge_after = (ms > 0).then(|| Duration::from_millis(ms));
        }
        if let Some(mb) = var::<usize>("LINEA_S3_MULTIPART_MB")? {
            o.multipart_threshold = mb.max(1) << 20;
        }
        if let Some(mb) = var::<usize>("LINEA_S3_PART_MB")? {
            o.part_size = mb.max(1) << 20;
        }
        o.path_style = var("LINEA_S3_PATH_STYLE")?;
        Ok(o)
    }
}

/// Request counts of one storage, as reported in its closing log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S3Stats {
    pub requests: u64,
    pub retries: u64,
    pub hedges: u64,
    pub hedge_wins: u64,
}
