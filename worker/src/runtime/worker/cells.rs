//! Cells for a worker's kernels: the cache, and for a unit taken over from another worker,
//! that worker's cache hedged by a storage read.

use super::grid::Grid;
use super::{HEDGE_AFTER, WorkerCore, remote};
use crate::error::{LineaError, Result};
use crate::runtime::proto;
use linea_engine::grid::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Where a cell read failed: the peer (with its gRPC status) or storage.
enum CellError {
    Peer(tonic::Status),
    Storage(LineaError),
}

impl WorkerCore {
    /// Loads the next block's cell of a shard in the background, so the next statistics
    /// item finds it in the cache.
    pub(super) fn prefetch(self: &Arc<Self>, block: usize, shard: usize) {
        let (core, grid) = (self.clone(), self.grid());
        self.runtime.spawn_blocking(move || {
            if let Err(e) = core.cell(&grid, block, shard, None) {
                tracing::debug!(block, shard, %e, "prefetch failed; the item will read it again");
            }
        });
    }

    /// A cell: from the cache, else from `peer` (the previous owner of the unit that reads
    /// it) hedged by a storage read, else from storage.
    pub(super) fn cell(&self, grid: &Arc<Grid>, block: usize, shard: usize, peer: Option<&str>) -> Result<Arc<Cell>> {
        if let Some(cell) = grid.cells.get((block, shard)) {
            return Ok(cell);
        }
        let bytes = match peer {
            Some(peer) => self.hedged_cell_bytes(grid, peer, block, shard)?,
            None => {
                self.traffic.cells_from_storage.fetch_add(1, Ordering::Relaxed);
                grid.read_cell_bytes(block, shard)?
            }
        };
        let cell = Arc::new(grid.decode_cell(block, shard, &bytes)?);
        grid.cells.insert((block, shard), cell.clone(), Arc::new(bytes));
        Ok(cell)
    }

    /// Asks `peer` for a cell's bytes; if it has not answered after [`HEDGE_AFTER`] (or
    /// cannot help), reads storage too; the first good answer wins, the other is dropped.
    /// Peer bytes are checked against the manifest's checksum like storage bytes.
    fn hedged_cell_bytes(&self, grid: &Arc<Grid>, peer: &str, block: usize, shard: usize) -> Result<Vec<u8>> {
        let (answers, answer) = std::sync::mpsc::channel::<(bool, Result<Vec<u8>, CellError>)>();
        let mut client = self.peer(peer)?;
        let to_us = answers.clone();
        let request = proto::FetchCellRequest { block: block as u32, shard: shard as u32 };
        let asking = self.runtime.spawn(async move {
            let reply = client.fetch_cell(request).await;
            let _ = to_us.send((true, reply.map(|r| r.into_inner().compressed).map_err(CellError::Peer)));
        });
        let expected = grid.manifest.blocks[block].cells[shard].crc32c;
        let read_storage = || {
            let (grid, to_us) = (grid.clone(), answers.clone());
            std::thread::spawn(move || {
                let _ = to_us.send((false, grid.read_cell_bytes(block, shard).map_err(CellError::Storage)));
            });
        };
        let mut storage_asked = false;
        loop {
            let (from_peer, result) = match answer.recv_timeout(HEDGE_AFTER) {
                Ok(received) => received,
                Err(_) if !storage_asked => {
                    storage_asked = true;
                    read_storage();
                    continue;
                }
                Err(_) => continue,
            };
            match (from_peer, result) {
                (true, Ok(bytes)) if linea_engine::codec::checksum(&bytes) == expected => {
                    self.traffic.cells_from_peers.fetch_add(1, Ordering::Relaxed);
                    return Ok(bytes);
                }
                (true, outcome) => {
                    if let Err(CellError::Peer(status)) = &outcome
                        && status.code() == tonic::Code::Unavailable
                    {
                        // The previous owner is gone: its other units' cells come from storage.
                        self.peer_hints.lock().expect("hints lock").retain(|_, p| p != peer);
                    }
                    if !storage_asked {
                        storage_asked = true;
                        read_storage();
                    }
                }
                (false, outcome) => {
                    asking.abort();
                    self.traffic.cells_from_storage.fetch_add(1, Ordering::Relaxed);
                    return outcome.map_err(|e| match e {
                        CellError::Storage(e) => e,
                        CellError::Peer(status) => remote(peer)(status),
                    });
                }
            }
        }
    }
}
