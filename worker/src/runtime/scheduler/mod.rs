//! The master's bookkeeping, with no I/O: which worker owns which row unit, which items of
//! the current phase are pending, running or done, and what to send to whom next.
//!
//! The network layer feeds it events (a worker joined, completed items, left, vanished)
//! and sends the messages it returns. Keeping it pure lets its tests (tests.rs) drive every
//! failure interleaving without sockets.
//!
//! A phase is one data-parallel step of the algorithm (SCD: statistics of a block, line-
//! search sums, a prediction update, ...). It has one item per row unit. A unit's
//! predictions live on the worker that owns it, so its items go to that worker; an idle
//! worker adopts units nobody owns and steals pending ones from backlogged owners, and
//! then fetches the unit's state from the previous owner (or recomputes it). Statistics
//! stay on the workers that computed them until aggregator items sum them range by range,
//! so the master receives each sum once instead of once per worker — or, for an
//! allreduce phase, until every worker's tree item has summed them up a binary tree of the
//! workers and broadcast the total back down (runtime::allreduce); the root sends the
//! total, every worker a digest of what it received.
//!
//! Speculative execution ([`super::speculation`]): an item that runs much longer than the
//! others of its phase marks its worker as stalled. A stalled worker gets no new items
//! until it answers again, and the units it owns go to others, who rebuild them from the
//! master's base instead of fetching them from it. Its items of the phase are then
//! - raced, where a result comes back whole (phases with no sums, or with sums returned
//!   per item): a copy starts on an idle worker, the first result counts and the other is
//!   dropped when it arrives, after a check that both are the same bits;
//! - given up, where sums stay on the workers (aggregated and tree phases): a copy there
//!   would add the unit into two workers' partials, and the straggler may hold partials of
//!   the phase that no aggregator could fetch. So the straggler forfeits its part of the
//!   phase: its running items are dropped (checked against their replacements when both
//!   arrive), the units it computed are computed again elsewhere, and it takes no further
//!   part in the phase. An aggregator that cannot fetch a partial from a holder within the
//!   phase's limit reports it slow, and the holder forfeits the same way.
//!
//! Tree items are never copied: a tree needs every member, and a member that stops is
//! found by its peers (the loss path: its connection times out, the tree is rebuilt).

use super::allreduce::chunks::{self, CHUNK_LEN};
use super::allreduce::tree::Tree;
use super::proto::{self, master_message, work_item};
use super::speculation::{self, Speculation};
use linea_engine::algorithm::{PhaseOutput, Reduction};
use linea_engine::fixed::ExactSums;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

mod stragglers;
mod tree;
use tree::check_tree;

/// Sums per aggregation range: 8192 i128 sums are 128 KiB.
pub const RANGE_LEN: usize = 8192;

/// A connected worker, numbered by the master for this session.
pub type WorkerKey = u64;

/// How a phase's results come back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Collect {
    Nothing,
    /// Every unit item returns a vector of this length.
    Sums(usize),
    /// Unit items leave partial sums of this length on their workers, summed range by range.
    Aggregated(usize),
    /// Unit items leave partial sums of this length on their workers, summed up a tree.
    Tree(usize),
}

impl From<Reduction> for Collect {
    fn from(reduction: Reduction) -> Collect {
        match reduction {
            Reduction::None => Collect::Nothing,
            Reduction::Sum { len } => Collect::Sums(len),
            Reduction::RangeSum { len } | Reduction::SparseSum { len } => Collect::Aggregated(len),
            Reduction::AllReduce { len } => Collect::Tree(len),
        }
    }
}

pub type PhaseResult = Result<PhaseOutput, String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Task {
    Unit(u32),
    Range(usize),
    /// A worker's part in the phase's tree allreduce.
    Node(WorkerKey),
}

struct Running {
    worker: WorkerKey,
    task: Task,
    /// The phase it belongs to: a dropped item may outlive its phase.
    phase: u64,
    /// When it was sent, on the scheduler's clock.
    sent: Duration,
    /// Whether it has a copy (or is one): an item is copied once.
    copied: bool,
    state: Run,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Run {
    /// Its result counts (the first of its copies to come back).
    Live,
    /// Given up, or lost a race: its worker still runs it and holds a thread for it, and its
    /// result is dropped when it arrives. `compare`: it computes the same bits as the copy
    /// that counts (`expect`, once that one is in), and a difference fails the run.
    Dropped { compare: bool, expect: Option<u64> },
}

struct Phase {
    description: proto::Phase,
    collect: Collect,
    /// Pending unit items, by owner (`None`: nobody holds the unit's state).
    pending: BTreeMap<Option<WorkerKey>, BTreeSet<u32>>,
    /// Shard items done; for aggregated phases, the worker holding each unit's partial.
    computed: BTreeMap<u32, WorkerKey>,
    sums: ExactSums,
    /// Each unit's payload for the algorithm.
    payloads: Vec<Vec<u8>>,
    /// Aggregation stage: pending ranges and the sums of finished ones.
    pending_ranges: BTreeSet<usize>,
    ranges: BTreeMap<usize, Vec<i128>>,
    aggregating: bool,
    /// Tree stage: whether the tree items are out, what each worker reported (digest,
    /// units), the root's total, and how often the reduce was started again.
    tree_started: bool,
    tree_done: BTreeMap<WorkerKey, (u64, u32)>,
    tree_total: Option<Vec<i128>>,
    tree_restarts: u32,
    /// How long the items that counted took, unit items and ranges apart.
    took: [Vec<Duration>; 2],
    /// Workers that forfeited their part of this phase (speculation): they take no more of it.
    forfeited: BTreeSet<WorkerKey>,
    /// Fingerprints of dropped items that came back before the copy that counts.
    early: HashMap<Task, Vec<u64>>,
    reply: Sender<PhaseResult>,
}

pub struct WorkerSlot {
    pub id: String,
    pub address: String,
    pub threads: usize,
    pub running: usize,
    pub draining: bool,
    /// An item of it ran far longer than its phase's others (speculation): it gets no new
    /// items, and nothing is fetched from it, until it answers again.
    pub stalled: bool,
    /// The last phase whose description this worker received.
    phase_sent: u64,
}

impl WorkerSlot {
    /// Items it may have in flight: one running and one queued per thread, so a thread
    /// never waits for the master between items.
    pub fn capacity(&self) -> usize {
        2 * self.threads
    }
}

/// Counters for status and benchmarks.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    pub items_completed: u64,
    pub workers_lost: u32,
    pub steals: u64,
    pub handovers: u64,
    /// Allreduce trees built (the first and every rebuild).
    pub trees_built: u64,
    /// Tree allreduces started again after a loss or an abort.
    pub tree_restarts: u64,
    /// Workers found stalled (an item far slower than its phase's median, or a partial an
    /// aggregator waited too long for).
    pub stalls: u64,
    /// Speculative copies started of a stalled worker's items.
    pub copies: u64,
    /// Results dropped because another copy counted (or the worker had forfeited them).
    pub dropped: u64,
}

pub struct Scheduler {
    units: usize,
    workers: BTreeMap<WorkerKey, WorkerSlot>,
    owner: Vec<Option<WorkerKey>>,
    /// The worker a unit's state can be fetched from, until its new owner has it.
    prior: Vec<Option<WorkerKey>>,
    /// After a reconfiguration that merges units (elastic CoCoA's scale-in): per new unit,
    /// the old units it merges and the workers that held them, until the unit has run once.
    /// Those workers hand their parts over rather than the merging worker reading storage,
    /// and are not released (a scale-in's surplus) while a part of theirs is still wanted.
    handover: Vec<Vec<(u32, WorkerKey)>>,
    /// The master session the old units were held in (the holders keep them under it).
    handover_session: String,
    phase: Option<Phase>,
    running: HashMap<u64, Running>,
    next_item: u64,
    next_phase: u64,
    next_worker: WorkerKey,
    /// Why the run was stopped from outside; every phase fails with it.
    aborted: Option<String>,
    /// The most workers the algorithm wants (elastic CoCoA: one per slot); `None`: any.
    desired: Option<usize>,
    /// The number of the algorithm's scale-in decision `desired` follows (0: none yet).
    decision: u32,
    /// Workers released because the algorithm wanted fewer, oldest release first, each
    /// with the decision it was released under: decided here, under the lock every join
    /// and every `set_desired` takes, so a worker that joins after a decision and is surplus
    /// is that decision's as much as one drained by it.
    pub released: Vec<Released>,
    /// No item is sent before the gate's workers are active, or its patience ran out with
    /// at least one (then at the deadline, on the scheduler's clock). Opens once.
    start_with: Option<(StartGate, Duration)>,
    /// The allreduce tree of the last tree stage; rebuilt when the workers change or a
    /// reduce is started again.
    tree: Option<Tree<WorkerKey>>,
    speculation: Speculation,
    /// The scheduler's clock: the time since it started (tests drive their own).
    clock: Box<dyn Fn() -> Duration + Send>,
    /// Items of a stalled worker that wait for an idle worker to run a copy.
    wanted: BTreeSet<u64>,
    /// Workers lost whose sessions may still be open (a peer reported one unreachable):
    /// the hub ends them ([`Scheduler::take_lost_sessions`]). A session left open would get
    /// neither work nor, at the end, a release; its worker would wait on it until the master
    /// was gone and then retry for its --reconnect-for and fail.
    lost_sessions: Vec<WorkerKey>,
    pub counters: Counters,
}

/// A worker the scheduler released as surplus, and the number of the scale-in decision in
/// force when it did (0: before any). The master checkpoints these, so a restarted master
/// lists each decision with the workers it released.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Released {
    pub decision: u32,
    pub id: String,
}

/// The workers a fresh run waits for before its first item, and for how long at most: a
/// worker that never comes (no node for its pod, a quota) delays the run by `patience`, after
/// which it starts with the workers it has (an elastic run's slots are logical, so any
/// number of workers computes the same model).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StartGate {
    pub workers: usize,
    pub patience: Duration,
}

/// Messages to send: (worker, message).
pub type Outbox = Vec<(WorkerKey, proto::MasterMessage)>;

impl Scheduler {
    pub fn new(units: usize) -> Self {
        Self {
            units,
            workers: BTreeMap::new(),
            owner: vec![None; units],
            prior: vec![None; units],
            handover: vec![Vec::new(); units],
            handover_session: String::new(),
            phase: None,
            running: HashMap::new(),
            next_item: 1,
            next_phase: 1,
            next_worker: 1,
            aborted: None,
            desired: None,
            decision: 0,
            released: Vec::new(),
            start_with: None,
            tree: None,
            speculation: Speculation::OFF,
            clock: {
                let started = Instant::now();
                Box::new(move || started.elapsed())
            },
            wanted: BTreeSet::new(),
            lost_sessions: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// Copies the items that run far longer than their phase's others; off by default.
    pub fn with_speculation(mut self, speculation: Speculation) -> Self {
        self.speculation = speculation;
        self
    }

    #[cfg(test)]
    fn with_clock(mut self, clock: impl Fn() -> Duration + Send + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    pub fn workers(&self) -> impl Iterator<Item = (WorkerKey, &WorkerSlot, usize)> {
        self.workers.iter().map(|(&k, w)| (k, w, self.owner.iter().filter(|&&o| o == Some(k)).count()))
    }

    pub fn worker_id(&self, key: WorkerKey) -> Option<String> {
        self.workers.get(&key).map(|w| w.id.clone())
    }

    pub fn find_worker(&self, name: &str) -> Option<WorkerKey> {
        self.workers.iter().find(|(_, w)| w.id == name || w.address == name).map(|(&k, _)| k)
    }

    /// A worker joined; it runs `threads` items at once.
    pub fn join(&mut self, id: String, address: String, threads: usize) -> (WorkerKey, Outbox) {
        let key = self.next_worker;
        self.next_worker += 1;
        let threads = threads.max(1);
        let slot = WorkerSlot { id, address, threads, running: 0, draining: false, stalled: false, phase_sent: 0 };
        self.workers.insert(key, slot);
        let mut outbox = self.release_surplus();
        outbox.extend(self.assign());
        (key, outbox)
    }

    /// The units changed (the algorithm reconfigured its kernel between phases): nobody
    /// owns a unit now, so whoever runs one next rebuilds it from the master's base; every
    /// worker is sent `job`, the new description. `merges` names, per new unit, the old
    /// units it merges (`None`: none): when every one of them has an owner, the unit's
    /// first item tells where they are, so the merging worker fetches them from their
    /// holders (who keep them under `old_session`) instead of reading storage.
    pub fn reconfigure(
        &mut self,
        units: usize,
        job: proto::MasterMessage,
        merges: Vec<Option<std::ops::Range<usize>>>,
        old_session: String,
    ) -> Outbox {
        debug_assert!(self.phase.is_none(), "reconfigured during a phase");
        let old_owner = std::mem::replace(&mut self.owner, vec![None; units]);
        self.handover = (0..units)
            .map(|unit| {
                let range = merges.get(unit).cloned().flatten().unwrap_or_default();
                let held: Option<Vec<(u32, WorkerKey)>> =
                    range.clone().map(|old| Some((old as u32, old_owner.get(old).copied().flatten()?))).collect();
                held.filter(|h| !h.is_empty()).unwrap_or_default()
            })
            .collect();
        self.handover_session = old_session;
        self.units = units;
        self.prior = vec![None; units];
        self.workers.keys().map(|&k| (k, job.clone())).collect()
    }

    /// Whether a unit still wants a part `worker` holds.
    fn holds_wanted_part(&self, worker: WorkerKey) -> bool {
        self.handover.iter().flatten().any(|&(_, k)| k == worker)
    }

    /// The algorithm wants at most `desired` workers, as its decision number `decision` (0:
    /// none yet) says: the newest beyond that many are drained (they hand over what they
    /// own, as on preemption, and are released once nothing depends on them), and a worker
    /// that joins while there are enough is too; each is recorded under `decision`.
    pub fn set_desired(&mut self, desired: Option<usize>, decision: u32) -> Outbox {
        self.desired = desired;
        self.decision = decision;
        self.release_surplus()
    }

    /// The first item waits until the gate's workers are active, so an elastic run's first
    /// scale-in finds every worker it starts with there (and releases those, not ones yet to
    /// come), or until its patience ran out with at least one.
    pub fn start_with(&mut self, gate: StartGate) {
        let deadline = (self.clock)().saturating_add(gate.patience);
        self.start_with = (gate.workers > 0).then_some((gate, deadline));
    }

    /// Whether items may be sent: the start gate is open, or opens now.
    fn gate_open(&mut self) -> bool {
        let Some((gate, deadline)) = self.start_with else { return true };
        let active = self.workers.values().filter(|w| !w.draining).count();
        let timed_out = active > 0 && (self.clock)() >= deadline;
        if timed_out && active < gate.workers {
            tracing::warn!(
                "starting with {active} of the {} workers waited for: the others did not join within {:?}",
                gate.workers,
                gate.patience
            );
        }
        if active >= gate.workers || timed_out {
            self.start_with = None;
        }
        self.start_with.is_none()
    }

    /// The ids of every worker released as surplus, oldest first.
    pub fn released_ids(&self) -> Vec<String> {
        self.released.iter().map(|r| r.id.clone()).collect()
    }

    /// The ids of the workers released under decision number `decision`, oldest first.
    pub fn released_for(&self, decision: u32) -> Vec<String> {
        self.released.iter().filter(|r| r.decision == decision).map(|r| r.id.clone()).collect()
    }

    fn release_surplus(&mut self) -> Outbox {
        let Some(desired) = self.desired else { return Outbox::new() };
        let active: Vec<WorkerKey> = self.workers.iter().filter(|(_, w)| !w.draining).map(|(&k, _)| k).collect();
        let mut outbox = Outbox::new();
        for &key in active.iter().skip(desired.max(1)) {
            if let Some(w) = self.workers.get(&key) {
                self.released.push(Released { decision: self.decision, id: w.id.clone() });
            }
            outbox.extend(self.drain(key));
        }
        outbox
    }

    /// Starts a phase; its result goes to `reply` when every item is done.
    pub fn start_phase(
        &mut self,
        mut description: proto::Phase,
        collect: Collect,
        reply: Sender<PhaseResult>,
    ) -> Outbox {
        if let Some(reason) = &self.aborted {
            let _ = reply.send(Err(reason.clone()));
            return Outbox::new();
        }
        description.id = self.next_phase;
        self.next_phase += 1;
        let mut pending: BTreeMap<Option<WorkerKey>, BTreeSet<u32>> = BTreeMap::new();
        for unit in 0..self.units {
            pending.entry(self.owner[unit]).or_default().insert(unit as u32);
        }
        let sums = ExactSums::zeros(if let Collect::Sums(n) = collect { n } else { 0 });
        self.phase = Some(Phase {
            description,
            collect,
            pending,
            computed: BTreeMap::new(),
            sums,
            payloads: vec![Vec::new(); self.units],
            pending_ranges: BTreeSet::new(),
            ranges: BTreeMap::new(),
            aggregating: false,
            tree_started: false,
            tree_done: BTreeMap::new(),
            tree_total: None,
            tree_restarts: 0,
            took: [Vec::new(), Vec::new()],
            forfeited: BTreeSet::new(),
            early: HashMap::new(),
            reply,
        });
        let mut outbox = self.finish_if_done();
        outbox.extend(self.assign());
        outbox
    }

    /// Results of items. Unknown item ids (from before a loss) are ignored.
    pub fn complete(&mut self, worker: WorkerKey, results: Vec<proto::ItemResult>) -> Outbox {
        let mut outbox = Outbox::new();
        for result in results {
            // An item is the worker's it was sent to: another's id is as unknown as an old one.
            if self.running.get(&result.item).is_none_or(|r| r.worker != worker) {
                continue;
            }
            let Some(running) = self.running.remove(&result.item) else { continue };
            self.wanted.remove(&result.item);
            if let Some(w) = self.workers.get_mut(&running.worker) {
                w.running -= 1;
                // It answers: whatever held it up is over.
                w.stalled = false;
            }
            if let Run::Dropped { compare, expect } = running.state {
                self.counters.dropped += 1;
                let clean = result.error.is_empty()
                    && !result.aborted
                    && result.lost_peer.is_empty()
                    && result.slow_peer.is_empty();
                if compare && clean {
                    let print = speculation::fingerprint(&result.sums, &result.payload);
                    match expect {
                        Some(expected) if expected != print => {
                            // Not a lost race but a broken promise (same inputs, other bits):
                            // nothing this run computes can be trusted.
                            let id = self.worker_id(worker).unwrap_or_default();
                            let why = format!(
                                "worker {id}, item {}: a speculative copy's result differs from the one that counted",
                                result.item
                            );
                            self.abort(why);
                        }
                        Some(_) => {}
                        None => {
                            if let Some(phase) = self.phase.as_mut().filter(|p| p.description.id == running.phase) {
                                phase.early.entry(running.task).or_default().push(print);
                            }
                        }
                    }
                }
                continue;
            }
            if !result.error.is_empty() {
                self.fail(result.error);
                continue;
            }
            if result.aborted {
                self.requeue(running.task);
                outbox.extend(self.finish_if_done());
                continue;
            }
            if !result.lost_peer.is_empty() {
                self.requeue(running.task);
                if let Some(peer) = self.find_address(&result.lost_peer) {
                    outbox.extend(self.lose(peer));
                }
                continue;
            }
            if !result.slow_peer.is_empty() {
                // A holder whose partial did not come within the limit: it forfeits the
                // phase, and the range is summed again from the new holders.
                self.requeue(running.task);
                if let Some(peer) = self.find_address(&result.slow_peer) {
                    self.stall(peer, "an aggregator waited too long for its partial sums");
                }
                outbox.extend(self.finish_if_done());
                continue;
            }
            self.counters.items_completed += 1;
            let item = result.item;
            let print = speculation::fingerprint(&result.sums, &result.payload);
            let now = (self.clock)();
            if let Some(phase) = self.phase.as_mut().filter(|p| p.description.id == running.phase) {
                let kind = usize::from(matches!(running.task, Task::Range(_)));
                phase.took[kind].push(now.saturating_sub(running.sent));
            }
            if let Err(why) = self.record(worker, running.task, result) {
                let id = self.workers.get(&worker).map_or("?", |w| w.id.as_str());
                self.fail(format!("worker {id}, item {item}: {why}"));
                continue;
            }
            if let Err(why) = self.settle_copies(&running, print) {
                self.abort(why);
                continue;
            }
            outbox.extend(self.finish_if_done());
        }
        outbox.extend(self.release_drained());
        outbox.extend(self.assign());
        outbox
    }

    fn find_address(&self, address: &str) -> Option<WorkerKey> {
        self.workers.iter().find(|(_, w)| w.address == address).map(|(&k, _)| k)
    }

    /// The worker asked to leave (SIGTERM) or was told to drain: it gets no more work, its
    /// units go to others, who fetch their state from it; then it is released.
    pub fn drain(&mut self, worker: WorkerKey) -> Outbox {
        let Some(slot) = self.workers.get_mut(&worker) else { return Outbox::new() };
        if slot.draining {
            return Outbox::new();
        }
        slot.draining = true;
        let busy: BTreeSet<u32> = self.running_units(worker);
        for unit in 0..self.units {
            if self.owner[unit] == Some(worker) && !busy.contains(&(unit as u32)) {
                self.hand_over(unit as u32, worker);
            }
        }
        let mut outbox = vec![(worker, message(master_message::Body::Drain(proto::DrainNotice {})))];
        outbox.extend(self.release_drained());
        outbox.extend(self.assign());
        outbox
    }

    /// The worker vanished: its running items and any partial statistics it held are
    /// redone elsewhere; its units' state is rebuilt by their next owners.
    pub fn lose(&mut self, worker: WorkerKey) -> Outbox {
        let Some(slot) = self.workers.remove(&worker) else { return Outbox::new() };
        self.lost_sessions.push(worker);
        if !slot.draining {
            self.counters.workers_lost += 1;
        }
        if let Some(phase) = self.phase.as_ref().filter(|_| !slot.draining) {
            let phase = phase.description.id;
            tracing::info!(worker = %slot.id, phase, "worker lost during a phase: its part is done again elsewhere");
        }
        self.disown(worker);
        let tasks: Vec<Task> = self
            .running
            .iter()
            .filter(|(_, r)| r.worker == worker && r.state == Run::Live)
            .map(|(_, r)| r.task)
            .collect();
        self.running.retain(|_, r| r.worker != worker);
        self.wanted.retain(|id| self.running.contains_key(id));
        for task in tasks {
            // A copy still running elsewhere runs on, and is copied again if its worker is
            // stalled too.
            for (&id, r) in self.running.iter_mut().filter(|(_, r)| r.task == task && r.state == Run::Live) {
                r.copied = false;
                if self.workers.get(&r.worker).is_some_and(|w| w.stalled) {
                    self.wanted.insert(id);
                }
            }
            self.requeue(task);
        }
        self.forget_partials(worker);
        let member = self.tree.as_ref().is_some_and(|t| t.members().contains(&worker));
        if member && self.phase.as_ref().is_some_and(|p| p.tree_started) {
            self.restart_tree();
        }
        self.renew_if_forfeited_by_all();
        let mut outbox = self.release_drained();
        outbox.extend(self.finish_if_done());
        outbox.extend(self.assign());
        outbox
    }

    /// The sessions of workers lost since the last call: the hub ends them, and the
    /// workers (if alive) join again as new ones.
    pub fn take_lost_sessions(&mut self) -> Vec<WorkerKey> {
        std::mem::take(&mut self.lost_sessions)
    }

    /// Training is over: every worker may exit. They leave the scheduler here, so the end
    /// of their sessions counts as no loss (a finished run reports no lost workers it did
    /// not lose). The hub releases every open session ([`crate::runtime::hub::Hub::release_all`]).
    pub fn release_all(&mut self) {
        self.workers.clear();
    }

    /// Stops the run: the current phase and every later one fail with `reason`.
    pub fn abort(&mut self, reason: String) -> Outbox {
        self.aborted = Some(reason.clone());
        self.fail(reason);
        Outbox::new()
    }

    fn fail(&mut self, error: String) {
        if let Some(phase) = self.phase.take() {
            let _ = phase.reply.send(Err(error));
        }
        self.running.clear();
        for w in self.workers.values_mut() {
            w.running = 0;
        }
    }

    fn running_units(&self, worker: WorkerKey) -> BTreeSet<u32> {
        self.running
            .values()
            .filter_map(|r| match r.task {
                Task::Unit(s) if r.worker == worker && r.state == Run::Live => Some(s),
                _ => None,
            })
            .collect()
    }

    /// `worker` owns no unit any more and is no unit's previous owner: its units' pending
    /// items wait for anyone, and their next owners rebuild their state instead of fetching it.
    fn disown(&mut self, worker: WorkerKey) {
        // Its parts are gone with it: the units that wanted one read storage instead.
        for parts in &mut self.handover {
            if parts.iter().any(|&(_, k)| k == worker) {
                parts.clear();
            }
        }
        for unit in 0..self.units {
            if self.owner[unit] == Some(worker) {
                self.move_pending(unit as u32, None);
                self.owner[unit] = None;
            }
            if self.prior[unit] == Some(worker) {
                self.prior[unit] = None;
            }
        }
    }

    /// Gives up `worker`'s ownership of `unit`; the next owner fetches the state from it.
    fn hand_over(&mut self, unit: u32, worker: WorkerKey) {
        self.move_pending(unit, None);
        self.owner[unit as usize] = None;
        self.prior[unit as usize] = Some(worker);
        self.counters.handovers += 1;
    }

    /// Files a pending item of `unit` under its new owner.
    fn move_pending(&mut self, unit: u32, to: Option<WorkerKey>) {
        let from = self.owner[unit as usize];
        if let Some(phase) = &mut self.phase
            && phase.pending.get_mut(&from).is_some_and(|s| s.remove(&unit))
        {
            phase.pending.entry(to).or_default().insert(unit);
        }
    }

    /// Puts a task of the current phase back to be run, unless a copy of it still runs.
    fn requeue(&mut self, task: Task) {
        let Some(phase) = &mut self.phase else { return };
        let id = phase.description.id;
        if self.running.values().any(|r| r.task == task && r.phase == id && r.state == Run::Live) {
            return;
        }
        match task {
            Task::Unit(unit) => {
                phase.pending.entry(self.owner[unit as usize]).or_default().insert(unit);
            }
            Task::Range(range) if phase.aggregating => {
                phase.pending_ranges.insert(range);
            }
            Task::Range(_) => {}
            Task::Node(_) => self.restart_tree(),
        }
    }

    /// Takes an item's result into its phase; a result of the wrong shape (sums that are
    /// not whole i128s, or not as many as the phase or range has) is the run's error, never
    /// a short or long vector for the algorithm to index.
    fn record(&mut self, worker: WorkerKey, task: Task, result: proto::ItemResult) -> Result<(), String> {
        let proto::ItemResult { sums, payload, digest, units, .. } = result;
        let sums = sums.as_slice();
        let Some(phase) = &mut self.phase else { return Ok(()) };
        // Sums are collected from unit items of Sum phases and from range items; any a unit
        // item of another phase sends are not looked at.
        let expected = match (task, phase.collect) {
            (Task::Unit(_), Collect::Sums(n)) => Some(n),
            (Task::Range(range), Collect::Aggregated(len)) => {
                Some(RANGE_LEN.min(len.saturating_sub(range * RANGE_LEN)))
            }
            // The root sends the total; every other worker only its digest.
            (Task::Node(key), Collect::Tree(len)) => {
                Some(if self.tree.as_ref().and_then(Tree::root) == Some(&key) { len } else { 0 })
            }
            _ => None,
        };
        let decoded = match expected {
            None => Vec::new(),
            Some(n) => super::wire::i128s(sums)
                .filter(|s| s.len() == n)
                .map(Iterator::collect)
                .ok_or_else(|| format!("{} bytes of sums where {n} sums were due", sums.len()))?,
        };
        match task {
            Task::Unit(unit) => {
                // The worker whose result counts holds the unit's state now (after a race,
                // the winner).
                self.owner[unit as usize] = Some(worker);
                self.prior[unit as usize] = None;
                // Built (from its parts or from storage): its old units' holders are free.
                if let Some(parts) = self.handover.get_mut(unit as usize) {
                    parts.clear();
                }
                phase.payloads[unit as usize] = payload;
                match phase.collect {
                    Collect::Nothing => {}
                    Collect::Sums(_) => phase.sums.add(&ExactSums { sums: decoded }),
                    Collect::Aggregated(_) | Collect::Tree(_) => {
                        phase.computed.insert(unit, worker);
                    }
                }
                if self.workers.get(&worker).is_some_and(|w| w.draining) {
                    self.hand_over(unit, worker);
                }
            }
            Task::Range(range) => {
                phase.ranges.insert(range, decoded);
            }
            Task::Node(key) => {
                if !decoded.is_empty() || self.tree.as_ref().and_then(Tree::root) == Some(&key) {
                    phase.tree_total = Some(decoded);
                }
                phase.tree_done.insert(key, (digest, units));
            }
        }
        Ok(())
    }

    /// Moves a finished compute stage on to aggregation, or hands a finished phase's
    /// result to the algorithm.
    fn finish_if_done(&mut self) -> Outbox {
        let Some(phase) = &mut self.phase else { return Outbox::new() };
        let live = |r: &&Running| r.state == Run::Live && r.phase == phase.description.id;
        let busy = self.running.values().filter(live).any(|r| matches!(r.task, Task::Unit(_)));
        if busy || phase.pending.values().any(|s| !s.is_empty()) {
            return Outbox::new();
        }
        if let Collect::Aggregated(len) = phase.collect {
            if !phase.aggregating {
                phase.aggregating = true;
                phase.pending_ranges = (0..len.div_ceil(RANGE_LEN).max(1)).collect();
                return Outbox::new();
            }
            if !phase.pending_ranges.is_empty()
                || self.running.values().filter(live).any(|r| matches!(r.task, Task::Range(_)))
            {
                return Outbox::new();
            }
        }
        if let Collect::Tree(_) = phase.collect {
            if !phase.tree_started {
                return self.start_tree();
            }
            if self.running.values().filter(live).any(|r| matches!(r.task, Task::Node(_))) {
                return Outbox::new();
            }
            if let Err(why) = check_tree(phase) {
                self.fail(why);
                return Outbox::new();
            }
        }
        let phase = self.phase.take().expect("checked above");
        let sums = match phase.collect {
            Collect::Aggregated(_) => ExactSums { sums: phase.ranges.into_values().flatten().collect() },
            Collect::Tree(_) => ExactSums { sums: phase.tree_total.unwrap_or_default() },
            _ => phase.sums,
        };
        let output = PhaseOutput { sums, payloads: phase.payloads, pairs: Vec::new() };
        let _ = phase.reply.send(Ok(output));
        Outbox::new()
    }

    /// Releases draining workers nothing depends on any more.
    fn release_drained(&mut self) -> Outbox {
        let releasable: Vec<WorkerKey> = self
            .workers
            .iter()
            .filter(|&(&k, w)| {
                w.draining
                    && w.running == 0
                    && !self.owner.contains(&Some(k))
                    && !self.prior.contains(&Some(k))
                    && !self.holds_wanted_part(k)
                    && !self.phase.as_ref().is_some_and(|p| {
                        matches!(p.collect, Collect::Aggregated(_) | Collect::Tree(_))
                            && (p.computed.values().any(|&h| h == k) || p.tree_started)
                    })
            })
            .map(|(&k, _)| k)
            .collect();
        releasable
            .into_iter()
            .map(|k| {
                self.workers.remove(&k);
                (k, message(master_message::Body::Release(proto::Release {})))
            })
            .collect()
    }

    /// Fills every worker's free capacity with items of its own units; a worker with an
    /// idle thread also adopts a unit nobody owns, and a worker with nothing at all to do
    /// steals a pending unit from the owner with the largest backlog it cannot start yet.
    /// Adopting and stealing one unit at a time spreads units over all workers instead
    /// of filling the first workers' queues, and moves state only when a thread is idle.
    fn assign(&mut self) -> Outbox {
        if !self.gate_open() {
            return Outbox::new();
        }
        let mut assignments: BTreeMap<WorkerKey, proto::Assignment> = BTreeMap::new();
        let keys: Vec<WorkerKey> = self.workers.keys().copied().collect();
        for key in keys {
            while self.may_take(key, self.workers[&key].capacity()) {
                let Some((task, prior)) = self.next_task(key) else { break };
                self.send(&mut assignments, key, task, prior, false);
            }
        }
        self.start_copies(&mut assignments);
        assignments.into_iter().map(|(k, a)| (k, message(master_message::Body::Assignment(a)))).collect()
    }

    /// Whether `worker` may be sent another item of the current phase while it has fewer
    /// than `limit` in flight.
    fn may_take(&self, worker: WorkerKey, limit: usize) -> bool {
        let forfeited = self.phase.as_ref().is_some_and(|p| p.forfeited.contains(&worker));
        self.workers.get(&worker).is_some_and(|w| !w.draining && !w.stalled && !forfeited && w.running < limit)
    }

    /// Sends `task` to `key` as a new item (with the phase's description if the worker has
    /// not had it); returns the item's id.
    fn send(
        &mut self,
        assignments: &mut BTreeMap<WorkerKey, proto::Assignment>,
        key: WorkerKey,
        task: Task,
        prior: Option<WorkerKey>,
        copied: bool,
    ) -> u64 {
        let phase = self.phase.as_ref().expect("items are of a phase");
        let item = self.next_item;
        self.next_item += 1;
        let kind = match task {
            Task::Unit(unit) => {
                // Where the unit's parts are, if every holder is still here.
                let parts: Option<Vec<proto::PartSource>> = self.handover[unit as usize]
                    .iter()
                    .map(|&(old, k)| {
                        let address = self.workers.get(&k)?.address.clone();
                        Some(proto::PartSource { unit: old, address })
                    })
                    .collect();
                let parts = parts.unwrap_or_default();
                work_item::Kind::Unit(proto::UnitItem {
                    unit,
                    prior_owner: prior
                        .and_then(|p| self.workers.get(&p))
                        .map(|w| w.address.clone())
                        .unwrap_or_default(),
                    parts_session: if parts.is_empty() { String::new() } else { self.handover_session.clone() },
                    parts,
                })
            }
            // Tree items are sent by start_tree, never picked here.
            Task::Node(_) => unreachable!("tree items are sent by start_tree"),
            Task::Range(range) => {
                let patience = self.range_limit().map_or(0, |l| l.as_millis().clamp(1, u32::MAX as u128) as u32);
                let len = match phase.collect {
                    Collect::Aggregated(len) => len,
                    _ => 0,
                };
                let mut sources: BTreeMap<WorkerKey, Vec<u32>> = BTreeMap::new();
                for (&unit, &holder) in &phase.computed {
                    sources.entry(holder).or_default().push(unit);
                }
                work_item::Kind::Aggregate(proto::AggregateItem {
                    begin: (range * RANGE_LEN) as u32,
                    end: ((range + 1) * RANGE_LEN).min(len) as u32,
                    sources: sources
                        .into_iter()
                        .map(|(k, units)| proto::Source {
                            address: self.workers.get(&k).map(|w| w.address.clone()).unwrap_or_default(),
                            units,
                        })
                        .collect(),
                    patience_ms: patience,
                })
            }
        };
        let assignment = assignments.entry(key).or_default();
        let slot = self.workers.get_mut(&key).expect("exists");
        if slot.phase_sent != phase.description.id {
            slot.phase_sent = phase.description.id;
            assignment.phases.push(phase.description.clone());
        }
        slot.running += 1;
        let id = phase.description.id;
        assignment.items.push(proto::WorkItem { id: item, phase: id, kind: Some(kind) });
        let sent = (self.clock)();
        self.running.insert(item, Running { worker: key, task, phase: id, sent, copied, state: Run::Live });
        item
    }

    /// How long an aggregator may wait for a holder's partial: the limit of a range item of
    /// the current phase. `None` with speculation off.
    fn range_limit(&self) -> Option<Duration> {
        let phase = self.phase.as_ref()?;
        let ranges = match phase.collect {
            Collect::Aggregated(len) => len.div_ceil(RANGE_LEN).max(1),
            _ => 0,
        };
        self.speculation.limit(&phase.took[1], ranges).or_else(|| self.speculation.limit(&phase.took[0], self.units))
    }

    /// The next task for `worker`, and the worker to fetch the unit's state from.
    fn next_task(&mut self, worker: WorkerKey) -> Option<(Task, Option<WorkerKey>)> {
        let phase = self.phase.as_mut()?;
        let idle = |w: &WorkerSlot| w.threads.saturating_sub(w.running);
        if phase.aggregating {
            // One range per idle thread, so ranges spread over all workers.
            let free = idle(&self.workers[&worker]) > 0;
            return free.then(|| phase.pending_ranges.pop_first()).flatten().map(|r| (Task::Range(r), None));
        }
        if let Some(own) = phase.pending.get_mut(&Some(worker)) {
            let unit = own.pop_first();
            if own.is_empty() {
                // Empty sets are dropped, so a steal looks only at owners with work left.
                phase.pending.remove(&Some(worker));
            }
            if let Some(unit) = unit {
                return Some((Task::Unit(unit), None));
            }
        }
        let slot = &self.workers[&worker];
        let orphan = if idle(slot) > 0 { phase.pending.get_mut(&None).and_then(BTreeSet::pop_first) } else { None };
        let unit = if let Some(unit) = orphan {
            unit
        } else if slot.running == 0 {
            let workers = &self.workers;
            let victim = phase
                .pending
                .iter()
                .filter_map(|(&o, s)| {
                    let backlog = s.len().saturating_sub(workers.get(&o?).map_or(0, idle));
                    (backlog > 0).then_some((backlog, o?))
                })
                .max()?
                .1;
            self.counters.steals += 1;
            let backlog = phase.pending.get_mut(&Some(victim))?;
            let unit = backlog.pop_last()?;
            if backlog.is_empty() {
                phase.pending.remove(&Some(victim));
            }
            self.prior[unit as usize] = Some(victim);
            unit
        } else {
            return None;
        };
        let prior = self.prior[unit as usize];
        self.owner[unit as usize] = Some(worker);
        Some((Task::Unit(unit), prior))
    }
}

fn message(body: master_message::Body) -> proto::MasterMessage {
    proto::MasterMessage { body: Some(body) }
}

#[cfg(test)]
mod tests;
