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

fn finish_tree(s: &mut Scheduler, nodes: &[(WorkerKey, u64, proto::TreeItem)], total: &[i128], units: u32) -> Outbox {
    let mut out = Outbox::new();
    for (w, id, item) in nodes {
        let sums = if item.parent.is_empty() { super::super::wire::from_i128s(total) } else { Vec::new() };
        let digest = chunks::digest(total);
        out.extend(s.complete(*w, vec![proto::ItemResult { item: *id, sums, digest, units, ..Default::default() }]));
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
        nodes.extend(tree_items(&items(&s.complete(w, vec![proto::ItemResult { item: id, ..Default::default() }]))));
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
        nodes.extend(tree_items(&items(&s.complete(w, vec![proto::ItemResult { item: id, ..Default::default() }]))));
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
    let keys: Vec<WorkerKey> = ["a", "b"].iter().map(|n| s.join(n.to_string(), format!("http://{n}"), 1).0).collect();
    let (result, sent) = start(&mut s, Collect::Tree(1));
    let mut nodes = Vec::new();
    for (w, id, _) in sent {
        nodes.extend(tree_items(&items(&s.complete(w, vec![proto::ItemResult { item: id, ..Default::default() }]))));
    }
    let (w, id, _) = &nodes[1];
    let again =
        tree_items(&items(&s.complete(*w, vec![proto::ItemResult { item: *id, aborted: true, ..Default::default() }])));
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
    let sent = s.reconfigure(2, job, vec![None, None], String::new());
    assert_eq!(kinds(&sent), keys.iter().map(|&k| (k, "job")).collect::<Vec<_>>());
    assert_eq!((s.owner.len(), s.prior.len()), (2, 2));
    assert!(s.owner.iter().chain(&s.prior).all(Option::is_none), "merged units are rebuilt from the master");
    let sent = s.set_desired(Some(2), 1);
    let released: Vec<_> = kinds(&sent).into_iter().filter(|(_, kind)| *kind != "assignment").collect();
    assert_eq!(released, [(keys[2], "drain"), (keys[2], "release"), (keys[3], "drain"), (keys[3], "release")]);
    assert_eq!(s.released_for(1), ["c", "d"]);
    assert!(s.set_desired(Some(2), 1).is_empty(), "released once");
    let (e, sent) = s.join("e".into(), "http://e".into(), 1);
    assert_eq!(kinds(&sent)[..2], [(e, "drain"), (e, "release")], "a newcomer beyond the count goes at once");
    // ... under the decision in force when it joined, whichever step released it.
    assert_eq!(s.released_for(1), ["c", "d", "e"]);
    let (_, sent) = start(&mut s, Collect::Sums(1));
    assert!(sent.iter().all(|(w, _, _)| keys[..2].contains(w)), "the two kept workers run the two units");
    run_all(&mut s, sent);
    // The next decision (2 -> 1) releases the newer kept worker, under its own number.
    let sent = s.set_desired(Some(1), 2);
    assert_eq!(kinds(&sent).iter().filter(|(_, kind)| *kind == "drain").collect::<Vec<_>>(), [&(keys[1], "drain")]);
    assert_eq!(s.released_for(1), ["c", "d", "e"]);
    assert_eq!(s.released_for(2), ["b"]);
    assert_eq!(s.released_ids(), ["c", "d", "e", "b"]);
    // Without a wanted count (SCD, static CoCoA) nobody is surplus.
    assert!(s.set_desired(None, 0).is_empty());
    assert_eq!(
        s.join("f".into(), "http://f".into(), 1)
            .1
            .iter()
            .filter(|(_, m)| matches!(m.body, Some(master_message::Body::Release(_))))
            .count(),
        0
    );
}

/// A scale-in that merges units: each merged unit's first item says where its old units
/// are (in merge order, with the old session), the surplus workers that hold some are
/// drained but released only once the units that want their parts ran, and a holder lost
/// before that takes its parts with it (the unit reads storage).
#[test]
fn merged_units_fetch_their_parts_from_the_old_owners_who_stay_until_then() {
    let mut s = Scheduler::new(8);
    let keys: Vec<WorkerKey> =
        ["a", "b", "c", "d"].iter().map(|n| s.join(n.to_string(), format!("http://{n}"), 1).0).collect();
    let (_, sent) = start(&mut s, Collect::Sums(1));
    run_all(&mut s, sent);
    let old_owner: Vec<WorkerKey> = s.owner.iter().map(|o| o.unwrap()).collect();
    let job = message(master_message::Body::Job(proto::JobInfo::default()));
    s.reconfigure(2, job, vec![Some(0..4), Some(4..8)], "old".into());
    let sent = s.set_desired(Some(2), 1);
    // c and d are drained, not released: the merged units want the parts they hold.
    let drained: Vec<_> = kinds(&sent).into_iter().filter(|(_, kind)| *kind != "assignment").collect();
    assert_eq!(drained, [(keys[2], "drain"), (keys[3], "drain")]);
    let (_, sent) = start(&mut s, Collect::Sums(1));
    assert_eq!(sent.len(), 2);
    let address = |k: WorkerKey| s.workers[&k].address.clone();
    for (_, _, kind) in &sent {
        let work_item::Kind::Unit(item) = kind else { panic!("{kind:?}") };
        let olds = item.unit * 4..item.unit * 4 + 4;
        let want: Vec<proto::PartSource> =
            olds.map(|u| proto::PartSource { unit: u, address: address(old_owner[u as usize]) }).collect();
        assert_eq!((item.parts.clone(), item.parts_session.as_str()), (want, "old"), "unit {}", item.unit);
    }
    // Once the first merged unit ran, the drained workers that hold no part of the other
    // one go; the rest once that one ran too.
    let releases = |outbox: &Outbox| {
        let mut released: Vec<WorkerKey> =
            kinds(outbox).into_iter().filter(|(_, kind)| *kind == "release").map(|(k, _)| k).collect();
        released.sort();
        released
    };
    let (w, id, kind) = sent[0].clone();
    let other = 1 - unit_of(&kind) as usize;
    let wanted: Vec<WorkerKey> = (other * 4..other * 4 + 4).map(|u| old_owner[u]).collect();
    let first: Vec<WorkerKey> = keys[2..].iter().copied().filter(|k| !wanted.contains(k)).collect();
    assert_eq!(releases(&s.complete(w, vec![done(id, 1)])), first);
    let (w, id, _) = sent[1].clone();
    let mut all = first.clone();
    all.extend(releases(&s.complete(w, vec![done(id, 1)])));
    all.sort();
    assert_eq!(all, keys[2..], "both units built: every drained holder goes");

    // Another scale-in (2 -> 1) whose holder b is lost before the merged unit runs.
    let job = message(master_message::Body::Job(proto::JobInfo::default()));
    s.reconfigure(1, job, vec![Some(0..2)], "older".into());
    assert_eq!(s.handover[0].len(), 2);
    let lost = s.handover[0].iter().map(|&(_, k)| k).find(|&k| k == keys[1]).expect("b held a part");
    s.lose(lost);
    let (_, sent) = start(&mut s, Collect::Sums(1));
    let work_item::Kind::Unit(item) = &sent[0].2 else { panic!() };
    assert!(item.parts.is_empty() && item.parts_session.is_empty(), "{item:?}");
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

/// An elastic run's first items wait for the workers it starts with, so its first scale-in
/// releases workers that are there rather than ones still to join.
#[test]
fn the_first_items_wait_for_the_workers_a_run_starts_with() {
    let mut s = Scheduler::new(4);
    s.start_with(StartGate { workers: 3, patience: Duration::MAX });
    s.join("a".into(), "http://a".into(), 1);
    let (_, sent) = start(&mut s, Collect::Sums(1));
    assert!(sent.is_empty(), "one worker of three: nothing is sent yet");
    assert!(items(&s.join("b".into(), "http://b".into(), 1).1).is_empty(), "two of three");
    let (_, sent) = s.join("c".into(), "http://c".into(), 1);
    assert_eq!(items(&sent).len(), 3, "the third opens it: one item for each worker");
}

/// A worker that never joins delays the start by the gate's patience, not for ever: the
/// clock's tick past the deadline opens it for the workers that are there.
#[test]
fn a_start_gate_opens_for_the_workers_present_when_its_patience_runs_out() {
    let (mut s, clock) = timed(4);
    s.start_with(StartGate { workers: 3, patience: Duration::from_millis(500) });
    s.join("a".into(), "http://a".into(), 1);
    s.join("b".into(), "http://b".into(), 1);
    let (_, sent) = start(&mut s, Collect::Sums(1));
    assert!(sent.is_empty(), "two of three, within the patience: nothing is sent");
    clock.store(499, SeqCst);
    assert!(items(&s.tick()).is_empty(), "still within the patience");
    clock.store(500, SeqCst);
    assert_eq!(items(&s.tick()).len(), 2, "the deadline opens the gate: one item for each worker there");
    assert!(items(&s.join("c".into(), "http://c".into(), 1).1).len() == 1, "a late joiner takes work as usual");
}
