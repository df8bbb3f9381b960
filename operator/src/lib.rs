//! The linea operator: a kube-rs controller that turns a `TrainingJob` into a master Pod,
//! its Service and worker Pods, and reports progress polled from the master.
//!
//! Reconcile is validate -> build -> apply -> status. [`desired`] (what should exist) and
//! [`plan`] (what to change, given what exists) are pure functions, unit-tested without an
//! API server; only [`reconcile`] talks to the API and the master.
#![forbid(unsafe_code)]

pub mod desired;
pub mod elastic;
pub mod error;
pub mod master;
pub mod metrics;
pub mod plan;
pub mod prepare;
pub mod reconcile;

/// The one field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "linea-operator";
/// Finalizer that makes deletion wait for the operator's cleanup.
pub const FINALIZER: &str = "linea.io/cleanup";
