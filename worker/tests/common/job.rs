//! A distributed job of real processes, for the tests that disturb one: a `linea master`
//! with a checkpoint, killed and started again at will (the n-th master logs to
//! `master-n.log`), worker processes started, SIGTERMed and killed at will, and the end:
//! the master exits 0 and every worker still running is released and exits 0. Every wait
//! is on observable state (the master's status, process exits) and bounded: a process that
//! hangs fails the test.

use super::processes::*;
use linea_worker::runtime::proto::StatusReply;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

pub struct Job {
    dir: PathBuf,
    master_args: Vec<String>,
    pub cluster: Cluster,
    master: Option<Child>,
    /// Masters started so far.
    masters: u32,
    /// The worker processes not yet reaped, in the order they were started.
    pub workers: Vec<Child>,
    /// The bound of every wait: for the master's progress, a process's exit.
    pub timeout: Duration,
}

impl Job {
    /// Starts `linea master --data DATA --model MODEL --listen (the cluster's address)
    /// --checkpoint CHECKPOINT PARAMS`, with no workers yet.
    pub fn start(dir: &Path, cluster: Cluster, data: &str, model: &str, checkpoint: &str, params: &[&str]) -> Job {
        let listen = cluster.listen().to_string();
        let head = ["master", "--data", data, "--model", model, "--listen", &listen, "--checkpoint", checkpoint];
        let master_args = head.iter().chain(params).map(|a| a.to_string()).collect();
        let mut job = Job {
            dir: dir.to_path_buf(),
            master_args,
            cluster,
            master: None,
            masters: 0,
            workers: Vec::new(),
            timeout: Duration::from_secs(300),
        };
        job.start_master();
        job
    }

    /// Starts the next master (after [`Job::kill_master`]); it resumes from the checkpoint.
    pub fn start_master(&mut self) {
        assert!(self.master.is_none(), "a master is running");
        self.masters += 1;
        let args: Vec<&str> = self.master_args.iter().map(String::as_str).collect();
        let log = format!("master-{}.log", self.masters);
        self.master = Some(start_master(&self.dir, &log, &args, &self.cluster.env));
    }

    /// kill -9 of the master.
    pub fn kill_master(&mut self) {
        let mut master = self.master.take().expect("a master is running");
        master.kill().unwrap();
        master.wait().unwrap();
    }

    /// SIGTERM to the master (a pod deletion, a drain, an eviction): it must stop within the
    /// master pod's grace period (30 s). Returns how it exited and its log.
    pub fn sigterm_master(&mut self) -> (ExitStatus, String) {
        let mut master = self.master.take().expect("a master is running");
        sigterm(&master);
        let status = wait_exit(&mut master, Duration::from_secs(30), "the SIGTERMed master");
        (status, self.master_log())
    }

    pub fn restart_master(&mut self) {
        self.kill_master();
        self.start_master();
    }

    /// What the running (or last) master wrote so far.
    pub fn master_log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("master-{}.log", self.masters))).unwrap()
    }

    pub fn add_workers(&mut self, count: usize) {
        for _ in 0..count {
            self.workers.push(self.cluster.worker());
        }
    }

    /// Worker processes whose ids start with `names` (see [`Cluster::named_worker`]).
    pub fn add_named_workers(&mut self, names: &[String]) {
        for name in names {
            self.workers.push(self.cluster.named_worker(name));
        }
    }

    /// Waits for worker `i` to exit (bounded) and forgets it.
    pub fn reap(&mut self, i: usize) -> ExitStatus {
        let mut worker = self.workers.remove(i);
        wait_exit(&mut worker, self.timeout, "a worker")
    }

    /// SIGTERM to worker `i` (a preemption notice): it hands its shards over and exits 0.
    pub fn sigterm_worker(&mut self, i: usize) {
        sigterm(&self.workers[i]);
        let status = self.reap(i);
        assert!(status.success(), "a SIGTERMed worker exits 0, not {status}");
    }

    /// kill -9 of worker `i`.
    pub fn kill_worker(&mut self, i: usize) {
        self.workers[i].kill().unwrap();
        self.reap(i);
    }

    /// The master's status once `done` holds; None if the master finished first (exit 0).
    /// A master that fails, or a condition that does not come within the timeout, fails
    /// the test.
    pub fn wait_or_end(&mut self, what: &str, done: impl Fn(&StatusReply) -> bool) -> Option<StatusReply> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(status) = self.cluster.status().filter(|s| done(s)) {
                return Some(status);
            }
            let master = self.master.as_mut().expect("a master is running");
            if let Some(exit) = master.try_wait().unwrap() {
                assert!(exit.success(), "the master failed ({exit}) waiting for {what}: {}", self.master_log());
                return None;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; last status {:?}", self.cluster.status());
            std::thread::sleep(POLL);
        }
    }

    /// The master's status once `done` holds (the master must not finish first).
    pub fn wait_for(&mut self, what: &str, done: impl Fn(&StatusReply) -> bool) -> StatusReply {
        self.wait_or_end(what, done).unwrap_or_else(|| panic!("the run ended before {what}"))
    }

    /// The end of the run: the master exits 0 and every worker still running exits 0
    /// (released). Returns the last master's log.
    pub fn finish(&mut self) -> String {
        let mut master = self.master.take().expect("a master is running");
        let status = wait_exit(&mut master, self.timeout, "the master");
        let log = self.master_log();
        assert!(status.success(), "the master failed ({status}): {log}");
        while !self.workers.is_empty() {
            let status = self.reap(0);
            assert!(status.success(), "a worker still running at the end is released with exit 0, not {status}");
        }
        log
    }
}

impl Drop for Job {
    /// A failed test leaves no process behind.
    fn drop(&mut self) {
        for child in self.master.iter_mut().chain(self.workers.iter_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The SCD run the disturbance tests share: a9a in 2000-row shards for 300 epochs (tolerance
/// 0, so it runs long enough to disturb), checkpointed in a local folder.
pub struct A9aRun {
    pub job: Job,
    /// The undisturbed model's bytes, trained in one process.
    pub reference: Vec<u8>,
    pub model: String,
    pub checkpoint: String,
}

impl A9aRun {
    /// Trains the reference, then starts the job's master (no workers yet) on `cluster`,
    /// made for a free loopback address.
    pub fn start(dir: &Path, cluster: impl FnOnce(&str) -> Cluster) -> A9aRun {
        let grid = prepare_grid(dir, "a9a/a9a.train.libsvm", "libsvm", "2000");
        // SCD, named: `linea train` would choose its algorithm, the master runs SCD.
        let params = ["--algorithm", "scd", "--epochs", "300", "--tolerance", "0"];
        let reference = path(dir, "reference");
        ok(&[&["train", "--data", &grid, "--model", &reference, "--threads", "2"], &params[..]].concat());
        let (model, checkpoint) = (path(dir, "model"), path(dir, "checkpoint"));
        let cluster = cluster(&format!("127.0.0.1:{}", free_port()));
        let job = Job::start(dir, cluster, &grid, &model, &checkpoint, &params);
        A9aRun { job, reference: std::fs::read(&reference).unwrap(), model, checkpoint }
    }

    /// Whether the job wrote the undisturbed run's model, byte for byte.
    pub fn same_model(&self) -> bool {
        std::fs::read(&self.model).unwrap() == self.reference
    }
}
