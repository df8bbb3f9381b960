//! The contract between a training algorithm and the runtime that runs it.
//!
//! An algorithm has two halves (DESIGN.md, "The training runtime"):
//!
//! * the master's half, an [`Algorithm`]: a step machine over its own state (argmin's
//!   `Solver::next_iter`), whose state serializes for checkpoints and which reports
//!   [`Progress`] — objective, duality gap where it has one, the worker count it wants;
//! * the data-parallel half, a [`Kernel`]: what runs on one *unit* of the data (SCD: a row
//!   shard; CoCoA: a slot of partitions) with that unit's own state (SCD: predictions;
//!   SDCA: dual variables), which can be rebuilt after a loss.
//!
//! They meet in ONE call, [`Runner::run`]: run this phase on every unit and combine the
//! results with this [`Reduction`]. A runner is either threads in this process or work
//! items on workers over gRPC; the runtime knows phases, units and reductions, never an
//! algorithm's math. Every sum that crosses a unit is exact fixed point
//! ([`crate::fixed`]), so both runners give the same bits.

use crate::EngineError;
use crate::fixed::ExactSums;
use crate::grid::Cell;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::ops::Deref;

/// How a phase's per-unit sums are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum Reduction {
    /// Units return no sums.
    None,
    /// Every unit returns `len` exact sums; the master receives their total.
    Sum { len: usize },
    /// Every unit adds into a vector of `len` exact sums, usually sparsely (a block's
    /// statistics, the slots' feature counts of CoCoA's `Spread`). Distributed, the partial sums stay
    /// on the workers and are summed range by range by aggregator workers, so the master
    /// receives each sum once, whatever the worker count (SCD paper, range aggregation).
    RangeSum { len: usize },
    /// Like [`Reduction::RangeSum`] for the algorithm (the master receives the total of
    /// `len` exact sums), but distributed the partials are summed up a binary tree of the
    /// workers and the total broadcast back down it in pipelined chunks (Agarwal et al.'s
    /// AllReduce), so no single worker or the master sums every partial. Being exact, the
    /// total is the same bits as `RangeSum`'s; a master may run it as `RangeSum`
    /// (`linea master --allreduce ranges`).
    AllReduce { len: usize },
    /// Like [`Reduction::RangeSum`] for the units (each adds into `len` exact sums, usually
    /// sparsely), but the master receives only the entries whose total is not zero, as
    /// `(index, sum)` pairs in ascending index order ([`PhaseOutput::pairs`]): no vector of
    /// `len` sums is zeroed, added into and scanned when one unit's pairs are the total
    /// (CoCoA with one slot: its change of the shared vector, 0.59M instructions an epoch on
    /// criteo-sample's 34,691 features). Distributed, it runs as `RangeSum` on the wire and
    /// the master keeps the non-zero entries of the total, so both runners give the same
    /// pairs.
    SparseSum { len: usize },
}

impl Reduction {
    pub fn len(self) -> usize {
        match self {
            Reduction::None => 0,
            Reduction::Sum { len }
            | Reduction::RangeSum { len }
            | Reduction::AllReduce { len }
            | Reduction::SparseSum { len } => len,
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// A phase as the algorithm asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseRequest<P> {
    pub phase: P,
    pub reduction: Reduction,
    /// Whether the phase changes unit state. Unit state carries a version, the number of
    /// state-changing phases it reflects; state of another version is never used.
    pub mutates: bool,
}

/// One unit's exact sums: dense (`Reduction::Sum`) or sparse (`Reduction::RangeSum`,
/// `Reduction::SparseSum`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Contribution {
    #[default]
    Nothing,
    Dense(Vec<i128>),
    /// `(index, value)` pairs; an index may repeat (the values add).
    Sparse(Vec<(u32, i128)>),
}

impl Contribution {
    /// Adds these sums into `total` (wrapping, so exact in any order).
    pub fn add_to(&self, total: &mut [i128]) {
        match self {
            Contribution::Nothing => {}
            Contribution::Dense(values) => {
                debug_assert_eq!(values.len(), total.len());
                for (t, v) in total.iter_mut().zip(values) {
                    *t = t.wrapping_add(*v);
                }
            }
            Contribution::Sparse(pairs) => {
                for &(at, v) in pairs {
                    total[at as usize] = total[at as usize].wrapping_add(v);
                }
            }
        }
    }
}

/// What a kernel returns for one unit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UnitOutput {
    pub sums: Contribution,
    /// Bytes for the master alone (CoCoA: the unit's new dual variables); empty if none.
    pub payload: Vec<u8>,
}

/// What a phase returned to the algorithm.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PhaseOutput {
    /// The reduced sums (empty for [`Reduction::None`] and [`Reduction::SparseSum`]).
    pub sums: ExactSums,
    /// The non-zero reduced sums of a [`Reduction::SparseSum`] phase, ascending by index
    /// (empty for every other reduction).
    pub pairs: Vec<(u32, i128)>,
    /// Each unit's payload, by unit (empty where a unit sent none).
    pub payloads: Vec<Vec<u8>>,
}

/// Combines every unit's output as `reduction` says, where one process ran all the units
/// ([`crate::runner::LocalRunner`], the benchmarks' timed runner). The distributed runtime
/// gives the same sums (its [`Reduction::SparseSum`] through [`nonzero_pairs`]).
pub fn reduce(reduction: Reduction, mut outputs: Vec<UnitOutput>) -> PhaseOutput {
    let mut output = PhaseOutput::default();
    match reduction {
        Reduction::None => {}
        Reduction::SparseSum { len } => output.pairs = sparse_total(len, &mut outputs),
        Reduction::Sum { len } | Reduction::RangeSum { len } | Reduction::AllReduce { len } => {
            output.sums = ExactSums::zeros(len);
            for unit in &outputs {
                unit.sums.add_to(&mut output.sums.sums);
            }
        }
    }
    output.payloads = outputs.into_iter().map(|o| o.payload).collect();
    output
}

/// The non-zero totals of the units' sums, ascending by index. A lone unit whose pairs are
/// strictly ascending and in range is its own total (its zeros dropped); otherwise the
/// sums are added into `len` dense ones and the non-zero entries read off: the same pairs.
fn sparse_total(len: usize, outputs: &mut [UnitOutput]) -> Vec<(u32, i128)> {
    if let [only] = outputs
        && let Contribution::Sparse(pairs) = &mut only.sums
        && pairs.windows(2).all(|w| w[0].0 < w[1].0)
        && pairs.last().is_none_or(|&(at, _)| (at as usize) < len)
    {
        let mut pairs = std::mem::take(pairs);
        // Read first: `retain` moves every 32-byte pair (criteo-sample: 5.6M instructions
        // over a run's 22 epochs), and a zero (a change below 2^-65) is rare.
        if pairs.iter().any(|&(_, sum)| sum == 0) {
            pairs.retain(|&(_, sum)| sum != 0);
        }
        return pairs;
    }
    let mut total = vec![0i128; len];
    for unit in outputs.iter() {
        unit.sums.add_to(&mut total);
    }
    nonzero_pairs(&total)
}

/// The non-zero entries of dense sums as `(index, sum)` pairs, ascending: a
/// [`Reduction::SparseSum`]'s result from its dense total.
pub fn nonzero_pairs(total: &[i128]) -> Vec<(u32, i128)> {
    total.iter().enumerate().filter(|&(_, &sum)| sum != 0).map(|(at, &sum)| (at as u32, sum)).collect()
}

/// Read access to the data grid, from memory (in process) or through a worker's cell cache.
pub trait GridSource: Sync {
    type Error: From<EngineError> + Send;
    type CellRef<'a>: Deref<Target = Cell> + Send
    where
        Self: 'a;
    type TargetsRef<'a>: Deref<Target = [f64]> + Send
    where
        Self: 'a;

    fn blocks(&self) -> usize;
    fn shards(&self) -> usize;
    fn rows(&self, shard: usize) -> usize;
    fn cell(&self, block: usize, shard: usize) -> Result<Self::CellRef<'_>, Self::Error>;
    /// The loss's targets of a shard's rows.
    fn targets(&self, shard: usize) -> Result<Self::TargetsRef<'_>, Self::Error>;
    /// A hint that `(block, shard)` will be read soon; a worker loads it in the background.
    fn prefetch(&self, _block: usize, _shard: usize) {}
}

/// The data-parallel half of an algorithm. Its value is the configuration every worker
/// needs (loss, unit layout, ...); the master sends it to workers as bytes.
pub trait Kernel: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// A phase's description, sent once to every worker that runs its units.
    type Phase: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What a worker keeps for a unit between phases.
    type UnitState: Send + 'static;
    /// What the master keeps so that any unit's state can be rebuilt: updated by the
    /// runner from each committed state-changing phase and its output, so it always
    /// matches the units' current version.
    type Mirror: Send + Sync + 'static;
    /// What a worker needs from the mirror to rebuild one unit.
    type UnitBase: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Units of work; fixed until the algorithm reconfigures its runner
    /// ([`Runner::reconfigure`]: CoCoA's scale-in merges slots).
    fn units(&self) -> usize;

    /// A unit's state before any state-changing phase (version 0).
    fn fresh<G: GridSource>(&self, unit: usize, grid: &G) -> Result<Self::UnitState, G::Error>;

    /// Runs `phase` on `unit`, whose state the runner brought to the phase's version.
    fn run<G: GridSource>(
        &self,
        phase: &Self::Phase,
        unit: usize,
        state: &mut Self::UnitState,
        grid: &G,
    ) -> Result<UnitOutput, G::Error>;

    /// Takes back a unit's sums once the runner has added them up, to reuse their memory
    /// ([`crate::scratch`]); by default they are dropped.
    fn recycle(&self, _sums: Contribution) {}

    /// Whether a unit built by [`Self::fresh`] never reads the grid again while the runner
    /// keeps it (CoCoA: a slot gathers its rows into a CSR of its own and reads only that),
    /// so that a runner that keeps its units may let the grid's cells go once every unit
    /// is built ([`crate::runner::LocalRunner::detach`]). The default, `false`, is always
    /// safe: a unit that reads the grid later keeps it.
    fn units_hold_their_data(&self) -> bool {
        false
    }

    /// Records a committed state-changing phase in the mirror.
    fn commit(&self, mirror: &mut Self::Mirror, phase: &Self::Phase, output: &PhaseOutput);

    /// What rebuilding `unit` needs, from the mirror.
    fn unit_base(&self, mirror: &Self::Mirror, unit: usize) -> Self::UnitBase;

    /// Units whose bases are equal share one key, so a worker fetches a base once (SCD:
    /// every shard is rebuilt from the same parameters).
    fn base_key(&self, unit: usize) -> usize {
        unit
    }

    /// Rebuilds a unit's state from its base (a lost worker's unit, a restarted master).
    fn restore<G: GridSource>(&self, unit: usize, base: &Self::UnitBase, grid: &G)
    -> Result<Self::UnitState, G::Error>;

    /// The units of the configuration `old` whose states unit `unit` of this one takes over
    /// when a runner is reconfigured from `old` to `self` (CoCoA's scale-in: a merged slot
    /// is m consecutive old slots). `None`, the default: the unit is rebuilt from its base
    /// with [`Self::restore`]. Different units' ranges never overlap.
    fn merges_from(&self, _old: &Self, _unit: usize) -> Option<std::ops::Range<usize>> {
        None
    }

    /// Builds `unit` from its base and the old states [`Self::merges_from`] named, in their
    /// order, without reading the grid again where the old states hold what it needs. The
    /// result must equal [`Self::restore`]'s in every field that affects a phase's output,
    /// so a run's bytes do not depend on which of the two built it.
    fn merge<G: GridSource>(
        &self,
        unit: usize,
        base: &Self::UnitBase,
        _parts: Vec<Self::UnitState>,
        grid: &G,
    ) -> Result<Self::UnitState, G::Error> {
        self.restore(unit, base, grid)
    }

    /// What [`Self::merge`] needs of an old unit's state, as bytes, for a worker that merges
    /// it on another machine (CoCoA: the slot's rows); `None`, the default and for a state
    /// that holds nothing worth sending: the merging worker reads storage instead.
    fn encode_part(&self, _state: &Self::UnitState) -> Option<Vec<u8>> {
        None
    }

    /// An old unit's state from [`Self::encode_part`]'s bytes, checked, as a part for
    /// [`Self::merge`] only (it need not be a state a phase can run on).
    fn decode_part(&self, _bytes: &[u8]) -> Result<Self::UnitState, EngineError> {
        Err(EngineError::Corrupt("this algorithm hands over no parts".into()))
    }

    /// A unit's state as bytes, for a worker taking the unit over from its owner.
    fn encode_state(&self, state: &Self::UnitState) -> Vec<u8>;
    fn decode_state<G: GridSource>(&self, unit: usize, bytes: &[u8], grid: &G) -> Result<Self::UnitState, G::Error>;
}

/// Runs phases on every unit: threads here, or work items on workers.
pub trait Runner<K: Kernel> {
    type Error: From<EngineError>;
    fn run(&mut self, request: PhaseRequest<K::Phase>) -> Result<PhaseOutput, Self::Error>;

    /// Whether a unit's state can be lost and must then be rebuilt from the mirror (a worker
    /// that dies, the workers of a restarted master). The default, `true`, is what a runner
    /// that says nothing else must be taken to do; [`crate::runner::LocalRunner`], whose
    /// units live in its own process for the run's length, never loses one.
    fn loses_units(&self) -> bool {
        true
    }

    /// Replaces the kernel's configuration between phases, when the units themselves change
    /// (CoCoA's elastic scale-in merges slots): every unit is rebuilt from `mirror`, the
    /// algorithm's committed state, under the new `kernel` before it runs again. Unit state
    /// of the old configuration is never used afterwards.
    fn reconfigure(&mut self, kernel: K, mirror: K::Mirror) -> Result<(), Self::Error>;
}

/// A certificate of suboptimality, `absolute >= primal - optimum`: CoCoA's duality gap
/// (`primal - dual`), or the batch family's gradient bound `|g|^2 / (4 l2)`
/// ([`crate::hybrid::state::LinearState::certificate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Gap {
    pub absolute: f64,
    /// `absolute / |primal|`.
    pub relative: f64,
}

/// What an algorithm reports after an iteration.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Progress {
    /// Epochs completed.
    pub epoch: u32,
    /// The objective after the last completed epoch; `None` before the first.
    pub objective: Option<f64>,
    pub gap: Option<Gap>,
    /// The objective and gap are an earlier epoch's: this epoch's were not computed (CoCoA's
    /// gap schedule, `crate::cocoa::schedule`). A trace leaves such epochs blank.
    pub stale: bool,
    /// The objective (and gap) before the first epoch: where a convergence trace starts.
    pub initial_objective: Option<f64>,
    pub initial_gap: Option<Gap>,
    /// The worker count the algorithm wants (elastic algorithms); `None`: any.
    pub desired_workers: Option<u32>,
}

/// One change of the worker count an elastic algorithm decided.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingDecision {
    /// The epoch after which the count changed.
    pub epoch: u32,
    pub from: u32,
    pub to: u32,
    /// Why, for people: "duality gap rate 0.310/epoch over the last 2 epochs vs ...: 8 -> 2".
    pub reason: String,
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// The objective stopped improving by more than the tolerance.
    Converged,
    /// The certified bound fell below its tolerance: CoCoA's duality gap, the batch
    /// family's gradient bound ([`Algorithm::gap_name`] says which).
    GapReached,
    MaxEpochs,
}

/// Whether the master's state must be whole after an iteration; the driver decides it for
/// each iteration ([`Recovery::for_iteration`]).
///
/// Part of an algorithm's state can live on its units (CoCoA's lone slot keeps its dual variables
/// and its model: [`crate::cocoa::solo`]). Sending that part to the master after every iteration
/// serves only whoever rebuilds or resumes from the master's state: a checkpoint, or a runner that
/// replaces a lost unit from the mirror. A run with neither (`linea train` in one process) can
/// leave it on the units and collect it once ([`Algorithm::settle`]); on criteo-sample that report
/// was ~30% of an epoch's instructions outside the local solve
/// (docs/benchmarks/cocoa-k1-against-liblinear.md, "Recoverable only when it must be").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// A checkpoint follows the iteration, or the runner can lose a unit: the state, the
    /// iteration's step and the mirror the runner commits must be whole.
    Needed,
    /// Nothing is saved or rebuilt from this iteration: the algorithm may leave unit-held
    /// state out of its own state and out of the step until [`Algorithm::settle`] or the next
    /// `Needed` iteration. Such a step is no checkpoint step: checkpoints replay steps in
    /// order onto a whole state, so a run that checkpoints runs every iteration `Needed`.
    Deferred,
}

impl Recovery {
    /// What an iteration on `runner` needs: `Needed` when a checkpoint follows it or the
    /// runner can lose a unit ([`Runner::loses_units`]), else `Deferred`.
    pub fn for_iteration<K: Kernel, R: Runner<K>>(runner: &R, checkpoint_follows: bool) -> Self {
        match checkpoint_follows || runner.loses_units() {
            true => Recovery::Needed,
            false => Recovery::Deferred,
        }
    }
}

/// What one call of [`Algorithm::next_iter`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Iteration<S> {
    /// The epoch ended with this iteration.
    pub epoch_done: bool,
    /// What changed, for an incremental checkpoint; replayed by [`Algorithm::replay`]. Whole
    /// only for an iteration run with [`Recovery::Needed`].
    pub step: S,
    /// A decision a user should hear of (CoCoA: a scale-in and why), for logs and status.
    pub note: Option<String>,
}

/// The master's half of an algorithm: a step machine over [`Algorithm::State`].
pub trait Algorithm {
    type Kernel: Kernel;
    /// Everything a checkpoint must hold to resume bit for bit.
    type State: Serialize + DeserializeOwned + Clone;
    /// What one iteration changed in the state.
    type Step: Serialize + DeserializeOwned;

    /// Short name: "scd", "cocoa".
    fn name(&self) -> &'static str;
    /// What the [`Progress::gap`] it reports is, for people (the summary line, the plot):
    /// a bound on the distance to the optimum either way.
    fn gap_name(&self) -> &'static str {
        "duality gap"
    }
    /// The batch solver, where it is not the algorithm's own (`Some("newton")`: distributed
    /// gradient or the hybrid with truncated Newton in place of L-BFGS), so the model header
    /// and the summary line say what ran; `None` for the rest, whose [`Self::name`] says it.
    fn batch_solver(&self) -> Option<&'static str> {
        None
    }
    fn kernel(&self) -> &Self::Kernel;
    /// The mirror that matches the current state (a restarted master builds it from the
    /// checkpointed state).
    fn mirror(&self) -> <Self::Kernel as Kernel>::Mirror;
    fn state(&self) -> &Self::State;
    fn set_state(&mut self, state: Self::State);
    /// Replays a checkpointed step onto the state it followed.
    fn replay(&mut self, step: Self::Step) -> Result<(), EngineError>;

    /// One iteration (SCD: one block; CoCoA: one epoch). With [`Recovery::Deferred`] the
    /// algorithm may leave state on its units; an algorithm whose state is all on the master
    /// (SCD, L-BFGS and the hybrid) does the same either way.
    fn next_iter<R: Runner<Self::Kernel>>(
        &mut self,
        runner: &mut R,
        recovery: Recovery,
    ) -> Result<Iteration<Self::Step>, R::Error>;

    /// Makes the state whole after [`Recovery::Deferred`] iterations, collecting what the
    /// units kept (with a phase that changes no unit state); nothing to do otherwise, and
    /// for an algorithm that never leaves state on its units (the default). The driver calls
    /// it when the run stops, before it reads the model: [`Self::state`], [`Self::mirror`]
    /// and [`Self::weights`] are whole only after it or a `Needed` iteration.
    fn settle<R: Runner<Self::Kernel>>(&mut self, _runner: &mut R) -> Result<(), R::Error> {
        Ok(())
    }
    fn progress(&self) -> Progress;
    /// `Some` once the run should stop.
    fn stop_reason(&self) -> Option<StopReason>;
    /// The parameters, one vector per block, for the model file.
    fn weights(&self) -> Vec<Vec<f64>>;
    /// The maximum number of epochs (for progress bars).
    fn max_epochs(&self) -> u32;
    /// Every change of the worker count the algorithm decided so far (elastic CoCoA's
    /// scale-ins), oldest first. They are part of the checkpointed state, so a restarted
    /// master reports the same list: whoever follows the decisions (the operator) can tell the
    /// ones it has acted on from new ones by their position, which a "last decision" alone
    /// cannot (two decisions between two looks, or two alike in a row).
    fn scaling_decisions(&self) -> Vec<ScalingDecision> {
        Vec::new()
    }
}

/// Encodes a kernel-side value for the wire or a checkpoint (postcard: compact, f64 bit
/// for bit).
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("in-memory serialization cannot fail")
}

/// Decodes what [`encode`] wrote; malformed bytes are [`EngineError::Corrupt`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, EngineError> {
    postcard::from_bytes(bytes).map_err(|e| EngineError::Corrupt(format!("{what}: {e}")))
}
