//! A restarted master survives checkpoint objects cut short, as an S3-compatible server
//! leaves them when it commits the part of an upload that arrived before its client was
//! SIGKILLed (s3s-fs does; the cluster journey's master kill hit it): the last step, then
//! the newest base. Each is passed over with a line in the master's log, and the run ends
//! with the undisturbed run's model bytes.

mod common;

use common::job::A9aRun;
use common::processes::*;
use std::path::Path;

/// The first half of a file: what a cut upload leaves.
fn cut_short(file: &Path) {
    let bytes = std::fs::read(file).unwrap();
    std::fs::write(file, &bytes[..bytes.len() / 2]).unwrap();
}

/// `next_step` of a base, from its header line.
fn next_step(base: &Path) -> u64 {
    let bytes = std::fs::read(base).unwrap();
    let line = &bytes[..bytes.iter().position(|&b| b == b'\n').unwrap()];
    serde_json::from_slice::<serde_json::Value>(line).unwrap()["next_step"].as_u64().unwrap()
}

/// The base slots by age (newest first) and the highest step written after the newest.
fn objects(checkpoint: &Path) -> (Vec<std::path::PathBuf>, Option<u64>) {
    let mut bases: Vec<_> = ["base-a", "base-b"].iter().map(|b| checkpoint.join(b)).filter(|b| b.exists()).collect();
    bases.sort_by_key(|b| std::cmp::Reverse(next_step(b)));
    let after = bases.first().map_or(0, |b| next_step(b));
    let last_step = std::fs::read_dir(checkpoint)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_prefix("step-")?.parse::<u64>().ok())
        .filter(|&n| n >= after)
        .max();
    (bases, last_step)
}

#[test]
fn a_cut_short_last_step_and_newest_base_are_passed_over_with_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = A9aRun::start(dir.path(), Cluster::new);
    let ck = &std::path::PathBuf::from(&run.checkpoint);
    let job = &mut run.job;
    job.add_workers(2);

    // The last step cut short. A base may land between the check and the kill, leaving no
    // step after it: then the master goes on a little and is killed again (bounded).
    let mut cut_step = None;
    for _ in 0..20 {
        let s = job.wait_for("both base slots and a step after them", |s| {
            let (bases, step) = objects(ck);
            bases.len() == 2 && step.is_some() && s.iteration > 0
        });
        job.kill_master();
        if let (_, Some(step)) = objects(ck) {
            cut_short(&ck.join(format!("step-{step}")));
            cut_step = Some(step);
            job.start_master();
            break;
        }
        job.start_master();
        job.wait_for("progress", |t| t.iteration > s.iteration);
    }
    let cut_step = cut_step.expect("a step after the newest base at one of 20 kills");
    let s = job.wait_for("progress after the cut step", |s| s.iteration > 0);
    let log = job.master_log();
    assert!(log.contains("ignored as damaged") && log.contains(&format!("step-{cut_step}")), "{log}");
    assert!(resumed_version(&log) > 0, "resumed mid-run: {log}");

    // The newest base cut short: the other slot is used.
    job.wait_for("more progress", |t| t.iteration > s.iteration + 100);
    job.kill_master();
    let (bases, _) = objects(ck);
    assert_eq!(bases.len(), 2, "both slots written");
    cut_short(&bases[0]);
    job.start_master();
    let log = job.finish();
    let name = bases[0].file_name().unwrap().to_str().unwrap();
    assert!(log.contains("ignored as damaged") && log.contains(name), "{log}");
    resumed_version(&log); // the older base was loaded ("resuming from checkpoint: ...")
    assert!(run.same_model(), "the model differs from the undisturbed one");
}
