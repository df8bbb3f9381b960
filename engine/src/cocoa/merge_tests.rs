//! A scale-in's merged slot built from its old slots' rows ([`Kernel::merge`]) is the slot a
//! fresh gathering from the grid gives, field by field, and a run that merges is the same
//! bytes as one that regathers every merged slot.

use super::tests::{problem, train_keeping_steps, weights_bits};
use super::*;
use crate::algorithm::{Algorithm, Kernel, encode};
use crate::grid::{CellValues, InMemoryGrid};
use crate::loss::Loss;
use crate::synthetic::BLOCKS;

const REAL_BLOCK: usize = 3; // the synthetic grid's one real-valued block

fn kernel(grid: &InMemoryGrid, slots: u32, partitions: u32) -> CocoaKernel {
    let config = CocoaConfig::new(Loss::Hinge, 0.1, slots, 1, 1, 0.0, 3).unwrap().with_partitions(partitions).unwrap();
    Cocoa::for_grid(config, grid).unwrap().kernel().clone()
}

/// The synthetic grid three ways: real values in every slot; binary (the real block
/// dropped: every slot's rows are all ones, stored without values); and mixed (the real
/// block's first shards made binary, so some old slots carry values and some do not).
fn grids(rows: usize, shard: usize) -> Vec<(&'static str, InMemoryGrid)> {
    let real = problem_grid(rows, shard);
    let mut binary = real.clone();
    binary.cells.remove(REAL_BLOCK);
    binary.shapes.remove(REAL_BLOCK);
    let mut mixed = real.clone();
    let shards = mixed.cells[REAL_BLOCK].len();
    for cell in &mut mixed.cells[REAL_BLOCK][..shards / 2] {
        cell.values = CellValues::Ones;
    }
    vec![("real", real), ("binary", binary), ("mixed", mixed)]
}

fn problem_grid(rows: usize, shard: usize) -> InMemoryGrid {
    crate::synthetic::problem(Loss::Hinge, 21, rows, shard).grid
}

/// Every step of 8 -> 4 -> 2 -> 1 and 6 -> 3 -> 1, on slots whose boundaries fall inside
/// shards, and on a grid with fewer rows than partitions (empty slots).
#[test]
fn merged_slots_equal_gathered_ones_field_by_field() {
    let cases: [(usize, usize, &[u32]); 3] = [(600, 90, &[8, 4, 2, 1]), (600, 90, &[6, 3, 1]), (5, 2, &[8, 2, 1])];
    for (rows, shard, path) in cases {
        for (name, grid) in grids(rows, shard) {
            let partitions = path[0];
            let mut old = kernel(&grid, path[0], partitions);
            let mut states: Vec<SlotState> = (0..old.units()).map(|u| old.fresh(u, &grid).unwrap()).collect();
            for &slots in &path[1..] {
                let new = kernel(&grid, slots, partitions);
                let mut merged = Vec::new();
                for unit in 0..new.units() {
                    let range = new.merges_from(&old, unit).expect("a scale-in merges");
                    assert_eq!(range.len(), old.units() / new.units());
                    let base: Vec<f64> = (0..new.layout().slot_rows(unit).len()).map(|i| i as f64 * 0.25).collect();
                    let parts = states[range].to_vec();
                    let by_merge = new.merge(unit, &base, parts, &grid).unwrap();
                    let mut gathered = new.fresh(unit, &grid).unwrap();
                    gathered.alpha = base.clone();
                    let what = format!("{name}, {rows} rows: slot {unit} of {} -> {slots}", old.units());
                    let (m, g) = (by_merge.rows().expect("merged rows"), gathered.rows().expect("gathered rows"));
                    assert_eq!(m.csr(), g.csr(), "{what}: CSR");
                    assert_eq!(m.globals, g.globals, "{what}: local numbering");
                    assert_eq!(m.targets, g.targets, "{what}: targets");
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&m.norms), bits(&g.norms), "{what}: norms");
                    assert_eq!(by_merge, gathered, "{what}: the whole state");
                    merged.push(by_merge);
                }
                old = new;
                states = merged;
            }
        }
    }
    // The mixed grid really mixes: under 8 slots some carry values and some do not.
    let (_, mixed) = grids(600, 90).pop().unwrap();
    let eight = kernel(&mixed, 8, 8);
    let kinds: Vec<bool> = (0..8).map(|u| eight.fresh(u, &mixed).unwrap().rows().unwrap().csr().2.is_some()).collect();
    assert!(kinds.contains(&true) && kinds.contains(&false), "{kinds:?}");
    assert_eq!(BLOCKS[REAL_BLOCK], 1);
}

/// A kernel that is not a scale-in of the old one (other rows, other blocks, more slots)
/// merges nothing: its slots are rebuilt from the grid.
#[test]
fn only_a_scale_in_of_the_same_grid_merges() {
    let grid = problem_grid(600, 90);
    let eight = kernel(&grid, 8, 8);
    assert_eq!(kernel(&grid, 2, 8).merges_from(&eight, 1), Some(4..8));
    assert_eq!(kernel(&grid, 8, 8).merges_from(&kernel(&grid, 2, 8), 0), None, "scale-out");
    assert_eq!(kernel(&grid, 3, 6).merges_from(&kernel(&grid, 2, 6), 0), None, "3 does not divide 2");
    assert_eq!(kernel(&grid, 2, 8).merges_from(&kernel(&grid, 8, 16), 0), None, "other partitions");
    assert_eq!(kernel(&problem_grid(601, 90), 2, 8).merges_from(&eight, 0), None, "other rows");
    let mut binary = grid.clone();
    binary.cells.remove(REAL_BLOCK);
    binary.shapes.remove(REAL_BLOCK);
    assert_eq!(kernel(&binary, 2, 8).merges_from(&eight, 0), None, "other blocks");
}

/// Elastic runs whose merged slots are built from the old slots' rows (the runner's
/// `reconfigure`) and runs whose merged slots are all rebuilt from the grid right after each
/// scale-in give the same bytes, for hinge and logistic loss.
#[test]
fn scale_ins_by_merge_give_the_bytes_of_regathered_slots() {
    for (loss, seed) in [(Loss::Hinge, 9), (Loss::Logistic, 8)] {
        let problem = problem(loss, seed);
        let config = CocoaConfig::new(loss, 0.05, 8, 1, 3000, 1e-7, 11)
            .unwrap()
            .with_elastic(ElasticConfig::chicle(1, Clock::Epochs).unwrap())
            .unwrap();
        let mut checked = 0;
        let (merged, steps) = train_keeping_steps(&problem, config, |cocoa, runner| {
            if cocoa.state().scale_ins.last().is_some_and(|s| s.epoch == cocoa.state().epoch) {
                // Built from the old slots' rows: a restored slot would have none yet.
                assert!(runner.states().all(|s| s.and_then(SlotState::rows).is_some()), "{loss:?}");
                checked += 1;
            }
        });
        assert!(checked >= 2, "{loss:?}: {checked} scale-ins");
        assert_eq!(steps.iter().filter(|s| s.scale_in.is_some()).count(), checked);
        let (regathered, _) = train_keeping_steps(&problem, config, |cocoa, runner| {
            if cocoa.state().scale_ins.last().is_some_and(|s| s.epoch == cocoa.state().epoch) {
                runner.restore_all(&cocoa.mirror()).unwrap();
                assert!(runner.states().all(|s| s.and_then(SlotState::rows).is_none()), "{loss:?}");
            }
        });
        assert_eq!(encode(merged.state()), encode(regathered.state()), "{loss:?}");
        assert_eq!(weights_bits(&merged), weights_bits(&regathered), "{loss:?}");
    }
}
