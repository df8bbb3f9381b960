//! L-BFGS, the hybrid and parameter mixtures through `linea train` and on worker processes:
//! L-BFGS gives the same bytes for any worker count; the hybrid and IPM the same bytes for
//! a fixed slot count, in one process and on 3 workers, and through kill -9 of a worker and
//! of the master. Waits are on observable state (the master's status, process exits).

mod common;

use common::processes::*;
use linea_worker::runtime::auth::JobSecret;
use std::process::Child;

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
    let cluster =
        Cluster { master_url: format!("http://{listen}"), secret: JobSecret::new(SECRET).unwrap(), logs: None };
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    let master_args = [
        &["master", "--data", &grid, "--model", &model, "--listen", &listen, "--checkpoint", &checkpoint],
        &params[..],
    ]
    .concat();
    let start_master = |log: &str| start_master(dir.path(), log, &master_args);
    let mut master = start_master("master-1.log");
    let mut workers: Vec<Child> = (0..3).map(|_| cluster.worker()).collect();
    let s = cluster.wait_for("the L-BFGS stage", |s| s.epoch > 10);
    assert_eq!(s.algorithm, "hybrid");
    workers[0].kill().unwrap();
    let mut killed = workers.remove(0);
    killed.wait().unwrap();
    let s = cluster.wait_for("progress after the kill", |t| t.epoch > s.epoch + 10);
    master.kill().unwrap();
    master.wait().unwrap();
    workers.push(cluster.worker());
    let mut master = start_master("master-2.log");
    cluster.wait_for("the restarted master", |t| t.epoch >= s.epoch);
    let status = master.wait().unwrap();
    let log = std::fs::read_to_string(path(dir.path(), "master-2.log")).unwrap();
    assert!(status.success(), "{log}");
    assert!(log.contains("resuming from checkpoint"), "{log}");
    for mut w in workers {
        assert!(w.wait().unwrap().success(), "every worker not killed exits 0");
    }
    assert!(
        std::fs::read(&model).unwrap() == std::fs::read(&reference).unwrap(),
        "the disturbed hybrid run's model differs from the undisturbed one"
    );
}
