//! A scripted API server for the operator's call-sequence tests: it answers the expected
//! calls in order, checks each one's method and path, and returns what each request sent.

use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::Value;
use tower_test::mock::Handle;

/// One expected call: method, path (without the query), and the answer's status and body.
pub type Call = (&'static str, &'static str, StatusCode, Value);

/// What one request sent: its query string and its JSON body (`Null` when empty).
pub type Sent = (String, Value);

/// A client whose requests reach the returned handle, for [`serve`].
pub fn mock_client(namespace: &str) -> (Client, Handle<Request<Body>, Response<Body>>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, namespace), handle)
}

/// Answers `calls` in order until they run out or the client is dropped. Every server-side
/// apply must carry the operator's one field manager; a JSON patch (kube's finalizer
/// helper) applies nothing and is exempt. Callers check how many calls were made.
pub async fn serve(mut handle: Handle<Request<Body>, Response<Body>>, calls: Vec<Call>) -> Vec<Sent> {
    let mut sent = Vec::new();
    for (method, path, status, answer) in calls {
        let Some((request, respond)) = handle.next_request().await else { break };
        assert_eq!(
            (request.method().as_str(), request.uri().path()),
            (method, path),
            "call {}: {} {}",
            sent.len(),
            request.method(),
            request.uri()
        );
        let query = request.uri().query().unwrap_or_default().to_string();
        let is_apply = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|kind| kind.as_bytes().starts_with(b"application/apply-patch"));
        if is_apply {
            assert!(query.contains("fieldManager=linea-operator"), "an apply without the field manager: {query}");
        }
        let bytes = request.into_body().collect_bytes().await.unwrap();
        sent.push((query, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() }));
        respond.send_response(
            Response::builder().status(status).body(Body::from(serde_json::to_vec(&answer).unwrap())).unwrap(),
        );
    }
    sent
}
