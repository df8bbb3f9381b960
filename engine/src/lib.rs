//! Pure training math for linea.
//!
//! Everything here is a function of its inputs: no files, no network, no clocks. The data
//! grid's byte codec lives here too because encoding is computation, and the runtime
//! (`linea-worker`) only moves those bytes between storage and memory.
//!
//! Results are bit-identical however the work is split: every sum that crosses a row shard
//! is taken in exact fixed-point integers ([`fixed`]), so the model depends on the data grid
//! and the parameters, never on thread or worker counts or the order work finished in.
// No unsafe code but one: `fma::dispatch!` calls a copy of a loop compiled for FMA and AVX2
// after checking that the CPU has them (its one `#[allow(unsafe_code)]`).
#![deny(unsafe_code)]
// `!(x > 0.0)` is how this crate says "not positive, or NaN": the NaN case is the point.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod algorithm;
pub mod choice;
pub mod cocoa;
pub mod codec;
pub mod error;
pub mod fixed;
mod fma;
pub mod grid;
pub mod hybrid;
pub mod loss;
pub mod metrics;
pub mod objective;
pub mod partition;
#[cfg(any(test, feature = "reference"))]
pub mod reference;
pub mod rng;
pub mod runner;
pub mod scd;
pub mod scratch;
#[cfg(test)]
mod synthetic;

pub use error::EngineError;
pub use grid::{Cell, CellValues, Ids};
pub use loss::Loss;
