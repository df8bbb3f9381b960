//! The master's own `/metrics` on real processes: a `linea master` and a `linea worker` on
//! loopback, scraped over plain HTTP, agree with what `linea status` prints; so does
//! `linea train --workers N`'s in-process master (the same code path).

mod common;

use common::processes::*;
use linea_worker::runtime::proto::StatusReply;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `linea status` (the command) as JSON.
fn linea_status(master: &str) -> serde_json::Value {
    let out = linea(&["status", "--master", master]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A number of `linea status`'s JSON, `None` for null or absent.
fn field(status: &serde_json::Value, name: &str) -> Option<f64> {
    status.get(name).and_then(serde_json::Value::as_f64)
}

#[test]
fn the_masters_metrics_agree_with_linea_status() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "8192");
    let (listen, metrics) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    // CoCoA (a duality gap), until stopped: the test ends it.
    let args = [
        "master",
        "--data",
        &grid,
        "--model",
        &model,
        "--listen",
        &listen,
        "--checkpoint",
        &checkpoint,
        "--metrics-listen",
        &metrics,
        "--algorithm",
        "cocoa",
        "--loss",
        "hinge",
        "--slots",
        "1",
        "--epochs",
        "1000000",
        "--gap-tolerance",
        "0",
    ];
    let started = Instant::now();
    let mut master = start_master(dir.path(), "master.log", &args, &[]);
    let cluster = Cluster::new(&listen);
    cluster.wait_for("the master to listen", |s| s.phase == "training");
    let log = std::fs::read_to_string(dir.path().join("master.log")).unwrap();
    assert!(log.contains(&format!("master metrics on http://{metrics}/metrics")), "{log}");

    let (code, before) = http_get(&metrics, "/metrics");
    assert_eq!(code, 200, "{before}");
    assert_eq!(sample(&before, "linea_master_workers{state=\"active\"}"), Some(0.0), "{before}");
    assert_eq!(sample(&before, "linea_master_epoch"), Some(0.0), "{before}");
    assert_eq!(sample(&before, "linea_master_objective"), None, "no objective before the first epoch: {before}");
    assert_eq!(http_get(&metrics, "/other").0, 404);

    let mut worker: Child = cluster.worker();
    cluster.wait_for("three epochs", |s| s.epoch >= 3 && s.workers_active == 1);
    // A stopped worker freezes the run (the master waits for its items) but stays
    // connected, so the master's numbers hold still while they are compared.
    signal(worker.id(), "STOP");
    // A result the worker sent just before it stopped may still be on its way, so "still" is
    // proven around the reads: the counters only grow, so the same iteration and items before
    // and after mean nothing moved in between.
    let moved = |a: &StatusReply, b: &StatusReply| (a.iteration, a.items_completed) != (b.iteration, b.items_completed);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (text, status, later) = loop {
        let before = cluster.status().unwrap();
        let (_, text) = http_get(&metrics, "/metrics");
        let status = linea_status(&listen);
        let (_, later) = http_get(&metrics, "/metrics");
        let after = cluster.status().unwrap();
        if !moved(&before, &after) {
            assert_eq!(field(&status, "iteration"), Some(after.iteration as f64), "{status}");
            break (text, status, later);
        }
        assert!(Instant::now() < deadline, "the run did not stop moving: {after:?}");
    };

    assert_eq!(sample(&text, "linea_master_phase{phase=\"training\"}"), Some(1.0), "{text}");
    for (series, name) in [
        ("linea_master_epoch", "epoch"),
        ("linea_master_max_epochs", "max_epochs"),
        ("linea_master_iterations", "iteration"),
        ("linea_master_objective", "objective"),
        ("linea_master_duality_gap{kind=\"absolute\"}", "gap_absolute"),
        ("linea_master_duality_gap{kind=\"relative\"}", "gap_relative"),
        ("linea_master_examples_per_second", "examples_per_second"),
        ("linea_master_work_items_completed", "items_completed"),
        ("linea_master_workers{state=\"active\"}", "workers_active"),
        ("linea_master_workers{state=\"draining\"}", "workers_draining"),
        ("linea_master_workers_desired", "workers_desired"),
        ("linea_master_workers_lost", "workers_lost"),
    ] {
        assert_eq!(sample(&text, series), field(&status, name), "{series} vs status.{name}:\n{text}\n{status}");
    }
    assert!(field(&status, "epoch").unwrap() >= 3.0 && field(&status, "gap_relative").unwrap() > 0.0, "{status}");
    assert!(field(&status, "examples_per_second").unwrap() > 0.0, "{status}");
    assert_eq!(sample(&text, "linea_master_workers{state=\"active\"}"), Some(1.0));
    // The checkpoint's age: written after every iteration, so younger than the master; and
    // an age, not a time stamp: it grows while nothing is written.
    let age = sample(&text, "linea_master_checkpoint_age_seconds").expect("a checkpoint age");
    assert!(age >= 0.0 && age < started.elapsed().as_secs_f64(), "{age}");
    let older = sample(&later, "linea_master_checkpoint_age_seconds").unwrap();
    assert!(older > age, "{older} after {age}");

    signal(worker.id(), "CONT");
    let _ = master.kill();
    master.wait().unwrap();
    let _ = worker.kill();
    worker.wait().unwrap();
}

#[test]
fn train_with_workers_serves_its_in_process_masters_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "8192");
    let metrics = format!("127.0.0.1:{}", free_port());
    let model = path(dir.path(), "model");
    let mut train = linea(&[
        "train",
        "--data",
        &grid,
        "--model",
        &model,
        "--workers",
        "2",
        "--threads",
        "2",
        // SCD named: it runs every epoch asked for (--algorithm auto's choice may stop sooner).
        "--algorithm",
        "scd",
        "--epochs",
        "1000000",
        "--tolerance",
        "0",
        "--metrics-listen",
        &metrics,
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Polled until both workers are in and an epoch is done (the server may not be up yet).
    let deadline = Instant::now() + Duration::from_secs(120);
    let text = loop {
        let scraped = std::net::TcpStream::connect(&metrics).is_ok().then(|| http_get(&metrics, "/metrics").1);
        if let Some(text) = scraped.filter(|t| {
            sample(t, "linea_master_workers{state=\"active\"}") == Some(2.0)
                && sample(t, "linea_master_epoch").is_some_and(|e| e >= 1.0)
        }) {
            break text;
        }
        assert!(Instant::now() < deadline, "no metrics with 2 workers and an epoch done");
        // A poll interval, not a synchronisation: the condition is checked again.
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(sample(&text, "linea_master_objective").is_some_and(f64::is_finite), "{text}");
    assert!(sample(&text, "linea_master_examples_per_second").is_some_and(|r| r > 0.0), "{text}");
    assert_eq!(sample(&text, "linea_master_checkpoint_age_seconds"), None, "train --workers keeps no checkpoints");
    let workers = children_of(train.id());
    assert_eq!(workers.len(), 2, "{workers:?}");
    let _ = train.kill();
    train.wait().unwrap();
    // Orphaned now; they would give up after --reconnect-for, but need not wait for it.
    for pid in workers {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
}

#[test]
fn metrics_listen_without_a_master_is_refused() {
    let out =
        linea(&["train", "--data", "/nonexistent", "--model", "/nonexistent/m", "--metrics-listen", "127.0.0.1:0"])
            .output()
            .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--metrics-listen") && stderr.contains("--workers"), "{stderr}");
}
