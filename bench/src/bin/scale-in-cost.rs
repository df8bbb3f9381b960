//! What a CoCoA scale-in costs a merged slot (issue 14): gathering its rows from the grid
//! again (what every scale-in did before merges) against putting its old slots' rows
//! together (`Kernel::merge`), in thread CPU seconds, as the simulated cluster clock of
//! `elastic-bench` charges it (the slowest merged slot), for each step of 16 -> 4 -> 1.
//!
//! `scale-in-cost [--no-bias] [--repeats 5] [--path 16,4,1] NAME=GRID ...`
//!
//! Each step also checks that the merged slot equals the gathered one field by field (a
//! benchmark that measured a different slot would measure nothing). Hinge loss; the
//! numbers are the minimum over the repeats (the least disturbed by other load).

use linea_bench::elastic_run::load;
use linea_bench::scale_in::{self, hinge_kernel};
use linea_bench::slot_clock::thread_cpu_seconds;
use linea_engine::algorithm::Kernel;
use linea_engine::cocoa::{SlotBase, SlotState};

struct Args {
    no_bias: bool,
    repeats: usize,
    path: Vec<u32>,
    sets: Vec<(String, String)>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args { no_bias: false, repeats: 5, path: vec![16, 4, 1], sets: Vec::new() };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--no-bias" => args.no_bias = true,
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

/// Thread CPU seconds of `work`, and its result.
fn timed<T>(work: impl FnOnce() -> T) -> (T, f64) {
    let started = thread_cpu_seconds();
    let out = work();
    (out, thread_cpu_seconds() - started)
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
    let partitions = args.path[0];
    println!(
        "| set | step | rows per merged slot | gather: slowest slot, s | merge: slowest slot, s | gather / merge |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for (name, dir) in &args.sets {
        let grid = load(dir, args.no_bias).unwrap_or_else(|e| fail(format!("{name}: {e}")));
        let mut old = hinge_kernel(&grid, args.path[0], partitions).unwrap_or_else(|e| fail(format!("{name}: {e}")));
        let mut states: Vec<SlotState> =
            (0..old.units()).map(|u| old.fresh(u, &grid).unwrap_or_else(|e| fail(format!("{name}: {e}")))).collect();
        for &slots in &args.path[1..] {
            let new = hinge_kernel(&grid, slots, partitions).unwrap_or_else(|e| fail(format!("{name}: {e}")));
            let (mut gather, mut merge) = (f64::INFINITY, f64::INFINITY);
            let mut merged = Vec::new();
            for _ in 0..args.repeats {
                let mut slowest = (0.0f64, 0.0f64);
                merged.clear();
                for unit in 0..new.units() {
                    let range = new.merges_from(&old, unit).unwrap_or_else(|| fail(format!("{name}: no merge")));
                    // A merged lone slot's base carries its model (zeros, as a fresh slot's).
                    let w = if new.units() == 1 { vec![0.0; new.features()] } else { Vec::new() };
                    let base = SlotBase { alpha: vec![0.0; new.layout().slot_rows(unit).len()], w };
                    let parts: Vec<SlotState> = states[range].to_vec();
                    let (fresh, g) = timed(|| new.fresh(unit, &grid));
                    let (by_merge, m) = timed(|| new.merge(unit, &base, parts, &grid));
                    let (fresh, by_merge) = (
                        fresh.unwrap_or_else(|e| fail(format!("{name}: {e}"))),
                        by_merge.unwrap_or_else(|e| fail(format!("{name}: {e}"))),
                    );
                    if fresh != by_merge {
                        fail(format!("{name}: merged slot {unit} of {slots} differs from the gathered one"));
                    }
                    slowest = (slowest.0.max(g), slowest.1.max(m));
                    merged.push(by_merge);
                }
                gather = gather.min(slowest.0);
                merge = merge.min(slowest.1);
            }
            println!(
                "| {name} | {} -> {slots} | {} | {gather:.5} | {merge:.5} | {:.1} |",
                old.units(),
                new.layout().slot_rows(0).len(),
                gather / merge
            );
            old = new;
            states = std::mem::take(&mut merged);
        }
    }
}
