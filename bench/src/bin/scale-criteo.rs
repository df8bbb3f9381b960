//! Scales the Criteo sample up for throughput benchmarks.
//!
//! `scale-criteo INPUT.tsv ROWS > OUT.tsv` writes ROWS rows: the input's rows over and over,
//! replica `r` = (row index / input rows). Labels and the 13 integer columns are copied; each
//! of the 26 categorical values is replaced by a 64-bit FNV-1a hash of (value, r mod 16,
//! column), written as 16 hex digits, so every 16 replicas bring fresh categories and the
//! feature count grows with the data, as in a real click log, while each replica keeps the
//! sample's category frequencies. Missing values stay missing.

use linea_bench::criteo_gen::fnv1a;
use std::io::{BufRead, BufWriter, Write};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, input, rows] = args.as_slice() else {
        eprintln!("usage: scale-criteo INPUT.tsv ROWS > OUT.tsv");
        std::process::exit(2);
    };
    let rows: usize = rows.parse().expect("ROWS is a number");
    let lines: Vec<String> = std::io::BufReader::new(std::fs::File::open(input)?).lines().collect::<Result<_, _>>()?;
    let lines: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    for i in 0..rows {
        let replica = ((i / lines.len()) % 16) as u8;
        for (c, field) in lines[i % lines.len()].split('\t').enumerate() {
            if c > 0 {
                out.write_all(b"\t")?;
            }
            if c >= 14 && !field.is_empty() {
                write!(out, "{:016x}", fnv1a(&[field.as_bytes(), &[replica], &[c as u8]]))?;
            } else {
                out.write_all(field.as_bytes())?;
            }
        }
        out.write_all(b"\n")?;
    }
    out.flush()
}
