//! Elastic CoCoA against static K (issue 14, Chicle's Table 2): time to relative duality
//! gaps for static K in {1, 2, 4, 8, 16} and elastic 16 -> 1 and 16 -> 2, hinge loss,
//! on prepared grids. Run by `bench/elastic-bench.sh`, which documents the sets.
//!
//! `elastic-bench [--lambda 0.01] [--wall-budget S] [--sim-budget S] [--static 1,2,4,8,16]
//!  [--elastic-start 16] [--elastic-factor 4] [--elastic-threshold 1.25] [--no-bias]
//!  [--sigma K|per-feature] [--sigma-cap C] [--budget-from-first F,E] NAME=GRID ...`
//!
//! `--no-bias` drops the grid's bias block (Chicle's SVM has no intercept); `--sigma-cap C`
//! runs CoCoA+ with `sigma' = min(K, C)` instead of the safe K. `--elastic-start 16,4` runs
//! the elastic settings (down to 1 and to 2) from each of those slot counts: Chicle starts
//! at the maximum; starting lower is the "start at the K that is fast early" question.
//! `--budget-from-first F,E`: once the first static setting (K = 1 by default) has reached
//! the last target at simulated time T, every other static run stops at F T and every
//! elastic run at E T (a static run slower than F T to every target cannot be the best
//! static; an elastic run slower than E T is reported as not reached), so the expensive
//! K = 8 and 16 cost no more than they can tell.
//!
//! Chicle's `lambda` is that of CoCoA's `(1/n) sum loss + (lambda/2) |w|^2`; times `n` that
//! is linea's `sum loss + l2 |w|^2` with `l2 = lambda n / 2` (same minimizer, same relative
//! gap). Two clocks (`linea_bench::slot_clock`): the simulated cluster clock for every
//! setting, the real wall time where the pool has a thread per slot (K <= 2).

use linea_bench::elastic_run::{Budget, Setting, TARGETS, Trace, load, run};
use linea_engine::cocoa::Aggregation;

struct Args {
    lambda: f64,
    budget: Budget,
    /// Static slot counts to run (default 1, 2, 4, 8, 16).
    statics: Vec<u32>,
    /// Slot counts the elastic runs start from (default 16).
    elastic_starts: Vec<u32>,
    /// The elastic policy's m and d (default Chicle's 4 and 1.25).
    factor: u32,
    threshold: f64,
    no_bias: bool,
    sigma_cap: Option<f64>,
    aggregation: Aggregation,
    /// Sim budgets of the other static runs and of the elastic ones, as factors of the
    /// first static run's time to the last target.
    budget_from_first: Option<(f64, f64)>,
    sets: Vec<(String, String)>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        lambda: 0.01,
        budget: Budget { gap: 1e-6, sim_seconds: 60.0, wall_seconds: 60.0, epochs: 100_000 },
        statics: vec![1, 2, 4, 8, 16],
        elastic_starts: vec![16],
        factor: 4,
        threshold: 1.25,
        no_bias: false,
        sigma_cap: None,
        aggregation: Aggregation::PerFeature,
        budget_from_first: None,
        sets: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    let number = |v: Option<String>, what: &str| -> Result<f64, String> {
        v.and_then(|v| v.parse::<f64>().ok())
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or(format!("{what} needs a positive number"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--lambda" => args.lambda = number(it.next(), "--lambda")?,
            "--wall-budget" => args.budget.wall_seconds = number(it.next(), "--wall-budget")?,
            "--sim-budget" => args.budget.sim_seconds = number(it.next(), "--sim-budget")?,
            "--elastic-factor" => args.factor = number(it.next(), "--elastic-factor")? as u32,
            "--elastic-threshold" => args.threshold = number(it.next(), "--elastic-threshold")?,
            "--no-bias" => args.no_bias = true,
            "--sigma-cap" => args.sigma_cap = Some(number(it.next(), "--sigma-cap")?),
            "--sigma" => {
                args.aggregation = match it.next().as_deref() {
                    Some("K") => Aggregation::Scalar,
                    Some("per-feature") => Aggregation::PerFeature,
                    other => return Err(format!("--sigma takes K or per-feature, not {other:?}")),
                }
            }
            "--static" => args.statics = slot_counts(it.next(), "--static")?,
            "--elastic-start" => args.elastic_starts = slot_counts(it.next(), "--elastic-start")?,
            "--budget-from-first" => {
                let list = it.next().unwrap_or_default();
                let factors: Vec<f64> =
                    list.split(',').filter_map(|f| f.parse().ok()).filter(|f: &f64| *f > 0.0).collect();
                let [f, e] = factors[..] else {
                    return Err(format!("--budget-from-first needs two factors like 1.2,3, got {list:?}"));
                };
                args.budget_from_first = Some((f, e));
            }
            _ => args.sets.push(linea_bench::named_grid(&arg)?),
        }
    }
    if args.sets.is_empty() {
        return Err("usage: elastic-bench [--lambda L] [--wall-budget S] [--sim-budget S] [--static K,...] [--elastic-start K,...] [--elastic-factor M] [--elastic-threshold D] [--no-bias] [--sigma K|per-feature] [--sigma-cap C] [--budget-from-first F,E] NAME=GRID ...".into());
    }
    Ok(args)
}

fn slot_counts(list: Option<String>, flag: &str) -> Result<Vec<u32>, String> {
    let list = list.unwrap_or_default();
    let parsed: Option<Vec<u32>> = list.split(',').map(|k| k.parse().ok().filter(|&k| k > 0)).collect();
    parsed.ok_or(format!("{flag} needs slot counts like 1,2,4, got {list:?}"))
}

fn settings(args: &Args) -> Vec<Setting> {
    let (factor, threshold, sigma_cap, aggregation) = (args.factor, args.threshold, args.sigma_cap, args.aggregation);
    let one = |slots: u32, elastic_min| Setting {
        slots,
        elastic_min,
        factor,
        threshold,
        threads: slots.min(2) as usize,
        sigma_cap,
        aggregation,
        schedule: Vec::new(),
    };
    let mut all: Vec<Setting> = args.statics.iter().map(|&k| one(k, None)).collect();
    for &start in &args.elastic_starts {
        all.extend([1, 2].into_iter().filter(|&min| min < start).map(|min| one(start, Some(min))));
    }
    all
}

/// "1.23" if reached, "> 4.56" (the run's end) if not.
fn time_to(trace: &Trace, target: f64, clock: fn(&linea_bench::elastic_run::Point) -> f64) -> String {
    match (trace.reached(target), trace.last()) {
        (Some(p), _) => format!("{:.3}", clock(p)),
        (None, Some(last)) => format!("> {:.3}", clock(last)),
        (None, None) => "-".into(),
    }
}

/// The run's budget: the command line's, or with `--budget-from-first` a factor of the
/// first run's simulated time to the last target (once it reached it).
fn budget_after(args: &Args, done: &[(Setting, Trace)], setting: &Setting) -> Budget {
    let mut budget = args.budget;
    let first = done.first().and_then(|(_, t)| t.reached(TARGETS[TARGETS.len() - 1])).map(|p| p.sim);
    if let (Some((statics, elastic)), Some(first)) = (args.budget_from_first, first) {
        let factor = if setting.elastic_min.is_some() { elastic } else { statics };
        budget.sim_seconds = budget.sim_seconds.min(factor * first);
    }
    budget
}

struct Best {
    time: Option<f64>,
    label: String,
}

/// The fastest static run with at least `min_slots` slots to reach `target` (simulated clock).
fn best_static(traces: &[(Setting, Trace)], target: f64, min_slots: u32) -> Best {
    let statics = traces.iter().filter(|(s, _)| s.elastic_min.is_none() && s.slots >= min_slots);
    let best = statics
        .clone()
        .filter_map(|(s, t)| t.reached(target).map(|p| (s.slots, p.sim)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let Some((k, time)) = best else {
        return Best { time: None, label: "none reached".into() };
    };
    let censored =
        statics.filter(|(_, t)| t.reached(target).is_none()).any(|(_, t)| t.last().is_some_and(|p| p.sim < time));
    Best { time: Some(time), label: format!("K={k}: {time:.3}{}", if censored { " †" } else { "" }) }
}

/// Best static / elastic: exact, or at most this when the elastic run stopped by its budget
/// before the target (its end time is a lower bound of its time to the target).
#[derive(Debug, Clone, Copy)]
enum Ratio {
    Exact(f64),
    AtMost(f64),
}

impl Ratio {
    fn value(self) -> f64 {
        match self {
            Ratio::Exact(r) | Ratio::AtMost(r) => r,
        }
    }
}

/// An elastic run's time to a target, or the time it stopped at without reaching it.
struct Elastic {
    reached: Option<f64>,
    end: Option<f64>,
}

impl Elastic {
    fn of(trace: &Trace, target: f64) -> Self {
        Elastic { reached: trace.reached(target).map(|p| p.sim), end: trace.last().map(|p| p.sim) }
    }

    fn time(&self) -> String {
        match (self.reached, self.end) {
            (Some(t), _) => format!("{t:.3}"),
            (None, Some(end)) => format!("> {end:.3}"),
            (None, None) => "-".into(),
        }
    }

    fn ratio(&self, best: Option<f64>) -> Option<Ratio> {
        match (best, self.reached, self.end) {
            (Some(b), Some(e), _) => Some(Ratio::Exact(b / e)),
            (Some(b), None, Some(end)) if end > 0.0 => Some(Ratio::AtMost(b / end)),
            _ => None,
        }
    }

    fn ratio_text(&self, best: Option<f64>) -> String {
        match self.ratio(best) {
            Some(Ratio::Exact(r)) => format!("{r:.2}"),
            Some(Ratio::AtMost(r)) => format!("< {r:.2}"),
            None => "-".into(),
        }
    }
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    });
    let mut speedups: Vec<(String, Ratio)> = Vec::new();
    for (name, dir) in &args.sets {
        let grid = load(dir, args.no_bias).unwrap_or_else(|e| {
            eprintln!("error: {name}: {e}");
            std::process::exit(1)
        });
        let rows = grid.rows();
        let l2 = args.lambda * rows as f64 / 2.0;
        println!(
            "\n### {name}: {rows} rows, {} non-zeros, lambda {} -> l2 = {l2}; bias {}; sigma' = {}; elastic m = {}, d = {}, N = 2\n",
            grid.nnz(),
            args.lambda,
            if args.no_bias { "off" } else { "on" },
            match (args.sigma_cap, args.aggregation) {
                (Some(c), _) => format!("min(K, {c})"),
                (None, Aggregation::Scalar) => "K".into(),
                (None, Aggregation::PerFeature) => "per feature (s_j slots hold feature j)".into(),
            },
            args.factor,
            args.threshold
        );
        println!(
            "| setting | epochs | sim s to 1e-4 | 1e-5 | 1e-6 | wall s to 1e-4 | 1e-5 | 1e-6 | end: sim s | wall s | wall/sim | CPU/sim | scale-ins (after epoch: from->to, sim s) |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        let mut traces: Vec<(Setting, Trace)> = Vec::new();
        for setting in settings(&args) {
            let budget = budget_after(&args, &traces, &setting);
            let trace = run(&grid, l2, &setting, budget).unwrap_or_else(|e| {
                eprintln!("error: {name} {}: {e}", setting.label());
                std::process::exit(1)
            });
            let last = trace.last().copied();
            let sim = |p: &linea_bench::elastic_run::Point| p.sim;
            let wall = |p: &linea_bench::elastic_run::Point| p.wall;
            let real = setting.threads as u32 >= setting.slots;
            let walls: Vec<String> =
                TARGETS.iter().map(|&t| if real { time_to(&trace, t, wall) } else { "(sim only)".into() }).collect();
            let scale_ins: Vec<String> = trace
                .scale_ins
                .iter()
                .map(|s| {
                    let at = trace.points.get(s.epoch as usize - 1).map_or(f64::NAN, |p| p.sim);
                    format!("{}: {}->{}, {at:.3}", s.epoch, s.from, s.to)
                })
                .collect();
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                setting.label(),
                trace.points.len(),
                time_to(&trace, TARGETS[0], sim),
                time_to(&trace, TARGETS[1], sim),
                time_to(&trace, TARGETS[2], sim),
                walls[0],
                walls[1],
                walls[2],
                last.map_or("-".into(), |p| format!(
                    "{:.3} | {:.3} | {:.2} | {:.2}",
                    p.sim,
                    p.wall,
                    p.wall / p.sim,
                    p.cpu / p.sim
                )),
                scale_ins.join("; ")
            );
            traces.push((setting, trace));
        }
        println!(
            "\nsimulated clock, best static / elastic (> 1: elastic faster; † a static run stopped by its budget before that time; < x: the elastic run stopped by its budget first, x the ratio at that time):\n"
        );
        println!("| target | elastic | its time | best static K | ratio | best static K >= its minimum | ratio |");
        println!("| --- | --- | --- | --- | --- | --- | --- |");
        for &target in &TARGETS {
            let best_all = best_static(&traces, target, 1);
            for (setting, trace) in traces.iter().filter(|(s, _)| s.elastic_min.is_some()) {
                let min = setting.elastic_min.unwrap_or(1);
                let best_min = best_static(&traces, target, min);
                let elastic = Elastic::of(trace, target);
                if let Some(r) = elastic.ratio(best_all.time) {
                    speedups.push((setting.label(), r));
                }
                println!(
                    "| {target:e} | {} | {} | {} | {} | {} | {} |",
                    setting.label(),
                    elastic.time(),
                    best_all.label,
                    elastic.ratio_text(best_all.time),
                    if min > 1 { best_min.label.as_str() } else { "(same)" },
                    if min > 1 { elastic.ratio_text(best_min.time) } else { "".into() },
                );
            }
        }
    }
    println!(
        "\nover every set and target (simulated clock, best static / elastic; a ratio of a run stopped by its budget is its upper bound):\n"
    );
    let mut labels: Vec<&String> = speedups.iter().map(|(l, _)| l).collect();
    labels.sort();
    labels.dedup();
    for label in labels {
        let ratios: Vec<f64> = speedups.iter().filter(|(l, _)| l == label).map(|s| s.1.value()).collect();
        let bounds = speedups.iter().filter(|(l, r)| l == label && matches!(r, Ratio::AtMost(_))).count();
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "- {label}: mean {mean:.2}x, worst {min:.2}x over {} set-targets{}",
            ratios.len(),
            if bounds > 0 {
                format!(" ({bounds} of them upper bounds: the mean is at most this)")
            } else {
                String::new()
            }
        );
    }
}
