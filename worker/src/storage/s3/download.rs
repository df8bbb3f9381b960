//! Whole objects to local files: raw input (`linea prepare --input s3://...`) is read by
//! parsers that want a file (Parquet seeks), and may be far larger than memory.
//!
//! The object is named by its ETag from a HEAD, and every GET asks for that ETag
//! (`If-Match`), so the bytes written are the object the fingerprint describes even if it is
//! replaced meanwhile (the download then fails instead of mixing versions). A cut-off body
//! resumes from the bytes already written (`Range`), so a large object needs no single long
//! request; the SDK checks a stored CRC-32C as the body streams in, and the file's size must
//! be the object's.

use super::S3Storage;
use super::wire::{chain, classify};
use crate::error::{LineaError, Result};
use crate::storage::Storage;
use crate::storage::retry::{Failure, RetryPolicy, with_retries};
use std::cell::RefCell;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What identifies a stored object's content: its size and the store's ETag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub bytes: u64,
    /// Absent when the store sends none: such an object can never be known unchanged.
    pub etag: Option<String>,
}

impl S3Storage {
    /// Size and ETag of an object; `None` when it does not exist.
    pub fn info(&self, key: &str) -> Result<Option<ObjectInfo>> {
        let full = self.key(key);
        let counters = &self.counters;
        let result = self.runtime.block_on(with_retries(&self.options.retry, counters, &full, || async {
            counters.requests.fetch_add(1, Ordering::Relaxed);
            match self.client.head_object().bucket(&self.bucket).key(&full).send().await.map_err(classify) {
                Ok(head) => Ok(Some(ObjectInfo {
                    bytes: head.content_length().and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
                    etag: head.e_tag().map(str::to_string),
                })),
                Err(Failure::NotFound) => Ok(None),
                Err(other) => Err(other),
            }
        }));
        result.map_err(|f| self.give_up(key, f))
    }

    /// Writes the object `info` describes to `dest` (created or truncated).
    pub fn download(&self, key: &str, info: &ObjectInfo, dest: &Path) -> Result<()> {
        let full = self.key(key);
        let file = std::fs::File::create(dest).map_err(LineaError::io(dest))?;
        // One attempt may take as long as it makes progress: the SDK's read timeout ends a
        // stalled one, and the next resumes where it stopped.
        let policy = RetryPolicy { attempt_timeout: Duration::from_secs(7 * 24 * 3600), ..self.options.retry.clone() };
        // The file and the bytes in it, shared by the attempts (one at a time).
        let state = RefCell::new((file, 0u64));
        let result = self
            .runtime
            .block_on(with_retries(&policy, &self.counters, &full, || self.get_into(&full, info, &state, dest)));
        result.map_err(|f| self.give_up(key, f))?;
        let (file, written) = state.into_inner();
        if written != info.bytes {
            return Err(LineaError::Storage {
                object: self.describe(key),
                cause: format!("received {written} bytes of an object of {} bytes", info.bytes),
            });
        }
        file.sync_all().map_err(LineaError::io(dest))
    }

    /// One GET of the rest of the object, appended to `file`.
    async fn get_into(
        &self,
        key: &str,
        info: &ObjectInfo,
        state: &RefCell<(std::fs::File, u64)>,
        dest: &Path,
    ) -> Result<(), Failure> {
        // The state is borrowed between awaits only, never across one. The attempts run one at
        // a time (`with_retries`), which is what keeps the file's bytes in order.
        let written = state.borrow().1;
        if written >= info.bytes && info.bytes > 0 {
            return Ok(());
        }
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let mut request = self.client.get_object().bucket(&self.bucket).key(key);
        if let Some(etag) = &info.etag {
            request = request.if_match(etag);
        }
        if written > 0 {
            request = request.range(format!("bytes={written}-"));
        } else {
            // The whole object: the SDK can check its stored checksum as it streams in.
            request = request.checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled);
        }
        let mut output = request.send().await.map_err(|e| match classify(e) {
            // The ETag no longer matches: the object was replaced since it was looked at.
            Failure::Permanent(cause) if cause.contains("PreconditionFailed") || cause.contains("412") => {
                Failure::Permanent(format!("the object changed while it was read: {cause}"))
            }
            other => other,
        })?;
        loop {
            let chunk = output.body.try_next().await.map_err(|e| {
                let cause = format!("reading the body: {}", chain(&e));
                if cause.contains("checksum mismatch") { Failure::Corrupt(cause) } else { Failure::Transient(cause) }
            });
            let mut state = state.borrow_mut();
            let (file, written) = &mut *state;
            match chunk {
                Ok(Some(bytes)) => {
                    file.write_all(&bytes)
                        .map_err(|e| Failure::Permanent(format!("writing {}: {e}", dest.display())))?;
                    *written += bytes.len() as u64;
                }
                Ok(None) => return Ok(()),
                Err(Failure::Corrupt(cause)) => {
                    // Corrupt bytes are already in the file: start over.
                    file.set_len(0).map_err(|e| Failure::Permanent(format!("truncating {}: {e}", dest.display())))?;
                    std::io::Seek::rewind(file)
                        .map_err(|e| Failure::Permanent(format!("rewinding {}: {e}", dest.display())))?;
                    *written = 0;
                    return Err(Failure::Corrupt(cause));
                }
                Err(other) => return Err(other),
            }
        }
    }
}
