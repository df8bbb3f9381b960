//! The parquet reader on arbitrary bytes (see crate::read for what is checked).
//!
//! linea runs every call into the parquet crate under `catch_unwind` and turns a panic there
//! into this file's error (worker/src/input/parquet.rs), so a panic raised inside that crate
//! is contained, not a crash; libFuzzer's panic hook would abort on it all the same. This
//! target's hook lets exactly those through; any other panic still aborts, and a panic that
//! escaped linea's guard would still reach the harness's own catch and abort there.
use std::sync::Once;

pub fn run(data: &[u8]) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_parquet_crate = info.location().is_some_and(|at| at.file().contains("/parquet-"));
            if !in_parquet_crate {
                fuzzer_hook(info)
            }
        }));
    });
    crate::read(linea_worker::input::Format::Parquet, data)
}
