//! Calls to a running master from the command line: `linea status`, `linea drain`.

use super::auth::JobSecret;
use super::proto;
use crate::error::{LineaError, Result};
use linea_proto::client::{Expect, MasterClient, Timeouts};
use linea_proto::tls::Transport;

/// Whom to expect at `master`: the name given (`--master-name`, for an IP or a forwarded
/// port), else the address's host.
pub fn expect_master(name: Option<&str>) -> Expect<'_> {
    name.map_or(Expect::Host, Expect::Name)
}

async fn connect(master: &str, name: Option<&str>, secret: &JobSecret, transport: &Transport) -> Result<MasterClient> {
    Ok(linea_proto::client::connect_master(master, secret, transport, expect_master(name), Timeouts::COMMAND).await?)
}

fn block_on<T>(work: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LineaError::io("tokio runtime"))?
        .block_on(work)
}

pub fn status(
    master: &str,
    name: Option<&str>,
    secret: &JobSecret,
    transport: &Transport,
) -> Result<proto::StatusReply> {
    block_on(async {
        let mut client = connect(master, name, secret, transport).await?;
        let reply = client.status(proto::StatusRequest {}).await.map_err(|s| super::rpc_error(master, &s))?;
        Ok(reply.into_inner())
    })
}

pub fn drain(
    master: &str,
    name: Option<&str>,
    secret: &JobSecret,
    transport: &Transport,
    worker: &str,
) -> Result<bool> {
    block_on(async {
        let mut client = connect(master, name, secret, transport).await?;
        let request = proto::DrainRequest { worker: worker.to_string() };
        let reply = client.drain(request).await.map_err(|s| super::rpc_error(master, &s))?;
        Ok(reply.into_inner().found)
    })
}

pub fn status_json(s: &proto::StatusReply) -> serde_json::Value {
    let workers: Vec<serde_json::Value> = s
        .workers
        .iter()
        .map(|w| serde_json::json!({"id": w.worker_id, "address": w.address, "draining": w.draining, "shards": w.shards}))
        .collect();
    let decisions: Vec<serde_json::Value> = s
        .scaling_decisions
        .iter()
        .map(|d| {
            serde_json::json!({"number": d.number, "epoch": d.epoch, "from": d.from_workers, "to": d.to_workers,
                "released": d.released_workers, "reason": d.reason})
        })
        .collect();
    serde_json::json!({
        "phase": s.phase,
        "epoch": s.epoch,
        "max_epochs": s.max_epochs,
        "iteration": s.iteration,
        "objective": if s.objective.is_finite() { Some(s.objective) } else { None },
        "gap_absolute": s.gap_absolute,
        "gap_relative": s.gap_relative,
        "examples_per_second": s.examples_per_second,
        "workers_active": s.workers_active,
        "workers_draining": s.workers_draining,
        "workers_lost": s.workers_lost,
        "workers_desired": s.desired_workers,
        "released_workers": s.released_workers,
        "scaling_decisions": decisions,
        "items_completed": s.items_completed,
        "model": s.model,
        "error": s.error,
        "workers": workers,
    })
}
