//! New rows from a labelled sample by class-conditional column resampling (issue 14: higgs
//! and rcv1 at Chicle's scale): `linea_bench::resample` (gen20's, the Criteo generator's
//! columns) for tab-separated dense rows, `linea_bench::resample_bow` for VW bag-of-words rows.
//!
//! `resample tsv|vw INPUT ROWS [SEED] > OUT` (SEED defaults to 0). `tsv`: a 0/1 label first
//! (written back as 0/1), then the columns.

use linea_bench::resample::Sample;
use linea_bench::resample_bow::SparseSample;
use std::io::{self, BufReader, BufWriter, Write};

fn dense(input: &str, rows: u64, seed: u64, out: &mut impl Write) -> Result<(), String> {
    let sample = Sample::read(input, '\t')?;
    let mut fields = Vec::with_capacity(sample.columns());
    let io = |e: io::Error| e.to_string();
    for i in 0..rows {
        let label = sample.generate(seed, i, &mut fields);
        write!(out, "{label}").map_err(io)?;
        for field in &fields {
            write!(out, "\t{field}").map_err(io)?;
        }
        out.write_all(b"\n").map_err(io)?;
    }
    Ok(())
}

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
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let result = match format {
        "tsv" => dense(input, rows, seed, &mut out),
        _ => std::fs::File::open(input)
            .and_then(|f| SparseSample::read(BufReader::new(f))?.write(rows, seed, &mut out))
            .map_err(|e| e.to_string()),
    };
    if let Err(e) = result.and_then(|()| out.flush().map_err(|e| e.to_string())) {
        eprintln!("error: {input}: {e}");
        std::process::exit(1);
    }
}
