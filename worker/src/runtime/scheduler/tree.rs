//! The allreduce stage of a phase in the scheduler: the tree is (re)built over the live
//! workers, its items sent, and the total checked against every worker's digest.

use super::*;

impl Scheduler {
    /// The tree allreduce of the current phase failed somewhere: its items are forgotten
    /// (their late results are unknown ids) and the reduce starts again, from the partial
    /// sums the workers still hold, on a rebuilt tree, once every unit is computed.
    pub(super) fn restart_tree(&mut self) {
        let Some(phase) = &mut self.phase else { return };
        if !phase.tree_started {
            return;
        }
        phase.tree_started = false;
        phase.tree_done.clear();
        phase.tree_total = None;
        phase.tree_restarts += 1;
        self.counters.tree_restarts += 1;
        let nodes: Vec<u64> =
            self.running.iter().filter(|(_, r)| matches!(r.task, Task::Node(_))).map(|(&i, _)| i).collect();
        for item in nodes {
            if let Some(r) = self.running.remove(&item)
                && let Some(w) = self.workers.get_mut(&r.worker)
            {
                w.running -= 1;
            }
        }
    }

    /// The generation of the current allreduce tree; 0 before the first.
    pub fn tree_generation(&self) -> u64 {
        self.tree.as_ref().map_or(0, |t| t.generation)
    }

    /// The generation of the current allreduce tree (0: none yet) and `worker`'s parent in
    /// it: `Some(None)` for the root, `None` if it is not in the tree.
    pub fn tree_place(&self, worker: WorkerKey) -> (u64, Option<Option<WorkerKey>>) {
        match &self.tree {
            None => (0, None),
            Some(tree) => {
                let member = tree.members().contains(&worker);
                (tree.generation, member.then(|| tree.parent(&worker).copied()))
            }
        }
    }

    /// Sends every worker its tree item: a binary tree over all workers (the one of the
    /// last reduce if the workers are the same and this is the phase's first attempt).
    pub(super) fn start_tree(&mut self) -> Outbox {
        let Some(phase) = &mut self.phase else { return Outbox::new() };
        // Every worker but those that stalled or forfeited the phase (they hold none of its
        // partials, and the tree would wait for them).
        let members: Vec<WorkerKey> = self
            .workers
            .iter()
            .filter(|&(k, w)| phase.computed.values().any(|h| h == k) || !(w.stalled || phase.forfeited.contains(k)))
            .map(|(&k, _)| k)
            .collect();
        if members.is_empty() {
            return Outbox::new();
        }
        let reuse = phase.tree_restarts == 0 && self.tree.as_ref().is_some_and(|t| t.spans(&members));
        if !reuse {
            let generation = self.tree.as_ref().map_or(0, |t| t.generation) + 1;
            let why = match &self.tree {
                None => "first allreduce",
                Some(_) if phase.tree_restarts > 0 => "reduce restarted after a loss or an abort",
                Some(_) => "the workers changed",
            };
            let tree = Tree::new(generation, members);
            let root = self.workers.get(tree.root().expect("not empty")).map_or("?", |w| w.id.as_str());
            tracing::info!(
                generation,
                workers = tree.len(),
                depth = tree.depth(),
                root,
                "allreduce tree rebuilt ({why})"
            );
            self.tree = Some(tree);
            self.counters.trees_built += 1;
        }
        phase.tree_started = true;
        let tree = self.tree.as_ref().expect("set above");
        let address = |k: &WorkerKey| self.workers.get(k).map(|w| w.address.clone()).unwrap_or_default();
        let items: Vec<(WorkerKey, proto::TreeItem)> = tree
            .members()
            .iter()
            .map(|&key| {
                let units = phase.computed.iter().filter(|&(_, &h)| h == key).map(|(&u, _)| u).collect();
                let item = proto::TreeItem {
                    generation: tree.generation,
                    parent: tree.parent(&key).map(address).unwrap_or_default(),
                    children: tree.children(&key).into_iter().map(address).collect(),
                    units,
                    chunk: CHUNK_LEN as u32,
                };
                (key, item)
            })
            .collect();
        let mut outbox = Outbox::new();
        for (key, item) in items {
            let id = self.next_item;
            self.next_item += 1;
            let slot = self.workers.get_mut(&key).expect("a member is a worker");
            let mut assignment = proto::Assignment::default();
            if slot.phase_sent != phase.description.id {
                slot.phase_sent = phase.description.id;
                assignment.phases.push(phase.description.clone());
            }
            slot.running += 1;
            assignment.items.push(proto::WorkItem {
                id,
                phase: phase.description.id,
                kind: Some(work_item::Kind::Tree(item)),
            });
            let sent = (self.clock)();
            let running = Running {
                worker: key,
                task: Task::Node(key),
                phase: phase.description.id,
                sent,
                copied: false,
                state: Run::Live,
            };
            self.running.insert(id, running);
            outbox.push((key, message(master_message::Body::Assignment(assignment))));
        }
        outbox
    }
}

/// A finished tree stage is right: the root's total covers every unit, and every worker
/// received that total bit for bit (its digest).
pub(super) fn check_tree(phase: &Phase) -> Result<(), String> {
    let Some(total) = &phase.tree_total else { return Err("allreduce: the root sent no total".into()) };
    let (digest, units) = (chunks::digest(total), phase.computed.len() as u32);
    match phase.tree_done.values().find(|&&d| d != (digest, units)) {
        Some(&(d, u)) => Err(format!(
            "allreduce: a worker received a total of digest {d:016x} over {u} units; the root's is {digest:016x} over {units}"
        )),
        None => Ok(()),
    }
}
