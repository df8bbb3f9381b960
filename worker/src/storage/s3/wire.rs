//! What crosses the wire: SDK errors sorted into retry classes, and checksums in the
//! form S3 sends them.

use crate::storage::retry::Failure;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

/// An error and its sources, joined by ": " (the SDK's own rendering appends Debug dumps).
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.ends_with(&next) {
            text = format!("{text}: {next}");
        }
        source = e.source();
    }
    text
}

/// Sorts an SDK error into retry classes. The cause text is the SDK's error chain, which
/// holds status, code and message but never credentials.
pub(super) fn classify<E>(error: SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let mut cause = chain(&error);
    if let Some(code) = error.code() {
        cause = format!("{cause} ({code}{})", error.message().map(|m| format!(": {m}")).unwrap_or_default());
    }
    match &error {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            let code = context.err().code().unwrap_or_default();
            const THROTTLED: [&str; 6] = [
                "SlowDown",
                "Throttling",
                "ThrottlingException",
                "RequestTimeout",
                "InternalError",
                "ServiceUnavailable",
            ];
            if status == 403 && code.is_empty() {
                // A HEAD's answer has no body, so no error code: say what 403 means.
                Failure::Permanent(format!("access denied (HTTP 403: wrong credentials, or no permission): {cause}"))
            } else if code == "NoSuchBucket" {
                Failure::Permanent(format!("no such bucket: {cause}"))
            } else if status == 404 || code == "NoSuchKey" || code == "NotFound" {
                Failure::NotFound
            } else if status >= 500 || status == 429 || THROTTLED.contains(&code) {
                Failure::Transient(cause)
            } else {
                Failure::Permanent(cause)
            }
        }
        SdkError::ConstructionFailure(_) => Failure::Permanent(cause),
        // Timeouts, refused or reset connections, malformed or cut-off responses.
        _ => Failure::Transient(cause),
    }
}

/// S3 sends checksums as the base64 of the big-endian bytes.
pub(super) fn encode_crc(crc: u32) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    // 32 bits and 4 zero bits are six base64 digits, padded to eight characters.
    let n = u64::from(crc) << 4;
    let chars: String = (0..6).map(|i| ALPHABET[((n >> (30 - 6 * i)) & 63) as usize] as char).collect();
    format!("{chars}==")
}

pub(super) fn decode_crc(text: &str) -> Option<u32> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let text = text.strip_suffix("==")?;
    if text.len() != 6 {
        return None;
    }
    let mut n = 0u64;
    for c in text.bytes() {
        n = n << 6 | u64::from(value(c)?);
    }
    u32::try_from(n >> 4).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_round_trip_through_base64() {
        // The CRC-32C of "hello world" as S3 documents it in x-amz-checksum-crc32c.
        assert_eq!(encode_crc(crc32c::crc32c(b"hello world")), "yZRlqg==");
        for crc in [0, 1, 0xFFFF_FFFF, 0x1234_5678, 0xC99465AA] {
            assert_eq!(decode_crc(&encode_crc(crc)), Some(crc));
        }
        assert_eq!(decode_crc("not base64"), None);
    }
}
