//! What a CoCoA scale-in costs the worker that builds a merged slot on the distributed
//! runtime (issue 14): its rows fetched from the workers that held the old slots (the
//! handover: each holder encodes its slot's rows, the taker fetches all of them at once over
//! the Peer service, checks each part's CRC-32C and structure, and merges them) against
//! reading them from storage again (a fresh grid with an empty cell cache: the cells of the
//! slot's shards read, checksum-verified and decoded, then gathered), for each step of
//! 16 -> 4 -> 1. Wall seconds of the slowest merged slot and bytes moved per step.
//!
//! `handover-cost [--repeats 3] [--path 16,4,1] NAME=GRID ...`
//!
//! The Peer service runs in this process on loopback, in plain text (no TLS), with the job
//! secret checked as on every job RPC; storage is the grid's local folder (a warm page
//! cache: S3 would be slower). Each merged slot is checked equal to the gathered one.

use linea_bench::scale_in::{self, hinge_kernel};
use linea_engine::Loss;
use linea_engine::algorithm::{GridSource, Kernel};
use linea_engine::cocoa::{CocoaKernel, SlotBase, SlotState};
use linea_engine::grid::Cell;
use linea_proto::auth::JobSecret;
use linea_proto::client::{Expect, Timeouts};
use linea_proto::peer::PeerBackend;
use linea_proto::tls::{Transport, WORKER_NAME};
use linea_proto::v1 as proto;
use linea_worker::error::LineaError;
use linea_worker::gridload;
use linea_worker::runtime::worker::grid::Grid;
use linea_worker::runtime::worker::handover::{PART_PATIENCE, fetch_all, sealed};
use linea_worker::storage::LocalStorage;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

struct Args {
    repeats: usize,
    path: Vec<u32>,
    sets: Vec<(String, String)>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args { repeats: 3, path: vec![16, 4, 1], sets: Vec::new() };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--repeats" => args.repeats = scale_in::repeats(&value("--repeats")?)?,
            "--path" => args.path = scale_in::path(&value("--path")?)?,
            _ => args.sets.push(linea_bench::named_grid(&arg)?),
        }
    }
    if args.sets.is_empty() {
        return Err("no set: expected NAME=GRID".into());
    }
    Ok(args)
}

/// The grid as a worker with an empty cache reads it: every cell from storage, counted.
struct FromStorage {
    grid: Grid,
    bytes: AtomicU64,
}

impl GridSource for FromStorage {
    type Error = LineaError;
    type CellRef<'b>
        = Box<Cell>
    where
        Self: 'b;
    type TargetsRef<'b>
        = Targets
    where
        Self: 'b;
    fn blocks(&self) -> usize {
        self.grid.manifest.blocks.len()
    }
    fn shards(&self) -> usize {
        self.grid.manifest.shards.len()
    }
    fn rows(&self, shard: usize) -> usize {
        self.grid.rows(shard)
    }
    fn cell(&self, block: usize, shard: usize) -> Result<Box<Cell>, LineaError> {
        let bytes = self.grid.read_cell_bytes(block, shard)?;
        self.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(Box::new(self.grid.decode_cell(block, shard, &bytes)?))
    }
    fn targets(&self, shard: usize) -> Result<Targets, LineaError> {
        Ok(Targets(self.grid.targets(shard)?))
    }
}

/// A shard's targets as the grid keeps them.
struct Targets(Arc<Vec<f64>>);

impl std::ops::Deref for Targets {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        &self.0
    }
}

/// The holders' side: the old slots' states, served as parts of session "old".
struct Holders {
    kernel: CocoaKernel,
    states: Mutex<Vec<SlotState>>,
    served: AtomicU64,
}

impl PeerBackend for Holders {
    fn in_session(&self, session: &str) -> bool {
        session == "old"
    }
    fn partial(&self, _: u64, _: usize, _: usize) -> Option<proto::Partial> {
        None
    }
    fn unit_state(&self, _: u32, _: u64) -> Option<Vec<u8>> {
        None
    }
    fn cell(&self, _: u32, _: u32) -> Option<Vec<u8>> {
        None
    }
    fn part(&self, session: &str, unit: u32) -> Option<proto::UnitPart> {
        let states = self.states.lock().expect("states lock");
        if session != "old" {
            return None;
        }
        let part = self.kernel.encode_part(states.get(unit as usize)?)?;
        self.served.fetch_add(part.len() as u64, Ordering::Relaxed);
        Some(sealed(part))
    }
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    });
    let fail = |what: String| -> ! {
        eprintln!("error: {what}");
        std::process::exit(1)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // Lazy channels spawn their connection on the current runtime.
    let _runtime = runtime.enter();
    let secret = JobSecret::generate();
    let partitions = args.path[0];
    println!(
        "| set | step | rows per merged slot | storage: slowest slot, s | storage: cell bytes read | peers: slowest slot, s | peers: part bytes sent | storage / peers (wall) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, dir) in &args.sets {
        let loaded = gridload::load(&LocalStorage::new(dir.as_str()), Loss::Hinge)
            .unwrap_or_else(|e| fail(format!("{name}: {e}")));
        let grid = loaded.grid;
        let mut old = hinge_kernel(&grid, args.path[0], partitions).unwrap_or_else(|e| fail(format!("{name}: {e}")));
        let mut states: Vec<SlotState> =
            (0..old.units()).map(|u| old.fresh(u, &grid).unwrap_or_else(|e| fail(format!("{name}: {e}")))).collect();
        for &slots in &args.path[1..] {
            let new = hinge_kernel(&grid, slots, partitions).unwrap_or_else(|e| fail(format!("{name}: {e}")));
            let holders = Arc::new(Holders {
                kernel: old.clone(),
                states: Mutex::new(std::mem::take(&mut states)),
                served: AtomicU64::new(0),
            });
            let address = runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let address = format!("http://{}", listener.local_addr().unwrap());
                let service = linea_proto::server::peer(holders.clone(), &secret);
                let server = linea_proto::server::builder(&Transport::Plaintext).unwrap().add_service(service);
                tokio::spawn(server.serve_with_incoming(linea_proto::server::incoming(listener)));
                address
            });
            // One connection to the holders, as a worker keeps one per peer.
            let channel = linea_proto::client::lazy_channel(
                &address,
                Timeouts::RUNTIME,
                &Transport::Plaintext,
                Expect::Name(WORKER_NAME),
            )
            .unwrap_or_else(|e| fail(format!("{e}")));
            let (mut storage_wall, mut peer_wall) = (f64::INFINITY, f64::INFINITY);
            let (mut storage_bytes, mut merged) = (0, Vec::new());
            for _ in 0..args.repeats {
                let mut slowest = (0.0f64, 0.0f64);
                merged.clear();
                storage_bytes = 0;
                holders.served.store(0, Ordering::Relaxed);
                for unit in 0..new.units() {
                    let range = new.merges_from(&old, unit).unwrap_or_else(|| fail(format!("{name}: no merge")));
                    // A merged lone slot's base carries its model (zeros, as a fresh slot's).
                    let w = if new.units() == 1 { vec![0.0; new.features()] } else { Vec::new() };
                    let base = SlotBase { alpha: vec![0.0; new.layout().slot_rows(unit).len()], w };
                    // Storage: a worker that has not read these cells yet.
                    let started = Instant::now();
                    let storage = FromStorage {
                        grid: Grid::open(dir, Loss::Hinge, 0).unwrap_or_else(|e| fail(format!("{name}: {e}"))),
                        bytes: AtomicU64::new(0),
                    };
                    let gathered = new.fresh(unit, &storage).unwrap_or_else(|e| fail(format!("{name}: {e}")));
                    let s = started.elapsed().as_secs_f64();
                    storage_bytes += storage.bytes.load(Ordering::Relaxed);
                    // Peers: every part at once, verified, decoded, merged.
                    let started = Instant::now();
                    let requests = range
                        .map(|old_unit| {
                            let request = proto::FetchPartRequest { session: "old".into(), unit: old_unit as u32 };
                            (address.clone(), linea_proto::client::peer(channel.clone(), &secret), request)
                        })
                        .collect();
                    let parts = runtime
                        .block_on(fetch_all(requests, PART_PATIENCE))
                        .unwrap_or_else(|e| fail(format!("{name}: {e}")));
                    let parts: Vec<SlotState> = parts
                        .iter()
                        .map(|p| new.decode_part(p).unwrap_or_else(|e| fail(format!("{name}: {e}"))))
                        .collect();
                    let by_merge =
                        new.merge(unit, &base, parts, &grid).unwrap_or_else(|e| fail(format!("{name}: {e}")));
                    let p = started.elapsed().as_secs_f64();
                    if by_merge.rows() != gathered.rows() {
                        fail(format!("{name}: merged slot {unit} of {slots} differs from the gathered one"));
                    }
                    slowest = (slowest.0.max(s), slowest.1.max(p));
                    merged.push(by_merge);
                }
                storage_wall = storage_wall.min(slowest.0);
                peer_wall = peer_wall.min(slowest.1);
            }
            let sent = holders.served.load(Ordering::Relaxed);
            println!(
                "| {name} | {} -> {slots} | {} | {storage_wall:.4} | {:.1} MB | {peer_wall:.4} | {:.1} MB | {:.1} |",
                old.units(),
                new.layout().slot_rows(0).len(),
                storage_bytes as f64 / 1e6,
                sent as f64 / 1e6,
                storage_wall / peer_wall
            );
            old = new;
            states = std::mem::take(&mut merged);
        }
    }
}
