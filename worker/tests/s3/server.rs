//! A real S3 server on a loopback port, with its data in a temporary folder (the
//! test can flip bytes of stored objects there), stopped when dropped.

use super::{ACCESS_KEY, BUCKET, SECRET_KEY};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

pub struct S3Server {
    child: Child,
    pub root: tempfile::TempDir,
    pub port: u16,
    /// One server per test binary at a time: a test that stops its server and expects
    /// "connection refused" must not see another test's server take over the port.
    _one_at_a_time: MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/s3-server.sh")
}

/// Builds s3s-fs once per machine (the first time, a few minutes) before any test times
/// a server's start.
fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let status = Command::new(script()).arg("install").stdout(Stdio::null()).status().expect("runs the script");
        assert!(status.success(), "scripts/s3-server.sh install failed");
    });
}

impl S3Server {
    /// Starts the server (`scripts/s3-server.sh run`, which execs it, so the child is the
    /// server) with the test bucket on a port the kernel picks, and returns once it
    /// listens. The port is read from the server's own "running at" line: choosing a free
    /// port here and passing it would race with every other test binding one.
    pub fn start() -> S3Server {
        let one_at_a_time = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        install();
        let root = tempfile::tempdir().expect("a temporary folder");
        std::fs::create_dir(root.path().join(BUCKET)).expect("the bucket folder");
        let (child, port) = run(root.path(), 0);
        S3Server { child, root, port, _one_at_a_time: one_at_a_time }
    }

    /// Starts a stopped server again, with its data, on its port.
    pub fn restart(&mut self) {
        let (child, port) = run(self.root.path(), self.port);
        assert_eq!(port, self.port);
        self.child = child;
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Where the server keeps `key` of the test bucket on disk.
    pub fn object_path(&self, key: &str) -> PathBuf {
        self.root.path().join(BUCKET).join(key)
    }

    /// Stops the server for good.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs s3s-fs over `root` on `port` (0: any) and returns once it listens.
fn run(root: &Path, port: u16) -> (Child, u16) {
    let mut child = Command::new(script())
        .arg("run")
        .arg(root)
        .arg(port.to_string())
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("RUST_LOG", "s3s_fs=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("s3s-fs starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let port = lines
        .by_ref()
        .map_while(|line| line.ok())
        .find_map(|line| line.split("running at http://127.0.0.1:").nth(1).and_then(|p| p.trim().parse().ok()))
        .unwrap_or_else(|| panic!("s3s-fs exited before it listened: {:?}", child.wait()));
    // Keep draining its output so the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, port)
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
