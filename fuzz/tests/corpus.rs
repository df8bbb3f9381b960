//! Every fuzz target over its checked-in corpus, each input once, in the normal release
//! build: the regression half of fuzzing (the inputs that once crashed a decoder or reached
//! new code stay harmless), without the instrumented build that the search needs
//! (`scripts/fuzz.sh run`, docs/fuzzing.md). The allocation cap of the fuzz library holds
//! here too; libFuzzer's timeout and RSS limit, and the fuzz build's overflow checks in the
//! decoders, come only with the search.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = corpus_dir().join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("read a corpus entry").path())
        .collect();
    files.sort();
    files
}

#[test]
fn every_target_has_a_corpus_and_every_corpus_a_target() {
    let mut on_disk: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("fuzz/corpus")
        .map(|entry| entry.expect("read fuzz/corpus").file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut targets: Vec<String> = linea_fuzz::TARGETS.iter().map(|(name, _)| name.to_string()).collect();
    targets.sort();
    assert_eq!(on_disk, targets);
    for target in &targets {
        assert!(!inputs(target).is_empty(), "fuzz/corpus/{target} is empty");
    }
}

/// One test, inputs in turn: the readers' harness writes each input to one file per process.
#[test]
fn every_corpus_input_passes_its_target() {
    let mut failed = Vec::new();
    let mut count = 0;
    for (target, run) in linea_fuzz::TARGETS {
        for input in inputs(target) {
            let data = std::fs::read(&input).expect("read a corpus input");
            count += 1;
            if catch_unwind(AssertUnwindSafe(|| run(&data))).is_err() {
                failed.push(input.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "{} of {count} corpus inputs failed their target:\n{}", failed.len(), failed.join("\n"));
}
