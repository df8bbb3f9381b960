//! The linea runtime's gRPC API, in one place for every crate that speaks it: the worker
//! (master and worker roles), the operator (status and drain) and the runtime benchmark.
//!
//! - [`v1`]: the messages and services generated from linea.proto (compiled here once);
//! - [`auth`]: the per-job secret, its client interceptor and its constant-time server check;
//! - [`tls`]: the per-job CA and certificates, and TLS with mutual authentication on every
//!   connection (or plain text with an explicit `--insecure`);
//! - [`client`]: typed clients that connect with the job's secret and bounded timeouts;
//! - [`server`]: the authenticated Master and Peer services and the listener they serve on;
//! - [`peer`]: the Peer service itself, a plain struct over [`peer::PeerBackend`], so a
//!   simulated worker serves the same service over no state.
//!
//! Nothing here knows an algorithm: phases, unit state and sums travel as the bytes the
//! engine encodes.

#![forbid(unsafe_code)]

pub mod auth;
pub mod client;
pub mod error;
pub mod peer;
pub mod server;
pub mod tls;

pub use error::{ProtoError, Result};

/// The generated code of linea.proto (package `linea.v1`).
pub mod v1 {
    tonic::include_proto!("linea.v1");
}

/// Largest gRPC message either side accepts or sends: a phase carries whole blocks of
/// parameters, far over tonic's 4 MiB default.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;
