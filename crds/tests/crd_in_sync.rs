//! The committed CRD YAML must be what the Rust types generate now.

use std::path::Path;

const REGENERATE: &str = "run `cargo run -p linea-crds --bin crdgen > crds/trainingjob.crd.yaml` \
     and copy it to charts/linea/crds/trainingjob.yaml";

#[test]
fn committed_crd_yaml_matches_the_types() {
    let generated = linea_crds::crd_yaml().expect("the CRD serializes");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for committed in [root.join("trainingjob.crd.yaml"), root.join("../charts/linea/crds/trainingjob.yaml")] {
        let text = std::fs::read_to_string(&committed)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}; {REGENERATE}", committed.display()));
        if text != generated {
            let line = text
                .lines()
                .zip(generated.lines())
                .position(|(a, b)| a != b)
                .map_or_else(|| "its end".to_string(), |i| format!("line {}", i + 1));
            panic!(
                "{} is out of date with the Rust types (first difference at {line}); {REGENERATE}",
                committed.display()
            );
        }
    }
}

#[test]
fn committed_reference_matches_the_types() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/crd-reference.md");
    let regenerate = "run `cargo run -p linea-crds --bin crdgen -- --markdown > docs/crd-reference.md`";
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}; {regenerate}", path.display()));
    assert!(
        text == linea_crds::reference::markdown(),
        "{} is out of date with the Rust types; {regenerate}",
        path.display()
    );
}

#[test]
fn committed_crd_yaml_parses_back_to_the_same_crd() {
    let yaml = linea_crds::crd_yaml().unwrap();
    let parsed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_yaml::from_str(&yaml).expect("generated YAML parses as a CRD");
    assert_eq!(parsed, linea_crds::crd());
}
