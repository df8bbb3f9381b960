//! Helpers for tests that run the `linea` binary as real processes: the command with the
//! test job secret and the test job's certificates (TLS, as every job), a master's status
//! polled until a condition holds, worker processes.

use super::data;
use linea_proto::tls::{JobCertificates, Role, TLS_DIR_ENV, Transport};
use linea_worker::runtime::auth::{JobSecret, SECRET_ENV};
use linea_worker::runtime::client;
use linea_worker::runtime::proto::StatusReply;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const SECRET: &str = "test-secret-0123456789abcdef";

pub fn linea(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_linea"));
    command.args(args).arg("--quiet").env(SECRET_ENV, SECRET).env(TLS_DIR_ENV, tls_dir());
    command
}

/// The test job's certificates (master name 127.0.0.1), made once per test binary.
pub fn tls_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let names = ["127.0.0.1".to_string(), "localhost".to_string()];
        JobCertificates::generate("test", &names).unwrap().write(&dir).unwrap();
        dir
    })
}

/// What a client of the test job (`linea status`) uses.
pub fn transport() -> Transport {
    Transport::require(Some(&tls_dir().to_string_lossy()), false, Role::Member).unwrap()
}

pub fn ok(args: &[&str]) {
    let out = linea(args).output().unwrap();
    assert!(out.status.success(), "linea {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_string_lossy().into_owned()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub struct Cluster {
    pub master_url: String,
    pub secret: JobSecret,
    /// Where workers' logs go (their closing line counts cells by source).
    pub logs: Option<std::path::PathBuf>,
    /// Environment of every process of the job (the S3 settings of a job on S3).
    pub env: Vec<(String, String)>,
    /// Arguments every worker gets besides `--master` and `--threads 1`.
    pub worker_args: Vec<String>,
}

impl Cluster {
    /// The test job (its secret and certificates) with a master listening on `listen`.
    pub fn new(listen: &str) -> Cluster {
        Cluster {
            master_url: format!("http://{listen}"),
            secret: JobSecret::new(SECRET).unwrap(),
            logs: None,
            env: Vec::new(),
            worker_args: Vec::new(),
        }
    }

    pub fn with_logs(self, logs: std::path::PathBuf) -> Cluster {
        Cluster { logs: Some(logs), ..self }
    }

    pub fn with_env(self, env: Vec<(String, String)>) -> Cluster {
        Cluster { env, ..self }
    }

    pub fn with_worker_args(self, args: &[&str]) -> Cluster {
        Cluster { worker_args: args.iter().map(|a| a.to_string()).collect(), ..self }
    }

    /// The address the master listens on (host:port).
    pub fn listen(&self) -> &str {
        self.master_url.trim_start_matches("http://")
    }

    pub fn status(&self) -> Option<StatusReply> {
        client::status(&self.master_url, None, &self.secret, &transport()).ok()
    }

    /// Polls the master's status until `done` holds.
    pub fn wait_for(&self, what: &str, done: impl Fn(&StatusReply) -> bool) -> StatusReply {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(status) = self.status().filter(|s| done(s)) {
                return status;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; last status {:?}", self.status());
            // A poll interval, not a synchronisation: the condition is checked again.
            std::thread::sleep(POLL);
        }
    }

    pub fn worker(&self) -> Child {
        self.worker_command().spawn().unwrap()
    }

    /// A worker with `extra` arguments besides the cluster's.
    pub fn worker_with(&self, extra: &[&str]) -> Child {
        self.worker_command().args(extra).spawn().unwrap()
    }

    /// A worker whose id starts with `name` (its HOSTNAME, as a pod's name is), so the
    /// master's status names which process it released.
    pub fn named_worker(&self, name: &str) -> Child {
        self.worker_command().env("HOSTNAME", name).spawn().unwrap()
    }

    fn worker_command(&self) -> Command {
        let mut command = linea(&["worker", "--master", &self.master_url, "--threads", "1"]);
        command.args(&self.worker_args).envs(self.env.iter().map(|(k, v)| (k, v))).stdout(Stdio::null());
        if let Some(dir) = &self.logs {
            let log = tempfile::NamedTempFile::new_in(dir).unwrap().keep().unwrap().0;
            command.stderr(log).env("RUST_LOG", "linea_worker=info");
        }
        command
    }

    /// Cells the workers got from peers and served to peers, from their closing lines.
    pub fn cells_through_peers(&self) -> (u64, u64) {
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

    /// Merged units (elastic scale-ins) the workers built from their old units' parts, and
    /// those they rebuilt from storage instead, from their closing lines.
    pub fn merges(&self) -> (u64, u64) {
        let mut totals = (0, 0);
        for entry in std::fs::read_dir(self.logs.as_ref().unwrap()).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines().filter(|l| l.contains(" done: ")) {
                let merges = &line[line.find("merged units: ").expect("a closing line counts merges")..];
                let number = |label: &str| -> u64 {
                    let before = &merges[..merges.find(label).unwrap()];
                    before.rsplit(' ').next().unwrap().parse().unwrap()
                };
                totals.0 += number(" from parts");
                totals.1 += number(" from storage");
            }
        }
        totals
    }
}

/// How often a waiting test looks again: a poll interval, not a synchronisation (every wait
/// checks its condition again and is bounded by a deadline).
pub const POLL: Duration = Duration::from_millis(20);

/// Index of the first of `children` to exit.
pub fn first_exit(children: &mut [Child]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(i) = children.iter_mut().position(|c| c.try_wait().unwrap().is_some()) {
            return i;
        }
        assert!(Instant::now() < deadline, "no process exited");
        std::thread::sleep(POLL);
    }
}

/// Waits for `child` to exit, at most `timeout`: a process that hangs fails the test (and is
/// killed, so it does not outlive it).
pub fn wait_exit(child: &mut Child, timeout: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} (pid {}) did not exit within {timeout:?}", child.id());
        }
        std::thread::sleep(POLL);
    }
}

/// Starts `linea master` with `args` and `env`, its output in `log` under `dir` (not --quiet:
/// the log must say whether it resumed).
pub fn start_master(dir: &Path, log: &str, args: &[&str], env: &[(String, String)]) -> Child {
    let log = std::fs::File::create(path(dir, log)).unwrap();
    let mut master = Command::new(env!("CARGO_BIN_EXE_linea"));
    master.args(args).env(SECRET_ENV, SECRET).env(TLS_DIR_ENV, tls_dir()).envs(env.iter().map(|(k, v)| (k, v)));
    master.stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap()
}

/// A worker (one thread) of the job at `master_url` whose log, filtered by `rust_log`, goes
/// to `log` under `dir`: for tests that read what one particular worker did.
pub fn logged_worker(dir: &Path, log: &str, master_url: &str, rust_log: &str) -> Child {
    let file = std::fs::File::create(path(dir, log)).unwrap();
    linea(&["worker", "--master", master_url, "--threads", "1"])
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap()
}

/// The unit-state version a restarted master's log says it resumed at.
pub fn resumed_version(log: &str) -> u64 {
    let line = log.lines().find(|l| l.starts_with("resuming from checkpoint: ")).expect(log);
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The epoch and unit-state version a restarted master's log says it resumed at.
pub fn resumed_at(log: &str) -> (u32, u64) {
    let line = log.lines().find(|l| l.starts_with("resuming from checkpoint: ")).expect(log);
    let epoch = line.split("epoch ").nth(1).and_then(|r| r.split(',').next()).expect(line);
    (epoch.parse().expect(line), resumed_version(log))
}

/// The epoch and unit-state version a master stopped on SIGTERM says its checkpoint holds
/// (its last line: `stopped: on SIGTERM, with epoch E (unit-state version V) in the checkpoint...`).
pub fn stopped_at(log: &str) -> (u32, u64) {
    let line = log.lines().find(|l| l.starts_with("stopped: on SIGTERM, with epoch ")).expect(log);
    let rest = line.trim_start_matches("stopped: on SIGTERM, with epoch ");
    let (epoch, rest) = rest.split_once(" (unit-state version ").expect(line);
    let version = rest.split(')').next().expect(line);
    (epoch.parse().expect(line), version.parse().expect(line))
}

pub fn sigterm(child: &Child) {
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
}

/// Prepares `input` into `dir/grid` with `linea prepare`; returns the grid's path.
pub fn prepare_grid(dir: &Path, input: &str, format: &str, rows_per_shard: &str) -> String {
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

/// The processes whose parent is `pid` (from /proc/<child>/stat).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        if after.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
            children.push(child);
        }
    }
    children
}

/// A process's command line as `ps` shows it (arguments joined by spaces).
pub fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

/// A process's environment variable `name`, if set (readable for our own processes).
pub fn environ(pid: u32, name: &str) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    raw.split(|b| *b == 0)
        .filter_map(|entry| std::str::from_utf8(entry).ok())
        .find_map(|entry| entry.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')).map(str::to_string))
}

/// The base64 lines of every PEM private key in `dir`: what must never show anywhere else.
pub fn private_key_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if text.contains("PRIVATE KEY-----") {
            lines.extend(text.lines().filter(|l| !l.starts_with("-----") && l.len() >= 16).map(str::to_string));
        }
    }
    assert!(!lines.is_empty(), "no private key in {}", dir.display());
    lines
}

/// Fails if any of `texts` (name, text) holds the secret, a line of a private key, or a
/// PEM private key header.
pub fn assert_no_secret(texts: &[(String, String)], secret: &str, key_lines: &[String]) {
    for (name, text) in texts {
        assert!(!text.contains(secret), "the job secret is in {name}");
        assert!(!text.contains("PRIVATE KEY"), "a PEM private key is in {name}");
        for line in key_lines {
            assert!(!text.contains(line.as_str()), "private key material is in {name}");
        }
    }
}

/// `GET path` on `address` (plain HTTP/1.1): the status code and the body.
pub fn http_get(address: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

/// The value of `series` (name and labels, exactly) in a Prometheus text exposition.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Sends `signal` (e.g. "STOP", "CONT", "KILL") to `pid`.
pub fn signal(pid: u32, signal: &str) {
    assert!(Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status().unwrap().success());
}
