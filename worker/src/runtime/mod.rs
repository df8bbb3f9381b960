//! The distributed runtime: one master ([`master`]) that runs the algorithm and hands out
//! work items, many workers ([`worker`]) that run the kernels on row shards, over tonic
//! gRPC (proto/linea.proto). `linea train --workers N` ([`embedded`]) runs both here.
//!
//! The model does not depend on who did what: every sum crossing a shard boundary is an
//! exact fixed-point integer (engine::fixed), and a shard's predictions are the same
//! integers whether updated step by step, fetched from another worker or recomputed from
//! the model. docs/architecture.md tells the whole story.

pub mod auth;
pub mod checkpoint;
pub mod client;
pub mod embedded;
pub mod hub;
pub mod master;
pub mod scheduler;
pub mod wire;
pub mod worker;

pub mod proto {
    tonic::include_proto!("linea.v1");
}

/// How a gRPC failure reads in a message: the peer, then what went wrong.
pub fn rpc_error(peer: &str, status: &tonic::Status) -> crate::error::LineaError {
    let message = match status.code() {
        tonic::Code::Unauthenticated => format!("refused: {}", status.message()),
        tonic::Code::Unavailable => format!("unreachable ({})", status.message()),
        _ => format!("{:?}: {}", status.code(), status.message()),
    };
    crate::error::LineaError::Remote { peer: peer.to_string(), message }
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
