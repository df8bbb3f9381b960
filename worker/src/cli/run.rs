//! What each command does.

use super::Cli;
use super::commands::Command;
use crate::driver::{AlgorithmName, TrainSummary};
use crate::error::{LineaError, Result};
use crate::input::FeatureSpec;
use crate::progress::Progress;
use crate::runtime::auth::JobSecret;
use crate::runtime::scheduler::StartGate;
use crate::runtime::{client, master, worker};
use crate::{eval, prepare, storage, train};
use linea_proto::tls::{JobCertificates, PrivateDir, Role, Transport};
use std::time::Duration;

/// Runs a command. On success, returns what a Kubernetes pod running it says in its
/// termination message (JSON), for the commands the operator runs and reads: `prepare`
/// (the grid's size, and whether it was kept) and `master` (the model's epochs, objective and
/// duality gap).
pub fn run(cli: Cli) -> Result<Option<String>> {
    let progress = Progress::new(cli.quiet);
    match cli.command {
        Command::Prepare {
            input,
            format,
            output,
            label,
            positive,
            ignore,
            numeric,
            rows_per_shard,
            reuse,
            threads,
        } => {
            let spec = FeatureSpec {
                format,
                label,
                positive,
                numeric: numeric.unwrap_or(FeatureSpec::default_numeric(format)),
                ignore,
            };
            let storage = storage::open(&output)?;
            let threads = threads.unwrap_or_else(all_cores);
            let range_bytes = crate::input::ranges::RANGE_BYTES;
            let options = prepare::PrepareOptions { input, spec, rows_per_shard, reuse, threads, range_bytes };
            let summary = prepare::prepare(&options, storage.as_ref(), &progress)?;
            let m = &summary.manifest;
            let impure: Vec<&str> = m.blocks.iter().filter(|b| !b.pure).map(|b| b.name.as_str()).collect();
            println!(
                "{} {output}: {} rows, {} non-zeros, {} row shards, {} blocks ({} impure{}{})",
                if summary.reused { "kept" } else { "prepared" },
                m.rows,
                m.nnz,
                m.shards.len(),
                m.blocks.len(),
                impure.len(),
                if impure.is_empty() { "" } else { ": " },
                impure.iter().take(8).copied().collect::<Vec<_>>().join(", ")
            );
            let message = serde_json::json!({
                "reused": summary.reused,
                "rows": m.rows,
                "nnz": m.nnz,
                "shards": m.shards.len(),
                "blocks": m.blocks.len(),
            });
            return Ok(Some(message.to_string()));
        }
        Command::Train { args, threads, workers, cache_mb } => {
            if workers == 0 && args.metrics_listen.is_some() {
                return Err(LineaError::Usage(
                    "--metrics-listen serves a master's metrics: train needs --workers N for one".into(),
                ));
            }
            if workers == 0 && cache_mb.is_some() {
                return Err(LineaError::Usage(
                    "--cache-mb bounds the workers' cell caches: train needs --workers N (one process loads the whole grid)".into(),
                ));
            }
            let threads = threads.unwrap_or_else(all_cores);
            // A signal stops the run between epochs, keeping their model (with `--workers N`
            // too, whose worker processes then end).
            let options = train::TrainOptions {
                worker_cache_mb: cache_mb,
                stop_on_signals: true,
                ..args.options(threads, workers, AlgorithmName::Auto)?
            };
            let summary = train::train(&options, &progress)?;
            report_trained(&options, &summary);
            if let Some(signal) = summary.interrupted {
                let trace = options.trace.as_ref().map_or(String::new(), |t| format!(" and {t} its trace"));
                return Err(LineaError::Stopped(format!(
                    "on {signal} after epoch {}: {} holds the model of the epochs done{trace}; it is not converged \
                     (no stopping rule was met)",
                    summary.epochs, options.model
                )));
            }
        }
        Command::Master {
            args,
            listen,
            checkpoint,
            secret_file,
            tls,
            allreduce,
            speculation,
            wait_for_workers,
            wait_for_workers_timeout,
            late_workers_for,
        } => {
            if args.algorithm == Some(AlgorithmName::Auto) {
                return Err(LineaError::Usage(
                    "--algorithm auto is `linea train`'s: a master runs a named algorithm (default scd, whose model \
                     is the same for any worker count)"
                        .into(),
                ));
            }
            let secret = JobSecret::load(secret_file.as_deref())?;
            // Kept until the master exits: its workers read their certificate from it.
            let mut own_folder = None;
            let transport = match Transport::load(tls.tls_dir.as_deref(), tls.insecure, Role::Master)? {
                Some(transport) => transport,
                None => {
                    let certificates = JobCertificates::generate("local", &local_master_names(&listen))?;
                    let folder = PrivateDir::new()?;
                    certificates.write(folder.path())?;
                    // Even with --quiet: without it nobody can join this master.
                    eprintln!("TLS with a per-run CA: workers and clients pass --tls-dir {}", folder.path().display());
                    own_folder = Some(folder);
                    Transport::Tls(certificates.tls(Role::Master)?)
                }
            };
            let train = args.options(0, 0, AlgorithmName::Scd)?;
            let options = master::MasterOptions {
                train,
                listen,
                checkpoint,
                secret,
                transport,
                allreduce,
                speculation: speculation.speculation(),
                wait_for_workers: StartGate {
                    workers: wait_for_workers,
                    patience: Duration::from_secs(wait_for_workers_timeout),
                },
                stop_on_signals: true,
                late_workers: Duration::from_secs(late_workers_for),
            };
            let summary = master::run(&options, &progress, |address, _| {
                progress.always(&format!("master listening on {address}"));
            })?;
            report_trained(&options.train, &summary);
            drop(own_folder);
            // The operator's final status: the epoch count, objective and (CoCoA) relative
            // duality gap in the header of the model just written (none if it cannot be read
            // back; the run still succeeded).
            let model = eval::read_model(&options.train.model).ok();
            return Ok(model.map(|m| {
                let t = &m.header.training;
                let mut summary = serde_json::json!({"epochs": t.epochs, "objective": t.objective});
                if let Some(gap) = t.duality_gap {
                    summary["dualityGap"] = gap.into();
                }
                summary.to_string()
            }));
        }
        Command::Certs { output, master_names } => {
            use std::os::unix::fs::DirBuilderExt;
            let folder = std::path::Path::new(&output);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(folder)
                .map_err(LineaError::io(folder.to_path_buf()))?;
            JobCertificates::generate(&output, &master_names)?.write(folder)?;
            progress.always(&format!(
                "wrote the job's certificates to {output} (master names: {})",
                master_names.join(", ")
            ));
        }
        Command::Worker {
            master,
            listen,
            advertise,
            threads,
            cache_mb,
            reconnect_for,
            drain_timeout,
            exit_with_stdin,
        } => {
            if exit_with_stdin {
                exit_when_stdin_closes();
            }
            // What `kubectl logs` of a worker pod shows: whom it serves, and how it ended.
            progress.always(&format!("worker of master {}, listening on {listen}", master.address()));
            worker::run(worker::WorkerOptions {
                master: master.url(),
                listen,
                advertise,
                threads: threads.unwrap_or_else(all_cores),
                cache_bytes: cache_mb << 20,
                reconnect_for: Duration::from_secs(reconnect_for),
                drain_timeout: Duration::from_secs(drain_timeout),
                secret: master.secret()?,
                transport: master.transport()?,
                master_name: master.master_name,
            })?;
            progress.always("worker done: released by the master");
        }
        Command::Status { master } => {
            let (secret, transport) = (master.secret()?, master.transport()?);
            let status = client::status(&master.url(), master.master_name.as_deref(), &secret, &transport)?;
            println!("{}", serde_json::to_string_pretty(&client::status_json(&status)).expect("serializes"));
        }
        Command::Drain { master, worker } => {
            let (secret, transport) = (master.secret()?, master.transport()?);
            let found = client::drain(&master.url(), master.master_name.as_deref(), &secret, &transport, &worker)?;
            if !found {
                return Err(LineaError::Usage(format!("the master knows no worker {worker:?}")));
            }
            progress.always(&format!("draining {worker}"));
        }
        Command::Eval { model, data, format, json } => {
            let model = eval::read_model(&model)?;
            let result = eval::evaluate(&model, &data, format)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&result).expect("serializes"));
            } else {
                let m = &result.metrics;
                println!("examples   {}", m.examples);
                println!("objective  {}", objective_text(result.objective));
                let rows = [("auc", m.auc), ("log loss", m.log_loss), ("accuracy", m.accuracy), ("rmse", m.rmse)];
                for (name, value) in rows.iter().filter_map(|(n, v)| v.map(|v| (n, v))) {
                    println!("{name:<10} {value:.6}");
                }
            }
        }
        Command::Predict { model, input, format, output } => {
            let model = eval::read_model(&model)?;
            let n = eval::predict(&model, &input, format, &output)?;
            progress.always(&format!("wrote {n} scores to {output}"));
        }
    }
    Ok(None)
}

fn report_trained(options: &train::TrainOptions, summary: &TrainSummary) {
    let per_thread = match options.threads {
        0 => String::new(),
        threads => {
            let rate = summary.nnz_per_second_per_thread(threads) / 1e6;
            let threads_text = match summary.busy_threads(threads) {
                busy if busy < threads => format!("{busy} of {threads} threads busy"),
                _ => format!("{threads} threads"),
            };
            format!(" ({rate:.1}M nnz/s per thread, {threads_text})")
        }
    };
    let gap = summary.gap.map_or(String::new(), |g| format!(", relative {} {:.3e}", summary.gap_name, g.relative));
    println!(
        "trained {} with {}: objective {} after {} epochs in {:.2}s{per_thread}{gap}",
        options.model,
        summary.ran(),
        objective_text(summary.objective),
        summary.epochs,
        summary.seconds,
    );
}

/// An objective as printed: 15 significant digits at every magnitude (what an f64 holds
/// exactly), in plain notation from 1e-3 up and scientific below, so a printed objective
/// can be checked against a reference to 1e-12 whatever the data's scale. (Ten decimals
/// kept only 8 digits of an objective of 1.4e-3.)
fn objective_text(value: f64) -> String {
    const SIGNIFICANT: i32 = 15;
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let exponent = value.abs().log10().floor() as i32;
    if exponent < -3 {
        format!("{value:.*e}", (SIGNIFICANT - 1) as usize)
    } else {
        format!("{value:.*}", (SIGNIFICANT - 1 - exponent).max(0) as usize)
    }
}

/// The default thread count: every core, within the range `--threads` allows.
fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(256)
}

/// Names a master without `--tls-dir` is reached by: this machine's and the listen address.
fn local_master_names(listen: &str) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        names.push(host.trim().to_string());
    }
    if let Some((host, _)) = listen.rsplit_once(':')
        && !["", "0.0.0.0", "[::]"].contains(&host)
    {
        names.push(host.trim_matches(['[', ']']).to_string());
    }
    names.retain(|n| !n.is_empty());
    names.dedup();
    names
}

/// Ends this process, exit 1, when its standard input reaches its end: nothing is ever sent
/// on it, so the read returns only when the process that holds the other end is gone (or
/// closed it). A worker released as usual exits before that, from `main`.
fn exit_when_stdin_closes() {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        eprintln!("error: the process that started this worker ended (its standard input closed)");
        std::process::exit(1);
    });
}

#[cfg(test)]
mod tests {
    use super::objective_text;

    #[test]
    fn a_printed_objective_reads_back_to_1e_14_at_every_magnitude() {
        for value in [1.399859508898176e-3, 10546.674515094912, 7.123456789012345e-9, 0.5, 3.3e17, -2.5e-4] {
            let text = objective_text(value);
            let read: f64 = text.parse().unwrap();
            assert!((read - value).abs() <= 1e-14 * value.abs(), "{value:e} printed as {text}");
        }
        // The common case keeps its look: ten decimals at a9a's magnitude.
        assert_eq!(objective_text(10546.674515094912), "10546.6745150949");
        assert_eq!(objective_text(0.0), "0");
    }
}
