//! Progress from a job's master, over its status RPC (worker/proto/linea.proto), with the
//! job's token. A master that does not answer in time simply has no progress to report.

use crate::plan::MasterProgress;
use std::time::Duration;
use tonic::metadata::MetadataValue;

pub mod proto {
    tonic::include_proto!("linea.v1");
}

type Client = proto::master_client::MasterClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send + Sync>,
    >,
>;

async fn connect(address: &str, token: &str) -> Option<Client> {
    let endpoint = tonic::transport::Endpoint::from_shared(address.to_string()).ok()?;
    let channel = endpoint.connect_timeout(Duration::from_secs(2)).timeout(Duration::from_secs(3)).connect().await;
    let channel = channel.inspect_err(|e| tracing::debug!(address, %e, "master unreachable")).ok()?;
    let bearer: MetadataValue<_> = format!("Bearer {token}").parse().ok()?;
    let attach: Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send + Sync> =
        Box::new(move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", bearer.clone());
            Ok(r)
        });
    Some(proto::master_client::MasterClient::with_interceptor(channel, attach))
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
    })
}
