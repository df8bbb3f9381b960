//! Speculative execution in the scheduler (the policy is runtime::speculation): stragglers
//! are found and stalled, copies of their items started and settled, and a phase every
//! worker left has forfeited starts over.

use super::*;

impl Scheduler {
    /// The result of `counted` is in: every other copy of its task in its phase is dropped
    /// and will be checked against `print`, and copies that came back early are checked now.
    pub(super) fn settle_copies(&mut self, counted: &Running, print: u64) -> Result<(), String> {
        for (&id, other) in self.running.iter_mut() {
            if other.phase == counted.phase && other.task == counted.task {
                other.state = match other.state {
                    Run::Live => Run::Dropped { compare: true, expect: Some(print) },
                    Run::Dropped { compare, .. } => Run::Dropped { compare, expect: Some(print) },
                };
                self.wanted.remove(&id);
            }
        }
        let early = match self.phase.as_mut().filter(|p| p.description.id == counted.phase) {
            Some(phase) => phase.early.remove(&counted.task).unwrap_or_default(),
            None => Vec::new(),
        };
        match early.iter().any(|&e| e != print) {
            true => {
                Err(format!("phase {}: a speculative copy's result differs from the one that counted", counted.phase))
            }
            false => Ok(()),
        }
    }

    /// Looks for stragglers now (the hub calls it every [`speculation::TICK`]): workers
    /// whose items run past their phase's limit are stalled, and idle workers start copies.
    pub fn tick(&mut self) -> Outbox {
        let now = (self.clock)();
        let mut stalled = Vec::new();
        if let Some(phase) = &self.phase {
            let units = self.speculation.limit(&phase.took[0], self.units);
            // A range item is judged at twice its aggregator's patience: a holder that does
            // not send its partial is reported by the aggregator first, and the aggregator
            // is not taken for the straggler.
            let ranges = self.range_limit().map(|l| l * 2);
            for (&id, r) in &self.running {
                let limit = match r.task {
                    Task::Unit(_) => units,
                    Task::Range(_) => ranges,
                    Task::Node(_) => None,
                };
                let late = limit.is_some_and(|l| now.saturating_sub(r.sent) > l);
                if late
                    && r.state == Run::Live
                    && r.phase == phase.description.id
                    && !self.workers.get(&r.worker).is_some_and(|w| w.stalled)
                {
                    stalled.push((r.worker, id, now.saturating_sub(r.sent), limit.unwrap_or_default()));
                }
            }
        }
        for (worker, item, ran, limit) in stalled {
            if self.workers.get(&worker).is_some_and(|w| !w.stalled) {
                let why = format!("item {item} has run {ran:.1?}, past its phase's limit of {limit:.1?}");
                self.stall(worker, &why);
            }
        }
        let mut outbox = self.finish_if_done();
        outbox.extend(self.release_drained());
        outbox.extend(self.assign());
        outbox
    }

    /// `worker` is stalled: nothing more goes to it, and nothing is fetched from it, until
    /// it answers. Its units go to whoever runs them next (rebuilt from the master's base);
    /// its items of the phase are raced or given up (see the module's header).
    pub(super) fn stall(&mut self, worker: WorkerKey, why: &str) {
        // Someone must be left to do the work: the last worker that may take part in the
        // phase is waited for, however slow (else a forfeited phase could never finish).
        let forfeited = |k: &WorkerKey| self.phase.as_ref().is_some_and(|p| p.forfeited.contains(k));
        let others = self.workers.iter().any(|(k, w)| *k != worker && !w.stalled && !w.draining && !forfeited(k));
        if !others {
            return;
        }
        let Some(slot) = self.workers.get_mut(&worker) else { return };
        slot.stalled = true;
        self.counters.stalls += 1;
        tracing::info!(worker = %slot.id, "straggler: {why}; its work is started elsewhere (speculative execution)");
        self.disown(worker);
        let Some(phase) = &mut self.phase else { return };
        let id = phase.description.id;
        let mine: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| r.worker == worker && r.phase == id && r.state == Run::Live)
            .map(|(&i, _)| i)
            .collect();
        match phase.collect {
            Collect::Nothing | Collect::Sums(_) => {
                // Raced: each gets a copy on an idle worker; the first result counts.
                for item in mine {
                    if self.running.get(&item).is_some_and(|r| !r.copied && matches!(r.task, Task::Unit(_))) {
                        self.wanted.insert(item);
                    }
                }
            }
            Collect::Aggregated(_) | Collect::Tree(_) => {
                phase.forfeited.insert(worker);
                let mut tasks = Vec::new();
                for item in mine {
                    let r = self.running.get_mut(&item).expect("listed above");
                    if let Task::Unit(_) | Task::Range(_) = r.task {
                        r.state = Run::Dropped { compare: true, expect: None };
                        tasks.push(r.task);
                    }
                }
                for task in tasks {
                    self.requeue(task);
                }
                self.forget_partials(worker);
            }
        }
    }

    /// Every worker left has forfeited the current phase (the others were lost since): the
    /// phase starts over under a new id, so that every worker's partial sums of it start
    /// empty and nobody is excluded. Items of the old id are dropped; unit state is safe,
    /// since items name the version they start from.
    pub(super) fn renew_if_forfeited_by_all(&mut self) {
        let Some(phase) = &mut self.phase else { return };
        let active: Vec<WorkerKey> = self.workers.iter().filter(|(_, w)| !w.draining).map(|(&k, _)| k).collect();
        if phase.forfeited.is_empty() || active.is_empty() || !active.iter().all(|k| phase.forfeited.contains(k)) {
            return;
        }
        let old = phase.description.id;
        phase.description.id = self.next_phase;
        self.next_phase += 1;
        tracing::info!(old, new = phase.description.id, "every worker left forfeited the phase: it starts over");
        phase.forfeited.clear();
        phase.computed.clear();
        phase.early.clear();
        phase.took = [Vec::new(), Vec::new()];
        phase.aggregating = false;
        phase.pending_ranges.clear();
        phase.ranges.clear();
        phase.pending.clear();
        for unit in 0..self.units {
            phase.pending.entry(self.owner[unit]).or_default().insert(unit as u32);
        }
        phase.payloads = vec![Vec::new(); self.units];
        for r in self.running.values_mut().filter(|r| r.phase == old) {
            r.state = Run::Dropped { compare: false, expect: None };
        }
        self.wanted.clear();
        self.restart_tree();
    }

    /// The partial sums `worker` holds of the current phase cannot be used (it is lost or
    /// forfeited the phase): their units are computed again, and an aggregation or a tree
    /// under way starts over once they are.
    pub(super) fn forget_partials(&mut self, worker: WorkerKey) {
        let Some(phase) = &mut self.phase else { return };
        if !matches!(phase.collect, Collect::Aggregated(_) | Collect::Tree(_)) {
            return;
        }
        let lost: Vec<u32> = phase.computed.iter().filter(|&(_, &w)| w == worker).map(|(&s, _)| s).collect();
        if lost.is_empty() {
            return;
        }
        for unit in &lost {
            phase.computed.remove(unit);
            phase.pending.entry(None).or_default().insert(*unit);
            self.owner[*unit as usize] = None;
        }
        // Ranges already summed may include the lost partials: start aggregation over.
        // Range items under way are dropped: their sums are over the old holders.
        phase.aggregating = false;
        phase.pending_ranges.clear();
        phase.ranges.clear();
        for r in self.running.values_mut() {
            if matches!(r.task, Task::Range(_)) && r.state == Run::Live {
                r.state = Run::Dropped { compare: false, expect: None };
            }
        }
        let member = self.tree.as_ref().is_some_and(|t| t.members().contains(&worker));
        if member && phase.tree_started {
            self.restart_tree();
        }
    }

    /// Starts a copy of each item that waits for one on the idlest worker with an idle
    /// thread, if there is one; the copy rebuilds the unit from the master's base.
    pub(super) fn start_copies(&mut self, assignments: &mut BTreeMap<WorkerKey, proto::Assignment>) {
        for item in self.wanted.clone() {
            let Some(original) = self.running.get(&item).filter(|r| r.state == Run::Live && !r.copied) else {
                self.wanted.remove(&item);
                continue;
            };
            let (task, from) = (original.task, original.worker);
            let idle = self
                .workers
                .iter()
                .filter(|&(&k, w)| k != from && self.may_take(k, w.threads))
                .min_by_key(|&(&k, w)| (w.running, k))
                .map(|(&k, _)| k);
            let Some(to) = idle else { continue };
            self.wanted.remove(&item);
            if let Some(original) = self.running.get_mut(&item) {
                original.copied = true;
            }
            self.counters.copies += 1;
            let copy = self.send(assignments, to, task, None, true);
            let (from, to) = (self.worker_id(from).unwrap_or_default(), self.worker_id(to).unwrap_or_default());
            tracing::info!(item, copy, %from, %to, "speculative copy started");
        }
    }
}
