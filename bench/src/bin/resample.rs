//! New rows from a labelled sample by class-conditional column resampling (issue 14: higgs
//! and rcv1 at Chicle's scale): `linea_bench::resample_dense` for tab-separated dense rows,
//! `linea_bench::resample_bow` for VW bag-of-words rows.
//!
//! `resample tsv|vw INPUT ROWS [SEED] > OUT` (SEED defaults to 0).

use linea_bench::resample_bow::SparseSample;
use linea_bench::resample_dense::DenseSample;
use std::io::{BufReader, BufWriter, Write};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let parsed = match args.as_slice() {
        [_, format, input, rows, rest @ ..] if rest.len() <= 1 => {
            let seed = rest.first().map_or(Some(0), |s| s.parse::<u64>().ok());
            rows.parse::<u64>().ok().zip(seed).map(|(rows, seed)| (format.as_str(), input, rows, seed))
        }
        _ => None,
    };
    let Some((format, input, rows, seed)) = parsed.filter(|p| matches!(p.0, "tsv" | "vw")) else {
        eprintln!("usage: resample tsv|vw INPUT ROWS [SEED] > OUT");
        std::process::exit(2);
    };
    let result = std::fs::File::open(input).and_then(|f| {
        let input = BufReader::new(f);
        let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
        match format {
            "tsv" => DenseSample::read(input)?.write(rows, seed, &mut out)?,
            _ => SparseSample::read(input)?.write(rows, seed, &mut out)?,
        }
        out.flush()
    });
    if let Err(e) = result {
        eprintln!("error: {input}: {e}");
        std::process::exit(1);
    }
}
