//! SCD sweep throughput: `scd-sweep GRID THREADS EPOCHS`.
//!
//! Loads a prepared grid and times plain SCD epochs (every block once: statistics, step,
//! prediction update; no coarse correction, no objective pass), then prints non-zeros
//! swept per second per thread. The first epoch is a warm-up and is not timed.

use linea_engine::Loss;
use linea_engine::algorithm::Algorithm;
use linea_engine::grid::InMemoryGrid;
use linea_engine::runner::LocalRunner;
use linea_engine::scd::kernel::ScdKernel;
use linea_engine::scd::{CoarseMode, Scd, ScdConfig};
use linea_worker::gridload;
use linea_worker::storage::LocalStorage;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, grid, threads, epochs] = args.as_slice() else {
        eprintln!("usage: scd-sweep GRID THREADS EPOCHS");
        std::process::exit(2);
    };
    let (threads, epochs): (usize, u32) = (threads.parse().unwrap(), epochs.parse().unwrap());
    let loaded = gridload::load(&LocalStorage::new(grid), Loss::Logistic).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    });
    let mut config = ScdConfig::new(Loss::Logistic, 1.0, 0.0, epochs + 1, 0.0, 0).unwrap();
    config.coarse = CoarseMode::Off;
    let mut scd = Scd::new(config, loaded.grid.shapes.clone(), loaded.grid.targets.len());
    let mut exec = LocalRunner::new(scd.kernel().clone(), &loaded.grid, threads);
    let sweep = |scd: &mut Scd, exec: &mut LocalRunner<ScdKernel, InMemoryGrid>| {
        for block in scd.epoch_order(scd.state.epoch) {
            scd.iterate_block(block, exec).unwrap();
        }
        scd.state.epoch += 1;
    };
    sweep(&mut scd, &mut exec);
    let started = Instant::now();
    for _ in 0..epochs {
        sweep(&mut scd, &mut exec);
    }
    let seconds = started.elapsed().as_secs_f64();
    let nnz = loaded.grid.nnz() as f64;
    println!(
        "scd-sweep rows={} nnz={} blocks={} threads={threads} epochs={epochs} seconds={seconds:.3} nnz_per_s_per_thread={:.0}",
        loaded.grid.rows(),
        loaded.grid.nnz(),
        loaded.grid.shapes.len(),
        nnz * epochs as f64 / seconds / threads as f64
    );
}
