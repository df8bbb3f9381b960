//! Examples read in batches, for `linea prepare --threads`. A batch numbers its own variables
//! and each variable's keys in the order they first occur in it, so batches can be parsed
//! on threads, each alone, and still be numbered exactly as one pass over the file numbers
//! them: taken in file order, a batch's keys not seen before are new in the order the
//! batch first saw them (see `prepare`).
//!
//! Text formats are cut into byte ranges at line boundaries ([`super::ranges`]) and each
//! range is one batch; Parquet, and the rest of a delimited file that cannot be cut, are read
//! by one reader and cut into batches of [`BATCH_ROWS`] examples.

use super::ranges::{Range, RangeParser, Ranges};
use super::{ExampleReader, FeatureSpec, RawExample};
use crate::error::{LineaError, Result};
use std::collections::BTreeMap;

/// Examples per batch of a reader that reads the file in order.
pub const BATCH_ROWS: usize = 65_536;

/// Examples in file order, their keys numbered locally.
#[derive(Debug, Default)]
pub struct Batch {
    pub labels: Vec<f64>,
    /// Line (Parquet: row) of each example, counted from the batch's start: 1 is the line
    /// after the previous batch's `line_count` lines.
    pub lines: Vec<u64>,
    /// End of each example's features in `features`.
    pub ends: Vec<usize>,
    /// (batch variable, batch key, value) in the order read.
    pub features: Vec<(u32, u32, f64)>,
    /// Every variable the batch's reader knew, as it numbered them.
    pub variables: Vec<BatchVariable>,
    /// Lines the batch spans: where the next batch's line numbers start.
    pub line_count: u64,
    /// The error that stopped reading, after the examples before it (its line counted like
    /// `lines`). It is reported once the examples before it have been taken.
    pub error: Option<LineaError>,
}

#[derive(Debug, Default)]
pub struct BatchVariable {
    pub name: String,
    pub dense: bool,
    /// The keys seen in the batch, in the order first seen.
    pub keys: Vec<Box<str>>,
}

impl Batch {
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// The examples' features: `features[ends[r-1]..ends[r]]` for example `r`.
    pub fn row(&self, r: usize) -> &[(u32, u32, f64)] {
        let start = if r == 0 { 0 } else { self.ends[r - 1] };
        &self.features[start..self.ends[r]]
    }
}

/// Gathers examples into a [`Batch`].
struct BatchBuilder {
    batch: Batch,
    keys: Vec<foldhash::HashMap<Box<str>, u32>>,
    /// Line of the batch's start: the line numbers of examples are counted from it.
    start: u64,
}

impl BatchBuilder {
    fn new(start: u64) -> Self {
        Self { batch: Batch::default(), keys: Vec::new(), start }
    }

    fn push(&mut self, example: &RawExample) {
        let batch = &mut self.batch;
        batch.labels.push(example.label);
        batch.lines.push(example.line.saturating_sub(self.start));
        for (v, key, value) in example.features() {
            if self.keys.len() <= v as usize {
                self.keys.resize_with(v as usize + 1, Default::default);
            }
            let keys = &mut self.keys[v as usize];
            // Look up before inserting: most keys are known, and an owned key costs an allocation.
            let id = match keys.get(key) {
                Some(&id) => id,
                None => {
                    let id = keys.len() as u32;
                    keys.insert(key.into(), id);
                    id
                }
            };
            batch.features.push((v, id, value));
        }
        batch.ends.push(batch.features.len());
    }

    fn finish(self, reader: &dyn ExampleReader, line_count: u64, error: Option<LineaError>) -> Batch {
        let mut batch = self.batch;
        let count = (reader.variable_count() as usize).max(self.keys.len());
        let mut keys = self.keys.into_iter();
        batch.variables = (0..count as u32)
            .map(|v| {
                let map = keys.next().unwrap_or_default();
                let mut ordered: Vec<Box<str>> = vec![Box::default(); map.len()];
                for (key, id) in map {
                    ordered[id as usize] = key;
                }
                BatchVariable { name: reader.variable_name(v).to_string(), dense: reader.is_dense(v), keys: ordered }
            })
            .collect();
        batch.line_count = line_count;
        batch.error = error.map(|e| match e {
            LineaError::Input { file, line, message } => {
                LineaError::Input { file, line: line.saturating_sub(self.start), message }
            }
            other => other,
        });
        batch
    }
}

/// Parses one range of a text file (its lines counted from 1 at its start).
pub fn parse_range(parser: &RangeParser, bytes: Vec<u8>, first: bool, line_count: u64) -> Batch {
    let mut reader = parser.reader(bytes, first);
    let mut builder = BatchBuilder::new(0);
    let mut example = RawExample::default();
    let error = loop {
        match reader.read(&mut example) {
            Ok(true) => builder.push(&example),
            Ok(false) => break None,
            Err(e) => break Some(e),
        }
    };
    builder.finish(reader.as_ref(), line_count, error)
}

/// Reads `path` as `spec` says and hands its examples to `take` in batches, in file order.
/// Text is cut into ranges of about `range_bytes` parsed on `threads` threads (on this one for 1); at most two
/// ranges per thread are in flight, so memory does not grow with the file. `take` stops
/// the reading with an error, and must return a batch's own error.
pub fn read_batches(
    path: &str,
    spec: &FeatureSpec,
    threads: usize,
    range_bytes: usize,
    take: &mut dyn FnMut(Batch) -> Result<()>,
) -> Result<()> {
    let mut ranges = Ranges::open(path, spec.format, range_bytes)?;
    let Some(parser) = RangeParser::new(path, spec, &mut ranges)? else {
        return read_in_order(super::open(path, spec)?, take);
    };
    let rest = if threads <= 1 {
        loop {
            match ranges.next_range()? {
                None => break None,
                Some(Range::Text { bytes, first, line_breaks }) => {
                    take(parse_range(&parser, bytes, first, line_breaks))?
                }
                Some(Range::Rest { head, first }) => break Some((head, first)),
            }
        }
    } else {
        in_parallel(&parser, &mut ranges, threads, take)?
    };
    match rest {
        Some((head, first)) => read_in_order(parser.rest(head, ranges.remainder()?, first), take),
        None => Ok(()),
    }
}

/// Reads with one reader, cutting batches of [`BATCH_ROWS`] examples.
fn read_in_order(mut reader: Box<dyn ExampleReader>, take: &mut dyn FnMut(Batch) -> Result<()>) -> Result<()> {
    let mut example = RawExample::default();
    let mut builder = BatchBuilder::new(0);
    loop {
        match reader.read(&mut example) {
            Ok(true) => {
                builder.push(&example);
                if builder.batch.rows() == BATCH_ROWS {
                    let start = builder.start;
                    let next = std::mem::replace(&mut builder, BatchBuilder::new(example.line));
                    take(next.finish(reader.as_ref(), example.line - start, None))?;
                }
            }
            Ok(false) => return take(builder.finish(reader.as_ref(), 0, None)),
            Err(e) => return take(builder.finish(reader.as_ref(), 0, Some(e))),
        }
    }
}

/// Ranges parsed on `threads` threads, taken in file order. Returns the head of the rest of
/// the file if it must be read in order.
fn in_parallel(
    parser: &RangeParser,
    ranges: &mut Ranges,
    threads: usize,
    take: &mut dyn FnMut(Batch) -> Result<()>,
) -> Result<Option<(Vec<u8>, bool)>> {
    type Parsed = std::thread::Result<Batch>;
    let (work, jobs) = std::sync::mpsc::sync_channel::<(usize, Vec<u8>, bool, u64)>(threads);
    let jobs = std::sync::Mutex::new(jobs);
    std::thread::scope(|scope| {
        // Dropped when this closure ends, however it ends: the parser threads then stop.
        let work = work;
        let (done, results) = std::sync::mpsc::channel::<(usize, Parsed)>();
        for _ in 0..threads {
            let (done, jobs) = (done.clone(), &jobs);
            scope.spawn(move || {
                loop {
                    // The lock is held only while waiting for a job: the guard goes with `map`.
                    let Ok(Ok((i, bytes, first, line_breaks))) = jobs.lock().map(|jobs| jobs.recv()) else { break };
                    // A panic is handed over and resumed on the taking thread: a lost range
                    // would leave it waiting for it.
                    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        parse_range(parser, bytes, first, line_breaks)
                    }));
                    if done.send((i, parsed)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(done);
        let (mut sent, mut next, mut rest, mut exhausted) = (0usize, 0usize, None, false);
        let mut ready: BTreeMap<usize, Parsed> = BTreeMap::new();
        loop {
            while !exhausted && sent - next < 2 * threads {
                match ranges.next_range()? {
                    Some(Range::Text { bytes, first, line_breaks }) => {
                        work.send((sent, bytes, first, line_breaks))
                            .expect("parser threads live as long as the work queue");
                        sent += 1;
                    }
                    Some(Range::Rest { head, first }) => (rest, exhausted) = (Some((head, first)), true),
                    None => exhausted = true,
                }
            }
            if next == sent {
                break;
            }
            let parsed = loop {
                if let Some(parsed) = ready.remove(&next) {
                    break parsed;
                }
                let (i, parsed) = results.recv().expect("parser threads live as long as the work queue");
                ready.insert(i, parsed);
            };
            take(parsed.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))?;
            next += 1;
        }
        Ok(rest)
    })
}
