//! Test helpers: the fixtures and an in-process stand-in for the API server's handling of a
//! TrainingJob write (strict decoding, defaulting, OpenAPI schema validation, CEL rules).
//!
//! The stand-in covers the schema keywords the generated CRD uses and words its errors like
//! kube-apiserver does, so a fixture's `# expect:` substring can be checked here before anyone
//! runs a real API server. It is a check of our CRD, not a second API server: the real one is
//! the reference (see tests/fixtures/README.md).
use std::path::{Path, PathBuf};

use serde::Deserialize as _;
use serde_json::Value;

/// Directory of the YAML fixtures.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// One fixture file: its header comments and its YAML documents (one for a create, two —
/// old then new — for an update).
#[derive(Debug)]
pub struct Fixture {
    pub name: String,
    pub text: String,
    /// `# expect:` — substring of the API server's refusal; None for valid fixtures.
    pub expect: Option<String>,
    /// `# expect-pruned:` — the refusal when unknown fields are pruned instead of refused.
    pub expect_pruned: Option<String>,
    /// `# serde:` — whether the Rust types deserialize the (last) document.
    pub serde_accepts: bool,
    /// `# validate:` — substring of `TrainingJobSpec::validate(_update)`'s error.
    pub validate: Option<String>,
    pub documents: Vec<Value>,
}

fn header(text: &str, key: &str) -> Option<String> {
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.strip_prefix(&format!("# {key}:")))
        .map(|v| v.trim().to_string())
}

/// All fixtures, sorted by file name.
pub fn fixtures() -> Vec<Fixture> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("tests/fixtures exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths.iter().map(|p| load(p)).collect()
}

fn load(path: &Path) -> Fixture {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).unwrap();
    let documents = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let yaml = serde_yaml::Value::deserialize(doc).unwrap_or_else(|e| panic!("{name}: not YAML: {e}"));
            serde_json::to_value(yaml).unwrap_or_else(|e| panic!("{name}: not JSON-like: {e}"))
        })
        .collect();
    let serde = header(&text, "serde");
    Fixture {
        expect: header(&text, "expect"),
        expect_pruned: header(&text, "expect-pruned"),
        serde_accepts: match serde.as_deref() {
            None | Some("accepts") => true,
            Some("rejects") => false,
            Some(other) => panic!("{name}: `# serde:` must be accepts or rejects, not {other}"),
        },
        validate: header(&text, "validate"),
        name,
        text,
        documents,
    }
}

/// The CRD's openAPIV3Schema as JSON.
pub fn crd_schema() -> Value {
    let crd = linea_crds::crd();
    let schema =
        crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("CRD has a schema");
    serde_json::to_value(schema).unwrap()
}

/// What the API server would say about a create (`old` None) or update of `object`: every
/// error message, empty when the write is accepted. With `strict`, unknown fields are refused
/// (kubectl's default); otherwise they are pruned first.
pub fn apiserver_errors(object: &Value, old: Option<&Value>, strict: bool) -> Vec<String> {
    let schema = crd_schema();
    let mut errors = Vec::new();
    let mut object = object.clone();
    if strict {
        unknown_fields(&schema, &object, "", &mut errors);
        if !errors.is_empty() {
            // Strict decoding fails before validation.
            return errors;
        }
    } else {
        prune(&schema, &mut object);
    }
    let object = kube::core::cel::apply_defaults(&schema, &object);
    let old = old.map(|o| {
        let mut o = o.clone();
        prune(&schema, &mut o);
        kube::core::cel::apply_defaults(&schema, &o)
    });
    check_schema(&schema, &object, "", &mut errors);
    if let Err(cel) = kube::core::cel::Validator::new().validate(&schema, &object, old.as_ref()) {
        for e in cel.iter() {
            errors.push(format!("{}: Invalid value: {}", e.field_path, e.message));
        }
    }
    errors
}

fn is_root_meta(path: &str, key: &str) -> bool {
    path.is_empty() && matches!(key, "apiVersion" | "kind" | "metadata")
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn unknown_fields(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (key, child) in map {
                if is_root_meta(path, key) {
                    continue;
                }
                let child_path = join(path, key);
                match (props.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) => unknown_fields(s, child, &child_path, errors),
                    (None, Some(s)) if s.is_object() => unknown_fields(s, child, &child_path, errors),
                    _ if schema.get("x-kubernetes-preserve-unknown-fields").is_some() => {}
                    _ => errors.push(format!("strict decoding error: unknown field \"{child_path}\"")),
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, child) in items.iter().enumerate() {
                    unknown_fields(s, child, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

fn prune(schema: &Value, value: &mut Value) {
    prune_at(schema, value, true);
}

fn prune_at(schema: &Value, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            map.retain(|key, _| {
                (root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"))
                    || props.is_some_and(|p| p.contains_key(key))
                    || additional.is_some()
            });
            for (key, child) in map.iter_mut() {
                if let Some(s) = props.and_then(|p| p.get(key)).or(additional) {
                    prune_at(s, child, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for child in items {
                    prune_at(s, child, false);
                }
            }
        }
        _ => {}
    }
}

/// Go's `%v` for a float64 bound (0 not 0.0, 1.25 as is).
fn go_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 { format!("{}", n as i64) } else { format!("{n}") }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check_schema(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    if value.is_null() {
        if schema.get("nullable") != Some(&Value::Bool(true)) {
            errors.push(format!(
                "{path}: Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                schema["type"].as_str().unwrap_or("object")
            ));
        }
        return;
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !matches!(type_name(value), "integer" | "string") {
            errors.push(format!("{path}: Invalid value: must be an integer or a string"));
        }
        return;
    }
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let got = type_name(value);
        let ok = want == got || (want == "number" && got == "integer");
        if !ok {
            errors.push(format!("{path}: Invalid value: \"{got}\": {path} in body must be of type {want}: \"{got}\""));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
        errors.push(format!("{path}: Unsupported value: {value}: supported values: {}", list.join(", ")));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            let exclusive = schema.get("exclusiveMinimum") == Some(&Value::Bool(true));
            if (exclusive && n <= min) || n < min {
                let rel = if exclusive { "greater than" } else { "greater than or equal to" };
                errors
                    .push(format!("{path}: Invalid value: {value}: {path} in body should be {rel} {}", go_number(min)));
            }
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            let exclusive = schema.get("exclusiveMaximum") == Some(&Value::Bool(true));
            if (exclusive && n >= max) || n > max {
                let rel = if exclusive { "less than" } else { "less than or equal to" };
                errors
                    .push(format!("{path}: Invalid value: {value}: {path} in body should be {rel} {}", go_number(max)));
            }
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            errors.push(format!("{path}: Invalid value: {value}: {path} in body should be at least {min} chars long"));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            errors.push(format!("{path}: Too long: may not be more than {max} bytes"));
        }
    }
    if let Value::Object(map) = value {
        for key in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !map.contains_key(key) {
                errors.push(format!("{}: Required value", join(path, key)));
            }
        }
        if let Some(branches) = schema.get("oneOf").and_then(Value::as_array) {
            let valid = branches
                .iter()
                .filter(|b| {
                    let mut e = Vec::new();
                    check_schema(b, value, path, &mut e);
                    e.is_empty()
                })
                .count();
            if valid != 1 {
                errors.push(format!(
                    "{path}: Invalid value: \"object\": {path} in body must validate one and only one schema (oneOf)"
                ));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties").filter(|a| a.is_object());
        for (key, child) in map {
            if let Some(s) = props.and_then(|p| p.get(key)).or(additional) {
                check_schema(s, child, &join(path, key), errors);
            }
        }
    }
    if let (Value::Array(items), Some(s)) = (value, schema.get("items")) {
        for (i, child) in items.iter().enumerate() {
            check_schema(s, child, &format!("{path}[{i}]"), errors);
        }
    }
}
