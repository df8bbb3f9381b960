//! A simulated cluster clock for an in-process run: each unit (CoCoA slot) of a phase runs on
//! a thread of a small pool, and the thread CPU time it took is measured there
//! (`CLOCK_THREAD_CPUTIME_ID`), so on a 2-core machine K = 16 slots cost what 16 machines
//! would have spent: a phase costs its slowest unit, as the barrier makes every worker wait
//! for it. The engine reads no clocks; this runner is the runtime edge where the measurement
//! belongs.
//!
//! What the clock leaves out: the network (a real cluster ships `v` and each slot's change,
//! `16 * features` bytes, every phase) and stragglers (every simulated machine is as fast as
//! the one core that ran its slot).

use linea_engine::algorithm::{GridSource, Kernel, PhaseOutput, PhaseRequest, Runner, UnitOutput, reduce};
use linea_engine::runner::{inherited, rebuild};
use rayon::prelude::*;
use std::sync::{Arc, Mutex};

fn cpu_seconds(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill; both clock ids used here are
    // constants that Linux always supports.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime({clock}) failed");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// CPU seconds the calling thread has used.
pub fn thread_cpu_seconds() -> f64 {
    cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU seconds all threads of this process have used: at K = 1 it says how much of the wall
/// time was work the simulated clock saw, and how much was waiting for a core.
pub fn process_cpu_seconds() -> f64 {
    cpu_seconds(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Seconds of the slowest unit of every phase (and scale-in rebuild) so far; shared between
/// the runner that adds to it and the clock the algorithm reads.
#[derive(Clone, Default)]
pub struct SlotSeconds(Arc<Mutex<f64>>);

impl SlotSeconds {
    pub fn get(&self) -> f64 {
        *self.0.lock().expect("not poisoned")
    }

    fn add(&self, seconds: f64) {
        *self.0.lock().expect("not poisoned") += seconds;
    }
}

/// Like the engine's `LocalRunner` (the same exact reductions, so the same bits), but every
/// unit's thread CPU time is measured and each phase adds its slowest unit's to
/// [`SlotSeconds`]. The reduction runs on the calling (master) thread, so the master's own
/// thread CPU time is the aggregation cost.
pub struct TimedRunner<'g, K: Kernel, G: GridSource> {
    kernel: K,
    grid: &'g G,
    states: Vec<Option<K::UnitState>>,
    pool: rayon::ThreadPool,
    slot_seconds: SlotSeconds,
}

impl<'g, K: Kernel, G: GridSource> TimedRunner<'g, K, G> {
    /// Builds every unit's initial state up front, untimed. A kernel may still load data on a
    /// unit's first phase (CoCoA gathers a slot's rows then): run a non-mutating phase
    /// through [`Self::untimed`] first to leave that out of the clock too, as Chicle's does.
    pub fn new(kernel: K, grid: &'g G, threads: usize, slot_seconds: SlotSeconds) -> Result<Self, G::Error> {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads.max(1)).build().expect("thread pool");
        let states: Vec<Option<K::UnitState>> = pool.install(|| {
            (0..kernel.units()).into_par_iter().map(|unit| kernel.fresh(unit, grid).map(Some)).collect::<Result<_, _>>()
        })?;
        Ok(Self { kernel, grid, states, pool, slot_seconds })
    }

    /// Runs `request` on every unit without adding to the clock: data loading, such as the
    /// first gathering of a unit's rows, which `fresh` leaves to the unit's first phase.
    pub fn untimed(&mut self, request: PhaseRequest<K::Phase>) -> Result<(), G::Error> {
        let (kernel, grid) = (self.kernel.clone(), self.grid);
        let phase = &request.phase;
        self.pool.install(|| {
            self.states.par_iter_mut().enumerate().try_for_each(|(unit, state)| {
                let state = state.as_mut().expect("every state is built in new and reconfigure");
                kernel.run(phase, unit, state, grid).map(|_| ())
            })
        })
    }

    /// Runs `work` on every unit in the pool; adds the slowest unit's thread CPU time.
    fn timed<T: Send>(
        &mut self,
        work: impl Fn(usize, &mut Option<K::UnitState>) -> Result<T, G::Error> + Sync,
    ) -> Result<Vec<T>, G::Error> {
        let timed: Vec<(T, f64)> = self.pool.install(|| {
            self.states
                .par_iter_mut()
                .enumerate()
                .map(|(unit, state)| {
                    let started = thread_cpu_seconds();
                    let out = work(unit, state)?;
                    Ok((out, thread_cpu_seconds() - started))
                })
                .collect::<Result<_, G::Error>>()
        })?;
        self.slot_seconds.add(timed.iter().map(|t| t.1).fold(0.0, f64::max));
        Ok(timed.into_iter().map(|t| t.0).collect())
    }
}

impl<K: Kernel, G: GridSource> Runner<K> for TimedRunner<'_, K, G> {
    type Error = G::Error;

    fn run(&mut self, request: PhaseRequest<K::Phase>) -> Result<PhaseOutput, G::Error> {
        let (kernel, grid) = (self.kernel.clone(), self.grid);
        let phase = &request.phase;
        let outputs: Vec<UnitOutput> = self.timed(|unit, state| {
            let state = state.as_mut().expect("every state is built in new and reconfigure");
            kernel.run(phase, unit, state, grid)
        })?;
        Ok(reduce(request.reduction, outputs))
    }

    /// A scale-in: every merged slot is built from the old slots' states this runner holds
    /// (their rows put together, as a worker that kept them would) or, where the kernel
    /// merges nothing, rebuilt from the mirror; timed like a phase (on a cluster, the
    /// remaining workers build their merged slots in parallel). The network that would
    /// bring a released worker's rows is not on this clock.
    fn reconfigure(&mut self, kernel: K, mirror: K::Mirror) -> Result<(), G::Error> {
        let old = std::mem::replace(&mut self.kernel, kernel.clone());
        let parts = inherited(&old, &kernel, std::mem::take(&mut self.states));
        let grid = self.grid;
        let timed: Vec<(K::UnitState, f64)> = self.pool.install(|| {
            parts
                .into_par_iter()
                .enumerate()
                .map(|(unit, parts)| {
                    let started = thread_cpu_seconds();
                    let state = rebuild(&kernel, unit, &mirror, parts, grid)?;
                    Ok((state, thread_cpu_seconds() - started))
                })
                .collect::<Result<_, G::Error>>()
        })?;
        self.slot_seconds.add(timed.iter().map(|t| t.1).fold(0.0, f64::max));
        self.states = timed.into_iter().map(|t| Some(t.0)).collect();
        Ok(())
    }
}
