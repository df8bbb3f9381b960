//! What each L-BFGS iteration costs and takes: objective evaluations of its line search,
//! the step length it accepted, and its seconds — the figures that say whether a choice of
//! the initial inverse Hessian `H0` pays in passes, not only in iterations.
//!
//! `lbfgs-steps GRID lbfgs|hybrid none|diagonal|scaled|newton REFRESH EPOCHS [REFERENCE
//! [MEMORY [THREADS [LOSS]]]]` (`newton`: the truncated Newton batch solver instead of L-BFGS;
//! REFRESH and MEMORY then do not matter, and `t` and `|d|` are not printed): loads a prepared grid (LOSS logistic, the default, or squared; l2 = 1, memory MEMORY, default 15;
//! the hybrid with K = 4 slots, rate 0.5, seed 0, as `linea train` defaults), runs EPOCHS
//! epochs in THREADS threads (default 1; every figure but the seconds is the same for any
//! count) and prints one
//! line per epoch: the objective, its error relative to REFERENCE (if given), the batch
//! passes the epoch made, the accepted step `t` along the direction `d` the state gave
//! (`t = s.d / d.d`; 1 is the quasi-Newton step), `|d|`, and the epoch's seconds. A
//! benchmark, not a test: it prints figures, it asserts nothing.

use linea_engine::Loss;
use linea_engine::algorithm::{Algorithm, Recovery};
use linea_engine::hybrid::lbfgs::{direction, dot, norm};
use linea_engine::hybrid::{BatchSolver, Linear, LinearConfig, Mode, Precondition};
use linea_engine::runner::LocalRunner;
use linea_worker::gridload;
use linea_worker::storage::LocalStorage;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (grid, mode, precondition, refresh, epochs, rest) = match args.as_slice() {
        [_, g, m, p, r, e, rest @ ..] if rest.len() <= 4 => (g, m, p, r, e, rest),
        _ => usage(),
    };
    let optional = |i: usize| rest.get(i).map(String::as_str);
    let mode = match mode.as_str() {
        "lbfgs" => Mode::Lbfgs,
        "hybrid" => Mode::Hybrid,
        _ => usage(),
    };
    let Some((refresh, epochs)) = refresh.parse::<u32>().ok().zip(epochs.parse::<u32>().ok()) else { usage() };
    let (precondition, solver) = match precondition.as_str() {
        "none" => (Precondition::None, BatchSolver::Lbfgs),
        "diagonal" => (Precondition::Diagonal { refresh }, BatchSolver::Lbfgs),
        "scaled" => (Precondition::Scaled { refresh }, BatchSolver::Lbfgs),
        "newton" => (Precondition::DEFAULT, BatchSolver::Newton),
        _ => usage(),
    };
    let reference = optional(0).map(|r| r.parse::<f64>().unwrap_or_else(|_| usage()));
    let memory = optional(1).map_or(15, |m| m.parse::<u32>().unwrap_or_else(|_| usage()));
    let threads = optional(2).map_or(1, |t| t.parse::<usize>().ok().filter(|&t| t > 0).unwrap_or_else(|| usage()));
    let loss = match optional(3) {
        None | Some("logistic") => Loss::Logistic,
        Some("squared") => Loss::Squared,
        Some(_) => usage(),
    };
    let loaded = gridload::load(&LocalStorage::new(grid.as_str()), loss).unwrap_or_else(|e| fail(e));
    let slots = if mode == Mode::Hybrid { 4 } else { 1 };
    let config = LinearConfig::new(mode, loss, 1.0, slots, memory, epochs, 0.0, 0.0, 0.5, 0)
        .unwrap_or_else(|e| fail(e))
        .with_precondition(precondition)
        .with_solver(solver);
    let mut linear = Linear::for_grid(config, &loaded.grid).unwrap_or_else(|e| fail(e));
    let mut runner = LocalRunner::new(linear.kernel().clone(), &loaded.grid, threads);
    println!("epoch objective relative passes t |d| seconds note");
    let started = Instant::now();
    while linear.stop_reason().is_none() {
        let before = linear.state().clone();
        let d = (!before.g.is_empty() && solver == BatchSolver::Lbfgs)
            .then(|| direction(&before.g, &before.pairs, linear.initial()));
        let epoch_started = Instant::now();
        let iteration = linear.next_iter(&mut runner, Recovery::Needed).unwrap_or_else(|e| fail(e));
        let seconds = epoch_started.elapsed().as_secs_f64();
        let after = linear.state();
        let f = after.f.unwrap_or(f64::NAN);
        let relative = reference.map_or(f64::NAN, |r| (f - r) / r);
        let passes = after.evaluations - before.evaluations;
        let (t, d_norm) = match &d {
            Some(d) if before.f.is_some() && before.epoch > 0 || mode == Mode::Lbfgs && before.f.is_some() => {
                let s: Vec<f64> = after.w.iter().zip(&before.w).map(|(a, b)| a - b).collect();
                (dot(&s, d) / dot(d, d), norm(d))
            }
            _ => (f64::NAN, f64::NAN),
        };
        println!(
            "{} {f:.10e} {relative:.3e} {passes} {t:.4e} {d_norm:.4e} {seconds:.3} {}",
            after.epoch,
            iteration.note.unwrap_or_default()
        );
    }
    println!("total_seconds={:.3} passes={}", started.elapsed().as_secs_f64(), linear.state().evaluations);
}

fn usage() -> ! {
    eprintln!(
        "usage: lbfgs-steps GRID lbfgs|hybrid none|diagonal|scaled|newton REFRESH EPOCHS [REFERENCE [MEMORY [THREADS [LOSS]]]]"
    );
    std::process::exit(2)
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1)
}
