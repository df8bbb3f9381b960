//! `linea prepare`: raw input -> the block x row-shard grid (SCD section 4.1).
//!
//! One streaming pass reads the input, numbers every (variable, key) feature, and at the end
//! of each row shard compresses that shard's non-zeros per variable and writes its labels.
//! Then each variable becomes blocks: a pure variable is one block; a set-valued one is
//! split ([`linea_engine::partition`]); a constant bias block is added. Cells, dictionaries
//! and finally the manifest are written. An old manifest is removed first, so an
//! interrupted run never leaves a grid that looks complete.
//!
//! A column of a CSV, Criteo or Parquet input holds one value a row, so it is never split:
//! its cells are written as each shard ends ([`Cells::Written`]) and memory does not grow
//! with the input. LIBSVM and VW variables are held compressed until the end, where the
//! split needs them all.

use crate::error::{LineaError, Result};
use crate::input::batch::{self, Batch};
use crate::input::source::{InputFingerprint, RawInput, RemoteObject};
use crate::input::{FeatureSpec, Format};
use crate::manifest::{BlockEntry, DataRanges, FileRef, GRID_FORMAT, MANIFEST, Manifest, ShardEntry};
use crate::progress::Progress;
use crate::storage::Storage;
use linea_engine::codec::{self, DictionaryEntry, ShardLabels};
use linea_engine::grid::Cell;
use linea_engine::partition;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

pub const BIAS: &str = "(bias)";

pub struct PrepareOptions {
    /// A local file or an `s3://bucket/key` object.
    pub input: String,
    pub spec: FeatureSpec,
    pub rows_per_shard: usize,
    /// Keep the grid already at the output when it was prepared from this very input (see
    /// [`current_grid`]) instead of preparing it again.
    pub reuse: bool,
    /// Threads parsing the input (text formats; Parquet is read by one). The grid does not
    /// depend on it.
    pub threads: usize,
    /// Bytes per range of text parsed on its own ([`crate::input::ranges::RANGE_BYTES`]; the
    /// tests cut small inputs into many ranges). The grid does not depend on it.
    pub range_bytes: usize,
}

/// A variable's cells, one per finished shard.
enum Cells {
    /// Held until the end, where a set-valued variable is split into blocks.
    Held(Vec<Vec<u8>>),
    /// Written under the variable's own keys ([`column_cell_key`]) as each shard ended: a
    /// column's cells are final when made. On 50M Criteo rows, holding them took prepare to
    /// 4.1 GiB (docs/benchmarks/fifty-million-rows.md).
    Written(Vec<FileRef>),
}

/// A variable as seen so far.
struct Variable {
    name: String,
    dense: bool,
    keys: foldhash::HashMap<Box<str>, u32>,
    dictionary: Vec<DictionaryEntry>,
    nnz: u64,
    /// Some example had two non-zeros in this variable.
    set_valued: bool,
    last_row: u64,
    /// Compressed cell of each finished shard, feature ids numbered per variable.
    cells: Cells,
    /// (row in shard, feature, value) of the shard being read.
    pending: Vec<(u32, u32, f64)>,
}

impl Variable {
    /// The feature `key` names, numbered next if it is new. The batch's own copy of the
    /// key becomes the map's: one hash, and no allocation but the dictionary's.
    fn number(&mut self, key: Box<str>) -> u32 {
        match self.keys.entry(key) {
            Entry::Occupied(known) => *known.get(),
            Entry::Vacant(new) => {
                let id = self.dictionary.len() as u32;
                self.dictionary.push(DictionaryEntry { key: new.key().to_string(), nnz: 0, max_abs: 0.0 });
                new.insert(id);
                id
            }
        }
    }

    fn add(&mut self, id: u32, value: f64, row: u64, row_in_shard: u32) {
        let entry = &mut self.dictionary[id as usize];
        entry.nnz += 1;
        entry.max_abs = entry.max_abs.max(value.abs());
        self.nnz += 1;
        self.set_valued |= self.last_row == row;
        self.last_row = row;
        self.pending.push((row_in_shard, id, value));
    }
}

pub struct PrepareSummary {
    pub manifest: Manifest,
    /// The grid was already there, prepared from the same input: nothing was written.
    pub reused: bool,
}

pub fn prepare(options: &PrepareOptions, storage: &dyn Storage, progress: &Progress) -> Result<PrepareSummary> {
    if options.rows_per_shard == 0 || options.rows_per_shard > u32::MAX as usize {
        return Err(LineaError::Usage("--rows-per-shard must be between 1 and 2^32-1".into()));
    }
    let remote = if options.input.starts_with("s3://") { Some(RemoteObject::look_up(&options.input)?) } else { None };
    let fingerprint = remote.as_ref().and_then(|r| r.fingerprint(&options.input));
    if options.reuse
        && let Some(manifest) = current_grid(storage, options, fingerprint.as_ref())?
    {
        return Ok(PrepareSummary { manifest, reused: true });
    }
    let input = match remote {
        Some(object) => RawInput::fetch(&options.input, object)?,
        None => RawInput::open(&options.input)?,
    };
    let manifest = write_grid(options, &input, storage, progress).map_err(|e| input.rename(e))?;
    Ok(PrepareSummary { manifest, reused: false })
}

/// The grid at `storage`, if it is complete (its manifest is written last) and was prepared
/// from the object `fingerprint` names (same URI, size and ETag) with the same format,
/// options and rows per shard. Without a fingerprint (a local file, a store that sends no
/// ETag) nothing can be known unchanged, and the answer is no.
pub fn current_grid(
    storage: &dyn Storage,
    options: &PrepareOptions,
    fingerprint: Option<&InputFingerprint>,
) -> Result<Option<Manifest>> {
    let Some(fingerprint) = fingerprint else { return Ok(None) };
    if !storage.exists(MANIFEST)? {
        return Ok(None);
    }
    let manifest = match Manifest::read(storage) {
        Ok(manifest) => manifest,
        // Unreadable or of another format: prepared anew.
        Err(LineaError::Data { .. } | LineaError::Engine { .. }) => return Ok(None),
        Err(other) => return Err(other),
    };
    let same = manifest.input.as_ref() == Some(fingerprint)
        && manifest.spec == options.spec
        && manifest.rows_per_shard == options.rows_per_shard;
    Ok(same.then_some(manifest))
}

fn write_grid(
    options: &PrepareOptions,
    input: &RawInput,
    storage: &dyn Storage,
    progress: &Progress,
) -> Result<Manifest> {
    storage.remove(MANIFEST)?;
    let mut state = Reading {
        options,
        storage,
        vw: options.spec.format == Format::Vw,
        known: Vec::new(),
        known_names: HashMap::new(),
        variables: Vec::new(),
        shards: Vec::new(),
        labels: ShardLabels::default(),
        empty_cell: None,
        rows: 0,
        line_base: 0,
        ranges: DataRanges {
            label_min: f64::INFINITY,
            label_max: f64::NEG_INFINITY,
            value_max_abs: 1.0,
            row_nnz_max: 1,
        },
        bar: progress.counter("reading", "examples"),
    };
    batch::read_batches(&input.path, &options.spec, options.threads, options.range_bytes, &mut |batch| {
        state.take(batch)
    })?;
    if !state.labels.labels.is_empty() {
        state.finish_shard()?;
    }
    let Reading { variables, shards, rows, ranges, bar, empty_cell, .. } = state;
    bar.finish(rows);
    if rows == 0 {
        return Err(LineaError::data(&options.input, "no examples: the input has no data lines"));
    }
    let split_bar = progress.counter("writing blocks of", "variables");
    let variable_count = variables.len() as u64;
    let mut blocks = vec![bias_block(storage, &shards)?];
    for (i, variable) in variables.into_iter().enumerate() {
        blocks.extend(write_variable(storage, variable, &options.spec, rows, options.rows_per_shard, blocks.len())?);
        split_bar.set(i as u64 + 1);
    }
    split_bar.finish(variable_count);
    // Columns without a block (the label's) may have been all that named it.
    if let Some(empty) = empty_cell
        && !blocks.iter().flat_map(|b| &b.cells).any(|c| c.key == empty.key)
    {
        storage.remove(&empty.key)?;
    }
    let manifest = Manifest {
        format: GRID_FORMAT.to_string(),
        spec: options.spec.clone(),
        source: input.file_name(),
        input: input.fingerprint.clone(),
        rows,
        nnz: blocks.iter().map(|b| b.nnz).sum(),
        rows_per_shard: options.rows_per_shard,
        shards,
        blocks,
        ranges: Some(ranges),
    };
    manifest.write(storage)?;
    Ok(manifest)
}

/// The grid as read so far: batches are taken in file order, and each batch's own numbering
/// of variables and keys becomes the file's (first occurrence in the file decides).
struct Reading<'a> {
    options: &'a PrepareOptions,
    storage: &'a dyn Storage,
    /// VW namespaces are numbered per batch as discovered; other formats' variables are
    /// columns, numbered alike in every batch (names can repeat in a CSV header).
    vw: bool,
    /// Every variable numbered so far: (name, dense). Variables are made of a prefix of it,
    /// up to the last that had a feature, as one pass over the file makes them.
    known: Vec<(String, bool)>,
    known_names: HashMap<String, u32>,
    variables: Vec<Variable>,
    shards: Vec<ShardEntry>,
    labels: ShardLabels,
    /// [`shared_empty`]'s object, once written.
    empty_cell: Option<FileRef>,
    rows: u64,
    /// Lines of the file before the batch being taken.
    line_base: u64,
    ranges: DataRanges,
    bar: crate::progress::Counter,
}

impl Reading<'_> {
    fn take(&mut self, mut batch: Batch) -> Result<()> {
        let options = self.options;
        let file = &options.input;
        // The batch's variables and keys in file numbering, new ones numbered in the order
        // the batch first saw them.
        let mut global = Vec::with_capacity(batch.variables.len());
        for (v, variable) in batch.variables.iter().enumerate() {
            let g = if self.vw {
                match self.known_names.get(&variable.name) {
                    Some(&g) => g,
                    None => {
                        self.known_names.insert(variable.name.clone(), self.known.len() as u32);
                        self.known.push((variable.name.clone(), variable.dense));
                        self.known.len() as u32 - 1
                    }
                }
            } else {
                if v >= self.known.len() {
                    self.known.push((variable.name.clone(), variable.dense));
                }
                v as u32
            };
            global.push(g);
        }
        let mut ids: Vec<Vec<u32>> = Vec::with_capacity(batch.variables.len());
        for (v, variable) in batch.variables.iter_mut().enumerate() {
            if !variable.keys.is_empty() {
                self.make_variables(global[v])?;
            }
            let target = self.variables.get_mut(global[v] as usize);
            ids.push(match target {
                Some(target) => std::mem::take(&mut variable.keys).into_iter().map(|k| target.number(k)).collect(),
                None => Vec::new(),
            });
        }
        for r in 0..batch.rows() {
            let line = self.line_base + batch.lines[r];
            let row_in_shard = self.labels.labels.len() as u32;
            let mut row_nnz = 1; // the bias
            for &(v, key, value) in batch.row(r) {
                let g = global[v as usize] as usize;
                // Readers refuse non-finite numbers; a product of finite parts (a VW namespace
                // scale times a value) can still overflow, and nothing non-finite reaches a cell.
                if !value.is_finite() {
                    let key = &self.variables[g].dictionary[ids[v as usize][key as usize] as usize].key;
                    let name = &self.known[g].0;
                    return Err(LineaError::input(
                        file,
                        line,
                        format!(
                            "value of feature {key:?} of {name:?} is {value} (only finite values can be trained on)"
                        ),
                    ));
                }
                self.ranges.value_max_abs = self.ranges.value_max_abs.max(value.abs());
                row_nnz += 1;
                self.variables[g].add(ids[v as usize][key as usize], value, self.rows, row_in_shard);
            }
            let label = batch.labels[r];
            if label.is_nan() {
                return Err(LineaError::input(file, line, "missing label (training needs labelled examples)"));
            }
            if !label.is_finite() {
                return Err(LineaError::input(file, line, format!("label is {label}")));
            }
            self.ranges.label_min = self.ranges.label_min.min(label);
            self.ranges.label_max = self.ranges.label_max.max(label);
            self.ranges.row_nnz_max = self.ranges.row_nnz_max.max(row_nnz);
            self.labels.labels.push(label);
            self.labels.lines.push(line);
            self.rows += 1;
            if self.labels.labels.len() == options.rows_per_shard {
                self.finish_shard()?;
            }
            if self.rows.is_multiple_of(4096) {
                self.bar.set(self.rows);
            }
        }
        if let Some(error) = batch.error {
            return Err(match error {
                LineaError::Input { file, line, message } => {
                    LineaError::Input { file, line: self.line_base + line, message }
                }
                other => other,
            });
        }
        self.line_base += batch.line_count;
        Ok(())
    }

    /// Variables up to `g`, as one pass makes them at a feature of `g`: every variable
    /// numbered before it too, each with an empty cell for every shard already finished.
    fn make_variables(&mut self, g: u32) -> Result<()> {
        while self.variables.len() <= g as usize {
            let (name, dense) = self.known[self.variables.len()].clone();
            let cells = if self.options.spec.format.has_columns() {
                // Before any shard has ended (the usual case: the first line names every
                // column) there is nothing to fill, and nothing to write.
                Cells::Written(match self.shards.len() {
                    0 => Vec::new(),
                    shards => vec![shared_empty(self.storage, &mut self.empty_cell)?; shards],
                })
            } else {
                Cells::Held(vec![codec::encode_cell(&Cell::default()); self.shards.len()])
            };
            self.variables.push(Variable {
                name,
                dense,
                keys: foldhash::HashMap::default(),
                dictionary: Vec::new(),
                nnz: 0,
                set_valued: false,
                last_row: u64::MAX,
                cells,
                pending: Vec::new(),
            });
        }
        Ok(())
    }

    /// Ends the shard being read: each variable's cell of it, and its labels.
    fn finish_shard(&mut self) -> Result<()> {
        let shard = self.shards.len();
        for (v, variable) in self.variables.iter_mut().enumerate() {
            let pending = std::mem::take(&mut variable.pending);
            match &mut variable.cells {
                Cells::Held(cells) => cells.push(codec::encode_cell(&Cell::from_triples(pending))),
                Cells::Written(cells) if pending.is_empty() => {
                    cells.push(shared_empty(self.storage, &mut self.empty_cell)?)
                }
                Cells::Written(cells) => {
                    let bytes = codec::encode_cell(&Cell::from_triples(pending));
                    cells.push(FileRef::write(self.storage, column_cell_key(v, shard), &bytes)?);
                }
            }
        }
        let labels = std::mem::take(&mut self.labels);
        let labels_ref = FileRef::write(self.storage, format!("labels/r{shard:06}"), &codec::encode_labels(&labels))?;
        self.shards.push(ShardEntry { rows: labels.labels.len(), labels: labels_ref });
        Ok(())
    }
}

fn cell_key(block: usize, shard: usize) -> String {
    format!("cells/b{block:05}/r{shard:06}")
}

/// Where the cells of input column `variable` go as they are made ([`Cells::Written`]):
/// named by the column, as its block's number is known only at the end.
fn column_cell_key(variable: usize, shard: usize) -> String {
    format!("cells/c{variable:05}/r{shard:06}")
}

/// The key of the one object every empty cell of a written column names.
const EMPTY_CELL: &str = "cells/empty";

/// [`EMPTY_CELL`]'s object, written at its first use: the label's column and a sparse one
/// would otherwise write a file per shard with nothing in it.
fn shared_empty(storage: &dyn Storage, empty: &mut Option<FileRef>) -> Result<FileRef> {
    if let Some(written) = empty {
        return Ok(written.clone());
    }
    let written = FileRef::write(storage, EMPTY_CELL.into(), &codec::encode_cell(&Cell::default()))?;
    Ok(empty.insert(written).clone())
}

fn write_dictionary(storage: &dyn Storage, block: usize, entries: &[DictionaryEntry]) -> Result<FileRef> {
    FileRef::write(storage, format!("dictionaries/b{block:05}"), &codec::encode_dictionary(entries))
}

/// The always-on bias feature: one pure block whose one feature is 1 in every row.
fn bias_block(storage: &dyn Storage, shards: &[ShardEntry]) -> Result<BlockEntry> {
    let cells = shards
        .iter()
        .enumerate()
        .map(|(s, shard)| {
            let cell = Cell::from_triples((0..shard.rows as u32).map(|r| (r, 0, 1.0)).collect());
            FileRef::write(storage, cell_key(0, s), &codec::encode_cell(&cell))
        })
        .collect::<Result<Vec<_>>>()?;
    let rows: u64 = shards.iter().map(|s| s.rows as u64).sum();
    Ok(BlockEntry {
        name: BIAS.to_string(),
        variable: BIAS.to_string(),
        dense: true,
        pure: true,
        features: 1,
        nnz: rows,
        dictionary: write_dictionary(storage, 0, &[DictionaryEntry { key: String::new(), nnz: rows, max_abs: 1.0 }])?,
        cells,
    })
}

/// Writes a variable as one block (pure) or several (set-valued), numbered from `first`.
fn write_variable(
    storage: &dyn Storage,
    variable: Variable,
    spec: &FeatureSpec,
    rows: u64,
    rows_per_shard: usize,
    first: usize,
) -> Result<Vec<BlockEntry>> {
    let object = |key: &str| storage.describe(key);
    if variable.dictionary.is_empty() {
        return Ok(Vec::new()); // a label or ignored column, or a column that was always missing
    }
    if !variable.set_valued {
        let cells = match variable.cells {
            Cells::Written(cells) => cells,
            Cells::Held(held) => held
                .iter()
                .enumerate()
                .map(|(s, bytes)| FileRef::write(storage, cell_key(first, s), bytes))
                .collect::<Result<Vec<_>>>()?,
        };
        return Ok(vec![BlockEntry {
            name: variable.name.clone(),
            variable: variable.name,
            dense: variable.dense,
            pure: true,
            features: variable.dictionary.len(),
            nnz: variable.nnz,
            dictionary: write_dictionary(storage, first, &variable.dictionary)?,
            cells,
        }]);
    }
    // Set-valued: gather each feature's rows, split, and rewrite the cells per block.
    if rows > u32::MAX as u64 {
        return Err(LineaError::Usage(format!(
            "variable {} is set-valued and the input has {rows} rows; splitting it supports up to 2^32 rows",
            variable.name
        )));
    }
    let held = match variable.cells {
        Cells::Held(held) => held,
        // Not made by any input format (a column has one value a row), but correct if one
        // did: read back, and split like the others.
        Cells::Written(cells) => {
            let held = cells.iter().map(|c| c.read(storage)).collect::<Result<Vec<_>>>()?;
            cells.iter().filter(|c| c.key != EMPTY_CELL).try_for_each(|c| storage.remove(&c.key))?;
            held
        }
    };
    let limit = codec::cell_limit(variable.nnz, variable.dictionary.len() as u64);
    let decoded: Vec<Cell> = held
        .iter()
        .map(|b| {
            codec::decode_cell(b, limit).map_err(|source| LineaError::Engine { object: object(&variable.name), source })
        })
        .collect::<Result<_>>()?;
    let mut feature_rows: Vec<Vec<u32>> = vec![Vec::new(); variable.dictionary.len()];
    for (s, cell) in decoded.iter().enumerate() {
        for (&r, &l) in cell.rows.iter().zip(&cell.local) {
            feature_rows[cell.feature_ids[l as usize] as usize].push((s * rows_per_shard) as u32 + r);
        }
    }
    let assignment = if spec.format == Format::Libsvm {
        partition::pure_coloring(&feature_rows, rows as usize)
    } else {
        let k = (variable.nnz as f64 / rows as f64).round().max(1.0) as usize;
        let k = k.min(variable.dictionary.len()).min(partition::MAX_COLOURS);
        partition::balanced_split(&feature_rows, rows as usize, k)
    };
    let count = assignment.iter().max().map_or(0, |&m| m as usize + 1);
    // Features of each block keep their relative order; `position` maps them to it.
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); count];
    let mut position = vec![0u32; assignment.len()];
    for (f, &b) in assignment.iter().enumerate() {
        position[f] = members[b as usize].len() as u32;
        members[b as usize].push(f as u32);
    }
    // One pass over each shard's non-zeros sorts them into the blocks' cells: the work is
    // linear in the non-zeros whatever the number of blocks.
    let mut cells: Vec<Vec<FileRef>> = vec![Vec::with_capacity(decoded.len()); count];
    for (s, cell) in decoded.iter().enumerate() {
        let mut triples: Vec<Vec<(u32, u32, f64)>> = vec![Vec::new(); count];
        for k in 0..cell.nnz() {
            let f = cell.feature_ids[cell.local[k] as usize] as usize;
            triples[assignment[f] as usize].push((cell.rows[k], position[f], cell.value(k)));
        }
        for (b, triples) in triples.into_iter().enumerate() {
            let bytes = codec::encode_cell(&Cell::from_triples(triples));
            cells[b].push(FileRef::write(storage, cell_key(first + b, s), &bytes)?);
        }
    }
    let mut blocks = Vec::with_capacity(count);
    for ((b, features), cells) in members.iter().enumerate().zip(cells) {
        let index = first + b;
        let dictionary: Vec<DictionaryEntry> =
            features.iter().map(|&f| variable.dictionary[f as usize].clone()).collect();
        blocks.push(BlockEntry {
            name: if count == 1 { variable.name.clone() } else { format!("{}#{b}", variable.name) },
            variable: variable.name.clone(),
            dense: false,
            pure: partition::members_are_pure(&feature_rows, rows as usize, features),
            features: features.len(),
            nnz: dictionary.iter().map(|d| d.nnz).sum(),
            dictionary: write_dictionary(storage, index, &dictionary)?,
            cells,
        });
    }
    Ok(blocks)
}
