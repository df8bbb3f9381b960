//! Default CPU and memory of job pods: the operator's `--job-default-resources` (the chart's
//! `jobDefaults.resources`), applied to each pod the job's spec leaves without them.
//!
//! Why: a pod with no limits is refused by a namespace ResourceQuota on `limits.cpu` or
//! `limits.memory`, and a worker with no limit can take a node's memory. The defaults give
//! every job pod requests and limits unless the job says otherwise.
//!
//! How they combine with a job's own `master.resources` / `workers.resources` — per resource
//! name (cpu, memory, any other), requests and limits separately, as a namespace LimitRange's
//! `defaultRequest` and `default` do, so what Kubernetes users know holds:
//! - what the job names always wins;
//! - a limit the job does not name takes the default limit, raised to the job's own request
//!   if that is larger (a limit below the request would make the pod invalid);
//! - a request the job does not name takes the default request, unless the job names a
//!   limit for that resource: then the API server makes the request equal to the limit, as
//!   it does for any pod (never a default request above the job's own limit).
//!
//! The prepare pod holds the data in memory as the master does and takes the master's.
//! The configuration is checked once, at start-up: a quantity that is not one, or a default
//! request above its default limit, stops the operator with an error naming the field.

use crate::desired::Role;
use crate::error::{OperatorError, Result};
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The environment variable (and `--job-default-resources`) the chart sets.
pub const ENV: &str = "LINEA_JOB_DEFAULT_RESOURCES";

/// The validated defaults of each role (empty: none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobResources {
    master: RoleResources,
    worker: RoleResources,
}

/// One role's default requests and limits, each quantity checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoleResources {
    requests: BTreeMap<String, Quantity>,
    limits: BTreeMap<String, Quantity>,
}

/// The configuration as written: `{"master": {"requests": {...}, "limits": {...}}, "worker": ...}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    #[serde(default)]
    master: WrittenRole,
    #[serde(default)]
    worker: WrittenRole,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct WrittenRole {
    #[serde(default)]
    requests: BTreeMap<String, Amount>,
    #[serde(default)]
    limits: BTreeMap<String, Amount>,
}

/// A quantity as YAML gives it to Helm's `toJson`: `"500m"`, `"2Gi"`, or a bare number (`cpu: 1`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Amount {
    Text(String),
    Number(serde_json::Number),
}

impl JobResources {
    /// Reads and checks the JSON configuration. Empty text means no defaults.
    pub fn parse(text: &str) -> Result<Self> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let written: Written = serde_json::from_str(text).map_err(|e| config(format!("not the expected JSON: {e}")))?;
        Ok(Self {
            master: RoleResources::check("master", written.master)?,
            worker: RoleResources::check("worker", written.worker)?,
        })
    }

    /// The defaults of `role`'s pods (the prepare pod takes the master's).
    pub fn of(&self, role: Role) -> &RoleResources {
        match role {
            Role::Master | Role::Prepare => &self.master,
            Role::Worker => &self.worker,
        }
    }

    /// What a pod of `role` whose job names `own` runs with.
    pub fn effective(&self, role: Role, own: Option<&ResourceRequirements>) -> Option<ResourceRequirements> {
        self.of(role).merge(own)
    }
}

fn config(why: String) -> OperatorError {
    OperatorError::Config(format!("job default resources ({ENV}, chart value jobDefaults.resources): {why}"))
}

impl RoleResources {
    fn check(role: &str, written: WrittenRole) -> Result<Self> {
        let list = |kind: &str, amounts: BTreeMap<String, Amount>| -> Result<BTreeMap<String, (Quantity, i128)>> {
            amounts
                .into_iter()
                .map(|(name, amount)| {
                    let text = match amount {
                        Amount::Text(text) => text,
                        Amount::Number(number) => number.to_string(),
                    };
                    let field = format!("{role}.{kind}.{name}");
                    if name.trim().is_empty() {
                        return Err(config(format!("{field}: an empty resource name")));
                    }
                    let value = parse_quantity(&text).ok_or_else(|| {
                        config(format!("{field}: {text:?} is not a Kubernetes quantity (e.g. 500m, 1.5, 512Mi, 2Gi)"))
                    })?;
                    Ok((name, (Quantity(text), value)))
                })
                .collect()
        };
        let requests = list("requests", written.requests)?;
        let limits = list("limits", written.limits)?;
        for (name, (request, value)) in &requests {
            if let Some((limit, most)) = limits.get(name)
                && value > most
            {
                return Err(config(format!(
                    "{role}.requests.{name} ({}) is above {role}.limits.{name} ({}): no pod could have it",
                    request.0, limit.0
                )));
            }
        }
        let strip = |list: BTreeMap<String, (Quantity, i128)>| list.into_iter().map(|(k, (q, _))| (k, q)).collect();
        Ok(Self { requests: strip(requests), limits: strip(limits) })
    }

    pub fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.limits.is_empty()
    }

    /// The job's own resources with these defaults filled in (rules in the module doc).
    pub fn merge(&self, own: Option<&ResourceRequirements>) -> Option<ResourceRequirements> {
        let own = own.cloned().unwrap_or_default();
        let mut requests = own.requests.clone().unwrap_or_default();
        let mut limits = own.limits.clone().unwrap_or_default();
        for (name, default) in &self.limits {
            if limits.contains_key(name) {
                continue;
            }
            let requested = requests.get(name).filter(|r| larger(r, default));
            limits.insert(name.clone(), requested.unwrap_or(default).clone());
        }
        for (name, default) in &self.requests {
            let own_limit = own.limits.as_ref().is_some_and(|l| l.contains_key(name));
            if !requests.contains_key(name) && !own_limit {
                requests.insert(name.clone(), default.clone());
            }
        }
        let merged = ResourceRequirements {
            requests: (!requests.is_empty()).then_some(requests),
            limits: (!limits.is_empty()).then_some(limits),
            ..own
        };
        (merged != ResourceRequirements::default()).then_some(merged)
    }
}

/// Whether `a` is a larger quantity than `b` (false if either is not a quantity: the API
/// server refuses the job's own then, with its message).
fn larger(a: &Quantity, b: &Quantity) -> bool {
    matches!((parse_quantity(&a.0), parse_quantity(&b.0)), (Some(a), Some(b)) if a > b)
}

/// Bytes of a memory quantity (rounded up); `None` if it is not one.
pub fn bytes(quantity: &Quantity) -> Option<u64> {
    let nano = parse_quantity(&quantity.0)?;
    u64::try_from((nano + 999_999_999) / 1_000_000_000).ok()
}

/// A Kubernetes quantity's value in billionths (`1n` is 1), rounded up as the API server
/// rounds what is finer than `1n`; `None` if `text` is not a non-negative quantity or is too
/// large to hold. The grammar of apimachinery's `resource.Quantity`:
/// `[+]<digits>[.<digits>]` then a binary suffix (Ki Mi Gi Ti Pi Ei), a decimal one (n u m
/// "" k M G T P E) or an exponent (`e3`, `E-2`).
pub fn parse_quantity(text: &str) -> Option<i128> {
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    let end = unsigned.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') || whole.len() + fraction.len() > 30 {
        return None;
    }
    let digits: i128 = format!("{whole}{fraction}").parse().ok()?;
    let (ten, two): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let unsigned = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) || unsigned.len() > 3 {
                return None;
            }
            (exponent.parse().ok()?, 0)
        }
    };
    // value = digits * 2^two * 10^(ten - fraction digits), in billionths: * 10^9.
    let scaled = digits.checked_mul(1i128.checked_shl(two)?)?;
    let power = ten + 9 - fraction.len() as i32;
    if power >= 0 {
        scaled.checked_mul(10i128.checked_pow(power as u32)?)
    } else {
        let divisor = 10i128.checked_pow(power.unsigned_abs())?;
        Some((scaled + divisor - 1) / divisor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity(text.into())
    }

    fn requirements(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> ResourceRequirements {
        let list = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| pairs.iter().map(|(k, v)| (k.to_string(), q(v))).collect())
        };
        ResourceRequirements { requests: list(requests), limits: list(limits), ..Default::default() }
    }

    /// The chart's default values, as its template renders them (`toJson`: `cpu: 2` is a number).
    const CHART: &str = r#"{"master":{"requests":{"cpu":"250m","memory":"256Mi"},"limits":{"cpu":2,"memory":"2Gi"}},
        "worker":{"requests":{"cpu":"500m","memory":"512Mi"},"limits":{"cpu":2,"memory":"4Gi"}}}"#;

    #[test]
    fn quantities_parse_as_the_api_server_reads_them() {
        let table: [(&str, i128); 15] = [
            ("1", 1_000_000_000),
            ("+1", 1_000_000_000),
            ("500m", 500_000_000),
            ("0.5", 500_000_000),
            (".5", 500_000_000),
            ("5.", 5_000_000_000),
            ("100n", 100),
            ("1u", 1000),
            ("1k", 1_000_000_000_000),
            ("2Gi", 2 * (1 << 30) * 1_000_000_000),
            ("1Ei", (1i128 << 60) * 1_000_000_000),
            ("1e3", 1_000_000_000_000),
            ("12E-3", 12_000_000),
            ("1E", 1_000_000_000_000_000_000_000_000_000),
            ("0.1n", 1),
        ];
        for (text, nano) in table {
            assert_eq!(parse_quantity(text), Some(nano), "{text}");
        }
        assert_eq!(parse_quantity("1.5Gi"), Some(3 * (1i128 << 29) * 1_000_000_000));
        for bad in ["", ".", "lots", "2GB", "1.2.3", "-1", "1e", "1Ki5", "5kk", "1 Gi", "0x10", "1e99999", "1e400"] {
            assert_eq!(parse_quantity(bad), None, "{bad:?}");
        }
        assert_eq!(bytes(&q("512Mi")), Some(512 << 20));
        assert_eq!(bytes(&q("1.5")), Some(2), "rounded up");
    }

    #[test]
    fn a_job_that_names_nothing_gets_the_defaults_and_every_role_has_its_own() {
        let defaults = JobResources::parse(CHART).unwrap();
        let worker = defaults.effective(Role::Worker, None).unwrap();
        assert_eq!(worker, requirements(&[("cpu", "500m"), ("memory", "512Mi")], &[("cpu", "2"), ("memory", "4Gi")]));
        let master = defaults.effective(Role::Master, None).unwrap();
        assert_eq!(master, requirements(&[("cpu", "250m"), ("memory", "256Mi")], &[("cpu", "2"), ("memory", "2Gi")]));
        assert_eq!(defaults.effective(Role::Prepare, None), Some(master), "prepare takes the master's");
        // No defaults configured: a job that names none gets none, as before.
        let none = JobResources::parse("").unwrap();
        assert_eq!(none.effective(Role::Worker, None), None);
        let own = requirements(&[("cpu", "1")], &[]);
        assert_eq!(none.effective(Role::Worker, Some(&own)), Some(own));
    }

    #[test]
    fn what_the_job_names_wins_resource_by_resource() {
        let defaults = JobResources::parse(CHART).unwrap();
        // The journey's job: requests of its own and a memory limit; the CPU limit is the default.
        let own = requirements(&[("cpu", "100m"), ("memory", "128Mi")], &[("memory", "512Mi")]);
        assert_eq!(
            defaults.effective(Role::Worker, Some(&own)).unwrap(),
            requirements(&[("cpu", "100m"), ("memory", "128Mi")], &[("cpu", "2"), ("memory", "512Mi")])
        );
        // A limit alone: no default request (the API server sets the request to the limit).
        let own = requirements(&[], &[("memory", "1Gi")]);
        assert_eq!(
            defaults.effective(Role::Worker, Some(&own)).unwrap(),
            requirements(&[("cpu", "500m")], &[("cpu", "2"), ("memory", "1Gi")])
        );
        // A request above the default limit: the limit is raised to it, never below it.
        let own = requirements(&[("cpu", "6"), ("memory", "16Gi")], &[]);
        assert_eq!(
            defaults.effective(Role::Worker, Some(&own)).unwrap(),
            requirements(&[("cpu", "6"), ("memory", "16Gi")], &[("cpu", "6"), ("memory", "16Gi")])
        );
        // Other resources and claims pass through.
        let mut own = requirements(&[], &[("nvidia.com/gpu", "1")]);
        own.claims = Some(vec![k8s_openapi::api::core::v1::ResourceClaim { name: "gpu".into(), ..Default::default() }]);
        let merged = defaults.effective(Role::Worker, Some(&own)).unwrap();
        assert_eq!(merged.limits.as_ref().unwrap()["nvidia.com/gpu"], q("1"));
        assert_eq!(merged.limits.as_ref().unwrap()["memory"], q("4Gi"));
        assert_eq!(merged.claims, own.claims);
    }

    #[test]
    fn a_bad_default_is_refused_with_the_field_it_is_in() {
        let refused = |text: &str| match JobResources::parse(text) {
            Err(OperatorError::Config(why)) => why,
            other => panic!("{text}: {other:?}"),
        };
        let why = refused(r#"{"worker":{"limits":{"memory":"2GB"}}}"#);
        assert!(why.contains("worker.limits.memory: \"2GB\" is not a Kubernetes quantity"), "{why}");
        assert!(why.contains(ENV) && why.contains("jobDefaults.resources"), "{why}");
        let why = refused(r#"{"master":{"requests":{"cpu":"-1"}}}"#);
        assert!(why.contains("master.requests.cpu: \"-1\""), "{why}");
        let why = refused(r#"{"worker":{"requests":{"memory":"8Gi"},"limits":{"memory":"4Gi"}}}"#);
        assert!(why.contains("worker.requests.memory (8Gi) is above worker.limits.memory (4Gi)"), "{why}");
        let why = refused(r#"{"workers":{}}"#);
        assert!(why.contains("unknown field `workers`"), "{why}");
        let why = refused(r#"{"worker":{"limit":{}}}"#);
        assert!(why.contains("unknown field `limit`"), "{why}");
        refused("{not json");
    }
}
