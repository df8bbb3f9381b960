//! L-BFGS, the hybrid and parameter mixtures through `linea train` and on worker processes:
//! L-BFGS gives the same bytes for any worker count; the hybrid and IPM the same bytes for
//! a fixed slot count, in one process and on 3 workers, and through kill -9 of a worker and
//! of the master. Waits are on observable state (the master's status, process exits).

mod common;

use common::job::Job;
use common::processes::*;

fn train(grid: &str, model: &str, params: &[&str], extra: &[&str]) -> Vec<u8> {
    ok(&[&["train", "--data", grid, "--model", model], params, extra].concat());
    std::fs::read(model).unwrap()
}

#[test]
fn lbfgs_gives_the_same_bytes_for_any_worker_count_and_hybrid_and_ipm_for_a_fixed_slot_count() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "5000");
    let model = |name: &str| path(dir.path(), name);
    let lbfgs = ["--algorithm", "lbfgs", "--epochs", "60"];
    let one = train(&grid, &model("lbfgs-0"), &lbfgs, &["--threads", "1"]);
    assert!(one == train(&grid, &model("lbfgs-1"), &lbfgs, &["--workers", "1"]), "L-BFGS: 1 worker process");
    assert!(one == train(&grid, &model("lbfgs-3"), &lbfgs, &["--workers", "3"]), "L-BFGS: 3 worker processes");
    // A cell cache of 1 MiB holds a few of the grid's cells (a9a decodes to several MiB):
    // the others are read from the grid again whenever they are wanted, to the same bytes.
    let bounded = train(&grid, &model("lbfgs-bounded"), &lbfgs, &["--workers", "1", "--cache-mb", "1"]);
    assert!(one == bounded, "L-BFGS: a worker whose cell cache is smaller than the grid");
    for algorithm in ["hybrid", "ipm"] {
        let params = ["--algorithm", algorithm, "--epochs", "15", "--slots", "4"];
        let here = train(&grid, &model(&format!("{algorithm}-0")), &params, &["--threads", "2"]);
        let three = train(&grid, &model(&format!("{algorithm}-3")), &params, &["--workers", "3"]);
        assert!(here == three, "{algorithm}: 3 worker processes give other bytes than one process");
        let params = ["--algorithm", algorithm, "--epochs", "15", "--slots", "2"];
        let other = train(&grid, &model(&format!("{algorithm}-k2")), &params, &["--threads", "2"]);
        assert!(other != here, "{algorithm}: the slot count is part of the model");
    }
}

/// kill -9 of a worker and then of the master during the hybrid's L-BFGS stage: the
/// restarted master resumes from its checkpoint and the run ends with the undisturbed
/// model's bytes.
#[test]
fn the_hybrid_survives_kill_9_of_a_worker_and_of_the_master() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "5000");
    // No tolerance: L-BFGS runs until its line search can no longer lower the objective
    // (~300 epochs on a9a), time enough to disturb it.
    let params = [
        "--algorithm",
        "hybrid",
        "--slots",
        "4",
        "--tolerance",
        "0",
        "--gradient-tolerance",
        "0",
        "--epochs",
        "100000",
    ];
    let reference = path(dir.path(), "reference");
    ok(&[&["train", "--data", &grid, "--model", &reference, "--threads", "2"], &params[..]].concat());

    let listen = format!("127.0.0.1:{}", free_port());
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    let mut job = Job::start(dir.path(), Cluster::new(&listen), &grid, &model, &checkpoint, &params);
    job.add_workers(3);
    let s = job.wait_for("the L-BFGS stage", |s| s.epoch > 10);
    assert_eq!(s.algorithm, "hybrid");
    job.kill_worker(0);
    let s = job.wait_for("progress after the kill", |t| t.epoch > s.epoch + 10);
    job.kill_master();
    job.add_workers(1);
    job.start_master();
    job.wait_for("the restarted master", |t| t.epoch >= s.epoch);
    // Every worker not killed exits 0.
    let log = job.finish();
    assert!(log.contains("resuming from checkpoint"), "{log}");
    assert!(
        std::fs::read(&model).unwrap() == std::fs::read(&reference).unwrap(),
        "the disturbed hybrid run's model differs from the undisturbed one"
    );
}

/// Truncated Newton (`--batch-solver newton`): alone the same bytes for any worker count,
/// and through kill -9 of a worker during its CG passes the same bytes as undisturbed.
#[test]
fn newton_gives_the_same_bytes_for_any_worker_count_and_through_kill_9_of_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "5000");
    let model = |name: &str| path(dir.path(), name);
    // No tolerance: Newton runs until its line search can no longer lower the objective.
    let params = [
        "--algorithm",
        "lbfgs",
        "--batch-solver",
        "newton",
        "--tolerance",
        "0",
        "--gradient-tolerance",
        "0",
        "--epochs",
        "100000",
    ];
    let one = train(&grid, &model("newton-0"), &params, &["--threads", "1"]);
    assert!(one == train(&grid, &model("newton-3"), &params, &["--workers", "3"]), "Newton: 3 worker processes");

    let listen = format!("127.0.0.1:{}", free_port());
    let (disturbed, checkpoint) = (model("newton-killed"), model("checkpoint"));
    let mut job = Job::start(dir.path(), Cluster::new(&listen), &grid, &disturbed, &checkpoint, &params);
    job.add_workers(3);
    let s = job.wait_for("Newton's first iterations", |s| s.epoch >= 2);
    assert_eq!(s.algorithm, "lbfgs");
    job.kill_worker(0);
    job.add_workers(1);
    // The kill came while the run went on (a run already over would prove nothing).
    job.wait_for("progress after the kill", |t| t.epoch > s.epoch);
    job.finish();
    assert!(
        std::fs::read(&disturbed).unwrap() == one,
        "the disturbed Newton run's model differs from the undisturbed one"
    );
}
