//! The linea runtime and command line: reading raw data, the grid on storage, training,
//! evaluation. The math is in `linea-engine`; this crate moves bytes and drives it.
#![forbid(unsafe_code)]

pub mod allocator;
pub mod choose;
pub mod cli;
pub mod driver;
pub mod error;
pub mod eval;
pub mod gridload;
pub mod input;
pub mod interrupt;
pub mod io_runtime;
pub mod manifest;
pub mod model;
pub mod plot;
pub mod prepare;
pub mod progress;
pub mod runtime;
pub mod storage;
pub mod trace;
pub mod train;
