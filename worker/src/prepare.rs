//! `linea prepare`: raw input -> the block x row-shard grid (SCD section 4.1).
//!
//! One streaming pass reads the input, numbers every (variable, key) feature, and at the end
//! of each row shard compresses that shard's non-zeros per variable and writes its labels.
//! Then each variable becomes blocks: a pure variable is one block; a set-valued one is
//! split ([`linea_engine::partition`]); a constant bias block is added. Cells, dictionaries
//! and finally the manifest are written. An old manifest is removed first, so an
//! interrupted run never leaves a grid that looks complete.

use crate::error::{LineaError, Result};
use crate::input::source::{InputFingerprint, RawInput, RemoteObject};
use crate::input::{self, FeatureSpec, Format, RawExample};
use crate::manifest::{BlockEntry, DataRanges, FileRef, GRID_FORMAT, MANIFEST, Manifest, ShardEntry};
use crate::progress::Progress;
use crate::storage::Storage;
use linea_engine::codec::{self, DictionaryEntry, ShardLabels};
use linea_engine::grid::Cell;
use linea_engine::partition;

pub const BIAS: &str = "(bias)";

pub struct PrepareOptions {
    /// A local file or an `s3://bucket/key` object.
    pub input: String,
    pub spec: FeatureSpec,
    pub rows_per_shard: usize,
    /// Keep the grid already at the output when it was prepared from this very input (see
    /// [`current_grid`]) instead of preparing it again.
    pub reuse: bool,
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
    cells: Vec<Vec<u8>>,
    /// (row in shard, feature, value) of the shard being read.
    pending: Vec<(u32, u32, f64)>,
}

impl Variable {
    fn add(&mut self, key: &str, value: f64, row: u64, row_in_shard: u32) {
        // Look up before inserting: most keys are known, and an owned key costs an allocation.
        let id = match self.keys.get(key) {
            Some(&id) => id,
            None => {
                let id = self.dictionary.len() as u32;
                self.keys.insert(key.into(), id);
                self.dictionary.push(DictionaryEntry { key: key.to_string(), nnz: 0, max_abs: 0.0 });
                id
            }
        };
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
    let mut reader = input::open(&input.path, &options.spec)?;
    let mut variables: Vec<Variable> = Vec::new();
    let mut shards: Vec<ShardEntry> = Vec::new();
    let mut labels = ShardLabels::default();
    let mut example = RawExample::default();
    let mut rows = 0u64;
    let mut ranges =
        DataRanges { label_min: f64::INFINITY, label_max: f64::NEG_INFINITY, value_max_abs: 1.0, row_nnz_max: 1 };
    let bar = progress.counter("reading", "examples");
    while reader.read(&mut example)? {
        let row_in_shard = labels.labels.len() as u32;
        let mut row_nnz = 1; // the bias
        for (v, key, value) in example.features() {
            // Readers refuse non-finite numbers; a product of finite parts (a VW namespace
            // scale times a value) can still overflow, and nothing non-finite reaches a cell.
            if !value.is_finite() {
                let name = reader.variable_name(v);
                return Err(LineaError::input(
                    &options.input,
                    example.line,
                    format!("value of feature {key:?} of {name:?} is {value} (only finite values can be trained on)"),
                ));
            }
            ranges.value_max_abs = ranges.value_max_abs.max(value.abs());
            row_nnz += 1;
            while variables.len() <= v as usize {
                let id = variables.len() as u32;
                variables.push(Variable {
                    name: reader.variable_name(id).to_string(),
                    dense: reader.is_dense(id),
                    keys: foldhash::HashMap::default(),
                    dictionary: Vec::new(),
                    nnz: 0,
                    set_valued: false,
                    last_row: u64::MAX,
                    cells: vec![codec::encode_cell(&Cell::default()); shards.len()],
                    pending: Vec::new(),
                });
            }
            variables[v as usize].add(key, value, rows, row_in_shard);
        }
        if example.label.is_nan() {
            return Err(LineaError::input(
                &options.input,
                example.line,
                "missing label (training needs labelled examples)",
            ));
        }
        if !example.label.is_finite() {
            return Err(LineaError::input(&options.input, example.line, format!("label is {}", example.label)));
        }
        ranges.label_min = ranges.label_min.min(example.label);
        ranges.label_max = ranges.label_max.max(example.label);
        ranges.row_nnz_max = ranges.row_nnz_max.max(row_nnz);
        labels.labels.push(example.label);
        labels.lines.push(example.line);
        rows += 1;
        if labels.labels.len() == options.rows_per_shard {
            finish_shard(storage, &mut variables, &mut shards, &mut labels)?;
        }
        if rows.is_multiple_of(4096) {
            bar.set(rows);
        }
    }
    if !labels.labels.is_empty() {
        finish_shard(storage, &mut variables, &mut shards, &mut labels)?;
    }
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

fn finish_shard(
    storage: &dyn Storage,
    variables: &mut [Variable],
    shards: &mut Vec<ShardEntry>,
    labels: &mut ShardLabels,
) -> Result<()> {
    let shard = shards.len();
    for variable in variables.iter_mut() {
        let cell = Cell::from_triples(std::mem::take(&mut variable.pending));
        variable.cells.push(codec::encode_cell(&cell));
    }
    let labels_ref = FileRef::write(storage, format!("labels/r{shard:06}"), &codec::encode_labels(labels))?;
    shards.push(ShardEntry { rows: labels.labels.len(), labels: labels_ref });
    *labels = ShardLabels::default();
    Ok(())
}

fn cell_key(block: usize, shard: usize) -> String {
    format!("cells/b{block:05}/r{shard:06}")
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
        let cells = variable
            .cells
            .iter()
            .enumerate()
            .map(|(s, bytes)| FileRef::write(storage, cell_key(first, s), bytes))
            .collect::<Result<Vec<_>>>()?;
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
    let limit = codec::cell_limit(variable.nnz, variable.dictionary.len() as u64);
    let decoded: Vec<Cell> = variable
        .cells
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
