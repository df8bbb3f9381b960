//! The edges of reconcile: read the job's pods (and the master's progress), ask [`plan`]
//! what to do, and do it — server-side apply with one field manager, deletes, the status
//! subresource, events. A finalizer makes deletion wait until the job's objects are gone.

use crate::desired::{self, BuildOptions, MASTER_PORT};
use crate::elastic;
use crate::error::{ApiClass, OperatorError, Result, api_message, classify};
use crate::metrics::{CategoryLabel, JobLabel, Metrics, PhaseLabel};
use crate::nodes::{self, NodeIndex};
use crate::plan::Observed;
use crate::plan::{self, Plan};
use crate::{FIELD_MANAGER, FINALIZER, master};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{self, finalizer};
use kube::{Api, Client, Resource, ResourceExt};
use linea_crds::{TrainingJob, TrainingJobStatus};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Context {
    pub client: Client,
    pub options: BuildOptions,
    pub metrics: Arc<Metrics>,
    reporter: Reporter,
    poll_masters: bool,
    /// Each job's phase as last reconciled, for the jobs-by-phase gauge.
    phases: Mutex<HashMap<JobLabel, String>>,
    /// Consecutive failed (or refused) reconciles per job, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// The nodes each job's pods run on, for the Node watch ([`nodes`]).
    pub nodes: Arc<NodeIndex>,
}

/// First retry delay after a failed reconcile; doubled per consecutive failure.
const RETRY_BASE: Duration = Duration::from_secs(2);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(300);

/// The delay before the `failures`-th consecutive retry: 2 s, 4 s, 8 s, ... at most 5 min.
pub fn retry_delay(failures: u32) -> Duration {
    RETRY_BASE.saturating_mul(1 << failures.saturating_sub(1).min(16)).min(RETRY_MAX)
}

fn job_key(job: &TrainingJob) -> String {
    format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
}

impl Context {
    pub fn new(client: Client, options: BuildOptions, metrics: Arc<Metrics>, poll_masters: bool) -> Self {
        let reporter = Reporter { controller: FIELD_MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
        Self {
            client,
            options,
            metrics,
            reporter,
            poll_masters,
            phases: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            nodes: Arc::new(NodeIndex::default()),
        }
    }

    /// The delay before retrying `job` after one more failure: 2 s, 4 s, ... at most 5 min.
    fn backoff(&self, job: &TrainingJob) -> Duration {
        let mut failures = self.failures.lock().expect("failures lock");
        let n = failures.entry(job_key(job)).or_insert(0);
        *n = n.saturating_add(1);
        retry_delay(*n)
    }

    fn succeeded(&self, job: &TrainingJob) {
        self.failures.lock().expect("failures lock").remove(&job_key(job));
    }

    /// The job's phase and progress in the metrics; `None`: the job is gone.
    fn record(&self, job: &TrainingJob, status: Option<&TrainingJobStatus>) {
        let label = JobLabel { namespace: job.namespace().unwrap_or_default(), name: job.name_any() };
        let mut phases = self.phases.lock().expect("phases lock");
        match status {
            Some(status) => {
                self.metrics.progress.record(&label, status);
                match status.phase {
                    Some(p) => phases.insert(label, p.as_str().to_string()),
                    None => phases.remove(&label),
                }
            }
            None => {
                self.metrics.progress.forget(&label);
                phases.remove(&label)
            }
        };
        self.metrics.jobs.clear();
        for phase in phases.values() {
            self.metrics.jobs.get_or_create(&PhaseLabel { phase: phase.clone() }).inc();
        }
    }
}

#[tracing::instrument(skip_all, fields(job = %job.name_any(), namespace = job.namespace().unwrap_or_default()))]
pub async fn reconcile(job: Arc<TrainingJob>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let namespace = job.namespace().ok_or_else(|| OperatorError::MissingField(job.name_any(), "namespace"))?;
    let jobs: Api<TrainingJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let outcome = finalizer(&jobs, FINALIZER, job, |event| async {
        match event {
            finalizer::Event::Apply(job) => apply(&job, &ctx).await,
            finalizer::Event::Cleanup(job) => clean_up(&job, &ctx).await,
        }
    })
    .await
    .map_err(|e| match e {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
        // The finalizer's own API calls fail like any other, and are retried as such.
        finalizer::Error::AddFinalizer(e) | finalizer::Error::RemoveFinalizer(e) => OperatorError::Kube(e),
        other => OperatorError::Finalizer(other.to_string()),
    });
    ctx.metrics.reconcile_seconds.observe(started.elapsed().as_secs_f64());
    outcome
}

/// Permanent errors (an object that cannot be what it claims) wait for a change of the job;
/// API errors are retried with exponential backoff, per job.
pub fn error_policy(job: Arc<TrainingJob>, error: &OperatorError, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_errors.get_or_create(&CategoryLabel { category: error.category().into() }).inc();
    if error.is_permanent() {
        tracing::warn!(job = %job.name_any(), %error, "reconcile failed; waiting for the job to change");
        return Action::await_change();
    }
    let delay = ctx.backoff(&job);
    tracing::warn!(job = %job.name_any(), %error, retry_in_s = delay.as_secs(), "reconcile failed; retrying");
    Action::requeue(delay)
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// A delete that found the object gone (404) or no longer the one meant (409, its UID
/// precondition failed) has nothing left to do.
fn gone(error: &kube::Error) -> bool {
    matches!(classify(error), ApiClass::NotFound | ApiClass::Conflict)
}

/// A create or apply of one of the job's objects (`kind name`) that the API server refused,
/// said in the job's conditions; the caller stops creating. `Ok(true)`: worth retrying with
/// backoff (403: a quota or a policy may allow it later); `Ok(false)`: only a change helps
/// (invalid, or the name is someone else's object); an error when it was no refusal of the
/// object at all (the server or the network: the reconcile fails and is retried).
fn refusal(outcome: &mut Plan, job: &TrainingJob, kind: &str, name: &str, error: kube::Error) -> Result<bool> {
    match classify(&error) {
        ApiClass::Invalid => outcome.invalid(job, &api_message(&error)),
        ApiClass::Refused => {
            outcome.refused(job, &format!("{kind} {name}"), &api_message(&error));
            return Ok(true);
        }
        ApiClass::Conflict => outcome.conflict(job, &format!("{kind} {}/{name}", job.namespace().unwrap_or_default())),
        ApiClass::NotFound | ApiClass::Transient => return Err(error.into()),
    }
    Ok(false)
}

async fn apply(cached: &TrainingJob, ctx: &Context) -> Result<Action> {
    let namespace = cached.namespace().unwrap_or_default();
    let client = ctx.client.clone();
    // The controller's cache can lag behind our own last status write (the restart count,
    // conditions); planning from it would write the old status back. Reconciles of one job
    // never overlap, so a fresh read here sees everything the previous reconcile wrote.
    let jobs: Api<TrainingJob> = Api::namespaced(client.clone(), &namespace);
    let Some(job) = jobs.get_opt(&cached.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let job = &job;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let existing = pods.list(&ListParams::default().labels(&desired::selector(job, None))).await?.items;
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let service = services.get_opt(&desired::master_name(job)).await?;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &namespace);
    let budget = budgets.get_opt(&desired::master_name(job)).await?;
    let master = master_address(job, &existing).filter(|_| ctx.poll_masters && desired::operator_owns_secret(job));
    let token = desired::job_token(&ctx.options.operator_key, job.uid().as_deref().unwrap_or_default());
    let transport = match &master {
        Some(_) => desired::job_certificates(&ctx.options.operator_key, job)
            .and_then(|certs| certs.tls(linea_proto::tls::Role::Member))
            .map(linea_proto::tls::Transport::Tls)
            .inspect_err(|e| tracing::warn!(job = %job.name_any(), %e, "no certificate to call the master with"))
            .ok(),
        None => None,
    };
    let master_name = format!("{}.{}.svc", desired::master_name(job), namespace);
    let master = master.filter(|_| transport.is_some());
    let transport = transport.unwrap_or(linea_proto::tls::Transport::Plaintext);
    let access = master::Access { token: &token, transport: &transport, master_name: &master_name };
    let progress = match &master {
        Some(address) => master::progress(address, &access).await,
        None => None,
    };
    ctx.nodes.record(job, &existing);
    let leaving = nodes::leaving(&ctx.client, &existing).await?;
    let observed = Observed {
        pods: &existing,
        service: service.as_ref(),
        budget: budget.as_ref(),
        progress: progress.as_ref(),
        leaving_nodes: &leaving,
    };
    let plan = plan::plan(job, desired::build(job, &ctx.options), observed, Timestamp::now());
    let drain = plan.drain_workers.clone();
    let (action, refused) = carry_out(job, ctx, &pods, plan).await?;
    for name in &drain {
        let ip = existing.iter().find(|p| &p.name_any() == name).and_then(|p| p.status.as_ref()?.pod_ip.clone());
        match (&master, ip) {
            (Some(master), Some(ip)) => {
                let worker = format!("http://{ip}:{}", desired::WORKER_PORT);
                // Logged before the call: e2e/operator.sh measures a notice's latency to here.
                tracing::info!(job = %job.name_any(), pod = %name, "draining a worker through the master");
                let found = master::drain(master, &access, &worker).await;
                tracing::info!(job = %job.name_any(), pod = %name, found, "asked the master to drain a worker");
            }
            _ => tracing::warn!(job = %job.name_any(), pod = %name, "cannot reach the master to drain this worker"),
        }
    }
    if refused {
        return Ok(Action::requeue(ctx.backoff(job)));
    }
    ctx.succeeded(job);
    Ok(action)
}

/// `http://ip:port` of a running master pod.
fn master_address(job: &TrainingJob, pods: &[Pod]) -> Option<String> {
    let master = pods.iter().find(|p| p.name_any() == desired::master_name(job))?;
    let status = master.status.as_ref()?;
    (status.phase.as_deref() == Some("Running")).then_some(())?;
    Some(format!("http://{}:{MASTER_PORT}", status.pod_ip.as_ref()?))
}

/// Delete `name` only if it still is the object with `uid`.
fn delete_exactly(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: uid.map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
        ..Default::default()
    }
}

/// Carries the plan out; returns the action and whether the API server refused an object (the
/// caller then backs off).
async fn carry_out(job: &TrainingJob, ctx: &Context, pods: &Api<Pod>, plan: Plan) -> Result<(Action, bool)> {
    let Plan {
        mut status,
        secret,
        service,
        budget,
        pods: create,
        drain_workers: _,
        delete_pods,
        mut events,
        delete_job,
        requeue,
        now,
    } = plan;
    let namespace = job.namespace().unwrap_or_default();
    let jobs: Api<TrainingJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let key = job_key(job);
    if delete_job {
        tracing::info!(job = %key, "TTL after finish reached; deleting the job");
        jobs.delete(&job.name_any(), &DeleteParams::background()).await?;
        ctx.record(job, None);
        return Ok((Action::await_change(), false));
    }
    // What the creations found out goes back into the plan's status and events.
    let mut outcome = Plan::empty(std::mem::take(&mut status), std::mem::take(&mut events), requeue, now);
    let mut refused = false;
    let create_params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let stopped = 'create: {
        let mut touched = false;
        if let Some(secret) = secret {
            touched = true;
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
            // A generated name: the create cannot meet anyone else's Secret, and its response
            // is the only way the operator learns (and records) which Secret is the job's.
            match secrets.create(&create_params, &secret).await {
                Ok(created) => {
                    outcome.status.auth_secret_name = Some(created.name_any());
                    outcome.status.auth_secret_uid = created.uid();
                }
                Err(e) => {
                    refused = refusal(&mut outcome, job, "secret", &format!("{}*", desired::secret_prefix(job)), e)?;
                    break 'create true;
                }
            }
        }
        if let Some(service) = service {
            touched = true;
            let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
            match services.patch(&service.name_any(), &apply_params(), &Patch::Apply(&service)).await {
                Ok(_) => {}
                Err(e) => {
                    refused = refusal(&mut outcome, job, "service", &service.name_any(), e)?;
                    break 'create true;
                }
            }
        }
        if let Some(budget) = budget {
            touched = true;
            let budgets: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &namespace);
            match budgets.patch(&budget.name_any(), &apply_params(), &Patch::Apply(&budget)).await {
                Ok(_) => {}
                Err(e) => {
                    refused = refusal(&mut outcome, job, "poddisruptionbudget", &budget.name_any(), e)?;
                    break 'create true;
                }
            }
        }
        for pod in create {
            // Created, never applied: a pod of that name that is not ours is never adopted.
            match pods.create(&create_params, &pod).await {
                Ok(_) => {}
                // A name taken by someone else's pod, quota, admission policies: said in the
                // conditions (Created, Blocked); a refusal is retried with backoff.
                Err(e) => {
                    refused = refusal(&mut outcome, job, "pod", &pod.name_any(), e)?;
                    break 'create true;
                }
            }
        }
        if touched {
            outcome.resolved(job);
        }
        false
    };
    if stopped {
        tracing::info!(job = %key, "stopped creating the job's objects; see its conditions");
    }
    for doomed in delete_pods {
        match pods.delete(&doomed.name, &delete_exactly(doomed.uid)).await {
            Err(e) if !gone(&e) => return Err(e.into()),
            _ => {}
        }
    }
    record_decisions(job, ctx, &mut outcome).await;
    let status = serde_json::json!({
        "apiVersion": linea_crds::API_VERSION,
        "kind": linea_crds::KIND,
        "status": outcome.status,
    });
    jobs.patch_status(&job.name_any(), &apply_params(), &Patch::Apply(&status)).await?;
    let reference = job.object_ref(&());
    for event in &outcome.events {
        let event = KubeEvent {
            type_: if event.warning { EventType::Warning } else { EventType::Normal },
            reason: event.reason.into(),
            note: Some(crate::plan::event_note(&event.note).into_owned()),
            action: "Reconcile".into(),
            secondary: None,
        };
        // A recorder per event: one shared recorder folds events of the same reason into a
        // series and keeps the first note, so "restart 2 of 3" would still read "restart 1".
        let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::warn!(job = %key, %e, "could not record an event");
        }
    }
    ctx.record(job, Some(&outcome.status));
    let action = if outcome.status.is_finished() && !job.status.as_ref().is_some_and(|s| s.is_finished()) {
        // Finished just now: the next pass cleans up and starts the TTL clock.
        Action::requeue(Duration::from_secs(1))
    } else {
        Action::requeue(outcome.requeue)
    };
    Ok((action, refused))
}

/// Records the events of the master's elastic decisions, each under the name its decision
/// fixes ([`elastic::event_name`]), before the status that lists them as reported is
/// written. A name that exists already (this operator stopped after the event and before the
/// status, or an old leader got there first) is that decision's event: not repeated. One that
/// cannot be recorded is taken out of the status with every later one, so the next pass
/// reports them again, in order: a decision is neither repeated nor dropped.
async fn record_decisions(job: &TrainingJob, ctx: &Context, outcome: &mut Plan) {
    let (decisions, others): (Vec<plan::Event>, _) =
        std::mem::take(&mut outcome.events).into_iter().partition(|e| e.decision.is_some());
    outcome.events = others;
    let events: Api<K8sEvent> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    for event in &decisions {
        let Some(number) = event.decision else { continue };
        let recorded = K8sEvent {
            metadata: ObjectMeta {
                name: Some(elastic::event_name(job, number)),
                namespace: job.namespace(),
                ..Default::default()
            },
            action: Some("Reconcile".into()),
            reason: Some(event.reason.into()),
            note: Some(event.note.clone()),
            type_: Some(if event.warning { "Warning" } else { "Normal" }.into()),
            event_time: Some(MicroTime(Timestamp::now())),
            regarding: Some(job.object_ref(&())),
            reporting_controller: Some(ctx.reporter.controller.clone()),
            reporting_instance: Some(ctx.reporter.instance.clone().unwrap_or_else(|| ctx.reporter.controller.clone())),
            ..Default::default()
        };
        match events.create(&params, &recorded).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                tracing::warn!(job = %job_key(job), decision = number, %e, "could not record a scale-in event; retried");
                if let Some(elastic) = outcome.status.elastic.as_mut() {
                    elastic.decisions.retain(|d| d.number < number);
                }
                return;
            }
        }
    }
}

/// Deletes the object named like the job's master (its Service, its PodDisruptionBudget) if
/// the job owns it, by UID; leaves anyone else's alone.
async fn delete_if_owned<K>(api: &Api<K>, job: &TrainingJob) -> Result<()>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    if let Some(object) = api.get_opt(&desired::master_name(job)).await?
        && desired::owned_by(object.meta(), job)
        && let Err(e) = api.delete(&object.name_any(), &delete_exactly(object.uid())).await
        && !gone(&e)
    {
        return Err(e.into());
    }
    Ok(())
}

/// Deletes everything the job made before the finalizer lets it go. Owner references
/// would let the garbage collector do it too; doing it here makes deletion prompt and
/// does not depend on a garbage collector running.
async fn clean_up(job: &TrainingJob, ctx: &Context) -> Result<Action> {
    let namespace = job.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = ListParams::default().labels(&desired::selector(job, None));
    // One delete per pod (the operator's role has no deletecollection), and only the job's own.
    for pod in pods.list(&selector).await?.items.into_iter().filter(|p| desired::owned_by(&p.metadata, job)) {
        if let Err(e) = pods.delete(&pod.name_any(), &delete_exactly(pod.uid())).await
            && !gone(&e)
        {
            return Err(e.into());
        }
    }
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    delete_if_owned(&services, job).await?;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &namespace);
    delete_if_owned(&budgets, job).await?;
    // The Secret the operator created, by the name and UID it recorded; any other Secret is
    // left alone (one it created but could not record is owned by the job, so the garbage
    // collector removes it).
    let secret_uid = job.status.as_ref().and_then(|s| s.auth_secret_uid.clone());
    if desired::operator_owns_secret(job)
        && let (Some(name), Some(uid)) = (desired::secret_name(job), secret_uid)
    {
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
        if let Err(e) = secrets.delete(&name, &delete_exactly(Some(uid))).await
            && !gone(&e)
        {
            return Err(e.into());
        }
    }
    ctx.record(job, None);
    ctx.nodes.forget(job);
    ctx.succeeded(job);
    tracing::info!(job = %job.name_any(), "cleaned up");
    Ok(Action::await_change())
}
