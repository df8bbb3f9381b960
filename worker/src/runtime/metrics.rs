//! The master's own `/metrics` (Prometheus text format, version 0.0.4), on a port of its own
//! (`--metrics-listen`): a scrape needs neither the job secret nor the job's certificates, so
//! it serves plain HTTP and says nothing a secret could be learnt from — the run's progress
//! only, the same numbers `linea status` prints (both read [`status_reply`]).
//!
//! The operator's `/metrics` has a series per job, as it last polled the master; this one is
//! the master's own view at the moment of the scrape, with what the operator does not poll
//! (the checkpoint's age, the gap).

use super::hub::{Hub, status_reply};
use super::proto::StatusReply;
use std::fmt::Write;
use std::sync::Arc;

/// The exposition of one scrape: `status` as gauges and counters, and the seconds since
/// this master last wrote a checkpoint (`None`: it has written none, or checkpoints are off).
/// A series whose value the run does not have (the gap of an algorithm without one, the
/// objective before the first epoch, the desired worker count of a non-elastic run) is left
/// out rather than exported as NaN, so an alert on it never fires on a missing value.
pub fn render(status: &StatusReply, checkpoint_age: Option<f64>) -> String {
    let mut text = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, f64)]| {
        if samples.is_empty() {
            return;
        }
        let _ = writeln!(text, "# HELP linea_master_{name} {help}");
        let _ = writeln!(text, "# TYPE linea_master_{name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(text, "linea_master_{name}{labels} {}", number(*value));
        }
    };
    let phases = ["starting", "training", "stopping", "succeeded", "failed"];
    let phase: Vec<(String, f64)> =
        phases.iter().map(|p| (format!("{{phase=\"{p}\"}}"), if status.phase == *p { 1.0 } else { 0.0 })).collect();
    let phase: Vec<(&str, f64)> = phase.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    metric("phase", "gauge", "1 for the phase the run is in", &phase);
    metric("epoch", "gauge", "Epochs completed", &[("", status.epoch.into())]);
    metric("max_epochs", "gauge", "Most epochs the run may take", &[("", status.max_epochs.into())]);
    metric("iterations", "counter", "Iterations of the algorithm completed", &[("", status.iteration as f64)]);
    let objective: Vec<(&str, f64)> = [("", status.objective)].into_iter().filter(|(_, v)| v.is_finite()).collect();
    metric("objective", "gauge", "Regularized training objective after the last epoch", &objective);
    let gap: Vec<(&str, f64)> =
        [("{kind=\"absolute\"}", status.gap_absolute), ("{kind=\"relative\"}", status.gap_relative)]
            .into_iter()
            .filter_map(|(l, v)| v.filter(|v| v.is_finite()).map(|v| (l, v)))
            .collect();
    metric("duality_gap", "gauge", "Duality gap after the last epoch (algorithms that have one)", &gap);
    metric(
        "examples_per_second",
        "gauge",
        "Training rows processed per second in the last epoch",
        &[("", status.examples_per_second)],
    );
    metric(
        "work_items_completed",
        "counter",
        "Work items the workers completed",
        &[("", status.items_completed as f64)],
    );
    metric(
        "workers",
        "gauge",
        "Workers connected to the master, by state",
        &[
            ("{state=\"active\"}", status.workers_active.into()),
            ("{state=\"draining\"}", status.workers_draining.into()),
        ],
    );
    let desired: Vec<(&str, f64)> = status.desired_workers.map(|n| ("", n.into())).into_iter().collect();
    metric("workers_desired", "gauge", "Workers the algorithm wants (elastic runs)", &desired);
    metric("workers_lost", "counter", "Workers that vanished without draining", &[("", status.workers_lost.into())]);
    let age: Vec<(&str, f64)> = checkpoint_age.map(|a| ("", a)).into_iter().collect();
    metric("checkpoint_age_seconds", "gauge", "Seconds since this master last wrote a checkpoint", &age);
    text
}

/// A sample value as the text format writes it.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{value}")
    }
}

/// The current exposition of a running master.
pub fn scrape(hub: &Hub) -> String {
    let age = hub.status.lock().expect("status lock").checkpointed.map(|at| at.elapsed().as_secs_f64());
    render(&status_reply(hub), age)
}

/// Serves `/metrics` on `listener` until the master's runtime shuts down.
pub async fn serve(listener: tokio::net::TcpListener, hub: Arc<Hub>) -> std::io::Result<()> {
    use axum::http::header::CONTENT_TYPE;
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || async move { ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], scrape(&hub)) }),
    );
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> StatusReply {
        StatusReply {
            phase: "training".into(),
            epoch: 7,
            max_epochs: 100,
            iteration: 9,
            objective: 10546.25,
            examples_per_second: 1.5e6,
            workers_active: 3,
            workers_draining: 1,
            workers_lost: 2,
            items_completed: 420,
            gap_absolute: Some(0.5),
            gap_relative: Some(4.5e-5),
            desired_workers: Some(4),
            ..StatusReply::default()
        }
    }

    fn sample<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
    }

    #[test]
    fn every_series_carries_the_status_value() {
        let text = render(&status(), Some(12.5));
        for (series, value) in [
            ("linea_master_phase{phase=\"training\"}", "1"),
            ("linea_master_phase{phase=\"failed\"}", "0"),
            ("linea_master_epoch", "7"),
            ("linea_master_max_epochs", "100"),
            ("linea_master_iterations", "9"),
            ("linea_master_objective", "10546.25"),
            ("linea_master_duality_gap{kind=\"absolute\"}", "0.5"),
            ("linea_master_duality_gap{kind=\"relative\"}", "0.000045"),
            ("linea_master_examples_per_second", "1500000"),
            ("linea_master_work_items_completed", "420"),
            ("linea_master_workers{state=\"active\"}", "3"),
            ("linea_master_workers{state=\"draining\"}", "1"),
            ("linea_master_workers_desired", "4"),
            ("linea_master_workers_lost", "2"),
            ("linea_master_checkpoint_age_seconds", "12.5"),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        // Every sample has its HELP and TYPE, once.
        for name in text.lines().filter(|l| !l.starts_with('#')).map(|l| l.split(['{', ' ']).next().unwrap()) {
            assert_eq!(text.matches(&format!("# TYPE {name} ")).count(), 1, "{name}");
            assert_eq!(text.matches(&format!("# HELP {name} ")).count(), 1, "{name}");
        }
    }

    #[test]
    fn values_the_run_does_not_have_are_left_out() {
        let status = StatusReply {
            objective: f64::NAN,
            gap_absolute: None,
            gap_relative: None,
            desired_workers: None,
            ..status()
        };
        let text = render(&status, None);
        for absent in ["objective", "duality_gap", "workers_desired", "checkpoint_age_seconds"] {
            assert!(!text.contains(&format!("linea_master_{absent}")), "{absent} in\n{text}");
        }
        assert_eq!(sample(&text, "linea_master_epoch"), Some("7"));
    }
}
