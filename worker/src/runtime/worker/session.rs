//! A worker's life with its master: connect (retrying while the master is away), join,
//! run items until released; SIGTERM or a Drain makes it ask for no more work.

use super::WorkerCore;
use crate::error::{LineaError, Result};
use crate::runtime::proto::{self, master_message, worker_message};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Status;

/// How a session with the master ended.
enum SessionEnd {
    Released,
    /// The master refused this worker (wrong secret): retrying cannot help.
    Refused(LineaError),
    /// The connection failed or dropped; `joined` if the master had taken the worker in.
    Lost {
        error: LineaError,
        joined: bool,
    },
}

pub(super) async fn serve(core: Arc<WorkerCore>, listener: tokio::net::TcpListener) -> Result<()> {
    let peer = linea_proto::server::peer(core.clone(), &core.options.secret);
    let mut builder = linea_proto::server::builder(&core.options.transport)?;
    tokio::spawn(builder.add_service(peer).serve_with_incoming(linea_proto::server::incoming(listener)));
    let terminate = Arc::new(tokio::sync::Notify::new());
    spawn_signal_watch(terminate.clone());
    tracing::info!(id = %core.id, address = %core.address, master = %core.options.master, "worker starting");
    let mut last_contact = Instant::now();
    let mut delay = Duration::from_millis(50);
    let mut drain_started: Option<Instant> = None;
    loop {
        match session(&core, &terminate, &mut drain_started).await {
            SessionEnd::Released => {
                tracing::info!(id = %core.id, "released by the master");
                return Ok(());
            }
            SessionEnd::Refused(e) => return Err(e),
            SessionEnd::Lost { error: e, joined } => {
                if joined {
                    tracing::info!(id = %core.id, %e, "the session with the master ended; joining again");
                    // Contact counts from the last session the master accepted.
                    last_contact = Instant::now();
                    delay = Duration::from_millis(50);
                }
                if core.draining.load(Ordering::SeqCst) {
                    // Draining with no master to hand over to: nothing more to do.
                    return Ok(());
                }
                if last_contact.elapsed() > core.options.reconnect_for {
                    return Err(LineaError::Remote {
                        peer: core.options.master.clone(),
                        message: format!("{e}; gave up after {:.0}s", core.options.reconnect_for.as_secs_f64()),
                    });
                }
                tracing::debug!(%e, "master unavailable; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = terminate.notified() => { core.draining.store(true, Ordering::SeqCst); return Ok(()); }
                }
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
}

fn spawn_signal_watch(terminate: Arc<tokio::sync::Notify>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            terminate.notify_one();
        }
    });
}

async fn session(
    core: &Arc<WorkerCore>,
    terminate: &tokio::sync::Notify,
    drain_started: &mut Option<Instant>,
) -> SessionEnd {
    let mut joined = false;
    let lost = |status: &Status, joined: bool| {
        // A master that refuses this worker's certificate (or shows one of another CA) will
        // not change its mind: stop at once instead of retrying for --reconnect-for.
        if let Some(why) = linea_proto::tls::refusal(status) {
            let message = format!("TLS: {why}; is this the job's certificate folder (--tls-dir)?");
            return SessionEnd::Refused(LineaError::Remote { peer: core.options.master.clone(), message });
        }
        match status.code() {
            tonic::Code::Unauthenticated => {
                SessionEnd::Refused(crate::runtime::rpc_error(&core.options.master, status))
            }
            _ => SessionEnd::Lost { error: crate::runtime::rpc_error(&core.options.master, status), joined },
        }
    };
    let disconnected = |error: LineaError, joined: bool| SessionEnd::Lost { error, joined };
    let mut client = match core.master() {
        Ok(c) => c,
        Err(e) => return disconnected(e, false),
    };
    let (outbound, messages) = unbounded_channel::<proto::WorkerMessage>();
    let send = |out: &UnboundedSender<proto::WorkerMessage>, body| {
        let _ = out.send(proto::WorkerMessage { body: Some(body) });
    };
    let join =
        proto::Join { worker_id: core.id.clone(), address: core.address.clone(), threads: core.options.threads as u32 };
    send(&outbound, worker_message::Body::Join(join));
    if core.draining.load(Ordering::SeqCst) {
        send(&outbound, worker_message::Body::Leave(proto::Leave {}));
    }
    let mut inbound = match client.work(UnboundedReceiverStream::new(messages)).await {
        Ok(r) => r.into_inner(),
        Err(status) => return lost(&status, false),
    };
    let (results, mut completed) = unbounded_channel::<proto::ItemResult>();
    let drain_deadline = |started: &Option<Instant>| {
        let remaining = started.map(|s| core.options.drain_timeout.saturating_sub(s.elapsed()));
        async move {
            match remaining {
                Some(r) => tokio::time::sleep(r).await,
                None => std::future::pending().await,
            }
        }
    };
    loop {
        tokio::select! {
            message = inbound.message() => {
                let body = match message {
                    Ok(Some(proto::MasterMessage { body: Some(body) })) => body,
                    Ok(Some(_)) => continue,
                    Ok(None) => return disconnected(LineaError::Remote { peer: core.options.master.clone(), message: "ended the session".into() }, joined),
                    Err(status) => return lost(&status, joined),
                };
                match body {
                    master_message::Body::Job(job) => {
                        if let Err(e) = core.start_session(&job) {
                            tracing::error!(%e, "cannot open the job's data");
                            return disconnected(e, false);
                        }
                        joined = true;
                    }
                    master_message::Body::Assignment(assignment) => {
                        for phase in assignment.phases {
                            if let Err(e) = core.add_phase(phase) {
                                tracing::error!(%e, "cannot read the master's phase");
                                return disconnected(e, joined);
                            }
                        }
                        for item in assignment.items {
                            let (core2, results) = (core.clone(), results.clone());
                            core.pool.spawn(move || {
                                let _ = results.send(core2.execute(&item));
                            });
                        }
                    }
                    master_message::Body::Drain(_) => {
                        core.draining.store(true, Ordering::SeqCst);
                        drain_started.get_or_insert_with(Instant::now);
                    }
                    master_message::Body::Release(_) => return SessionEnd::Released,
                }
            }
            Some(first) = completed.recv() => {
                let mut batch = vec![first];
                while let Ok(more) = completed.try_recv() {
                    batch.push(more);
                }
                send(&outbound, worker_message::Body::Completed(proto::Completed { results: batch }));
            }
            _ = terminate.notified() => {
                tracing::info!(id = %core.id, "SIGTERM: draining");
                core.draining.store(true, Ordering::SeqCst);
                drain_started.get_or_insert_with(Instant::now);
                send(&outbound, worker_message::Body::Leave(proto::Leave {}));
            }
            _ = drain_deadline(drain_started) => {
                tracing::warn!(id = %core.id, "drain timeout: leaving before the master released this worker");
                return SessionEnd::Released;
            }
        }
    }
}
