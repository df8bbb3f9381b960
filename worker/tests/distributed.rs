//! The distributed runtime end to end: real `linea master` and `linea worker` processes on
//! loopback, real data. The model must be the same bytes whatever the worker count and
//! whatever happens to the processes. Waits are on observable state (the master's status,
//! process exits), never on time.

mod common;

use common::data;
use linea_worker::runtime::auth::{JobSecret, SECRET_ENV};
use linea_worker::runtime::client;
use linea_worker::runtime::proto::StatusReply;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "test-secret-0123456789abcdef";

fn linea(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_linea"));
    command.args(args).arg("--quiet").env(SECRET_ENV, SECRET);
    command
}

fn ok(args: &[&str]) {
    let out = linea(args).output().unwrap();
    assert!(out.status.success(), "linea {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_string_lossy().into_owned()
}

fn prepare(dir: &Path, input: &str, format: &str, rows_per_shard: &str) -> String {
    let grid = path(dir, "grid");
    ok(&[
        "prepare",
        "--input",
        &data(input),
        "--format",
        format,
        "--output",
        &grid,
        "--rows-per-shard",
        rows_per_shard,
    ]);
    grid
}

/// Trains with `extra` arguments and returns the model's bytes.
fn train(dir: &Path, grid: &str, name: &str, extra: &[&str]) -> Vec<u8> {
    let model = path(dir, name);
    let mut args = vec!["train", "--data", grid, "--model", &model];
    args.extend_from_slice(extra);
    ok(&args);
    std::fs::read(&model).unwrap()
}

#[test]
fn models_are_identical_for_1_2_3_and_5_workers_and_one_process() {
    let sets = [
        // Pure blocks, logistic loss: statistics aggregation and the coarse step.
        ("a9a/a9a.train.libsvm", "libsvm", "logistic", "2000"),
        // An impure (set-valued) block, squared loss: the line-search phases too.
        ("movielens-100k/ratings.vw", "vw", "squared", "6000"),
    ];
    for (input, format, loss, rows) in sets {
        let dir = tempfile::tempdir().unwrap();
        let grid = prepare(dir.path(), input, format, rows);
        let local = train(dir.path(), &grid, "local", &["--loss", loss, "--threads", "2"]);
        for workers in ["1", "2", "3", "5"] {
            let distributed =
                train(dir.path(), &grid, workers, &["--loss", loss, "--workers", workers, "--threads", "2"]);
            assert!(distributed == local, "{input}: {workers} workers gave another model than one process");
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Cluster {
    master_url: String,
    secret: JobSecret,
    /// Where workers' logs go (their closing line counts cells by source).
    logs: Option<std::path::PathBuf>,
}

impl Cluster {
    fn status(&self) -> Option<StatusReply> {
        client::status(&self.master_url, &self.secret).ok()
    }

    /// Polls the master's status until `done` holds.
    fn wait_for(&self, what: &str, done: impl Fn(&StatusReply) -> bool) -> StatusReply {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(status) = self.status().filter(|s| done(s)) {
                return status;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; last status {:?}", self.status());
            // A poll interval, not a synchronisation: the condition is checked again.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn worker(&self) -> Child {
        let mut command = linea(&["worker", "--master", &self.master_url, "--threads", "1"]);
        command.stdout(Stdio::null());
        if let Some(dir) = &self.logs {
            let log = tempfile::NamedTempFile::new_in(dir).unwrap().keep().unwrap().0;
            command.stderr(log).env("RUST_LOG", "linea_worker=info");
        }
        command.spawn().unwrap()
    }

    /// Cells the workers got from peers and served to peers, from their closing lines.
    fn cells_through_peers(&self) -> (u64, u64) {
        let mut totals = (0, 0);
        for entry in std::fs::read_dir(self.logs.as_ref().unwrap()).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines().filter(|l| l.contains(" done: ")) {
                let number = |label: &str| -> u64 {
                    let before = &line[..line.find(label).unwrap()];
                    before.rsplit(' ').next().unwrap().parse().unwrap()
                };
                totals.0 += number(" from peers");
                totals.1 += number(" served to peers");
            }
        }
        totals
    }
}

/// Index of the first of `children` to exit.
fn first_exit(children: &mut [Child]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(i) = children.iter_mut().position(|c| c.try_wait().unwrap().is_some()) {
            return i;
        }
        assert!(Instant::now() < deadline, "no process exited");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `linea master` with `args`, its output in `log` under `dir` (not --quiet: the log
/// must say whether it resumed).
fn start_master(dir: &Path, log: &str, args: &[&str]) -> Child {
    let log = std::fs::File::create(path(dir, log)).unwrap();
    let mut master = Command::new(env!("CARGO_BIN_EXE_linea"));
    master.args(args).env(SECRET_ENV, SECRET);
    master.stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap()
}

/// The unit-state version a restarted master's log says it resumed at.
fn resumed_version(log: &str) -> u64 {
    let line = log.lines().find(|l| l.starts_with("resuming from checkpoint: ")).expect(log);
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn sigterm(child: &Child) {
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
}

#[test]
fn preemptions_failures_new_workers_and_a_master_restart_leave_the_model_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "2000");
    // A fixed number of epochs (tolerance 0) keeps the run long enough to disturb.
    let params = ["--epochs", "300", "--tolerance", "0"];
    let reference = train(dir.path(), &grid, "reference", &[&params[..], &["--threads", "2"]].concat());

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    let master_args = [
        &["master", "--data", &grid, "--model", &model, "--listen", &listen, "--checkpoint", &checkpoint],
        &params[..],
    ]
    .concat();
    let start_master = |log: &str| start_master(dir.path(), log, &master_args);
    let logs = dir.path().join("worker-logs");
    std::fs::create_dir(&logs).unwrap();
    let cluster =
        Cluster { master_url: format!("http://{listen}"), secret: JobSecret::new(SECRET).unwrap(), logs: Some(logs) };
    let mut master = start_master("master-1.log");
    let mut workers: Vec<Child> = (0..4).map(|_| cluster.worker()).collect();
    let s = cluster.wait_for("4 workers at work", |s| s.workers_active == 4 && s.iteration >= 300);

    // Preemption: SIGTERM -> the worker hands its shards over and exits 0.
    sigterm(&workers[0]);
    assert!(workers[0].wait().unwrap().success(), "a SIGTERMed worker exits 0");
    let s = cluster.wait_for("progress after SIGTERM", |t| t.workers_active == 3 && t.iteration >= s.iteration + 300);
    assert_eq!(s.workers_lost, 0, "a drained worker is not lost");

    // Drain through the master's API.
    let drained = s.workers[0].worker_id.clone();
    assert!(client::drain(&cluster.master_url, &cluster.secret, &drained).unwrap(), "the master knows {drained}");
    let s = cluster.wait_for("progress after a drain", |t| {
        t.workers_active == 2 && t.workers.iter().all(|w| w.worker_id != drained) && t.iteration >= s.iteration + 300
    });
    let gone = first_exit(&mut workers[1..4]) + 1;
    assert!(workers[gone].wait().unwrap().success(), "a drained worker exits 0");
    assert!((1..4).filter(|&i| i != gone).all(|i| workers[i].try_wait().unwrap().is_none()), "only it exits");
    let alive: Vec<usize> = (1..4).filter(|&i| i != gone).collect();

    // Failure: kill -9 -> only its predictions are lost; others rebuild them.
    workers[alive[0]].kill().unwrap();
    workers[alive[0]].wait().unwrap();
    let s = cluster.wait_for("progress after kill -9", |t| t.workers_lost == 1 && t.iteration >= s.iteration + 300);

    // A new worker joins and takes shards.
    workers.push(cluster.worker());
    let s = cluster.wait_for("the new worker at work", |t| {
        t.workers_active == 2 && t.workers.iter().all(|w| w.shards > 0) && t.iteration >= s.iteration + 100
    });
    assert!(s.phase == "training", "the run is still going: {s:?}");

    // The master dies and comes back; workers reconnect by themselves.
    master.kill().unwrap();
    master.wait().unwrap();
    let mut master = start_master("master-2.log");
    let status = master.wait().unwrap();
    let log = std::fs::read_to_string(path(dir.path(), "master-2.log")).unwrap();
    assert!(status.success(), "the restarted master finishes: {log}");
    assert!(resumed_version(&log) > 0, "the restarted master resumed mid-run, not from the start: {log}");
    for i in [alive[1], workers.len() - 1] {
        assert!(workers[i].wait().unwrap().success(), "workers are released with exit 0");
    }
    assert!(std::fs::read(&model).unwrap() == reference, "the disturbed run's model differs from the undisturbed one");
    // Workers that took over shards read their cells from the previous owner's cache.
    let (fetched, served) = cluster.cells_through_peers();
    assert!(fetched > 0 && served > 0, "cells from peers: {fetched} fetched, {served} served");
}

#[test]
fn a_worker_without_the_job_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "16384");
    let listen = format!("127.0.0.1:{}", free_port());
    let model = path(dir.path(), "model");
    let mut master = linea(&["master", "--data", &grid, "--model", &model, "--listen", &listen])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let cluster =
        Cluster { master_url: format!("http://{listen}"), secret: JobSecret::new(SECRET).unwrap(), logs: None };
    cluster.wait_for("the master to listen", |s| s.phase == "training");

    let intruder = "wrong-secret-0123456789abcdef";
    let out = linea(&["worker", "--master", &listen]).env(SECRET_ENV, intruder).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("refused: wrong or missing job secret"), "{stderr}");
    assert!(!stderr.contains(intruder) && !stderr.contains(SECRET), "no secret in messages: {stderr}");
    let wrong = JobSecret::new(intruder).unwrap();
    let refused = client::status(&cluster.master_url, &wrong).unwrap_err().to_string();
    assert!(refused.contains("refused"), "{refused}");
    assert_eq!(cluster.status().unwrap().workers_active, 0, "the intruder never joined");

    // With the secret, a worker joins and the job completes.
    let mut worker = cluster.worker();
    assert!(master.wait().unwrap().success());
    assert!(worker.wait().unwrap().success());
    assert!(Path::new(&model).exists());
}

#[test]
fn a_worker_whose_master_never_answers_gives_up_with_a_clear_error() {
    let absent = format!("127.0.0.1:{}", free_port());
    let out = linea(&["worker", "--master", &absent, "--reconnect-for", "1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("http://{absent}")) && stderr.contains("gave up after 1s"), "{stderr}");
}

/// CoCoA on the runtime: the model depends on the slot count K only — the same bytes in one
/// process and on 3 worker processes serving K = 4 slots, and through a SIGTERM, a kill -9 of
/// a worker and a kill -9 + restart of the master (the slots' dual variables come back from
/// the checkpoint and the master's mirror, and an interrupted epoch is redone from the
/// committed state with the same seed).
#[test]
fn cocoa_slots_survive_preemption_failure_and_a_master_restart() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "2000");
    let params = ["--algorithm", "cocoa", "--slots", "4", "--epochs", "150", "--gap-tolerance", "0"];
    let reference = train(dir.path(), &grid, "reference", &[&params[..], &["--threads", "2"]].concat());
    let three = train(dir.path(), &grid, "three", &[&params[..], &["--workers", "3"]].concat());
    assert!(three == reference, "3 worker processes serving 4 slots give the one-process model");
    let other_k = train(
        dir.path(),
        &grid,
        "k2",
        &["--algorithm", "cocoa", "--slots", "2", "--epochs", "150", "--gap-tolerance", "0"],
    );
    assert!(other_k != reference, "the model depends on K");

    let listen = format!("127.0.0.1:{}", free_port());
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    let master_args = [
        &["master", "--data", &grid, "--model", &model, "--listen", &listen, "--checkpoint", &checkpoint],
        &params[..],
    ]
    .concat();
    let start_master = |log: &str| start_master(dir.path(), log, &master_args);
    let cluster =
        Cluster { master_url: format!("http://{listen}"), secret: JobSecret::new(SECRET).unwrap(), logs: None };
    let mut master = start_master("master-1.log");
    let mut workers: Vec<Child> = (0..3).map(|_| cluster.worker()).collect();
    let s = cluster.wait_for("3 workers at work", |s| s.workers_active == 3 && s.epoch >= 10);
    assert_eq!(s.algorithm, "cocoa");
    assert!(s.gap_relative.is_some_and(|g| g > 0.0), "the status carries the duality gap: {s:?}");

    sigterm(&workers[0]);
    assert!(workers[0].wait().unwrap().success(), "a SIGTERMed worker exits 0");
    let s = cluster.wait_for("progress after SIGTERM", |t| t.workers_active == 2 && t.epoch >= s.epoch + 10);
    workers[1].kill().unwrap();
    workers[1].wait().unwrap();
    let s = cluster.wait_for("progress after kill -9", |t| t.workers_lost == 1 && t.epoch >= s.epoch + 10);
    workers.push(cluster.worker());
    cluster.wait_for("the new worker at work", |t| t.workers_active == 2 && t.epoch >= s.epoch + 5);

    master.kill().unwrap();
    master.wait().unwrap();
    let mut master = start_master("master-2.log");
    let status = master.wait().unwrap();
    let log = std::fs::read_to_string(path(dir.path(), "master-2.log")).unwrap();
    assert!(status.success(), "the restarted master finishes: {log}");
    assert!(resumed_version(&log) > 0, "the restarted master resumed mid-run: {log}");
    for i in [2, 3] {
        assert!(workers[i].wait().unwrap().success(), "workers are released with exit 0");
    }
    assert!(
        std::fs::read(&model).unwrap() == reference,
        "the disturbed CoCoA run's model differs from the undisturbed one"
    );
}
