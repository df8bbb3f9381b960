//! Speculative execution on real processes: a master and 3 workers on loopback (TLS, the job
//! secret) train the hybrid on a9a; one worker is stopped (SIGSTOP) in the middle of the
//! run and never continued. Its work is started on the others, the run ends while it is
//! still stopped — long before the master's connection to it would time out and count it
//! lost — and the model has the bytes of one process. Waits are on observable state (the
//! master's status, process exits), never on time.

mod common;

use common::processes::*;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

/// No tolerance: 60 L-BFGS epochs after the warm start, a few seconds on 3 workers.
const HYBRID: [&str; 10] =
    ["--algorithm", "hybrid", "--slots", "4", "--epochs", "60", "--tolerance", "0", "--gradient-tolerance", "0"];

/// A worker (one thread) whose info log goes to `dir/log`.
fn worker(dir: &Path, log: &str, master_url: &str) -> Child {
    logged_worker(dir, log, master_url, "linea_worker=info")
}

/// The process's state letter in /proc (`T`: stopped).
fn state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The name in parentheses may hold spaces; the state follows the closing one.
    stat.rsplit_once(") ").unwrap().1.chars().next().unwrap()
}

/// A worker killed when dropped: the stopped one never exits by itself, and a failed
/// assertion must not leave it behind, stopped, holding what it inherited.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_stopped_worker_s_work_is_run_elsewhere_and_the_run_ends_while_it_is_still_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "5000");
    let reference = path(dir.path(), "reference");
    ok(&[&["train", "--data", &grid, "--model", &reference, "--threads", "2"], &HYBRID[..]].concat());

    let listen = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::new(&listen);
    let model = path(dir.path(), "model");
    // The default speculation settings: 4 x the median, at least 1 s. The run starts once all
    // 3 workers joined, so each holds slots from the first epoch: a worker that joined late
    // could hold none, and stopping it would leave nothing to speculate on.
    let args =
        [&["master", "--listen", &listen, "--data", &grid, "--model", &model, "--wait-for-workers", "3"], &HYBRID[..]]
            .concat();
    let env = [("RUST_LOG".to_string(), "linea_worker=info".to_string())];
    let mut master = start_master(dir.path(), "master.log", &args, &env);
    let mut workers: Vec<Child> =
        (0..3).map(|i| worker(dir.path(), &format!("w{i}.log"), &cluster.master_url)).collect();
    cluster.wait_for("3 workers, 5 epochs in", |s| s.workers.len() == 3 && s.epoch >= 5);
    let victim = Killed(workers.remove(1));
    assert!(Command::new("kill").args(["-STOP", &victim.0.id().to_string()]).status().unwrap().success());

    let status = wait_exit(&mut master, Duration::from_secs(120), "the master");
    let log = std::fs::read_to_string(path(dir.path(), "master.log")).unwrap();
    assert!(status.success(), "{log}");
    assert_eq!(state(victim.0.id()), 'T', "the run ended while the worker was still stopped");
    assert!(log.contains("straggler: "), "the stopped worker was found stalled: {log}");
    for line in log.lines().filter(|l| l.contains("straggler") || l.contains("speculative")) {
        eprintln!("{line}");
    }
    assert!(
        !log.contains("worker lost during a phase"),
        "its work was run elsewhere, not waited for until its connection timed out: {log}"
    );
    for mut w in workers {
        assert!(wait_exit(&mut w, Duration::from_secs(60), "a worker").success(), "every running worker exits 0");
    }
    drop(victim);
    assert!(
        std::fs::read(&model).unwrap() == std::fs::read(&reference).unwrap(),
        "the run with a stopped worker gives other bytes than one process"
    );
}
