//! The local-folder backend: keys are relative paths under a root folder.

use super::Storage;
use crate::error::{LineaError, Result};
use std::path::{Path, PathBuf};

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
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
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

    fn exists(&self, key: &str) -> Result<bool> {
        Ok(self.path(key).is_file())
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
