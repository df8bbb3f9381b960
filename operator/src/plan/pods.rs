//! What a pod or node says about itself: its phase, how it ended, why it cannot start.

use super::*;

pub(super) fn phase_of(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

pub(super) fn pod_condition(pod: &Pod, type_: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == condition_status::TRUE))
}

/// Node taints that announce the node's removal (spot interruption notices, Karpenter and
/// cluster-autoscaler scale-down, GKE's impending termination).
pub const TERMINATION_TAINTS: [&str; 5] = [
    "aws-node-termination-handler/spot-itn",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
    "cloud.google.com/impending-node-termination",
    "ToBeDeletedByClusterAutoscaler",
];

/// Whether a node is about to go: a termination taint, or cordoned.
pub fn node_terminating(node: &k8s_openapi::api::core::v1::Node) -> bool {
    let Some(spec) = &node.spec else { return false };
    spec.unschedulable == Some(true)
        || spec.taints.iter().flatten().any(|t| TERMINATION_TAINTS.contains(&t.key.as_str()))
}

/// Taken away rather than failed: preempted, evicted, its node shut down.
pub fn disrupted(pod: &Pod) -> bool {
    let reason = pod.status.as_ref().and_then(|s| s.reason.as_deref()).unwrap_or_default();
    pod_condition(pod, "DisruptionTarget")
        || matches!(reason, "Evicted" | "Preempting" | "Shutdown" | "NodeShutdown" | "Terminated" | "NodeLost")
}

/// Whether the pod's process ended on SIGTERM: `linea master` exits [`EXIT_STOPPED`] after
/// stopping cleanly on it (and a process SIGTERM killed outright reports the same code), so a
/// master stopped from outside (its container stopped, a `kill` in it, a node shutting down)
/// is restarted, never counted as a failure of the job nor taken for its success.
pub(super) fn stopped(pod: &Pod) -> bool {
    terminated(pod).is_some_and(|t| t.exit_code == EXIT_STOPPED)
}

pub(super) fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub(super) fn finished_pod(pod: &Pod) -> bool {
    matches!(phase_of(pod), "Succeeded" | "Failed")
}

pub(super) fn terminated(pod: &Pod) -> Option<&ContainerStateTerminated> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()?.state.as_ref()?.terminated.as_ref()
}

/// Why a pod ended, for events and status: `OOMKilled (exit code 137): <termination message>`.
pub(super) fn pod_message(pod: &Pod) -> String {
    match terminated(pod) {
        Some(t) => {
            let why = t.reason.as_deref().map(|r| format!("{r} ")).unwrap_or_default();
            let message = t.message.as_deref().map(str::trim).filter(|m| !m.is_empty());
            format!("{why}(exit code {}){}", t.exit_code, message.map(|m| format!(": {m}")).unwrap_or_default())
        }
        None => pod.status.as_ref().and_then(|s| s.message.clone()).unwrap_or_else(|| "no message".into()),
    }
}

/// Why a pending pod cannot start, if the scheduler or the kubelet said so.
pub(super) fn blocked_reason(pod: &Pod) -> Option<(&'static str, String)> {
    let status = pod.status.as_ref()?;
    let unschedulable = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled" && c.status == condition_status::FALSE && c.reason.as_deref() == Some("Unschedulable")
    });
    if let Some(c) = unschedulable {
        return Some((reason::POD_UNSCHEDULABLE, format!("Unschedulable: {}", c.message.as_deref().unwrap_or(""))));
    }
    let waiting = status.container_statuses.iter().flatten().find_map(|c| c.state.as_ref()?.waiting.as_ref())?;
    let why = waiting.reason.as_deref()?;
    if matches!(why, "ContainerCreating" | "PodInitializing") {
        return None;
    }
    Some((reason::CONTAINER_WAITING, format!("{why}: {}", waiting.message.as_deref().unwrap_or(""))))
}

/// Delay before replacing a pod after its `failures_so_far + 1`-th failure: none for the
/// first, then 10 s, 20 s, 40 s, ... at most 5 min.
pub fn backoff(failures_so_far: i32) -> Duration {
    if failures_so_far <= 0 {
        return Duration::ZERO;
    }
    let doublings = (failures_so_far - 1).min(16) as u32;
    BACKOFF_BASE.saturating_mul(1 << doublings).min(BACKOFF_MAX)
}

pub(super) fn is_worker(pod: &Pod) -> bool {
    pod.labels().get(LABEL_ROLE).is_some_and(|r| r == Role::Worker.as_str())
}
