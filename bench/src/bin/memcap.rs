//! Runs a command and reports the peak memory of its whole process tree (the master and its workers
//! together), optionally killing the tree when it goes above a cap
//! (docs/benchmarks/past-the-memory-wall.md, "Past the memory wall"; `linea_bench::memcap` says
//! why).
//!
//! ```text
//! memcap [--cap-mb C] [--every-ms MS] [--name NAME] -- COMMAND [ARGS...]
//! ```
//! Samples every MS (default 20) milliseconds. At the end prints one line to stderr:
//! `memcap NAME: exit E, S s, peak sum of VmRSS X MiB (lower bound), sum of VmHWM Y MiB
//! (upper bound), P processes`, and when the cap was hit, `killed above the cap of C MiB
//! (the tree held Z MiB at T s): a simulated out-of-memory kill`, then `; VmHWM each: A MiB
//! (linea train), B MiB (linea worker)` (each process's peak, named by its program and
//! subcommand). Exits with the command's
//! code, 128 + its signal, or 137 when the cap killed it.

use linea_bench::memcap::{Watch, kill_all};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: memcap [--cap-mb C] [--every-ms MS] [--name NAME] -- COMMAND [ARGS...]";

struct Args {
    cap_mb: Option<u64>,
    every: Duration,
    name: String,
    command: Vec<String>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args { cap_mb: None, every: Duration::from_millis(20), name: String::new(), command: Vec::new() };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--cap-mb" => parsed.cap_mb = Some(value("--cap-mb")?.parse().map_err(|e| format!("--cap-mb: {e}"))?),
            "--every-ms" => {
                let ms: u64 = value("--every-ms")?.parse().map_err(|e| format!("--every-ms: {e}"))?;
                parsed.every = Duration::from_millis(ms.max(1));
            }
            "--name" => parsed.name = value("--name")?,
            "--" => {
                parsed.command = args.collect();
                break;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if parsed.command.is_empty() {
        return Err("no command after --".into());
    }
    if parsed.name.is_empty() {
        parsed.name = parsed.command[0].rsplit('/').next().unwrap_or_default().to_string();
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("memcap: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    let mut child = match Command::new(&args.command[0]).args(&args.command[1..]).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("memcap: cannot start {}: {e}", args.command[0]);
            return ExitCode::from(2);
        }
    };
    let mut watch = Watch::default();
    let mut killed = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => {
                eprintln!("memcap: waiting for {}: {e}", args.command[0]);
                break None;
            }
        }
        let sample = watch.sample(child.id());
        if let Some(cap) = args.cap_mb
            && killed.is_none()
            && sample.rss_kb > cap << 10
        {
            kill_all(&sample.pids);
            killed = Some((sample.rss_kb, start.elapsed()));
        }
        std::thread::sleep(args.every);
    };
    let mib = |kb: u64| kb as f64 / 1024.0;
    let code = match status {
        _ if killed.is_some() => 137,
        Some(s) => s.code().or(s.signal().map(|sig| 128 + sig)).unwrap_or(1),
        None => 1,
    };
    eprintln!(
        "memcap {}: exit {code}, {:.1} s, peak sum of VmRSS {:.1} MiB (lower bound), sum of VmHWM {:.1} MiB (upper bound), {} processes{}; VmHWM each: {}",
        args.name,
        start.elapsed().as_secs_f64(),
        mib(watch.peak_sum_kb),
        mib(watch.sum_of_hwm_kb()),
        watch.processes_seen(),
        match (killed, args.cap_mb) {
            (Some((kb, at)), Some(cap)) => format!(
                "; killed above the cap of {cap} MiB (the tree held {:.1} MiB at {:.1} s): a simulated out-of-memory kill",
                mib(kb),
                at.as_secs_f64()
            ),
            (None, Some(cap)) => format!("; within the cap of {cap} MiB"),
            _ => String::new(),
        },
        watch
            .each_hwm_kb()
            .iter()
            .map(|(name, kb)| format!("{:.1} MiB ({name})", mib(*kb)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
