//! The linea operator: a kube-rs controller that turns a `TrainingJob` into a master Pod,
//! its Service and worker Pods, and reports progress polled from the master.
//!
//! Reconcile is validate -> build -> apply -> status. [`desired`] (what should exist) and
//! [`plan`] (what to change, given what exists) are pure functions, unit-tested without an
//! API server; only [`reconcile`] talks to the API and the master. Of several replicas only
//! the one holding the Lease reconciles ([`election`] decides, [`lease`] reads and writes);
//! [`nodes`] turns a node's termination notice into an immediate reconcile of its jobs.
#![forbid(unsafe_code)]

pub mod desired;
pub mod elastic;
pub mod election;
pub mod error;
pub mod lease;
pub mod master;
pub mod metrics;
pub mod nodes;
pub mod plan;
pub mod prepare;
pub mod reconcile;
pub mod resources;

/// The one field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "linea-operator";
/// Finalizer that makes deletion wait for the operator's cleanup.
pub const FINALIZER: &str = "linea.io/cleanup";
