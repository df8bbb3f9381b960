//! The distributed runtime end to end: real `linea master` and `linea worker` processes on
//! loopback, real data. The model must be the same bytes whatever the worker count and
//! whatever happens to the processes. Waits are on observable state (the master's status,
//! process exits), never on time.

mod common;

use common::job::{A9aRun, Job};
use common::processes::*;
use linea_worker::runtime::auth::{JobSecret, SECRET_ENV};
use linea_worker::runtime::client;
use std::path::Path;
use std::process::{Child, Stdio};

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
        let grid = prepare_grid(dir.path(), input, format, rows);
        // SCD named: --algorithm auto may choose CoCoA in one process (K = 1) and never with workers.
        let local = train(dir.path(), &grid, "local", &["--algorithm", "scd", "--loss", loss, "--threads", "2"]);
        for workers in ["1", "2", "3", "5"] {
            let distributed = train(
                dir.path(),
                &grid,
                workers,
                &["--algorithm", "scd", "--loss", loss, "--workers", workers, "--threads", "2"],
            );
            assert!(distributed == local, "{input}: {workers} workers gave another model than one process");
        }
    }
}

#[test]
fn preemptions_failures_new_workers_and_a_master_restart_leave_the_model_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("worker-logs");
    std::fs::create_dir(&logs).unwrap();
    let mut run = A9aRun::start(dir.path(), |listen| Cluster::new(listen).with_logs(logs));
    let job = &mut run.job;
    job.add_workers(4);
    let s = job.wait_for("4 workers at work", |s| s.workers_active == 4 && s.iteration >= 300);

    // Preemption: SIGTERM -> the worker hands its shards over and exits 0.
    job.sigterm_worker(0);
    let s = job.wait_for("progress after SIGTERM", |t| t.workers_active == 3 && t.iteration >= s.iteration + 300);
    assert_eq!(s.workers_lost, 0, "a drained worker is not lost");

    // Drain through the master's API.
    let drained = s.workers[0].worker_id.clone();
    assert!(
        client::drain(&job.cluster.master_url, None, &job.cluster.secret, &transport(), &drained).unwrap(),
        "the master knows {drained}"
    );
    let s = job.wait_for("progress after a drain", |t| {
        t.workers_active == 2 && t.workers.iter().all(|w| w.worker_id != drained) && t.iteration >= s.iteration + 300
    });
    let gone = first_exit(&mut job.workers);
    assert!(job.reap(gone).success(), "a drained worker exits 0");
    assert!(job.workers.iter_mut().all(|w| w.try_wait().unwrap().is_none()), "only it exits");

    // Failure: kill -9 -> only its predictions are lost; others rebuild them.
    job.kill_worker(0);
    let s = job.wait_for("progress after kill -9", |t| t.workers_lost == 1 && t.iteration >= s.iteration + 300);

    // A new worker joins and takes shards.
    job.add_workers(1);
    let s = job.wait_for("the new worker at work", |t| {
        t.workers_active == 2 && t.workers.iter().all(|w| w.shards > 0) && t.iteration >= s.iteration + 100
    });
    assert!(s.phase == "training", "the run is still going: {s:?}");

    // The master dies and comes back; workers reconnect by themselves and are released
    // with exit 0 at the end.
    job.restart_master();
    let log = job.finish();
    assert!(resumed_version(&log) > 0, "the restarted master resumed mid-run, not from the start: {log}");
    // Workers that took over shards read their cells from the previous owner's cache.
    let (fetched, served) = job.cluster.cells_through_peers();
    assert!(run.same_model(), "the disturbed run's model differs from the undisturbed one");
    assert!(fetched > 0 && served > 0, "cells from peers: {fetched} fetched, {served} served");
}

/// SIGTERM of the master (its pod deleted, its node drained or shut down): it hands out no
/// more phases, keeps its last completed iteration in the checkpoint, exits 143 ("restart
/// me", neither success nor failure) and leaves its workers waiting for a master. The next
/// master resumes exactly where it stopped, not from an older checkpoint, the waiting workers
/// come back to it, and the model is the undisturbed run's, byte for byte.
#[test]
fn a_sigtermed_master_stops_cleanly_and_the_next_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = A9aRun::start(dir.path(), Cluster::new);
    let job = &mut run.job;
    job.add_workers(2);
    let before = job.wait_for("2 workers past epoch 20", |s| s.workers_active == 2 && s.epoch >= 20);

    let (exit, log) = job.sigterm_master();
    assert_eq!(exit.code(), Some(143), "a SIGTERMed master exits 143 (restart me), not {exit}: {log}");
    let (epoch, version) = stopped_at(&log);
    // The status is updated after each checkpoint write: what the master reported before
    // SIGTERM is in the checkpoint, or a later iteration is.
    assert!(epoch >= before.epoch && epoch < 300, "stopped at epoch {epoch}, reported {} before: {log}", before.epoch);
    assert!(version > 0, "{log}");
    for worker in &mut job.workers {
        assert!(worker.try_wait().unwrap().is_none(), "a worker left when the master stopped: {log}");
    }

    job.start_master();
    job.wait_for("both workers back with the new master", |s| s.workers_active == 2);
    let log = job.finish();
    assert_eq!(resumed_at(&log), (epoch, version), "the new master resumed where the stopped one was: {log}");
    assert!(run.same_model(), "the model differs from the undisturbed run's");
}

/// A master training a9a (its output discarded), once it listens: the process, its
/// cluster, the address it listens on and its model's path.
fn listening_a9a_master(dir: &Path) -> (Child, Cluster, String, String) {
    let grid = prepare_grid(dir, "a9a/a9a.train.libsvm", "libsvm", "16384");
    let listen = format!("127.0.0.1:{}", free_port());
    let model = path(dir, "model");
    let master = linea(&["master", "--data", &grid, "--model", &model, "--listen", &listen])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let cluster = Cluster::new(&listen);
    cluster.wait_for("the master to listen", |s| s.phase == "training");
    (master, cluster, listen, model)
}

#[test]
fn a_worker_without_the_job_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut master, cluster, listen, model) = listening_a9a_master(dir.path());

    let intruder = "wrong-secret-0123456789abcdef";
    let out = linea(&["worker", "--master", &listen]).env(SECRET_ENV, intruder).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("refused: wrong or missing job secret"), "{stderr}");
    assert!(!stderr.contains(intruder) && !stderr.contains(SECRET), "no secret in messages: {stderr}");
    let wrong = JobSecret::new(intruder).unwrap();
    let refused = client::status(&cluster.master_url, None, &wrong, &transport()).unwrap_err().to_string();
    assert!(refused.contains("refused"), "{refused}");
    assert_eq!(cluster.status().unwrap().workers_active, 0, "the intruder never joined");

    // With the secret, a worker joins and the job completes.
    let mut worker = cluster.worker();
    assert!(master.wait().unwrap().success());
    assert!(worker.wait().unwrap().success());
    assert!(Path::new(&model).exists());
}

/// Mutual TLS on real processes: a worker with another job's certificates, a worker and a
/// client in plain text, and a worker with no certificates at all are refused (the first
/// at once, not after --reconnect-for); the job's own worker then joins and the job ends.
#[test]
fn a_worker_or_client_without_the_jobs_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut master, cluster, listen, model) = listening_a9a_master(dir.path());

    // Another job's certificates (same secret): the handshake fails both ways.
    let other = path(dir.path(), "other-job-certs");
    ok(&["certs", "--output", &other, "--master-name", "127.0.0.1"]);
    let started = std::time::Instant::now();
    let out = linea(&["worker", "--master", &listen, "--tls-dir", &other]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("TLS: its certificate is not the job's (UnknownIssuer)"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "refused at once, not retried for 600 s");
    let out = linea(&["status", "--master", &listen, "--tls-dir", &other]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("UnknownIssuer"));

    // Plain text to a TLS master: a worker gives up, a client fails.
    let out = linea(&["worker", "--master", &listen, "--insecure", "--reconnect-for", "2"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let out = linea(&["status", "--master", &listen, "--insecure"]).output().unwrap();
    assert!(!out.status.success(), "plain-text status: {}", String::from_utf8_lossy(&out.stdout));

    // No certificates and no --insecure: a usage error before any connection.
    let out = linea(&["worker", "--master", &listen]).env_remove("LINEA_TLS_DIR").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no TLS certificates: pass --tls-dir"), "{stderr}");
    assert_eq!(cluster.status().unwrap().workers_active, 0, "none of them joined");

    // The master's certificate must carry the name asked for: the host of --master, or
    // --master-name (a master reached at an IP or a forwarded port, by its Service name).
    let out = linea(&["status", "--master", &listen, "--master-name", "ads-master.ml.svc"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("not valid for name \"ads-master.ml.svc\""), "{stderr}");
    let out = linea(&["status", "--master", &listen, "--master-name", "localhost"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The job's certificate: it joins and the job completes.
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
    cocoa_survives_disturbances(&[]);
}

/// The same with Catalyst's outer loop (`--accelerate`): its state (centre, last iterate,
/// best model) is checkpointed with the duals, so a restarted master goes on to the same
/// bytes.
#[test]
fn accelerated_cocoa_survives_preemption_failure_and_a_master_restart() {
    cocoa_survives_disturbances(&["--accelerate"]);
}

fn cocoa_survives_disturbances(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "2000");
    let base = ["--algorithm", "cocoa", "--epochs", "150", "--gap-tolerance", "0"];
    let params = [&base[..], &["--slots", "4"], extra].concat();
    let reference = train(dir.path(), &grid, "reference", &[&params[..], &["--threads", "2"]].concat());
    let again = train(dir.path(), &grid, "again", &[&params[..], &["--threads", "1"]].concat());
    assert!(again == reference, "a repeat on 1 thread gives the same model");
    let three = train(dir.path(), &grid, "three", &[&params[..], &["--workers", "3"]].concat());
    assert!(three == reference, "3 worker processes serving 4 slots give the one-process model");
    let other_k = train(dir.path(), &grid, "k2", &[&base[..], &["--slots", "2"], extra].concat());
    assert!(other_k != reference, "the model depends on K");

    let listen = format!("127.0.0.1:{}", free_port());
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    let mut job = Job::start(dir.path(), Cluster::new(&listen), &grid, &model, &checkpoint, &params);
    job.add_workers(3);
    let s = job.wait_for("3 workers at work", |s| s.workers_active == 3 && s.epoch >= 10);
    assert_eq!(s.algorithm, "cocoa");
    assert!(s.gap_relative.is_some_and(|g| g > 0.0), "the status carries the duality gap: {s:?}");

    job.sigterm_worker(0);
    let s = job.wait_for("progress after SIGTERM", |t| t.workers_active == 2 && t.epoch >= s.epoch + 10);
    job.kill_worker(0);
    let s = job.wait_for("progress after kill -9", |t| t.workers_lost == 1 && t.epoch >= s.epoch + 10);
    job.add_workers(1);
    job.wait_for("the new worker at work", |t| t.workers_active == 2 && t.epoch >= s.epoch + 5);

    // Workers are released with exit 0 at the end.
    job.restart_master();
    let log = job.finish();
    assert!(resumed_version(&log) > 0, "the restarted master resumed mid-run: {log}");
    assert!(
        std::fs::read(&model).unwrap() == reference,
        "the disturbed CoCoA run's model differs from the undisturbed one"
    );
}

/// One slot (K = 1) keeps its model on the worker that serves it and sends the master only
/// what an epoch changed (in one process, whose slot cannot be lost, not even that: its
/// duals and model are collected once, at the end): the same bytes in one process (1 and
/// 2 threads) and on 1 and 3 worker processes, and through a kill -9 of the worker serving
/// the slot (rebuilt on the other from the master's mirror, the model bit for bit) and a
/// kill -9 + restart of the master (from the checkpoint's steps).
#[test]
fn a_lone_cocoa_slot_survives_a_killed_worker_and_a_master_restart() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "2000");
    let params = ["--algorithm", "cocoa", "--slots", "1", "--epochs", "1500", "--gap-tolerance", "0"];
    let reference = train(dir.path(), &grid, "reference", &[&params[..], &["--threads", "2"]].concat());
    let again = train(dir.path(), &grid, "again", &[&params[..], &["--threads", "1"]].concat());
    assert!(again == reference, "a repeat on 1 thread gives the same model");
    for workers in ["1", "3"] {
        let served = train(dir.path(), &grid, workers, &[&params[..], &["--workers", workers]].concat());
        assert!(served == reference, "{workers} worker processes give another model than one process");
    }

    let listen = format!("127.0.0.1:{}", free_port());
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    let mut job = Job::start(dir.path(), Cluster::new(&listen), &grid, &model, &checkpoint, &params);
    job.add_workers(1);
    let s = job.wait_for("the slot at work", |s| s.workers_active == 1 && s.epoch >= 10);
    // The slot's worker is stopped while the second joins, so the run waits for the test
    // and not the reverse: its 1,500 epochs take only seconds, and a machine busy enough to
    // delay the second worker's start would otherwise let the run end first.
    signal(job.workers[0].id(), "STOP");
    job.add_workers(1);
    job.wait_for("a second worker", |t| t.workers_active == 2);
    // Worker 0 has served the slot since the first epoch: the other rebuilds it.
    job.kill_worker(0);
    job.wait_for("progress after kill -9 of the slot's worker", |t| t.workers_lost == 1 && t.epoch >= s.epoch + 10);
    job.restart_master();
    let log = job.finish();
    assert!(resumed_version(&log) > 0, "the restarted master resumed mid-run: {log}");
    assert!(
        std::fs::read(&model).unwrap() == reference,
        "the disturbed K = 1 run's model differs from the undisturbed one"
    );
}

/// A worker its peers cannot reach (its advertised address is wrong: a bad --advertise, a
/// network policy) is given up on whenever an aggregator cannot fetch its sums. The master
/// then ends its session, so it joins again as a new worker; and at the end it is released
/// and exits 0 like the others, not left on a session that gets neither work nor a release
/// and dies with the master (then retrying for --reconnect-for and failing). The model is
/// the one-process model.
#[test]
fn a_worker_its_peers_cannot_reach_joins_again_and_is_released_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    // L-BFGS's gradients are summed by ranges of 8,192 features: criteo-sample's 34,692 make
    // 5 ranges a phase, so other workers aggregate ranges and ask the unreachable one for
    // its sums.
    let grid = prepare_grid(dir.path(), "criteo-sample/train.tsv", "criteo", "2000");
    let params = ["--algorithm", "lbfgs", "--epochs", "10", "--tolerance", "0"];
    let reference = train(dir.path(), &grid, "reference", &params);
    let listen = format!("127.0.0.1:{}", free_port());
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    let gated = [&params[..], &["--wait-for-workers", "3"]].concat();
    let mut job = Job::start(dir.path(), Cluster::new(&listen), &grid, &model, &checkpoint, &gated);
    job.add_workers(2);
    // Port 1 refuses every connection. A short --reconnect-for: a worker left waiting
    // fails soon after the master is gone, instead of at the test's timeout.
    let unreachable = job.cluster.worker_with(&["--advertise", "http://127.0.0.1:1", "--reconnect-for", "5"]);
    job.workers.push(unreachable);
    let log = job.finish();
    assert!(
        log.contains("ended the session of a worker given up on"),
        "the unreachable worker was given up on at least once: {log}"
    );
    assert!(std::fs::read(&model).unwrap() == reference, "the run's model is the one-process model");
}

/// A worker that comes back only after the run is over (it was reconnecting while the
/// others were released: after a master restart, or a lost session) is released at its
/// join and exits 0, instead of retrying for --reconnect-for and failing: a finished run
/// that lost a worker goes on serving (--late-workers-for), until SIGTERM ends that wait.
#[test]
fn a_worker_joining_after_the_run_is_over_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "2000");
    let listen = format!("127.0.0.1:{}", free_port());
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    // 300 epochs without a tolerance: long enough to lose a worker on the way.
    let params = ["--algorithm", "scd", "--epochs", "300", "--tolerance", "0", "--late-workers-for", "600"];
    let mut job = Job::start(dir.path(), Cluster::new(&listen), &grid, &model, &checkpoint, &params);
    job.add_workers(2);
    let s = job.wait_for("2 workers at work", |s| s.workers_active == 2 && s.epoch >= 1);
    job.kill_worker(0);
    job.wait_for("the run over, a worker lost", |t| t.phase == "succeeded" && t.workers_lost == 1 && t.epoch > s.epoch);

    job.add_workers(1);
    let late = job.workers.len() - 1;
    assert!(job.reap(late).success(), "a worker joining a finished run is released with exit 0");

    let (status, log) = job.sigterm_master();
    assert!(status.success(), "SIGTERM ends a finished master's wait, and the run's success stands: {log}");
    assert!(std::fs::metadata(&model).is_ok(), "the model was written");
    while !job.workers.is_empty() {
        assert!(job.reap(0).success(), "the worker still running at the end is released with exit 0");
    }
}
