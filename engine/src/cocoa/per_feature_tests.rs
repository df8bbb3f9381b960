//! Per-feature aggregation ([`Aggregation::PerFeature`]): the bound it rests on, the slots'
//! exact count of who holds each feature, and runs that stay safe (the dual never falls),
//! reach the optimum's certificate, and repeat bit for bit through rebuilt slots, a
//! restarted master and scale-ins. At K = 1 it is today's scalar run, bit for bit.

use super::tests::{relative, train};
use super::*;
use crate::algorithm::{Algorithm, Recovery, encode};
use crate::loss::Loss;
use crate::rng::SplitMix64;
use crate::runner::LocalRunner;
use crate::synthetic::{self, Problem};

/// `|sum_k u_k|^2 <= sum_j s_j sum_k u_kj^2 <= K sum_k |u_k|^2` for `u_k = X_k' a_k`, with
/// `s_j` the number of slots whose rows hold feature j: random sparse rows (some features
/// in every row, some in few), random contiguous slots, random duals.
#[test]
fn the_per_feature_bound_holds_on_random_sparse_data() {
    let mut rng = SplitMix64::new(14);
    let mut tight = 0;
    for trial in 0..400 {
        let (n, features) = (2 + rng.below(40), 1 + rng.below(30));
        let density = rng.unit();
        let dense_column = rng.below(features);
        let mut rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
        for row in &mut rows {
            for j in 0..features {
                if j == dense_column || rng.unit() < density * density {
                    row.push((j, rng.unit() * 4.0 - 2.0));
                }
            }
        }
        let slots = 1 + rng.below(n.min(8));
        let layout = layout::Layout::new(vec![n], slots, slots);
        let a: Vec<f64> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
        let mut u = vec![vec![0.0; features]; slots];
        let mut spread = vec![0usize; features];
        for (k, u_k) in u.iter_mut().enumerate() {
            let mut holds = vec![false; features];
            for i in layout.slot_rows(k) {
                for &(j, x) in &rows[i] {
                    u_k[j] += a[i] * x;
                    holds[j] = true;
                }
            }
            holds.iter().enumerate().filter(|h| *h.1).for_each(|(j, _)| spread[j] += 1);
        }
        let total: f64 = (0..features).map(|j| u.iter().map(|u_k| u_k[j]).sum::<f64>().powi(2)).sum();
        let weighted: f64 =
            (0..features).map(|j| spread[j] as f64 * u.iter().map(|u_k| u_k[j] * u_k[j]).sum::<f64>()).sum();
        let scalar: f64 = slots as f64 * u.iter().flatten().map(|x| x * x).sum::<f64>();
        let slack = 1e-12 * scalar.max(1e-300);
        assert!(total <= weighted + slack, "trial {trial}: |sum u_k|^2 = {total} > per-feature bound {weighted}");
        assert!(weighted <= scalar + slack, "trial {trial}: per-feature bound {weighted} > K bound {scalar}");
        assert!(spread.iter().all(|&s| s <= slots));
        if weighted < 0.9 * scalar {
            tight += 1;
        }
    }
    assert!(tight > 100, "the per-feature bound was well below K's in only {tight} of 400 trials");
}

/// Hinge rows whose sparse features are mostly held by the rows near them (so by one or two
/// slots), plus a one-hot block every slot sees and a dense real column: `s_j` from 1 to K.
fn local_problem(seed: u64, rows_count: usize, shard: usize) -> Problem {
    const BLOCKS: [usize; 3] = [120, 6, 1];
    let mut rng = SplitMix64::new(seed);
    let features: usize = BLOCKS.iter().sum();
    let truth: Vec<f64> = (0..features).map(|_| rng.unit() * 2.0 - 1.0).collect();
    let mut per_block: Vec<Vec<(u32, u32, f64)>> = vec![Vec::new(); BLOCKS.len()];
    let (mut rows, mut targets) = (Vec::new(), Vec::new());
    for i in 0..rows_count {
        let mut row = Vec::new();
        let mut push = |block: usize, feature: usize, value: f64| {
            row.push((BLOCKS[..block].iter().sum::<usize>() + feature, value));
            per_block[block].push((i as u32, feature as u32, value));
        };
        let near = i * BLOCKS[0] / rows_count;
        let mut local: Vec<usize> = (0..1 + rng.below(3)).map(|_| (near + rng.below(4)) % BLOCKS[0]).collect();
        local.sort_unstable();
        local.dedup();
        local.into_iter().for_each(|f| push(0, f, 0.5 + rng.unit()));
        push(1, rng.below(6), 1.0);
        push(2, 0, rng.unit() - 0.5);
        let margin: f64 = row.iter().map(|&(j, x)| truth[j] * x).sum();
        targets.push(if rng.unit() < 1.0 / (1.0 + (-3.0 * margin).exp()) { 1.0 } else { -1.0 });
        rows.push(row);
    }
    let grid = synthetic::grid_of(&BLOCKS, &per_block, &targets, shard);
    Problem { grid, rows, targets, features }
}

/// `sigma' = K` (the scalar aggregation).
fn config(slots: u32, l2: f64, epochs: u32, gap: f64) -> CocoaConfig {
    CocoaConfig::new(Loss::Hinge, l2, slots, 1, epochs, gap, 5).unwrap().with_aggregation(Aggregation::Scalar).unwrap()
}

fn per_feature(config: CocoaConfig) -> CocoaConfig {
    config.with_aggregation(Aggregation::PerFeature).unwrap()
}

fn bits(cocoa: &Cocoa) -> Vec<u64> {
    cocoa.flat_weights().iter().map(|w| w.to_bits()).collect()
}

/// How many of `layout`'s slots hold each feature, counted from the plain rows.
fn spread_of(problem: &Problem, layout: &layout::Layout) -> Vec<u32> {
    let mut spread = vec![0u32; problem.features];
    for k in 0..layout.slots() {
        let mut holds = vec![false; problem.features];
        layout.slot_rows(k).for_each(|i| problem.rows[i].iter().for_each(|&(j, _)| holds[j] = true));
        holds.iter().zip(&mut spread).filter(|h| *h.0).for_each(|(_, s)| *s += 1);
    }
    spread
}

#[test]
fn the_slots_count_exactly_how_many_of_them_hold_each_feature() {
    let problem = local_problem(1, 600, 90);
    for slots in [2, 4, 8] {
        let mut cocoa = Cocoa::for_grid(per_feature(config(slots, 3.0, 10, 0.0)), &problem.grid).unwrap();
        let mut runner = LocalRunner::new(cocoa.kernel().clone(), &problem.grid, 2);
        let counted = cocoa.spread(&mut runner).unwrap();
        let expected = spread_of(&problem, cocoa.kernel().layout());
        assert_eq!(counted, expected, "K={slots}");
        assert!(counted.contains(&1) && counted.contains(&slots), "K={slots}: {counted:?}");
    }
}

/// K = 1 per feature is the scalar run; so is a K whose slots all hold every feature.
#[test]
fn one_slot_or_one_weight_per_slot_gives_the_scalar_bits() {
    let problem = local_problem(2, 600, 90);
    let scalar = train(&problem, config(1, 3.0, 20, 0.0), 2);
    assert_eq!(bits(&train(&problem, per_feature(config(1, 3.0, 20, 0.0)), 2)), bits(&scalar));
    let shared = crate::synthetic::problem(Loss::Hinge, 3, 600, 90);
    let config =
        CocoaConfig::new(Loss::Hinge, 2.0, 4, 1, 20, 0.0, 3).unwrap().with_aggregation(Aggregation::Scalar).unwrap();
    let cocoa = Cocoa::for_grid(config, &shared.grid).unwrap();
    assert!(spread_of(&shared, cocoa.kernel().layout()).iter().all(|&s| s == 4), "a feature some slot lacks");
    assert_eq!(bits(&train(&shared, per_feature(config), 2)), bits(&train(&shared, config, 2)));
}

/// Safe: the dual never falls (the slots' local problems add up to a lower bound of its
/// change), the run reaches relative gap 1e-6, at the scalar run's optimum, in no more
/// epochs than `sigma' = K`.
#[test]
fn per_feature_runs_ascend_and_reach_the_certificate_in_fewer_epochs() {
    let problem = local_problem(3, 800, 70);
    for slots in [2, 4, 8] {
        let scalar = train(&problem, config(slots, 2.0, 5000, 1e-6), 2);
        let cocoa = train(&problem, per_feature(config(slots, 2.0, 5000, 1e-6)), 2);
        let history = &cocoa.state().history;
        assert_eq!(cocoa.stop_reason(), Some(StopReason::GapReached), "K={slots}");
        assert!(
            history.windows(2).all(|w| w[1].dual >= w[0].dual - 1e-12 * w[0].primal.abs()),
            "K={slots}: the dual fell"
        );
        let (p, q) = (cocoa.progress().objective.unwrap(), scalar.progress().objective.unwrap());
        assert!(relative(p, q) <= 2e-6, "K={slots}: primal {p} vs the scalar run's {q}");
        println!("K={slots}: {} epochs per feature, {} with sigma' = K", cocoa.state().epoch, scalar.state().epoch);
        assert!(cocoa.state().epoch < scalar.state().epoch, "K={slots}: no fewer epochs");
    }
}

/// Slots rebuilt from the committed duals (their weights recomputed) and a restarted master
/// (the spread recounted) give the undisturbed run's bytes; so do elastic scale-ins, where
/// the spread is recounted for the merged slots.
#[test]
fn rebuilt_slots_a_restarted_master_and_scale_ins_repeat_bit_for_bit() {
    let problem = local_problem(4, 600, 90);
    let config = per_feature(config(4, 1.0, 30, 0.0));
    let undisturbed = train(&problem, config, 2);
    let mut cocoa = Cocoa::for_grid(config, &problem.grid).unwrap();
    let mut runner = LocalRunner::new(cocoa.kernel().clone(), &problem.grid, 2);
    for epoch in 0..30 {
        cocoa.next_iter(&mut runner, Recovery::Needed).unwrap();
        if epoch % 7 == 2 {
            runner.restore_all(&cocoa.mirror()).unwrap();
        }
        if epoch == 15 {
            let mut restarted = Cocoa::for_grid(config, &problem.grid).unwrap();
            restarted.set_state(cocoa.state().clone());
            cocoa = restarted;
        }
    }
    assert_eq!(encode(undisturbed.state()), encode(cocoa.state()));
    assert_eq!(bits(&undisturbed), bits(&cocoa));

    let elastic = |c: CocoaConfig| c.with_elastic(ElasticConfig::chicle(1, Clock::Epochs).unwrap()).unwrap();
    let config = elastic(per_feature(self::config(8, 1.0, 3000, 1e-7)));
    let one = train(&problem, config, 1);
    let state = one.state();
    assert_eq!(one.stop_reason(), Some(StopReason::GapReached));
    assert!(!state.scale_ins.is_empty(), "no scale-in in {} epochs", state.epoch);
    assert!(state.history.windows(2).all(|w| w[1].dual >= w[0].dual - 1e-12 * w[0].primal.abs()));
    assert_eq!(encode(state), encode(train(&problem, config, 3).state()));
    let scalar = train(&problem, elastic(self::config(8, 1.0, 3000, 1e-7)), 2);
    assert!(relative(one.progress().objective.unwrap(), scalar.progress().objective.unwrap()) <= 2e-7);
}

/// Per feature is the default; a sigma cap is the scalar aggregation, and refuses to be
/// combined with per-feature weights.
#[test]
fn per_feature_is_the_default_and_a_sigma_cap_is_scalar() {
    let default = CocoaConfig::new(Loss::Hinge, 1.0, 4, 1, 10, 0.0, 0).unwrap();
    assert_eq!(default.aggregation(), Aggregation::PerFeature);
    assert!(default.per_feature(4) && !default.per_feature(1));
    let capped = default.with_sigma_cap(2.0).unwrap();
    assert_eq!(capped.aggregation(), Aggregation::Scalar);
    assert!(capped.with_aggregation(Aggregation::PerFeature).is_err());
    assert!(capped.with_aggregation(Aggregation::Scalar).is_ok());
}
