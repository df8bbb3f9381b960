//! Prometheus metrics and health endpoints: `/metrics`, `/healthz`, `/readyz`.

use linea_crds::TrainingJobStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabel {
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

/// One TrainingJob, for its progress series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabel {
    pub namespace: String,
    pub name: String,
}

/// A job's progress as the operator last saw it (from the master's status RPC), one series
/// per job, removed when the job is deleted: a dashboard needs no access to the job's pods.
#[derive(Default)]
pub struct JobProgress {
    pub epoch: Family<JobLabel, Gauge>,
    pub objective: Family<JobLabel, Gauge<f64, AtomicU64>>,
    pub examples_per_second: Family<JobLabel, Gauge<f64, AtomicU64>>,
    pub workers_desired: Family<JobLabel, Gauge>,
    pub workers_ready: Family<JobLabel, Gauge>,
    pub workers_draining: Family<JobLabel, Gauge>,
    pub restarts: Family<JobLabel, Gauge>,
}

impl JobProgress {
    fn register(&self, registry: &mut Registry) {
        let job = registry.sub_registry_with_prefix("job");
        job.register("epoch", "Epochs the job's master has completed", self.epoch.clone());
        job.register("objective", "Regularized training objective after the last epoch", self.objective.clone());
        job.register("examples_per_second", "Training throughput", self.examples_per_second.clone());
        job.register("workers_desired", "Workers the operator runs towards", self.workers_desired.clone());
        job.register("workers_ready", "Workers connected to the master", self.workers_ready.clone());
        job.register("workers_draining", "Workers handing their shards over", self.workers_draining.clone());
        job.register("master_restarts", "Master failures counted against backoffLimit", self.restarts.clone());
    }

    /// Sets the job's series from its status.
    pub fn record(&self, job: &JobLabel, status: &TrainingJobStatus) {
        self.restarts.get_or_create(job).set(status.restarts.into());
        if let Some(w) = &status.workers {
            self.workers_desired.get_or_create(job).set(w.desired.into());
            self.workers_ready.get_or_create(job).set(w.ready.into());
            self.workers_draining.get_or_create(job).set(w.draining.into());
        }
        if let Some(p) = &status.progress {
            self.epoch.get_or_create(job).set(p.epoch);
            if let Some(objective) = p.objective {
                self.objective.get_or_create(job).set(objective);
            }
            if let Some(rate) = p.examples_per_second {
                self.examples_per_second.get_or_create(job).set(rate);
            }
        }
    }

    /// Drops the job's series (the job is gone).
    pub fn forget(&self, job: &JobLabel) {
        self.epoch.remove(job);
        self.objective.remove(job);
        self.examples_per_second.remove(job);
        self.workers_desired.remove(job);
        self.workers_ready.remove(job);
        self.workers_draining.remove(job);
        self.restarts.remove(job);
    }
}

pub struct Metrics {
    pub reconcile_seconds: Histogram,
    pub reconcile_errors: Family<CategoryLabel, Counter>,
    pub jobs: Family<PhaseLabel, Gauge>,
    pub progress: JobProgress,
    /// 1 while this replica holds the Lease and reconciles, 0 while it stands by.
    pub leader: Gauge,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("linea_operator");
        let reconcile_seconds = Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]);
        let reconcile_errors = Family::<CategoryLabel, Counter>::default();
        let jobs = Family::<PhaseLabel, Gauge>::default();
        registry.register("reconcile_duration_seconds", "Time of one reconcile", reconcile_seconds.clone());
        registry.register("reconcile_errors", "Failed reconciles by error category", reconcile_errors.clone());
        registry.register("trainingjobs", "TrainingJobs by phase, as last reconciled", jobs.clone());
        let progress = JobProgress::default();
        progress.register(&mut registry);
        let leader = Gauge::default();
        registry.register("leader", "1 while this replica holds the Lease and reconciles", leader.clone());
        Self { reconcile_seconds, reconcile_errors, jobs, progress, leader, registry }
    }
}

impl Metrics {
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a String");
        text
    }
}

/// Serves the endpoints until the process ends.
pub async fn serve(address: String, metrics: Arc<Metrics>) -> std::io::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/metrics", get(move || async move { metrics.render() }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(&address).await?;
    tracing::info!(%address, "metrics and health endpoints");
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use linea_crds::{Progress, WorkerStatus};

    #[test]
    fn a_jobs_progress_is_exported_until_it_is_forgotten() {
        let metrics = Metrics::default();
        let job = JobLabel { namespace: "ml".into(), name: "ads".into() };
        let status = TrainingJobStatus {
            workers: Some(WorkerStatus { desired: 3, ready: 2, ..Default::default() }),
            progress: Some(Progress { epoch: 7, objective: Some(10546.5), ..Default::default() }),
            ..Default::default()
        };
        metrics.progress.record(&job, &status);
        let text = metrics.render();
        for line in [
            r#"linea_operator_job_epoch{namespace="ml",name="ads"} 7"#,
            r#"linea_operator_job_objective{namespace="ml",name="ads"} 10546.5"#,
            r#"linea_operator_job_workers_desired{namespace="ml",name="ads"} 3"#,
            r#"linea_operator_job_workers_ready{namespace="ml",name="ads"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        metrics.progress.forget(&job);
        assert!(!metrics.render().contains(r#"name="ads""#));
    }
}
