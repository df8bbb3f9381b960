//! `linea train` stopped by SIGTERM mid-run, in one process and with `--workers 2`: the
//! trace written as the run went holds every epoch done, the model written is exactly that
//! of those epochs, the worker processes are gone, and the exit (143, the `stopped:` line)
//! says it is not converged.

mod common;

use common::processes::{children_of, path, prepare_grid, sigterm};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The epoch numbers of a trace's lines.
fn trace_epochs(trace: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(trace).unwrap();
    assert!(text.starts_with("epoch,seconds,objective,gap,relative_gap,workers,algorithm\n"), "{text}");
    text.lines().skip(1).map(|l| l.split(',').next().unwrap().parse().unwrap()).collect()
}

/// SCD on one thread with no stopping rule that could end it before a signal does.
const SCD_WITHOUT_END: [&str; 6] = ["--algorithm", "scd", "--tolerance", "0", "--threads", "1"];

/// Starts `linea train` on `grid` with `args` and far more epochs than it can run before
/// the test stops it (an a9a epoch takes milliseconds), and reads its stderr until epoch 3
/// ends. Without a terminal, progress is one stderr line per epoch, printed after the
/// epoch's trace line was written: the third one means the run is well under way. Returns
/// the child, the rest of its stderr (which worker processes share) and the lines read.
fn train_until_epoch_3(grid: &str, args: &[&str]) -> (Child, impl Iterator<Item = String> + use<>, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_linea"))
        .arg("train")
        .args(SCD_WITHOUT_END)
        .args(["--data", grid, "--epochs", "1000000"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines().map(Result::unwrap);
    let log = stderr.by_ref().take_while(|l| !l.starts_with("epoch   3 ")).collect();
    (child, stderr, log)
}

#[test]
fn sigterm_stops_train_at_an_epoch_boundary_with_its_trace_and_the_model_so_far() {
    stopped_by_sigterm(&[]);
}

#[test]
fn sigterm_stops_train_with_workers_the_same_way_and_ends_the_workers() {
    stopped_by_sigterm(&["--workers", "2"]);
}

/// `linea train --workers 2` killed outright (SIGKILL: no handler runs; a second SIGTERM
/// ends it as abruptly): its worker processes end with it and say why, instead of retrying
/// to reach their master for `--reconnect-for`.
#[test]
fn the_workers_of_a_killed_train_end_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "8192");
    let model = path(dir.path(), "model");
    let (mut child, stderr, mut log) = train_until_epoch_3(&grid, &["--model", &model, "--workers", "2"]);
    assert_eq!(children_of(child.id()).len(), 2, "{log:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    // The workers write to the same stderr, so it ends when both have exited.
    log.extend(stderr);
    let log = log.join("\n");
    assert_eq!(log.matches("error: the process that started this worker ended").count(), 2, "{log}");
}

/// Runs `linea train` with `extra` arguments until its third epoch, sends it SIGTERM, and
/// checks what it left.
fn stopped_by_sigterm(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "8192");
    let (model, trace) = (path(dir.path(), "model"), path(dir.path(), "trace.csv"));
    let (mut child, stderr, mut log) =
        train_until_epoch_3(&grid, &[&["--model", &model, "--trace", &trace][..], extra].concat());
    assert_eq!(trace_epochs(&trace)[..4], [0, 1, 2, 3], "written as the run goes, before it ends: {log:?}");
    // The embedded master's worker processes, running the epochs.
    let workers = children_of(child.id());
    assert_eq!(workers.len(), if extra.is_empty() { 0 } else { 2 }, "{workers:?}");
    sigterm(&child);
    log.extend(stderr);
    let status = child.wait().unwrap();
    let log = log.join("\n");
    for pid in workers {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "worker {pid} still there: {log}");
    }
    assert_eq!(status.code(), Some(143), "{log}");
    let stopped = log.lines().find_map(|l| l.strip_prefix("stopped: on SIGTERM after epoch ")).expect(&log);
    let (epochs, why) = stopped.split_once(':').unwrap();
    assert!(why.contains("not converged") && why.contains(&model) && why.contains(&trace), "{log}");
    let epochs: u32 = epochs.parse().unwrap();
    assert!((3..1_000_000).contains(&epochs), "{log}");
    assert_eq!(trace_epochs(&trace), (0..=epochs).collect::<Vec<_>>(), "every epoch done, once: {log}");
    // SCD is deterministic, and the same bytes for any worker count: the model of a run in
    // one process asked for exactly those epochs, byte for byte.
    let again = path(dir.path(), "again");
    let out = Command::new(env!("CARGO_BIN_EXE_linea"))
        .arg("train")
        .args(SCD_WITHOUT_END)
        .args(["--data", &grid, "--epochs", &epochs.to_string(), "--model", &again, "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read(&model).unwrap() == std::fs::read(&again).unwrap(), "the model of epochs 1..={epochs}");
}
