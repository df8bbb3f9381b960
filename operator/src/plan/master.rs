//! The master pod: started, restarted after a failure or a disruption, or done.

use super::*;

impl Planner<'_> {
    pub(super) fn master(&mut self, progress: Option<&MasterProgress>) {
        let restarts = self.plan.status.restarts;
        let waiting = if restarts > 0 { Phase::Restarting } else { Phase::Pending };
        let name = desired::master_name(self.job);
        let Some(pod) = self.find(&name).cloned() else {
            self.plan.pods.push(self.children.master.clone());
            self.plan.status.phase = Some(waiting);
            return;
        };
        match phase_of(&pod) {
            _ if terminating(&pod) => self.plan.status.phase = Some(waiting),
            "Succeeded" => self.succeeded(&pod, progress),
            "Failed" if disrupted(&pod) => self.master_restart(
                &pod,
                "master preempted or evicted; resuming from its checkpoint (not counted against backoffLimit)".into(),
            ),
            "Failed" if stopped(&pod) => {
                let note = format!(
                    "master stopped on SIGTERM ({}); resuming from its checkpoint (not counted against backoffLimit)",
                    pod_message(&pod)
                );
                self.master_restart(&pod, note)
            }
            "Failed" => self.master_failed(&pod),
            "Running" => {
                self.plan.status.phase = Some(Phase::Running);
                self.set(condition_type::RUNNING, true, reason::TRAINING, "the master is training");
            }
            _ => {
                self.plan.status.phase = Some(waiting);
                match blocked_reason(&pod) {
                    Some((why, message)) => {
                        self.set(condition_type::RUNNING, false, why, format!("master pod {name}: {message}"));
                        self.blocked.push((why, format!("{name}: {message}")));
                    }
                    None => {
                        self.set(condition_type::RUNNING, false, reason::MASTER_STARTING, "the master pod is starting");
                    }
                }
            }
        }
    }

    /// The master went for a reason outside the job (preemption, eviction, SIGTERM): a new
    /// one resumes from the checkpoint at once, not counted as a restart.
    pub(super) fn master_restart(&mut self, pod: &Pod, note: String) {
        self.delete(pod);
        self.plan.status.phase = Some(Phase::Restarting);
        if self.set(condition_type::RUNNING, false, reason::MASTER_RESTARTING, note.clone()) {
            self.event(true, reason::MASTER_RESTARTING, note);
        }
    }

    pub(super) fn master_failed(&mut self, pod: &Pod) {
        let restarts = self.plan.status.restarts;
        let limit = self.job.spec.run_policy.backoff_limit;
        let message = pod_message(pod);
        if terminated(pod).is_some_and(|t| t.exit_code == EXIT_BAD_INPUT) {
            let why = format!("the master found its data or arguments unusable (a restart cannot help): {message}");
            self.finish(false, reason::DATASET_ERROR, why);
            return;
        }
        if restarts + 1 > limit {
            self.plan.status.restarts = restarts + 1;
            let why = format!("master failed {} times (backoffLimit {limit}); last: {message}", restarts + 1);
            self.finish(false, reason::BACKOFF_LIMIT_EXCEEDED, why);
            return;
        }
        self.plan.status.phase = Some(Phase::Restarting);
        if let Some((left, when)) = self.wait_for(pod, restarts) {
            let note = format!("master failed ({message}); restarting {when}");
            self.set(condition_type::RUNNING, false, reason::MASTER_RESTARTING, note.clone());
            self.blocked.push((reason::BACKOFF, format!("{}: {note}", pod.name_any())));
            self.requeue_within(left);
            return;
        }
        self.plan.status.restarts = restarts + 1;
        self.delete(pod);
        let note = format!("master failed ({message}); restart {} of {limit}", restarts + 1);
        self.set(condition_type::RUNNING, false, reason::MASTER_RESTARTING, note.clone());
        self.event(true, reason::MASTER_RESTARTING, note);
    }

    /// The master wrote the model and exited 0. Its termination message has the final epoch
    /// count; whether that is the epoch limit says how the run ended.
    pub(super) fn succeeded(&mut self, pod: &Pod, progress: Option<&MasterProgress>) {
        let summary = terminated(pod)
            .and_then(|t| t.message.as_deref())
            .and_then(|m| serde_json::from_str::<MasterSummary>(m.trim()).ok());
        let uri = self.job.spec.model_uri.clone();
        self.plan.status.model_uri = Some(uri.clone());
        let (why, message) = match &summary {
            Some(s) => {
                let progress = self.plan.status.progress.get_or_insert_with(Progress::default);
                progress.epoch = s.epochs;
                progress.objective = s.objective.or(progress.objective);
                progress.duality_gap = s.duality_gap.or(progress.duality_gap);
                let limit = self.job.spec.algorithm.max_epochs();
                let why = if s.epochs >= limit { reason::MAX_EPOCHS_REACHED } else { reason::CONVERGED };
                let objective = s.objective.map(|o| format!(", objective {o}")).unwrap_or_default();
                (why, format!("model written to {uri} after {} epochs{objective}", s.epochs))
            }
            None => {
                let polled = progress.map(|p| p.epoch).or(self.plan.status.progress.as_ref().map(|p| p.epoch));
                let polled = polled.map(|e| format!(" (last polled epoch {e})")).unwrap_or_default();
                (reason::CONVERGED, format!("model written to {uri}; the master reported no final epoch count{polled}"))
            }
        };
        self.finish(true, why, message);
    }
}
