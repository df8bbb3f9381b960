//! Benchmarks of linea. The binaries are run by `bench/*.sh`; see docs/benchmarks.md.

pub mod elastic_run;
pub mod slot_clock;
