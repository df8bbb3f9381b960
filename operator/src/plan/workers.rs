//! The worker pods: created, replaced, drained before their node goes, and scaled as the
//! master's elastic policy or `kubectl scale` decides.

use super::*;

impl Planner<'_> {
    pub(super) fn workers(&mut self, progress: Option<&MasterProgress>, leaving_nodes: &[String]) {
        let replicas = self.job.spec.workers.clamped_replicas();
        let is_elastic = self.job.spec.elastic.enabled;
        // Elastic: what the master released joins what the operator remembers.
        let mut scale_in = elastic::Merged::default();
        if is_elastic {
            let slots = desired::slots(self.job);
            let mut e = self.plan.status.elastic.clone().unwrap_or_default();
            if e.slots < 1 {
                e.slots = slots;
            }
            scale_in = elastic::merge(&mut e, self.job, progress);
            self.plan.status.elastic = Some(e);
            // Recorded as reported in this status: the event goes with it, whatever follows.
            for d in &scale_in.decisions {
                let note = elastic::note(d);
                let event = Event { warning: false, reason: reason::ELASTIC_SCALE_IN, note, decision: Some(d.number) };
                self.plan.events.push(event);
            }
        }
        let mut released = self.plan.status.elastic.as_ref().map(|e| e.released.clone()).unwrap_or_default();
        let wanted: Vec<i32> = if is_elastic {
            elastic::wanted(self.job, desired::worker_slots(self.job), &released, replicas)
        } else {
            (0..replicas).collect()
        };
        let limit = self.job.spec.run_policy.worker_failure_limit;
        let before = self.plan.status.workers.clone().unwrap_or_default();
        let (mut failed, mut last_failure) = (before.failed, before.last_failure.clone());
        // Training advanced since the last reconcile: the failures so far did not stop it, so
        // the count that decides the backoff and the limit starts again.
        let epoch_before = self.plan.status.progress.as_ref().map_or(0, |p| p.epoch);
        let advanced = progress.is_some_and(|p| p.epoch > epoch_before);
        let mut recent = if advanced { 0 } else { before.recent_failures };
        let mut ready = 0;
        let mut alive = 0;
        let pods = self.pods.clone();
        for pod in pods.iter().copied().filter(|p| is_worker(p)) {
            let on_leaving_node =
                pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| leaving_nodes.contains(n));
            if phase_of(pod) == "Running"
                && !terminating(pod)
                && (on_leaving_node || pod_condition(pod, "DisruptionTarget"))
                && !released.contains(&pod.name_any())
            {
                self.plan.drain_workers.push(pod.name_any());
            }
        }
        // Released workers: their pods go once they ended (exit 0, or anything else: the
        // master no longer needs them, so nothing counts as a failure) and are not replaced.
        // One still running is draining and exits by itself.
        let mut leaving = 0;
        for pod in pods.iter().copied().filter(|p| is_worker(p) && released.contains(&p.name_any())) {
            leaving += 1;
            if finished_pod(pod) {
                self.delete(pod);
            }
        }
        // Wanted pods neither ended nor terminating: what an elastic master has without the
        // ones that ended.
        let running = wanted
            .iter()
            .filter_map(|&i| self.find(&desired::worker_name(self.job, i)))
            .filter(|p| !finished_pod(p) && !terminating(p))
            .count();
        let mut workers: Vec<Option<Pod>> = std::mem::take(&mut self.children.workers).into_iter().map(Some).collect();
        for &index in &wanted {
            let name = desired::worker_name(self.job, index);
            let Some(pod) = self.find(&name).cloned() else {
                self.plan.pods.extend(workers.get_mut(index as usize).and_then(Option::take));
                continue;
            };
            let without_failing = phase_of(&pod) == "Succeeded" || (phase_of(&pod) == "Failed" && disrupted(&pod));
            if is_elastic && without_failing && !terminating(&pod) {
                match elastic::ended(progress, running) {
                    elastic::Ended::Surplus => {
                        // The master has every worker it wants: this one is not replaced.
                        let e = self.plan.status.elastic.get_or_insert_default();
                        e.released.push(name.clone());
                        released.push(name.clone());
                        scale_in.released.push(name);
                        leaving += 1;
                        self.delete(&pod);
                        continue;
                    }
                    elastic::Ended::Wait => {
                        self.requeue_within(Duration::from_secs(2));
                        continue;
                    }
                    elastic::Ended::Replace => {}
                }
            }
            match phase_of(&pod) {
                _ if terminating(&pod) => {}
                "Succeeded" => self.delete(&pod), // drained: replaced, not a failure
                "Failed" if disrupted(&pod) => {
                    self.event(false, reason::NODE_TERMINATING, format!("worker {name} preempted; replacing it"));
                    self.delete(&pod);
                }
                "Failed" => {
                    let message = pod_message(&pod);
                    if let Some((left, when)) = self.wait_for(&pod, recent) {
                        let note = format!("failed ({message}); replaced {when}");
                        self.blocked.push((reason::BACKOFF, format!("{name}: {note}")));
                        self.requeue_within(left);
                        continue;
                    }
                    failed += 1;
                    recent += 1;
                    let note = format!(
                        "worker {name} failed: {message}; failure {recent} of workerFailureLimit {limit} since \
                         training last advanced ({failed} in all)"
                    );
                    last_failure = Some(note.clone());
                    self.event(true, reason::WORKER_FAILED, note);
                    if recent > limit {
                        let status = WorkerStatus { failed, recent_failures: recent, last_failure, ..before };
                        self.plan.status.workers = Some(status);
                        let why = format!(
                            "{recent} worker failures without training advancing (workerFailureLimit {limit}); \
                             last: {name}: {message}"
                        );
                        self.finish(false, reason::WORKER_FAILURE_LIMIT_EXCEEDED, why);
                        return;
                    }
                    self.delete(&pod);
                }
                _ => {
                    alive += 1;
                    if phase_of(&pod) == "Running" {
                        ready += i32::from(pod_condition(&pod, "Ready"));
                    } else if let Some((why, message)) = blocked_reason(&pod) {
                        self.blocked.push((why, format!("{name}: {message}")));
                    }
                }
            }
        }
        // Beyond the wanted pods (`kubectl scale` lowered the count): deleted now. Released
        // ones were handled above.
        let mut extra = leaving;
        for pod in pods.iter().copied().filter(|p| is_worker(p) && !released.contains(&p.name_any())) {
            let index: Option<i32> = pod.labels().get(LABEL_INDEX).and_then(|i| i.parse().ok());
            let name_matches = index.is_some_and(|i| desired::worker_name(self.job, i) == pod.name_any());
            if !name_matches || index.is_none_or(|i| !wanted.contains(&i)) {
                extra += 1;
                self.delete(pod);
            }
        }
        // An elastic job runs towards what its master wants, within the pods it may run.
        let count = i32::try_from(wanted.len()).unwrap_or(i32::MAX);
        let master_wants = self.plan.status.elastic.as_ref().and_then(|e| e.desired).filter(|_| is_elastic);
        let desired = master_wants.map_or(count, |d| d.min(count));
        // The master's count, but never more than there are worker pods to be ready.
        let ready = progress.map_or(ready, |p| p.workers_active.min(alive));
        self.scaling(desired, ready, extra, &scale_in);
        let draining = progress.map_or(0, |p| p.workers_draining).max(self.plan.drain_workers.len() as i32);
        self.draining(draining);
        self.plan.status.workers = Some(WorkerStatus {
            desired,
            ready,
            draining,
            failed,
            recent_failures: recent,
            last_failure,
            selector: Some(desired::selector(self.job, Some(Role::Worker))),
        });
        if let Some(p) = progress {
            self.plan.status.progress = Some(Progress {
                epoch: p.epoch,
                iteration: p.iteration,
                objective: p.objective,
                duality_gap: p.duality_gap,
                examples_per_second: Some(p.examples_per_second),
            });
        }
    }

    /// `Draining` is True exactly when `workers.draining` is above 0.
    pub(super) fn draining(&mut self, draining: i32) {
        if !self.plan.drain_workers.is_empty() {
            let names = self.plan.drain_workers.join(", ");
            if self.set(condition_type::DRAINING, true, reason::NODE_TERMINATING, format!("draining {names}")) {
                self.event(false, reason::NODE_TERMINATING, format!("node going away; draining {names}"));
            }
        } else if draining > 0 {
            self.set(condition_type::DRAINING, true, reason::WORKERS_DRAINING, format!("{draining} workers draining"));
        } else if self.plan.status.condition(condition_type::DRAINING).is_some() {
            self.set(condition_type::DRAINING, false, reason::STABLE, "no worker is draining");
        }
    }

    /// `Scaling` follows a change of the worker count: True from the change until `desired`
    /// workers are ready and the extra (or released) ones are gone. A change by the master's
    /// elastic policy is `ElasticScaleIn`, with one event per decision of the master not
    /// reported before (its reason and the pods it released); one by `kubectl scale tj` (or
    /// an edit of `spec.workers.replicas`) is `ReplicasChanged`. A replaced worker is not
    /// scaling: the count did not change.
    pub(super) fn scaling(&mut self, desired: i32, ready: i32, extra: usize, scale_in: &elastic::Merged) {
        let before = self.plan.status.workers.as_ref().map(|w| w.desired);
        if scale_in.changed() && (!scale_in.released.is_empty() || before.is_some_and(|b| b > desired)) {
            let elastic = self.plan.status.elastic.as_ref();
            let why = elastic.and_then(|e| e.last_decision()).map(|d| d.reason.clone());
            let released = elastic.map(|e| e.released.join(", ")).unwrap_or_default();
            let why = why.unwrap_or_else(|| format!("the master wants {desired} workers"));
            let message = format!("{why}; released: {released}");
            self.set(condition_type::SCALING, true, reason::ELASTIC_SCALE_IN, message);
            return;
        }
        match before {
            Some(before) if before != desired && !scale_in.changed() => {
                let note = format!("scaling from {before} to {desired} workers");
                self.set(condition_type::SCALING, true, reason::REPLICAS_CHANGED, note.clone());
                self.event(false, reason::REPLICAS_CHANGED, note);
            }
            _ if self.plan.status.is_condition_true(condition_type::SCALING) && ready == desired && extra == 0 => {
                let elastic = self.plan.status.condition(condition_type::SCALING).map(|c| c.reason.as_str())
                    == Some(reason::ELASTIC_SCALE_IN);
                let after = if elastic { " after an elastic scale-in" } else { "" };
                self.set(condition_type::SCALING, false, reason::STABLE, format!("{desired} workers ready{after}"));
                self.event(false, reason::STABLE, format!("scaled to {desired} workers{after}"));
            }
            _ => {}
        }
    }
}
