//! Progress from a job's master, over its status RPC (linea-proto), with the job's token.
//! A master that does not answer in time simply has no progress to report.

use crate::plan::MasterProgress;
use linea_proto::auth::JobSecret;
use linea_proto::client::{MasterClient, Timeouts};
use linea_proto::v1 as proto;
use std::time::Duration;

/// Short: a reconcile must not wait long on a master that is starting or gone.
const TIMEOUTS: Timeouts = Timeouts { connect: Duration::from_secs(2), call: Some(Duration::from_secs(3)) };

async fn connect(address: &str, token: &str) -> Option<MasterClient> {
    let secret = JobSecret::new(token).inspect_err(|e| tracing::warn!(address, %e, "unusable job token")).ok()?;
    let client = linea_proto::client::connect_master(address, &secret, TIMEOUTS).await;
    client.inspect_err(|e| tracing::debug!(address, %e, "master unreachable")).ok()
}

/// Asks the master to drain the worker at `worker` (its peer address); true if it knew it.
pub async fn drain(address: &str, token: &str, worker: &str) -> bool {
    let Some(mut client) = connect(address, token).await else { return false };
    let reply = client.drain(proto::DrainRequest { worker: worker.to_string() }).await;
    reply.inspect_err(|e| tracing::warn!(address, worker, %e, "drain failed")).is_ok_and(|r| r.into_inner().found)
}

/// Asks the master at `address` (`http://ip:port`) for its status.
pub async fn progress(address: &str, token: &str) -> Option<MasterProgress> {
    let mut client = connect(address, token).await?;
    let reply = client.status(proto::StatusRequest {}).await;
    let s = reply.inspect_err(|e| tracing::debug!(address, %e, "master status failed")).ok()?.into_inner();
    Some(MasterProgress {
        epoch: s.epoch.into(),
        iteration: s.iteration as i64,
        objective: s.objective.is_finite().then_some(s.objective),
        duality_gap: s.gap_relative,
        examples_per_second: s.examples_per_second,
        workers_active: s.workers_active as i32,
        workers_draining: s.workers_draining as i32,
        desired_workers: s.desired_workers.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
        released_workers: s.released_workers,
        scaling_reason: Some(s.scaling_reason).filter(|r| !r.is_empty()),
    })
}
