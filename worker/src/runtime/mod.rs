//! The distributed runtime: one master ([`master`]) that runs the algorithm and hands out
//! work items, many workers ([`worker`]) that run the kernels on row shards, over tonic
//! gRPC (linea-proto: proto/linea.proto, the job secret, clients and the Peer service). `linea train --workers N` ([`embedded`]) runs both here.
//!
//! The model does not depend on who did what: every sum crossing a shard boundary is an
//! exact fixed-point integer (engine::fixed), and a shard's predictions are the same
//! integers whether updated step by step, fetched from another worker or recomputed from
//! the model. docs/architecture.md tells the whole story.

pub mod allreduce;
pub mod checkpoint;
pub mod client;
pub mod embedded;
pub mod hub;
pub mod master;
pub mod metrics;
pub mod scheduler;
pub mod speculation;
pub mod wire;
pub mod worker;

/// The API crate's generated code and job secret, under the names the runtime uses.
pub use linea_proto::{auth, v1 as proto};

/// How a gRPC failure reads in a message: the peer, then what went wrong.
pub fn rpc_error(peer: &str, status: &tonic::Status) -> crate::error::LineaError {
    let message = match status.code() {
        tonic::Code::Unauthenticated => format!("refused: {}", status.message()),
        tonic::Code::Unavailable => format!("unreachable ({})", status.message()),
        _ => format!("{:?}: {}", status.code(), status.message()),
    };
    crate::error::LineaError::Remote { peer: peer.to_string(), message }
}
