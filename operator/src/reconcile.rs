//! The edges of reconcile: read the job's pods (and the master's progress), ask [`plan`]
//! what to do, and do it — server-side apply with one field manager, deletes, the status
//! subresource, events. A finalizer makes deletion wait until the job's objects are gone.

use crate::desired::{self, BuildOptions, MASTER_PORT};
use crate::error::{OperatorError, Result};
use crate::metrics::{CategoryLabel, JobLabel, Metrics, PhaseLabel};
use crate::plan::{self, Plan};
use crate::{FIELD_MANAGER, FINALIZER, master};
use k8s_openapi::api::core::v1::{Node, Pod, Secret, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
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
    recorder: Recorder,
    poll_masters: bool,
    /// Each job's phase as last reconciled, for the jobs-by-phase gauge.
    phases: Mutex<HashMap<JobLabel, String>>,
}

impl Context {
    pub fn new(client: Client, options: BuildOptions, metrics: Arc<Metrics>, poll_masters: bool) -> Self {
        let reporter = Reporter { controller: FIELD_MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
        let recorder = Recorder::new(client.clone(), reporter);
        Self { client, options, metrics, recorder, poll_masters, phases: Mutex::new(HashMap::new()) }
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
        other => OperatorError::Finalizer(other.to_string()),
    });
    ctx.metrics.reconcile_seconds.observe(started.elapsed().as_secs_f64());
    outcome
}

pub fn error_policy(job: Arc<TrainingJob>, error: &OperatorError, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_errors.get_or_create(&CategoryLabel { category: error.category().into() }).inc();
    tracing::warn!(job = %job.name_any(), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

async fn server_side_apply<K>(api: &Api<K>, object: &K) -> Result<()>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(&object.name_any(), &apply_params(), &Patch::Apply(object)).await?;
    Ok(())
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == code)
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
    let master = master_address(job, &existing).filter(|_| ctx.poll_masters && desired::operator_owns_secret(job));
    let token = desired::job_token(&ctx.options.operator_key, job.uid().as_deref().unwrap_or_default());
    let progress = match &master {
        Some(address) => master::progress(address, &token).await,
        None => None,
    };
    let leaving = leaving_nodes(&ctx.client, &existing).await?;
    let plan = plan::plan(job, &existing, progress.as_ref(), &leaving, Timestamp::now());
    carry_out(job, ctx, &pods, &plan).await?;
    for name in &plan.drain_workers {
        let ip = existing.iter().find(|p| &p.name_any() == name).and_then(|p| p.status.as_ref()?.pod_ip.clone());
        match (&master, ip) {
            (Some(master), Some(ip)) => {
                let worker = format!("http://{ip}:{}", desired::WORKER_PORT);
                let found = master::drain(master, &token, &worker).await;
                tracing::info!(job = %job.name_any(), pod = %name, found, "asked the master to drain a worker");
            }
            _ => tracing::warn!(job = %job.name_any(), pod = %name, "cannot reach the master to drain this worker"),
        }
    }
    Ok(if plan.delete_job { Action::await_change() } else { Action::requeue(plan.requeue) })
}

/// Nodes of these pods that are about to go ([`plan::node_terminating`]).
async fn leaving_nodes(client: &Client, pods: &[Pod]) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut names: Vec<&String> = pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.as_ref()).collect();
    names.sort();
    names.dedup();
    let mut leaving = Vec::new();
    for name in names {
        if nodes.get_opt(name).await?.is_some_and(|n| plan::node_terminating(&n)) {
            leaving.push(name.clone());
        }
    }
    Ok(leaving)
}

/// `http://ip:port` of a running master pod.
fn master_address(job: &TrainingJob, pods: &[Pod]) -> Option<String> {
    let master = pods.iter().find(|p| p.name_any() == desired::master_name(job))?;
    let status = master.status.as_ref()?;
    (status.phase.as_deref() == Some("Running")).then_some(())?;
    Some(format!("http://{}:{MASTER_PORT}", status.pod_ip.as_ref()?))
}

async fn carry_out(job: &TrainingJob, ctx: &Context, pods: &Api<Pod>, plan: &Plan) -> Result<()> {
    let namespace = job.namespace().unwrap_or_default();
    let jobs: Api<TrainingJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let key = format!("{namespace}/{}", job.name_any());
    if plan.delete_job {
        tracing::info!(job = %key, "TTL after finish reached; deleting the job");
        jobs.delete(&job.name_any(), &DeleteParams::background()).await?;
        ctx.record(job, None);
        return Ok(());
    }
    if !plan.status.is_finished() {
        if let Some(secret) = desired::job_secret(job, &ctx.options) {
            // Created once and never read back: the operator can recompute the token.
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
            match secrets
                .create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &secret)
                .await
            {
                Err(e) if !is_status(&e, 409) => return Err(e.into()),
                _ => {}
            }
        }
        let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
        server_side_apply(&services, &desired::master_service(job)).await?;
        if plan.create_master {
            server_side_apply(pods, &desired::master_pod(job, &ctx.options)).await?;
        }
        for &index in &plan.create_workers {
            server_side_apply(pods, &desired::worker_pod(job, index, &ctx.options)).await?;
        }
    }
    for name in &plan.delete_pods {
        match pods.delete(name, &DeleteParams::default()).await {
            Err(e) if !is_status(&e, 404) => return Err(e.into()),
            _ => {}
        }
    }
    let status = serde_json::json!({
        "apiVersion": linea_crds::API_VERSION,
        "kind": linea_crds::KIND,
        "status": plan.status,
    });
    jobs.patch_status(&job.name_any(), &apply_params(), &Patch::Apply(&status)).await?;
    let reference = job.object_ref(&());
    for event in &plan.events {
        let event = Event {
            type_: if event.warning { EventType::Warning } else { EventType::Normal },
            reason: event.reason.into(),
            note: Some(event.note.clone()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(job = %key, %e, "could not record an event");
        }
    }
    ctx.record(job, Some(&plan.status));
    Ok(())
}

/// Deletes everything the job made before the finalizer lets it go. Owner references
/// would let the garbage collector do it too; doing it here makes deletion prompt and
/// does not depend on a garbage collector running.
async fn clean_up(job: &TrainingJob, ctx: &Context) -> Result<Action> {
    let namespace = job.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = ListParams::default().labels(&desired::selector(job, None));
    // One delete per pod: the operator's role has no deletecollection.
    for pod in pods.list(&selector).await?.items {
        if let Err(e) = pods.delete(&pod.name_any(), &DeleteParams::default()).await
            && !is_status(&e, 404)
        {
            return Err(e.into());
        }
    }
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Err(e) = services.delete(&desired::master_name(job), &DeleteParams::default()).await
        && !is_status(&e, 404)
    {
        return Err(e.into());
    }
    if desired::operator_owns_secret(job) {
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
        if let Err(e) = secrets.delete(&desired::secret_name(job), &DeleteParams::default()).await
            && !is_status(&e, 404)
        {
            return Err(e.into());
        }
    }
    ctx.record(job, None);
    tracing::info!(job = %job.name_any(), "cleaned up");
    Ok(Action::await_change())
}
