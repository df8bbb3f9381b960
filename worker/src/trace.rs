//! `--trace`: the convergence trace as CSV, one line per epoch. A local file is written as the
//! run goes (each epoch's line appended and flushed when the epoch ends), so a run that is
//! stopped, killed or fails leaves the epochs it did; an `s3://` object is written whole when
//! the run ends (an object store has no append). Either way the finished run rewrites the
//! whole file atomically ([`csv`]), the same lines.

use crate::driver::EpochPoint;
use crate::error::{LineaError, Result};
use linea_engine::fixed::TargetScale;
use std::io::Write;
use std::path::PathBuf;

/// The CSV's first line. workers: the count an elastic run wanted after the epoch;
/// algorithm: the one that ran (as `--algorithm auto` chose it), as the flags that name it
/// ([`crate::driver::ran`]: `lbfgs --batch-solver newton`).
pub const HEADER: &str = "epoch,seconds,objective,gap,relative_gap,workers,algorithm\n";

/// A point in the labels' own units: training runs on targets in the grid's scale (squared
/// loss, see [`TargetScale`]), a power of two, so this is exact.
pub fn unscaled(point: EpochPoint, scale: TargetScale) -> EpochPoint {
    let gap = point.gap.map(|g| linea_engine::algorithm::Gap { absolute: scale.unscale_objective(g.absolute), ..g });
    EpochPoint { objective: scale.unscale_objective(point.objective), gap, ..point }
}

/// One point's line (already unscaled). A blank objective: the epoch's objective was not
/// computed (CoCoA's gap schedule).
pub fn line(p: &EpochPoint, algorithm: &str) -> String {
    let (gap, relative) =
        p.gap.map_or((String::new(), String::new()), |g| (g.absolute.to_string(), g.relative.to_string()));
    let workers = p.workers.map_or(String::new(), |w| w.to_string());
    let objective = if p.objective.is_nan() { String::new() } else { p.objective.to_string() };
    format!("{},{:.6},{objective},{gap},{relative},{workers},{algorithm}\n", p.epoch, p.seconds)
}

/// The whole trace (already unscaled), header first.
pub fn csv(trace: &[EpochPoint], algorithm: &str) -> String {
    trace.iter().fold(HEADER.to_string(), |csv, p| csv + &line(p, algorithm))
}

/// A local trace file written as the run goes.
pub struct TraceFile {
    path: PathBuf,
    file: std::fs::File,
    /// Points of the run's trace already in the file.
    written: usize,
    algorithm: String,
    scale: TargetScale,
}

impl TraceFile {
    /// Starts `location` with the header, if it is a local file; `None` for an `s3://`
    /// object (written at the end only).
    pub fn create(location: &str, algorithm: String, scale: TargetScale) -> Result<Option<TraceFile>> {
        if location.starts_with("s3://") {
            return Ok(None);
        }
        let path = PathBuf::from(location.strip_prefix("file://").unwrap_or(location));
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(LineaError::io(parent))?;
        }
        let mut file = std::fs::File::create(&path).map_err(LineaError::io(&path))?;
        file.write_all(HEADER.as_bytes()).map_err(LineaError::io(&path))?;
        Ok(Some(TraceFile { path, file, written: 0, algorithm, scale }))
    }

    /// [`Self::create`] for a run's `--trace`, if it has one.
    pub fn for_run(location: Option<&str>, algorithm: String, scale: TargetScale) -> Result<Option<TraceFile>> {
        Ok(location.map(|t| TraceFile::create(t, algorithm, scale)).transpose()?.flatten())
    }

    /// Appends the points of `trace` not yet written (a resumed run's first call writes
    /// those its checkpoint brought), each a line, with one write and a flush.
    pub fn append(&mut self, trace: &[EpochPoint]) -> Result<()> {
        let new = trace.get(self.written..).unwrap_or_default();
        if new.is_empty() {
            return Ok(());
        }
        let lines: String = new.iter().map(|p| line(&unscaled(p.clone(), self.scale), &self.algorithm)).collect();
        self.file.write_all(lines.as_bytes()).and_then(|()| self.file.flush()).map_err(LineaError::io(&self.path))?;
        self.written = trace.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linea_engine::algorithm::Gap;

    fn point(epoch: u32, objective: f64) -> EpochPoint {
        let gap = Some(Gap { absolute: 0.5, relative: 0.25 });
        EpochPoint { epoch, seconds: 1.0 / 3.0, objective, gap, workers: Some(2) }
    }

    #[test]
    fn the_file_written_as_the_run_goes_is_the_csv_of_the_whole_trace() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("sub/trace.csv").to_string_lossy().into_owned();
        let scale = TargetScale::default();
        let mut file = TraceFile::create(&location, "cocoa".into(), scale).unwrap().unwrap();
        let trace = vec![point(0, 2.0), point(1, f64::NAN), point(2, 1.5)];
        file.append(&trace[..1]).unwrap();
        assert_eq!(std::fs::read_to_string(&location).unwrap(), format!("{HEADER}0,0.333333,2,0.5,0.25,2,cocoa\n"));
        file.append(&trace[..1]).unwrap();
        file.append(&trace).unwrap();
        let whole = csv(&trace, "cocoa");
        assert_eq!(std::fs::read_to_string(&location).unwrap(), whole);
        assert!(whole.contains("\n1,0.333333,,0.5,0.25,2,cocoa\n"), "a blank objective: {whole}");
        assert!(TraceFile::create("s3://bucket/trace.csv", "scd".into(), scale).unwrap().is_none());
        // Squared loss on labels scaled by s = 2: the objective and absolute gap trained on
        // are s^2 = 4 times the labels' own.
        let point = unscaled(point(3, 8.0), TargetScale { exponent: 1 });
        assert_eq!((point.objective, point.gap.unwrap().absolute, point.gap.unwrap().relative), (2.0, 0.125, 0.25));
    }
}
