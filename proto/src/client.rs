//! Typed clients: a channel to an address with bounded timeouts over the job's
//! [`Transport`] (TLS unless `--insecure`), and the Master and Peer clients over it that
//! carry the job's secret and accept messages up to
//! [`MAX_MESSAGE_BYTES`](crate::MAX_MESSAGE_BYTES).

use crate::MAX_MESSAGE_BYTES;
use crate::auth::{Authenticated, JobSecret};
use crate::error::{ProtoError, Result};
use crate::tls::Transport;
use crate::v1::{master_client, peer_client};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

pub type MasterClient = master_client::MasterClient<Authenticated>;
pub type PeerClient = peer_client::PeerClient<Authenticated>;

/// How long a client waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To open the connection.
    pub connect: Duration,
    /// For each call; `None` for the runtime's own channels, whose Work stream lasts as long
    /// as the job (HTTP/2 keep-alive notices a dead peer instead).
    pub call: Option<Duration>,
}

impl Timeouts {
    /// The runtime's channels between master and workers and between workers.
    pub const RUNTIME: Timeouts = Timeouts { connect: Duration::from_secs(5), call: None };
    /// A command-line call (`linea status`, `linea drain`).
    pub const COMMAND: Timeouts = Timeouts { connect: Duration::from_secs(5), call: Some(Duration::from_secs(10)) };
}

/// Whom a channel expects at the other end (with TLS: the name its certificate must carry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect<'a> {
    /// The host of the address (`linea worker --master ads-master.ml.svc:7070`).
    Host,
    /// This name, whatever the address: a worker ([`crate::tls::WORKER_NAME`]) or a master
    /// reached by its pod IP (the operator: the master Service's name).
    Name(&'a str),
}

/// An endpoint at `address` (`http://host:port`; with TLS the connection is `https` whatever
/// the scheme says, so one address serves both) with the timeouts and HTTP/2 keep-alive.
pub fn endpoint(address: &str, timeouts: Timeouts, transport: &Transport, expect: Expect) -> Result<Endpoint> {
    let invalid = |message: String| ProtoError::InvalidAddress { address: address.into(), message };
    let url = match (transport, address.strip_prefix("http://")) {
        (Transport::Tls(_), Some(rest)) => format!("https://{rest}"),
        _ => address.to_string(),
    };
    let mut endpoint = Endpoint::from_shared(url)
        .map_err(|e| invalid(e.to_string()))?
        .connect_timeout(timeouts.connect)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(20));
    if let Transport::Tls(tls) = transport {
        let name = match expect {
            Expect::Host => None,
            Expect::Name(name) => Some(name),
        };
        endpoint = endpoint.tls_config(tls.client_config(name)).map_err(|e| invalid(crate::error::chain(&e)))?;
    }
    Ok(match timeouts.call {
        Some(call) => endpoint.timeout(call),
        None => endpoint,
    })
}

/// A channel that connects on first use (and reconnects after a loss); it must be made
/// inside a tokio runtime.
pub fn lazy_channel(address: &str, timeouts: Timeouts, transport: &Transport, expect: Expect) -> Result<Channel> {
    Ok(endpoint(address, timeouts, transport, expect)?.connect_lazy())
}

/// A channel connected now, or why not.
pub async fn channel(address: &str, timeouts: Timeouts, transport: &Transport, expect: Expect<'_>) -> Result<Channel> {
    endpoint(address, timeouts, transport, expect)?
        .connect()
        .await
        .map_err(|source| ProtoError::Unreachable { address: address.into(), source })
}

/// The Master client over `channel`, sending the job's secret with every call.
pub fn master(channel: Channel, secret: &JobSecret) -> MasterClient {
    master_client::MasterClient::with_interceptor(channel, secret.attach())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// The Peer client over `channel`, sending the job's secret with every call.
pub fn peer(channel: Channel, secret: &JobSecret) -> PeerClient {
    peer_client::PeerClient::with_interceptor(channel, secret.attach())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// Connects to the master at `address` now.
pub async fn connect_master(
    address: &str,
    secret: &JobSecret,
    transport: &Transport,
    expect: Expect<'_>,
    timeouts: Timeouts,
) -> Result<MasterClient> {
    Ok(master(channel(address, timeouts, transport, expect).await?, secret))
}
