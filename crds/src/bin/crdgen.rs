//! Prints the TrainingJob CustomResourceDefinition as YAML, or with `--markdown` the field
//! reference:
//!
//! ```text
//! cargo run -p linea-crds --bin crdgen > crds/trainingjob.crd.yaml
//! cp crds/trainingjob.crd.yaml charts/linea/crds/trainingjob.yaml
//! cargo run -p linea-crds --bin crdgen -- --markdown > docs/crd-reference.md
//! ```
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let text = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => match linea_crds::crd_yaml() {
            Ok(yaml) => yaml,
            Err(err) => {
                eprintln!("crdgen: cannot serialize the CRD: {err}");
                return ExitCode::FAILURE;
            }
        },
        ["--markdown"] => linea_crds::reference::markdown(),
        _ => {
            eprintln!("usage: crdgen [--markdown]");
            return ExitCode::from(2);
        }
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("crdgen: cannot write: {err}");
            ExitCode::FAILURE
        }
    }
}
