//! Where raw input comes from: a local file as it is, or an `s3://bucket/key` object fetched
//! through the S3 storage (retries, checksums) into a private temporary folder, under the
//! object's own file name, and removed when done. Readers then see a file either way, and
//! what they say about it ([`RawInput::rename`]) names the object, not the copy.

use crate::error::{LineaError, Result};
use crate::storage::{ObjectInfo, S3Options, S3Storage};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What a grid was prepared from, recorded in its manifest so `linea prepare --reuse` can
/// tell the same input again: the object's URI, size and ETag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFingerprint {
    pub uri: String,
    pub bytes: u64,
    pub etag: String,
}

/// Raw input ready to be read from a local path.
pub struct RawInput {
    /// The location as given (a path, or `s3://bucket/key`).
    pub location: String,
    /// The local file to read.
    pub path: String,
    /// For an object: what identifies its content (none when the store sends no ETag).
    pub fingerprint: Option<InputFingerprint>,
    /// The temporary folder of a fetched object, removed on drop.
    temporary: Option<PathBuf>,
}

/// An object's URI split into its folder's storage and its key, with the object's info.
pub struct RemoteObject {
    pub storage: S3Storage,
    pub key: String,
    pub info: ObjectInfo,
}

impl RemoteObject {
    /// Looks `location` (`s3://bucket/key`) up; a missing object is an error naming it.
    pub fn look_up(location: &str) -> Result<RemoteObject> {
        let not_an_object = || LineaError::Usage(format!("{location}: not an object (expected s3://bucket/key)"));
        let rest = location.strip_prefix("s3://").ok_or_else(not_an_object)?;
        let (bucket, key) = rest.split_once('/').filter(|(_, k)| !k.is_empty()).ok_or_else(not_an_object)?;
        let storage = S3Storage::open(&format!("s3://{bucket}"), S3Options::from_env()?)?;
        let info = storage.info(key)?.ok_or_else(|| LineaError::NotFound { object: location.to_string() })?;
        Ok(RemoteObject { storage, key: key.to_string(), info })
    }

    /// What identifies this object's content, if the store gave an ETag.
    pub fn fingerprint(&self, location: &str) -> Option<InputFingerprint> {
        let etag = self.info.etag.clone()?;
        Some(InputFingerprint { uri: location.to_string(), bytes: self.info.bytes, etag })
    }
}

impl RawInput {
    /// A local path (or `file://`) as it is; an `s3://` object fetched.
    pub fn open(location: &str) -> Result<RawInput> {
        if !location.starts_with("s3://") {
            let path = location.strip_prefix("file://").unwrap_or(location).to_string();
            return Ok(RawInput { location: location.to_string(), path, fingerprint: None, temporary: None });
        }
        RawInput::fetch(location, RemoteObject::look_up(location)?)
    }

    /// Fetches an object already looked up.
    pub fn fetch(location: &str, object: RemoteObject) -> Result<RawInput> {
        let name = object.key.rsplit('/').next().unwrap_or(&object.key).to_string();
        let folder =
            std::env::temp_dir().join(format!("linea-input-{}-{:08x}", std::process::id(), rand::random::<u32>()));
        std::fs::create_dir(&folder).map_err(LineaError::io(&folder))?;
        let path = folder.join(&name);
        let input = RawInput {
            location: location.to_string(),
            path: path.to_string_lossy().into_owned(),
            fingerprint: object.fingerprint(location),
            temporary: Some(folder),
        };
        object.storage.download(&object.key, &object.info, &path)?;
        Ok(input)
    }

    /// The file name recorded in the grid manifest: the same for a local file and for the
    /// object it was uploaded as, so both give the same grid.
    pub fn file_name(&self) -> String {
        std::path::Path::new(&self.path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// An error about the local copy, told about the input as the user named it.
    pub fn rename(&self, error: LineaError) -> LineaError {
        if self.temporary.is_none() {
            return error;
        }
        let (local, named) = (self.path.as_str(), self.location.as_str());
        match error {
            LineaError::Input { file, line, message } if file == local => {
                LineaError::Input { file: named.to_string(), line, message: message.replace(local, named) }
            }
            LineaError::Data { file, message } if file == local => {
                LineaError::Data { file: named.to_string(), message: message.replace(local, named) }
            }
            LineaError::Io { path, source } if path == std::path::Path::new(local) => {
                LineaError::Storage { object: named.to_string(), cause: format!("reading the fetched copy: {source}") }
            }
            LineaError::Usage(message) => LineaError::Usage(message.replace(local, named)),
            other => other,
        }
    }
}

impl Drop for RawInput {
    fn drop(&mut self) {
        if let Some(folder) = &self.temporary
            && let Err(e) = std::fs::remove_dir_all(folder)
        {
            tracing::warn!(folder = %folder.display(), %e, "could not remove the fetched input");
        }
    }
}
