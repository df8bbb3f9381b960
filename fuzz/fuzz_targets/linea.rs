//! The one fuzz binary: LINEA_FUZZ_TARGET picks the target (linea_fuzz::TARGETS).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linea_fuzz::run(data));
