//! The planner's state and the steps every part of a plan shares: conditions, events,
//! deletions, backoff, the end of the job, the prepare pod, and what blocks pods.

use super::*;

pub(super) struct Planner<'a> {
    pub(super) job: &'a TrainingJob,
    /// The job's own pods (controlled by it); others are never touched.
    pub(super) pods: Vec<&'a Pod>,
    pub(super) children: Children,
    pub(super) now: Time,
    /// Pods that cannot start or wait for a backoff: (reason, `pod: why`).
    pub(super) blocked: Vec<(&'static str, String)>,
    pub(super) plan: Plan,
}

impl Planner<'_> {
    pub(super) fn set(&mut self, type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> bool {
        let c = condition(type_, ok, reason, message.into(), &self.now, self.job.metadata.generation);
        self.plan.status.set_condition(c)
    }

    pub(super) fn event(&mut self, warning: bool, reason: &'static str, note: impl Into<String>) {
        self.plan.events.push(Event { warning, reason, note: note.into(), decision: None });
    }

    pub(super) fn delete(&mut self, pod: &Pod) {
        if !terminating(pod) && !self.plan.delete_pods.iter().any(|d| d.name == pod.name_any()) {
            self.plan.delete_pods.push(Doomed { name: pod.name_any(), uid: pod.uid() });
        }
    }

    pub(super) fn requeue_within(&mut self, after: Duration) {
        self.plan.requeue = self.plan.requeue.min(after.max(Duration::from_secs(1)));
    }

    /// Whether a pod that ended at its container's `finishedAt` must still wait before it is
    /// replaced, after `failures_so_far` earlier failures: how long, and a note that stays
    /// the same from one reconcile to the next (so the condition does not churn). A pod
    /// without a finish time (the kubelet did not say) is replaced at once.
    /// A pod that had run for [`BACKOFF_RESET_AFTER`] is not crash-looping and waits for nothing.
    pub(super) fn wait_for(&self, pod: &Pod, failures_so_far: i32) -> Option<(Duration, String)> {
        let ended = terminated(pod)?;
        let finished = ended.finished_at.as_ref()?.0;
        let ran = ended.started_at.as_ref().map(|started| finished.duration_since(started.0));
        if ran.is_some_and(|ran| ran >= SignedDuration::try_from(BACKOFF_RESET_AFTER).unwrap_or(SignedDuration::MAX)) {
            return None;
        }
        let delay = backoff(failures_so_far);
        let until = finished + SignedDuration::try_from(delay).ok()?;
        let left = until.duration_since(self.now.0);
        let note = format!("at {until} (backoff {} s)", delay.as_secs());
        (left > SignedDuration::ZERO).then(|| (Duration::from_secs_f64(left.as_secs_f64()), note))
    }

    /// Ends the job: the phase, its condition, the completion time, pods cleaned up.
    pub(super) fn finish(&mut self, succeeded: bool, why: &'static str, message: String) {
        let (phase, type_) = if succeeded {
            (Phase::Succeeded, condition_type::SUCCEEDED)
        } else {
            (Phase::Failed, condition_type::FAILED)
        };
        self.plan.status.phase = Some(phase);
        self.set(type_, true, why, message.clone());
        self.set(condition_type::RUNNING, false, why, "the job has finished");
        if self.plan.status.is_condition_true(condition_type::BLOCKED) {
            self.set(condition_type::BLOCKED, false, reason::NOT_BLOCKED, "the job has finished");
        }
        if let Some(w) = &mut self.plan.status.workers {
            // Nothing runs any more: no worker is ready or draining.
            w.ready = 0;
            w.draining = 0;
        }
        if self.plan.status.is_condition_true(condition_type::DRAINING) {
            self.set(condition_type::DRAINING, false, reason::STABLE, "the job has finished");
        }
        self.plan.status.completion_time = Some(self.now.clone());
        self.plan.pods.clear();
        self.plan.drain_workers.clear();
        self.event(!succeeded, why, message);
        self.clean_up();
    }

    pub(super) fn clean_up(&mut self) {
        let pods = self.pods.clone();
        for pod in pods {
            let remove = match self.job.spec.run_policy.clean_pod_policy {
                CleanPodPolicy::All => true,
                CleanPodPolicy::Running => !finished_pod(pod),
                CleanPodPolicy::None => false,
            };
            if remove {
                self.delete(pod);
            }
        }
    }

    /// A job with `spec.rawData` first runs its prepare pod ([`crate::prepare`]); returns
    /// whether the grid is ready. The pod's end decides: its summary says prepared or kept
    /// (condition `Prepared`, an event); a failure fails the job with the pod's termination
    /// message (`linea` retried each storage request already, and bad input stays bad); a
    /// preempted or evicted pod is replaced.
    pub(super) fn prepare(&mut self) -> bool {
        let Some(raw) = &self.job.spec.raw_data else { return true };
        if self.plan.status.is_condition_true(condition_type::PREPARED) {
            return true;
        }
        let (uri, grid) = (raw.uri.clone(), self.job.spec.dataset_uri.clone());
        let name = crate::prepare::pod_name(self.job);
        self.plan.status.phase = Some(Phase::Preparing);
        let preparing = format!("preparing the grid at {grid} from {uri}");
        let Some(pod) = self.find(&name).cloned() else {
            self.plan.pods.extend(self.children.prepare.take());
            if self.set(condition_type::PREPARED, false, reason::PREPARING, preparing.clone()) {
                self.event(false, reason::PREPARING, preparing);
            }
            return false;
        };
        match phase_of(&pod) {
            _ if terminating(&pod) => {}
            "Succeeded" => {
                let summary = terminated(&pod)
                    .and_then(|t| t.message.as_deref())
                    .and_then(|m| serde_json::from_str::<crate::prepare::PrepareSummary>(m.trim()).ok());
                let (why, message) = match summary {
                    Some(s) if s.reused => (
                        reason::GRID_REUSED,
                        format!(
                            "kept the grid at {grid}: prepared before from the same {uri} (size, ETag) and options; \
                             {} rows, {} blocks",
                            s.rows, s.blocks
                        ),
                    ),
                    Some(s) => (
                        reason::GRID_PREPARED,
                        format!(
                            "prepared the grid at {grid} from {uri}: {} rows, {} non-zeros, {} blocks",
                            s.rows, s.nnz, s.blocks
                        ),
                    ),
                    None => (reason::GRID_PREPARED, format!("prepared the grid at {grid} from {uri}")),
                };
                self.set(condition_type::PREPARED, true, why, message.clone());
                self.event(false, why, message);
                return true;
            }
            "Failed" if disrupted(&pod) => {
                self.delete(&pod);
                let note = "the prepare pod was preempted or evicted; preparing again";
                if self.set(condition_type::PREPARED, false, reason::PREPARING, note) {
                    self.event(true, reason::PREPARING, note);
                }
            }
            "Failed" => {
                let why = format!("preparing the grid at {grid} from {uri} failed: {}", pod_message(&pod));
                self.set(condition_type::PREPARED, false, reason::PREPARE_FAILED, why.clone());
                self.finish(false, reason::PREPARE_FAILED, why);
            }
            "Running" => {
                self.set(condition_type::PREPARED, false, reason::PREPARING, format!("{preparing}: running"));
            }
            _ => {
                if let Some((why, message)) = blocked_reason(&pod) {
                    self.blocked.push((why, format!("{name}: {message}")));
                }
            }
        }
        false
    }

    pub(super) fn find(&self, name: &str) -> Option<&'_ Pod> {
        self.pods.iter().copied().find(|p| p.name_any() == name)
    }

    /// `Blocked` lists every pod that cannot start or waits for a backoff; an event when the
    /// list changes.
    pub(super) fn blocked(&mut self) {
        let blocked = std::mem::take(&mut self.blocked);
        match blocked.first() {
            Some((why, _)) => {
                const SHOWN: usize = 10;
                let mut message: Vec<String> = blocked.iter().take(SHOWN).map(|(_, m)| m.clone()).collect();
                if blocked.len() > SHOWN {
                    message.push(format!("and {} more", blocked.len() - SHOWN));
                }
                let message = message.join("; ");
                if self.set(condition_type::BLOCKED, true, why, message.clone()) {
                    self.event(true, why, message);
                }
            }
            None if self.plan.status.is_condition_true(condition_type::BLOCKED) => {
                self.set(condition_type::BLOCKED, false, reason::NOT_BLOCKED, "every pod could start");
            }
            None => {}
        }
    }

    /// The auth Secret is being created: pods mount it by name, so they wait for the pass
    /// after its name is recorded (soon).
    pub(super) fn await_secret(&mut self) {
        if desired::operator_owns_secret(self.job) && desired::secret_name(self.job).is_none() {
            self.plan.pods.clear();
            self.requeue_within(Duration::from_secs(1));
        }
    }

    /// Creates pods in batches: the rest on the next pass, soon.
    pub(super) fn batch(&mut self) {
        if self.plan.pods.len() > MAX_CREATES_PER_RECONCILE {
            self.plan.pods.truncate(MAX_CREATES_PER_RECONCILE);
            self.requeue_within(Duration::from_secs(1));
        }
    }
}
