//! The hedge of a merged unit's parts, against real Peer servers on loopback: parts come in
//! order from holders of the job's secret; a part that fails its checksum, a holder that is
//! gone (a killed process: nothing listens at its address), one that never answers, one
//! that holds no such part, and a caller without the secret each make the fetch fail, and
//! then the unit is read from storage.

use super::*;
use crate::runtime::auth::JobSecret;
use linea_proto::client::{Expect, Timeouts};
use linea_proto::peer::PeerBackend;
use linea_proto::tls::{Transport, WORKER_NAME};

/// Parts of session "s": unit `u` is `u` repeated 1000 + u times; `damaged` sends them with
/// a checksum one off.
struct Holder {
    damaged: bool,
}

fn part_of(unit: u32) -> Vec<u8> {
    vec![unit as u8; 1000 + unit as usize]
}

impl PeerBackend for Holder {
    fn in_session(&self, session: &str) -> bool {
        session == "s"
    }
    fn partial(&self, _: u64, _: usize, _: usize) -> Option<proto::Partial> {
        None
    }
    fn unit_state(&self, _: u32, _: u64) -> Option<Vec<u8>> {
        None
    }
    fn cell(&self, _: u32, _: u32) -> Option<Vec<u8>> {
        None
    }
    fn part(&self, session: &str, unit: u32) -> Option<proto::UnitPart> {
        let mut part = sealed(part_of(unit));
        part.crc32c = part.crc32c.wrapping_add(u32::from(self.damaged));
        (session == "s").then_some(part)
    }
}

async fn serve(holder: Holder, secret: &JobSecret) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let service = linea_proto::server::peer(Arc::new(holder), secret);
    let server = linea_proto::server::builder(&Transport::Plaintext).unwrap().add_service(service);
    tokio::spawn(server.serve_with_incoming(linea_proto::server::incoming(listener)));
    address
}

fn request(
    address: &str,
    secret: &JobSecret,
    session: &str,
    unit: u32,
) -> (String, PeerClient, proto::FetchPartRequest) {
    let channel =
        linea_proto::client::lazy_channel(address, Timeouts::RUNTIME, &Transport::Plaintext, Expect::Name(WORKER_NAME));
    let client = linea_proto::client::peer(channel.unwrap(), secret);
    (address.to_string(), client, proto::FetchPartRequest { session: session.into(), unit })
}

const PATIENCE: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_come_verified_and_in_order_or_the_fetch_fails() {
    let secret = JobSecret::generate();
    let (a, b) = (serve(Holder { damaged: false }, &secret).await, serve(Holder { damaged: false }, &secret).await);
    let requests = vec![request(&b, &secret, "s", 4), request(&a, &secret, "s", 5), request(&b, &secret, "s", 6)];
    let parts = fetch_all(requests, PATIENCE).await.unwrap();
    assert_eq!(parts, [part_of(4), part_of(5), part_of(6)]);

    let failure = |requests| async move { fetch_all(requests, PATIENCE).await.expect_err("a failed part") };
    let damaged = serve(Holder { damaged: true }, &secret).await;
    let why = failure(vec![request(&a, &secret, "s", 1), request(&damaged, &secret, "s", 2)]).await;
    assert!(why.contains("part 2: part fails its checksum"), "{why}");

    // A killed holder: its port refuses connections. Refused at once, not after the patience.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let killed = format!("http://127.0.0.1:{port}");
    let why = failure(vec![request(&a, &secret, "s", 1), request(&killed, &secret, "s", 2)]).await;
    assert!(why.contains(&killed) && !why.contains("within"), "{why}");

    // A holder that takes the connection and never answers: the patience bounds the wait.
    let hanging = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung = format!("http://{}", hanging.local_addr().unwrap());
    let why = failure(vec![request(&hung, &secret, "s", 1)]).await;
    assert_eq!(why, format!("parts not all in within {PATIENCE:?}"));
    drop(hanging);

    let why = failure(vec![request(&a, &secret, "another session", 1)]).await;
    assert!(why.contains("no part of unit 1 of session another session"), "{why}");
    let why = failure(vec![request(&a, &JobSecret::generate(), "s", 1)]).await;
    assert!(why.to_lowercase().contains("unauthenticated") || why.contains("secret"), "{why}");
}

#[test]
fn a_part_is_sealed_with_its_checksum() {
    let part = sealed(b"rows".to_vec());
    assert_eq!(verified(part.clone()).unwrap(), b"rows");
    let mut flipped = part;
    flipped.part[0] ^= 1;
    assert!(verified(flipped).unwrap_err().contains("checksum"));
}
