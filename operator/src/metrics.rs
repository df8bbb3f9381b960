//! Prometheus metrics and health endpoints: `/metrics`, `/healthz`, `/readyz`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabel {
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

pub struct Metrics {
    pub reconcile_seconds: Histogram,
    pub reconcile_errors: Family<CategoryLabel, Counter>,
    pub jobs: Family<PhaseLabel, Gauge>,
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
        Self { reconcile_seconds, reconcile_errors, jobs, registry }
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
