//! Elastic CoCoA end to end: `linea train --algorithm cocoa --elastic` on real data scales in
//! where Chicle's policy finds a knee in the duality gap, reaches the gap tolerance, and (on
//! the epoch clock) gives the same bytes on a repeat, in one process and on worker processes,
//! and through kill -9 of a worker and of the master in the middle of the scale-ins.
//! Waits are on observable state (the master's status, process exits), never on time.

mod common;

use common::job::Job;
use common::processes::*;

/// One row of the trace CSV: epoch, relative gap, workers wanted.
struct TracePoint {
    epoch: u32,
    gap: f64,
    workers: u32,
}

fn read_trace(file: &str) -> Vec<TracePoint> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("epoch,seconds,objective,gap,relative_gap,workers"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            TracePoint { epoch: f[0].parse().unwrap(), gap: f[4].parse().unwrap(), workers: f[5].parse().unwrap() }
        })
        .collect()
}

/// Chicle's lambda = 0.01 in `(1/n) sum hinge + (lambda/2) |w|^2`, in linea's
/// `sum hinge + l2 |w|^2`: l2 = n lambda / 2.
fn chicle_l2(rows: usize) -> String {
    (rows as f64 * 0.01 / 2.0).to_string()
}

#[test]
fn elastic_hinge_runs_scale_in_reach_the_gap_and_repeat_bit_for_bit() {
    let sets = [("higgs-sample/higgs.train.tsv", "csv", 7000), ("rcv1-small/rcv1_small.vw", "vw", 1000)];
    for (input, format, rows) in sets {
        let dir = tempfile::tempdir().unwrap();
        let grid = prepare_grid(dir.path(), input, format, "500");
        let l2 = chicle_l2(rows);
        let train = |name: &str, extra: &[&str]| {
            let (model, trace) = (path(dir.path(), name), path(dir.path(), &format!("{name}.csv")));
            let mut args = vec!["train", "--data", &grid, "--model", &model, "--trace", &trace];
            args.extend_from_slice(&["--algorithm", "cocoa", "--loss", "hinge", "--l2", &l2, "--epochs", "20000"]);
            args.extend_from_slice(&[
                "--slots",
                "8",
                "--elastic",
                "--elastic-clock",
                "epochs",
                "--gap-tolerance",
                "1e-6",
            ]);
            args.extend_from_slice(extra);
            ok(&args);
            (std::fs::read(&model).unwrap(), read_trace(&trace))
        };
        let (model, trace) = train("one", &["--threads", "2"]);
        let counts: Vec<(u32, u32)> =
            trace.windows(2).filter(|w| w[0].workers != w[1].workers).map(|w| (w[1].epoch, w[1].workers)).collect();
        let last = trace.last().unwrap();
        println!("{input}: {} epochs, gap {:.2e}, scale-ins (epoch, slots) {counts:?}", last.epoch, last.gap);
        assert_eq!(trace[1].workers, 8, "{input}: starts at 8 slots");
        assert!(!counts.is_empty(), "{input}: no scale-in in {} epochs", last.epoch);
        assert!(trace.windows(2).all(|w| w[1].workers <= w[0].workers), "{input}: the count only falls");
        assert!(last.gap <= 1e-6, "{input}: gap {} at the end", last.gap);
        let (again, _) = train("again", &["--threads", "1"]);
        assert!(again == model, "{input}: a repeat on the epoch clock gives other bytes");
        let (processes, _) = train("processes", &["--workers", "3"]);
        assert!(processes == model, "{input}: 3 worker processes give other bytes than one process");
    }
}

/// kill -9 of a worker and of the master between scale-ins: the restarted master replays the
/// recorded decisions from its checkpoint and the run ends with the undisturbed model; the
/// workers the master no longer needs are released and exit 0 (which ones, exactly, is the
/// scheduler's unit test).
#[test]
fn scale_in_decisions_survive_kill_9_of_a_worker_and_of_the_master() {
    let dir = tempfile::tempdir().unwrap();
    let grid = prepare_grid(dir.path(), "a9a/a9a.train.libsvm", "libsvm", "2000");
    // a9a's hinge gap closes slowly at K = 1 (thousands of epochs): time enough to disturb.
    let params = [
        "--algorithm",
        "cocoa",
        "--loss",
        "hinge",
        "--slots",
        "16",
        "--elastic",
        "--elastic-clock",
        "epochs",
        "--gap-tolerance",
        "1e-6",
        "--epochs",
        "100000",
    ];
    let reference = path(dir.path(), "reference");
    ok(&[&["train", "--data", &grid, "--model", &reference, "--threads", "2"], &params[..]].concat());

    let listen = format!("127.0.0.1:{}", free_port());
    let (model, checkpoint) = (path(dir.path(), "model"), path(dir.path(), "checkpoint"));
    let mut job = Job::start(dir.path(), Cluster::new(&listen), &grid, &model, &checkpoint, &params);
    job.add_workers(6);
    // 16 slots on 6 workers: nobody is surplus until the first scale-in (16 -> 4).
    let s = job.wait_for("the first scale-in", |s| s.desired_workers.is_some_and(|d| d < 16));
    // Each decision is listed, numbered, with why and whom it released: 16 -> 4 on 6 workers
    // releases the newest 2 (fewer if some joined after it: those are released on joining,
    // listed in released_workers only).
    let first = &s.scaling_decisions[0];
    assert_eq!((first.number, first.from_workers, first.to_workers), (1, 16, 4), "{:?}", s.scaling_decisions);
    assert!(first.reason.ends_with(": 16 -> 4"), "the status says why: {first:?}");
    assert!(first.released_workers.len() <= 2, "{first:?}");
    assert!(first.released_workers.iter().all(|w| s.released_workers.contains(w)), "{s:?}");
    let s = job.wait_for("surplus workers released", |s| s.released_workers.len() >= 2);
    let exited: Vec<bool> = job.workers.iter_mut().map(|w| w.try_wait().unwrap().is_some()).collect();
    assert!(exited.iter().filter(|&&e| e).count() <= s.released_workers.len(), "only released workers exit");

    // kill -9 a worker that is still running, then the master; a new worker joins.
    job.kill_worker(exited.iter().position(|&e| !e).unwrap());
    let before = job.wait_for("progress after the kill", |t| t.epoch > s.epoch + 5).scaling_decisions;
    job.kill_master();
    job.add_workers(1);
    job.start_master();
    let s = job.wait_for("the restarted master", |t| t.desired_workers.is_some());
    assert!(s.desired_workers.unwrap() < 16, "the restarted master replayed the scale-in: {s:?}");
    // It lists the decisions it replayed with the same numbers and reasons (a follower acts
    // on each number once), without released workers: an earlier master released them.
    let replayed = &s.scaling_decisions;
    assert!(replayed.len() >= before.len(), "{before:?} vs {replayed:?}");
    for (old, new) in before.iter().zip(replayed) {
        assert_eq!(
            (new.number, new.epoch, new.from_workers, new.to_workers),
            (old.number, old.epoch, old.from_workers, old.to_workers)
        );
        assert_eq!(new.reason, old.reason);
        assert!(new.released_workers.is_empty(), "{new:?}");
    }
    // Every worker not killed exits 0: released by the scale-in or at the end.
    let log = job.finish();
    assert!(log.contains("resuming from checkpoint"), "{log}");
    assert!(
        std::fs::read(&model).unwrap() == std::fs::read(&reference).unwrap(),
        "the disturbed elastic run's model differs from the undisturbed one"
    );
}
