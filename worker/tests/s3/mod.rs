//! Test support for the S3 backend: a real S3 server (s3s-fs, installed by
//! scripts/s3-server.sh) on loopback, and a fault-injecting proxy to put between it and
//! linea.
#![allow(dead_code)] // each test binary uses a different subset

pub mod proxy;
pub mod server;

/// Test credentials: distinctive so the secret-leak test can grep for them.
pub const ACCESS_KEY: &str = "LINEATESTACCESSKEY01";
pub const SECRET_KEY: &str = "linea-secret-7f3a9c1e5b2d8406fe1d";
pub const BUCKET: &str = "linea-test";

/// The environment that points `linea` at the test server (or a proxy in front of it) at
/// `endpoint`, with the standard AWS variables and nothing from this machine's own AWS
/// setup; a command also drops the machine's `AWS_*` and `LINEA_S3_*` variables
/// ([`clear_machine_settings`]).
pub fn aws_env(endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_REGION", "us-east-1"),
        // Never ask an instance-metadata address: only loopback is ours.
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_CONFIG_FILE", "/nonexistent/aws-config"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Removes this machine's own S3 settings from `command`'s environment.
pub fn clear_machine_settings(command: &mut std::process::Command) {
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("AWS_") || n.starts_with("LINEA_S3_")) {
        command.env_remove(name);
    }
}

/// Requests, retries and hedged reads from the storages' closing log lines
/// ("N requests, M retries, K hedged reads (...)").
pub fn request_counts(stderr: &str) -> (u64, u64, u64) {
    stderr
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = |w: &str| words.iter().position(|x| x.trim_end_matches(',') == w).map(|i| words[i - 1]);
            let number = |w: &str| at(w)?.parse::<u64>().ok();
            Some((number("requests")?, number("retries")?, number("hedged")?))
        })
        .fold((0, 0, 0), |(a, b, c), (d, e, f)| (a + d, b + e, c + f))
}
