//! Secrets stay where they are put (a file, the environment, the certificate folder) and
//! show up nowhere else: not in a process's command line (what `ps` and
//! /proc/<pid>/cmdline show to every user of the machine), not in any log line, even at
//! RUST_LOG=debug, where the gRPC, HTTP/2 and TLS libraries log their connections.
//! docs/security.md names these tests.

mod common;

use common::processes::*;
use linea_proto::tls::TLS_DIR_ENV;
use linea_worker::runtime::auth::{JobSecret, SECRET_ENV};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The binary without the helpers' test secret in its environment.
fn bare(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_linea"));
    command.args(args).env_remove(SECRET_ENV).env_remove(TLS_DIR_ENV).env("RUST_LOG", "debug");
    command
}

#[test]
fn master_worker_and_status_keep_the_secret_out_of_logs_and_the_process_list() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "8192");
    let secret = "file-secret-7f3a9c21d4e5b6a8c0";
    let token = path(dir.path(), "token");
    std::fs::write(&token, secret).unwrap();
    let tls = tls_dir().to_string_lossy().into_owned();
    let listen = format!("127.0.0.1:{}", free_port());
    let model = path(dir.path(), "model");
    let log = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();

    // As the operator runs them: the master reads the secret from a file, the worker from
    // its environment (as `train --workers` hands it over).
    let mut master = bare(&[
        "master",
        "--data",
        &grid,
        "--model",
        &model,
        "--listen",
        &listen,
        "--secret-file",
        &token,
        "--tls-dir",
        &tls,
        "--epochs",
        "1000000",
        "--tolerance",
        "0",
    ])
    .stdout(log("master.out"))
    .stderr(log("master.log"))
    .spawn()
    .unwrap();
    let mut worker = bare(&["worker", "--master", &listen, "--threads", "1", "--tls-dir", &tls])
        .env(SECRET_ENV, secret)
        .stdout(log("worker.out"))
        .stderr(log("worker.log"))
        .spawn()
        .unwrap();
    let cluster = Cluster { secret: JobSecret::new(secret).unwrap(), ..Cluster::new(&listen) };
    cluster.wait_for("the worker to train", |s| s.workers_active == 1 && s.epoch >= 2);

    let mut texts = vec![
        ("the master's command line".to_string(), cmdline(master.id())),
        ("the worker's command line".to_string(), cmdline(worker.id())),
    ];
    // Where the worker's secret is meant to be, the search finds it.
    assert_eq!(environ(worker.id(), SECRET_ENV).as_deref(), Some(secret));
    let status = bare(&["status", "--master", &listen, "--secret-file", &token, "--tls-dir", &tls]).output().unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    texts.push(("linea status's output".into(), String::from_utf8_lossy(&status.stdout).into_owned()));
    texts.push(("linea status's log".into(), String::from_utf8_lossy(&status.stderr).into_owned()));
    // A refused client: neither its own (wrong) secret nor the job's in what it prints.
    let wrong = "wrong-secret-0123456789abcdef";
    let refused = bare(&["status", "--master", &listen, "--tls-dir", &tls]).env(SECRET_ENV, wrong).output().unwrap();
    assert!(!refused.status.success());
    let refused_log = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(refused_log.contains("refused") && !refused_log.contains(wrong), "{refused_log}");
    texts.push(("a refused client's log".into(), refused_log));

    let _ = master.kill();
    master.wait().unwrap();
    let _ = worker.kill();
    worker.wait().unwrap();
    for name in ["master.out", "master.log", "worker.out", "worker.log"] {
        texts.push((name.to_string(), std::fs::read_to_string(dir.path().join(name)).unwrap()));
    }
    // The logs were written at debug level, by the libraries too.
    for name in ["master.log", "worker.log"] {
        let text = &texts.iter().find(|(n, _)| n == name).unwrap().1;
        assert!(text.contains("DEBUG") && text.lines().count() > 20, "{name} is not a debug log:\n{text}");
    }
    assert_no_secret(&texts, secret, &private_key_lines(tls_dir()));
}

#[test]
fn train_with_workers_keeps_its_own_secret_and_keys_out_of_logs_and_the_process_list() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "8192");
    let model = path(dir.path(), "model");
    let log = dir.path().join("train.log");
    // The worker processes inherit the log (stderr), so it holds all three processes' lines.
    let mut train = bare(&[
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
        "40",
        "--tolerance",
        "0",
    ])
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    // The generated secret and the private CA's keys exist only while the run does: found in
    // the workers' environment (where they are handed over) as soon as the workers start.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (workers, secret, folder) = loop {
        let workers = children_of(train.id());
        let found: Vec<_> =
            workers.iter().filter_map(|&pid| Some((environ(pid, SECRET_ENV)?, environ(pid, TLS_DIR_ENV)?))).collect();
        if let ([(secret, folder), (other, _)], [a, b]) = (&found[..], &workers[..])
            && secret == other
        {
            break ([*a, *b], secret.clone(), std::path::PathBuf::from(folder));
        }
        assert!(train.try_wait().unwrap().is_none(), "train ended before its workers were seen");
        assert!(Instant::now() < deadline, "no two workers with a secret: {found:?}");
        // A poll interval, not a synchronisation: the condition is checked again.
        std::thread::sleep(Duration::from_millis(5));
    };
    let key_lines = private_key_lines(&folder);
    let mut texts = vec![("train's command line".to_string(), cmdline(train.id()))];
    for pid in workers {
        texts.push((format!("worker {pid}'s command line"), cmdline(pid)));
    }
    assert!(train.wait().unwrap().success());
    assert!(!folder.exists(), "the private certificate folder outlived the run");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("DEBUG") && text.lines().count() > 20, "not a debug log:\n{text}");
    texts.push(("the run's log".into(), text));
    assert_no_secret(&texts, &secret, &key_lines);
}
