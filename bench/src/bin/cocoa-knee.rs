//! Per-epoch convergence of static CoCoA+ (hinge) for K = 1..16: why (and where) K > 1 pays.
//! Issue 14's diagnosis tool; `bench/elastic-bench.sh` is the benchmark itself.
//!
//! `cocoa-knee [--lambda 0.01,0.001] [--slots 1,2,4,8,16] [--no-bias] [--sigma-cap C,...]
//!  [--sigma K,per-feature,C,...] [--passes H] [--max-epochs E] [--sim-budget S] NAME=GRID ...`
//!
//! For every set, lambda (Chicle's, `l2 = lambda n / 2`), sigma' (`K` or `safe`: CoCoA+'s
//! scalar K; `per-feature`: the number of slots holding each feature; a number C: the scalar
//! min(K, C); `--sigma-cap` is the same list without `per-feature`) and K it
//! prints the epochs to relative duality gap 1e-2 .. 1e-6, the simulated cluster seconds
//! (`linea_bench::slot_clock`) to 1e-4 .. 1e-6, and the epoch-count speed-up over K = 1
//! under perfect scaling (an epoch of K slots costing 1/K of one slot's): Chicle's Figure 1.
//! `--no-bias` drops the grid's bias block (the one dense column every slot shares).

use linea_bench::elastic_run::without_bias;
use linea_bench::slot_clock::{SlotSeconds, TimedRunner, thread_cpu_seconds};
use linea_engine::Loss;
use linea_engine::algorithm::{Algorithm, PhaseRequest, Recovery, Reduction};
use linea_engine::cocoa::{Aggregation, Cocoa, CocoaConfig, CocoaPhase};
use linea_engine::grid::InMemoryGrid;
use linea_worker::gridload;
use linea_worker::prepare::BIAS;
use linea_worker::storage::LocalStorage;

const TARGETS: [f64; 5] = [1e-2, 1e-3, 1e-4, 1e-5, 1e-6];

/// How a run couples its slots.
#[derive(Clone, Copy)]
enum Sigma {
    /// CoCoA+'s safe scalar sigma' = K.
    K,
    /// The scalar min(K, cap).
    Cap(f64),
    /// sigma'_j = the number of slots holding feature j.
    PerFeature,
}

impl Sigma {
    fn parse(value: &str) -> Result<Self, String> {
        match value {
            "safe" | "K" => Ok(Sigma::K),
            "per-feature" => Ok(Sigma::PerFeature),
            c => c.parse().map(Sigma::Cap).map_err(|_| format!("{c:?} is neither K (safe), per-feature nor a number")),
        }
    }

    fn describe(self) -> String {
        match self {
            Sigma::K => "K".into(),
            Sigma::Cap(c) => format!("min(K, {c})"),
            Sigma::PerFeature => "per feature".into(),
        }
    }
}

struct Args {
    lambdas: Vec<f64>,
    slots: Vec<u32>,
    no_bias: bool,
    sigmas: Vec<Sigma>,
    passes: u32,
    max_epochs: u32,
    sim_budget: f64,
    sets: Vec<(String, String)>,
}

fn list<T: std::str::FromStr>(value: Option<String>, what: &str) -> Result<Vec<T>, String> {
    let value = value.unwrap_or_default();
    value
        .split(',')
        .map(|v| v.parse().ok())
        .collect::<Option<Vec<T>>>()
        .ok_or(format!("{what}: cannot parse {value:?}"))
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        lambdas: vec![0.01],
        slots: vec![1, 2, 4, 8, 16],
        no_bias: false,
        sigmas: vec![Sigma::K],
        passes: 1,
        max_epochs: 3000,
        sim_budget: 20.0,
        sets: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--lambda" => args.lambdas = list(it.next(), "--lambda")?,
            "--slots" => args.slots = list(it.next(), "--slots")?,
            "--no-bias" => args.no_bias = true,
            "--sigma-cap" | "--sigma" => {
                let flag = arg.clone();
                args.sigmas = list::<String>(it.next(), &flag)?
                    .iter()
                    .map(|c| match Sigma::parse(c) {
                        Ok(Sigma::PerFeature) if flag == "--sigma-cap" => {
                            Err(format!("{flag}: per-feature is a --sigma"))
                        }
                        other => other.map_err(|e| format!("{flag}: {e}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--passes" => args.passes = list(it.next(), "--passes")?.first().copied().unwrap_or(1),
            "--max-epochs" => args.max_epochs = list(it.next(), "--max-epochs")?.first().copied().unwrap_or(3000),
            "--sim-budget" => args.sim_budget = list(it.next(), "--sim-budget")?.first().copied().unwrap_or(20.0),
            _ => args.sets.push(linea_bench::named_grid(&arg)?),
        }
    }
    if args.sets.is_empty() {
        return Err("usage: cocoa-knee [--lambda L,...] [--slots K,...] [--no-bias] [--sigma K|per-feature|C,...] [--passes H] [--max-epochs E] [--sim-budget S] NAME=GRID ...".into());
    }
    Ok(args)
}

struct Run {
    /// Relative gap and simulated seconds after each epoch.
    points: Vec<(f64, f64)>,
}

impl Run {
    fn epochs_to(&self, target: f64) -> Option<usize> {
        self.points.iter().position(|p| p.0 <= target).map(|e| e + 1)
    }
}

fn run(grid: &InMemoryGrid, l2: f64, slots: u32, sigma: Sigma, args: &Args) -> Result<Run, String> {
    let err = |e: linea_engine::EngineError| e.to_string();
    let config = CocoaConfig::new(Loss::Hinge, l2, slots, args.passes, args.max_epochs, 1e-6, 0).map_err(err)?;
    let config = match sigma {
        Sigma::K => config.with_aggregation(Aggregation::Scalar),
        Sigma::Cap(cap) => config.with_aggregation(Aggregation::Scalar).and_then(|c| c.with_sigma_cap(cap)),
        Sigma::PerFeature => config.with_aggregation(Aggregation::PerFeature),
    }
    .map_err(err)?;
    let slot_seconds = SlotSeconds::default();
    let mut cocoa = Cocoa::for_grid(config, grid).map_err(err)?;
    let mut runner = TimedRunner::new(cocoa.kernel().clone(), grid, 1, slot_seconds.clone()).map_err(err)?;
    // Data loading (each slot gathers its rows), left out of the clock.
    let evaluate = CocoaPhase::Evaluate { w: vec![0.0; cocoa.kernel().features()] };
    runner
        .untimed(PhaseRequest { phase: evaluate, reduction: Reduction::Sum { len: 2 }, mutates: false })
        .map_err(err)?;
    let (master, slots_at) = (thread_cpu_seconds(), slot_seconds.get());
    let mut points = Vec::new();
    while cocoa.stop_reason().is_none() {
        cocoa.next_iter(&mut runner, Recovery::Needed).map_err(err)?;
        let gap = cocoa.state().history.last().map_or(f64::INFINITY, |r| r.gap.relative);
        let sim = slot_seconds.get() - slots_at + thread_cpu_seconds() - master;
        points.push((gap, sim));
        if sim > args.sim_budget {
            break;
        }
    }
    Ok(Run { points })
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    });
    for (name, dir) in &args.sets {
        let loaded = gridload::load(&LocalStorage::new(dir.as_str()), Loss::Hinge).unwrap_or_else(|e| {
            eprintln!("error: {name}: {e}");
            std::process::exit(1)
        });
        let bias = loaded.layout.manifest.blocks.iter().any(|b| b.name == BIAS);
        let grid = if args.no_bias { without_bias(loaded) } else { loaded.grid };
        let rows = grid.rows();
        for &lambda in &args.lambdas {
            let l2 = lambda * rows as f64 / 2.0;
            println!(
                "\n#### {name}: {rows} rows, {} non-zeros, lambda {lambda} (l2 {l2}), bias {}, H = {}\n",
                grid.nnz(),
                if args.no_bias || !bias { "off" } else { "on" },
                args.passes
            );
            println!(
                "| sigma' | K | epochs to 1e-2 | 1e-3 | 1e-4 | 1e-5 | 1e-6 | sim s to 1e-4 | 1e-5 | 1e-6 | end: epochs, gap | perfect-scaling speed-up over K=1 at 1e-4 / 1e-6 |"
            );
            println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
            for &sigma in &args.sigmas {
                let mut base: Option<Run> = None;
                for &k in &args.slots {
                    let run = run(&grid, l2, k, sigma, &args).unwrap_or_else(|e| {
                        eprintln!("error: {name} K={k}: {e}");
                        std::process::exit(1)
                    });
                    let epochs: Vec<String> = TARGETS
                        .iter()
                        .map(|&t| run.epochs_to(t).map_or(format!("> {}", run.points.len()), |e| e.to_string()))
                        .collect();
                    let sims: Vec<String> = TARGETS[2..]
                        .iter()
                        .map(|&t| run.epochs_to(t).map_or("-".into(), |e| format!("{:.3}", run.points[e - 1].1)))
                        .collect();
                    let speedup = |t: f64| match (base.as_ref().and_then(|b| b.epochs_to(t)), run.epochs_to(t)) {
                        (Some(b), Some(e)) => format!("{:.2}", b as f64 * k as f64 / e as f64),
                        _ => "-".into(),
                    };
                    let last = run.points.last().map_or(f64::NAN, |p| p.0);
                    println!(
                        "| {} | {k} | {} | {} | {}, {last:.1e} | {} / {} |",
                        sigma.describe(),
                        epochs.join(" | "),
                        sims.join(" | "),
                        run.points.len(),
                        speedup(1e-4),
                        speedup(1e-6)
                    );
                    if k == 1 {
                        base = Some(run);
                    }
                }
            }
        }
    }
}
