//! The grid manifest (worker::manifest) and what is read through it: parsed from storage,
//! checked (every block has a cell per shard), its objects looked up. Storage here is the
//! fuzz input as manifest.json and nothing else, so every object it names is missing: that
//! must be an error, never a panic. A manifest that parses writes back to one that parses
//! to the same value.
use linea_worker::error::{LineaError, Result};
use linea_worker::gridload;
use linea_worker::manifest::{MANIFEST, Manifest};
use linea_worker::storage::Storage;
use std::sync::Mutex;

struct OneObject(Mutex<Vec<u8>>);

impl Storage for OneObject {
    fn read(&self, key: &str) -> Result<Vec<u8>> {
        match key {
            MANIFEST => Ok(self.0.lock().unwrap().clone()),
            _ => Err(LineaError::NotFound { object: key.to_string() }),
        }
    }
    fn write(&self, key: &str, bytes: &[u8]) -> Result<()> {
        assert_eq!(key, MANIFEST);
        *self.0.lock().unwrap() = bytes.to_vec();
        Ok(())
    }
    fn remove(&self, _: &str) -> Result<()> {
        Ok(())
    }
    fn exists(&self, key: &str) -> Result<bool> {
        Ok(key == MANIFEST)
    }
    fn describe(&self, key: &str) -> String {
        format!("fuzz/{key}")
    }
}

pub fn run(data: &[u8]) {
    let storage = OneObject(Mutex::new(data.to_vec()));
    let Ok(manifest) = Manifest::read(&storage) else { return };
    // The objects it names are not there: errors, whatever the manifest claims.
    assert!(gridload::Layout::read(&storage).is_err() || manifest.blocks.is_empty());
    for shard in 0..manifest.shards.len().min(4) {
        assert!(gridload::read_targets(&storage, &manifest, shard, linea_engine::Loss::Logistic).is_err());
    }
    for loss in [linea_engine::Loss::Squared, linea_engine::Loss::Logistic] {
        let _ = manifest.target_scale(loss);
    }
    manifest.write(&storage).expect("in memory");
    assert_eq!(Manifest::read(&storage).expect("a written manifest reads back"), manifest);
}
