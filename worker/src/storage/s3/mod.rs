//! The S3 backend (`s3://bucket/prefix`) over aws-sdk-s3, for AWS and for S3-compatible
//! stores (MinIO, Ceph, s3s).
//!
//! Configuration is the standard AWS one, so a pod needs nothing linea-specific:
//! `AWS_ENDPOINT_URL` (a non-AWS store; path-style addressing is then used), `AWS_REGION`,
//! `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, or the profile chain
//! (`AWS_SHARED_CREDENTIALS_FILE` pointing at a file mounted from a Kubernetes Secret, web
//! identity, instance metadata). Credentials are never logged or put in a message.
//!
//! The rest of linea is synchronous (rayon), so this backend owns a small tokio runtime
//! and blocks on it; rayon threads calling `read` at once share its connections.

mod download;
mod multipart;
mod options;
mod wire;

pub use download::ObjectInfo;
pub use options::{S3Options, S3Stats};

use super::Storage;
use super::retry::{Counters, Failure, hedged, with_retries};
use crate::error::{LineaError, Result};
use crate::io_runtime::IoRuntime;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Region};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumMode;
use bytes::Bytes;
use std::sync::atomic::Ordering;
use wire::{chain, classify, decode_crc, encode_crc};

pub struct S3Storage {
    /// Dropped without blocking: a storage may be dropped by an async task (a worker's
    /// grid is shared with its runtime's tasks).
    runtime: IoRuntime,
    client: Client,
    bucket: String,
    prefix: String,
    options: S3Options,
    counters: Counters,
}

impl S3Storage {
    /// Connects to `s3://bucket[/prefix]`; the bucket must exist.
    pub fn open(location: &str, options: S3Options) -> Result<S3Storage> {
        let rest = location.strip_prefix("s3://").unwrap_or(location);
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(LineaError::Usage(format!("{location}: no bucket (expected s3://bucket/prefix)")));
        }
        let runtime = IoRuntime::new(2, "linea-s3").map_err(|e| LineaError::Storage {
            object: location.to_string(),
            cause: format!("starting I/O runtime: {e}"),
        })?;
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(endpoint) = &options.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some(region) = &options.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(credentials) = &options.credentials {
            loader = loader.credentials_provider(credentials.clone());
        }
        let shared = runtime.block_on(loader.load());
        let mut config = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(options.path_style.unwrap_or(shared.endpoint_url().is_some()))
            // Our own loop retries (see retry.rs); the SDK's would multiply attempts.
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(options.connect_timeout)
                    .read_timeout(options.response_timeout)
                    .build(),
            );
        if shared.region().is_none() {
            // S3-compatible stores ignore the region but SigV4 needs one.
            config = config.region(Region::new("us-east-1"));
        }
        Ok(S3Storage {
            client: Client::from_conf(config.build()),
            runtime,
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
            options,
            counters: Counters::default(),
        })
    }

    pub fn stats(&self) -> S3Stats {
        let c = &self.counters;
        S3Stats {
            requests: c.requests.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            hedges: c.hedges.load(Ordering::Relaxed),
            hedge_wins: c.hedge_wins.load(Ordering::Relaxed),
        }
    }

    fn key(&self, key: &str) -> String {
        if self.prefix.is_empty() { key.to_string() } else { format!("{}/{key}", self.prefix) }
    }

    /// The error that ends a request: the object, what went wrong last, and how often it
    /// was tried. A checksum mismatch is reported as corruption, like a grid object's.
    pub(super) fn give_up(&self, key: &str, (failure, attempts): (Failure, u32)) -> LineaError {
        let object = self.describe(key);
        let tries = if attempts > 1 { format!(" (gave up after {attempts} attempts)") } else { String::new() };
        match failure {
            Failure::NotFound => LineaError::NotFound { object },
            Failure::Checksum { expected, actual } => {
                LineaError::Engine { object, source: linea_engine::EngineError::Checksum { expected, actual } }
            }
            Failure::Corrupt(cause) => LineaError::data(object, format!("{cause}{tries}")),
            Failure::Permanent(cause) => LineaError::Refused { object, cause: format!("{cause}{tries}") },
            Failure::Transient(cause) => LineaError::Storage { object, cause: format!("{cause}{tries}") },
        }
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, Failure> {
        let output = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .map_err(classify)?;
        let stored = output.checksum_crc32_c().map(str::to_string);
        let bytes = output
            .body
            .collect()
            .await
            .map_err(|e| {
                let cause = format!("reading the body: {}", chain(&e));
                // The SDK checks the stored CRC-32C as the body streams in.
                if cause.contains("checksum mismatch") { Failure::Corrupt(cause) } else { Failure::Transient(cause) }
            })?
            .to_vec();
        // A composite checksum ("...-N") of a multipart object covers the parts, not the
        // whole; such objects are still checked part by part by the SDK.
        if let Some(expected) = stored.as_deref().filter(|s| !s.contains('-')).and_then(decode_crc) {
            let actual = crc32c::crc32c(&bytes);
            if actual != expected {
                return Err(Failure::Checksum { expected, actual });
            }
        }
        Ok(bytes)
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<(), Failure> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .checksum_crc32_c(encode_crc(crc32c::crc32c(&body)))
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(classify)?;
        Ok(())
    }

    /// Uploads in parts; the object appears only when the upload is completed, and a
    /// failed upload is aborted so its parts don't linger (and cost).
    pub(super) async fn head(&self, key: &str) -> Result<bool, Failure> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        match self.client.head_object().bucket(&self.bucket).key(key).send().await.map_err(classify) {
            Ok(_) => Ok(true),
            Err(Failure::NotFound) => Ok(false),
            Err(other) => Err(other),
        }
    }
}

impl Storage for S3Storage {
    fn read(&self, key: &str) -> Result<Vec<u8>> {
        let full = self.key(key);
        let (policy, counters, hedge) = (&self.options.retry, &self.counters, self.options.hedge_after);
        self.runtime
            .block_on(with_retries(policy, counters, &full, || hedged(hedge, counters, || self.get(&full))))
            .map_err(|f| self.give_up(key, f))
    }

    fn write(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let full = self.key(key);
        let body = Bytes::copy_from_slice(bytes);
        if bytes.len() >= self.options.multipart_threshold {
            return self.runtime.block_on(self.put_multipart(key, &full, body));
        }
        self.runtime
            .block_on(with_retries(&self.options.retry, &self.counters, &full, || self.put(&full, body.clone())))
            .map_err(|f| self.give_up(key, f))
    }

    fn remove(&self, key: &str) -> Result<()> {
        let full = self.key(key);
        let counters = &self.counters;
        let result = self.runtime.block_on(with_retries(&self.options.retry, counters, &full, || async {
            counters.requests.fetch_add(1, Ordering::Relaxed);
            match self.client.delete_object().bucket(&self.bucket).key(&full).send().await.map_err(classify) {
                Ok(_) | Err(Failure::NotFound) => Ok(()),
                Err(other) => Err(other),
            }
        }));
        result.map_err(|f| self.give_up(key, f))
    }

    fn exists(&self, key: &str) -> Result<bool> {
        let full = self.key(key);
        self.runtime
            .block_on(with_retries(&self.options.retry, &self.counters, &full, || self.head(&full)))
            .map_err(|f| self.give_up(key, f))
    }

    fn describe(&self, key: &str) -> String {
        format!("s3://{}/{}", self.bucket, self.key(key))
    }
}

impl Drop for S3Storage {
    fn drop(&mut self) {
        let s = self.stats();
        if s.requests > 0 {
            tracing::info!(
                "s3://{}/{}: {} requests, {} retries, {} hedged reads ({} won by the hedge)",
                self.bucket,
                self.prefix,
                s.requests,
                s.retries,
                s.hedges,
                s.hedge_wins
            );
        }
    }
}
