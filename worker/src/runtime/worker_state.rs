//! What a worker keeps between items: the grid it reads (cells in an LRU cache, targets),
//! the state of the row shards it owns (predictions and snapshots, with the version of the
//! model they match) and the partial statistics waiting for their aggregator.

use crate::error::Result;
use crate::gridload;
use crate::manifest::Manifest;
use crate::storage::Storage;
use linea_engine::Loss;
use linea_engine::grid::{Cell, CellValues};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The grid of the current job.
pub struct Grid {
    pub storage: Box<dyn Storage>,
    pub manifest: Manifest,
    pub loss: Loss,
    pub location: String,
    targets: Mutex<HashMap<usize, Arc<Vec<f64>>>>,
    pub cells: CellCache,
}

impl Grid {
    pub fn open(location: &str, loss: Loss, cache_bytes: usize) -> Result<Grid> {
        let storage = crate::storage::open(location)?;
        let manifest = Manifest::read(storage.as_ref())?;
        Ok(Grid {
            storage,
            manifest,
            loss,
            location: location.to_string(),
            targets: Mutex::new(HashMap::new()),
            cells: CellCache::new(cache_bytes),
        })
    }

    pub fn targets(&self, shard: usize) -> Result<Arc<Vec<f64>>> {
        if let Some(t) = self.targets.lock().expect("targets lock").get(&shard) {
            return Ok(t.clone());
        }
        let targets = Arc::new(gridload::read_targets(self.storage.as_ref(), &self.manifest, shard, self.loss)?);
        self.targets.lock().expect("targets lock").insert(shard, targets.clone());
        Ok(targets)
    }

    pub fn cell(&self, block: usize, shard: usize) -> Result<Arc<Cell>> {
        self.cells.get((block, shard), || gridload::read_cell(self.storage.as_ref(), &self.manifest, block, shard))
    }

    pub fn rows(&self, shard: usize) -> usize {
        self.manifest.shards[shard].rows
    }
}

/// Decoded cells, least recently used evicted first once over budget.
pub struct CellCache {
    budget: usize,
    inner: Mutex<Lru>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

#[derive(Default)]
struct Lru {
    entries: HashMap<(usize, usize), (Arc<Cell>, u64, usize)>,
    order: BTreeMap<u64, (usize, usize)>,
    tick: u64,
    bytes: usize,
}

fn cell_bytes(cell: &Cell) -> usize {
    let values = match &cell.values {
        CellValues::Ones => 0,
        CellValues::Real(v) => v.len() * 8,
    };
    cell.rows.len() * 4 + cell.local.len() * 4 + cell.feature_ids.len() * 4 + values + 64
}

impl CellCache {
    pub fn new(budget: usize) -> Self {
        Self { budget, inner: Mutex::new(Lru::default()), hits: AtomicU64::new(0), misses: AtomicU64::new(0) }
    }

    pub fn get(&self, key: (usize, usize), load: impl FnOnce() -> Result<Cell>) -> Result<Arc<Cell>> {
        {
            let mut lru = self.inner.lock().expect("cache lock");
            lru.tick += 1;
            let tick = lru.tick;
            if let Some((cell, used, _)) = lru.entries.get_mut(&key) {
                let (cell, old) = (cell.clone(), std::mem::replace(used, tick));
                lru.order.remove(&old);
                lru.order.insert(tick, key);
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(cell);
            }
        }
        // Loaded outside the lock, so other threads keep hitting the cache meanwhile.
        self.misses.fetch_add(1, Ordering::Relaxed);
        let cell = Arc::new(load()?);
        let size = cell_bytes(&cell);
        let mut lru = self.inner.lock().expect("cache lock");
        lru.tick += 1;
        let tick = lru.tick;
        if let Some((_, old, old_size)) = lru.entries.insert(key, (cell.clone(), tick, size)) {
            lru.order.remove(&old);
            lru.bytes -= old_size;
        }
        lru.order.insert(tick, key);
        lru.bytes += size;
        while lru.bytes > self.budget && lru.order.len() > 1 {
            let (_, victim) = lru.order.pop_first().expect("non-empty");
            if let Some((_, _, victim_size)) = lru.entries.remove(&victim) {
                lru.bytes -= victim_size;
            }
        }
        Ok(cell)
    }
}

/// A row shard's predictions and snapshots, valid for model `version`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardState {
    pub version: u64,
    pub predictions: Vec<i64>,
    pub snapshots: Vec<Vec<i64>>,
}

/// Partial statistics of one phase: sums over the listed shards.
pub struct Partial {
    pub shards: Vec<u32>,
    pub gradient: Vec<i128>,
    pub curvature: Vec<i128>,
}

/// The parameters of one model version, as the master sent them (for rebuilding shards).
pub struct ModelAt {
    pub version: u64,
    pub theta: Vec<Vec<f64>>,
    pub snapshots: Vec<Vec<Vec<f64>>>,
}

/// Rebuilds a shard's state from the model: the same integers the incremental updates
/// produce (engine::fixed).
pub fn rebuild(grid: &Grid, shard: usize, model: &ModelAt) -> Result<ShardState> {
    let rows = grid.rows(shard);
    let mut predictions = vec![0i64; rows];
    let mut snapshots = vec![vec![0i64; rows]; model.snapshots.len()];
    for block in 0..grid.manifest.blocks.len() {
        let cell = grid.cell(block, shard)?;
        let zeros = vec![0.0; model.theta[block].len()];
        linea_engine::scd::kernels::cell_update_predictions(&cell, &zeros, &model.theta[block], &mut predictions);
        for (snapshot, theta) in snapshots.iter_mut().zip(&model.snapshots) {
            linea_engine::scd::kernels::cell_update_predictions(&cell, &zeros, &theta[block], snapshot);
        }
    }
    Ok(ShardState { version: model.version, predictions, snapshots })
}
