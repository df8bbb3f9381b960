//! Reading a prepared grid into memory, every object checked against its checksum.

use crate::error::{LineaError, Result};
use crate::manifest::{FileRef, Manifest};
use crate::storage::Storage;
use linea_engine::codec::{self, DictionaryEntry};
use linea_engine::grid::{BlockShape, Cell};
use linea_engine::scd::local::InMemoryGrid;
use linea_engine::{EngineError, Loss};
use rayon::prelude::*;

pub struct LoadedGrid {
    pub manifest: Manifest,
    pub grid: InMemoryGrid,
    pub dictionaries: Vec<Vec<DictionaryEntry>>,
}

fn engine_error(storage: &dyn Storage, file: &FileRef) -> impl Fn(EngineError) -> LineaError {
    let object = storage.describe(&file.key);
    move |source| LineaError::Engine { object: object.clone(), source }
}

pub fn load(storage: &dyn Storage, loss: Loss) -> Result<LoadedGrid> {
    let manifest = Manifest::read(storage)?;
    let targets = manifest
        .shards
        .par_iter()
        .map(|shard| {
            let labels =
                codec::decode_labels(&shard.labels.read(storage)?).map_err(engine_error(storage, &shard.labels))?;
            if labels.labels.len() != shard.rows {
                return Err(LineaError::data(
                    storage.describe(&shard.labels.key),
                    "row count differs from the manifest",
                ));
            }
            labels
                .labels
                .iter()
                .zip(&labels.lines)
                .map(|(&label, &line)| {
                    loss.target(label).map_err(|e| LineaError::input(&manifest.source, line, e.to_string()))
                })
                .collect::<Result<Vec<f64>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let dictionaries = manifest
        .blocks
        .par_iter()
        .map(|b| codec::decode_dictionary(&b.dictionary.read(storage)?).map_err(engine_error(storage, &b.dictionary)))
        .collect::<Result<Vec<_>>>()?;
    if let Some(block) = manifest.blocks.iter().find(|b| b.cells.len() != manifest.shards.len()) {
        return Err(LineaError::data(
            storage.describe(crate::manifest::MANIFEST),
            format!("block {} lists {} cells for {} row shards", block.name, block.cells.len(), manifest.shards.len()),
        ));
    }
    let cells = manifest
        .blocks
        .par_iter()
        .map(|block| {
            block
                .cells
                .iter()
                .zip(&manifest.shards)
                .map(|(file, shard)| {
                    let cell = codec::decode_cell(&file.read(storage)?).map_err(engine_error(storage, file))?;
                    check_cell(&cell, block.features, shard.rows).map_err(engine_error(storage, file))?;
                    Ok(cell)
                })
                .collect::<Result<Vec<Cell>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let shapes = manifest
        .blocks
        .iter()
        .zip(&dictionaries)
        .map(|(b, d)| BlockShape { features: b.features, pure: b.pure, max_abs: d.iter().map(|e| e.max_abs).collect() })
        .collect();
    Ok(LoadedGrid { grid: InMemoryGrid { shapes, cells, targets }, dictionaries, manifest })
}

/// A cell that decodes but points outside its block or shard is corrupt too.
fn check_cell(cell: &Cell, features: usize, rows: usize) -> Result<(), EngineError> {
    let bad = |what: &str| Err(EngineError::Corrupt(format!("{what} out of range")));
    if cell.feature_ids.last().is_some_and(|&f| f as usize >= features) {
        return bad("feature id");
    }
    if cell.rows.last().is_some_and(|&r| r as usize >= rows) {
        return bad("row");
    }
    if let linea_engine::CellValues::Real(v) = &cell.values
        && v.iter().any(|x| !x.is_finite())
    {
        return Err(EngineError::Corrupt("non-finite value".into()));
    }
    Ok(())
}
