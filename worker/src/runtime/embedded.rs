//! `linea train --workers N`: the distributed runtime on one machine. The master runs in
//! this process; N `linea worker` processes connect to it over loopback with a fresh
//! job secret, over TLS with a per-run CA whose member certificate waits for them in a
//! private folder (removed at the end). It is the same code path as a cluster run, so it
//! gives the same model.

use super::auth::{JobSecret, SECRET_ENV};
use super::master::{self, MasterOptions};
use super::scheduler::StartGate;
use crate::driver::TrainSummary;
use crate::error::{LineaError, Result};
use crate::progress::Progress;
use crate::train::TrainOptions;
use linea_proto::tls::{JobCertificates, PrivateDir, Role, TLS_DIR_ENV, Transport};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub fn train(options: &TrainOptions, progress: &Progress) -> Result<TrainSummary> {
    let secret = JobSecret::generate();
    let certificates = JobCertificates::generate("local", &["127.0.0.1".into(), "localhost".into()])?;
    let folder = PrivateDir::new()?;
    certificates.write(folder.path())?;
    let exe = std::env::current_exe().map_err(LineaError::io("the linea executable"))?;
    let threads = (options.threads / options.workers).max(1);
    let children: Arc<Mutex<Vec<Child>>> = Arc::default();
    let master_options = MasterOptions {
        train: options.clone(),
        listen: "127.0.0.1:0".into(),
        checkpoint: None,
        secret: secret.clone(),
        transport: Transport::Tls(certificates.tls(Role::Master)?),
        allreduce: Default::default(),
        speculation: Default::default(),
        // Its own workers are all coming: an elastic run waits for them (see MasterOptions).
        // Its workers are threads of this process: they all join, so the gate never times out.
        wait_for_workers: StartGate {
            workers: if options.elastic.is_some() { options.workers } else { 0 },
            patience: Duration::MAX,
        },
        // A signal stops the run between epochs instead (`TrainOptions::stop_on_signals`): the
        // model of the epochs done is written and the workers released.
        stop_on_signals: false,
        // Its workers are its own children, ended with it.
        late_workers: Duration::ZERO,
    };
    let mut spawn_error = None;
    let outcome = master::run(&master_options, progress, |address, abort| {
        for _ in 0..options.workers {
            let child = Command::new(&exe)
                .args([
                    "worker",
                    "--quiet",
                    "--master",
                    &format!("http://{address}"),
                    "--threads",
                    &threads.to_string(),
                ])
                .args(["--reconnect-for", "10", "--exit-with-stdin"])
                .args(
                    options.worker_cache_mb.map(|mb| ["--cache-mb".to_string(), mb.to_string()]).into_iter().flatten(),
                )
                .env(SECRET_ENV, secret.expose())
                .env(TLS_DIR_ENV, folder.path())
                .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
                // Kept open by this process (in `children`) and never written: it closes when
                // this process ends, however it ends, and the worker then ends too.
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                // Out of the terminal's process group: Ctrl-C reaches the master alone, which
                // finishes the epoch on its workers and then releases them.
                .process_group(0)
                .spawn();
            match child {
                Ok(child) => children.lock().expect("children lock").push(child),
                Err(e) => {
                    spawn_error = Some(LineaError::Io { path: exe.clone(), source: e });
                    abort.abort("could not start the worker processes".into());
                    return;
                }
            }
        }
        progress.always(&format!("master on {address}, {} workers x {threads} threads", options.workers));
        watch_workers(children.clone(), abort);
    });
    // Released workers exit by themselves; give them a moment, then make sure.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for child in children.lock().expect("children lock").iter_mut() {
        while std::time::Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    match spawn_error {
        Some(e) => Err(e),
        None => outcome,
    }
}

/// Stops the master if every worker process has exited (a master with no workers would
/// wait for ever).
fn watch_workers(children: Arc<Mutex<Vec<Child>>>, abort: master::AbortHandle) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(200));
            let mut children = children.lock().expect("children lock");
            let statuses: Vec<_> = children.iter_mut().map(|c| c.try_wait()).collect();
            if statuses.iter().all(|s| matches!(s, Ok(Some(_)))) {
                let failed = statuses.iter().filter(|s| matches!(s, Ok(Some(st)) if !st.success())).count();
                abort.abort(format!("all worker processes exited ({failed} with an error)"));
                return;
            }
        }
    });
}
