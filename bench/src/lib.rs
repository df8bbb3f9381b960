//! Benchmarks of linea. The binaries are run by `bench/*.sh`; see docs/benchmarks.md.

pub mod column_stats;
pub mod criteo_gen;
pub mod elastic_run;
pub mod memcap;
pub mod resample;
pub mod resample_bow;
pub mod scale_in;
pub mod slot_clock;

/// A benchmark set named on the command line as `NAME=GRID`: its name in the tables and the
/// grid `linea prepare` wrote.
pub fn named_grid(arg: &str) -> Result<(String, String), String> {
    let (name, grid) = arg.split_once('=').ok_or(format!("expected NAME=GRID, got {arg:?}"))?;
    Ok((name.to_string(), grid.to_string()))
}
