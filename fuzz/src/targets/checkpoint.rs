//! Checkpoint objects (worker::runtime::checkpoint): a JSON header line and the engine's
//! postcard encoding of an algorithm's state or step. The first byte picks which of SCD's and
//! CoCoA's four types the body is read as; one that decodes encodes to bytes that decode to
//! the same bytes again. Corrupt counts must be errors, not allocations (the capped
//! allocator checks).
use linea_engine::algorithm::{decode, encode};
use linea_engine::cocoa::{CocoaState, CocoaStep};
use linea_engine::scd::{ScdState, ScdStep};
use linea_worker::runtime::checkpoint::parse_object;
use serde::{Serialize, de::DeserializeOwned};

/// The object as the master reads it (under the fingerprint its header names, so a real
/// checkpoint's body is reached), and its body alone round trip.
fn round_trip<T: Serialize + DeserializeOwned>(data: &[u8]) {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(split) => (&data[..split], &data[split + 1..]),
        None => (&data[..0], data),
    };
    let fingerprint = serde_json::from_slice::<serde_json::Value>(header)
        .ok()
        .and_then(|h| h.get("fingerprint").and_then(|f| f.as_str()).map(String::from))
        .unwrap_or_default();
    let parsed = parse_object::<T>(data, &fingerprint, "object");
    if let Ok(value) = decode::<T>(body, "body") {
        let bytes = encode(&value);
        let again: T = decode(&bytes, "re-encoded").expect("a re-encoded body decodes");
        assert_eq!(encode(&again), bytes);
    } else {
        assert!(parsed.is_err(), "an object whose body does not decode is refused");
    }
}

pub fn run(data: &[u8]) {
    let Some((&which, data)) = data.split_first() else { return };
    match which % 4 {
        0 => round_trip::<ScdState>(data),
        1 => round_trip::<ScdStep>(data),
        2 => round_trip::<CocoaState>(data),
        _ => round_trip::<CocoaStep>(data),
    }
}
