//! Writes genuinely new Criteo rows (docs/benchmarks/past-the-memory-wall.md, "Past the memory
//! wall"), or checks their column statistics against the sample's.
//!
//! ```text
//! criteo-gen --sample TRAIN.tsv --rows N [--first I] [--seed S] [--crosses K] > OUT.tsv
//! criteo-gen --sample TRAIN.tsv --stats N [--seed S] [--crosses K] [--top T]
//! ```
//! The first writes rows I..I+N (default I = 0, S = 1, K = 8); a row depends on (S, its
//! index) only, so ranges written apart and concatenated are the same bytes as one run.
//! The second generates N rows without writing them and prints, for the sample and the
//! generated rows, the label rate, each column's fill rate and distinct count (at every
//! power of ten up to N, for its growth), and each column's T (default 5) most frequent
//! values' frequencies and label rates, with z-scores; it exits 1 if any |z| > 6.

use linea_bench::column_stats::{ColumnStats, compare};
use linea_bench::criteo_gen::{CROSSES, CriteoGenerator, CrossText};
use linea_bench::resample::Sample;
use std::io::{BufWriter, Write};

struct Args {
    sample: String,
    rows: Option<u64>,
    stats: Option<u64>,
    first: u64,
    seed: u64,
    crosses: usize,
    top: usize,
}

const USAGE: &str =
    "usage: criteo-gen --sample TRAIN.tsv (--rows N [--first I] | --stats N [--top T]) [--seed S] [--crosses K]";

fn parse() -> Result<Args, String> {
    let mut args = Args { sample: String::new(), rows: None, stats: None, first: 0, seed: 1, crosses: 8, top: 5 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|_| format!("{flag}: {v:?} is not a whole number"));
        match flag.as_str() {
            "--sample" => args.sample = value,
            "--rows" => args.rows = Some(number(&value)?),
            "--stats" => args.stats = Some(number(&value)?),
            "--first" => args.first = number(&value)?,
            "--seed" => args.seed = number(&value)?,
            "--crosses" => args.crosses = number(&value)? as usize,
            "--top" => args.top = number(&value)? as usize,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.sample.is_empty() || args.rows.is_some() == args.stats.is_some() {
        return Err("give --sample and one of --rows, --stats".into());
    }
    Ok(args)
}

fn main() {
    let result = parse().and_then(|args| {
        let generator = CriteoGenerator::new(Sample::read(&args.sample, '\t')?, args.seed, args.crosses)?;
        match (args.rows, args.stats) {
            (Some(rows), _) => {
                let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
                generator
                    .write(args.first..args.first + rows, &mut out)
                    .and_then(|()| out.flush())
                    .map_err(|e| e.to_string())
            }
            (_, Some(rows)) => stats(&generator, rows, args.top),
            _ => unreachable!("parse checks one is given"),
        }
    });
    if let Err(e) = result {
        eprintln!("criteo-gen: {e}\n{USAGE}");
        std::process::exit(2);
    }
}

fn stats(generator: &CriteoGenerator, rows: u64, top: usize) -> Result<(), String> {
    let columns = generator.columns();
    let mut names: Vec<String> = (1..=13).map(|i| format!("I{i}")).chain((1..=26).map(|i| format!("C{i}"))).collect();
    names.extend(CROSSES[..columns - 39].iter().map(|(a, b)| format!("C{a}xC{b}")));
    let sample = generator.sample();
    let mut of_sample = ColumnStats::default();
    for r in 0..sample.rows() {
        let (label, fields) = sample.row(r);
        let fields: Vec<&str> = fields.iter().map(|f| &**f).collect();
        of_sample.add(label, &fields);
    }
    let (mut generated, mut fields, mut crosses) = (ColumnStats::default(), Vec::new(), CrossText::default());
    let mut growth: Vec<(u64, Vec<usize>)> = Vec::new();
    let mut next = 10;
    for i in 0..rows {
        let label = generator.row(i, &mut fields, &mut crosses);
        let row: Vec<&str> = fields.iter().copied().chain((0..columns - 39).map(|k| crosses.get(k))).collect();
        generated.add(label, &row);
        if i + 1 == next || i + 1 == rows {
            growth.push((i + 1, (0..columns).map(|c| generated.distinct(c)).collect()));
            next *= 10;
        }
    }
    println!("rows: sample {}, generated {rows}", sample.rows());
    println!("label rate: sample {:.5}, generated {:.5}", of_sample.label_rate(), generated.label_rate());
    println!();
    print!("| column | fill (sample) | fill (generated) | distinct (sample) |");
    for (n, _) in &growth {
        print!(" distinct at {n} |");
    }
    println!();
    println!("|{}", " --- |".repeat(4 + growth.len()));
    for c in 0..columns {
        let fill = if c < 39 { format!("{:.4}", of_sample.fill_rate(c)) } else { "—".into() };
        let distinct = if c < 39 { of_sample.distinct(c).to_string() } else { "—".into() };
        print!("| {} | {fill} | {:.4} | {distinct} |", names[c], generated.fill_rate(c));
        for (_, d) in &growth {
            print!(" {} |", d[c]);
        }
        println!();
    }
    let checks = compare(&of_sample, &generated, top, &names[..39]);
    println!();
    println!("| check | sample | generated | z |");
    println!("| --- | --- | --- | --- |");
    for c in &checks {
        println!("| {} | {:.5} | {:.5} | {:+.2} |", c.what, c.sample, c.generated, c.z);
    }
    let worst = checks.iter().map(|c| c.z.abs()).fold(0.0, f64::max);
    println!();
    println!("{} checks, largest |z| {worst:.2}", checks.len());
    if worst > 6.0 { Err(format!("a statistic is off by |z| = {worst:.2}")) } else { Ok(()) }
}
