//! The prepare pod of a job with `spec.rawData`: `linea prepare` from the raw object into the
//! grid at `datasetUri`, before the master and workers exist.
//!
//! It is built like the job's other pods ([`desired::pod`]: non-root, read-only root
//! filesystem, `/tmp` scratch, storage settings and credentials, owned by the job, created and
//! never adopted) minus what it does not need: no port and no job token. `--reuse` makes it
//! keep a grid already prepared from the same object (URI, size, ETag) and options, so a
//! second job on the same input skips the work; its termination message says which
//! ([`PrepareSummary`]). [`crate::plan`] decides when it runs and what its end means.

use crate::desired::{self, BuildOptions, PodParts, Role};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use linea_crds::TrainingJob;
use serde::Deserialize;

/// The name of the job's prepare pod.
pub fn pod_name(job: &TrainingJob) -> String {
    format!("{}-prepare", job.name_any())
}

/// What `linea prepare` writes to its termination message when it succeeds.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct PrepareSummary {
    /// The grid was already there, prepared from the same input: nothing was written.
    pub reused: bool,
    pub rows: u64,
    pub nnz: u64,
    pub blocks: u64,
}

/// The prepare pod of `job`; `None` when the job names a prepared grid.
pub fn prepare_pod(job: &TrainingJob, options: &BuildOptions) -> Option<Pod> {
    let raw = job.spec.raw_data.as_ref()?;
    let mut args: Vec<String> = vec![
        "prepare".into(),
        "--input".into(),
        raw.uri.clone(),
        "--format".into(),
        raw.format.as_str().into(),
        "--output".into(),
        job.spec.dataset_uri.clone(),
        "--reuse".into(),
        // The log is read by people (kubectl logs), not a terminal: no progress bars.
        "--quiet".into(),
    ];
    for (flag, value) in raw.options() {
        args.extend([flag, value]);
    }
    let parts = PodParts {
        name: pod_name(job),
        role: Role::Prepare,
        index: None,
        args,
        port: 0,
        // Preparing holds the data in memory as the master does: the master's resources
        // and placement.
        resources: options.resources.effective(Role::Prepare, job.spec.master.resources.as_ref()),
        node_selector: job.spec.master.node_selector.clone(),
        tolerations: job.spec.master.tolerations.clone(),
        affinity: None,
    };
    let mut pod = desired::pod(job, options, parts);
    // No port to serve and no job token to hold: the prepare pod talks to storage only.
    if let Some(spec) = pod.spec.as_mut() {
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(|v| v.name != desired::JOB_SECRET_VOLUME);
        }
        for container in &mut spec.containers {
            container.ports = None;
            if let Some(mounts) = container.volume_mounts.as_mut() {
                mounts.retain(|m| m.name != desired::JOB_SECRET_VOLUME);
            }
        }
    }
    Some(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::tests::{job, options};

    const RAW: &str = "datasetUri: s3://data/adult/grid\nmodelUri: s3://models/adult.model\n\
        rawData: {uri: 's3://raw/adult.csv', format: csv, label: income, positive: '>50K', ignore: [id, ts], rowsPerShard: 4096}\n\
        storage: {endpoint: 'http://minio:9000', credentialsSecretName: s3-creds}\n\
        serviceAccountName: trainer\npodMetadata: {labels: {team: ads}}\n";

    #[test]
    fn the_prepare_pod_runs_linea_prepare_with_the_raw_options_into_the_grid() {
        let pod = prepare_pod(&job(RAW), &options()).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("ads-prepare"));
        assert_eq!(pod.labels()[desired::LABEL_ROLE], "prepare");
        assert!(desired::owned_by(&pod.metadata, &job(RAW)), "owned by the job like its other pods");
        let c = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.args.as_ref().unwrap().join(" "),
            "prepare --input s3://raw/adult.csv --format csv --output s3://data/adult/grid --reuse --quiet \
             --label income --positive >50K --ignore id,ts --rows-per-shard 4096"
        );
        assert!(prepare_pod(&job("datasetUri: s3://data/g\nmodelUri: s3://models/x\n"), &options()).is_none());
    }

    #[test]
    fn the_prepare_pod_is_hardened_like_the_others_and_holds_no_job_token() {
        let job = job(RAW);
        let (prepare, master) = (prepare_pod(&job, &options()).unwrap(), desired::master_pod(&job, &options()));
        let (p, m) = (prepare.spec.as_ref().unwrap(), master.spec.as_ref().unwrap());
        assert_eq!(p.security_context, m.security_context);
        assert_eq!(p.containers[0].security_context, m.containers[0].security_context);
        assert_eq!(p.containers[0].env, m.containers[0].env, "the same storage settings and credentials");
        assert_eq!(p.containers[0].image, m.containers[0].image);
        assert_eq!(
            (p.restart_policy.as_deref(), p.automount_service_account_token, p.service_account_name.as_deref()),
            (Some("Never"), Some(true), Some("trainer"))
        );
        assert_eq!(prepare.labels()["team"], "ads");
        let volumes: Vec<&str> = p.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        assert_eq!(volumes, ["tmp"]);
        let mounts: Vec<&str> = p.containers[0].volume_mounts.iter().flatten().map(|m| m.name.as_str()).collect();
        assert_eq!(mounts, ["tmp"]);
        assert!(p.containers[0].ports.is_none());
    }

    #[test]
    fn the_summary_is_what_linea_prepare_writes() {
        let text = r#"{"reused":true,"rows":32560,"nnz":451592,"shards":2,"blocks":15}"#;
        let summary: PrepareSummary = serde_json::from_str(text).unwrap();
        assert_eq!(summary, PrepareSummary { reused: true, rows: 32560, nnz: 451592, blocks: 15 });
    }
}
