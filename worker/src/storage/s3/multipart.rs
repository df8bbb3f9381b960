//! Multipart upload of large objects: each part with its own checksum and retries, the
//! object visible only once the upload is completed.

use super::S3Storage;
use super::wire::{chain, classify, encode_crc};
use crate::error::Result;
use crate::storage::retry::{Failure, with_retries};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use std::sync::atomic::Ordering;

impl S3Storage {
    pub(super) async fn put_multipart(&self, name: &str, key: &str, body: Bytes) -> Result<()> {
        let policy = &self.options.retry;
        let counters = &self.counters;
        let upload_id = with_retries(policy, counters, name, || async {
            counters.requests.fetch_add(1, Ordering::Relaxed);
            let out = self
                .client
                .create_multipart_upload()
                .bucket(&self.bucket)
                .key(key)
                .checksum_algorithm(ChecksumAlgorithm::Crc32C)
                .send()
                .await
                .map_err(classify)?;
            out.upload_id.ok_or_else(|| Failure::Permanent("the store returned no upload id".into()))
        })
        .await
        .map_err(|f| self.give_up(name, f))?;
        let result = self.upload_parts(name, key, &upload_id, body).await;
        if result.is_err() {
            let abort = self.client.abort_multipart_upload().bucket(&self.bucket).key(key).upload_id(&upload_id);
            if let Err(e) = abort.send().await {
                tracing::warn!(object = name, "could not abort the failed upload: {}", chain(&e));
            }
        }
        result
    }

    async fn upload_parts(&self, name: &str, key: &str, upload_id: &str, body: Bytes) -> Result<()> {
        let policy = &self.options.retry;
        let counters = &self.counters;
        let mut parts = Vec::new();
        let size = self.options.part_size.max(1);
        for (i, start) in (0..body.len()).step_by(size).enumerate() {
            let chunk = body.slice(start..(start + size).min(body.len()));
            let number = i as i32 + 1;
            let checksum = encode_crc(crc32c::crc32c(&chunk));
            let part = with_retries(policy, counters, name, || async {
                counters.requests.fetch_add(1, Ordering::Relaxed);
                let out = self
                    .client
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .part_number(number)
                    .checksum_crc32_c(&checksum)
                    .body(ByteStream::from(chunk.clone()))
                    .send()
                    .await
                    .map_err(classify)?;
                Ok(CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(out.e_tag)
                    .checksum_crc32_c(&checksum)
                    .build())
            })
            .await
            .map_err(|f| self.give_up(name, f))?;
            parts.push(part);
        }
        let completed = CompletedMultipartUpload::builder().set_parts(Some(parts)).build();
        let mut attempts = 0;
        with_retries(policy, counters, name, || {
            attempts += 1;
            let retried = attempts > 1;
            let completed = completed.clone();
            async move {
                counters.requests.fetch_add(1, Ordering::Relaxed);
                let sent = self
                    .client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .multipart_upload(completed)
                    .send()
                    .await;
                match sent.map_err(classify) {
                    // An earlier attempt completed it but its answer was lost.
                    Err(Failure::NotFound) if retried => self.head(key).await.and_then(|found| {
                        if found { Ok(()) } else { Err(Failure::Permanent("the upload vanished".into())) }
                    }),
                    other => other.map(|_| ()),
                }
            }
        })
        .await
        .map_err(|f| self.give_up(name, f))
    }
}
