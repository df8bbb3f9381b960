//! The S3 backend against a real S3 server (s3s-fs on loopback, SigV4 checked): round
//! trips, multipart uploads, hedged reads through a slow proxy, checksum failures, and a
//! server that is gone.

mod s3;

use linea_worker::error::LineaError;
use linea_worker::storage::{Credentials, S3Options, S3Storage, Storage};
use s3::proxy::{Fault, FaultProxy};
use s3::server::S3Server;
use s3::{ACCESS_KEY, BUCKET, SECRET_KEY};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn options(endpoint: &str) -> S3Options {
    S3Options {
        endpoint: Some(endpoint.to_string()),
        region: Some("us-east-1".into()),
        credentials: Some(Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "test")),
        ..S3Options::default()
    }
}

fn storage(prefix: &str, options: S3Options) -> S3Storage {
    S3Storage::open(&format!("s3://{BUCKET}/{prefix}"), options).expect("opens")
}

#[test]
fn objects_round_trip_and_a_missing_one_is_named() {
    let server = S3Server::start();
    let s = storage("grid/", options(&server.endpoint()));
    s.write("cells/b00001/r000000", b"cell bytes").unwrap();
    assert_eq!(s.read("cells/b00001/r000000").unwrap(), b"cell bytes");
    assert_eq!(std::fs::read(server.object_path("grid/cells/b00001/r000000")).unwrap(), b"cell bytes");
    assert!(s.exists("cells/b00001/r000000").unwrap());
    s.remove("cells/b00001/r000000").unwrap();
    s.remove("cells/b00001/r000000").unwrap(); // removing what is not there is fine
    assert!(!s.exists("cells/b00001/r000000").unwrap());
    let error = s.read("manifest.json").unwrap_err();
    assert!(matches!(&error, LineaError::NotFound { .. }), "{error}");
    assert_eq!(error.to_string(), format!("s3://{BUCKET}/grid/manifest.json: no such object"));
}

#[test]
fn a_wrong_secret_is_refused_without_showing_it() {
    let server = S3Server::start();
    let mut o = options(&server.endpoint());
    o.credentials = Some(Credentials::new(ACCESS_KEY, "not-the-secret-8e1f", None, None, "test"));
    let error = storage("p", o).write("x", b"x").unwrap_err().to_string();
    assert!(error.starts_with(&format!("s3://{BUCKET}/p/x: ")), "{error}");
    assert!(!error.contains("not-the-secret-8e1f") && !error.contains(SECRET_KEY), "{error}");
    assert!(!error.contains("gave up"), "a refused signature is not retried: {error}");
}

#[test]
fn large_objects_are_uploaded_in_parts() {
    let server = S3Server::start();
    let mut o = options(&server.endpoint());
    (o.multipart_threshold, o.part_size) = (6 << 20, 5 << 20);
    let s = storage("models", o);
    let bytes: Vec<u8> = (0..13u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    s.write("big", &bytes).unwrap();
    // create + 3 parts + complete
    assert_eq!(s.stats().requests, 5);
    assert!(std::fs::read(server.object_path("models/big")).unwrap() == bytes);
    assert!(s.read("big").unwrap() == bytes);
}

#[test]
fn a_slow_read_is_hedged_and_the_second_request_wins() {
    let server = S3Server::start();
    // Request 0 is the PUT; request 1, the first GET, hangs for 20 s.
    let proxy = FaultProxy::start(
        server.port,
        Arc::new(|n, _: &str| (n == 1).then_some(Fault::Latency(Duration::from_secs(20)))),
    );
    let mut o = options(&proxy.endpoint());
    o.hedge_after = Some(Duration::from_millis(200));
    let s = storage("h", o);
    s.write("cell", b"payload").unwrap();
    let started = Instant::now();
    assert_eq!(s.read("cell").unwrap(), b"payload");
    let took = started.elapsed();
    let stats = s.stats();
    eprintln!("hedged read took {took:?}; {stats:?}; proxy: {}", proxy.counts.summary());
    assert!(took < Duration::from_secs(5), "the hedge should answer long before the slow request: {took:?}");
    assert_eq!((stats.hedges, stats.hedge_wins, stats.retries), (1, 1, 0));
}

#[test]
fn a_flipped_byte_fails_the_stored_checksum() {
    let server = S3Server::start();
    let mut o = options(&server.endpoint());
    o.retry.attempts = 2;
    let s = storage("c", o);
    s.write("model", b"a model that will be damaged on disk").unwrap();
    let path = server.object_path("c/model");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[5] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    let error = s.read("model").unwrap_err();
    assert_eq!(error.exit_code(), 2, "corruption is bad data, not an I/O hiccup: {error}");
    let message = error.to_string();
    assert!(message.starts_with(&format!("s3://{BUCKET}/c/model: ")) && message.contains("checksum"), "{message}");
}

#[test]
fn a_server_that_is_gone_is_reported_with_the_object_and_the_cause() {
    let mut server = S3Server::start();
    let o = options(&server.endpoint());
    let attempts = o.retry.attempts;
    let s = storage("gone", o);
    server.stop();
    let started = Instant::now();
    let message = s.read("manifest.json").unwrap_err().to_string();
    eprintln!("gave up after {:?}: {message}", started.elapsed());
    assert!(message.starts_with(&format!("s3://{BUCKET}/gone/manifest.json: ")), "{message}");
    assert!(message.contains("Connection refused") || message.contains("connect"), "{message}");
    assert!(message.ends_with(&format!("(gave up after {attempts} attempts)")), "{message}");
    assert!(!message.contains(SECRET_KEY), "{message}");
    assert_eq!(s.stats().retries, u64::from(attempts) - 1);
}

#[test]
fn a_server_that_accepts_and_goes_silent_times_out() {
    // The kernel completes the handshake into the backlog; nobody ever answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut o = options(&format!("http://{}", silent.local_addr().unwrap()));
    (o.response_timeout, o.retry.attempts, o.hedge_after) = (Duration::from_millis(300), 2, None);
    let started = Instant::now();
    let message = storage("silent", o).read("manifest.json").unwrap_err().to_string();
    eprintln!("gave up after {:?}: {message}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(5), "{message}");
    assert!(message.starts_with(&format!("s3://{BUCKET}/silent/manifest.json: ")), "{message}");
    assert!(message.to_lowercase().contains("timeout") && message.ends_with("(gave up after 2 attempts)"), "{message}");
}
