//! The grid a worker reads: the manifest, targets per shard, and cells in an LRU cache
//! bounded by bytes.

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

    /// A cell's compressed bytes from storage, checksum verified.
    pub fn read_cell_bytes(&self, block: usize, shard: usize) -> Result<Vec<u8>> {
        self.manifest.blocks[block].cells[shard].read(self.storage.as_ref())
    }

    pub fn decode_cell(&self, block: usize, shard: usize, bytes: &[u8]) -> Result<Cell> {
        gridload::decode_cell(self.storage.as_ref(), &self.manifest, block, shard, bytes)
    }

    pub fn rows(&self, shard: usize) -> usize {
        self.manifest.shards[shard].rows
    }
}

/// Cells, compressed (as stored: what peers are served) and decoded (what kernels read),
/// least recently used evicted first once over budget.
pub struct CellCache {
    budget: usize,
    inner: Mutex<Lru>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

type CellKey = (usize, usize);

struct Entry {
    cell: Arc<Cell>,
    compressed: Arc<Vec<u8>>,
    used: u64,
    bytes: usize,
}

#[derive(Default)]
struct Lru {
    entries: HashMap<CellKey, Entry>,
    order: BTreeMap<u64, CellKey>,
    tick: u64,
    bytes: usize,
}

impl Lru {
    fn touch(&mut self, key: CellKey) -> Option<&Entry> {
        self.tick += 1;
        let tick = self.tick;
        let entry = self.entries.get_mut(&key)?;
        let old = std::mem::replace(&mut entry.used, tick);
        self.order.remove(&old);
        self.order.insert(tick, key);
        self.entries.get(&key)
    }
}

fn cell_bytes(cell: &Cell) -> usize {
    let values = match &cell.values {
        CellValues::Ones => 0,
        CellValues::Real(v) => v.len() * 8,
        CellValues::Real32(v) => v.len() * 4,
    };
    cell.rows.heap_bytes() + cell.local.heap_bytes() + cell.feature_ids.len() * 4 + values + 64
}

impl CellCache {
    pub fn new(budget: usize) -> Self {
        Self { budget, inner: Mutex::new(Lru::default()), hits: AtomicU64::new(0), misses: AtomicU64::new(0) }
    }

    pub fn get(&self, key: CellKey) -> Option<Arc<Cell>> {
        let cell = self.inner.lock().expect("cache lock").touch(key).map(|e| e.cell.clone());
        let counter = if cell.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        cell
    }

    /// The stored bytes of a cached cell, for a peer.
    pub fn compressed(&self, key: CellKey) -> Option<Arc<Vec<u8>>> {
        self.inner.lock().expect("cache lock").touch(key).map(|e| e.compressed.clone())
    }

    pub fn insert(&self, key: CellKey, cell: Arc<Cell>, compressed: Arc<Vec<u8>>) {
        let bytes = cell_bytes(&cell) + compressed.len();
        let mut lru = self.inner.lock().expect("cache lock");
        lru.tick += 1;
        let used = lru.tick;
        if let Some(old) = lru.entries.insert(key, Entry { cell, compressed, used, bytes }) {
            lru.order.remove(&old.used);
            lru.bytes -= old.bytes;
        }
        lru.order.insert(used, key);
        lru.bytes += bytes;
        while lru.bytes > self.budget && lru.order.len() > 1 {
            let (_, victim) = lru.order.pop_first().expect("non-empty");
            if let Some(entry) = lru.entries.remove(&victim) {
                lru.bytes -= entry.bytes;
            }
        }
    }
}
