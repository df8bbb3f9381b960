//! Where grids, checkpoints and models live. One interface; the local-folder backend is
//! the embedded default.
//!
//! Writes are atomic: bytes go to a temporary name and are renamed into place, so a reader
//! never sees half an object, and a grid's manifest is written last so that a grid is
//! either complete or not there.

use crate::error::{LineaError, Result};
use std::path::{Path, PathBuf};

pub trait Storage: Send + Sync {
    /// Reads a whole object.
    fn read(&self, key: &str) -> Result<Vec<u8>>;
    /// Writes a whole object atomically.
    fn write(&self, key: &str, bytes: &[u8]) -> Result<()>;
    /// Removes an object if present.
    fn remove(&self, key: &str) -> Result<()>;
    /// Human-readable location of an object, for messages.
    fn describe(&self, key: &str) -> String;
}

/// A folder on the local file system.
pub struct LocalStorage {
    root: PathBuf,
}

impl LocalStorage {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }
}

impl Storage for LocalStorage {
    fn read(&self, key: &str) -> Result<Vec<u8>> {
        let path = self.path(key);
        std::fs::read(&path).map_err(LineaError::io(path))
    }

    fn write(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let path = self.path(key);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(LineaError::io(parent))?;
        }
        write_atomically(&path, bytes)
    }

    fn remove(&self, key: &str) -> Result<()> {
        let path = self.path(key);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LineaError::io(path)(e)),
            _ => Ok(()),
        }
    }

    fn describe(&self, key: &str) -> String {
        self.path(key).display().to_string()
    }
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    std::fs::write(&temporary, bytes).map_err(LineaError::io(&temporary))?;
    std::fs::rename(&temporary, path).map_err(LineaError::io(path))
}

/// Opens the storage a location names. Only local folders exist so far.
pub fn open(location: &str) -> Result<Box<dyn Storage>> {
    if location.starts_with("s3://") {
        return Err(LineaError::Usage(format!("{location}: S3 storage is not available in this build yet")));
    }
    Ok(Box::new(LocalStorage::new(location.strip_prefix("file://").unwrap_or(location))))
}
