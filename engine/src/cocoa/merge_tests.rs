//! A scale-in's merged slot built from its old slots' rows ([`Kernel::merge`]) is the slot a
//! fresh gathering from the grid gives, field by field, and a run that merges is the same
//! bytes as one that regathers every merged slot.

use super::rows::SlotRows;
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

/// A merged slot's model in its base: `w` (zeros here, as a fresh slot's) when the new
/// kernel has one slot ([`super::solo`]), none otherwise.
fn lone_model(new: &CocoaKernel) -> Vec<f64> {
    match new.units() {
        1 => vec![0.0; new.features()],
        _ => Vec::new(),
    }
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
                    let alpha: Vec<f64> = (0..new.layout().slot_rows(unit).len()).map(|i| i as f64 * 0.25).collect();
                    let base = SlotBase { alpha: alpha.clone(), w: lone_model(&new) };
                    let parts = states[range].to_vec();
                    let by_merge = new.merge(unit, &base, parts, &grid).unwrap();
                    let mut gathered = new.fresh(unit, &grid).unwrap();
                    gathered.alpha = alpha;
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

/// A scale-in on the distributed runtime: each old slot's rows travel as bytes
/// ([`Kernel::encode_part`]) from the worker that held it to the one that merges them
/// ([`Kernel::decode_part`]); the merged slot is the one a fresh gathering gives, field by
/// field, on every kind of grid and for slots without rows (empty slots).
#[test]
fn parts_handed_over_as_bytes_merge_into_the_gathered_slot() {
    for (name, grid) in grids(600, 90).into_iter().chain(grids(5, 2)) {
        let (old, new) = (kernel(&grid, 8, 8), kernel(&grid, 2, 8));
        for unit in 0..new.units() {
            let range = new.merges_from(&old, unit).expect("a scale-in merges");
            let parts: Vec<SlotState> = range
                .map(|u| {
                    let bytes = old.encode_part(&old.fresh(u, &grid).unwrap()).expect("gathered rows");
                    new.decode_part(&bytes).unwrap()
                })
                .collect();
            let alpha: Vec<f64> = (0..new.layout().slot_rows(unit).len()).map(|i| i as f64 - 0.5).collect();
            let base = SlotBase { alpha: alpha.clone(), w: lone_model(&new) };
            let merged = new.merge(unit, &base, parts, &grid).unwrap();
            let mut gathered = new.fresh(unit, &grid).unwrap();
            gathered.alpha = alpha;
            assert!(merged.rows().is_some(), "{name}: slot {unit} merged its parts' rows");
            assert_eq!(merged, gathered, "{name}: slot {unit}");
        }
        // A slot never run holds no rows: nothing to hand over (the taker reads storage).
        let never_run = SlotBase { alpha: vec![0.0; old.layout().slot_rows(0).len()], w: Vec::new() };
        assert_eq!(old.encode_part(&old.restore(0, &never_run, &grid).unwrap()), None);
    }
}

/// Rows that arrive damaged are refused with an error, never merged: every way a part can
/// break what the solver indexes by, and bytes that are not a part at all.
#[test]
fn damaged_parts_are_refused() {
    let grid = problem_grid(600, 90);
    let (old, new) = (kernel(&grid, 8, 8), kernel(&grid, 2, 8));
    let rows = old.fresh(1, &grid).unwrap().rows().unwrap().clone();
    assert!(rows.csr().2.is_some() && rows.len() > 2, "real values, several rows");
    let part = |rows: &SlotRows| new.decode_part(&encode(rows));
    assert!(part(&rows).is_ok());
    let features = new.features() as u32;
    type Damage = Box<dyn Fn(&mut SlotRows)>;
    let damages: Vec<(&str, Damage)> = vec![
        ("a row too many", Box::new(|r| r.targets.push(1.0))),
        ("a local feature out of range", Box::new(|r| r.features[0] = r.globals.len() as u32)),
        ("a global feature out of range", Box::new(move |r| *r.globals.last_mut().unwrap() = features)),
        ("globals out of order", Box::new(|r| r.globals.swap(0, 1))),
        ("starts not ascending", Box::new(|r| r.starts[1] = r.starts[2] + 1)),
        ("a missing value", Box::new(|r| _ = r.values.as_mut().unwrap().pop())),
        ("values all ones", Box::new(|r| r.values.as_mut().unwrap().iter_mut().for_each(|x| *x = 1.0))),
        ("a norm not finite", Box::new(|r| r.norms[0] = f64::NAN)),
    ];
    for (what, damage) in damages {
        let mut broken = rows.clone();
        damage(&mut broken);
        let refused = part(&broken).expect_err(what);
        assert!(refused.to_string().contains("a slot's rows"), "{what}: {refused}");
    }
    assert!(new.decode_part(b"not rows").is_err());
    assert!(new.decode_part(&encode(&rows)[..10]).is_err(), "truncated");
}
