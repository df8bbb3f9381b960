//! Progress from a job's master, over its status RPC (linea-proto), with the job's token,
//! over TLS with the job's member certificate (which the operator derives, as it derives the
//! token: it reads no Secret). It calls the master pod's IP and checks that the certificate
//! there names the master Service. A master that does not answer in time simply has no
//! progress to report.

use crate::plan::{MasterDecision, MasterProgress};
use linea_proto::auth::JobSecret;
use linea_proto::client::{Expect, MasterClient, Timeouts};
use linea_proto::tls::Transport;
use linea_proto::v1 as proto;
use std::time::Duration;

/// Short: a reconcile must not wait long on a master that is starting or gone.
const TIMEOUTS: Timeouts = Timeouts { connect: Duration::from_secs(2), call: Some(Duration::from_secs(3)) };

/// How to reach one job's master: its token, its TLS identity and the name its master's
/// certificate must carry.
pub struct Access<'a> {
    pub token: &'a str,
    pub transport: &'a Transport,
    pub master_name: &'a str,
}

async fn connect(address: &str, access: &Access<'_>) -> Option<MasterClient> {
    let secret =
        JobSecret::new(access.token).inspect_err(|e| tracing::warn!(address, %e, "unusable job token")).ok()?;
    let expect = Expect::Name(access.master_name);
    let client = linea_proto::client::connect_master(address, &secret, access.transport, expect, TIMEOUTS).await;
    client.inspect_err(|e| tracing::debug!(address, %e, "master unreachable")).ok()
}

/// Asks the master to drain the worker at `worker` (its peer address); true if it knew it.
pub async fn drain(address: &str, access: &Access<'_>, worker: &str) -> bool {
    let Some(mut client) = connect(address, access).await else { return false };
    let reply = client.drain(proto::DrainRequest { worker: worker.to_string() }).await;
    reply.inspect_err(|e| tracing::warn!(address, worker, %e, "drain failed")).is_ok_and(|r| r.into_inner().found)
}

/// Asks the master at `address` (`http://ip:port`) for its status.
pub async fn progress(address: &str, access: &Access<'_>) -> Option<MasterProgress> {
    let mut client = connect(address, access).await?;
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
        scaling_decisions: s
            .scaling_decisions
            .into_iter()
            .map(|d| MasterDecision {
                number: d.number,
                epoch: d.epoch,
                from: d.from_workers,
                to: d.to_workers,
                released_workers: d.released_workers,
                reason: d.reason,
            })
            .collect(),
    })
}
