//! The error policy by category: an object the API server calls invalid waits for the job to
//! change; API errors (refusals, conflicts, the server failing, the network) are retried with
//! exponential backoff, counted per job; every failure is counted by category on /metrics.

use http::{Request, Response};
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::{Client, Resource};
use linea_crds::{TrainingJob, TrainingJobSpec};
use linea_operator::desired::BuildOptions;
use linea_operator::error::OperatorError;
use linea_operator::metrics::Metrics;
use linea_operator::reconcile::{self, Context, retry_delay};
use std::sync::Arc;
use std::time::Duration;

fn job(name: &str) -> Arc<TrainingJob> {
    let spec: TrainingJobSpec =
        serde_json::from_value(serde_json::json!({"datasetUri": "s3://d/g", "modelUri": "s3://m/x.model"})).unwrap();
    let mut job = TrainingJob::new(name, spec);
    job.meta_mut().namespace = Some("ml".into());
    Arc::new(job)
}

fn api(code: u16) -> OperatorError {
    let status = kube::core::Status::failure(&format!("answered {code}"), "Test").with_code(code);
    OperatorError::Kube(kube::Error::Api(Box::new(status)))
}

/// A context whose client is never called: the policy decides from the error alone.
fn context() -> Arc<Context> {
    let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let options = BuildOptions {
        default_image: "linea:test".into(),
        operator_key: b"0123456789abcdef".to_vec(),
        resources: Default::default(),
    };
    Arc::new(Context::new(Client::new(service, "ml"), options, Arc::new(Metrics::default()), false))
}

#[tokio::test]
async fn invalid_objects_wait_for_a_change_and_api_errors_back_off_per_job() {
    let ctx = context();
    let ads = job("ads");
    for code in [400, 422] {
        assert_eq!(reconcile::error_policy(ads.clone(), &api(code), ctx.clone()), Action::await_change(), "{code}");
    }
    let missing = OperatorError::MissingField("ads".into(), "namespace");
    assert_eq!(reconcile::error_policy(ads.clone(), &missing, ctx.clone()), Action::await_change());
    // Whatever the API error, one per-job count: 2 s, 4 s, 8 s, 16 s, 32 s ...
    let mut delays = Vec::new();
    for code in [500, 503, 429, 403, 409, 404] {
        delays.push(reconcile::error_policy(ads.clone(), &api(code), ctx.clone()));
    }
    let network = OperatorError::Kube(kube::Error::ReadEvents(std::io::Error::other("connection reset")));
    delays.push(reconcile::error_policy(ads.clone(), &network, ctx.clone()));
    let want: Vec<Action> = [2, 4, 8, 16, 32, 64, 128].map(|s| Action::requeue(Duration::from_secs(s))).to_vec();
    assert_eq!(delays, want);
    // Another job's failures are its own.
    assert_eq!(reconcile::error_policy(job("svm"), &api(500), ctx.clone()), Action::requeue(Duration::from_secs(2)));
    let metrics = ctx.metrics.render();
    for (category, count) in
        [("invalid", 2), ("object", 1), ("api", 5), ("forbidden", 1), ("conflict", 1), ("not_found", 1)]
    {
        let line = format!(r#"linea_operator_reconcile_errors_total{{category="{category}"}} {count}"#);
        assert!(metrics.lines().any(|l| l == line), "{line} missing from\n{metrics}");
    }
}

#[test]
fn the_backoff_doubles_from_two_seconds_to_five_minutes() {
    let delays: Vec<u64> = [1, 2, 3, 8, 9, 10, 40, u32::MAX].map(|n| retry_delay(n).as_secs()).to_vec();
    assert_eq!(delays, [2, 4, 8, 256, 300, 300, 300, 300]);
}
