//! The master's bookkeeping, with no I/O: which worker owns which row unit, which items of
//! the current phase are pending, running or done, and what to send to whom next.
//!
//! The network layer feeds it events (a worker joined, completed items, left, vanished)
//! and sends the messages it returns. Keeping it pure lets the tests below drive every
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
            Reduction::RangeSum { len } => Collect::Aggregated(len),
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
    phase: Option<Phase>,
    running: HashMap<u64, Running>,
    next_item: u64,
    next_phase: u64,
    next_worker: WorkerKey,
    /// Why the run was stopped from outside; every phase fails with it.
    aborted: Option<String>,
    /// The most workers the algorithm wants (elastic CoCoA: one per slot); `None`: any.
    desired: Option<usize>,
    /// Workers released because the algorithm wanted fewer, oldest release first.
    pub released: Vec<String>,
    /// The allreduce tree of the last tree stage; rebuilt when the workers change or a
    /// reduce is started again.
    tree: Option<Tree<WorkerKey>>,
    speculation: Speculation,
    /// The scheduler's clock: the time since it started (tests drive their own).
    clock: Box<dyn Fn() -> Duration + Send>,
    /// Items of a stalled worker that wait for an idle worker to run a copy.
    wanted: BTreeSet<u64>,
    pub counters: Counters,
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
            phase: None,
            running: HashMap::new(),
            next_item: 1,
            next_phase: 1,
            next_worker: 1,
            aborted: None,
            desired: None,
            released: Vec::new(),
            tree: None,
            speculation: Speculation::OFF,
            clock: {
                let started = Instant::now();
                Box::new(move || started.elapsed())
            },
            wanted: BTreeSet::new(),
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
    /// worker is sent `job`, the new description.
    pub fn reconfigure(&mut self, units: usize, job: proto::MasterMessage) -> Outbox {
        debug_assert!(self.phase.is_none(), "reconfigured during a phase");
        self.units = units;
        self.owner = vec![None; units];
        self.prior = vec![None; units];
        self.workers.keys().map(|&k| (k, job.clone())).collect()
    }

    /// The algorithm wants at most `desired` workers: the newest beyond that many are
    /// drained (they hand over what they own, as on preemption, and are released once
    /// nothing depends on them), and a worker that joins while there are enough is too.
    pub fn set_desired(&mut self, desired: Option<usize>) -> Outbox {
        self.desired = desired;
        self.release_surplus()
    }

    fn release_surplus(&mut self) -> Outbox {
        let Some(desired) = self.desired else { return Outbox::new() };
        let active: Vec<WorkerKey> = self.workers.iter().filter(|(_, w)| !w.draining).map(|(&k, _)| k).collect();
        let mut outbox = Outbox::new();
        for &key in active.iter().skip(desired.max(1)) {
            if let Some(w) = self.workers.get(&key) {
                self.released.push(w.id.clone());
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

    /// The result of `counted` is in: every other copy of its task in its phase is dropped
    /// and will be checked against `print`, and copies that came back early are checked now.
    fn settle_copies(&mut self, counted: &Running, print: u64) -> Result<(), String> {
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
    fn stall(&mut self, worker: WorkerKey, why: &str) {
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
        for unit in 0..self.units {
            if self.owner[unit] == Some(worker) {
                self.move_pending(unit as u32, None);
                self.owner[unit] = None;
            }
            if self.prior[unit] == Some(worker) {
                self.prior[unit] = None;
            }
        }
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
    fn renew_if_forfeited_by_all(&mut self) {
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
    fn forget_partials(&mut self, worker: WorkerKey) {
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
        if !slot.draining {
            self.counters.workers_lost += 1;
        }
        if let Some(phase) = self.phase.as_ref().filter(|_| !slot.draining) {
            let phase = phase.description.id;
            tracing::info!(worker = %slot.id, phase, "worker lost during a phase: its part is done again elsewhere");
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

    /// The tree allreduce of the current phase failed somewhere: its items are forgotten
    /// (their late results are unknown ids) and the reduce starts again, from the partial
    /// sums the workers still hold, on a rebuilt tree, once every unit is computed.
    fn restart_tree(&mut self) {
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
    fn start_tree(&mut self) -> Outbox {
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

    /// Training is over: every worker may exit.
    pub fn release_all(&mut self) -> Outbox {
        self.workers.keys().map(|&k| (k, message(master_message::Body::Release(proto::Release {})))).collect()
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
                .ok_or_else(|| format!("{} bytes of sums where {n} sums were due", sums.len()))?,
        };
        match task {
            Task::Unit(unit) => {
                // The worker whose result counts holds the unit's state now (after a race,
                // the winner).
                self.owner[unit as usize] = Some(worker);
                self.prior[unit as usize] = None;
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
        let output = PhaseOutput { sums, payloads: phase.payloads };
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

    /// Starts a copy of each item that waits for one on the idlest worker with an idle
    /// thread, if there is one; the copy rebuilds the unit from the master's base.
    fn start_copies(&mut self, assignments: &mut BTreeMap<WorkerKey, proto::Assignment>) {
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
            Task::Unit(unit) => work_item::Kind::Unit(proto::UnitItem {
                unit,
                prior_owner: prior.and_then(|p| self.workers.get(&p)).map(|w| w.address.clone()).unwrap_or_default(),
            }),
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

/// A finished tree stage is right: the root's total covers every unit, and every worker
/// received that total bit for bit (its digest).
fn check_tree(phase: &Phase) -> Result<(), String> {
    let Some(total) = &phase.tree_total else { return Err("allreduce: the root sent no total".into()) };
    let (digest, units) = (chunks::digest(total), phase.computed.len() as u32);
    match phase.tree_done.values().find(|&&d| d != (digest, units)) {
        Some(&(d, u)) => Err(format!(
            "allreduce: a worker received a total of digest {d:016x} over {u} units; the root's is {digest:016x} over {units}"
        )),
        None => Ok(()),
    }
}

fn message(body: master_message::Body) -> proto::MasterMessage {
    proto::MasterMessage { body: Some(body) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::mpsc::{Receiver, channel};

    fn loss_phase() -> proto::Phase {
        proto::Phase { id: 0, version: 0, body: Vec::new(), reduction: 0, len: 1, mutates: false }
    }

    /// Items sent, by worker: (item id, unit or range start).
    fn items(outbox: &Outbox) -> Vec<(WorkerKey, u64, work_item::Kind)> {
        outbox
            .iter()
            .filter_map(|(k, m)| match &m.body {
                Some(master_message::Body::Assignment(a)) => Some((k, a)),
                _ => None,
            })
            .flat_map(|(&k, a)| a.items.iter().map(move |i| (k, i.id, i.kind.clone().unwrap())))
            .collect()
    }

    fn done(item: u64, value: i128) -> proto::ItemResult {
        proto::ItemResult { item, sums: super::super::wire::from_i128s(&[value]), ..Default::default() }
    }

    fn unit_of(kind: &work_item::Kind) -> u32 {
        match kind {
            work_item::Kind::Unit(s) => s.unit,
            other => panic!("not a unit item: {other:?}"),
        }
    }

    /// Completes every item in `pending` (and whatever they lead to) with value unit + 1.
    fn run_all(s: &mut Scheduler, mut pending: Vec<(WorkerKey, u64, work_item::Kind)>) {
        while let Some((worker, id, kind)) = pending.pop() {
            let value = match &kind {
                work_item::Kind::Unit(item) => item.unit as i128 + 1,
                work_item::Kind::Aggregate(_) | work_item::Kind::Tree(_) => 0,
            };
            pending.extend(items(&s.complete(worker, vec![done(id, value)])));
        }
    }

    fn start(s: &mut Scheduler, collect: Collect) -> (Receiver<PhaseResult>, Vec<(WorkerKey, u64, work_item::Kind)>) {
        let (reply, result) = channel();
        let sent = items(&s.start_phase(loss_phase(), collect, reply));
        (result, sent)
    }

    #[test]
    fn a_result_of_the_wrong_shape_fails_the_phase_and_another_worker_s_item_is_ignored() {
        let mut s = Scheduler::new(2);
        let (a, _) = s.join("a".into(), "http://a".into(), 1);
        let (b, _) = s.join("b".into(), "http://b".into(), 1);
        let (result, sent) = start(&mut s, Collect::Sums(2));
        let of = |w| sent.iter().find(|i| i.0 == w).unwrap().1;
        // b answers a's item: not b's to answer, so nothing happens.
        let two = super::super::wire::from_i128s(&[1, 2]);
        s.complete(b, vec![proto::ItemResult { item: of(a), sums: two.clone(), ..Default::default() }]);
        assert!(s.running.contains_key(&of(a)), "a's item still runs");
        // a answers with one sum of the two due, b with 17 bytes: the run fails, naming a.
        s.complete(a, vec![done(of(a), 5)]);
        let error = result.try_recv().unwrap().unwrap_err();
        assert_eq!(error, format!("worker a, item {}: 16 bytes of sums where 2 sums were due", of(a)));
        let (result, sent) = start(&mut s, Collect::Sums(2));
        let item = sent[0].1;
        s.complete(sent[0].0, vec![proto::ItemResult { item, sums: vec![0; 17], ..Default::default() }]);
        assert!(result.try_recv().unwrap().unwrap_err().contains("17 bytes of sums where 2 sums were due"));
    }

    #[test]
    fn every_unit_is_computed_once_and_sums_are_exact_whoever_ran_what() {
        let mut s = Scheduler::new(10);
        let (a, _) = s.join("a".into(), "http://a".into(), 1);
        let (b, _) = s.join("b".into(), "http://b".into(), 2);
        let (result, sent) = start(&mut s, Collect::Sums(1));
        assert_eq!(sent.len(), 3, "each worker adopts one unit per thread, more as threads free up");
        assert!(sent.iter().filter(|i| i.0 == a).count() == 1 && sent.iter().filter(|i| i.0 == b).count() == 2);
        run_all(&mut s, sent);
        let expected: i128 = (1..=10).sum();
        let output = result.try_recv().unwrap().unwrap();
        assert_eq!(output.sums, ExactSums { sums: vec![expected] });
        assert_eq!(output.payloads.len(), 10, "one payload slot per unit");
        // Next phase: units go back to the workers that own them.
        let owned: Vec<Option<WorkerKey>> = s.owner.clone();
        let (_, sent) = start(&mut s, Collect::Sums(1));
        assert!(sent.iter().all(|(w, _, k)| owned[unit_of(k) as usize] == Some(*w)));
    }

    #[test]
    fn a_lost_worker_s_items_are_redone_by_others() {
        let mut s = Scheduler::new(6);
        let (a, _) = s.join("a".into(), "http://a".into(), 3);
        let (b, _) = s.join("b".into(), "http://b".into(), 3);
        let (result, sent) = start(&mut s, Collect::Sums(1));
        let (on_a, on_b): (Vec<_>, Vec<_>) = sent.into_iter().partition(|i| i.0 == a);
        let redone = items(&s.lose(a));
        assert!(redone.is_empty(), "b is full until it completes something");
        assert_eq!(s.counters.workers_lost, 1);
        let mut pending = on_b;
        // Results of the lost worker arriving late are ignored.
        assert!(items(&s.complete(a, vec![done(on_a[0].1, 1000)])).is_empty());
        let first = pending.pop().unwrap();
        let next = items(&s.complete(b, vec![done(first.1, unit_of(&first.2) as i128 + 1)]));
        assert!(next.iter().all(|i| i.0 == b));
        pending.extend(next);
        run_all(&mut s, pending);
        assert_eq!(result.try_recv().unwrap().unwrap().sums, ExactSums { sums: vec![21] });
        assert!(s.owner.iter().all(|&o| o == Some(b)));
    }

    #[test]
    fn statistics_are_aggregated_by_ranges_and_redone_when_a_holder_is_lost() {
        let mut s = Scheduler::new(4);
        let (a, _) = s.join("a".into(), "http://a".into(), 2);
        let (b, _) = s.join("b".into(), "http://b".into(), 2);
        let len = RANGE_LEN * 2 + 5;
        let (result, sent) = start(&mut s, Collect::Aggregated(len));
        let mut ranges = Vec::new();
        for (w, id, _) in sent {
            ranges.extend(items(&s.complete(w, vec![proto::ItemResult { item: id, ..Default::default() }])));
        }
        assert_eq!(ranges.len(), 3, "ceil(len / RANGE_LEN) ranges");
        let work_item::Kind::Aggregate(first) = &ranges[0].2 else { panic!("a range") };
        let sources: Vec<usize> = first.sources.iter().map(|s| s.units.len()).collect();
        assert_eq!(sources, [2, 2], "each holder lists the units it computed");
        // b vanishes before the aggregation is done: its units are recomputed by a, and
        // every range is summed again from the new holders.
        let redo = items(&s.lose(b));
        assert!(result.try_recv().is_err(), "no result from a half-lost phase");
        // a's range items under way are dropped (their sums are over b's partials too); they
        // hold a's threads until they come back, then a computes b's units, then ranges.
        let mut queue: std::collections::VecDeque<Item> =
            redo.into_iter().chain(ranges.into_iter().filter(|r| r.0 == a)).collect();
        let mut ranges = Vec::new();
        let mut redone = 0;
        while let Some((w, id, _)) = queue.pop_front() {
            for item in items(&s.complete(w, vec![proto::ItemResult { item: id, ..Default::default() }])) {
                match item.2 {
                    work_item::Kind::Unit(_) => {
                        assert_eq!(item.0, a);
                        redone += 1;
                        queue.push_back(item);
                    }
                    _ => ranges.push(item),
                }
            }
        }
        assert_eq!(redone, 2, "b's two units, computed again by a");
        let work_item::Kind::Aggregate(range) = &ranges[0].2 else { panic!("a range") };
        assert_eq!(range.sources.len(), 1, "a holds everything now");
        assert_eq!(range.sources[0].units.len(), 4);
        let mut pending = ranges;
        while let Some((w, id, kind)) = pending.pop() {
            let work_item::Kind::Aggregate(r) = kind else { continue };
            let n = (r.end - r.begin) as usize;
            let sums = super::super::wire::from_i128s(&vec![r.begin as i128; n]);
            pending.extend(items(&s.complete(w, vec![proto::ItemResult { item: id, sums, ..Default::default() }])));
        }
        let sums = result.try_recv().unwrap().unwrap().sums.sums;
        assert_eq!(sums.len(), len);
        assert!(sums.iter().enumerate().all(|(i, &v)| v == ((i / RANGE_LEN) * RANGE_LEN) as i128), "ranges in order");
    }

    #[test]
    fn a_draining_worker_hands_its_units_over_and_is_released_after() {
        let mut s = Scheduler::new(4);
        let (a, _) = s.join("a".into(), "http://a".into(), 4);
        let (_, sent) = start(&mut s, Collect::Nothing);
        run_all(&mut s, sent);
        let (b, _) = s.join("b".into(), "http://b".into(), 4);
        let out = s.drain(a);
        assert!(out.iter().any(|(k, m)| *k == a && matches!(m.body, Some(master_message::Body::Drain(_)))));
        assert!(!out.iter().any(|(_, m)| matches!(m.body, Some(master_message::Body::Release(_)))), "not yet");
        let (_, sent) = start(&mut s, Collect::Nothing);
        assert_eq!(sent.len(), 4);
        for (w, _, kind) in &sent {
            let work_item::Kind::Unit(item) = kind else { panic!("unit") };
            assert_eq!((*w, item.prior_owner.as_str()), (b, "http://a"), "b fetches each unit's state from a");
        }
        let (last, rest) = sent.split_last().unwrap();
        run_all(&mut s, rest.to_vec());
        let out = s.complete(last.0, vec![done(last.1, 0)]);
        assert!(out.iter().any(|(k, m)| *k == a && matches!(m.body, Some(master_message::Body::Release(_)))));
        assert_eq!(s.counters.workers_lost, 0);
    }

    #[test]
    fn an_idle_worker_steals_from_a_backlogged_owner() {
        let mut s = Scheduler::new(8);
        let (a, _) = s.join("a".into(), "http://a".into(), 2);
        let (_, sent) = start(&mut s, Collect::Nothing);
        run_all(&mut s, sent);
        assert!(s.owner.iter().all(|&o| o == Some(a)));
        let (b, _) = s.join("b".into(), "http://b".into(), 2);
        let (_, sent) = start(&mut s, Collect::Nothing);
        assert_eq!(sent.iter().filter(|i| i.0 == a).count(), 4, "a fills its queue with its own units");
        let stolen: Vec<_> = sent.iter().filter(|i| i.0 == b).collect();
        assert_eq!(stolen.len(), 1, "idle b takes one unit a cannot start yet");
        assert!(matches!(&stolen[0].2, work_item::Kind::Unit(i) if i.prior_owner == "http://a"));
        run_all(&mut s, sent);
        assert!(s.counters.steals >= 2, "b keeps stealing while a has a backlog");
        let on_b = s.owner.iter().filter(|&&o| o == Some(b)).count();
        assert!((2..=4).contains(&on_b), "units spread over both workers: {on_b} of 8 on b");
    }

    /// Completes the tree items in `sent`: the root sends `total`, everyone its digest and
    /// the unit count; returns the workers that got a tree item and their parents' address.
    fn tree_items(sent: &[(WorkerKey, u64, work_item::Kind)]) -> Vec<(WorkerKey, u64, proto::TreeItem)> {
        sent.iter()
            .filter_map(|(w, id, k)| match k {
                work_item::Kind::Tree(t) => Some((*w, *id, t.clone())),
                _ => None,
            })
            .collect()
    }

    fn finish_tree(
        s: &mut Scheduler,
        nodes: &[(WorkerKey, u64, proto::TreeItem)],
        total: &[i128],
        units: u32,
    ) -> Outbox {
        let mut out = Outbox::new();
        for (w, id, item) in nodes {
            let sums = if item.parent.is_empty() { super::super::wire::from_i128s(total) } else { Vec::new() };
            let digest = chunks::digest(total);
            out.extend(
                s.complete(*w, vec![proto::ItemResult { item: *id, sums, digest, units, ..Default::default() }]),
            );
        }
        out
    }

    /// An allreduce phase: once every unit is computed, every worker gets a tree item (a
    /// binary tree in join order, holding the units it computed); the root's total is the
    /// result once every worker reported the same digest. A worker lost mid-reduce: its
    /// units are computed again by the others, the tree is rebuilt without it (a new
    /// generation) and the reduce starts again; a digest that differs fails the phase.
    #[test]
    fn an_allreduce_runs_up_a_tree_of_every_worker_and_restarts_on_a_rebuilt_tree_after_a_loss() {
        let mut s = Scheduler::new(6);
        let keys: Vec<WorkerKey> =
            ["a", "b", "c", "d"].iter().map(|n| s.join(n.to_string(), format!("http://{n}"), 2).0).collect();
        let (result, sent) = start(&mut s, Collect::Tree(3));
        let mut nodes = Vec::new();
        for (w, id, _) in sent {
            nodes
                .extend(tree_items(&items(&s.complete(w, vec![proto::ItemResult { item: id, ..Default::default() }]))));
        }
        assert_eq!(nodes.len(), 4, "one tree item per worker");
        let parent = |n: &[(WorkerKey, u64, proto::TreeItem)], k| n.iter().find(|i| i.0 == k).unwrap().2.parent.clone();
        assert_eq!(parent(&nodes, keys[0]), "");
        assert_eq!(
            (parent(&nodes, keys[1]), parent(&nodes, keys[2]), parent(&nodes, keys[3])),
            ("http://a".into(), "http://a".into(), "http://b".into())
        );
        let held: usize = nodes.iter().map(|n| n.2.units.len()).sum();
        assert_eq!(held, 6, "every computed unit is held by exactly one tree member");
        assert_eq!(s.tree_place(keys[3]), (1, Some(Some(keys[1]))));
        // First reduce completes.
        finish_tree(&mut s, &nodes, &[1, 2, 3], 6);
        assert_eq!(result.try_recv().unwrap().unwrap().sums.sums, [1, 2, 3]);

        // Second phase: the same workers reuse the tree (generation 1). b is lost while the
        // tree items run: its units come back, and the tree is rebuilt over a, c, d.
        let (result, sent) = start(&mut s, Collect::Tree(3));
        let mut nodes = Vec::new();
        for (w, id, _) in sent {
            nodes
                .extend(tree_items(&items(&s.complete(w, vec![proto::ItemResult { item: id, ..Default::default() }]))));
        }
        assert!(nodes.iter().all(|n| n.2.generation == 1), "unchanged workers keep their tree");
        let mut pending = items(&s.lose(keys[1]));
        assert!(pending.iter().all(|i| matches!(i.2, work_item::Kind::Unit(_))), "b's units first, no tree yet");
        assert!(!pending.is_empty());
        // Late results of the old tree are unknown items now.
        assert!(finish_tree(&mut s, &nodes, &[9, 9, 9], 6).is_empty());
        assert!(result.try_recv().is_err());
        let mut nodes = Vec::new();
        while let Some((w, id, kind)) = pending.pop() {
            assert!(matches!(kind, work_item::Kind::Unit(_)));
            let out = items(&s.complete(w, vec![proto::ItemResult { item: id, ..Default::default() }]));
            nodes.extend(tree_items(&out));
            pending.extend(out.into_iter().filter(|i| matches!(i.2, work_item::Kind::Unit(_))));
        }
        assert_eq!(nodes.len(), 3, "a tree over the three left");
        assert!(nodes.iter().all(|n| n.2.generation == 2 && n.0 != keys[1]));
        assert_eq!(nodes.iter().map(|n| n.2.units.len()).sum::<usize>(), 6);
        assert_eq!(s.tree_place(keys[3]), (2, Some(Some(keys[0]))), "d's parent is the root now");
        assert_eq!((s.counters.trees_built, s.counters.tree_restarts), (2, 1));
        // A worker that received other bits than the root fails the phase, loudly.
        let (last, rest) = nodes.split_last().unwrap();
        finish_tree(&mut s, rest, &[4, 5, 6], 6);
        finish_tree(&mut s, std::slice::from_ref(last), &[4, 5, 7], 6);
        let error = result.try_recv().unwrap().unwrap_err();
        assert!(error.contains("a worker received a total of digest"), "{error}");
    }

    /// A tree item answered "aborted" (a peer gave up): the reduce starts again on a new
    /// generation of the same workers, without losing anyone.
    #[test]
    fn an_aborted_allreduce_starts_again_on_a_new_generation() {
        let mut s = Scheduler::new(2);
        let keys: Vec<WorkerKey> =
            ["a", "b"].iter().map(|n| s.join(n.to_string(), format!("http://{n}"), 1).0).collect();
        let (result, sent) = start(&mut s, Collect::Tree(1));
        let mut nodes = Vec::new();
        for (w, id, _) in sent {
            nodes
                .extend(tree_items(&items(&s.complete(w, vec![proto::ItemResult { item: id, ..Default::default() }]))));
        }
        let (w, id, _) = &nodes[1];
        let again = tree_items(&items(
            &s.complete(*w, vec![proto::ItemResult { item: *id, aborted: true, ..Default::default() }]),
        ));
        assert_eq!(again.len(), 2);
        assert!(again.iter().all(|n| n.2.generation == 2));
        assert_eq!(s.counters.workers_lost, 0);
        finish_tree(&mut s, &again, &[42], 2);
        assert_eq!(result.try_recv().unwrap().unwrap().sums.sums, [42]);
        assert_eq!(s.tree_place(keys[1]).1, Some(Some(keys[0])));
    }

    fn kinds(outbox: &Outbox) -> Vec<(WorkerKey, &'static str)> {
        outbox
            .iter()
            .map(|(k, m)| {
                let kind = match &m.body {
                    Some(master_message::Body::Job(_)) => "job",
                    Some(master_message::Body::Drain(_)) => "drain",
                    Some(master_message::Body::Release(_)) => "release",
                    Some(master_message::Body::Assignment(_)) => "assignment",
                    None => "empty",
                };
                (*k, kind)
            })
            .collect()
    }

    /// Elastic scale-in: the units change between phases (every worker gets the new job and
    /// no unit keeps an owner), and the newest workers beyond the wanted count are drained
    /// and released — exactly those, once, and a newcomer while there are enough.
    #[test]
    fn a_reconfigured_job_reaches_every_worker_and_surplus_workers_are_released() {
        let mut s = Scheduler::new(8);
        let keys: Vec<WorkerKey> =
            ["a", "b", "c", "d"].iter().map(|n| s.join(n.to_string(), format!("http://{n}"), 1).0).collect();
        let (_, sent) = start(&mut s, Collect::Sums(1));
        run_all(&mut s, sent);
        assert!(s.owner.iter().all(Option::is_some));
        let job = message(master_message::Body::Job(proto::JobInfo::default()));
        let sent = s.reconfigure(2, job);
        assert_eq!(kinds(&sent), keys.iter().map(|&k| (k, "job")).collect::<Vec<_>>());
        assert_eq!((s.owner.len(), s.prior.len()), (2, 2));
        assert!(s.owner.iter().chain(&s.prior).all(Option::is_none), "merged units are rebuilt from the master");
        let sent = s.set_desired(Some(2));
        let released: Vec<_> = kinds(&sent).into_iter().filter(|(_, kind)| *kind != "assignment").collect();
        assert_eq!(released, [(keys[2], "drain"), (keys[2], "release"), (keys[3], "drain"), (keys[3], "release")]);
        assert_eq!(s.released, ["c", "d"]);
        assert!(s.set_desired(Some(2)).is_empty(), "released once");
        let (e, sent) = s.join("e".into(), "http://e".into(), 1);
        assert_eq!(kinds(&sent)[..2], [(e, "drain"), (e, "release")], "a newcomer beyond the count goes at once");
        assert_eq!(s.released, ["c", "d", "e"]);
        let (_, sent) = start(&mut s, Collect::Sums(1));
        assert!(sent.iter().all(|(w, _, _)| keys[..2].contains(w)), "the two kept workers run the two units");
        run_all(&mut s, sent);
        // Without a wanted count (SCD, static CoCoA) nobody is surplus.
        assert!(s.set_desired(None).is_empty());
        assert_eq!(
            s.join("f".into(), "http://f".into(), 1)
                .1
                .iter()
                .filter(|(_, m)| matches!(m.body, Some(master_message::Body::Release(_))))
                .count(),
            0
        );
    }

    /// A scheduler copying items that run 4x the median and at least 100 ms, on a clock the
    /// test moves (milliseconds).
    fn timed(units: usize) -> (Scheduler, Arc<AtomicU64>) {
        let now = Arc::new(AtomicU64::new(0));
        let clock = now.clone();
        let s = Scheduler::new(units)
            .with_speculation(Speculation { factor: Some(4.0), floor: Duration::from_millis(100) })
            .with_clock(move || Duration::from_millis(clock.load(SeqCst)));
        (s, now)
    }

    type Item = (WorkerKey, u64, work_item::Kind);

    /// A race set up: a Sum phase of 4 units on workers a, b, c (one thread each); b and c
    /// run three units in 10-25 ms, a's stays out. Below the floor nothing happens; past it
    /// a is stalled and its unit copied to b, rebuilt from the base (no fetch from a).
    /// Returns the phase's result, the workers, a's item and b's copy.
    fn race() -> (Scheduler, Receiver<PhaseResult>, Vec<WorkerKey>, Item, Item) {
        let (mut s, clock) = timed(4);
        let keys: Vec<WorkerKey> =
            ["a", "b", "c"].iter().map(|n| s.join(n.to_string(), format!("http://{n}"), 1).0).collect();
        let (result, sent) = start(&mut s, Collect::Sums(1));
        assert_eq!(sent.len(), 3, "one unit per worker thread");
        let (slow, mut rest): (Vec<Item>, Vec<Item>) = sent.into_iter().partition(|i| i.0 == keys[0]);
        clock.store(10, SeqCst);
        while let Some((w, id, kind)) = rest.pop() {
            rest.extend(items(&s.complete(w, vec![done(id, unit_of(&kind) as i128 + 1)])));
            clock.fetch_add(5, SeqCst);
        }
        assert!(items(&s.tick()).is_empty(), "a's item has run 25 ms: the normal spread");
        clock.store(100, SeqCst);
        assert!(items(&s.tick()).is_empty(), "not past the floor yet");
        assert_eq!(s.counters.stalls, 0);
        clock.store(101, SeqCst);
        let copies = items(&s.tick());
        assert_eq!(copies.len(), 1, "{copies:?}");
        let slow = slow[0].clone();
        let copy = copies[0].clone();
        assert_eq!(copy.0, keys[1], "the idlest worker, lowest key first");
        let work_item::Kind::Unit(unit) = &copy.2 else { panic!("a unit item") };
        assert_eq!(unit.unit, unit_of(&slow.2));
        assert_eq!(unit.prior_owner, "", "rebuilt from the master's base, never fetched from the straggler");
        assert!(s.workers[&keys[0]].stalled);
        assert_eq!((s.counters.stalls, s.counters.copies), (1, 1));
        clock.store(150, SeqCst);
        assert!(items(&s.tick()).is_empty(), "an item is copied once");
        assert!(result.try_recv().is_err());
        (s, result, keys, slow, copy)
    }

    #[test]
    fn a_straggler_s_copy_that_comes_first_counts_and_the_straggler_s_result_is_dropped() {
        let (mut s, result, keys, slow, copy) = race();
        let value = unit_of(&slow.2) as i128 + 1;
        s.complete(copy.0, vec![done(copy.1, value)]);
        assert_eq!(result.try_recv().unwrap().unwrap().sums.sums, [10], "each unit counted once");
        assert_eq!(s.owner[unit_of(&slow.2) as usize], Some(copy.0), "the winner holds the unit");
        assert!(items(&s.complete(keys[0], vec![done(slow.1, value)])).is_empty());
        assert_eq!((s.counters.dropped, s.counters.items_completed), (1, 4));
        assert!(!s.workers[&keys[0]].stalled, "a answered: it gets work again");
        let (result, sent) = start(&mut s, Collect::Sums(1));
        run_all(&mut s, sent);
        assert_eq!(result.try_recv().unwrap().unwrap().sums.sums, [10], "no check failed");
    }

    #[test]
    fn a_straggler_that_answers_before_its_copy_counts_and_a_copy_of_other_bits_stops_the_run() {
        let (mut s, result, keys, slow, copy) = race();
        let value = unit_of(&slow.2) as i128 + 1;
        s.complete(keys[0], vec![done(slow.1, value)]);
        assert_eq!(result.try_recv().unwrap().unwrap().sums.sums, [10]);
        assert_eq!(s.owner[unit_of(&slow.2) as usize], Some(keys[0]));
        // The late copy differs: two runs of one item gave other bits, which breaks the
        // promise every result of this run rests on; the run stops.
        s.complete(copy.0, vec![done(copy.1, value + 1)]);
        let (reply, result) = channel();
        s.start_phase(loss_phase(), Collect::Sums(1), reply);
        let error = result.try_recv().unwrap().unwrap_err();
        assert!(error.contains("a speculative copy's result differs"), "{error}");
    }

    #[test]
    fn a_copy_lost_while_both_run_is_copied_again_and_a_lost_straggler_leaves_its_copy_running() {
        let (mut s, result, keys, slow, copy) = race();
        // b, running the copy, vanishes: a's item still runs, so nothing is queued again,
        // but a is stalled, so its item gets a new copy on c.
        let again = items(&s.lose(copy.0));
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!((again[0].0, unit_of(&again[0].2)), (keys[2], unit_of(&slow.2)));
        assert_eq!(s.counters.copies, 2);
        // Now a vanishes too: c's copy runs on, and nothing else is sent.
        assert!(items(&s.lose(keys[0])).is_empty());
        assert!(result.try_recv().is_err());
        s.complete(keys[2], vec![done(again[0].1, unit_of(&slow.2) as i128 + 1)]);
        assert_eq!(result.try_recv().unwrap().unwrap().sums.sums, [10]);
    }

    /// Where sums stay on the workers, a straggler forfeits its part of the phase: its
    /// running item is dropped and the unit it computed is computed again, by the others,
    /// so that no partial counts a unit twice; aggregation pulls only from them.
    #[test]
    fn a_straggler_in_an_aggregated_phase_forfeits_its_part_and_no_unit_is_counted_twice() {
        let (mut s, clock) = timed(4);
        let (a, _) = s.join("a".into(), "http://a".into(), 1);
        let (b, _) = s.join("b".into(), "http://b".into(), 1);
        let (result, sent) = start(&mut s, Collect::Aggregated(3));
        let empty = |item| proto::ItemResult { item, ..Default::default() };
        clock.store(10, SeqCst);
        let mut next = Vec::new();
        for (w, id, _) in sent {
            next.extend(items(&s.complete(w, vec![empty(id)])));
        }
        let on_a: Vec<Item> = next.iter().filter(|i| i.0 == a).cloned().collect();
        let on_b: Vec<Item> = next.iter().filter(|i| i.0 == b).cloned().collect();
        assert_eq!((on_a.len(), on_b.len()), (1, 1));
        clock.store(20, SeqCst);
        assert!(items(&s.complete(b, vec![empty(on_b[0].1)])).is_empty(), "b idle: no work left but a's");
        clock.store(200, SeqCst);
        let redo = items(&s.tick());
        assert_eq!(s.counters.stalls, 1);
        assert!(redo.iter().all(|i| i.0 == b && unit_of(&i.2) < 4), "{redo:?}");
        assert_eq!(redo.len(), 1, "b adopts one orphan per idle thread");
        let mut pending = redo;
        let mut ranges = Vec::new();
        while let Some((w, id, kind)) = pending.pop() {
            let out = items(&s.complete(w, vec![empty(id)]));
            assert!(matches!(kind, work_item::Kind::Unit(ref u) if u.prior_owner.is_empty()));
            for item in out {
                match item.2 {
                    work_item::Kind::Unit(_) => pending.push(item),
                    _ => ranges.push(item),
                }
            }
        }
        assert_eq!(ranges.len(), 1);
        let work_item::Kind::Aggregate(range) = &ranges[0].2 else { panic!("a range") };
        let holders: Vec<(&str, usize)> = range.sources.iter().map(|s| (s.address.as_str(), s.units.len())).collect();
        assert_eq!(holders, [("http://b", 4)], "a's partial, which may hold its dropped unit, is never pulled");
        assert_eq!(range.patience_ms, 100, "4 x the 10 ms median is below the floor");
        // a's late result is dropped (and matches the recomputation).
        assert!(items(&s.complete(a, vec![empty(on_a[0].1)])).is_empty());
        assert_eq!(s.counters.dropped, 1);
        let sums = super::super::wire::from_i128s(&[7, 8, 9]);
        s.complete(ranges[0].0, vec![proto::ItemResult { item: ranges[0].1, sums, ..Default::default() }]);
        assert_eq!(result.try_recv().unwrap().unwrap().sums.sums, [7, 8, 9]);
    }

    /// An aggregator that waited past its patience for a holder's partial reports it slow:
    /// the holder forfeits the phase, its units are computed again, and the range is summed
    /// from the new holders. Without speculation there is no patience and no stall.
    #[test]
    fn a_holder_reported_slow_by_an_aggregator_forfeits_and_its_units_are_computed_again() {
        let (mut s, _clock) = timed(2);
        let (a, _) = s.join("a".into(), "http://a".into(), 1);
        let (b, _) = s.join("b".into(), "http://b".into(), 1);
        let (result, sent) = start(&mut s, Collect::Aggregated(3));
        let empty = |item| proto::ItemResult { item, ..Default::default() };
        let mut ranges = Vec::new();
        for (w, id, _) in sent {
            ranges.extend(items(&s.complete(w, vec![empty(id)])));
        }
        assert_eq!(ranges.len(), 1);
        let (w, id, _) = ranges[0].clone();
        let holder = if w == a { b } else { a };
        let slow = proto::ItemResult { item: id, slow_peer: s.workers[&holder].address.clone(), ..Default::default() };
        let redo = items(&s.complete(w, vec![slow]));
        assert_eq!(s.counters.stalls, 1);
        assert_eq!(redo.len(), 1);
        assert_eq!(redo[0].0, w, "the holder's unit is computed by the aggregator, the one left");
        let ranges = items(&s.complete(w, vec![empty(redo[0].1)]));
        let work_item::Kind::Aggregate(range) = &ranges[0].2 else { panic!("a range") };
        assert_eq!(range.sources.len(), 1);
        assert_eq!(range.sources[0].units.len(), 2);
        let sums = super::super::wire::from_i128s(&[1, 2, 3]);
        s.complete(w, vec![proto::ItemResult { item: ranges[0].1, sums, ..Default::default() }]);
        assert_eq!(result.try_recv().unwrap().unwrap().sums.sums, [1, 2, 3]);

        let now = Arc::new(AtomicU64::new(0));
        let clock = now.clone();
        let mut off = Scheduler::new(2).with_clock(move || Duration::from_millis(clock.load(SeqCst)));
        off.join("a".into(), "http://a".into(), 1);
        off.join("b".into(), "http://b".into(), 1);
        let (_, sent) = start(&mut off, Collect::Aggregated(3));
        assert!(items(&off.complete(sent[0].0, vec![empty(sent[0].1)])).is_empty());
        now.store(3_600_000, SeqCst);
        assert!(items(&off.tick()).is_empty(), "speculation off: the other unit is waited for, an hour on");
        assert_eq!(off.counters.stalls, 0);
        let ranges = items(&off.complete(sent[1].0, vec![empty(sent[1].1)]));
        let work_item::Kind::Aggregate(range) = &ranges[0].2 else { panic!("a range") };
        assert_eq!(range.patience_ms, 0, "and an aggregator waits as long as the connection lives");
    }

    /// Someone must be left to do a phase: a lone worker, or the last one not stalled, is
    /// waited for however late its item (a forfeited phase could never finish).
    #[test]
    fn the_last_worker_able_to_do_a_phase_is_never_stalled() {
        let (mut s, clock) = timed(3);
        let (a, _) = s.join("a".into(), "http://a".into(), 1);
        let (_, sent) = start(&mut s, Collect::Aggregated(3));
        clock.store(10, SeqCst);
        let next = items(&s.complete(a, vec![proto::ItemResult { item: sent[0].1, ..Default::default() }]));
        let next = items(&s.complete(a, vec![proto::ItemResult { item: next[0].1, ..Default::default() }]));
        assert_eq!(next.len(), 1, "the third unit");
        clock.store(3_600_000, SeqCst);
        assert!(items(&s.tick()).is_empty());
        assert_eq!(s.counters.stalls, 0, "alone: waited for");
        let (b, _) = s.join("b".into(), "http://b".into(), 1);
        let redo = items(&s.tick());
        assert_eq!(s.counters.stalls, 1, "with b there, a is stalled");
        assert_eq!((redo.len(), redo[0].0), (1, b), "b computes a's three units, one at a time");
        clock.store(7_200_000, SeqCst);
        assert!(items(&s.tick()).is_empty());
        assert_eq!(s.counters.stalls, 1, "b is the last worker that may take part: waited for");
    }

    /// A worker forfeited an aggregated phase, then every other worker was lost: the phase
    /// starts over under a new id (fresh partials on every worker), and the worker left
    /// computes all of it once it answers.
    #[test]
    fn a_phase_forfeited_by_every_worker_left_starts_over_under_a_new_id() {
        let (mut s, clock) = timed(2);
        let (a, _) = s.join("a".into(), "http://a".into(), 1);
        let (b, _) = s.join("b".into(), "http://b".into(), 1);
        let (result, sent) = start(&mut s, Collect::Aggregated(3));
        let empty = |item| proto::ItemResult { item, ..Default::default() };
        let of = |w| sent.iter().find(|i| i.0 == w).unwrap().clone();
        let (on_a, on_b) = (of(a), of(b));
        clock.store(10, SeqCst);
        assert!(items(&s.complete(b, vec![empty(on_b.1)])).is_empty());
        clock.store(200, SeqCst);
        let redo = items(&s.tick());
        assert_eq!((redo.len(), redo[0].0, unit_of(&redo[0].2)), (1, b, unit_of(&on_a.2)), "a forfeits");
        let first = s.phase.as_ref().unwrap().description.id;
        assert!(items(&s.lose(b)).is_empty(), "a is stalled: nothing is sent until it answers");
        let renewed = s.phase.as_ref().unwrap().description.id;
        assert!(renewed > first, "the phase starts over under a new id");
        let out = s.complete(a, vec![empty(on_a.1)]);
        let phases: Vec<u64> = out
            .iter()
            .filter_map(|(_, m)| match &m.body {
                Some(master_message::Body::Assignment(x)) => Some(x.phases.iter().map(|p| p.id)),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(phases, [renewed], "a is sent the phase again");
        let mut pending = items(&out);
        let mut ranges = Vec::new();
        while let Some((w, id, kind)) = pending.pop() {
            assert_eq!(w, a);
            match kind {
                work_item::Kind::Unit(_) => pending.extend(items(&s.complete(w, vec![empty(id)]))),
                _ => ranges.push((w, id, kind)),
            }
        }
        let work_item::Kind::Aggregate(range) = &ranges[0].2 else { panic!("a range") };
        assert_eq!((range.sources.len(), range.sources[0].units.len()), (1, 2), "a holds both units");
        let sums = super::super::wire::from_i128s(&[4, 5, 6]);
        s.complete(a, vec![proto::ItemResult { item: ranges[0].1, sums, ..Default::default() }]);
        assert_eq!(result.try_recv().unwrap().unwrap().sums.sums, [4, 5, 6]);
    }
}
