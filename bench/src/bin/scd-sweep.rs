//! SCD sweep throughput: `scd-sweep GRID THREADS EPOCHS [--full]`.
//!
//! Loads a prepared grid and times SCD epochs, then prints non-zeros per second per thread.
//! The first epoch is a warm-up and is not timed.
//!
//! * default, the bare sweep: every block once — statistics, the (bounded Newton) step, the
//!   prediction update; no coarse correction, no objective pass;
//! * `--full`: whole epochs as `linea train` runs them ([`Scd::run_epoch`]: the sweep, the
//!   coarse correction the grid's size selects, the snapshot and the objective pass).
//!
//! Beside it, `stream`: how fast this machine reads the same bytes — one thread summing
//! every cell's decoded row and local-feature arrays once (the least any sweep must read) —
//! so the sweep is also reported as a fraction of it; absolute rates differ 2-3x between
//! machines of the same kind.
//!
//! For instruction counts, run it under callgrind: the timed epochs (every thread) are dumped
//! as a profile part of their own (`callgrind.out.PID.1`; see [`callgrind`]):
//! `valgrind --tool=callgrind scd-sweep GRID 1 1`.

use linea_engine::Loss;
use linea_engine::algorithm::Algorithm;
use linea_engine::grid::InMemoryGrid;
use linea_engine::runner::LocalRunner;
use linea_engine::scd::kernel::ScdKernel;
use linea_engine::scd::{CoarseMode, Scd, ScdConfig};
use linea_worker::gridload;
use linea_worker::storage::LocalStorage;
use std::time::Instant;

type Runner<'g> = LocalRunner<'g, ScdKernel, InMemoryGrid>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--full");
    let positional: Vec<&String> = args.iter().skip(1).filter(|a| !a.starts_with("--")).collect();
    let [grid, threads, epochs] = positional.as_slice() else {
        eprintln!("usage: scd-sweep GRID THREADS EPOCHS [--full]");
        std::process::exit(2);
    };
    let parsed = threads.parse::<usize>().ok().zip(epochs.parse::<u32>().ok());
    let Some((threads, epochs)) = parsed else {
        eprintln!("error: THREADS and EPOCHS must be whole numbers");
        std::process::exit(2);
    };
    let loaded = gridload::load(&LocalStorage::new(grid.as_str()), Loss::Logistic).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    });
    let config = ScdConfig::new(Loss::Logistic, 1.0, 0.0, epochs + 1, 0.0, 0).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    });
    let config = if full {
        let fitted = config.fitted_to(loaded.grid.shapes.len(), loaded.grid.rows() as u64);
        loaded.layout.manifest.fit_ranges(fitted).unwrap_or_else(|e| {
            eprintln!("error: {e}");
            std::process::exit(1)
        })
    } else {
        ScdConfig { coarse: CoarseMode::Off, ..config }
    };
    let mut scd = Scd::new(config, loaded.grid.shapes.clone(), loaded.grid.targets.len());
    let mut exec = LocalRunner::new(scd.kernel().clone(), &loaded.grid, threads);
    epoch(&mut scd, &mut exec, full);
    callgrind(CALLGRIND_ZERO_STATS);
    let started = Instant::now();
    timed_epochs(&mut scd, &mut exec, full, epochs);
    let seconds = started.elapsed().as_secs_f64();
    callgrind(CALLGRIND_DUMP_STATS);
    let nnz = loaded.grid.nnz() as f64;
    let rate = nnz * epochs as f64 / seconds / threads as f64;
    let (stream_seconds, checksum) = stream(&loaded.grid);
    let stream_rate = nnz / stream_seconds;
    println!(
        "scd-sweep {} rows={} nnz={} blocks={} threads={threads} epochs={epochs} seconds={seconds:.3} \
         nnz_per_s_per_thread={rate:.0} stream_nnz_per_s={stream_rate:.0} fraction_of_stream={:.2} \
         objective={:.10} ({checksum})",
        if full { "full-epoch" } else { "bare-sweep" },
        loaded.grid.rows(),
        loaded.grid.nnz(),
        loaded.grid.shapes.len(),
        rate / stream_rate,
        scd.objective(&mut exec).unwrap_or(f64::NAN),
    );
}

/// One epoch: the bare sweep, or everything `linea train` does in one.
fn epoch(scd: &mut Scd, exec: &mut Runner<'_>, full: bool) {
    if full {
        scd.run_epoch(exec, |_, _, _| Ok(())).unwrap_or_else(|e| panic!("epoch: {e}"));
        return;
    }
    for block in scd.epoch_order(scd.state.epoch) {
        scd.iterate_block(block, exec).unwrap_or_else(|e| panic!("block {block}: {e}"));
    }
    scd.state.epoch += 1;
}

/// The timed epochs.
#[inline(never)]
fn timed_epochs(scd: &mut Scd, exec: &mut Runner<'_>, full: bool, epochs: u32) {
    for _ in 0..epochs {
        epoch(scd, exec, full);
    }
}

/// Seconds for one thread to read every cell's decoded rows and local feature numbers once
/// (best of three), and a checksum that keeps the reads from being optimized away.
#[inline(never)]
fn stream(grid: &InMemoryGrid) -> (f64, u64) {
    let mut best = f64::INFINITY;
    let mut checksum = 0u64;
    for _ in 0..3 {
        let started = Instant::now();
        let mut sum = 0u64;
        for cell in grid.cells.iter().flatten() {
            sum = cell.rows.iter().zip(&cell.local).fold(sum, |s, (&r, &l)| s.wrapping_add(r as u64 ^ l as u64));
        }
        best = best.min(started.elapsed().as_secs_f64());
        checksum = std::hint::black_box(sum);
    }
    (best, checksum)
}

/// Callgrind's client requests (valgrind/callgrind.h): zero every thread's counters, and
/// dump them as a profile part.
const CALLGRIND_ZERO_STATS: u64 = 0x4354_0001;
const CALLGRIND_DUMP_STATS: u64 = 0x4354_0000;

/// Sends a client request to valgrind: valgrind's "special instruction" sequence (rotations
/// of rdi by 128 bits in all, then `xchg rbx, rbx`), which changes nothing when the program
/// runs natively, so the benchmark needs no valgrind headers.
#[cfg(target_arch = "x86_64")]
fn callgrind(request: u64) {
    let args: [u64; 6] = [request, 0, 0, 0, 0, 0];
    // SAFETY: the sequence leaves every register as it found it when not under valgrind;
    // under valgrind it reads `args` and writes the result into rdx.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51", "xchg rbx, rbx",
            inout("rdx") 0u64 => _,
            in("rax") args.as_ptr(),
            inout("rdi") 0u64 => _,
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn callgrind(_: u64) {}
