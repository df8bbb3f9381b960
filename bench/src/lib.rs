//! Benchmarks of linea. The binaries are run by `bench/*.sh`; see docs/benchmarks.md.
