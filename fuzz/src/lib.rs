//! Every fuzz target of linea, in one libFuzzer binary (one link instead of one per target,
//! which is most of the fuzz build's time): `LINEA_FUZZ_TARGET` names the target a run
//! fuzzes (scripts/fuzz.sh sets it), [`TARGETS`] lists them, each in its module below.
//!
//! What every fuzz target shares: an allocator that refuses any single allocation over
//! [`MAX_ALLOCATION`] (so "a corrupt length asked for gigabytes" is a crash the fuzzer
//! reports, not a slow run that may pass), and the harness of the raw-data readers.

use linea_worker::input::{self, FeatureSpec, Format, NumericMode, RawExample};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::OnceLock;

pub mod targets {
    pub mod checkpoint;
    pub mod codec;
    pub mod manifest;
    pub mod master_messages;
    pub mod model;
    pub mod read_criteo;
    pub mod read_csv;
    pub mod read_libsvm;
    pub mod read_parquet;
    pub mod read_vw;
    pub mod worker_messages;
}

/// A fuzz target: one input in, a panic or an abort if it found a defect.
pub type Target = fn(&[u8]);

/// The targets by name, as scripts/fuzz.sh and fuzz/corpus/ name them.
pub const TARGETS: &[(&str, Target)] = &[
    ("read_libsvm", targets::read_libsvm::run),
    ("read_vw", targets::read_vw::run),
    ("read_criteo", targets::read_criteo::run),
    ("read_csv", targets::read_csv::run),
    ("read_parquet", targets::read_parquet::run),
    ("codec", targets::codec::run),
    ("manifest", targets::manifest::run),
    ("model", targets::model::run),
    ("checkpoint", targets::checkpoint::run),
    ("master_messages", targets::master_messages::run),
    ("worker_messages", targets::worker_messages::run),
];

/// Runs the target `LINEA_FUZZ_TARGET` names on one input.
pub fn run(data: &[u8]) {
    static TARGET: OnceLock<Target> = OnceLock::new();
    let target = TARGET.get_or_init(|| {
        let name = std::env::var("LINEA_FUZZ_TARGET").unwrap_or_default();
        match TARGETS.iter().find(|(n, _)| *n == name) {
            Some((_, run)) => *run,
            None => {
                let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
                eprintln!("LINEA_FUZZ_TARGET={name:?} names no target; the targets are {}", names.join(", "));
                std::process::exit(2);
            }
        }
    });
    target(data)
}

/// No decoder may hold more than this at once for inputs of the fuzzer's size (64 KiB).
pub const MAX_ALLOCATION: usize = 256 << 20;

pub struct Capped;

// SAFETY: forwards to the system allocator; only refuses (aborts on) oversized requests.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn check(size: usize) {
    if size > MAX_ALLOCATION {
        // No panic here: panicking allocates. Write and abort, which libFuzzer reports.
        // stderr is unbuffered: writing to it does not allocate.
        use std::io::Write;
        let _ = std::io::stderr().write_all(b"fuzz: one allocation over 256 MiB (an unbounded allocation)\n");
        std::process::abort();
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;

/// The readers read files: each fuzz process writes its input to one file of its own.
fn input_file(data: &[u8], extension: &str) -> String {
    let path = std::env::temp_dir().join(format!("linea-fuzz-{}.{extension}", std::process::id()));
    std::fs::write(&path, data).expect("write the fuzz input to the temporary folder");
    path.to_string_lossy().into_owned()
}

/// Reads `data` as `format` the way `prepare` does, with a spec picked by the input's first
/// byte, and checks what every reader promises of an example it returns: a finite label
/// (NaN only for an unlabelled VW line), finite non-zero values, named variables, and line
/// numbers that never go down. Errors are fine; a panic or a broken promise is a crash.
pub fn read(format: Format, data: &[u8]) {
    let Some((&selector, data)) = data.split_first() else { return };
    let spec = FeatureSpec {
        format,
        label: (selector & 1 == 1).then(|| "label".to_string()),
        positive: (selector & 2 == 2).then(|| "1".to_string()),
        numeric: if selector & 4 == 4 { NumericMode::Buckets } else { NumericMode::Dense },
        ignore: if selector & 8 == 8 { vec!["c1".to_string()] } else { Vec::new() },
    };
    let path = input_file(data, &format!("{format:?}").to_lowercase());
    let Ok(mut reader) = input::open(&path, &spec) else { return };
    let mut example = RawExample::default();
    let mut last_line = 0;
    // A 64 KiB input has at most 64 Ki lines; the bound only keeps a defect from hanging.
    for _ in 0..100_000 {
        match reader.read(&mut example) {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
        let unlabelled = format == Format::Vw && example.label.is_nan();
        assert!(example.label.is_finite() || unlabelled, "label {}", example.label);
        // Non-decreasing, not increasing: lines are counted at '\n', and the csv crate also
        // ends a record at a lone '\r', so two records can share a line.
        assert!(example.line >= last_line.max(1), "line {} after {last_line}", example.line);
        last_line = example.line;
        for (variable, key, value) in example.features() {
            assert!(value.is_finite() && value != 0.0, "{key}: {value}");
            let _ = reader.variable_name(variable);
            if reader.is_dense(variable) {
                assert_eq!(key, "", "a dense variable's one feature has the empty key");
            }
        }
    }
}
