//! One reconcile of a TrainingJob against a mocked API server: the calls it makes, in
//! order, and what it sends. (The real API server runs in e2e/operator.sh; this pins the
//! call sequence and the stale-cache case, which the e2e cannot provoke at will.)

mod common;

use common::{Call, mock_client, serve};
use http::StatusCode;
use kube::Resource;
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

/// Reconciles `cached` (what the controller's cache holds) against `calls`; returns the
/// action and every request body sent.
async fn reconcile_with(cached: TrainingJob, calls: Vec<Call>) -> (String, Vec<serde_json::Value>) {
    let (outcome, sent) = try_reconcile_with(cached, calls).await;
    (format!("{:?}", outcome.expect("reconcile succeeds")), sent)
}

/// As [`reconcile_with`], for a reconcile that may fail.
async fn try_reconcile_with(
    cached: TrainingJob,
    calls: Vec<Call>,
) -> (Result<kube::runtime::controller::Action, linea_operator::error::OperatorError>, Vec<serde_json::Value>) {
    let (client, handle) = mock_client("ml");
    let expected = calls.len();
    let server = tokio::spawn(serve(handle, calls));
    let options = BuildOptions {
        default_image: "linea:test".into(),
        operator_key: b"0123456789abcdef".to_vec(),
        resources: Default::default(),
    };
    let ctx = Arc::new(Context::new(client, options, Arc::new(Metrics::default()), true));
    // An unexpected extra call would wait for an answer that never comes.
    let reconciled =
        tokio::time::timeout(std::time::Duration::from_secs(30), reconcile::reconcile(Arc::new(cached), ctx));
    let outcome = reconciled.await.expect("no call beyond the expected ones");
    let sent: Vec<serde_json::Value> = server.await.unwrap().into_iter().map(|(_, body)| body).collect();
    assert_eq!(sent.len(), expected, "the reconcile made fewer calls than expected");
    (outcome, sent)
}

fn stored(job: &TrainingJob) -> serde_json::Value {
    let mut stored = serde_json::to_value(job).unwrap();
    stored["apiVersion"] = "linea.io/v1alpha1".into();
    stored
}

fn call(method: &'static str, path: &'static str, status: StatusCode, answer: serde_json::Value) -> Call {
    (method, path, status, answer)
}

const JOB: &str = "/apis/linea.io/v1alpha1/namespaces/ml/trainingjobs/ads";
const JOB_STATUS: &str = "/apis/linea.io/v1alpha1/namespaces/ml/trainingjobs/ads/status";
const PODS: &str = "/api/v1/namespaces/ml/pods";
const SERVICE: &str = "/api/v1/namespaces/ml/services/ads-master";
const SECRETS: &str = "/api/v1/namespaces/ml/secrets";
const BUDGET: &str = "/apis/policy/v1/namespaces/ml/poddisruptionbudgets/ads-master";
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

/// A job whose operator made and recorded its auth Secret (the first reconcile's work).
fn recorded(mut job: TrainingJob) -> TrainingJob {
    let status = serde_json::json!({"authSecretName": "ads-auth-x7k2p", "authSecretUid": "secret-uid"});
    job.status = Some(serde_json::from_value(status).unwrap());
    job
}

fn budget_echo() -> serde_json::Value {
    serde_json::json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "ads-master", "namespace": "ml"}})
}

#[tokio::test]
async fn a_new_job_creates_its_secret_service_and_budget_then_writes_status_and_an_event() {
    let job = job();
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("GET", BUDGET, StatusCode::NOT_FOUND, not_found()),
        call("POST", SECRETS, StatusCode::CREATED, with_uid(echo("Secret", "ads-auth-x7k2p"), "secret-uid")),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("PATCH", BUDGET, StatusCode::OK, budget_echo()),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (action, sent) = reconcile_with(job, calls).await;
    assert!(action.contains("1s"), "pods on the next pass, soon: {action}");
    let sent = &sent[1..];
    let secret = &sent[3];
    assert_eq!(
        (secret["metadata"].get("name"), secret["metadata"]["generateName"].as_str()),
        (None, Some("ads-auth-"))
    );
    assert!(secret["stringData"]["token"].as_str().is_some_and(|t| t.len() == 64), "the job token");
    let budget = &sent[5];
    assert_eq!(budget["spec"]["minAvailable"], 1);
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        serde_json::json!({"linea.io/job-name": "ads", "linea.io/role": "master"})
    );
    assert_eq!(budget["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    let status = &sent[6]["status"];
    assert_eq!(status["phase"], "Pending");
    assert_eq!(status["workers"]["desired"], 2);
    assert_eq!(
        (status["authSecretName"].as_str(), status["authSecretUid"].as_str()),
        (Some("ads-auth-x7k2p"), Some("secret-uid")),
        "the Secret it created, by the name and UID the API server returned"
    );
    assert!(status["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Created" && c["status"] == "True"));
    assert_eq!(sent[7]["reason"], "ResourcesCreated");
}

#[tokio::test]
async fn with_its_secret_recorded_a_job_creates_its_pods_mounting_it() {
    let job = recorded(job());
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("GET", BUDGET, StatusCode::NOT_FOUND, not_found()),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("PATCH", BUDGET, StatusCode::OK, budget_echo()),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-master")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-0")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-1")),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (action, sent) = reconcile_with(job, calls).await;
    assert!(action.contains("requeue"), "a running job is looked at again: {action}");
    let sent = &sent[1..];
    let names: Vec<&str> = sent[5..8].iter().map(|p| p["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ads-master", "ads-worker-0", "ads-worker-1"], "pods are created, the master first");
    assert_eq!(sent[5]["spec"]["containers"][0]["args"][0], "master");
    assert_eq!(sent[5]["metadata"]["ownerReferences"][0]["name"], "ads");
    for pod in &sent[5..8] {
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        let secret = volumes.iter().find(|v| v["name"] == "job-secret").unwrap();
        assert_eq!(secret["secret"]["secretName"], "ads-auth-x7k2p", "the recorded Secret");
    }
}

/// The operator stops (or its status write fails) after creating the Secret: the next
/// reconcile does not know that Secret and must neither claim a Secret it did not record nor
/// call a Secret it made someone else's. It creates another (a generated name never
/// conflicts), records that one, and only then makes pods that mount it.
#[tokio::test]
async fn a_crash_between_creating_the_secret_and_recording_it_is_no_conflict() {
    let job = job();
    let unavailable = status(500, "InternalError", "etcdserver: request timed out");
    let first = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("GET", BUDGET, StatusCode::NOT_FOUND, not_found()),
        call("POST", SECRETS, StatusCode::CREATED, with_uid(echo("Secret", "ads-auth-aaaaa"), "lost-uid")),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("PATCH", BUDGET, StatusCode::OK, budget_echo()),
        call("PATCH", JOB_STATUS, StatusCode::INTERNAL_SERVER_ERROR, unavailable),
    ];
    let (outcome, _) = try_reconcile_with(job.clone(), first).await;
    assert!(outcome.is_err(), "the status was not written");
    let second = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::OK, with_owner(echo("Service", "ads-master"))),
        call("GET", BUDGET, StatusCode::OK, with_owner(budget_echo())),
        call("POST", SECRETS, StatusCode::CREATED, with_uid(echo("Secret", "ads-auth-bbbbb"), "new-uid")),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("PATCH", BUDGET, StatusCode::OK, budget_echo()),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (_, sent) = reconcile_with(job, second).await;
    let status = &sent[7]["status"];
    assert_eq!(
        (status["authSecretName"].as_str(), status["authSecretUid"].as_str()),
        (Some("ads-auth-bbbbb"), Some("new-uid"))
    );
    let created = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Created").unwrap();
    assert_eq!((created["status"].as_str(), created["reason"].as_str()), (Some("True"), Some("ResourcesCreated")));
}

fn with_owner(mut object: serde_json::Value) -> serde_json::Value {
    object["metadata"]["ownerReferences"] = serde_json::json!([{"apiVersion": "linea.io/v1alpha1", "kind": "TrainingJob", "name": "ads", "uid": "uid-1", "controller": true}]);
    object
}

/// A ResourceQuota (or an admission policy) refuses the second pod: the operator stops
/// creating, writes why into the status, records an event and retries with backoff rather
/// than hammering the API server.
#[tokio::test]
async fn a_refused_pod_stops_the_batch_and_backs_off_with_the_reason_in_status() {
    let job = recorded(job());
    let quota =
        "pods \"ads-worker-0\" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1";
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("GET", BUDGET, StatusCode::NOT_FOUND, not_found()),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("PATCH", BUDGET, StatusCode::OK, budget_echo()),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-master")),
        call("POST", PODS, StatusCode::FORBIDDEN, status(403, "Forbidden", quota)),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (action, sent) = reconcile_with(job, calls).await;
    assert!(action.contains("2s"), "first retry after 2 s: {action}");
    let status = &sent[8]["status"];
    let blocked = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Blocked").unwrap();
    assert_eq!((blocked["status"].as_str(), blocked["reason"].as_str()), (Some("True"), Some("PodCreationRefused")));
    assert!(blocked["message"].as_str().unwrap().contains("exceeded quota"), "{blocked}");
    assert_eq!(sent[10]["reason"], "PodCreationRefused");
    assert_eq!(sent[10]["type"], "Warning");
}

/// A quota on Secrets (or an admission policy) refuses the job's Secret: as for a pod, the
/// operator stops, says why in `Blocked` (not a pod: `CreationRefused`) and backs off.
#[tokio::test]
async fn a_refused_secret_stops_the_job_with_the_reason_in_status() {
    let job = job();
    let quota = "secrets \"ads-auth-\" is forbidden: exceeded quota: secrets, requested: secrets=1, used: secrets=5, limited: secrets=5";
    let calls = vec![
        call("GET", JOB, StatusCode::OK, stored(&job)),
        call("GET", PODS, StatusCode::OK, no_pods()),
        call("GET", SERVICE, StatusCode::NOT_FOUND, not_found()),
        call("GET", BUDGET, StatusCode::NOT_FOUND, not_found()),
        call("POST", SECRETS, StatusCode::FORBIDDEN, status(403, "Forbidden", quota)),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (action, sent) = reconcile_with(job, calls).await;
    assert!(action.contains("2s"), "first retry after 2 s: {action}");
    let status = &sent[5]["status"];
    let blocked = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Blocked").unwrap();
    assert_eq!((blocked["status"].as_str(), blocked["reason"].as_str()), (Some("True"), Some("CreationRefused")));
    assert!(
        blocked["message"].as_str().unwrap().contains("creating secret ads-auth-* was refused: secrets"),
        "{blocked}"
    );
    assert!(status.get("authSecretName").is_none());
    assert_eq!(sent[7]["reason"], "CreationRefused");
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
        call("GET", BUDGET, StatusCode::NOT_FOUND, not_found()),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (_, sent) = reconcile_with(job, calls).await;
    let created = sent[4]["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Created").unwrap();
    assert_eq!((created["status"].as_str(), created["reason"].as_str()), (Some("False"), Some("ResourceConflict")));
    assert!(created["message"].as_str().unwrap().contains("service ml/ads-master"), "{created}");
    assert_eq!(sent[5]["reason"], "ResourceConflict");
}

/// Deleting a job deletes only what it owns: its pod (by UID), not a stranger with its
/// labels, not a Service it does not own, its budget (by UID), and its Secret only by the
/// name and UID it recorded.
#[tokio::test]
async fn clean_up_deletes_only_the_jobs_own_objects() {
    let mut job = job();
    job.meta_mut().deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
    let job = recorded(job);
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
        call("GET", BUDGET, StatusCode::OK, with_uid(with_owner(budget_echo()), "budget-uid")),
        call("DELETE", BUDGET, StatusCode::OK, budget_echo()),
        call(
            "DELETE",
            "/api/v1/namespaces/ml/secrets/ads-auth-x7k2p",
            StatusCode::OK,
            echo("Secret", "ads-auth-x7k2p"),
        ),
        call("PATCH", JOB, StatusCode::OK, released),
    ];
    let (_, sent) = reconcile_with(job, calls).await;
    assert_eq!(sent[1]["preconditions"]["uid"], "pod-uid", "{}", sent[1]);
    assert_eq!(sent[4]["preconditions"]["uid"], "budget-uid", "{}", sent[4]);
    assert_eq!(sent[5]["preconditions"]["uid"], "secret-uid", "{}", sent[5]);
}

/// The cache still holds the job from before the last reconcile counted a master failure
/// and deleted that master; the status written now must keep the count (it once wrote 0
/// back, so a job could fail forever without reaching its backoffLimit). The stored status
/// is one from before generated Secret names (only `authSecretUid` of `ads-auth`): its pods
/// keep mounting that Secret and no new one is made.
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
        call("GET", BUDGET, StatusCode::NOT_FOUND, not_found()),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("PATCH", BUDGET, StatusCode::OK, budget_echo()),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-master")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-0")),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-worker-1")),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&current)),
    ];
    let (_, sent) = reconcile_with(cached, calls).await;
    let status = &sent.last().unwrap()["status"];
    assert_eq!((status["restarts"].as_i64(), status["phase"].as_str()), (Some(1), Some("Restarting")), "{status}");
    let volumes = sent[6]["spec"]["volumes"].as_array().unwrap();
    let secret = volumes.iter().find(|v| v["name"] == "job-secret").unwrap();
    assert_eq!(secret["secret"]["secretName"], "ads-auth");
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
        call("GET", BUDGET, StatusCode::NOT_FOUND, not_found()),
        call("POST", PODS, StatusCode::CREATED, echo("Pod", "ads-prepare")),
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (_, sent) = reconcile_with(job.clone(), calls).await;
    let sent = &sent[1..];
    assert_eq!(sent[3]["metadata"]["name"], "ads-prepare");
    let args: Vec<&str> =
        sent[3]["spec"]["containers"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(
        args[..7],
        ["prepare", "--input", "s3://raw/a9a.train.libsvm", "--format", "libsvm", "--output", "s3://data/grid"]
    );
    assert_eq!(sent[3]["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    let status = &sent[4]["status"];
    assert_eq!(status["phase"], "Preparing");
    let prepared = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Prepared").unwrap();
    assert_eq!((prepared["status"].as_str(), prepared["reason"].as_str()), (Some("False"), Some("Preparing")));
    assert_eq!(sent[5]["reason"], "Preparing");

    // The prepare pod succeeded (as the kubelet reports it, with linea's summary).
    let mut job = job;
    job.status = Some(serde_json::from_value(status.clone()).unwrap());
    let mut pod = sent[3].clone();
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
        call("GET", BUDGET, StatusCode::NOT_FOUND, not_found()),
        call("POST", SECRETS, StatusCode::CREATED, with_uid(echo("Secret", "ads-auth-x7k2p"), "secret-uid")),
        call("PATCH", SERVICE, StatusCode::OK, echo("Service", "ads-master")),
        call("PATCH", BUDGET, StatusCode::OK, budget_echo()),
        // The pods wait for the Secret's name to be recorded (the next pass).
        call("PATCH", JOB_STATUS, StatusCode::OK, stored(&job)),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
        call("POST", EVENTS, StatusCode::CREATED, event_created()),
    ];
    let (_, sent) = reconcile_with(job, calls).await;
    let sent = &sent[1..];
    let status = &sent[6]["status"];
    let prepared = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Prepared").unwrap();
    assert_eq!((prepared["status"].as_str(), prepared["reason"].as_str()), (Some("True"), Some("GridPrepared")));
    assert_eq!(status["phase"], "Pending");
    assert_eq!(
        (sent[7]["reason"].as_str(), sent[8]["reason"].as_str()),
        (Some("GridPrepared"), Some("ResourcesCreated"))
    );
}
