//! A checkpoint's body is the engine's postcard encoding of an algorithm's state and steps.
//! Postcard is not self-describing, so a state type that gains, loses or retypes a field
//! reads an older checkpoint wrongly or not at all; the checkpoint format string must change
//! with it, so that an older checkpoint is refused with a message instead (twice a state
//! type gained a field under an unchanged `linea-checkpoint/2`, and older checkpoints were
//! taken as damaged and silently started over).
//!
//! This test traces the serde layout of every type a checkpoint body holds and compares it
//! with the layout recorded for the current format in `checkpoint-schemas/`. A recorded
//! layout is never rewritten: a change of layout needs a new format string, and
//! `LINEA_BLESS=1` then records the layout of the new one.

use linea_engine::cocoa::{Clock, CocoaState, CocoaStep};
use linea_engine::hybrid::{LinearState, LinearStep};
use linea_engine::scd::{ScdState, ScdStep};
use linea_worker::runtime::checkpoint::FORMAT;
use serde_reflection::{Tracer, TracerConfig};
use std::path::PathBuf;

/// The serde layout of every type a checkpoint body can hold, as JSON.
fn current_layout() -> String {
    let mut tracer = Tracer::new(TracerConfig::default());
    tracer.trace_simple_type::<ScdState>().expect("ScdState traces");
    tracer.trace_simple_type::<ScdStep>().expect("ScdStep traces");
    tracer.trace_simple_type::<CocoaState>().expect("CocoaState traces");
    tracer.trace_simple_type::<CocoaStep>().expect("CocoaStep traces");
    tracer.trace_simple_type::<LinearState>().expect("LinearState traces");
    tracer.trace_simple_type::<LinearStep>().expect("LinearStep traces");
    // Enums inside them, traced on their own so that every variant is seen.
    tracer.trace_simple_type::<Clock>().expect("Clock traces");
    let registry = tracer.registry().expect("every enum's variants are traced");
    serde_json::to_string_pretty(&registry).expect("a registry serializes") + "\n"
}

fn recorded_path() -> PathBuf {
    let name = format!("{}.json", FORMAT.replace('/', "-"));
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/checkpoint-schemas").join(name)
}

#[test]
fn the_checkpoint_encoding_changes_only_with_the_format_string() {
    let layout = current_layout();
    let path = recorded_path();
    let bless = std::env::var_os("LINEA_BLESS").is_some();
    match std::fs::read_to_string(&path) {
        Ok(recorded) => assert!(
            recorded == layout,
            "the encoding of the checkpoint's state types changed, but the format string is still {FORMAT}: \
             a checkpoint written before this change would be misread or thrown away. Bump FORMAT in \
             worker/src/runtime/checkpoint.rs and run this test with LINEA_BLESS=1 to record the new layout \
             (the layout recorded for {FORMAT} in {} is never rewritten).\nnow:\n{layout}",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && bless => {
            std::fs::write(&path, &layout).expect("the layout is recorded");
        }
        Err(e) => panic!(
            "no layout recorded for checkpoint format {FORMAT} ({}: {e}); run this test with LINEA_BLESS=1 to record it",
            path.display()
        ),
    }
}

/// The guard above only works if the tracer sees a changed field: a layout with one field
/// more is a different layout.
#[test]
fn a_field_more_is_another_layout() {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Before {
        epoch: u32,
        alpha: Vec<f64>,
    }
    #[derive(serde::Serialize, serde::Deserialize)]
    struct After {
        epoch: u32,
        alpha: Vec<f64>,
        progress: [f64; 2],
    }
    let layout = |trace: fn(&mut Tracer)| {
        let mut tracer = Tracer::new(TracerConfig::default());
        trace(&mut tracer);
        serde_json::to_string(&tracer.registry().unwrap()).unwrap().replace("After", "Before")
    };
    let before = layout(|t| {
        t.trace_simple_type::<Before>().unwrap();
    });
    let after = layout(|t| {
        t.trace_simple_type::<After>().unwrap();
    });
    assert_ne!(before, after);
}
