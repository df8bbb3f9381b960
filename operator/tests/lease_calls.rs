//! The Lease's API calls against a mocked API server: what the e2e cannot provoke at will —
//! two replicas racing for the same expired Lease (the loser's apply is refused on its stale
//! `resourceVersion`), and a leader whose API server stops answering. The real API server
//! runs the rest in e2e/operator.sh (kill -9 of the leader, release on SIGTERM).
//!
//! Time is tokio's paused clock: durations pass without waiting.

mod common;

use common::{Call, mock_client, serve};
use http::{Request, Response, StatusCode};
use kube::client::Body;
use linea_operator::election::Timing;
use linea_operator::lease::{Elector, Ended};
use serde_json::{Value, json};
use std::time::Duration;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/linea-system/leases/linea-operator";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/linea-system/leases";

/// 1 s lease, 500 ms renew deadline, 250 ms retry period.
fn timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(500),
        retry_period: Duration::from_millis(250),
    }
    .validated()
    .unwrap()
}

fn lease(holder: &str, version: &str, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "linea-operator", "namespace": "linea-system", "resourceVersion": version},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 1, "leaseTransitions": transitions,
                 "renewTime": "2026-11-25T10:00:00.000000Z", "acquireTime": "2026-11-25T10:00:00.000000Z"}
    })
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason})
}

/// The first look finds no Lease, and the replica creates it (version 1).
fn creates_lease() -> Vec<Call> {
    vec![
        ("GET", LEASE, StatusCode::NOT_FOUND, status(404, "NotFound")),
        ("POST", LEASES, StatusCode::CREATED, lease("a", "1", 0)),
    ]
}

fn elector(identity: &str) -> (Elector, tower_test::mock::Handle<Request<Body>, Response<Body>>) {
    let (client, handle) = mock_client("linea-system");
    (Elector::new(client, "linea-system", "linea-operator", identity.into(), timing()), handle)
}

#[tokio::test(start_paused = true)]
async fn of_two_replicas_taking_over_one_expired_lease_the_one_with_a_stale_version_loses() {
    let (mut a, handle) = elector("a");
    let server = tokio::spawn(serve(
        handle,
        vec![
            ("GET", LEASE, StatusCode::OK, lease("b", "5", 3)),
            ("GET", LEASE, StatusCode::OK, lease("b", "5", 3)),
            // Another replica wrote first: the apply carrying version 5 is refused.
            ("PATCH", LEASE, StatusCode::CONFLICT, status(409, "Conflict")),
            // The winner's record is new to this replica: its lease runs from now.
            ("GET", LEASE, StatusCode::OK, lease("c", "6", 4)),
        ],
    ));
    assert!(!a.try_once().await.unwrap(), "b's lease has not expired");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(!a.try_once().await.unwrap(), "the take-over was refused");
    assert!(!a.try_once().await.unwrap(), "c holds a fresh lease");
    drop(a);
    let sent = server.await.unwrap();
    assert_eq!(sent.len(), 4);
    let (query, body) = &sent[2];
    assert!(query.contains("fieldManager=linea-operator") && query.contains("force=true"), "{query}");
    assert_eq!(body["metadata"]["resourceVersion"], "5", "the version the decision was made on");
    assert_eq!(body["spec"]["holderIdentity"], "a");
    assert_eq!(body["spec"]["leaseTransitions"], 4);
    assert_eq!(body["spec"]["leaseDurationSeconds"], 1);
}

#[tokio::test(start_paused = true)]
async fn a_missing_lease_is_created_renewed_on_its_version_and_given_up_on_stop() {
    let (mut a, handle) = elector("a");
    let server = tokio::spawn(serve(
        handle,
        [
            creates_lease(),
            vec![
                ("GET", LEASE, StatusCode::OK, lease("a", "1", 0)),
                ("PATCH", LEASE, StatusCode::OK, lease("a", "2", 0)),
                // Stopped: read, then released on the version read.
                ("GET", LEASE, StatusCode::OK, lease("a", "2", 0)),
                ("PATCH", LEASE, StatusCode::OK, lease("", "3", 0)),
            ],
        ]
        .concat(),
    ));
    assert!(a.try_once().await.unwrap(), "created, held");
    assert!(a.try_once().await.unwrap(), "renewed");
    assert_eq!(a.lead(async {}).await, Ended::Released);
    let sent = server.await.unwrap();
    assert_eq!(sent.len(), 6);
    let created = &sent[1].1;
    assert_eq!(
        (created["spec"]["holderIdentity"].as_str(), created["spec"]["leaseTransitions"].as_i64()),
        (Some("a"), Some(0))
    );
    assert!(sent[1].0.contains("fieldManager=linea-operator"));
    let renewed = &sent[3].1;
    assert_eq!(
        (renewed["metadata"]["resourceVersion"].as_str(), renewed["spec"]["holderIdentity"].as_str()),
        (Some("1"), Some("a"))
    );
    let released = &sent[5].1;
    assert_eq!(released["metadata"]["resourceVersion"], "2");
    assert_eq!(released["spec"]["holderIdentity"], "", "no holder: a standby takes it at its next look");
    assert_eq!(released["spec"]["leaseDurationSeconds"], 1);
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_stops_leading_at_the_renew_deadline() {
    let (mut a, handle) = elector("a");
    let server = tokio::spawn(serve(
        handle,
        [
            creates_lease(),
            vec![
                // The API server fails every renewal from now on.
                ("GET", LEASE, StatusCode::SERVICE_UNAVAILABLE, status(503, "ServiceUnavailable")),
                ("GET", LEASE, StatusCode::SERVICE_UNAVAILABLE, status(503, "ServiceUnavailable")),
            ],
        ]
        .concat(),
    ));
    assert!(a.try_once().await.unwrap());
    let started = tokio::time::Instant::now();
    let ended = a.lead(std::future::pending()).await;
    assert!(matches!(&ended, Ended::Lost(why) if why.contains("not renewed")), "{ended:?}");
    let led = started.elapsed();
    assert!(
        led >= Duration::from_millis(500) && led < Duration::from_secs(1),
        "stopped after {led:?}, before the lease duration"
    );
    // The last renewal may be abandoned before it reaches the server.
    assert!(server.await.unwrap().len() >= 3);
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_lease_was_taken_stops_at_once() {
    let (mut a, handle) = elector("a");
    let server = tokio::spawn(serve(
        handle,
        [creates_lease(), vec![("GET", LEASE, StatusCode::OK, lease("b", "7", 1))]].concat(),
    ));
    assert!(a.try_once().await.unwrap());
    assert_eq!(a.lead(std::future::pending()).await, Ended::Lost("b holds the Lease now".into()));
    assert_eq!(server.await.unwrap().len(), 3);
}
