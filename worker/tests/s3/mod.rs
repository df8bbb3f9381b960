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
