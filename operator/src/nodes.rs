//! Nodes about to go. The operator watches Nodes: when one gets a termination notice
//! ([`plan::node_terminating`]: a spot interruption taint, Karpenter's or the autoscaler's
//! scale-down taint, a cordon), the jobs with pods on it are reconciled at once, and their
//! workers there are drained through the master — within a second of the notice rather than
//! at the job's next periodic pass.
//!
//! Which jobs have pods on which node is kept without a second cache of every pod: the watch
//! of the jobs' pods adds each pod's node as its events arrive ([`NodeIndex::saw`], before
//! any reconcile), and each reconcile replaces the job's nodes with those of the pods it
//! listed ([`NodeIndex::record`]), which drops the nodes of deleted pods.

use crate::error::Result;
use crate::plan;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};
use linea_crds::TrainingJob;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// The nodes of each job's pods, as of the job's last reconcile.
#[derive(Default)]
pub struct NodeIndex {
    jobs: Mutex<HashMap<ObjectRef<TrainingJob>, BTreeSet<String>>>,
}

impl NodeIndex {
    /// Remembers the nodes `pods` (the job's) run on.
    pub fn record(&self, job: &TrainingJob, pods: &[Pod]) {
        let nodes: BTreeSet<String> = pods.iter().filter_map(node_of).map(str::to_string).collect();
        let mut jobs = self.jobs.lock().expect("node index lock");
        if nodes.is_empty() {
            jobs.remove(&ObjectRef::from(job));
        } else {
            jobs.insert(ObjectRef::from(job), nodes);
        }
    }

    /// A pod event of the owned-pods watch: adds the pod's node to its job's, and returns the
    /// job to reconcile (the job that controls the pod, as `Controller::owns` would).
    pub fn saw(&self, pod: &Pod) -> Option<ObjectRef<TrainingJob>> {
        let owner = pod.owner_references().iter().find(|o| {
            o.controller == Some(true) && o.kind == linea_crds::KIND && o.api_version == linea_crds::API_VERSION
        })?;
        let job = ObjectRef::new(&owner.name).within(&pod.namespace()?);
        if let Some(node) = node_of(pod) {
            let mut jobs = self.jobs.lock().expect("node index lock");
            jobs.entry(job.clone()).or_default().insert(node.to_string());
        }
        Some(job)
    }

    /// The job is gone.
    pub fn forget(&self, job: &TrainingJob) {
        self.jobs.lock().expect("node index lock").remove(&ObjectRef::from(job));
    }

    /// What a change of `node` wakes: the jobs with pods on it if it is about to go, none
    /// otherwise (a node's routine status updates reconcile nothing).
    pub fn to_wake(&self, node: &Node) -> Vec<ObjectRef<TrainingJob>> {
        if !plan::node_terminating(node) {
            return Vec::new();
        }
        let name = node.name_any();
        let jobs = self.jobs.lock().expect("node index lock");
        let mut woken: Vec<_> =
            jobs.iter().filter(|(_, nodes)| nodes.contains(&name)).map(|(j, _)| j.clone()).collect();
        woken.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        if !woken.is_empty() {
            tracing::info!(node = %name, jobs = woken.len(), "node about to go; reconciling its jobs");
        }
        woken
    }
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// Nodes of these pods that are about to go ([`plan::node_terminating`]), read fresh.
pub async fn leaving(client: &Client, pods: &[Pod]) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let names: BTreeSet<&str> = pods.iter().filter_map(node_of).collect();
    let mut leaving = Vec::new();
    for name in names {
        if nodes.get_opt(name).await?.is_some_and(|n| plan::node_terminating(&n)) {
            leaving.push(name.to_string());
        }
    }
    Ok(leaving)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::tests::job;
    use k8s_openapi::api::core::v1::{NodeSpec, PodSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    fn pod_on(name: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("ml".into()), ..ObjectMeta::default() },
            spec: Some(PodSpec { node_name: node.map(Into::into), ..PodSpec::default() }),
            ..Pod::default()
        }
    }

    fn node(name: &str, taint: Option<&str>, cordoned: bool) -> Node {
        Node {
            metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
            spec: Some(NodeSpec {
                taints: taint
                    .map(|key| vec![Taint { key: key.into(), effect: "NoSchedule".into(), ..Taint::default() }]),
                unschedulable: cordoned.then_some(true),
                ..NodeSpec::default()
            }),
            ..Node::default()
        }
    }

    fn named(name: &str) -> TrainingJob {
        let mut j = job("datasetUri: s3://d/g\nmodelUri: s3://m/x.model");
        j.metadata.name = Some(name.into());
        j
    }

    #[test]
    fn a_termination_notice_wakes_exactly_the_jobs_with_pods_on_that_node() {
        let index = NodeIndex::default();
        let (ads, svm, idle) = (named("ads"), named("svm"), named("idle"));
        index.record(&ads, &[pod_on("ads-master", Some("n1")), pod_on("ads-worker-0", Some("spot-1"))]);
        index.record(&svm, &[pod_on("svm-worker-0", Some("spot-1")), pod_on("svm-worker-1", Some("spot-2"))]);
        index.record(&idle, &[pod_on("idle-master", None)]);
        let names = |refs: Vec<ObjectRef<TrainingJob>>| refs.into_iter().map(|r| r.name).collect::<Vec<_>>();
        for notice in plan::TERMINATION_TAINTS {
            assert_eq!(names(index.to_wake(&node("spot-1", Some(notice), false))), ["ads", "svm"], "{notice}");
        }
        assert_eq!(names(index.to_wake(&node("spot-2", None, true))), ["svm"], "a cordon is a notice");
        assert!(index.to_wake(&node("n1", None, false)).is_empty(), "a healthy node's update wakes nothing");
        assert!(index.to_wake(&node("n1", Some("cloud.google.com/gke-spot"), false)).is_empty(), "spot is no notice");
        assert!(index.to_wake(&node("n9", Some(plan::TERMINATION_TAINTS[0]), true)).is_empty(), "no pods there");
    }

    #[test]
    fn a_pod_event_maps_to_its_controlling_job_and_places_it_at_once() {
        let index = NodeIndex::default();
        let ads = named("ads");
        let owned = |name: &str, node: Option<&str>, kind: &str, controller: bool| {
            let mut pod = pod_on(name, node);
            pod.metadata.owner_references = Some(vec![OwnerReference {
                api_version: linea_crds::API_VERSION.into(),
                kind: kind.into(),
                name: "ads".into(),
                uid: "0f5e-uid".into(),
                controller: Some(controller),
                ..OwnerReference::default()
            }]);
            pod
        };
        // Created, not yet scheduled: the job is reconciled, no node known.
        let job = index.saw(&owned("ads-worker-0", None, "TrainingJob", true)).expect("its job");
        assert_eq!((job.name.as_str(), job.namespace.as_deref()), ("ads", Some("ml")));
        let leaving = node("spot-1", Some(plan::TERMINATION_TAINTS[0]), false);
        assert!(index.to_wake(&leaving).is_empty());
        // Bound to spot-1: a notice there wakes the job even before any reconcile ran.
        index.saw(&owned("ads-worker-0", Some("spot-1"), "TrainingJob", true));
        assert_eq!(index.to_wake(&leaving), vec![ObjectRef::from(&ads)]);
        assert!(index.saw(&owned("x", Some("n1"), "ReplicaSet", true)).is_none(), "not a job's pod");
        assert!(index.saw(&owned("x", Some("n1"), "TrainingJob", false)).is_none(), "not controlled by it");
        assert!(index.saw(&pod_on("x", Some("n1"))).is_none(), "no owner");
    }

    #[test]
    fn the_index_follows_each_jobs_last_reconcile() {
        let index = NodeIndex::default();
        let ads = named("ads");
        let leaving = node("spot-1", Some(plan::TERMINATION_TAINTS[0]), false);
        index.record(&ads, &[pod_on("ads-worker-0", Some("spot-1"))]);
        assert_eq!(index.to_wake(&leaving).len(), 1);
        // The worker was replaced elsewhere: the node no longer concerns the job.
        index.record(&ads, &[pod_on("ads-worker-0", Some("n2"))]);
        assert!(index.to_wake(&leaving).is_empty());
        index.record(&ads, &[pod_on("ads-worker-0", Some("spot-1"))]);
        index.forget(&ads);
        assert!(index.to_wake(&leaving).is_empty(), "a deleted job is forgotten");
        index.record(&ads, &[pod_on("ads-worker-0", Some("spot-1"))]);
        index.record(&ads, &[]);
        assert!(index.jobs.lock().unwrap().is_empty(), "a job without placed pods takes no room");
    }
}
