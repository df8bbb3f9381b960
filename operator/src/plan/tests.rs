use super::*;
use crate::desired::tests::{fresh, job, options};
use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

#[test]
fn event_notes_fit_the_api_servers_limit_keeping_both_ends() {
    assert_eq!(event_note("short"), "short");
    let exact = "x".repeat(EVENT_NOTE_LIMIT);
    assert_eq!(event_note(&exact), exact);
    // Multi-byte characters on both cut points: the cuts move to character boundaries.
    let long = format!("master failed ({}); restart 1 of 3", "é→".repeat(800));
    let fitted = event_note(&long);
    assert!(fitted.len() <= EVENT_NOTE_LIMIT && fitted.len() > EVENT_NOTE_LIMIT - 8, "{}", fitted.len());
    assert!(fitted.starts_with("master failed (é→") && fitted.ends_with("é→); restart 1 of 3"));
    assert!(fitted.contains(" [...] "));
}

const SPEC: &str = "datasetUri: s3://data/grid\nmodelUri: s3://models/model\nworkers: {replicas: 2}\nrunPolicy: {backoffLimit: 1, ttlSecondsAfterFinished: 60}\n";

/// Plans `job` with its pods and no Service yet.
fn plan(j: &TrainingJob, pods: &[Pod], progress: Option<&MasterProgress>, leaving: &[String], now: Timestamp) -> Plan {
    let observed = Observed { pods, service: None, budget: None, progress, leaving_nodes: leaving };
    super::plan(j, desired::build(j, &options()), observed, now)
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

fn with_phase(mut pod: Pod, phase: &str) -> Pod {
    let ready = PodCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() };
    pod.status = Some(PodStatus { phase: Some(phase.into()), conditions: Some(vec![ready]), ..Default::default() });
    pod
}

/// The job after applying `plan`'s status, as the next reconcile would see it.
fn next(mut job: TrainingJob, plan: &Plan) -> TrainingJob {
    job.status = Some(plan.status.clone());
    job
}

#[test]
fn a_new_job_gets_its_secret_service_and_budget_then_a_master_and_its_workers() {
    let new = fresh(SPEC);
    let first = plan(&new, &[], None, &[], now());
    assert!(first.secret.is_some() && first.service.is_some() && first.budget.is_some());
    assert!(first.pods.is_empty(), "pods mount the Secret by name: they wait until it is recorded");
    assert_eq!(first.requeue, Duration::from_secs(1));
    assert_eq!(first.status.phase, Some(Phase::Pending));
    assert!(first.status.is_condition_true(condition_type::CREATED));
    assert_eq!(first.events[0].reason, reason::RESOURCES_CREATED);

    // reconcile records the name and UID the create returned; the next pass makes pods.
    let mut recorded = next(new, &first);
    let status = recorded.status.as_mut().unwrap();
    (status.auth_secret_name, status.auth_secret_uid) = (Some("ads-auth-q9z4m".into()), Some("s-uid".into()));
    let second = plan(&recorded, &[], None, &[], now());
    assert_eq!(second.created(), ["ads-master", "ads-worker-0", "ads-worker-1"]);
    assert!(second.secret.is_none(), "one Secret per job");
    assert!(second.budget.is_some() && second.service.is_some(), "applied every pass (they may be deleted)");
}

/// The operator stopped after creating the Secret and before recording it (or the status
/// write failed): the next pass sees no recorded Secret. It creates another (generated
/// name, so no conflict) and never uses or claims one it did not record: an existing
/// `ads-auth-…` may be the lost one or anyone's.
#[test]
fn a_secret_created_but_not_recorded_is_never_taken_for_the_jobs() {
    let new = fresh(SPEC);
    let first = plan(&new, &[], None, &[], now());
    let mut crashed = next(new, &first);
    crashed.status.as_mut().unwrap().auth_secret_name = None;
    let again = plan(&crashed, &[], None, &[], now() + SignedDuration::from_secs(5));
    let secret = again.secret.expect("a new Secret");
    assert_eq!((secret.metadata.name, secret.metadata.generate_name.as_deref()), (None, Some("ads-auth-")));
    assert!(again.pods.is_empty());
    assert!(again.status.condition(condition_type::CREATED).is_none_or(|c| c.reason != reason::RESOURCE_CONFLICT));
}

#[test]
fn conditions_follow_the_pods_to_success_and_the_ttl_removes_the_job() {
    let j = job(SPEC);
    let first = plan(&j, &[], None, &[], now());
    let pods = vec![
        with_phase(desired::master_pod(&j, &options()), "Running"),
        with_phase(desired::worker_pod(&j, 0, &options()), "Running"),
        with_phase(desired::worker_pod(&j, 1, &options()), "Running"),
    ];
    let j = next(j, &first);
    let progress = MasterProgress {
        epoch: 3,
        workers_active: 2,
        objective: Some(1.5),
        duality_gap: Some(2e-3),
        ..Default::default()
    };
    let running = plan(&j, &pods, Some(&progress), &[], now());
    assert_eq!(
        running.status.progress.as_ref().unwrap().duality_gap,
        Some(2e-3),
        "the master's gap reaches the status"
    );
    assert_eq!(running.status.phase, Some(Phase::Running));
    assert!(running.status.is_condition_true(condition_type::RUNNING));
    assert_eq!(running.status.workers.as_ref().unwrap().ready, 2);
    assert_eq!(running.status.progress.as_ref().unwrap().epoch, 3);
    assert!(running.pods.is_empty() && running.delete_pods.is_empty());
    assert!(running.status.model_uri.is_none(), "no model URI before the model exists");

    let j = next(j, &running);
    let mut done = pods.clone();
    done[0] = with_phase(done[0].clone(), "Succeeded");
    let succeeded = plan(&j, &done, None, &[], now());
    assert_eq!(succeeded.status.phase, Some(Phase::Succeeded));
    assert!(succeeded.status.is_condition_true(condition_type::SUCCEEDED));
    assert_eq!(succeeded.deleted(), ["ads-worker-0", "ads-worker-1"], "running pods cleaned, the master kept");
    assert_eq!(succeeded.status.model_uri.as_deref(), Some("s3://models/model"));
    assert_eq!(succeeded.status.workers.as_ref().unwrap().ready, 0, "nothing is ready once the job is over");

    let j = next(j, &succeeded);
    let later = plan(&j, &[], None, &[], now() + SignedDuration::from_secs(30));
    assert!(!later.delete_job && later.requeue == Duration::from_secs(30));
    assert!(plan(&j, &[], None, &[], now() + SignedDuration::from_secs(60)).delete_job, "TTL after finish");
}

#[test]
fn a_failing_master_is_retried_up_to_the_backoff_limit_but_preemption_does_not_count() {
    let j = job(SPEC);
    let failed = with_phase(desired::master_pod(&j, &options()), "Failed");
    let first = plan(&j, std::slice::from_ref(&failed), None, &[], now());
    assert_eq!((first.status.phase, first.status.restarts), (Some(Phase::Restarting), 1));
    assert_eq!(first.deleted(), ["ads-master"]);

    let j = next(j, &first);
    let mut preempted = failed.clone();
    let disruption = PodCondition { type_: "DisruptionTarget".into(), status: "True".into(), ..Default::default() };
    preempted.status.as_mut().unwrap().conditions.as_mut().unwrap().push(disruption);
    let after_preemption = plan(&j, std::slice::from_ref(&preempted), None, &[], now());
    assert_eq!(after_preemption.status.restarts, 1, "preemption is not a failure");
    assert_eq!(after_preemption.status.phase, Some(Phase::Restarting));

    let j = next(j, &after_preemption);
    let second = plan(&j, std::slice::from_ref(&failed), None, &[], now());
    assert_eq!(second.status.phase, Some(Phase::Failed));
    let c = second.status.condition(condition_type::FAILED).unwrap();
    assert_eq!(c.reason, reason::BACKOFF_LIMIT_EXCEEDED);
    assert!(c.message.contains("failed 2 times (backoffLimit 1)"), "{}", c.message);
}

/// A master that stopped on SIGTERM (exit 143: it checkpointed and left its workers
/// waiting) is restarted at once and never counted: not at the backoff limit, not as the
/// job's failure, not as its success. Any other non-zero exit still counts.
#[test]
fn a_master_stopped_by_sigterm_is_restarted_at_once_and_never_counted() {
    let j = job(SPEC);
    let master = desired::master_pod(&j, &options());
    let message = "stopped: on SIGTERM, with epoch 7 (unit-state version 210) in the checkpoint";
    let stopped = terminated_pod(master.clone(), "Failed", EXIT_STOPPED, "Error", Some(message), now());
    let mut j = next(j.clone(), &plan(&j, &[], None, &[], now()));
    // Already at the backoff limit (1): one more failure would fail the job.
    j.status.as_mut().unwrap().restarts = 1;
    for _ in 0..3 {
        let p = plan(&j, std::slice::from_ref(&stopped), None, &[], now());
        assert_eq!((p.status.phase, p.status.restarts), (Some(Phase::Restarting), 1), "{:?}", p.status);
        assert_eq!(p.deleted(), ["ads-master"]);
        let c = p.status.condition(condition_type::RUNNING).unwrap();
        assert_eq!(c.reason, reason::MASTER_RESTARTING);
        assert!(c.message.contains("stopped on SIGTERM") && c.message.contains("epoch 7"), "{}", c.message);
        assert!(p.status.condition(condition_type::FAILED).is_none_or(|c| c.status != "True"));
        j = next(j, &p);
    }
    // The same pod with exit code 1 is a failure: past the limit, the job fails.
    let failed = terminated_pod(master, "Failed", 1, "Error", Some("error: s3: timed out"), now());
    let p = plan(&j, std::slice::from_ref(&failed), None, &[], now());
    assert_eq!(p.status.phase, Some(Phase::Failed));
}

#[test]
fn ended_workers_are_replaced_and_extra_ones_removed() {
    let j = job(SPEC);
    let j = next(j.clone(), &plan(&j, &[], None, &[], now()));
    let pods = vec![
        with_phase(desired::master_pod(&j, &options()), "Running"),
        with_phase(desired::worker_pod(&j, 0, &options()), "Failed"),
        with_phase(desired::worker_pod(&j, 1, &options()), "Running"),
        with_phase(desired::worker_pod(&j, 2, &options()), "Running"),
    ];
    let p = plan(&j, &pods, None, &[], now());
    assert_eq!(p.deleted(), ["ads-worker-0", "ads-worker-2"]);
    assert_eq!(p.status.phase, Some(Phase::Running));
}

#[test]
fn a_changed_worker_count_is_scaling_until_the_pods_match_but_a_replacement_is_not() {
    let j = job(SPEC);
    let j = next(j.clone(), &plan(&j, &[], None, &[], now()));
    let running = |j: &TrainingJob, n: i32| {
        let mut pods = vec![with_phase(desired::master_pod(j, &options()), "Running")];
        pods.extend((0..n).map(|i| with_phase(desired::worker_pod(j, i, &options()), "Running")));
        pods
    };
    let steady = plan(&j, &running(&j, 2), None, &[], now());
    assert!(steady.status.condition(condition_type::SCALING).is_none(), "nothing changed");

    let mut up = next(j, &steady);
    up.spec.workers.replicas = 3;
    let scaling = plan(&up, &running(&up, 2), None, &[], now());
    assert_eq!(scaling.created(), ["ads-worker-2"]);
    let c = scaling.status.condition(condition_type::SCALING).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", reason::REPLICAS_CHANGED));
    assert_eq!(c.message, "scaling from 2 to 3 workers");
    assert!(scaling.events.iter().any(|e| e.reason == reason::REPLICAS_CHANGED));

    let up = next(up, &scaling);
    let mut starting = running(&up, 3);
    starting[3] = with_phase(starting[3].clone(), "Pending");
    let waiting = plan(&up, &starting, None, &[], now());
    assert!(waiting.status.is_condition_true(condition_type::SCALING), "the third worker is not ready");
    let done = plan(&up, &running(&up, 3), None, &[], now());
    assert_eq!(done.status.condition(condition_type::SCALING).unwrap().reason, reason::STABLE);
    assert!(!done.status.is_condition_true(condition_type::SCALING));

    let mut down = next(up, &done);
    down.spec.workers.replicas = 1;
    let shrinking = plan(&down, &running(&down, 3), None, &[], now());
    assert_eq!(shrinking.deleted(), ["ads-worker-1", "ads-worker-2"]);
    assert!(shrinking.status.is_condition_true(condition_type::SCALING));
    let down = next(down, &shrinking);
    let leftover = plan(&down, &running(&down, 2), None, &[], now());
    assert!(leftover.status.is_condition_true(condition_type::SCALING), "worker 1 is still there");
    let settled = plan(&down, &running(&down, 1), None, &[], now());
    assert!(!settled.status.is_condition_true(condition_type::SCALING));

    let settled = next(down, &settled);
    let mut pods = running(&settled, 1);
    pods[1] = with_phase(pods[1].clone(), "Failed");
    let replaced = plan(&settled, &pods, None, &[], now());
    assert_eq!(replaced.deleted(), ["ads-worker-0"]);
    assert!(!replaced.status.is_condition_true(condition_type::SCALING), "a replacement is not scaling");
}

#[test]
fn workers_on_nodes_about_to_go_are_drained() {
    use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
    let j = job(SPEC);
    let j = next(j.clone(), &plan(&j, &[], None, &[], now()));
    let mut on_spot = with_phase(desired::worker_pod(&j, 1, &options()), "Running");
    on_spot.spec.as_mut().unwrap().node_name = Some("spot-1".into());
    let pods = vec![
        with_phase(desired::master_pod(&j, &options()), "Running"),
        with_phase(desired::worker_pod(&j, 0, &options()), "Running"),
        on_spot,
    ];
    let p = plan(&j, &pods, None, &["spot-1".to_string()], now());
    assert_eq!(p.drain_workers, ["ads-worker-1"]);
    assert!(p.status.is_condition_true(condition_type::DRAINING));
    assert!(p.delete_pods.is_empty(), "a draining worker finishes its handover before it goes");
    let calm = plan(&next(j, &p), &pods, None, &[], now());
    assert!(calm.drain_workers.is_empty() && !calm.status.is_condition_true(condition_type::DRAINING));

    let taint = |key: &str| Taint { key: key.into(), effect: "NoSchedule".into(), ..Default::default() };
    let node = |taints: Vec<Taint>, cordoned| Node {
        spec: Some(NodeSpec { taints: Some(taints), unschedulable: Some(cordoned), ..Default::default() }),
        ..Default::default()
    };
    assert!(node_terminating(&node(vec![taint("aws-node-termination-handler/spot-itn")], false)));
    assert!(node_terminating(&node(vec![], true)), "a cordoned node is leaving");
    assert!(!node_terminating(&node(vec![taint("cloud.google.com/gke-spot")], false)), "spot is not leaving");
}

#[test]
fn a_job_past_its_deadline_fails_and_an_invalid_one_says_why() {
    let j = job("datasetUri: s3://data/grid\nmodelUri: s3://models/model\nrunPolicy: {activeDeadlineSeconds: 100}\n");
    let j = next(j.clone(), &plan(&j, &[], None, &[], now()));
    let late = plan(&j, &[], None, &[], now() + SignedDuration::from_secs(100));
    assert_eq!(late.status.condition(condition_type::FAILED).unwrap().reason, reason::DEADLINE_EXCEEDED);
    // Admission refuses these; an object that skipped it fails with the same message.
    let hinge = job("datasetUri: s3://data/g\nmodelUri: s3://models/x\nalgorithm: {scd: {loss: hinge}}\n");
    let refused = plan(&hinge, &[], None, &[], now());
    assert_eq!(refused.status.phase, Some(Phase::Failed));
    assert!(refused.pods.is_empty() && refused.secret.is_none());
    let c = refused.status.condition(condition_type::FAILED).unwrap();
    assert_eq!(c.reason, reason::INVALID_SPEC);
    assert!(c.message.contains(linea_crds::validation::MSG_SCD_HINGE), "{}", c.message);
    let mut long = job(SPEC);
    long.metadata.name = Some("x".repeat(57));
    let refused = plan(&long, &[], None, &[], now());
    assert!(refused.status.condition(condition_type::FAILED).unwrap().message.contains("at most 56"));
}

#[test]
fn cocoa_jobs_run() {
    let j = job(
        "datasetUri: s3://data/g\nmodelUri: s3://models/x\nalgorithm: {cocoa: {loss: hinge}}\nworkers: {replicas: 2}\n",
    );
    let p = plan(&j, &[], None, &[], now());
    assert_eq!(p.created(), ["ads-master", "ads-worker-0", "ads-worker-1"]);
    assert_eq!(p.status.algorithm.as_deref(), Some("cocoa"));
}

fn terminated_pod(pod: Pod, phase: &str, exit_code: i32, why: &str, message: Option<&str>, at: Timestamp) -> Pod {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus};
    let mut pod = with_phase(pod, phase);
    let state = ContainerStateTerminated {
        exit_code,
        reason: Some(why.into()),
        message: message.map(Into::into),
        finished_at: Some(Time(at)),
        ..Default::default()
    };
    pod.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
        name: "c".into(),
        state: Some(ContainerState { terminated: Some(state), ..Default::default() }),
        ..Default::default()
    }]);
    pod.metadata.uid = Some(format!("uid-{}-{exit_code}-{}", pod.name_any(), at.as_second()));
    pod
}

fn running_job(spec: &str, workers: i32) -> (TrainingJob, Vec<Pod>) {
    let j = job(spec);
    let j = next(j.clone(), &plan(&j, &[], None, &[], now()));
    let mut pods = vec![with_phase(desired::master_pod(&j, &options()), "Running")];
    pods.extend((0..workers).map(|i| with_phase(desired::worker_pod(&j, i, &options()), "Running")));
    (j, pods)
}

const RAW: &str = "datasetUri: s3://data/a9a/grid\nmodelUri: s3://models/a9a.model\nworkers: {replicas: 2}\n\
    rawData: {uri: 's3://raw/a9a.libsvm', format: libsvm}\n";

fn prepare_pod(j: &TrainingJob) -> Pod {
    crate::prepare::prepare_pod(j, &options()).unwrap()
}

fn reasons(plan: &Plan) -> Vec<&'static str> {
    plan.events.iter().map(|e| e.reason).collect()
}

#[test]
fn raw_data_is_prepared_first_and_then_the_job_starts_as_usual() {
    let j = job(RAW);
    let first = plan(&j, &[], None, &[], now());
    assert_eq!(first.created(), ["ads-prepare"], "only the prepare pod until the grid is ready");
    assert!(first.secret.is_none() && first.service.is_none());
    assert_eq!(first.status.phase, Some(Phase::Preparing));
    let prepared = first.status.condition(condition_type::PREPARED).unwrap();
    assert_eq!((prepared.status.as_str(), prepared.reason.as_str()), ("False", reason::PREPARING));
    assert!(prepared.message.contains("s3://raw/a9a.libsvm") && prepared.message.contains("s3://data/a9a/grid"));
    assert_eq!(reasons(&first), [reason::PREPARING]);

    let j = next(j, &first);
    let running = plan(&j, &[with_phase(prepare_pod(&j), "Running")], None, &[], now());
    assert!(running.pods.is_empty() && running.delete_pods.is_empty() && running.events.is_empty());
    assert_eq!(running.status.phase, Some(Phase::Preparing));

    let summary = r#"{"reused":false,"rows":32560,"nnz":451592,"shards":2,"blocks":15}"#;
    let done = terminated_pod(prepare_pod(&j), "Succeeded", 0, "Completed", Some(summary), now());
    let started = plan(&j, std::slice::from_ref(&done), None, &[], now());
    let prepared = started.status.condition(condition_type::PREPARED).unwrap();
    assert_eq!((prepared.status.as_str(), prepared.reason.as_str()), ("True", reason::GRID_PREPARED));
    assert!(prepared.message.contains("32560 rows"), "{}", prepared.message);
    assert_eq!(started.created(), ["ads-master", "ads-worker-0", "ads-worker-1"]);
    // `job()` has its auth Secret recorded already, so the pods need not wait for one.
    assert!(started.secret.is_none() && started.service.is_some() && started.budget.is_some());
    assert_eq!(reasons(&started), [reason::GRID_PREPARED, reason::RESOURCES_CREATED]);
    assert_eq!(started.status.phase, Some(Phase::Pending));
    assert!(started.deleted().is_empty(), "the finished prepare pod stays for its log");

    // Prepared once: a later master failure or the pod's removal never prepares again.
    let j = next(j, &started);
    let later = plan(&j, &[], None, &[], now());
    assert!(!later.created().contains(&"ads-prepare".to_string()), "{:?}", later.created());
    assert!(!reasons(&later).contains(&reason::GRID_PREPARED));
}

#[test]
fn a_grid_prepared_from_the_same_input_is_kept_and_said_so() {
    let j = next(job(RAW), &plan(&job(RAW), &[], None, &[], now()));
    let summary = r#"{"reused":true,"rows":32560,"nnz":451592,"shards":2,"blocks":15}"#;
    let kept = terminated_pod(prepare_pod(&j), "Succeeded", 0, "Completed", Some(summary), now());
    let p = plan(&j, &[kept], None, &[], now());
    let prepared = p.status.condition(condition_type::PREPARED).unwrap();
    assert_eq!((prepared.status.as_str(), prepared.reason.as_str()), ("True", reason::GRID_REUSED));
    assert_eq!(reasons(&p), [reason::GRID_REUSED, reason::RESOURCES_CREATED]);
    assert_eq!(p.created(), ["ads-master", "ads-worker-0", "ads-worker-1"]);
}

#[test]
fn a_failed_prepare_fails_the_job_with_its_termination_message_and_a_preempted_one_is_redone() {
    let spec = format!("{RAW}runPolicy: {{cleanPodPolicy: All}}\n");
    let j = next(job(&spec), &plan(&job(&spec), &[], None, &[], now()));
    let message = "error: s3://raw/a9a.libsvm: access denied (InvalidAccessKeyId)";
    let failed = terminated_pod(prepare_pod(&j), "Failed", 1, "Error", Some(message), now());
    let p = plan(&j, &[failed], None, &[], now());
    assert_eq!(p.status.phase, Some(Phase::Failed));
    let condition = p.status.condition(condition_type::FAILED).unwrap();
    assert_eq!(condition.reason, reason::PREPARE_FAILED);
    assert!(condition.message.contains("InvalidAccessKeyId"), "{}", condition.message);
    assert_eq!(reasons(&p), [reason::PREPARE_FAILED]);
    assert!(p.events[0].warning);
    assert!(p.pods.is_empty(), "no master or workers for a job without its grid");
    assert_eq!(p.deleted(), ["ads-prepare"], "cleanPodPolicy All: no pod is left behind");

    let mut preempted = with_phase(prepare_pod(&j), "Failed");
    preempted.status.as_mut().unwrap().reason = Some("Evicted".into());
    let p = plan(&j, &[preempted], None, &[], now());
    assert_eq!((p.status.phase, p.deleted()), (Some(Phase::Preparing), vec!["ads-prepare".to_string()]));
    assert!(p.pods.is_empty(), "recreated once the evicted pod is gone");
}

#[test]
fn a_crash_looping_worker_backs_off_is_counted_and_ends_the_job_at_the_limit() {
    let (j, mut pods) = running_job(
        &SPEC.replace("ttlSecondsAfterFinished: 60}", "ttlSecondsAfterFinished: 60, workerFailureLimit: 2}"),
        2,
    );
    assert_eq!(j.spec.run_policy.worker_failure_limit, 2);
    let oom = |pods: &[Pod], at| terminated_pod(pods[1].clone(), "Failed", 137, "OOMKilled", None, at);

    // First failure: replaced at once, counted, an event says why.
    pods[1] = oom(&pods, now());
    let first = plan(&j, &pods, None, &[], now());
    assert_eq!(first.deleted(), ["ads-worker-0"]);
    let w = first.status.workers.as_ref().unwrap();
    assert_eq!((w.failed, w.recent_failures), (1, 1));
    assert!(w.last_failure.as_deref().unwrap().contains("OOMKilled (exit code 137)"), "{w:?}");
    let event = first.events.iter().find(|e| e.reason == reason::WORKER_FAILED).unwrap();
    assert!(event.warning && event.note.contains("ads-worker-0 failed: OOMKilled"), "{event:?}");

    // Second failure: held back 10 s, shown in Blocked, not yet counted.
    let j = next(j, &first);
    pods[1] = terminated_pod(pods[1].clone(), "Failed", 1, "Error", Some("error: s3://data: timed out"), now());
    let held = plan(&j, &pods, None, &[], now() + SignedDuration::from_secs(3));
    assert!(held.delete_pods.is_empty(), "backoff: not replaced yet");
    assert_eq!(held.status.workers.as_ref().unwrap().failed, 1);
    let blocked = held.status.condition(condition_type::BLOCKED).unwrap();
    assert_eq!((blocked.status.as_str(), blocked.reason.as_str()), ("True", reason::BACKOFF));
    assert!(blocked.message.contains("(backoff 10 s)") && blocked.message.contains("timed out"), "{}", blocked.message);
    assert_eq!(held.requeue, Duration::from_secs(7));
    assert!(held.events.iter().any(|e| e.reason == reason::BACKOFF), "an event when Blocked changes");
    let again = plan(&next(j.clone(), &held), &pods, None, &[], now() + SignedDuration::from_secs(4));
    assert!(!again.events.iter().any(|e| e.reason == reason::BACKOFF), "no event while nothing changes");

    let replaced = plan(&j, &pods, None, &[], now() + SignedDuration::from_secs(10));
    assert_eq!(replaced.deleted(), ["ads-worker-0"]);
    assert_eq!(replaced.status.workers.as_ref().unwrap().failed, 2);

    // Third failure (after a 20 s backoff) is past workerFailureLimit 2: the job is broken.
    let j = next(j, &replaced);
    pods[1] = oom(&pods, now());
    assert!(plan(&j, &pods, None, &[], now() + SignedDuration::from_secs(19)).delete_pods.is_empty());
    let broken = plan(&j, &pods, None, &[], now() + SignedDuration::from_secs(20));
    assert_eq!(broken.status.phase, Some(Phase::Failed));
    assert_eq!(broken.status.condition(condition_type::FAILED).unwrap().reason, reason::WORKER_FAILURE_LIMIT_EXCEEDED);
    assert_eq!(broken.status.workers.as_ref().unwrap().failed, 3);
    assert_eq!(broken.status.workers.as_ref().unwrap().recent_failures, 3);

    // A preempted worker and one that exited 0 (drained) never count.
    let (j, mut pods) = running_job(SPEC, 2);
    pods[1] = terminated_pod(pods[1].clone(), "Succeeded", 0, "Completed", None, now());
    let mut preempted = terminated_pod(pods[2].clone(), "Failed", 143, "Error", None, now());
    let disruption = PodCondition { type_: "DisruptionTarget".into(), status: "True".into(), ..Default::default() };
    preempted.status.as_mut().unwrap().conditions.as_mut().unwrap().push(disruption);
    pods[2] = preempted;
    let p = plan(&j, &pods, None, &[], now());
    assert_eq!(p.deleted(), ["ads-worker-0", "ads-worker-1"]);
    assert_eq!(p.status.workers.as_ref().unwrap().failed, 0);
}

/// The policy for long jobs: failures count against workerFailureLimit (and grow the
/// backoff) only while training does not advance; a worker that ran 10 minutes before it
/// failed is replaced at once. `workers.failed` keeps the whole job's count.
#[test]
fn worker_failures_count_until_training_advances_and_a_long_run_is_replaced_at_once() {
    let spec = SPEC.replace("ttlSecondsAfterFinished: 60}", "ttlSecondsAfterFinished: 60, workerFailureLimit: 2}");
    let (j, mut pods) = running_job(&spec, 1);
    let t0 = now();
    let at = |s: i64| t0 + SignedDuration::from_secs(s);
    let polled = |epoch| MasterProgress { epoch, workers_active: 1, ..Default::default() };
    // Epoch 3 is known from an earlier poll.
    let j = next(j.clone(), &plan(&j, &pods, Some(&polled(3)), &[], at(0)));
    let fail = |pod: &Pod, started: i64, ended: i64| {
        let mut p = terminated_pod(pod.clone(), "Failed", 137, "OOMKilled", None, at(ended));
        let state = p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].state.as_mut().unwrap();
        state.terminated.as_mut().unwrap().started_at = Some(Time(at(started)));
        p
    };

    // Two quick failures at epoch 3: counted 1 and 2 (replaced at once, then after 10 s).
    pods[1] = fail(&pods[1], 0, 60);
    let first = plan(&j, &pods, Some(&polled(3)), &[], at(60));
    assert_eq!(first.deleted(), ["ads-worker-0"]);
    let j = next(j, &first);
    pods[1] = fail(&pods[1], 70, 100);
    assert!(plan(&j, &pods, Some(&polled(3)), &[], at(105)).delete_pods.is_empty(), "10 s backoff");
    let second = plan(&j, &pods, Some(&polled(3)), &[], at(110));
    let w = second.status.workers.as_ref().unwrap();
    assert_eq!((second.deleted(), w.failed, w.recent_failures), (vec!["ads-worker-0".to_string()], 2, 2));

    // The master reports epoch 4: the failures did not stop training, the count restarts.
    let j = next(j, &second);
    let advanced = plan(&j, &pods[..1], Some(&polled(4)), &[], at(200));
    let w = advanced.status.workers.as_ref().unwrap();
    assert_eq!((w.failed, w.recent_failures), (2, 0), "the record keeps 2; the limit's count is 0");

    // A third failure after that is not past workerFailureLimit 2, and is replaced at once
    // (backoff of the restarted count: none), though it is the job's third.
    let j = next(j, &advanced);
    pods[1] = fail(&pods[1], 150, 300);
    let third = plan(&j, &pods, Some(&polled(4)), &[], at(300));
    assert_eq!(third.status.phase, Some(Phase::Running), "not broken: training advanced");
    assert_eq!(third.deleted(), ["ads-worker-0"]);
    let w = third.status.workers.as_ref().unwrap();
    assert_eq!((w.failed, w.recent_failures), (3, 1));
    let event = third.events.iter().find(|e| e.reason == reason::WORKER_FAILED).unwrap();
    assert!(
        event.note.contains("failure 1 of workerFailureLimit 2 since training last advanced (3 in all)"),
        "{}",
        event.note
    );

    // Stuck at epoch 4: the next quick failure waits 10 s (count 1)...
    let j = next(j, &third);
    pods[1] = fail(&pods[1], 310, 320);
    assert!(plan(&j, &pods, Some(&polled(4)), &[], at(329)).delete_pods.is_empty());
    // ...but one that had run 10 minutes is not crash-looping: replaced at once.
    pods[1] = fail(&pods[1], 320, 920);
    let long = plan(&j, &pods, Some(&polled(4)), &[], at(920));
    assert_eq!(long.deleted(), ["ads-worker-0"]);
    assert_eq!(long.status.workers.as_ref().unwrap().recent_failures, 2, "it still counts: no epoch since");
    // 9 min 59 s is not 10 minutes.
    pods[1] = fail(&pods[1], 321, 920);
    assert!(plan(&j, &pods, Some(&polled(4)), &[], at(920)).delete_pods.is_empty());

    // Without progress from the master nothing resets the count: three quick failures in
    // a row are past the limit of 2.
    let j = next(j, &long);
    pods[1] = fail(&pods[1], 930, 940);
    let broken = plan(&j, &pods, None, &[], at(940 + 20));
    assert_eq!(broken.status.phase, Some(Phase::Failed));
    let c = broken.status.condition(condition_type::FAILED).unwrap();
    assert_eq!(c.reason, reason::WORKER_FAILURE_LIMIT_EXCEEDED);
    assert!(c.message.contains("3 worker failures without training advancing"), "{}", c.message);
    assert_eq!(broken.status.workers.as_ref().unwrap().failed, 5);
}

#[test]
fn a_failed_master_is_replaced_after_a_growing_backoff_and_bad_data_fails_at_once() {
    let spec = SPEC.replace("backoffLimit: 1", "backoffLimit: 3");
    let (j, mut pods) = running_job(&spec, 1);
    pods[0] = terminated_pod(pods[0].clone(), "Failed", 1, "Error", Some("error: s3://models: timed out"), now());
    let first = plan(&j, &pods, None, &[], now());
    assert_eq!((first.deleted(), first.status.restarts), (vec!["ads-master".to_string()], 1));
    let note = &first.events.iter().find(|e| e.reason == reason::MASTER_RESTARTING).unwrap().note;
    assert!(note.contains("timed out") && note.contains("restart 1 of 3"), "{note}");
    let j = next(j, &first);
    let held = plan(&j, &pods, None, &[], now() + SignedDuration::from_secs(5));
    assert!(held.delete_pods.is_empty() && held.status.restarts == 1, "10 s backoff after the first restart");
    assert_eq!(held.status.phase, Some(Phase::Restarting));
    let running = &held.status.condition(condition_type::RUNNING).unwrap().message;
    assert!(running.contains("(backoff 10 s)"), "{running}");
    let second = plan(&j, &pods, None, &[], now() + SignedDuration::from_secs(10));
    assert_eq!((second.deleted(), second.status.restarts), (vec!["ads-master".to_string()], 2));

    let (j, mut pods) = running_job(&spec, 1);
    pods[0] = terminated_pod(
        pods[0].clone(),
        "Failed",
        2,
        "Error",
        Some("error: s3://data/grid/manifest: no such object"),
        now(),
    );
    let p = plan(&j, &pods, None, &[], now());
    assert_eq!(p.status.phase, Some(Phase::Failed));
    let c = p.status.condition(condition_type::FAILED).unwrap();
    assert_eq!(c.reason, reason::DATASET_ERROR);
    assert!(c.message.contains("no such object"), "{}", c.message);
}

#[test]
fn the_final_status_comes_from_the_masters_termination_message() {
    // One epoch, ended before any poll: the master's summary says 1, the limit.
    let spec = "datasetUri: s3://data/grid\nmodelUri: s3://models/m\nalgorithm: {scd: {epochs: 1}}\n";
    let (j, mut pods) = running_job(spec, 1);
    pods[0] =
        terminated_pod(pods[0].clone(), "Succeeded", 0, "Completed", Some(r#"{"epochs":1,"objective":0.25}"#), now());
    let done = plan(&j, &pods, None, &[], now());
    let c = done.status.condition(condition_type::SUCCEEDED).unwrap();
    assert_eq!(c.reason, reason::MAX_EPOCHS_REACHED);
    assert!(c.message.contains("after 1 epochs, objective 0.25"), "{}", c.message);
    assert_eq!(done.status.progress.as_ref().unwrap().epoch, 1);
    assert_eq!(done.status.progress.as_ref().unwrap().objective, Some(0.25));

    // Fewer epochs than the limit: it converged. The summary wins over an older poll.
    let (j, mut pods) = running_job(SPEC, 1);
    let polled = MasterProgress { epoch: 2, ..Default::default() };
    let j = next(j.clone(), &plan(&j, &pods, Some(&polled), &[], now()));
    pods[0] =
        terminated_pod(pods[0].clone(), "Succeeded", 0, "Completed", Some(r#"{"epochs":7,"objective":1.5}"#), now());
    let done = plan(&j, &pods, None, &[], now());
    assert_eq!(done.status.condition(condition_type::SUCCEEDED).unwrap().reason, reason::CONVERGED);
    assert_eq!(done.status.progress.as_ref().unwrap().epoch, 7);

    // No summary (an older image): say so instead of inventing "after 0 epochs".
    pods[0] = terminated_pod(pods[0].clone(), "Succeeded", 0, "Completed", None, now());
    let done = plan(&j, &pods, None, &[], now());
    let message = &done.status.condition(condition_type::SUCCEEDED).unwrap().message;
    assert!(message.contains("no final epoch count (last polled epoch 2)"), "{message}");
}

#[test]
fn a_cocoa_masters_final_gap_comes_from_its_termination_message() {
    // Polled mid-run at a large gap; the master's summary has the gap it stopped at.
    let spec = "datasetUri: s3://data/grid\nmodelUri: s3://models/m\nalgorithm: {cocoa: {gapTolerance: 1e-4}}\n";
    let (j, mut pods) = running_job(spec, 1);
    let polled = MasterProgress { epoch: 3, duality_gap: Some(0.5), ..Default::default() };
    let j = next(j.clone(), &plan(&j, &pods, Some(&polled), &[], now()));
    let summary = r#"{"epochs":9,"objective":2.5,"dualityGap":8e-5}"#;
    pods[0] = terminated_pod(pods[0].clone(), "Succeeded", 0, "Completed", Some(summary), now());
    let done = plan(&j, &pods, None, &[], now());
    let progress = done.status.progress.as_ref().unwrap();
    assert_eq!((progress.epoch, progress.duality_gap), (9, Some(8e-5)));
    assert_eq!(done.status.condition(condition_type::SUCCEEDED).unwrap().reason, reason::CONVERGED);

    // A summary without a gap (an older image) keeps the last polled one.
    pods[0] = terminated_pod(pods[0].clone(), "Succeeded", 0, "Completed", Some(r#"{"epochs":9}"#), now());
    let done = plan(&j, &pods, None, &[], now());
    assert_eq!(done.status.progress.as_ref().unwrap().duality_gap, Some(0.5));
}

/// Hybrid and IPM have no dual: polled and final, their status has the objective and no gap
/// (the GAP column stays empty rather than showing a 0 that certifies nothing). An IPM run
/// that used its whole epoch budget says so; a hybrid that stopped before it converged.
#[test]
fn hybrid_and_ipm_finish_with_their_objective_and_no_gap() {
    let cases = [
        ("ipm: {maxEpochs: 5}", r#"{"epochs":5,"objective":10662.19}"#, reason::MAX_EPOCHS_REACHED, "after 5 epochs"),
        ("hybrid: {maxEpochs: 100}", r#"{"epochs":23,"objective":10546.67}"#, reason::CONVERGED, "after 23 epochs"),
    ];
    for (block, summary, why, after) in cases {
        let spec = format!("datasetUri: s3://data/grid\nmodelUri: s3://models/m\nalgorithm: {{{block}}}\n");
        let (j, mut pods) = running_job(&spec, 2);
        let polled = MasterProgress { epoch: 3, objective: Some(11000.5), workers_active: 2, ..Default::default() };
        let running = plan(&j, &pods, Some(&polled), &[], now());
        let progress = running.status.progress.as_ref().unwrap();
        assert_eq!((progress.epoch, progress.objective, progress.duality_gap), (3, Some(11000.5), None), "{block}");
        let j = next(j.clone(), &running);
        pods[0] = terminated_pod(pods[0].clone(), "Succeeded", 0, "Completed", Some(summary), now());
        let done = plan(&j, &pods, None, &[], now());
        let c = done.status.condition(condition_type::SUCCEEDED).unwrap();
        assert_eq!(c.reason, why, "{block}: {}", c.message);
        assert!(c.message.contains(after) && c.message.contains(", objective 10"), "{block}: {}", c.message);
        let progress = done.status.progress.as_ref().unwrap();
        assert_eq!(progress.duality_gap, None, "{block}");
        assert!(progress.objective.is_some_and(|o| o < 11000.0), "{block}: the final objective, not the polled one");
        let status = serde_json::to_value(&done.status).unwrap();
        assert!(status["progress"].get("dualityGap").is_none(), "{block}: {status}");
        assert!(done.events.iter().any(|e| e.reason == why && e.note == c.message), "{block}: one event says it");
    }
}

#[test]
fn pods_that_cannot_start_show_in_conditions_with_one_event() {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateWaiting, ContainerStatus};
    let (j, mut pods) = running_job(SPEC, 2);
    pods[0] = with_phase(pods[0].clone(), "Pending");
    pods[0].status.as_mut().unwrap().conditions = Some(vec![PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some("0/3 nodes are available: 3 Insufficient memory.".into()),
        ..Default::default()
    }]);
    pods[2] = with_phase(pods[2].clone(), "Pending");
    pods[2].status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
        name: "worker".into(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ImagePullBackOff".into()),
                message: Some("Back-off pulling image \"linea:nope\"".into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    let p = plan(&j, &pods, None, &[], now());
    let running = p.status.condition(condition_type::RUNNING).unwrap();
    assert_eq!((running.status.as_str(), running.reason.as_str()), ("False", reason::POD_UNSCHEDULABLE));
    assert!(running.message.contains("Insufficient memory"), "{}", running.message);
    let blocked = p.status.condition(condition_type::BLOCKED).unwrap();
    assert_eq!(blocked.reason, reason::POD_UNSCHEDULABLE);
    assert!(blocked.message.contains("ads-worker-1: ImagePullBackOff"), "{}", blocked.message);
    assert_eq!(p.events.iter().filter(|e| e.reason == reason::POD_UNSCHEDULABLE).count(), 1);
    let again = plan(&next(j.clone(), &p), &pods, None, &[], now());
    assert!(again.events.is_empty(), "no new event while the same pods are blocked: {:?}", again.events);
    let (_, fine) = running_job(SPEC, 2);
    let cleared = plan(&next(j, &again), &fine, None, &[], now());
    assert_eq!(cleared.status.condition(condition_type::BLOCKED).unwrap().status, "False");
}

#[test]
fn objects_the_job_does_not_own_are_never_adopted_or_deleted() {
    let j = job(SPEC);
    let mut foreign = desired::master_service(&j);
    foreign.metadata.owner_references = None;
    let observed = Observed { pods: &[], service: Some(&foreign), budget: None, progress: None, leaving_nodes: &[] };
    let p = super::plan(&j, desired::build(&j, &options()), observed, now());
    assert!(p.pods.is_empty() && p.service.is_none() && p.secret.is_none(), "nothing is created");
    assert!(p.budget.is_none());
    let c = p.status.condition(condition_type::CREATED).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", reason::RESOURCE_CONFLICT));
    assert!(c.message.contains("service ml/ads-master exists and is not owned"), "{}", c.message);
    assert!(p.events.iter().any(|e| e.warning && e.reason == reason::RESOURCE_CONFLICT));

    // The same for a PodDisruptionBudget of the master's name: someone else's budget
    // would decide about our master, so the job waits until it is gone.
    let ours = desired::master_service(&j);
    let mut theirs = desired::master_budget(&j);
    theirs.metadata.owner_references = None;
    let observed =
        Observed { pods: &[], service: Some(&ours), budget: Some(&theirs), progress: None, leaving_nodes: &[] };
    let p = super::plan(&j, desired::build(&j, &options()), observed, now());
    assert!(p.pods.is_empty() && p.service.is_none() && p.budget.is_none(), "nothing is applied");
    let c = p.status.condition(condition_type::CREATED).unwrap();
    assert_eq!(c.reason, reason::RESOURCE_CONFLICT);
    assert!(c.message.contains("poddisruptionbudget ml/ads-master exists and is not owned"), "{}", c.message);
    let mine = desired::master_budget(&j);
    let observed =
        Observed { pods: &[], service: Some(&ours), budget: Some(&mine), progress: None, leaving_nodes: &[] };
    let p = super::plan(&j, desired::build(&j, &options()), observed, now());
    assert!(p.budget.is_some() && !p.pods.is_empty(), "the job's own budget is kept up to date");

    // A pod with the job's labels but another owner: not counted, not deleted, not
    // replaced by name (creating it will conflict, which reconcile reports).
    let (j, mut pods) = running_job(SPEC, 2);
    let mut stranger = with_phase(desired::worker_pod(&j, 5, &options()), "Failed");
    stranger.metadata.owner_references = None;
    pods.push(stranger);
    let p = plan(&j, &pods, None, &[], now());
    assert!(p.delete_pods.is_empty(), "{:?}", p.deleted());
    let mut other = j.clone();
    other.metadata.uid = Some("other".into());
    let p = plan(&other, &pods, None, &[], now());
    assert!(p.delete_pods.is_empty(), "pods of another job of the same name are not ours");
}

const ELASTIC: &str = "datasetUri: s3://data/grid\nmodelUri: s3://models/model\nworkers: {replicas: 8}\n\
    algorithm: {cocoa: {loss: hinge}}\nelastic: {enabled: true, minReplicas: 2, clock: epochs}\n";
const WHY: &str = "duality gap rate 0.31/epoch over the last 2 epochs vs 0.52/epoch since 8 workers: 8 -> 2";

fn worker_id(i: i32) -> String {
    format!("ads-worker-{i}-{:08x}", 0xabc0 + i)
}

/// What an elastic master of 8 slots reports: its desired count, released ids, and below
/// 8 its decision 8 -> `desired` (WHY) releasing them (a restarted master: none).
fn elastic_master(epoch: i64, desired: i32, released: &[i32], active: i32) -> MasterProgress {
    let ids: Vec<String> = released.iter().map(|&i| worker_id(i)).collect();
    let decision = MasterDecision {
        number: 1,
        epoch: 6,
        from: 8,
        to: desired as u32,
        released_workers: ids.clone(),
        reason: WHY.into(),
    };
    MasterProgress {
        epoch,
        workers_active: active,
        desired_workers: Some(desired),
        released_workers: ids,
        scaling_decisions: if desired < 8 { vec![decision] } else { Vec::new() },
        ..Default::default()
    }
}

fn scale_in_events(plan: &Plan) -> Vec<(Option<i32>, &str)> {
    let elastic = plan.events.iter().filter(|e| e.reason == reason::ELASTIC_SCALE_IN);
    elastic.map(|e| (e.decision, e.note.as_str())).collect()
}

/// Two decisions between two polls are two events; the status records them, so the next
/// pass, a restarted operator (the status as stored) and a restarted master (the decisions
/// replayed) report neither again.
#[test]
fn every_decision_of_the_master_is_one_event_once() {
    let (j, pods) = running_job(ELASTIC, 8);
    let j = next(j.clone(), &plan(&j, &pods, Some(&elastic_master(1, 8, &[], 8)), &[], now()));
    let (to_two, to_one): (Vec<i32>, Vec<i32>) = ((2..8).collect(), vec![1]);
    let two_to_one = "duality gap rate 0.1/epoch over the last 2 epochs vs 0.2/epoch since 2 slots: 2 -> 1";
    let mut master = elastic_master(12, 1, &[to_two.clone(), to_one.clone()].concat(), 8);
    master.scaling_decisions[0].to = 2;
    master.scaling_decisions[0].released_workers = to_two.iter().map(|&i| worker_id(i)).collect();
    master.scaling_decisions.push(MasterDecision {
        number: 2,
        epoch: 10,
        from: 2,
        to: 1,
        released_workers: vec![worker_id(1)],
        reason: two_to_one.into(),
    });
    let both = plan(&j, &pods, Some(&master), &[], now());
    let events = scale_in_events(&both);
    let to_two_note =
        format!("{WHY}; released {}", to_two.iter().map(|i| format!("ads-worker-{i}")).collect::<Vec<_>>().join(", "));
    assert_eq!(events, [(Some(1), to_two_note.as_str()), (Some(2), &*format!("{two_to_one}; released ads-worker-1"))]);
    let recorded = &both.status.elastic.as_ref().unwrap().decisions;
    assert_eq!(recorded.iter().map(|d| (d.number, d.from, d.to)).collect::<Vec<_>>(), [(1, 8, 2), (2, 2, 1)]);
    let c = both.status.condition(condition_type::SCALING).unwrap();
    assert!(c.message.starts_with(two_to_one), "the condition says the latest: {}", c.message);
    let j = next(j, &both);
    assert!(scale_in_events(&plan(&j, &pods, Some(&master), &[], now())).is_empty(), "the next pass");
    let stored: TrainingJob = serde_json::from_value(serde_json::to_value(&j).unwrap()).unwrap();
    assert!(scale_in_events(&plan(&stored, &pods, Some(&master), &[], now())).is_empty(), "an operator restart");
    let mut restarted = master.clone();
    restarted.released_workers.clear();
    restarted.scaling_decisions.iter_mut().for_each(|d| d.released_workers.clear());
    assert!(scale_in_events(&plan(&j, &pods, Some(&restarted), &[], now())).is_empty(), "a master restart");
    // Every other event of a plan is recorded as before, without a decision.
    assert!(both.events.iter().all(|e| (e.reason == reason::ELASTIC_SCALE_IN) == e.decision.is_some()));
}

fn names_of(indices: &[i32]) -> Vec<String> {
    indices.iter().map(|&i| format!("ads-worker-{i}")).collect()
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

fn exited(pod: &Pod) -> Pod {
    terminated_pod(pod.clone(), "Succeeded", 0, "Completed", None, now())
}

#[test]
fn an_elastic_scale_in_deletes_exactly_the_released_pods_once_they_exited_and_never_replaces_them() {
    let (j, mut pods) = running_job(ELASTIC, 8);
    let start = plan(&j, &pods, Some(&elastic_master(1, 8, &[], 8)), &[], now());
    assert!(start.delete_pods.is_empty() && start.pods.is_empty());
    let e = start.status.elastic.clone().unwrap();
    assert_eq!((e.slots, e.desired, e.released.len()), (8, Some(8), 0));
    assert_eq!(start.status.workers.as_ref().unwrap().desired, 8);
    let j = next(j, &start);

    // 8 -> 2: the master releases the newest six, whatever their indices.
    let released = [7, 0, 3, 5, 4, 6];
    let decided = plan(&j, &pods, Some(&elastic_master(7, 2, &released, 8)), &[], now());
    assert!(decided.delete_pods.is_empty(), "released pods still run (draining): {:?}", decided.deleted());
    assert!(decided.pods.is_empty());
    let names = names_of(&released);
    assert_eq!(decided.status.elastic.as_ref().unwrap().released, names, "in the master's order");
    assert_eq!(decided.status.workers.as_ref().unwrap().desired, 2);
    let c = decided.status.condition(condition_type::SCALING).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", reason::ELASTIC_SCALE_IN));
    assert!(c.message.starts_with(WHY) && c.message.contains("ads-worker-7, ads-worker-0"), "{}", c.message);
    let note = format!("{WHY}; released {}", names_of(&released).join(", "));
    assert_eq!(scale_in_events(&decided), [(Some(1), note.as_str())], "one event: the reason, the pods");
    let j = next(j, &decided);

    // They exit 0; worker-1 (not released) is evicted meanwhile.
    for &i in &released {
        pods[1 + i as usize] = exited(&pods[1 + i as usize]);
    }
    let mut evicted = with_phase(pods[2].clone(), "Failed");
    evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
    pods[2] = evicted;
    let gone = plan(&j, &pods, Some(&elastic_master(8, 2, &released, 1)), &[], now());
    let mut want = names.clone();
    want.push("ads-worker-1".into());
    assert_eq!(sorted(gone.deleted()), sorted(want), "exactly the released pods, and the evicted one");
    assert!(gone.pods.is_empty());
    let w = gone.status.workers.as_ref().unwrap();
    assert_eq!((w.failed, w.recent_failures, w.desired), (0, 0, 2), "an eviction is not a failure");
    assert!(!reasons(&gone).contains(&reason::WORKER_FAILED));
    assert!(!reasons(&gone).contains(&reason::ELASTIC_SCALE_IN), "no new decision, no new event");
    let j = next(j, &gone);

    // The master restarted from its checkpoint: its released list is empty. The operator
    // still knows: it replaces the evicted worker and nothing else.
    let left: Vec<Pod> = vec![pods[0].clone(), pods[3].clone()];
    let restarted = plan(&j, &left, Some(&elastic_master(8, 2, &[], 1)), &[], now());
    assert_eq!(restarted.created(), ["ads-worker-1"]);
    assert!(restarted.delete_pods.is_empty());
    assert_eq!(restarted.status.elastic.as_ref().unwrap().released, names);
    let j = next(j, &restarted);
    let both = vec![pods[0].clone(), with_phase(restarted.pods[0].clone(), "Running"), pods[3].clone()];
    let stable = plan(&j, &both, Some(&elastic_master(9, 2, &[], 2)), &[], now());
    assert!(stable.pods.is_empty() && stable.delete_pods.is_empty());
    let c = stable.status.condition(condition_type::SCALING).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", reason::STABLE));
    assert_eq!(c.message, "2 workers ready after an elastic scale-in");
    // The master's flags did not change: the same slots and policy.
    assert!(args_of(&desired::master_pod(&j, &options())).contains("--slots 8 --elastic --elastic-min-slots 2"));
}

fn args_of(pod: &Pod) -> String {
    pod.spec.as_ref().unwrap().containers[0].args.clone().unwrap().join(" ")
}

#[test]
fn an_elastic_worker_that_ended_unlisted_is_replaced_only_if_the_master_wants_more() {
    let (j, mut pods) = running_job(ELASTIC, 8);
    let j = next(j.clone(), &plan(&j, &pods, Some(&elastic_master(1, 8, &[], 8)), &[], now()));
    // Worker 4 exits 0 (a drain on a node going away) while the master wants all 8.
    pods[5] = exited(&pods[5]);
    let drained = plan(&j, &pods, Some(&elastic_master(2, 8, &[], 7)), &[], now());
    assert_eq!(drained.deleted(), ["ads-worker-4"]);
    assert!(drained.status.elastic.as_ref().unwrap().released.is_empty(), "replaced, not released");
    // No word from the master in this pass: neither deleted nor replaced yet.
    let unknown = plan(&j, &pods, None, &[], now());
    assert!(unknown.delete_pods.is_empty() && unknown.pods.is_empty());
    assert!(unknown.requeue <= Duration::from_secs(2));
    // A master restarted after an 8 -> 2 scale-in, before the operator read its list: it
    // wants 2 and has 7 others, so worker 4 was surplus; recorded, deleted, not replaced.
    let surplus = plan(&j, &pods, Some(&elastic_master(9, 2, &[], 7)), &[], now());
    assert_eq!(surplus.deleted(), ["ads-worker-4"]);
    assert_eq!(surplus.status.elastic.as_ref().unwrap().released, ["ads-worker-4"]);
    assert!(surplus.status.is_condition_true(condition_type::SCALING));
    let j = next(j, &surplus);
    pods.remove(5);
    let after = plan(&j, &pods, Some(&elastic_master(9, 2, &[], 7)), &[], now());
    assert!(after.pods.is_empty(), "a released pod is never created again: {:?}", after.created());
    // A pod of another owner that looks released is never touched.
    let mut stranger = exited(&desired::worker_pod(&j, 6, &options()));
    stranger.metadata.owner_references = None;
    let mut with_stranger = pods.clone();
    with_stranger[6] = stranger;
    let p = plan(&j, &with_stranger, Some(&elastic_master(9, 2, &[6], 6)), &[], now());
    assert!(!p.deleted().contains(&"ads-worker-6".to_string()), "{:?}", p.deleted());
}

#[test]
fn kubectl_scale_of_an_elastic_job_caps_its_pods_and_never_changes_its_slots() {
    let (j, pods) = running_job(ELASTIC, 8);
    let j = next(j.clone(), &plan(&j, &pods, Some(&elastic_master(1, 8, &[], 8)), &[], now()));
    let mut down = j.clone();
    down.spec.workers.replicas = 4;
    let p = plan(&down, &pods, Some(&elastic_master(2, 8, &[], 8)), &[], now());
    assert_eq!(sorted(p.deleted()), ["ads-worker-4", "ads-worker-5", "ads-worker-6", "ads-worker-7"]);
    assert_eq!(p.status.workers.as_ref().unwrap().desired, 4);
    assert_eq!(p.status.condition(condition_type::SCALING).unwrap().reason, reason::REPLICAS_CHANGED);
    assert_eq!(p.status.elastic.as_ref().unwrap().slots, 8, "the slots the job started with");
    let down = next(down, &p);
    assert!(args_of(&desired::master_pod(&down, &options())).contains("--slots 8 "));
    // Raised above the slots: back to one pod per slot, never more.
    let mut up = down.clone();
    up.spec.workers.replicas = 16;
    let p = plan(&up, &pods[..5], Some(&elastic_master(3, 8, &[], 4)), &[], now());
    assert_eq!(p.created(), ["ads-worker-4", "ads-worker-5", "ads-worker-6", "ads-worker-7"]);
    assert_eq!(p.status.workers.as_ref().unwrap().desired, 8);
    // After a scale-in the master's count rules: scaling up adds no pod.
    let (j, pods) = running_job(ELASTIC, 8);
    let j = next(j.clone(), &plan(&j, &pods, Some(&elastic_master(1, 8, &[], 8)), &[], now()));
    let j = next(j.clone(), &plan(&j, &pods, Some(&elastic_master(5, 2, &[2, 3, 4, 5, 6, 7], 8)), &[], now()));
    let mut up = j.clone();
    up.spec.workers.replicas = 16;
    let p = plan(&up, &pods[..3], Some(&elastic_master(6, 2, &[2, 3, 4, 5, 6, 7], 2)), &[], now());
    assert!(p.pods.is_empty() && p.delete_pods.is_empty(), "{:?} {:?}", p.created(), p.deleted());
    assert_eq!(p.status.workers.as_ref().unwrap().desired, 2);
}

#[test]
fn a_large_job_is_created_in_batches() {
    let j = job("datasetUri: s3://data/grid\nmodelUri: s3://models/model\nworkers: {replicas: 50}\n");
    let first = plan(&j, &[], None, &[], now());
    assert_eq!(first.pods.len(), MAX_CREATES_PER_RECONCILE);
    assert_eq!(first.created()[0], "ads-master", "the master first");
    assert_eq!(first.requeue, Duration::from_secs(1), "the next batch soon");
    let j = next(j, &first);
    let made: Vec<Pod> = first.pods.iter().map(|p| with_phase(p.clone(), "Pending")).collect();
    let second = plan(&j, &made, None, &[], now());
    assert_eq!(second.created()[0], "ads-worker-19");
    assert_eq!(second.status.workers.as_ref().unwrap().desired, 50);
}

#[test]
fn backoff_doubles_up_to_five_minutes() {
    let secs: Vec<u64> = (0..8).map(|n| backoff(n).as_secs()).collect();
    assert_eq!(secs, [0, 10, 20, 40, 80, 160, 300, 300]);
    assert_eq!(backoff(i32::MAX), BACKOFF_MAX);
}

#[test]
fn refusals_found_while_applying_go_into_the_status() {
    let j = job(SPEC);
    let mut p = plan(&j, &[], None, &[], now());
    p.refused(&j, "pod ads-worker-1", "exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2");
    assert!(p.pods.is_empty());
    let c = p.status.condition(condition_type::BLOCKED).unwrap();
    assert_eq!(c.reason, reason::POD_CREATION_REFUSED);
    assert!(c.message.contains("creating pod ads-worker-1 was refused: exceeded quota"), "{}", c.message);
    let mut q = plan(&j, &[], None, &[], now());
    q.refused(&j, "secret ads-auth-…", "exceeded quota: secrets");
    let c = q.status.condition(condition_type::BLOCKED).unwrap();
    assert_eq!(c.reason, reason::CREATION_REFUSED, "not a pod");
    assert!(
        q.events.iter().any(|e| e.reason == reason::CREATION_REFUSED && e.note.contains("exceeded quota: secrets"))
    );
    p.invalid(&j, "Pod \"ads-master\" is invalid: spec.containers[0].resources.requests[memory]: Invalid value");
    assert_eq!(p.status.phase, Some(Phase::Failed));
    assert_eq!(p.status.condition(condition_type::FAILED).unwrap().reason, reason::INVALID_SPEC);
    assert!(p.events.iter().any(|e| e.reason == reason::INVALID_SPEC && e.note.contains("requests[memory]")));
}
