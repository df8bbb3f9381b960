//! `linea` end to end with everything on a real S3 server (s3s-fs on loopback): the same
//! model bytes as with a local folder, also through a proxy that injects faults; a server
//! that is gone and a corrupted object fail clearly; secrets never reach the output.

mod s3;

use s3::proxy::{Fault, FaultProxy, random_plan};
use s3::server::S3Server;
use s3::{ACCESS_KEY, BUCKET, SECRET_KEY};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const ROWS_PER_SHARD: &str = "4096"; // a9a: 8 row shards, a few hundred objects

fn data(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data").join(path).to_string_lossy().into_owned()
}

/// Runs `linea` with the standard AWS variables pointing at `endpoint` (None: no S3
/// settings at all) and nothing from this machine's own AWS setup.
fn linea(args: &[&str], endpoint: Option<&str>, extra: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_linea"));
    command.args(args).arg("--quiet");
    s3::clear_machine_settings(&mut command);
    // Info: each storage's closing line with its request and retry counts.
    command.env("RUST_LOG", "linea_worker=info");
    if let Some(endpoint) = endpoint {
        command.envs(s3::aws_env(endpoint));
    }
    command.envs(extra.iter().copied());
    let out = command.output().expect("linea runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains(SECRET_KEY), "the secret key leaked into the output of linea {args:?}:\n{text}");
    // Nothing panics, not even at shutdown after the work is done (a worker process's
    // stderr is the train command's): with s3:// data, workers used to panic as their
    // runtime dropped the grid's storage inside a task.
    assert!(!text.contains("panicked"), "linea {args:?} panicked:\n{text}");
    out
}

fn ok(args: &[&str], endpoint: Option<&str>, extra: &[(&str, &str)]) -> Output {
    let out = linea(args, endpoint, extra);
    assert!(out.status.success(), "linea {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The reference run on a local folder, in one process: model bytes, and `eval` on the grid and the test file.
struct Reference {
    model: Vec<u8>,
    manifest: Vec<u8>,
    eval_grid: String,
    eval_test: String,
}

fn reference() -> &'static Reference {
    static REFERENCE: OnceLock<Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (grid, model) = (dir.path().join("grid"), dir.path().join("a9a.model"));
        let (grid, model) = (grid.to_str().unwrap(), model.to_str().unwrap());
        let train = data("a9a/a9a.train.libsvm");
        ok(
            &["prepare", "--input", &train, "--format", "libsvm", "--output", grid, "--rows-per-shard", ROWS_PER_SHARD],
            None,
            &[],
        );
        ok(&["train", "--data", grid, "--model", model, "--threads", "2", "--algorithm", "scd"], None, &[]);
        Reference {
            model: std::fs::read(model).unwrap(),
            manifest: std::fs::read(dir.path().join("grid/manifest.json")).unwrap(),
            eval_grid: stdout(&ok(&["eval", "--model", model, "--data", grid], None, &[])),
            eval_test: stdout(&ok(&["eval", "--model", model, "--data", &data("a9a/a9a.test.libsvm")], None, &[])),
        }
    })
}

/// prepare -> train -> eval with grid and model under `s3://linea-test/<prefix>/`;
/// returns the eval output and everything the commands wrote to stderr.
fn run_on_s3(endpoint: &str, prefix: &str, extra: &[(&str, &str)]) -> (String, String) {
    let grid = format!("s3://{BUCKET}/{prefix}/grid");
    let model = format!("s3://{BUCKET}/{prefix}/a9a.model");
    let train = data("a9a/a9a.train.libsvm");
    let commands: [&[&str]; 3] = [
        &["prepare", "--input", &train, "--format", "libsvm", "--output", &grid, "--rows-per-shard", ROWS_PER_SHARD],
        // Several workers: a master here and two worker processes, all reading S3.
        &["train", "--data", &grid, "--model", &model, "--threads", "2", "--workers", "2", "--algorithm", "scd"],
        &["eval", "--model", &model, "--data", &grid],
    ];
    let outputs = commands.map(|args| {
        let started = Instant::now();
        let out = ok(args, Some(endpoint), extra);
        eprintln!("  {prefix}: linea {} took {:?}", args[0], started.elapsed());
        out
    });
    let stderr = outputs.iter().map(|o| String::from_utf8_lossy(&o.stderr).into_owned()).collect();
    (stdout(&outputs[2]), stderr)
}

#[test]
fn prepare_train_eval_on_s3_give_the_same_bytes_as_a_local_folder() {
    let reference = reference();
    let server = S3Server::start();
    let endpoint = server.endpoint();
    let started = Instant::now();
    let (eval_grid, stderr) = run_on_s3(&endpoint, "a9a", &[]);
    eprintln!(
        "prepare -> train -> eval on S3: {:?}, {:?} (requests, retries, hedges)",
        started.elapsed(),
        s3::request_counts(&stderr)
    );
    assert!(std::fs::read(server.object_path("a9a/a9a.model")).unwrap() == reference.model, "model bytes differ");
    assert!(std::fs::read(server.object_path("a9a/grid/manifest.json")).unwrap() == reference.manifest);
    assert_eq!(eval_grid, reference.eval_grid);
    assert!(!stderr.contains(ACCESS_KEY), "{stderr}");

    // Model from S3, raw test file local; scores, plot and trace written to S3.
    let model = format!("s3://{BUCKET}/a9a/a9a.model");
    let test = data("a9a/a9a.test.libsvm");
    assert_eq!(stdout(&ok(&["eval", "--model", &model, "--data", &test], Some(&endpoint), &[])), reference.eval_test);
    ok(
        &["predict", "--model", &model, "--input", &test, "--output", &format!("s3://{BUCKET}/a9a/out/scores.txt")],
        Some(&endpoint),
        &[],
    );
    assert!(std::fs::read_to_string(server.object_path("a9a/out/scores.txt")).unwrap().lines().count() > 16_000);

    // Credentials from a file, as mounted from a Kubernetes Secret; the most verbose
    // logging still shows no secret (checked inside `linea`).
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        &secret,
        format!("[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"),
    )
    .unwrap();
    let file_only = [
        ("AWS_SHARED_CREDENTIALS_FILE", secret.path().to_str().unwrap()),
        ("AWS_ACCESS_KEY_ID", ""),
        ("AWS_SECRET_ACCESS_KEY", ""),
        ("RUST_LOG", "trace"),
    ];
    let out =
        ok(&["eval", "--model", &model, "--data", &format!("s3://{BUCKET}/a9a/grid")], Some(&endpoint), &file_only);
    assert_eq!(stdout(&out), reference.eval_grid);
}

#[test]
fn faults_that_retries_absorb_leave_the_model_bytes_unchanged() {
    let reference = reference();
    let server = S3Server::start();
    let kinds = vec![
        Fault::Throttle,
        Fault::ServerError,
        Fault::Drop,
        Fault::Truncate,
        Fault::Latency(Duration::from_millis(100)),
    ];
    // Long latency only for GETs, which hedging covers; PUTs get a short delay instead.
    let random = random_plan(0.1, 4, kinds);
    let plan = move |n, method: &str| match random(n, method) {
        Some(Fault::Latency(_)) if method == "GET" && n % 2 == 0 => Some(Fault::Latency(Duration::from_secs(3))),
        fault => fault,
    };
    let proxy = FaultProxy::start(server.port, std::sync::Arc::new(plan));
    let started = Instant::now();
    let (eval_grid, stderr) = run_on_s3(&proxy.endpoint(), "faults", &[("LINEA_S3_HEDGE_MS", "300")]);
    let (requests, retries, hedges) = s3::request_counts(&stderr);
    for line in stderr.lines().filter(|l| l.contains("retrying")) {
        eprintln!("  {line}");
    }
    eprintln!(
        "with faults: {:?}; linea: {requests} requests, {retries} retries, {hedges} hedged reads; proxy: {}",
        started.elapsed(),
        proxy.counts.summary()
    );
    assert!(std::fs::read(server.object_path("faults/a9a.model")).unwrap() == reference.model, "model bytes differ");
    assert_eq!(eval_grid, reference.eval_grid);
    assert!(proxy.counts.faults() >= 10 && retries >= 5, "too few faults to mean anything: {}", proxy.counts.summary());
}

#[test]
fn a_server_gone_for_good_fails_naming_the_object_and_the_cause() {
    let mut server = S3Server::start();
    let endpoint = server.endpoint();
    let grid = format!("s3://{BUCKET}/gone/grid");
    let train = data("a9a/a9a.train.libsvm");
    ok(&["prepare", "--input", &train, "--format", "libsvm", "--output", &grid], Some(&endpoint), &[]);
    server.stop();
    let started = Instant::now();
    let out = linea(&["train", "--data", &grid, "--model", "/nonexistent/m"], Some(&endpoint), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("failed after {:?}: {stderr}", started.elapsed());
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("error: {grid}/manifest.json: ")), "{stderr}");
    assert!(stderr.contains("Connection refused") && stderr.contains("(gave up after 8 attempts)"), "{stderr}");
}

#[test]
fn a_flipped_byte_is_caught_by_its_checksum_and_never_trained_on() {
    let server = S3Server::start();
    let endpoint = server.endpoint();
    let grid = format!("s3://{BUCKET}/bad/grid");
    let model = format!("s3://{BUCKET}/bad/a9a.model");
    let train = data("a9a/a9a.train.libsvm");
    ok(&["prepare", "--input", &train, "--format", "libsvm", "--output", &grid], Some(&endpoint), &[]);
    let cell = server.object_path("bad/grid/cells/b00001/r000001");
    let mut bytes = std::fs::read(&cell).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&cell, bytes).unwrap();
    let out = linea(&["train", "--data", &grid, "--model", &model], Some(&endpoint), &[("LINEA_S3_ATTEMPTS", "3")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("error: {grid}/cells/b00001/r000001: ")) && stderr.contains("checksum"),
        "{stderr}"
    );
    assert!(!server.object_path("bad/a9a.model").exists(), "a model was written from corrupt data");
}

#[test]
fn a_master_that_lost_storage_resumes_from_its_last_checkpoint_once_storage_is_back() {
    use linea_worker::runtime::auth::{JobSecret, SECRET_ENV};
    use linea_worker::runtime::client;
    let dir = tempfile::tempdir().unwrap();
    let train = data("a9a/a9a.train.libsvm");
    // A fixed number of epochs (tolerance 0), long enough to stop the server mid-run; SCD
    // named, as the master runs it (`linea train` would choose its algorithm).
    let params = ["--algorithm", "scd", "--epochs", "300", "--tolerance", "0"];
    let local_grid = dir.path().join("grid").to_string_lossy().into_owned();
    let local_model = dir.path().join("model").to_string_lossy().into_owned();
    ok(
        &["prepare", "--input", &train, "--format", "libsvm", "--output", &local_grid, "--rows-per-shard", "2000"],
        None,
        &[],
    );
    ok(&[&["train", "--data", &local_grid, "--model", &local_model][..], &params].concat(), None, &[]);

    let mut server = S3Server::start();
    let endpoint = server.endpoint();
    let grid = format!("s3://{BUCKET}/resume/grid");
    let model = format!("s3://{BUCKET}/resume/a9a.model");
    let checkpoint = format!("s3://{BUCKET}/resume/checkpoint");
    ok(
        &["prepare", "--input", &train, "--format", "libsvm", "--output", &grid, "--rows-per-shard", "2000"],
        Some(&endpoint),
        &[],
    );
    let secret = "s3-resume-test-secret-0123456789";
    let listen =
        format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let master_url = format!("http://{listen}");
    // The job's certificates, as every distributed job has.
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    linea_proto::tls::JobCertificates::generate("s3", &["127.0.0.1".into()]).unwrap().write(&certs).unwrap();
    let tls_dir = certs.to_string_lossy().into_owned();
    let transport =
        linea_proto::tls::Transport::require(Some(&tls_dir), false, linea_proto::tls::Role::Member).unwrap();
    let env = [(SECRET_ENV, secret), ("LINEA_S3_ATTEMPTS", "3"), (linea_proto::tls::TLS_DIR_ENV, tls_dir.as_str())];
    let spawn = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_linea"));
        command.args(args).envs([
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
            ("AWS_REGION", "us-east-1"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]);
        command.envs(env).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
    };
    let master_args = [
        &["master", "--data", &grid, "--model", &model, "--checkpoint", &checkpoint, "--listen", &listen][..],
        &params,
    ]
    .concat();
    let worker_args = ["worker", "--master", &listen, "--threads", "1"];
    let master = spawn(&master_args);
    let workers = [spawn(&worker_args), spawn(&worker_args)];
    let secret = JobSecret::new(secret).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while client::status(&master_url, None, &secret, &transport).map_or(true, |s| s.epoch < 5) {
        assert!(Instant::now() < deadline, "the run never reached epoch 5");
        std::thread::sleep(Duration::from_millis(20)); // poll interval
    }

    // The server goes away: the master's next checkpoint write fails after its retries.
    server.stop();
    let out = master.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("error: {checkpoint}/")) && stderr.contains("gave up after 3 attempts"),
        "{stderr}"
    );
    assert!(!stderr.contains(SECRET_KEY) && !stderr.contains(secret.expose()), "{stderr}");
    for worker in workers {
        assert!(worker.wait_with_output().unwrap().status.success(), "workers are released");
    }

    // The server is back: a new master resumes where the checkpoint says, and the model is
    // the one an undisturbed run makes.
    server.restart();
    let master = spawn(&master_args);
    let workers = [spawn(&worker_args), spawn(&worker_args)];
    let out = master.wait_with_output().unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{log}");
    let resumed = log.lines().find_map(|l| l.strip_prefix("resuming from checkpoint: epoch ")).expect(&log);
    let epoch: u32 = resumed.split(',').next().unwrap().parse().unwrap();
    assert!(epoch >= 5, "resumed at epoch {epoch}, not from the last checkpoint");
    for worker in workers {
        assert!(worker.wait_with_output().unwrap().status.success());
    }
    assert!(std::fs::read(server.object_path("resume/a9a.model")).unwrap() == std::fs::read(&local_model).unwrap());
}

#[test]
fn prepare_reads_raw_input_from_s3_keeps_a_current_grid_and_names_the_object_when_it_fails() {
    let reference = reference();
    let server = S3Server::start();
    let endpoint = server.endpoint();
    // The raw file as an object (s3s-fs keeps each object as a file under its root).
    let object = server.object_path("raw/a9a.train.libsvm");
    std::fs::create_dir_all(object.parent().unwrap()).unwrap();
    std::fs::copy(data("a9a/a9a.train.libsvm"), &object).unwrap();
    let raw = format!("s3://{BUCKET}/raw/a9a.train.libsvm");
    let grid = format!("s3://{BUCKET}/fromraw/grid");
    let summary_file = tempfile::NamedTempFile::new().unwrap();
    let summary_path = summary_file.path().to_str().unwrap();
    let prepare = |input: &str, extra: &[&str], env: &[(&str, &str)]| {
        let args = [
            &["prepare", "--input", input, "--format", "libsvm", "--output", &grid, "--rows-per-shard", ROWS_PER_SHARD]
                [..],
            extra,
        ]
        .concat();
        linea(&args, Some(&endpoint), &[&[("LINEA_TERMINATION_LOG", summary_path)][..], env].concat())
    };
    let manifest = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(server.object_path("fromraw/grid/manifest.json")).unwrap()).unwrap()
    };
    let summary =
        || -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(summary_path).unwrap()).unwrap() };

    let first = prepare(&raw, &["--reuse"], &[]);
    assert!(first.status.success() && stdout(&first).starts_with("prepared "), "{first:?}");
    assert_eq!(summary()["reused"], false);
    // The same grid as from the local file, plus what identifies the object.
    let mut written = manifest();
    let input = written.as_object_mut().unwrap().remove("input").expect("an s3:// input is fingerprinted");
    let local: serde_json::Value = serde_json::from_slice(&reference.manifest).unwrap();
    assert!(written == local, "the grid differs from the one prepared from the local file");
    assert_eq!(input["uri"], raw.as_str());
    assert_eq!(input["bytes"], std::fs::metadata(&object).unwrap().len());
    assert!(input["etag"].as_str().is_some_and(|e| !e.is_empty()), "{input}");

    // The same object and options again: the grid is kept, nothing is rewritten.
    let cell = server.object_path("fromraw/grid/cells/b00001/r000000");
    let written_at = std::fs::metadata(&cell).unwrap().modified().unwrap();
    let second = prepare(&raw, &["--reuse"], &[]);
    assert!(second.status.success() && stdout(&second).starts_with("kept "), "{second:?}");
    assert_eq!((summary()["reused"].as_bool(), &summary()["rows"]), (Some(true), &local["rows"]));
    assert_eq!(std::fs::metadata(&cell).unwrap().modified().unwrap(), written_at);
    // Other options, or a changed object: prepared again, and the fingerprint follows.
    let other_shards = prepare(&raw, &["--reuse", "--numeric", "buckets"], &[]);
    assert!(stdout(&other_shards).starts_with("prepared "), "{other_shards:?}");
    std::fs::copy(data("a9a/a9a.test.libsvm"), &object).unwrap();
    let changed = prepare(&raw, &["--reuse"], &[]);
    assert!(stdout(&changed).starts_with("prepared "), "{changed:?}");
    assert_eq!(manifest()["input"]["bytes"], std::fs::metadata(&object).unwrap().len());
    let test_rows =
        std::fs::read_to_string(data("a9a/a9a.test.libsvm")).unwrap().lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(manifest()["rows"], test_rows);

    // Failures name the object, as the user wrote it, and exit 2: a restart cannot help.
    let failure = |out: &Output| -> String {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let message = std::fs::read_to_string(summary_path).unwrap();
        assert!(message.starts_with("error: "), "the termination message says why: {message}");
        message
    };
    std::fs::write(&object, "1 3:1 11:1\n0 5:x\n").unwrap();
    let bad_line = failure(&prepare(&raw, &[], &[]));
    assert!(bad_line.contains(&format!("{raw}:2: ")), "{bad_line}");
    let missing = failure(&prepare(&format!("s3://{BUCKET}/raw/nothing.libsvm"), &[], &[]));
    assert!(missing.contains("raw/nothing.libsvm: no such object"), "{missing}");
    let denied = failure(&prepare(&raw, &[], &[("AWS_SECRET_ACCESS_KEY", "not-the-secret-key-0123456789")]));
    assert!(
        ["SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "access denied"]
            .iter()
            .any(|code| denied.contains(code)),
        "{denied}"
    );
    assert!(denied.contains(&raw), "{denied}");
}
