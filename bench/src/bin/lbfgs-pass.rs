//! The batch pass of L-BFGS, the hybrid and IPM (`LinearPhase::Evaluate`: margins, losses
//! and the gradient over every row, rounded once per grain to exact sums) timed alone.
//!
//! `lbfgs-pass GRID THREADS PASSES`: loads a prepared grid (logistic loss, l2 = 1, one slot
//! per grain as L-BFGS runs), makes one untimed pass at `w = 0` (it gathers each slot's
//! rows), then times PASSES passes at the point one steepest-descent step away (a model
//! with non-zero margins, as every pass after the first sees), and prints non-zeros per
//! second per thread beside this machine's rate of streaming the same cells (as
//! `scd-sweep` does). Under `valgrind --tool=callgrind` it dumps the timed passes as a
//! profile part of their own (`callgrind.out.PID.1`): instructions per non-zero without
//! the load's noise. A benchmark, not a test: it prints figures, it asserts nothing.

use linea_engine::Loss;
use linea_engine::algorithm::Algorithm;
use linea_engine::grid::InMemoryGrid;
use linea_engine::hybrid::{Linear, LinearConfig, Mode};
use linea_engine::runner::LocalRunner;
use linea_worker::gridload;
use linea_worker::storage::LocalStorage;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, grid, threads, passes] = args.as_slice() else {
        eprintln!("usage: lbfgs-pass GRID THREADS PASSES");
        std::process::exit(2);
    };
    let Some((threads, passes)) = threads.parse::<usize>().ok().zip(passes.parse::<u32>().ok()) else {
        eprintln!("error: THREADS and PASSES must be whole numbers");
        std::process::exit(2);
    };
    let loaded = gridload::load(&LocalStorage::new(grid.as_str()), Loss::Logistic).unwrap_or_else(|e| fail(e));
    let config =
        LinearConfig::new(Mode::Lbfgs, Loss::Logistic, 1.0, 1, 15, 1, 0.0, 0.0, 0.5, 0).unwrap_or_else(|e| fail(e));
    let linear = Linear::for_grid(config, &loaded.grid).unwrap_or_else(|e| fail(e));
    let mut runner = LocalRunner::new(linear.kernel().clone(), &loaded.grid, threads);
    let zero = vec![0.0; loaded.grid.shapes.iter().map(|s| s.features).sum()];
    let start = linear.evaluate(&mut runner, &zero).unwrap_or_else(|e| fail(e));
    let norm = start.g.iter().map(|g| g * g).sum::<f64>().sqrt();
    let w: Vec<f64> = start.g.iter().map(|g| -g / norm).collect();
    callgrind(CALLGRIND_ZERO_STATS);
    let started = Instant::now();
    let objective = timed_passes(&linear, &mut runner, &w, passes);
    let seconds = started.elapsed().as_secs_f64();
    callgrind(CALLGRIND_DUMP_STATS);
    let nnz = loaded.grid.nnz() as f64;
    let rate = nnz * passes as f64 / seconds / threads as f64;
    let stream_rate = nnz / stream(&loaded.grid);
    println!(
        "lbfgs-pass rows={} nnz={} threads={threads} passes={passes} seconds={seconds:.3} \
         nnz_per_s_per_thread={rate:.0} stream_nnz_per_s={stream_rate:.0} fraction_of_stream={:.3} \
         objective={objective:.10}",
        loaded.grid.rows(),
        loaded.grid.nnz(),
        rate / stream_rate,
    );
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1)
}

#[inline(never)]
fn timed_passes(
    linear: &Linear,
    runner: &mut LocalRunner<'_, linea_engine::hybrid::LinearKernel, InMemoryGrid>,
    w: &[f64],
    passes: u32,
) -> f64 {
    let mut objective = f64::NAN;
    for _ in 0..passes {
        objective = linear.evaluate(runner, w).unwrap_or_else(|e| fail(e)).f;
    }
    objective
}

/// Seconds for one thread to read every cell's row and feature arrays (the best of three):
/// the rate a pass over the same non-zeros could not beat.
#[inline(never)]
fn stream(grid: &InMemoryGrid) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let started = Instant::now();
        let mut sum = 0u64;
        for cell in grid.cells.iter().flatten() {
            sum = cell.rows.iter().zip(&cell.local).fold(sum, |s, (&r, &l)| s.wrapping_add(r as u64 ^ l as u64));
        }
        best = best.min(started.elapsed().as_secs_f64());
        std::hint::black_box(sum);
    }
    best
}

const CALLGRIND_ZERO_STATS: u64 = 0x4354_0001;
const CALLGRIND_DUMP_STATS: u64 = 0x4354_0000;

/// A callgrind client request (valgrind.h's magic sequence); a no-op outside valgrind.
#[cfg(target_arch = "x86_64")]
fn callgrind(request: u64) {
    let args: [u64; 6] = [request, 0, 0, 0, 0, 0];
    // SAFETY: the rotate sequence leaves rdi unchanged and `xchg rbx, rbx` is a no-op on
    // a real CPU; under valgrind it reads the six words of `args`.
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
