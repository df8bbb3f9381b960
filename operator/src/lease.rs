//! Leader election, the API side: reads and writes the `coordination.k8s.io/v1` Lease that
//! decides which replica of the operator reconciles ([`crate::election`] decides).
//!
//! The Lease is created with a POST (of two replicas creating it at once, one gets 409) and
//! changed only with a server-side apply that carries the `resourceVersion` the decision was
//! made on: the API server refuses it (409) if anyone wrote in between, so two replicas can
//! never both take over the same expired or released Lease.

use crate::FIELD_MANAGER;
use crate::election::{self, Observer, Record, Step, Timing};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;
use tokio::time::Instant;

/// This process's identity in the Lease: the pod's name (or the host's) and a random suffix,
/// so a restarted container never mistakes the Lease of its previous run for its own.
pub fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| FIELD_MANAGER.to_string());
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{base}_{:08x}", hasher.finish() as u32)
}

/// How the replica stopped leading.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Asked to stop (SIGTERM): the Lease was given up for a standby to take at once.
    Released,
    /// No renewal for the renew deadline, or another replica took the Lease: this replica
    /// must stop reconciling now.
    Lost(String),
}

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    observer: Observer,
    /// The Lease as last read or written, the base of the next write.
    last: Option<Lease>,
    /// The holder last logged, to log changes once.
    reported: Option<String>,
    /// When the last successful round that wrote this replica's hold was sent.
    renewed: Option<Instant>,
}

impl Elector {
    pub fn new(client: Client, namespace: &str, name: &str, identity: String, timing: Timing) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity,
            timing,
            observer: Observer::default(),
            last: None,
            reported: None,
            renewed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&mut self) {
        loop {
            match self.try_once().await {
                Ok(true) => {
                    tracing::info!(identity = %self.identity, lease = %self.name, "leading: acquired the Lease");
                    return;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(lease = %self.name, %e, "could not read or write the Lease"),
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Keeps the Lease renewed until `stop` completes (then gives it up) or the Lease is
    /// lost. Call after [`Elector::acquire`].
    pub async fn lead(mut self, stop: impl Future<Output = ()>) -> Ended {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => {
                    self.release().await;
                    return Ended::Released;
                }
                () = tokio::time::sleep(self.timing.retry_period) => {}
            }
            match self.try_once().await {
                Ok(true) => {}
                Ok(false) if self.holder().is_some_and(|h| h != self.identity) => {
                    return Ended::Lost(format!("{} holds the Lease now", self.holder().unwrap_or_default()));
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(lease = %self.name, %e, "could not renew the Lease"),
            }
            let renewed = self.renewed.unwrap_or_else(Instant::now);
            if !election::still_leading(renewed, Instant::now(), &self.timing) {
                return Ended::Lost(format!("not renewed for {:?}", self.timing.renew_deadline));
            }
        }
    }

    /// One bounded round: read the Lease, decide, write; true when this replica holds it
    /// after. A successful one counts from the moment its request was sent, which is no later
    /// than the API server's write that a standby's clock starts from; a round still waiting
    /// for the API server when the renew deadline passes is abandoned.
    pub async fn try_once(&mut self) -> kube::Result<bool> {
        let started = Instant::now();
        let deadline = match self.renewed {
            Some(renewed) => (renewed + self.timing.renew_deadline).saturating_duration_since(started),
            None => self.timing.lease_duration,
        };
        match tokio::time::timeout(deadline, self.try_acquire_or_renew()).await {
            Ok(Ok(true)) => {
                self.renewed = Some(started);
                Ok(true)
            }
            Ok(other) => other,
            Err(_) => Ok(false),
        }
    }

    fn holder(&self) -> Option<&str> {
        self.observer.seen()?.record.holder.as_deref().filter(|h| !h.is_empty())
    }

    /// One round: read the Lease, decide, write. Ok(true) when this replica holds it after.
    async fn try_acquire_or_renew(&mut self) -> kube::Result<bool> {
        let now = Instant::now();
        match self.api.get_opt(&self.name).await? {
            Some(lease) => {
                let record = record_of(&lease);
                self.observer.observe(&lease.resource_version().unwrap_or_default(), record, now);
                self.last = Some(lease);
            }
            None => {
                self.observer.absent();
                self.last = None;
            }
        }
        self.report();
        let step = election::decide(&self.identity, self.observer.seen(), self.timing.lease_duration, now);
        let written = match step {
            Step::Wait { .. } => return Ok(false),
            Step::Create => self.create().await?,
            Step::Acquire { transitions } => self.write(Some(self.identity.clone()), transitions, true).await?,
            Step::Renew => {
                let transitions = self.observer.seen().map_or(0, |s| s.record.transitions);
                self.write(Some(self.identity.clone()), transitions, false).await?
            }
        };
        let Some(lease) = written else { return Ok(false) };
        self.observer.observe(&lease.resource_version().unwrap_or_default(), record_of(&lease), Instant::now());
        self.last = Some(lease);
        self.report();
        Ok(true)
    }

    /// Creates the Lease held by this replica; `None` if another replica was first.
    async fn create(&self) -> kube::Result<Option<Lease>> {
        let now = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.timing.lease_duration.as_secs() as i32),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
        match self.api.create(&params, &lease).await {
            Ok(created) => Ok(Some(created)),
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Applies the record on top of the version last read; `None` if the Lease changed
    /// since (the API server refused the stale `resourceVersion`). Every field is written
    /// each time, so this one field manager owns the whole spec.
    async fn write(&self, holder: Option<String>, transitions: i32, acquired: bool) -> kube::Result<Option<Lease>> {
        let Some(last) = &self.last else { return Ok(None) };
        let now = MicroTime(Timestamp::now());
        let previous = last.spec.as_ref().and_then(|s| s.acquire_time.clone());
        let released = holder.as_deref().is_none_or(str::is_empty);
        let duration = if released { 1 } else { self.timing.lease_duration.as_secs() as i32 };
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: last.resource_version(),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.unwrap_or_default()),
                lease_duration_seconds: Some(duration),
                acquire_time: if acquired { Some(now.clone()) } else { previous.or_else(|| Some(now.clone())) },
                renew_time: Some(now),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match self.api.patch(&self.name, &params, &Patch::Apply(&lease)).await {
            Ok(written) => Ok(Some(written)),
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if this replica still holds it: no holder and a duration of 1 s,
    /// so a standby takes over at its next try instead of after the lease duration.
    async fn release(&mut self) {
        for _ in 0..3 {
            match self.api.get_opt(&self.name).await {
                Ok(Some(lease)) => {
                    let record = record_of(&lease);
                    if record.holder.as_deref() != Some(self.identity.as_str()) {
                        return;
                    }
                    let transitions = record.transitions;
                    self.last = Some(lease);
                    match self.write(None, transitions, false).await {
                        Ok(Some(_)) => {
                            tracing::info!(identity = %self.identity, lease = %self.name, "released the Lease");
                            return;
                        }
                        Ok(None) => continue, // changed meanwhile: read again
                        Err(e) => tracing::warn!(lease = %self.name, %e, "could not release the Lease"),
                    }
                }
                Ok(None) => return,
                Err(e) => tracing::warn!(lease = %self.name, %e, "could not read the Lease to release it"),
            }
        }
    }

    fn report(&mut self) {
        let holder = self.holder().map(str::to_string);
        if holder != self.reported {
            match &holder {
                Some(h) if *h == self.identity => {}
                Some(h) => tracing::info!(leader = %h, lease = %self.name, "standing by: another replica leads"),
                None => tracing::info!(lease = %self.name, "the Lease is free"),
            }
            self.reported = holder;
        }
    }
}

fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity,
        duration: spec.lease_duration_seconds.map(|s| Duration::from_secs(s.max(0) as u64)),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409)
}
