//! The server side: the Master and Peer services behind the job's secret, the server that
//! speaks the job's [`Transport`], and the listener they are served on.

use crate::MAX_MESSAGE_BYTES;
use crate::auth::{Check, JobSecret};
use crate::error::{ProtoError, Result};
use crate::peer::{PeerBackend, PeerService};
use crate::tls::Transport;
use crate::v1::{master_server, peer_server};
use std::sync::Arc;
use tonic::service::interceptor::InterceptedService;

/// A Master service that refuses calls without the job's secret.
pub fn master<S: master_server::Master>(
    service: S,
    secret: &JobSecret,
) -> InterceptedService<master_server::MasterServer<S>, Check> {
    let server = master_server::MasterServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    InterceptedService::new(server, secret.check())
}

/// The Peer service over `backend`, refusing calls without the job's secret.
pub fn peer<B: PeerBackend>(
    backend: Arc<B>,
    secret: &JobSecret,
) -> InterceptedService<peer_server::PeerServer<PeerService<B>>, Check> {
    let server = peer_server::PeerServer::new(PeerService::new(backend))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    InterceptedService::new(server, secret.check())
}

/// A server speaking `transport`: with TLS it accepts only clients that show a certificate of
/// the job CA (a connection without one, with another CA's, or in plain text fails in the
/// handshake, before any call reaches a service).
pub fn builder(transport: &Transport) -> Result<tonic::transport::Server> {
    let builder = tonic::transport::Server::builder();
    match transport {
        Transport::Tls(tls) => {
            crate::tls::install_crypto_provider();
            builder
                .tls_config(tls.server_config())
                .map_err(|e| ProtoError::Certificate(format!("the server's TLS settings: {}", crate::error::chain(&e))))
        }
        Transport::Plaintext => Ok(builder),
    }
}

/// Accepted connections with Nagle's algorithm off: the runtime's messages are small and
/// latency-bound, and Nagle plus delayed ACKs would add 40 ms to many of them.
pub fn incoming(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|stream| {
        let stream = stream?;
        stream.set_nodelay(true)?;
        Ok(stream)
    })
}
