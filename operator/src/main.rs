//! `linea-operator`: watches TrainingJobs and the Pods they own, and reconciles.

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::controller::{Config, Controller};
use kube::runtime::watcher;
use kube::{Api, Client};
use linea_crds::TrainingJob;
use linea_operator::desired::BuildOptions;
use linea_operator::metrics::{self, Metrics};
use linea_operator::reconcile::{self, Context};
use std::io::IsTerminal;
use std::sync::Arc;

#[derive(Parser)]
#[command(name = "linea-operator", version, about = "The linea TrainingJob operator")]
struct Args {
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_address: String,
    /// Image of job pods whose spec names none (the chart passes the operator's own).
    #[arg(long, env = "LINEA_DEFAULT_IMAGE")]
    default_image: String,
    /// Key of the per-job tokens (the chart mounts it from a Secret).
    #[arg(long, env = "LINEA_OPERATOR_KEY", hide_env_values = true)]
    operator_key: String,
    /// Watch only this namespace (default: all).
    #[arg(long, env = "LINEA_WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Do not call masters' status RPC (when the operator cannot reach pod IPs).
    #[arg(long)]
    no_master_polling: bool,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into()),
        )
        // Colour codes only for a person at a terminal, never in collected logs.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let args = Args::parse();
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| "a TLS crypto provider was installed twice")?;
    if args.operator_key.len() < 16 {
        return Err("the operator key must be at least 16 bytes".into());
    }
    let client = Client::try_default().await?;
    let metrics = Arc::new(Metrics::default());
    tokio::spawn(metrics::serve(args.metrics_address.clone(), metrics.clone()));
    let options = BuildOptions { default_image: args.default_image, operator_key: args.operator_key.into_bytes() };
    let context = Arc::new(Context::new(client.clone(), options, metrics, !args.no_master_polling));
    let (jobs, pods, services) = match &args.namespace {
        Some(ns) => (
            Api::<TrainingJob>::namespaced(client.clone(), ns),
            Api::<Pod>::namespaced(client.clone(), ns),
            Api::<Service>::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone()), Api::all(client)),
    };
    let owned =
        watcher::Config::default().labels(&format!("{}=linea-operator", linea_operator::desired::LABEL_MANAGED_BY));
    tracing::info!("linea-operator starting");
    Controller::new(jobs, watcher::Config::default())
        .owns(pods, owned.clone())
        .owns(services, owned)
        .with_config(Config::default().concurrency(8))
        // SIGTERM or SIGINT: no new reconciles, the running ones (bounded: at most
        // MAX_CREATES_PER_RECONCILE pods each) finish, then the process exits.
        .shutdown_on_signal()
        .run(reconcile::reconcile, reconcile::error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(%e, "reconcile did not complete");
            }
        })
        .await;
    tracing::info!("linea-operator stopped");
    Ok(())
}
