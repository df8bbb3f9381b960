//! `linea-operator`: watches TrainingJobs, the Pods they own and the Nodes, and reconciles
//! while it holds the leader Lease (other replicas stand by).

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::runtime::controller::{Config, Controller};
use kube::runtime::watcher;
use kube::{Api, Client};
use linea_crds::TrainingJob;
use linea_operator::desired::{BuildOptions, Role};
use linea_operator::election::Timing;
use linea_operator::lease::{self, Elector, Ended};
use linea_operator::metrics::{self, Metrics};
use linea_operator::reconcile::{self, Context};
use linea_operator::resources::JobResources;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "linea-operator", version, about = "The linea TrainingJob operator")]
struct Args {
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_address: String,
    /// Image of job pods whose spec names none (the chart passes the operator's own).
    #[arg(long, env = "LINEA_DEFAULT_IMAGE")]
    default_image: String,
    /// Requests and limits of job pods whose TrainingJob names none, as JSON:
    /// `{"master": {"requests": {"cpu": "250m"}, "limits": {...}}, "worker": {...}}` (the
    /// chart passes jobDefaults.resources). Empty: none.
    #[arg(long, env = linea_operator::resources::ENV, default_value = "")]
    job_default_resources: String,
    /// Key of the per-job tokens (the chart mounts it from a Secret).
    #[arg(long, env = "LINEA_OPERATOR_KEY", hide_env_values = true)]
    operator_key: String,
    /// Watch only this namespace (default: all).
    #[arg(long, env = "LINEA_WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Do not call masters' status RPC (when the operator cannot reach pod IPs).
    #[arg(long)]
    no_master_polling: bool,
    /// Reconcile without holding the Lease. Only for a single replica: two would
    /// reconcile the same jobs at once.
    #[arg(long)]
    no_leader_election: bool,
    /// The Lease (coordination.k8s.io) whose holder is the one replica that reconciles.
    #[arg(long, default_value = "linea-operator")]
    lease_name: String,
    /// Namespace of that Lease (the chart passes the operator's own); default: the
    /// kubeconfig's namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Seconds a Lease that stopped being renewed still belongs to its holder: the longest a
    /// standby waits after the leader died without releasing it.
    #[arg(long, default_value_t = 15)]
    lease_duration: u64,
    /// Seconds the leader keeps leading without renewing; shorter than --lease-duration.
    #[arg(long, default_value_t = 10)]
    renew_deadline: u64,
    /// Seconds between renewals, and between a standby's looks at the Lease.
    #[arg(long, default_value_t = 2)]
    retry_period: u64,
}

/// Resolves once SIGTERM or SIGINT came, however long before it is awaited: one listener
/// for the whole life of the process, so a signal between standing by and leading is kept.
fn stop_requested() -> impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + Sync>> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop_signal().await;
        let _ = tx.send(true);
    });
    move || {
        let mut rx = rx.clone();
        Box::pin(async move {
            let _ = rx.wait_for(|stopped| *stopped).await;
        })
    }
}

/// SIGTERM or SIGINT.
async fn stop_signal() {
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(e) => {
            tracing::warn!(%e, "cannot listen for SIGTERM");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
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
    // Checked before anything else: a malformed default stops the operator here, with the
    // field and value named, instead of reaching the API server in every pod.
    let resources = match JobResources::parse(&args.job_default_resources) {
        Ok(resources) => resources,
        Err(e) => {
            eprintln!("linea-operator: {e}");
            std::process::exit(2);
        }
    };
    if resources.of(Role::Worker).is_empty() && resources.of(Role::Master).is_empty() {
        tracing::warn!("no default resources: pods of jobs that name none have no requests or limits");
    }
    let timing = Timing {
        lease_duration: Duration::from_secs(args.lease_duration),
        renew_deadline: Duration::from_secs(args.renew_deadline),
        retry_period: Duration::from_secs(args.retry_period),
    }
    .validated()?;
    let client = Client::try_default().await?;
    let metrics = Arc::new(Metrics::default());
    tokio::spawn(metrics::serve(args.metrics_address.clone(), metrics.clone()));
    let stopped = stop_requested();
    let mut elector = None;
    if !args.no_leader_election {
        let namespace = args.lease_namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
        let mut candidate = Elector::new(client.clone(), &namespace, &args.lease_name, lease::identity(), timing);
        tracing::info!(identity = candidate.identity(), lease = %format!("{namespace}/{}", args.lease_name), "standing by until this replica holds the Lease");
        tokio::select! {
            () = candidate.acquire() => {}
            () = stopped() => {
                tracing::info!("stopped while standing by");
                return Ok(());
            }
        }
        elector = Some(candidate);
    } else {
        tracing::warn!("leader election is off: run exactly one replica");
    }
    metrics.leader.set(1);
    let options =
        BuildOptions { default_image: args.default_image, operator_key: args.operator_key.into_bytes(), resources };
    let context = Arc::new(Context::new(client.clone(), options, metrics.clone(), !args.no_master_polling));
    let index = context.nodes.clone();
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
    let nodes: Api<Node> = Api::all(context.client.clone());
    tracing::info!("linea-operator starting");
    let controller = Controller::new(jobs, watcher::Config::default())
        // As `owns`, and each pod's node goes into the index as soon as it is placed.
        .watches(pods, owned.clone(), {
            let index = index.clone();
            move |pod| index.saw(&pod)
        })
        .owns(services, owned)
        // A termination notice on a node reconciles the jobs with pods there at once.
        .watches(nodes, watcher::Config::default(), move |node| index.to_wake(&node))
        .with_config(Config::default().concurrency(8))
        // SIGTERM or SIGINT: no new reconciles, the running ones (bounded: at most
        // MAX_CREATES_PER_RECONCILE pods each) finish, then the Lease is given up.
        .graceful_shutdown_on(stopped())
        .run(reconcile::reconcile, reconcile::error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(%e, "reconcile did not complete");
            }
        });
    let Some(elector) = elector else {
        controller.await;
        tracing::info!("linea-operator stopped");
        return Ok(());
    };
    // The Lease is renewed beside the controller. Lost, the process ends at once (in-flight
    // reconciles are dropped) so that only the new leader reconciles; on SIGTERM the
    // controller finishes its running reconciles first, then the Lease is given up.
    let (stopped, stop) = tokio::sync::oneshot::channel::<()>();
    let mut leading = tokio::spawn(elector.lead(async move {
        let _ = stop.await;
    }));
    tokio::select! {
        () = controller => {
            let _ = stopped.send(());
            let ended = leading.await?;
            metrics.leader.set(0);
            tracing::info!(?ended, "linea-operator stopped");
            Ok(())
        }
        ended = &mut leading => {
            metrics.leader.set(0);
            let why = match ended? { Ended::Lost(why) => why, Ended::Released => "released".into() };
            tracing::error!(%why, "lost the Lease; exiting so that only the new leader reconciles");
            Err(format!("lost the leader Lease: {why}").into())
        }
    }
}
