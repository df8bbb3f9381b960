//! One reconcile of a TrainingJob against a mocked API server: the calls it makes, in
//! order, and what it sends. (The real API server runs in e2e/operator.sh; this pins the
//! call sequence and the stale-cache case, which the e2e cannot provoke at will.)

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::{Client, Resource};
use linea_crds::{TrainingJob, TrainingJobSpec};
use linea_operator::desired::BuildOptions;
use linea_operator::metrics::Metrics;
use linea_operator::reconcile::{self, Context};
use std::sync::Arc;

fn job() -> TrainingJob {
    let spec: serde_json::Value = serde_json::json!({
        "datasetUri": "s3://data/grid",
        "modelUri": "s3://models/ads.model",
        "workers": {"replicas": 2}
    });
    let spec: TrainingJobSpec = serde_json::from_value(spec).unwrap();
    let mut job = TrainingJob::new("ads", spec);
    job.meta_mut().namespace = Some("ml".into());
    job.meta_mut().uid = Some("uid-1".into());
    job.meta_mut().generation = Some(1);
    job.meta_mut().finalizers = Some(vec![linea_operator::FINALIZER.into()]);
    job
}

/// One expected call: method, path (without the query), and the JSON body to answer with.
struct Call {
    method: &'static str,
    path: &'static str,
    status: StatusCode,
    answer: serde_json::Value,
}

async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    calls: Vec<Call>,
) -> Vec<serde_json::Value> {
    let mut sent = Vec::new();
    for call in calls {
        let (request, respond) = handle.next_request().await.expect("the reconcile made fewer calls than expected");
        assert_eq!(
            (request.method().as_str(), request.uri().path()),
            (call.method, call.path),
            "unexpected call {} {}",
            request.method(),
            request.uri()
        );
        if call.method == "PATCH" {
            assert!(request.uri().query().unwrap_or_default().contains("fieldManager=linea-operator"));
        }
        let bytes = request.into_body().collect_bytes().await.unwrap();
        sent.push(if bytes.is_empty() { serde_json::Value::Null } else { serde_json::from_slice(&bytes).unwrap() });
        let body = serde_json::to_vec(&call.answer).unwrap();
        respond.send_response(Response::builder().status(call.status).body(Body::from(body)).unwrap());
    }
    sent
}

/// Reconciles `cached` (what the controller's cache holds) against `calls`; returns the
/// action and every request body sent.
async fn reconcile_with(cached: TrainingJob, calls: Vec<Call>) -> (String, Vec<serde_json::Value>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "ml");
    let server = tokio::spawn(serve(handle, calls));
    let options = BuildOptions { default_image: "linea:test".into(), operator_key: b"0123456789abcdef".to_vec() };
    let ctx = Arc::new(Context::new(client, options, Arc::new(Metrics::default()), true));
    // An unexpected extra call would wait for an answer that never comes.
    let reconciled =
        tokio::time::timeout(std::time::Duration::from_secs(30), reconcile::reconcile(Arc::new(cached), ctx));
    let action = reconciled.await.expect("no call beyond the expected ones").expect("reconcile succeeds");
    (format!("{action:?}"), server.await.unwrap())
}

fn stored(job: &TrainingJob) -> serde_json::Value {
    let mut stored = serde_json::to_value(job).unwrap();
    stored["apiVersion"] = "linea.io/v1alpha1".into();
    stored
}

fn call(method: &'static str, path: &'static str, status: StatusCode, answer: serde_json::Value) -> Call {
    Call { method, path, status, answer }
}

const JOB: &str = "/apis/linea.io/v1alpha1/namespaces/ml/trainingjobs/ads";
const JOB_STATUS: &str = "/apis/linea.io/v1alpha1/namespaces/ml/trainingjobs/ads/status";
const PODS: &str = "/api/v1/namespaces/ml/pods";

fn echo(kind: &str, name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "ml"}})
}

fn no_pods() -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []})
}

fn event_created() -> serde_json::Value {
    serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "ml"}, "eventTime": null})
}

#[tokio::test]
async fn a_new_job_creates_its_secret_service_and_pods_then_writes_status_and_an_event() {
    let job = job();
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("POST", "/api/v1/namespaces/ml/secrets", StatusCode::CREATED, echo("Secret", "ads-auth")),
        call("PATCH", "/api/v1/namespaces/ml/services/ads-master", StatusCode::OK, echo("Service", "ads-master")),
        call("PATCH", "/api/v1/namespaces/ml/pods/ads-master", StatusCode::OK, echo("Pod", "ads-master")),
        call("PATCH", "/api/v1/namespaces/ml/pods/ads-worker-0", StatusCode::OK, echo("Pod", "ads-worker-0")),
        call("PATCH", "/api/v1/namespaces/ml/pods/ads-worker-1", StatusCode::OK, echo("Pod", "ads-worker-1")),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", "/apis/events.k8s.io/v1/namespaces/ml/events", StatusCode::CREATED, event_created()),
    ];
    let (action, sent) = reconcile_with(job, calls).await;
    assert!(action.contains("requeue"), "a running job is looked at again: {action}");
    let sent = &sent[1..];
    assert_eq!(sent[1]["metadata"]["name"], "ads-auth");
    assert!(sent[1]["stringData"]["token"].as_str().is_some_and(|t| t.len() == 64), "the job token");
    assert_eq!(sent[3]["spec"]["containers"][0]["args"][0], "master");
    assert_eq!(sent[3]["metadata"]["ownerReferences"][0]["name"], "ads");
    let status = &sent[6]["status"];
    assert_eq!(status["phase"], "Pending");
    assert_eq!(status["workers"]["desired"], 2);
    assert!(status["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Created" && c["status"] == "True"));
    assert_eq!(sent[7]["reason"], "ResourcesCreated");
}

/// The cache still holds the job from before the last reconcile counted a master failure
/// and deleted that master; the status written now must keep the count (it once wrote 0
/// back, so a job could fail forever without reaching its backoffLimit).
#[tokio::test]
async fn status_is_planned_from_the_job_as_stored_not_as_cached() {
    let cached = job();
    let mut current = job();
    current.status = Some(serde_json::from_value(serde_json::json!({"phase": "Restarting", "restarts": 1})).unwrap());
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&current)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("POST", "/api/v1/namespaces/ml/secrets", StatusCode::CONFLICT, conflict()),
        call("PATCH", "/api/v1/namespaces/ml/services/ads-master", StatusCode::OK, echo("Service", "ads-master")),
        call("PATCH", "/api/v1/namespaces/ml/pods/ads-master", StatusCode::OK, echo("Pod", "ads-master")),
        call("PATCH", "/api/v1/namespaces/ml/pods/ads-worker-0", StatusCode::OK, echo("Pod", "ads-worker-0")),
        call("PATCH", "/api/v1/namespaces/ml/pods/ads-worker-1", StatusCode::OK, echo("Pod", "ads-worker-1")),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&current)),
    ];
    let (_, sent) = reconcile_with(cached, calls).await;
    let status = &sent.last().unwrap()["status"];
    assert_eq!((status["restarts"].as_i64(), status["phase"].as_str()), (Some(1), Some("Restarting")), "{status}");
}

fn conflict() -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "AlreadyExists", "code": 409, "message": "exists", "metadata": {}})
}
