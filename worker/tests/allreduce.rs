//! The tree allreduce on real processes: a master and 4 workers on loopback (TLS, the job
//! secret) training L-BFGS on criteo-sample, whose 34,692 sums travel the tree in 3
//! chunks. The model's bytes equal those of one process, of the master-centred range
//! aggregation and of one worker; a worker stopped and then killed with -9 in the middle
//! of an allreduce makes the master rebuild the tree (log line, status) and restart that
//! reduce, and the run ends with the same bytes (speculation off there: a stopped worker
//! found stalled is kept out of later trees, worker/tests/speculation.rs). Waits are on
//! observable state (status, log lines, process exits), never on time.

mod common;

use common::processes::*;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const LBFGS: [&str; 8] = ["--algorithm", "lbfgs", "--epochs", "25", "--tolerance", "0", "--gradient-tolerance", "0"];

/// `linea master` with info logs in `dir/log`.
fn master(dir: &Path, log: &str, listen: &str, args: &[&str]) -> Child {
    let info = [("RUST_LOG".to_string(), "linea_worker=info".to_string())];
    start_master(dir, log, &[&["master", "--listen", listen], args].concat(), &info)
}

/// A worker whose debug log (it says when each tree item starts) goes to `dir/log`.
fn worker(dir: &Path, log: &str, master_url: &str) -> Child {
    logged_worker(dir, log, master_url, "linea_worker::runtime::worker=debug")
}

/// Runs a master with `extra` and `workers` workers to the end; returns the model's bytes
/// and the master's log.
fn distributed(dir: &Path, name: &str, grid: &str, workers: usize, extra: &[&str]) -> (Vec<u8>, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let model = path(dir, name);
    let log = format!("{name}.log");
    let mut m = master(dir, &log, &listen, &[&["--data", grid, "--model", &model], &LBFGS[..], extra].concat());
    let url = format!("http://{listen}");
    let mut ws: Vec<Child> = (0..workers).map(|i| worker(dir, &format!("{name}-w{i}.log"), &url)).collect();
    let status = m.wait().unwrap();
    let log = std::fs::read_to_string(path(dir, &log)).unwrap();
    assert!(status.success(), "{log}");
    for w in &mut ws {
        assert!(w.wait().unwrap().success());
    }
    (std::fs::read(&model).unwrap(), log)
}

#[test]
fn the_tree_gives_the_bytes_of_the_master_centred_reduction_and_of_one_worker() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "criteo-sample/train.tsv", "criteo", "2000");
    let reference = path(dir.path(), "reference");
    ok(&[&["train", "--data", &grid, "--model", &reference, "--threads", "1"], &LBFGS[..]].concat());
    let reference = std::fs::read(&reference).unwrap();
    let (tree, log) = distributed(dir.path(), "tree-4", &grid, 4, &["--allreduce", "tree"]);
    assert!(log.contains("allreduce tree rebuilt (first allreduce)"), "{log}");
    assert!(tree == reference, "the tree over 4 workers gives other bytes than one process");
    let (ranges, log) = distributed(dir.path(), "ranges-4", &grid, 4, &[]);
    assert!(!log.contains("allreduce tree"), "the default, --allreduce ranges, builds no tree: {log}");
    assert!(ranges == reference, "the master-centred reduction gives other bytes");
    let (one, _) = distributed(dir.path(), "tree-1", &grid, 1, &["--allreduce", "tree"]);
    assert!(one == reference, "a tree of one worker gives other bytes");
}

/// Lines of `log` past byte `from` that say a tree item started; returns the phases.
fn tree_items_after(log: &str, from: usize) -> Vec<u64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("allreduce: tree item started"))
        .filter_map(|l| l.split("phase=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect()
}

fn signal(child: &Child, signal: &str) {
    assert!(Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap().success());
}

/// The tree's root is stopped (SIGSTOP) and, once another worker has started a tree item
/// after that — an allreduce that cannot complete without the root, which every worker
/// fetches the total from — killed with -9: the master rebuilds the tree without it (a new
/// generation in its log and status, every live worker placed in it), restarts that
/// reduce, and the run ends with the bytes of one process. (A stopped leaf is not enough:
/// its parent may have fetched its sums before the stop, and then the reduce completes
/// without a restart.)
#[test]
fn kill_9_of_a_worker_mid_allreduce_rebuilds_the_tree_and_keeps_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "criteo-sample/train.tsv", "criteo", "2000");
    let reference = path(dir.path(), "reference");
    let long = ["--algorithm", "lbfgs", "--epochs", "60", "--tolerance", "0", "--gradient-tolerance", "0"];
    ok(&[&["train", "--data", &grid, "--model", &reference, "--threads", "1"], &long[..]].concat());
    // Without speculation: it would find the stopped worker stalled after a second and take
    // it out of the next tree (docs/architecture.md), and this test is about the loss path
    // — the stopped worker stays in every tree until it is killed.
    let tree = ["--allreduce", "tree", "--no-speculation"];

    let listen = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new(&listen);
    let model = path(dir.path(), "model");
    let mut m = master(
        dir.path(),
        "master.log",
        &listen,
        &[&["--data", &grid, "--model", &model], &long[..], &tree[..]].concat(),
    );
    let logs: Vec<String> = (0..4).map(|i| path(dir.path(), &format!("w{i}.log"))).collect();
    let mut workers: Vec<Child> =
        (0..4).map(|i| worker(dir.path(), &format!("w{i}.log"), &cluster.master_url)).collect();
    let before = cluster.wait_for("a tree over 4 workers, a few epochs in", |s| {
        s.epoch >= 3 && s.workers.len() == 4 && s.allreduce_generation >= 1
    });
    assert!(before.workers.iter().all(|w| w.tree_parent.is_some()), "every worker has a place: {before:?}");
    assert_eq!(before.workers.iter().filter(|w| w.tree_parent.as_deref() == Some("")).count(), 1, "one root");

    let root = before.workers.iter().find(|w| w.tree_parent.as_deref() == Some("")).unwrap();
    let starting = format!("id={} ", root.worker_id);
    let root_log = |l: &String| {
        std::fs::read_to_string(l)
            .unwrap()
            .lines()
            .any(|line| line.contains("worker starting") && line.contains(&starting))
    };
    let v = logs.iter().position(root_log).unwrap_or_else(|| panic!("no worker log names the root {root:?}"));
    let mut victim = workers.remove(v);
    let others: Vec<usize> = (0..4).filter(|&i| i != v).collect();
    // Stopped inside a phase of unit items, the root holds up the phase itself and no tree
    // item starts until the master's keepalive (about 30 s) drops it — no allreduce to
    // cut. So each attempt stops the root for a few seconds at most, and if no other worker
    // started a tree item meanwhile, lets it go on until the run has moved on by an item;
    // the next attempt lands elsewhere. Whether an attempt lands in a tree phase is a matter
    // of chance (in one CI run all of 30 missed; run alone right after, it passed): up to 80, each
    // moving the run on by at least one of its hundreds of items.
    let mut attempts = 0;
    let phase = 'attempts: loop {
        attempts += 1;
        assert!(attempts <= 80, "no tree item started while the root was stopped, in 80 attempts");
        let items = cluster.status().map_or(0, |s| s.items_completed);
        signal(&victim, "-STOP");
        let offsets: Vec<usize> = logs.iter().map(|l| std::fs::metadata(l).map_or(0, |m| m.len() as usize)).collect();
        let window = Instant::now() + Duration::from_secs(3);
        while Instant::now() < window {
            let started: Vec<u64> = others.iter().flat_map(|&i| tree_items_after(&logs[i], offsets[i])).collect();
            if let Some(&p) = started.first() {
                break 'attempts p;
            }
            // A poll interval, not a synchronisation: the logs are read again.
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(&victim, "-CONT");
        cluster.wait_for("the run moves on after the root went on", |s| s.items_completed > items);
    };
    signal(&victim, "-KILL");
    victim.wait().unwrap();
    let after = cluster.wait_for("the tree rebuilt over the 3 left", |s| {
        s.allreduce_generation > before.allreduce_generation
            && s.workers.len() == 3
            && s.workers.iter().all(|w| w.tree_parent.is_some())
    });
    assert_eq!(after.workers_lost, 1);
    let status = m.wait().unwrap();
    let log = std::fs::read_to_string(path(dir.path(), "master.log")).unwrap();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("allreduce tree rebuilt (reduce restarted after a loss or an abort)"),
        "phase {phase}'s allreduce was cut by the kill and restarted on a rebuilt tree: {log}"
    );
    for mut w in workers {
        assert!(w.wait().unwrap().success(), "every worker not killed exits 0");
    }
    assert!(std::fs::read(&model).unwrap() == std::fs::read(&reference).unwrap(), "the disturbed run's bytes differ");
}
