//! Reading a prepared grid, every object checked against its checksum: whole into memory
//! for one process ([`load`]), or piece by piece for the distributed runtime ([`Layout`],
//! [`read_targets`], [`read_cell`]).

use crate::error::{LineaError, Result};
use crate::manifest::{FileRef, Manifest};
use crate::storage::Storage;
use linea_engine::codec::{self, DictionaryEntry};
use linea_engine::grid::InMemoryGrid;
use linea_engine::grid::{BlockShape, Cell};
use linea_engine::{EngineError, Loss};
use rayon::prelude::*;

/// What a grid holds without its cells: enough to run the algorithm. The dictionaries
/// (a key string per feature, ~50 bytes per feature in memory) are not kept: training
/// needs only each feature's max |x| (in `shapes`); the model's keys are read block by
/// block when it is written ([`Layout::dictionary`]).
pub struct Layout {
    pub manifest: Manifest,
    pub shapes: Vec<BlockShape>,
}

pub struct LoadedGrid {
    pub layout: Layout,
    pub grid: InMemoryGrid,
}

fn engine_error(storage: &dyn Storage, file: &FileRef) -> impl Fn(EngineError) -> LineaError {
    let object = storage.describe(&file.key);
    move |source| LineaError::Engine { object: object.clone(), source }
}

impl Layout {
    pub fn read(storage: &dyn Storage) -> Result<Layout> {
        let manifest = Manifest::read(storage)?;
        if let Some(block) = manifest.blocks.iter().find(|b| b.cells.len() != manifest.shards.len()) {
            return Err(LineaError::data(
                storage.describe(crate::manifest::MANIFEST),
                format!(
                    "block {} lists {} cells for {} row shards",
                    block.name,
                    block.cells.len(),
                    manifest.shards.len()
                ),
            ));
        }
        let shapes = (0..manifest.blocks.len())
            .into_par_iter()
            .map(|block| {
                let b = &manifest.blocks[block];
                let dictionary = read_dictionary(storage, &manifest, block)?;
                Ok(BlockShape {
                    features: b.features,
                    pure: b.pure,
                    max_abs: dictionary.iter().map(|e| e.max_abs).collect(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Layout { manifest, shapes })
    }

    /// Block `block`'s dictionary (its features' keys, in the block's order), read again.
    pub fn dictionary(&self, storage: &dyn Storage, block: usize) -> Result<Vec<DictionaryEntry>> {
        read_dictionary(storage, &self.manifest, block)
    }
}

fn read_dictionary(storage: &dyn Storage, manifest: &Manifest, block: usize) -> Result<Vec<DictionaryEntry>> {
    let b = &manifest.blocks[block];
    let limit = codec::dictionary_limit(b.features as u64);
    let dictionary =
        codec::decode_dictionary(&b.dictionary.read(storage)?, limit).map_err(engine_error(storage, &b.dictionary))?;
    if dictionary.len() != b.features {
        return Err(LineaError::data(storage.describe(&b.dictionary.key), "feature count differs from the manifest"));
    }
    Ok(dictionary)
}

/// The targets of one row shard, in the grid's [`Manifest::target_scale`]; a label the loss
/// cannot take is named by its source line.
pub fn read_targets(storage: &dyn Storage, manifest: &Manifest, shard: usize, loss: Loss) -> Result<Vec<f64>> {
    let scale = manifest.target_scale(loss);
    let entry = &manifest.shards[shard];
    let limit = codec::labels_limit(entry.rows as u64);
    let labels =
        codec::decode_labels(&entry.labels.read(storage)?, limit).map_err(engine_error(storage, &entry.labels))?;
    if labels.labels.len() != entry.rows {
        return Err(LineaError::data(storage.describe(&entry.labels.key), "row count differs from the manifest"));
    }
    labels
        .labels
        .iter()
        .zip(&labels.lines)
        .map(|(&label, &line)| {
            loss.target(label)
                .map(|t| scale.scale(t))
                .map_err(|e| LineaError::input(&manifest.source, line, e.to_string()))
        })
        .collect()
}

/// One cell, read from storage, decoded and checked against its block and shard.
pub fn read_cell(storage: &dyn Storage, manifest: &Manifest, block: usize, shard: usize) -> Result<Cell> {
    let bytes = manifest.blocks[block].cells[shard].read(storage)?;
    decode_cell(storage, manifest, block, shard, &bytes)
}

/// Decodes a cell's compressed bytes, from storage or from a peer's cache, after checking
/// them against the manifest's checksum.
pub fn decode_cell(
    storage: &dyn Storage,
    manifest: &Manifest,
    block: usize,
    shard: usize,
    bytes: &[u8],
) -> Result<Cell> {
    let file = &manifest.blocks[block].cells[shard];
    codec::verify_checksum(bytes, file.crc32c).map_err(engine_error(storage, file))?;
    let entry = &manifest.blocks[block];
    let limit = codec::cell_limit(entry.nnz, entry.features as u64);
    let cell = codec::decode_cell(bytes, limit).map_err(engine_error(storage, file))?;
    check_cell(&cell, entry.features, manifest.shards[shard].rows).map_err(engine_error(storage, file))?;
    Ok(cell)
}

pub fn load(storage: &dyn Storage, loss: Loss) -> Result<LoadedGrid> {
    let layout = Layout::read(storage)?;
    let manifest = &layout.manifest;
    let targets = (0..manifest.shards.len())
        .into_par_iter()
        .map(|shard| read_targets(storage, manifest, shard, loss))
        .collect::<Result<Vec<_>>>()?;
    let cells = (0..manifest.blocks.len())
        .into_par_iter()
        .map(|block| (0..manifest.shards.len()).map(|shard| read_cell(storage, manifest, block, shard)).collect())
        .collect::<Result<Vec<Vec<Cell>>>>()?;
    let grid = InMemoryGrid { shapes: layout.shapes.clone(), cells, targets };
    Ok(LoadedGrid { layout, grid })
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
    let finite = match &cell.values {
        linea_engine::CellValues::Ones => true,
        linea_engine::CellValues::Real(v) => v.iter().all(|x| x.is_finite()),
        linea_engine::CellValues::Real32(v) => v.iter().all(|x| x.is_finite()),
    };
    if !finite {
        return Err(EngineError::Corrupt("non-finite value".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use linea_engine::CellValues;

    #[test]
    fn a_cell_outside_its_block_or_shard_or_with_a_non_finite_value_is_corrupt() {
        let cell = Cell::from_triples(vec![(0, 0, 0.5), (3, 2, 1.5)]);
        assert!(check_cell(&cell, 3, 4).is_ok());
        assert!(check_cell(&cell, 2, 4).unwrap_err().to_string().contains("feature id out of range"));
        assert!(check_cell(&cell, 3, 3).unwrap_err().to_string().contains("row out of range"));
        // However the values are held: f64, or f32 as a grid may store them.
        for values in [CellValues::Real(vec![0.5, f64::NAN]), CellValues::Real32(vec![f32::INFINITY, 1.5])] {
            let bad = Cell { values, ..cell.clone() };
            assert!(check_cell(&bad, 3, 4).unwrap_err().to_string().contains("non-finite"), "{bad:?}");
        }
    }
}
