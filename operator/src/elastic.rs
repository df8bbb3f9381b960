//! Elastic CoCoA on the operator's side: which worker pods an elastic job runs, given what its
//! master released. Pure functions of the job, its status and the master's report; `plan`
//! calls them and carries nothing else of elasticity.
//!
//! The master decides (its policy, `linea master --elastic`), the operator follows:
//! - The job starts with `workers.replicas` slots and one worker pod per slot, indices
//!   `0..slots`; the slot count is recorded (status.elastic.slots) and every master of the
//!   job gets it, so a restarted master replays its checkpoint's scale-ins.
//! - A scale-in releases the newest surplus workers; the master lists their ids
//!   (`<pod name>-<8 hex>`: a worker's id starts with its hostname, a pod's hostname is its
//!   name). The operator records the pod names (status.elastic.released: a restarted master's
//!   own list starts empty), deletes each such pod once it ended, and never creates it again.
//!   It deletes no other pod for a scale-in: a released pod that is still running is
//!   draining, handing its slots over, and exits by itself.
//! - A worker pod that ended without failing (exit 0, preempted, evicted) and is not listed
//!   is replaced only if the master, asked in this same pass, wants more workers than the
//!   others alive: otherwise it was surplus (released just before a master restart, or
//!   preempted when a scale-in was due) and is recorded as released. The slot count only
//!   goes down, so a surplus pod stays surplus. Without a fresh answer from the master the
//!   operator waits rather than guess.
//! - `kubectl scale tj` sets the most worker pods the job runs (`workers.replicas`): the
//!   lowest-indexed unreleased pods up to that many. It never changes the slots (the model
//!   depends on them, not on how many pods serve them), so raising it above what the master
//!   wants adds no pod, and lowering it deletes the highest-indexed pods, whose slots the
//!   master moves to the others, as on a preemption.

use crate::desired;
use crate::plan::MasterProgress;
use kube::ResourceExt;
use linea_crds::{ElasticStatus, TrainingJob};

/// The pod of a released worker id, if it is one of the job's worker pods (index within its
/// slots): ids are `<hostname>-<8 hex digits>` and a pod's hostname is its name.
pub fn released_pod(job: &TrainingJob, slots: i32, id: &str) -> Option<String> {
    let (name, suffix) = id.rsplit_once('-')?;
    (suffix.len() == 8 && suffix.chars().all(|c| c.is_ascii_hexdigit())).then_some(())?;
    let index: i32 = name.strip_prefix(&format!("{}-worker-", job.name_any()))?.parse().ok()?;
    ((0..slots).contains(&index) && desired::worker_name(job, index) == name).then(|| name.to_string())
}

/// What merging a master's report changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    /// Pods newly recorded as released.
    pub released: Vec<String>,
    /// The master's scaling reason, when it is a new one (a new decision).
    pub decision: Option<String>,
    /// The master's desired count changed.
    pub desired_changed: bool,
}

impl Merged {
    /// Whether anything about the scale-in changed.
    pub fn changed(&self) -> bool {
        !self.released.is_empty() || self.decision.is_some() || self.desired_changed
    }
}

/// Merges the master's report into the job's elastic status: released pods are added, never
/// removed; the desired count and the reason follow the master's.
pub fn merge(status: &mut ElasticStatus, job: &TrainingJob, progress: Option<&MasterProgress>) -> Merged {
    let mut merged = Merged::default();
    let Some(p) = progress else { return merged };
    for id in &p.released_workers {
        if let Some(pod) = released_pod(job, status.slots, id)
            && !status.released.contains(&pod)
        {
            status.released.push(pod.clone());
            merged.released.push(pod);
        }
    }
    if let Some(desired) = p.desired_workers
        && status.desired != Some(desired)
    {
        status.desired = Some(desired);
        merged.desired_changed = true;
    }
    if p.scaling_reason.is_some() && p.scaling_reason != status.reason {
        status.reason = p.scaling_reason.clone();
        merged.decision = p.scaling_reason.clone();
    }
    merged
}

/// Indices of the worker pods the job runs: its slots without the released pods, at most
/// `replicas` of them (`kubectl scale`), lowest first.
pub fn wanted(job: &TrainingJob, slots: i32, released: &[String], replicas: i32) -> Vec<i32> {
    let unreleased = (0..slots).filter(|&i| !released.contains(&desired::worker_name(job, i)));
    unreleased.take(usize::try_from(replicas.max(0)).unwrap_or(0)).collect()
}

/// What to do about a worker pod that ended without failing and that the master did not
/// list as released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The master wants more workers than the others alive: a new pod takes its place.
    Replace,
    /// The master has every worker it wants without it: surplus, recorded as released.
    Surplus,
    /// No answer from the master in this pass: decide on a later one.
    Wait,
}

/// Decides about a worker pod that ended without failing, with `others_alive` of the job's
/// other wanted worker pods neither ended nor terminating.
pub fn ended(progress: Option<&MasterProgress>, others_alive: usize) -> Ended {
    match progress {
        None => Ended::Wait,
        Some(p) => match p.desired_workers {
            Some(d) if others_alive >= usize::try_from(d).unwrap_or(0) => Ended::Surplus,
            _ => Ended::Replace,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::tests::job;

    fn elastic_job() -> TrainingJob {
        job("datasetUri: s3://data/g\nmodelUri: s3://models/x\nworkers: {replicas: 8}\nalgorithm: {cocoa: {}}\n\
             elastic: {enabled: true, clock: epochs}\n")
    }

    #[test]
    fn a_released_id_names_one_of_the_jobs_worker_pods_or_nothing() {
        let j = elastic_job();
        assert_eq!(released_pod(&j, 8, "ads-worker-3-0a1b2c3d").as_deref(), Some("ads-worker-3"));
        assert_eq!(released_pod(&j, 8, "ads-worker-7-FFFFFFFF").as_deref(), Some("ads-worker-7"));
        for id in [
            "ads-worker-8-0a1b2c3d",   // beyond the slots
            "ads-worker-3",            // no suffix: "3" is not 8 hex digits
            "ads-worker-3-0a1b2c3",    // 7 digits
            "ads-worker-3-0a1b2c3g",   // not hex
            "ads-worker-+3-0a1b2c3d",  // not the pod's name
            "ads-worker-03-0a1b2c3d",  // not the pod's name
            "ads-master-0a1b2c3d",     // not a worker
            "other-worker-3-0a1b2c3d", // another job's
            "worker-0a1b2c3d",         // a worker without a hostname
        ] {
            assert_eq!(released_pod(&j, 8, id), None, "{id}");
        }
    }

    fn report(desired: i32, released: &[&str], reason: &str) -> MasterProgress {
        MasterProgress {
            desired_workers: Some(desired),
            released_workers: released.iter().map(|s| s.to_string()).collect(),
            scaling_reason: Some(reason.to_string()).filter(|r| !r.is_empty()),
            ..Default::default()
        }
    }

    #[test]
    fn merging_keeps_every_release_a_restarted_master_forgot() {
        let j = elastic_job();
        let mut s = ElasticStatus { slots: 8, ..Default::default() };
        let first = merge(&mut s, &j, Some(&report(8, &[], "")));
        assert!(first.desired_changed && first.released.is_empty() && first.decision.is_none());
        let why = "duality gap rate 0.3/epoch over the last 2 epochs vs 0.5/epoch since 8 workers: 8 -> 2";
        let ids = ["ads-worker-7-00000001", "ads-worker-2-00000002", "ads-worker-5-00000003"];
        let second = merge(&mut s, &j, Some(&report(2, &ids, why)));
        assert_eq!(second.released, ["ads-worker-7", "ads-worker-2", "ads-worker-5"]);
        assert_eq!(second.decision.as_deref(), Some(why));
        // The same report again: nothing new.
        assert!(!merge(&mut s, &j, Some(&report(2, &ids, why))).changed());
        // A restarted master: replayed desired count, empty list, same reason. The operator
        // still knows the released pods.
        let restarted = merge(&mut s, &j, Some(&report(2, &[], why)));
        assert!(!restarted.changed());
        assert_eq!(s.released, ["ads-worker-7", "ads-worker-2", "ads-worker-5"]);
        assert_eq!((s.desired, s.reason.as_deref()), (Some(2), Some(why)));
        // No master this pass: nothing changes.
        assert!(!merge(&mut s, &j, None).changed());
    }

    #[test]
    fn the_job_runs_its_unreleased_slots_up_to_replicas() {
        let j = elastic_job();
        let released: Vec<String> = ["ads-worker-7", "ads-worker-2", "ads-worker-5"].map(String::from).into();
        assert_eq!(wanted(&j, 8, &[], 8), (0..8).collect::<Vec<_>>());
        assert_eq!(wanted(&j, 8, &released, 8), [0, 1, 3, 4, 6]);
        assert_eq!(wanted(&j, 8, &released, 16), [0, 1, 3, 4, 6], "scaling above the slots adds nothing");
        assert_eq!(wanted(&j, 8, &released, 3), [0, 1, 3], "kubectl scale: the most pods, lowest first");
        assert_eq!(wanted(&j, 8, &released, 0), Vec::<i32>::new());
    }

    #[test]
    fn an_ended_pod_is_replaced_only_when_the_master_wants_more() {
        assert_eq!(ended(None, 0), Ended::Wait, "no word from the master: no guess");
        assert_eq!(ended(Some(&report(2, &[], "")), 2), Ended::Surplus);
        assert_eq!(ended(Some(&report(2, &[], "")), 3), Ended::Surplus);
        assert_eq!(ended(Some(&report(2, &[], "")), 1), Ended::Replace);
        let any = MasterProgress { desired_workers: None, ..Default::default() };
        assert_eq!(ended(Some(&any), 5), Ended::Replace, "a master that wants any count");
    }
}
