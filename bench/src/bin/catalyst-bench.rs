//! Catalyst-accelerated CoCoA against plain CoCoA (issue 13): epochs and seconds to relative
//! duality gaps 1e-4 and 1e-6 for K slots, on prepared grids, in process on 2 threads. Run
//! by `bench/catalyst-bench.sh`, which documents the sets.
//!
//! `catalyst-bench --loss logistic|hinge [--l2 1] [--slots 1,2,4,8] [--modes plain,auto,300]
//!  [--wall-budget S] [--epochs N] NAME=GRID ...`
//!
//! A mode is `plain` (CoCoA), `auto` (accelerated, the default kappa) or a number (accelerated
//! with that kappa). Each run stops at a relative gap of 1e-6, after `--epochs` epochs or
//! once `--wall-budget` seconds have passed. A benchmark, not a test: it asserts nothing.

use linea_engine::Loss;
use linea_engine::algorithm::{Algorithm, Recovery};
use linea_engine::cocoa::{AccelerateConfig, Cocoa, CocoaConfig};
use linea_engine::runner::LocalRunner;
use linea_worker::gridload;
use linea_worker::storage::LocalStorage;
use std::time::Instant;

const TARGETS: [f64; 2] = [1e-4, 1e-6];

struct Args {
    loss: Loss,
    l2: f64,
    slots: Vec<u32>,
    modes: Vec<String>,
    wall_budget: f64,
    epochs: u32,
    sets: Vec<(String, String)>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        loss: Loss::Logistic,
        l2: 1.0,
        slots: vec![1, 2, 4, 8],
        modes: vec!["plain".into(), "auto".into()],
        wall_budget: 120.0,
        epochs: 100_000,
        sets: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--loss" => {
                args.loss = match value()?.as_str() {
                    "logistic" => Loss::Logistic,
                    "hinge" => Loss::Hinge,
                    "squared" => Loss::Squared,
                    other => return Err(format!("unknown loss {other}")),
                }
            }
            "--l2" => args.l2 = value()?.parse().map_err(|e| format!("--l2: {e}"))?,
            "--slots" => {
                args.slots = value()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--slots: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--modes" => args.modes = value()?.split(',').map(String::from).collect(),
            "--wall-budget" => args.wall_budget = value()?.parse().map_err(|e| format!("--wall-budget: {e}"))?,
            "--epochs" => args.epochs = value()?.parse().map_err(|e| format!("--epochs: {e}"))?,
            set => args.sets.push(linea_bench::named_grid(set)?),
        }
    }
    if args.sets.is_empty() {
        return Err("no NAME=GRID given".into());
    }
    Ok(args)
}

/// The accelerate setting of a mode: `None` for plain CoCoA.
fn accelerate(mode: &str) -> Result<Option<AccelerateConfig>, String> {
    let kappa = match mode {
        "plain" => return Ok(None),
        "auto" => None,
        number => Some(number.parse::<f64>().map_err(|e| format!("mode {number}: {e}"))?),
    };
    AccelerateConfig::new(kappa).map(Some).map_err(|e| e.to_string())
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    });
    println!(
        "| set | loss | K | mode | kappa | epochs to 1e-4 | s to 1e-4 | epochs to 1e-6 | s to 1e-6 | end: epochs, s, gap |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, dir) in &args.sets {
        let loaded = gridload::load(&LocalStorage::new(dir.as_str()), args.loss).unwrap_or_else(|e| {
            eprintln!("error: {name}: {e}");
            std::process::exit(1)
        });
        for &slots in &args.slots {
            for mode in &args.modes {
                let run = || -> Result<String, String> {
                    let err = |e: linea_engine::EngineError| e.to_string();
                    let mut config =
                        CocoaConfig::new(args.loss, args.l2, slots, 1, args.epochs, TARGETS[1], 0).map_err(err)?;
                    if let Some(a) = accelerate(mode)? {
                        config = config.with_accelerate(a).map_err(err)?;
                    }
                    let mut cocoa = Cocoa::for_grid(config, &loaded.grid).map_err(err)?;
                    let kappa = cocoa.kappa().map_or("-".to_string(), |k| format!("{k:.4}"));
                    let mut runner = LocalRunner::new(cocoa.kernel().clone(), &loaded.grid, 2);
                    let started = Instant::now();
                    let mut reached: [Option<(u32, f64)>; 2] = [None; 2];
                    let mut gap = f64::INFINITY;
                    while cocoa.stop_reason().is_none() && started.elapsed().as_secs_f64() < args.wall_budget {
                        cocoa.next_iter(&mut runner, Recovery::Needed).map_err(err)?;
                        gap = cocoa.state().history.last().map_or(f64::INFINITY, |r| r.gap.relative);
                        for (at, &target) in reached.iter_mut().zip(&TARGETS) {
                            if at.is_none() && gap <= target {
                                *at = Some((cocoa.state().epoch, started.elapsed().as_secs_f64()));
                            }
                        }
                    }
                    let cell = |r: Option<(u32, f64)>| match r {
                        Some((e, s)) => (e.to_string(), format!("{s:.2}")),
                        None => ("—".to_string(), "—".to_string()),
                    };
                    let ((e4, s4), (e6, s6)) = (cell(reached[0]), cell(reached[1]));
                    let outer =
                        cocoa.state().catalyst.as_ref().map_or(String::new(), |c| format!(", {} outer", c.outer));
                    Ok(format!(
                        "| {name} | {} | {slots} | {mode} | {kappa} | {e4} | {s4} | {e6} | {s6} | {}, {:.1}, {gap:.2e}{outer} |",
                        args.loss.name(),
                        cocoa.state().epoch,
                        started.elapsed().as_secs_f64()
                    ))
                };
                match run() {
                    Ok(row) => println!("{row}"),
                    Err(e) => println!("| {name} | {} | {slots} | {mode} | error: {e} |", args.loss.name()),
                }
            }
        }
    }
}
