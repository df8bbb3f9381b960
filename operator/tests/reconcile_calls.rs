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
        // Every server-side apply uses the one field manager (the finalizer's JSON patch on the
        // job itself is kube's and applies nothing).
        if call.method == "PATCH" && call.path != JOB {
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
const SERVICE: &str = "/api/v1/namespaces/ml/services/ads-master";
const SECRETS: &str = "/api/v1/namespaces/ml/secrets";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ml/events";

fn echo(kind: &str, name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "ml"}})
}

fn with_uid(mut object: serde_json::Value, uid: &str) -> serde_json::Value {
    object["metadata"]["uid"] = uid.into();
    object
}

fn status(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": reason, "code": code, "message": message, "metadata": {}})
}

fn not_found() -> serde_json::Value {
    status(404, "NotFound", "not found")
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
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("POST", SECRETS, StatusCode::CREATED, with_uid(echo("Secret", "ads-auth"), "secret-uid")),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-master")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-0")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-1")),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (action, sent) = reconcile_with(job, calls).await;
    assert!(action.contains("requeue"), "a running job is looked at again: {action}");
    let sent = &sent[1..];
    assert_eq!(sent[2]["metadata"]["name"], "ads-auth");
    assert!(sent[2]["stringData"]["token"].as_str().is_some_and(|t| t.len() == 64), "the job token");
    let names: Vec<&str> = sent[4..7].iter().map(|p| p["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ads-master", "ads-worker-0", "ads-worker-1"], "pods are created, the master first");
    assert_eq!(sent[4]["spec"]["containers"][0]["args"][0], "master");
    assert_eq!(sent[4]["metadata"]["ownerReferences"][0]["name"], "ads");
    let status = &sent[7]["status"];
    assert_eq!(status["phase"], "Pending");
    assert_eq!(status["workers"]["desired"], 2);
    assert_eq!(status["authSecretUid"], "secret-uid", "the Secret it created, by UID");
    assert!(status["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Created" && c["status"] == "True"));
    assert_eq!(sent[8]["reason"], "ResourcesCreated");
}

/// A ResourceQuota (or an admission policy) refuses the second pod: the operator stops
/// creating, writes why into the status, records an event and retries with backoff rather
/// than hammering the API server.
#[tokio::test]
async fn a_refused_pod_stops_the_batch_and_backs_off_with_the_reason_in_status() {
    let job = job();
    let quota =
        "pods \"ads-worker-0\" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1";
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("POST", SECRETS, StatusCode::CREATED, with_uid(echo("Secret", "ads-auth"), "secret-uid")),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-master")),
        call("POST", PODS, StatusCode::FORBIDDEN, status(403, "Forbidden", quota)),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (action, sent) = reconcile_with(job, calls).await;
    assert!(action.contains("2s"), "first retry after 2 s: {action}");
    let status = &sent[7]["status"];
    let blocked = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Blocked").unwrap();
    assert_eq!((blocked["status"].as_str(), blocked["reason"].as_str()), (Some("True"), Some("PodCreationRefused")));
    assert!(blocked["message"].as_str().unwrap().contains("exceeded quota"), "{blocked}");
    assert_eq!(sent[9]["reason"], "PodCreationRefused");
    assert_eq!(sent[9]["type"], "Warning");
}

/// A Service with the job's name that someone else made: not patched, not adopted; the job
/// says which object is in the way and creates nothing.
#[tokio::test]
async fn a_foreign_service_is_left_alone_and_named_in_the_status() {
    let job = job();
    let foreign = serde_json::json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ads-master", "namespace": "ml", "uid": "foreign"}, "spec": {"selector": {"app": "theirs"}}});
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::OK, foreign),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (_, sent) = reconcile_with(job, calls).await;
    let created = sent[3]["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Created").unwrap();
    assert_eq!((created["status"].as_str(), created["reason"].as_str()), (Some("False"), Some("ResourceConflict")));
    assert!(created["message"].as_str().unwrap().contains("service ml/ads-master"), "{created}");
    assert_eq!(sent[4]["reason"], "ResourceConflict");
}

/// A Secret named `<job>-auth` already exists and the job never created one: the operator
/// cannot tell it is its own (it never reads Secrets), so it is someone else's.
#[tokio::test]
async fn a_foreign_secret_stops_the_job_before_any_pod() {
    let job = job();
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("POST", SECRETS, StatusCode::CONFLICT, conflict()),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (_, sent) = reconcile_with(job, calls).await;
    let created = sent[4]["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Created").unwrap();
    assert_eq!(created["reason"], "ResourceConflict");
    assert!(created["message"].as_str().unwrap().contains("secret ml/ads-auth"), "{created}");
}

/// Deleting a job deletes only what it owns: its pod (by UID), not a stranger with its
/// labels, not a Service it does not own, and its Secret only by the UID it recorded.
#[tokio::test]
async fn clean_up_deletes_only_the_jobs_own_objects() {
    let mut job = job();
    job.meta_mut().deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
    job.status = Some(serde_json::from_value(serde_json::json!({"authSecretUid": "secret-uid"})).unwrap());
    let owner = serde_json::json!([{"apiVersion": "linea.io/v1alpha1", "kind": "TrainingJob", "name": "ads", "uid": "uid-1", "controller": true}]);
    let pods = serde_json::json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
        {"metadata": {"name": "ads-master", "namespace": "ml", "uid": "pod-uid", "ownerReferences": owner}},
        {"metadata": {"name": "ads-worker-7", "namespace": "ml", "uid": "stranger"}}
    ]});
    let foreign = serde_json::json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ads-master", "namespace": "ml", "uid": "foreign"}});
    let mut released = stored(&job);
    released["metadata"]["finalizers"] = serde_json::json!([]);
    let calls = vec![
        call("GET", PODS, StatusCode::OK, pods),
        call("DELETE", "/api/v1/namespaces/ml/pods/ads-master", StatusCode::OK, echo("Pod", "ads-master")),
        call("GET", SERVICE, StatusCode::OK, foreign),
        call("DELETE", "/api/v1/namespaces/ml/secrets/ads-auth", StatusCode::OK, echo("Secret", "ads-auth")),
        call("PATCH", JOB, StatusCode::OK, released),
    ];
    let (_, sent) = reconcile_with(job, calls).await;
    assert_eq!(sent[1]["preconditions"]["uid"], "pod-uid", "{}", sent[1]);
    assert_eq!(sent[3]["preconditions"]["uid"], "secret-uid", "{}", sent[3]);
}

/// The cache still holds the job from before the last reconcile counted a master failure
/// and deleted that master; the status written now must keep the count (it once wrote 0
/// back, so a job could fail forever without reaching its backoffLimit).
#[tokio::test]
async fn status_is_planned_from_the_job_as_stored_not_as_cached() {
    let cached = job();
    let mut current = job();
    let status = serde_json::json!({"phase": "Restarting", "restarts": 1, "authSecretUid": "secret-uid"});
    current.status = Some(serde_json::from_value(status).unwrap());
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&current)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("POST", SECRETS, StatusCode::CONFLICT, conflict()),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-master")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-0")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-1")),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&current)),
    ];
    let (_, sent) = reconcile_with(cached, calls).await;
    let status = &sent.last().unwrap()["status"];
    assert_eq!((status["restarts"].as_i64(), status["phase"].as_str()), (Some(1), Some("Restarting")), "{status}");
}

fn conflict() -> serde_json::Value {
    status(409, "AlreadyExists", "exists")
}

fn raw_job() -> TrainingJob {
    let mut job = job();
    job.spec.raw_data = Some(
        serde_json::from_value(serde_json::json!({"uri": "s3://raw/a9a.train.libsvm", "format": "libsvm"})).unwrap(),
    );
    job
}

/// Raw data: the first reconcile creates the prepare pod alone (no Secret, Service, master or
/// workers), says Preparing in status and an event; once the pod has succeeded, the next
/// one creates the rest as for a prepared grid.
#[tokio::test]
async fn a_job_with_raw_data_runs_its_prepare_pod_first_then_the_rest() {
    let job = raw_job();
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-prepare")),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (_, sent) = reconcile_with(job.clone(), calls).await;
    let sent = &sent[1..];
    assert_eq!(sent[2]["metadata"]["name"], "ads-prepare");
    let args: Vec<&str> =
        sent[2]["spec"]["containers"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(
        args[..7],
        ["prepare", "--input", "s3://raw/a9a.train.libsvm", "--format", "libsvm", "--output", "s3://data/grid"]
    );
    assert_eq!(sent[2]["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    let status = &sent[3]["status"];
    assert_eq!(status["phase"], "Preparing");
    let prepared = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Prepared").unwrap();
    assert_eq!((prepared["status"].as_str(), prepared["reason"].as_str()), (Some("False"), Some("Preparing")));
    assert_eq!(sent[4]["reason"], "Preparing");

    // The prepare pod succeeded (as the kubelet reports it, with linea's summary).
    let mut job = job;
    job.status = Some(serde_json::from_value(status.clone()).unwrap());
    let mut pod = sent[2].clone();
    pod["metadata"]["uid"] = "prepare-uid".into();
    pod["status"] = serde_json::json!({"phase": "Succeeded", "containerStatuses": [{
        "name": "prepare", "image": "linea:test", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed",
            "message": "{\"reused\":false,\"rows\":32560,\"nnz\":451592,\"shards\":2,\"blocks\":15}"}}}]});
    let pods = serde_json::json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [pod]});
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, pods),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("POST", SECRETS, StatusCode::CREATED, with_uid(echo("Secret", "ads-auth"), "secret-uid")),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-master")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-0")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-1")),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (_, sent) = reconcile_with(job, calls).await;
    let sent = &sent[1..];
    let status = &sent[7]["status"];
    let prepared = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Prepared").unwrap();
    assert_eq!((prepared["status"].as_str(), prepared["reason"].as_str()), (Some("True"), Some("GridPrepared")));
    assert_eq!(status["phase"], "Pending");
    assert_eq!(
        (sent[8]["reason"].as_str(), sent[9]["reason"].as_str()),
        (Some("GridPrepared"), Some("ResourcesCreated"))
    );
}
