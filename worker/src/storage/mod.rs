//! Where grids, checkpoints and models live: one interface, two backends — a local folder
//! ([`LocalStorage`]) and an S3-compatible object store ([`S3Storage`], `s3://bucket/prefix`).
//! [`open`] picks the backend from the location, so every command that takes a folder
//! takes an `s3://` location too.
//!
//! Writes are atomic in both: a local object goes to a temporary name and is renamed into
//! place; an S3 object appears whole when its PUT (or multipart completion) succeeds. A
//! grid's manifest is written last, so a grid is either complete or not there. Reads are
//! checked: grid objects against the CRC-32C in the manifest, S3 objects also against the
//! CRC-32C the store keeps with them.

mod local;
mod retry;
mod s3;

pub use aws_sdk_s3::config::Credentials;
pub use local::{LocalStorage, write_atomically};
pub use retry::RetryPolicy;
pub use s3::{ObjectInfo, S3Options, S3Stats, S3Storage};

use crate::error::{LineaError, Result};

pub trait Storage: Send + Sync {
    /// Reads a whole object.
    fn read(&self, key: &str) -> Result<Vec<u8>>;
    /// Writes a whole object atomically.
    fn write(&self, key: &str, bytes: &[u8]) -> Result<()>;
    /// Removes an object if present.
    fn remove(&self, key: &str) -> Result<()>;
    /// Whether an object is there (a grid is a folder whose manifest exists).
    fn exists(&self, key: &str) -> Result<bool>;
    /// Human-readable location of an object, for messages.
    fn describe(&self, key: &str) -> String;
}

/// Opens the storage a location names: `s3://bucket/prefix`, `file://path` or a path.
pub fn open(location: &str) -> Result<Box<dyn Storage>> {
    if location.starts_with("s3://") {
        return Ok(Box::new(S3Storage::open(location, S3Options::from_env()?)?));
    }
    Ok(Box::new(LocalStorage::new(location.strip_prefix("file://").unwrap_or(location))))
}

/// Splits the location of a single file (a model, a plot) into the storage of its folder
/// and its key there, so files go through the same backends as grids.
pub fn open_file(location: &str) -> Result<(Box<dyn Storage>, String)> {
    let not_a_file = || LineaError::Usage(format!("{location}: not a file location (it names a folder or a bucket)"));
    if let Some(rest) = location.strip_prefix("s3://") {
        let (folder, name) = rest.rsplit_once('/').ok_or_else(not_a_file)?;
        if name.is_empty() {
            return Err(not_a_file());
        }
        return Ok((open(&format!("s3://{folder}"))?, name.to_string()));
    }
    let path = std::path::Path::new(location.strip_prefix("file://").unwrap_or(location));
    let name = path.file_name().filter(|_| !location.ends_with('/')).ok_or_else(not_a_file)?;
    let folder = path.parent().unwrap_or(std::path::Path::new(""));
    Ok((Box::new(LocalStorage::new(folder)), name.to_string_lossy().into_owned()))
}

/// Reads a single file from any storage.
pub fn read_file(location: &str) -> Result<Vec<u8>> {
    let (storage, key) = open_file(location)?;
    storage.read(&key)
}

/// Writes a single file atomically to any storage (a reader never sees half a model).
pub fn write_file(location: &str, bytes: &[u8]) -> Result<()> {
    let (storage, key) = open_file(location)?;
    storage.write(&key, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_location_splits_into_folder_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sub/model.txt");
        write_file(&file.to_string_lossy(), b"weights").unwrap();
        assert_eq!(read_file(&file.to_string_lossy()).unwrap(), b"weights");
        assert!(matches!(open_file("s3://bucket"), Err(LineaError::Usage(_))));
        assert!(matches!(open_file("s3://bucket/"), Err(LineaError::Usage(_))));
        assert!(matches!(open_file("models/"), Err(LineaError::Usage(_))));
    }
}
