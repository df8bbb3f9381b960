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
//!   name). The operator records the pod names (status.elastic.released, kept whatever a
//!   master reports later), deletes each such pod once it ended, and never creates it again.
//!   It deletes no other pod for a scale-in: a released pod that is still running is
//!   draining, handing its slots over, and exits by itself.
//! - Each decision of the master (it lists them all, numbered; a restarted master replays
//!   them from its checkpoint) is reported once: recorded in status.elastic.decisions, and an
//!   `ElasticScaleIn` event with its reason and released pods, created under a name the
//!   decision fixes before that status is written (`reconcile`), so neither a second look
//!   nor an operator restart nor a new leader repeats it, and two decisions between two
//!   polls are two events.
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
use crate::plan::{MasterDecision, MasterProgress};
use kube::ResourceExt;
use linea_crds::{ElasticStatus, MAX_WORKERS, ScalingDecision, TrainingJob};

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
    /// The master's decisions not reported before, oldest first: one event each.
    pub decisions: Vec<ScalingDecision>,
    /// The master's desired count changed.
    pub desired_changed: bool,
}

impl Merged {
    /// Whether anything about the scale-in changed.
    pub fn changed(&self) -> bool {
        !self.released.is_empty() || !self.decisions.is_empty() || self.desired_changed
    }
}

/// The longest reason kept from a master (status and events stay small whatever it sends).
pub const MAX_REASON: usize = 512;

/// Merges the master's report into the job's elastic status: released pods are added, never
/// removed; the desired count follows the master's; its decisions are recorded by number,
/// each once. The master lists every decision it made, numbered from 1 (a restarted master
/// replays them from its checkpoint), so the decisions to report are exactly those after the
/// last number recorded, taken in order: none is reported twice (an operator restart or a new
/// leader reads the recorded ones from this status) and none is skipped (a gap in the
/// master's numbers stops the merge until it is filled).
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
    for d in &p.scaling_decisions {
        let next = status.decisions.last().map_or(1, |last| last.number.saturating_add(1));
        match i32::try_from(d.number) {
            Ok(n) if n < next => continue, // reported before
            Ok(n) if n == next && status.decisions.len() < MAX_WORKERS as usize => {}
            _ => break,
        }
        let decision = recorded(job, status.slots, d);
        status.decisions.push(decision.clone());
        merged.decisions.push(decision);
    }
    merged
}

/// A master's decision as the status records it: its released ids as pod names (ids that are
/// no pod of the job are left out), its reason bounded.
fn recorded(job: &TrainingJob, slots: i32, d: &MasterDecision) -> ScalingDecision {
    let mut reason = d.reason.clone();
    if reason.len() > MAX_REASON {
        let cut = (0..=MAX_REASON).rev().find(|&i| reason.is_char_boundary(i)).unwrap_or(0);
        reason.truncate(cut);
        reason.push('…');
    }
    let mut released: Vec<String> = Vec::new();
    for pod in d.released_workers.iter().filter_map(|id| released_pod(job, slots, id)) {
        if !released.contains(&pod) {
            released.push(pod);
        }
    }
    ScalingDecision {
        number: i32::try_from(d.number).unwrap_or(i32::MAX),
        epoch: d.epoch.into(),
        from: i32::try_from(d.from).unwrap_or(i32::MAX),
        to: i32::try_from(d.to).unwrap_or(i32::MAX),
        reason,
        released,
    }
}

/// The most bytes of an event's note (events.k8s.io/v1 refuses more than 1 kB).
const MAX_NOTE: usize = 1024;

/// The event text of a decision: the master's reason and the pods it released, as many
/// names as fit ("... and 12 more").
pub fn note(d: &ScalingDecision) -> String {
    if d.released.is_empty() {
        return d.reason.clone();
    }
    let mut note = format!("{}; released", d.reason);
    for (i, pod) in d.released.iter().enumerate() {
        let more = format!(" and {} more", d.released.len() - i);
        if note.len() + 2 + pod.len() + more.len() > MAX_NOTE {
            note.push_str(&more);
            break;
        }
        note.push_str(if i == 0 { " " } else { ", " });
        note.push_str(pod);
    }
    note
}

/// The name of a decision's event: fixed by the job (name and UID) and the decision's number,
/// so creating it twice (an operator that stopped between the event and the status write, an
/// old leader still finishing its pass) meets the first one instead of repeating it.
pub fn event_name(job: &TrainingJob, number: i32) -> String {
    let uid = job.uid().unwrap_or_default();
    format!("{}.scale-in-{number}.{uid}", job.name_any())
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

    /// A master's decision `number`, `from -> to`, releasing `released`.
    fn decision(number: u32, from: u32, to: u32, released: &[&str]) -> MasterDecision {
        MasterDecision {
            number,
            epoch: 4 * number,
            from,
            to,
            released_workers: released.iter().map(|s| s.to_string()).collect(),
            reason: format!(
                "duality gap rate 0.3/epoch over the last 2 epochs vs 0.5/epoch since {from} slots: {from} -> {to}"
            ),
        }
    }

    fn report(desired: i32, released: &[&str], decisions: &[MasterDecision]) -> MasterProgress {
        MasterProgress {
            desired_workers: Some(desired),
            released_workers: released.iter().map(|s| s.to_string()).collect(),
            scaling_decisions: decisions.to_vec(),
            ..Default::default()
        }
    }

    fn numbers(decisions: &[ScalingDecision]) -> Vec<i32> {
        decisions.iter().map(|d| d.number).collect()
    }

    #[test]
    fn merging_keeps_every_release_a_restarted_master_forgot() {
        let j = elastic_job();
        let mut s = ElasticStatus { slots: 8, ..Default::default() };
        let first = merge(&mut s, &j, Some(&report(8, &[], &[])));
        assert!(first.desired_changed && first.released.is_empty() && first.decisions.is_empty());
        let ids = ["ads-worker-7-00000001", "ads-worker-2-00000002", "ads-worker-5-00000003"];
        let d1 = decision(1, 8, 2, &ids);
        let second = merge(&mut s, &j, Some(&report(2, &ids, std::slice::from_ref(&d1))));
        assert_eq!(second.released, ["ads-worker-7", "ads-worker-2", "ads-worker-5"]);
        assert_eq!(numbers(&second.decisions), [1]);
        assert_eq!(second.decisions[0].released, ["ads-worker-7", "ads-worker-2", "ads-worker-5"]);
        assert_eq!((second.decisions[0].from, second.decisions[0].to, second.decisions[0].epoch), (8, 2, 4));
        // The same report again: nothing new.
        assert!(!merge(&mut s, &j, Some(&report(2, &ids, std::slice::from_ref(&d1)))).changed());
        // A restarted master (replayed desired count and decision; here without released ids,
        // as from a master that lost its record): the operator still knows the released pods
        // and reports nothing again.
        let replayed = decision(1, 8, 2, &[]);
        let restarted = merge(&mut s, &j, Some(&report(2, &[], &[replayed])));
        assert!(!restarted.changed(), "{restarted:?}");
        assert_eq!(s.released, ["ads-worker-7", "ads-worker-2", "ads-worker-5"]);
        assert_eq!((s.desired, numbers(&s.decisions)), (Some(2), vec![1]));
        // No master this pass: nothing changes.
        assert!(!merge(&mut s, &j, None).changed());
    }

    /// The defect this fixes: the master reported only its last reason, so two decisions
    /// between two polls gave one event and two alike in a row none.
    #[test]
    fn two_decisions_in_one_poll_are_two_new_decisions_and_an_operator_restart_repeats_none() {
        let j = elastic_job();
        let mut s = ElasticStatus { slots: 8, ..Default::default() };
        let d1 = decision(1, 8, 2, &["ads-worker-7-00000001", "ads-worker-6-00000002"]);
        let d2 = decision(2, 2, 1, &["ads-worker-1-00000003"]);
        let both = report(
            1,
            &["ads-worker-7-00000001", "ads-worker-6-00000002", "ads-worker-1-00000003"],
            &[d1.clone(), d2.clone()],
        );
        let merged = merge(&mut s, &j, Some(&both));
        assert_eq!(numbers(&merged.decisions), [1, 2]);
        assert_eq!(merged.decisions[1].released, ["ads-worker-1"]);
        assert!(merged.decisions[1].reason.ends_with(": 2 -> 1"));
        // An operator restart (or a new leader) starts from the status as stored: the same
        // report finds nothing new.
        let mut stored: ElasticStatus = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert!(merge(&mut stored, &j, Some(&both)).decisions.is_empty());
        // Two decisions alike but for their numbers are two decisions.
        let mut alike = ElasticStatus { slots: 8, ..Default::default() };
        let same = |n| MasterDecision { number: n, ..decision(1, 8, 2, &[]) };
        assert_eq!(numbers(&merge(&mut alike, &j, Some(&report(2, &[], &[same(1)]))).decisions), [1]);
        assert_eq!(numbers(&merge(&mut alike, &j, Some(&report(2, &[], &[same(1), same(2)]))).decisions), [2]);
        // A gap in the master's numbers stops the merge there; nothing is skipped.
        let mut gap = ElasticStatus { slots: 8, ..Default::default() };
        assert!(merge(&mut gap, &j, Some(&report(1, &[], std::slice::from_ref(&d2)))).decisions.is_empty());
        assert_eq!(numbers(&merge(&mut gap, &j, Some(&report(1, &[], &[d1, d2]))).decisions), [1, 2]);
    }

    #[test]
    fn a_decisions_event_names_its_pods_within_the_events_limit_and_is_named_by_its_number() {
        let j = elastic_job();
        let mut d = ScalingDecision { number: 3, reason: "r: 8 -> 2".into(), ..Default::default() };
        assert_eq!(note(&d), "r: 8 -> 2", "replayed: no pods to name");
        d.released = vec!["ads-worker-7".into(), "ads-worker-6".into()];
        assert_eq!(note(&d), "r: 8 -> 2; released ads-worker-7, ads-worker-6");
        d.released = (0..1000).map(|i| format!("ads-worker-{i}")).collect();
        let long = note(&d);
        assert!(long.len() <= MAX_NOTE && long.ends_with(" more"), "{} bytes: {long}", long.len());
        let shown = long.matches("ads-worker-").count();
        assert!(long.ends_with(&format!(" and {} more", 1000 - shown)), "{long}");
        // A master's reason is bounded before it is recorded.
        let huge = MasterDecision { reason: "é".repeat(1000), ..decision(1, 8, 2, &[]) };
        assert!(recorded(&j, 8, &huge).reason.len() <= MAX_REASON + '…'.len_utf8());
        assert_eq!(event_name(&j, 3), format!("ads.scale-in-3.{}", j.uid().unwrap_or_default()));
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
        assert_eq!(ended(Some(&report(2, &[], &[])), 2), Ended::Surplus);
        assert_eq!(ended(Some(&report(2, &[], &[])), 3), Ended::Surplus);
        assert_eq!(ended(Some(&report(2, &[], &[])), 1), Ended::Replace);
        let any = MasterProgress { desired_workers: None, ..Default::default() };
        assert_eq!(ended(Some(&any), 5), Ended::Replace, "a master that wants any count");
    }
}
