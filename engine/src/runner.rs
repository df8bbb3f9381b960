//! The in-process [`Runner`]: every unit of a phase on a thread pool, with the same exact
//! reductions as the distributed runtime, so both give the same bits.

use crate::algorithm::{GridSource, Kernel, PhaseOutput, PhaseRequest, Reduction, Runner, UnitOutput, reduce};
use crate::fixed::ExactSums;
use rayon::prelude::*;
use std::sync::{Mutex, MutexGuard};

pub struct LocalRunner<'g, K: Kernel, G: GridSource> {
    kernel: K,
    grid: &'g G,
    /// Each unit's state; created on first use, never lost in one process.
    states: Vec<Option<K::UnitState>>,
    pool: rayon::ThreadPool,
    /// A dense sum per pool thread, into which the thread adds its units' sums as each
    /// unit ends ([`LocalRunner::run`]); kept from phase to phase.
    totals: Vec<Mutex<Vec<i128>>>,
}

impl<'g, K: Kernel, G: GridSource> LocalRunner<'g, K, G> {
    pub fn new(kernel: K, grid: &'g G, threads: usize) -> Self {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads.max(1)).build().expect("thread pool");
        let states = (0..kernel.units()).map(|_| None).collect();
        let totals = (0..pool.current_num_threads()).map(|_| Mutex::new(Vec::new())).collect();
        Self { kernel, grid, states, pool, totals }
    }

    /// Creates every unit's fresh state now rather than in the first phase, so the set-up
    /// (a CoCoA slot gathers its rows into CSR) is not part of the first epoch's time.
    /// Units that already have a state keep it; a run gives the same bits either way.
    pub fn prepare(&mut self) -> Result<(), G::Error> {
        let (kernel, grid) = (&self.kernel, self.grid);
        self.pool.install(|| {
            self.states.par_iter_mut().enumerate().try_for_each(|(unit, state)| {
                if state.is_none() {
                    *state = Some(kernel.fresh(unit, grid)?);
                }
                Ok(())
            })
        })
    }

    /// The runner without its grid: its kernel, units and threads, to attach to a grid again
    /// ([`Detached::attach`]) once the caller has released what the units no longer read
    /// (the cells, where [`Kernel::units_hold_their_data`]).
    pub fn detach(self) -> Detached<K> {
        let Self { kernel, grid: _, states, pool, totals } = self;
        Detached { kernel, states, pool, totals }
    }

    /// Unit states, for tests that compare them with rebuilt ones.
    pub fn states(&self) -> impl Iterator<Item = Option<&K::UnitState>> {
        self.states.iter().map(Option::as_ref)
    }

    /// Replaces every unit's state by one rebuilt from `mirror`, as a restarted worker would.
    pub fn restore_all(&mut self, mirror: &K::Mirror) -> Result<(), G::Error> {
        let (kernel, grid) = (&self.kernel, self.grid);
        self.pool.install(|| {
            self.states.par_iter_mut().enumerate().try_for_each(|(unit, state)| {
                *state = Some(kernel.restore(unit, &kernel.unit_base(mirror, unit), grid)?);
                Ok(())
            })
        })
    }
}

/// A [`LocalRunner`] between two grids ([`LocalRunner::detach`]).
pub struct Detached<K: Kernel> {
    kernel: K,
    states: Vec<Option<K::UnitState>>,
    pool: rayon::ThreadPool,
    totals: Vec<Mutex<Vec<i128>>>,
}

impl<K: Kernel> Detached<K> {
    /// The runner again, its units as they were, reading `grid` from now on.
    pub fn attach<G: GridSource>(self, grid: &G) -> LocalRunner<'_, K, G> {
        let Self { kernel, states, pool, totals } = self;
        LocalRunner { kernel, grid, states, pool, totals }
    }
}

impl<K: Kernel, G: GridSource> Runner<K> for LocalRunner<'_, K, G> {
    type Error = G::Error;

    /// Its units live in this process for the run's length (a test may still rebuild them
    /// from a mirror: [`LocalRunner::restore_all`], which needs whole iterations).
    fn loses_units(&self) -> bool {
        false
    }

    fn run(&mut self, request: PhaseRequest<K::Phase>) -> Result<PhaseOutput, G::Error> {
        let (kernel, grid, phase) = (&self.kernel, self.grid, &request.phase);
        let run_unit = |unit: usize, state: &mut Option<K::UnitState>| -> Result<UnitOutput, G::Error> {
            if state.is_none() {
                *state = Some(kernel.fresh(unit, grid)?);
            }
            kernel.run(phase, unit, state.as_mut().expect("filled above"), grid)
        };
        let outputs: Vec<UnitOutput> = match (request.reduction, self.states.as_mut_slice()) {
            // One unit (CoCoA with one slot) runs on this thread: handing it to the pool and
            // waiting for it costs two thread wake-ups a phase, which on a set whose epoch
            // takes a millisecond (rcv1-small) is not small. The same computation either way.
            (_, [only]) => vec![run_unit(0, only)?],
            // Dense sums are added up as the units end, each thread into its own total, and
            // each unit's sums go back to the kernel at once: one unit's sums per thread are
            // alive at a time, instead of every unit's until the phase ends (SCD's statistics
            // of a criteo-1m block: 62 vectors of up to 600 KiB each, fresh every block).
            // Integer sums wrap, so their order does not change a bit of the total.
            (Reduction::Sum { len } | Reduction::RangeSum { len } | Reduction::AllReduce { len }, states) => {
                let totals = &self.totals;
                for total in totals {
                    let mut total = lock(total);
                    total.clear();
                    total.resize(len, 0);
                }
                let payloads = self.pool.install(|| {
                    states
                        .par_iter_mut()
                        .enumerate()
                        .map(|(unit, state)| {
                            let UnitOutput { sums, payload } = run_unit(unit, state)?;
                            // Any total would give the same sums; the thread's own is uncontended.
                            let mine = rayon::current_thread_index().unwrap_or(0) % totals.len();
                            sums.add_to(&mut lock(&totals[mine]));
                            kernel.recycle(sums);
                            Ok(payload)
                        })
                        .collect::<Result<Vec<_>, G::Error>>()
                })?;
                // The first total becomes the output (the phase's one new vector of `len`);
                // the others keep their memory for the next phase.
                let mut sums = std::mem::take(&mut *lock(&totals[0]));
                for total in &totals[1..] {
                    for (sum, &other) in sums.iter_mut().zip(lock(total).iter()) {
                        *sum = sum.wrapping_add(other);
                    }
                }
                return Ok(PhaseOutput { sums: ExactSums { sums }, pairs: Vec::new(), payloads });
            }
            (_, states) => self.pool.install(|| {
                states.par_iter_mut().enumerate().map(|(unit, state)| run_unit(unit, state)).collect::<Result<_, _>>()
            })?,
        };
        Ok(reduce(request.reduction, outputs))
    }

    /// Units the new kernel merges from old ones are built from the states this runner
    /// holds (CoCoA: a merged slot takes its old slots' rows, not the grid's); the rest
    /// from `mirror`.
    fn reconfigure(&mut self, kernel: K, mirror: K::Mirror) -> Result<(), G::Error> {
        let old = std::mem::replace(&mut self.kernel, kernel);
        let parts = inherited(&old, &self.kernel, std::mem::take(&mut self.states));
        let (kernel, grid) = (&self.kernel, self.grid);
        self.states = self.pool.install(|| {
            parts
                .into_par_iter()
                .enumerate()
                .map(|(unit, parts)| rebuild(kernel, unit, &mirror, parts, grid).map(Some))
                .collect::<Result<_, _>>()
        })?;
        Ok(())
    }
}

/// A thread's total: no thread panics while holding one (adding integers does not).
fn lock(total: &Mutex<Vec<i128>>) -> MutexGuard<'_, Vec<i128>> {
    total.lock().expect("no thread panics holding a total")
}

/// The old units' states that each unit of `new` takes over ([`Kernel::merges_from`]), in
/// the new units' order; `None` for a unit to rebuild from its base: the kernel merges
/// nothing into it, or an old state it names is missing (never built) or out of range.
pub fn inherited<K: Kernel>(old: &K, new: &K, mut states: Vec<Option<K::UnitState>>) -> Vec<Option<Vec<K::UnitState>>> {
    (0..new.units())
        .map(|unit| {
            let range = new.merges_from(old, unit)?;
            let taken = states.get_mut(range)?;
            if taken.iter().any(Option::is_none) {
                return None;
            }
            Some(taken.iter_mut().map(|s| s.take().expect("checked above")).collect())
        })
        .collect()
}

/// Unit `unit` of a reconfigured runner: merged from `parts` when it inherited old states,
/// else restored from the mirror.
pub fn rebuild<K: Kernel, G: GridSource>(
    kernel: &K,
    unit: usize,
    mirror: &K::Mirror,
    parts: Option<Vec<K::UnitState>>,
    grid: &G,
) -> Result<K::UnitState, G::Error> {
    let base = kernel.unit_base(mirror, unit);
    match parts {
        Some(parts) => kernel.merge(unit, &base, parts, grid),
        None => kernel.restore(unit, &base, grid),
    }
}

#[cfg(test)]
mod tests {
    use crate::algorithm::{Contribution, PhaseOutput, Reduction, UnitOutput, nonzero_pairs, reduce};

    fn unit(sums: Contribution) -> UnitOutput {
        UnitOutput { sums, payload: Vec::new() }
    }

    /// The dense total of `units` under RangeSum, for the sparse sum to agree with.
    fn dense(units: &[Contribution], len: usize) -> PhaseOutput {
        reduce(Reduction::RangeSum { len }, units.iter().cloned().map(unit).collect())
    }

    /// A sparse sum is the non-zero entries of the range sum's total, ascending, whichever
    /// path computed it: one ascending unit taken as it is (its zero sums dropped), one
    /// unit out of order or with a repeated index, several units.
    #[test]
    fn a_sparse_sum_is_the_nonzero_entries_of_the_dense_total() {
        let cases: Vec<Vec<Contribution>> = vec![
            vec![Contribution::Sparse(vec![(0, 3), (2, 0), (4, -7)])],
            vec![Contribution::Sparse(vec![(4, 1), (1, 2), (4, -1)])],
            vec![Contribution::Sparse(vec![(1, 5), (3, 2)]), Contribution::Sparse(vec![(1, -5), (2, 9)])],
            vec![Contribution::Sparse(Vec::new())],
            vec![Contribution::Dense(vec![0, 1, 0, 0, 2]), Contribution::Sparse(vec![(4, -2)])],
        ];
        let expected: Vec<Vec<(u32, i128)>> =
            vec![vec![(0, 3), (4, -7)], vec![(1, 2)], vec![(2, 9), (3, 2)], vec![], vec![(1, 1)]];
        for (units, want) in cases.into_iter().zip(expected) {
            let sparse = reduce(Reduction::SparseSum { len: 5 }, units.iter().cloned().map(unit).collect());
            assert_eq!(sparse.pairs, want, "{units:?}");
            assert_eq!(sparse.pairs, nonzero_pairs(&dense(&units, 5).sums.sums), "{units:?}");
            assert!(sparse.sums.sums.is_empty());
            assert_eq!(sparse.payloads.len(), units.len());
        }
    }

    /// The runner's per-thread totals (each unit's sums added as it ends, then handed back
    /// to the kernel) give `reduce`'s sums over the units' outputs taken one by one, on 1 to
    /// 3 threads and again in a second phase, which starts from recycled vectors and totals
    /// of another length.
    #[test]
    fn per_thread_totals_give_the_sums_of_reduce() {
        use crate::algorithm::{Kernel, PhaseRequest, Runner};
        use crate::runner::LocalRunner;
        use crate::scd::kernel::{ScdKernel, ScdPhase};
        let problem = crate::synthetic::problem(crate::Loss::Logistic, 5, 700, 64);
        let (grid, shards) = (&problem.grid, problem.grid.targets.len());
        let kernel = ScdKernel::new(crate::Loss::Logistic, shards);
        let phase =
            |block: usize| ScdPhase::Statistics { block, next_block: None, features: grid.shapes[block].features };
        let expected = |block: usize| {
            let outputs = (0..shards)
                .map(|unit| {
                    let mut state = kernel.fresh(unit, grid).unwrap();
                    kernel.run(&phase(block), unit, &mut state, grid).unwrap()
                })
                .collect();
            reduce(Reduction::RangeSum { len: 2 * grid.shapes[block].features }, outputs).sums
        };
        for threads in 1..=3 {
            let mut runner = LocalRunner::new(kernel.clone(), grid, threads);
            for block in [0, 2, 1] {
                let len = 2 * grid.shapes[block].features;
                let request =
                    PhaseRequest { phase: phase(block), reduction: Reduction::RangeSum { len }, mutates: false };
                let got = runner.run(request).unwrap();
                assert_eq!(got.sums, expected(block), "block {block}, {threads} threads");
                assert!(got.sums.sums.iter().any(|&s| s != 0));
                assert_eq!(got.payloads.len(), shards);
            }
        }
    }

    #[test]
    fn sparse_and_dense_contributions_add_exactly() {
        let mut total = vec![0i128; 3];
        Contribution::Sparse(vec![(2, 5), (0, -1), (2, 1)]).add_to(&mut total);
        Contribution::Dense(vec![1, 2, 3]).add_to(&mut total);
        assert_eq!(total, vec![0, 2, 9]);
    }
}
