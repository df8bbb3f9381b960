//! The generated CRD has what `kubectl` and the API server need: names, subresources, printer
//! columns that point at real fields, CEL rules that compile, and a description on every field.

use linea_crds::crd;
use serde_json::Value;

fn schema() -> Value {
    let crd = crd();
    serde_json::to_value(crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).unwrap())
        .unwrap()
}

/// The schema node at a printer-column or scale JSONPath like `.status.workers.ready`.
fn node_at<'a>(schema: &'a Value, json_path: &str) -> Option<&'a Value> {
    json_path.trim_start_matches('.').split('.').try_fold(schema, |node, key| node.get("properties")?.get(key))
}

/// Every (path, rule, message) of `x-kubernetes-validations` in the schema.
fn rules(node: &Value, path: &str, out: &mut Vec<(String, String, String)>) {
    if let Some(list) = node.get("x-kubernetes-validations").and_then(Value::as_array) {
        for r in list {
            out.push((
                path.to_string(),
                r["rule"].as_str().unwrap_or_default().to_string(),
                r["message"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, child) in props {
            rules(child, &format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = node.get("items") {
        rules(items, &format!("{path}[]"), out);
    }
}

fn all_rules() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    rules(&schema(), "", &mut out);
    out
}

#[test]
fn names_scope_and_versions() {
    let crd = crd();
    assert_eq!(crd.metadata.name.as_deref(), Some(linea_crds::CRD_NAME));
    assert_eq!(crd.spec.group, linea_crds::GROUP);
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, linea_crds::KIND);
    assert_eq!(crd.spec.names.plural, "trainingjobs");
    assert_eq!(crd.spec.names.short_names, Some(vec![linea_crds::SHORT_NAME.to_string()]));
    assert_eq!(crd.spec.versions.len(), 1);
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, linea_crds::VERSION);
    assert!(v.served && v.storage);
}

#[test]
fn status_and_scale_subresources() {
    let crd = crd();
    let sub = crd.spec.versions[0].subresources.as_ref().expect("subresources");
    assert!(sub.status.is_some(), "status subresource");
    let scale = sub.scale.as_ref().expect("scale subresource");
    assert_eq!(scale.spec_replicas_path, ".spec.workers.replicas");
    assert_eq!(scale.status_replicas_path, ".status.workers.ready");
    assert_eq!(scale.label_selector_path.as_deref(), Some(".status.workers.selector"));
    let s = schema();
    for path in [&scale.spec_replicas_path, &scale.status_replicas_path, scale.label_selector_path.as_ref().unwrap()] {
        assert!(node_at(&s, path).is_some(), "scale path {path} is not in the schema");
    }
    assert_eq!(node_at(&s, ".spec.workers.replicas").unwrap()["type"], "integer");
    assert_eq!(node_at(&s, ".status.workers.selector").unwrap()["type"], "string");
}

#[test]
fn printer_columns_point_at_fields_of_the_right_type() {
    let crd = crd();
    let columns = crd.spec.versions[0].additional_printer_columns.clone().unwrap_or_default();
    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    for want in ["Phase", "Algorithm", "Ready", "Desired", "Epoch", "Objective", "Age"] {
        assert!(names.contains(&want), "missing printer column {want}: {names:?}");
    }
    // Shown without `-o wide`: a cocoa job's gap is how close it is to done.
    let gap = columns.iter().find(|c| c.name == "Gap").expect("a Gap column");
    assert_eq!((gap.json_path.as_str(), gap.priority.unwrap_or(0)), (".status.progress.dualityGap", 0));
    assert!(gap.description.as_deref().is_some_and(|d| d.contains("relative")), "{:?}", gap.description);
    let s = schema();
    for c in &columns {
        if c.json_path == ".metadata.creationTimestamp" {
            assert_eq!(c.type_, "date");
            continue;
        }
        let node = node_at(&s, &c.json_path)
            .unwrap_or_else(|| panic!("column {} points at {} which is not in the schema", c.name, c.json_path));
        assert_eq!(node["type"], c.type_.as_str(), "column {} type", c.name);
    }
}

#[test]
fn cel_rules_are_present_with_messages() {
    let rules = all_rules();
    let has = |path: &str, rule: &str| rules.iter().any(|(p, r, m)| p == path && r == rule && !m.is_empty());
    assert!(has(".spec.workers", "!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas"));
    assert!(has(".spec.workers", "self.minReplicas <= self.replicas"));
    assert!(has(".spec.workers", "!has(self.maxReplicas) || self.replicas <= self.maxReplicas"));
    for immutable in [".spec.datasetUri", ".spec.modelUri", ".spec.algorithm"] {
        assert!(has(immutable, "self == oldSelf"), "{immutable} is not immutable");
    }
    assert!(
        rules.iter().any(|(p, r, _)| p == ".spec.algorithm" && r.contains("has(self.scd)") && r.contains("== 1")),
        "exactly-one-algorithm rule"
    );
    for (path, rule, message) in &rules {
        assert!(!message.is_empty(), "rule {rule:?} at {path} has no message");
    }
}

#[test]
fn cel_rules_compile() {
    let compiled = kube::core::cel::compile_schema(&schema());
    let errors: Vec<String> = compiled.compilation_errors().iter().map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "CEL rules that do not compile: {errors:#?}");
}

/// Every field of spec and status has a description (the `kubectl explain` text).
#[test]
fn every_field_is_documented() {
    fn walk(node: &Value, path: &str, missing: &mut Vec<String>) {
        let documented = node.get("description").and_then(Value::as_str).is_some_and(|d| !d.trim().is_empty());
        if !documented {
            missing.push(path.to_string());
        }
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (k, child) in props {
                walk(child, &format!("{path}.{k}"), missing);
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{path}[]"), missing);
        }
    }
    let s = schema();
    let mut missing = Vec::new();
    for top in ["spec", "status"] {
        walk(&s["properties"][top], top, &mut missing);
    }
    assert!(missing.is_empty(), "fields without a doc comment: {missing:#?}");
}

/// The API server wants a structural schema: a type on every node and no anyOf/allOf/not.
/// No oneOf either: the exactly-one-algorithm rule is a CEL rule with a clear message, where a
/// failed oneOf would add a pathless, misleading error next to it.
#[test]
fn schema_is_structural() {
    fn walk(node: &Value, path: &str, problems: &mut Vec<String>) {
        let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        if node.get("type").is_none() && !int_or_string {
            problems.push(format!("{path}: no type"));
        }
        for k in ["anyOf", "allOf", "oneOf", "not", "$ref"] {
            if node.get(k).is_some() {
                problems.push(format!("{path}: {k}"));
            }
        }
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (k, child) in props {
                walk(child, &format!("{path}.{k}"), problems);
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{path}[]"), problems);
        }
        if let Some(extra) = node.get("additionalProperties").filter(|a| a.is_object()) {
            walk(extra, &format!("{path}{{}}"), problems);
        }
    }
    let mut problems = Vec::new();
    walk(&schema(), "", &mut problems);
    assert!(problems.is_empty(), "not structural: {problems:#?}");
}

#[test]
fn conditions_are_a_map_list_keyed_by_type() {
    let s = schema();
    let conditions = node_at(&s, ".status.conditions").unwrap();
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(conditions["x-kubernetes-list-map-keys"], serde_json::json!(["type"]));
}

/// `kubectl explain` prints descriptions, not the schema's `default`: every field with a
/// default says it in its description.
#[test]
fn every_default_is_in_the_description() {
    fn walk(node: &Value, path: &str, missing: &mut Vec<String>) {
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (k, child) in props {
                let has_default = child.get("default").is_some_and(|d| !d.is_object() && !d.is_array());
                let says = child.get("description").and_then(Value::as_str).is_some_and(|d| d.contains("default"));
                if has_default && !says {
                    missing.push(format!("{path}.{k} (default {})", child["default"]));
                }
                walk(child, &format!("{path}.{k}"), missing);
            }
        }
    }
    let mut missing = Vec::new();
    walk(&schema()["properties"]["spec"], "spec", &mut missing);
    assert!(missing.is_empty(), "defaults kubectl explain would not show: {missing:#?}");
}
