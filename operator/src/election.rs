//! Leader election, the pure part: what one replica of the operator does next, given the
//! `coordination.k8s.io` Lease as it last read it. [`crate::lease`] does the reading and
//! writing; only the replica holding the Lease reconciles.
//!
//! The rules are client-go's `leaderelection` (the one every kube-controller-manager runs):
//! - A Lease held by another replica has expired when its record has not changed for its
//!   `leaseDurationSeconds`, measured on *this* replica's clock from the moment this replica
//!   first saw the record as it is. The holder's `renewTime` is never compared with local
//!   time, so the machines' clocks need not agree (only their rates).
//! - A released Lease (no holder) is free at once: that is what makes a SIGTERM handover fast.
//! - The holder renews every retry period and stops leading when it could not renew for
//!   `renew_deadline`, which is shorter than the lease duration: the standby cannot take
//!   over before the old leader has stopped.
//! - Every write carries the `resourceVersion` it was decided on (compare-and-swap), so of
//!   two replicas deciding on the same record at most one write succeeds.

use std::time::Duration;
// tokio's clock: the same as the system's monotonic clock, and pausable in tests.
use tokio::time::Instant;

/// The election's three durations (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease that stopped changing is still the holder's.
    pub lease_duration: Duration,
    /// How long the holder keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// Time between two tries (renewals, or a standby's reads).
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// Refuses durations under which two replicas could lead at once: the holder must give
    /// up (renew deadline) before anyone may take over (lease duration), and get more than
    /// one try before that.
    pub fn validated(self) -> Result<Self, String> {
        let Timing { lease_duration, renew_deadline, retry_period } = self;
        if lease_duration.as_secs() < 1 || lease_duration.as_secs() > i32::MAX as u64 {
            return Err(format!("the lease duration must be 1 s or more, not {lease_duration:?}"));
        }
        if renew_deadline >= lease_duration {
            return Err(format!(
                "the renew deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease_duration:?})"
            ));
        }
        if retry_period.is_zero() || retry_period.saturating_mul(2) > renew_deadline {
            return Err(format!(
                "the retry period ({retry_period:?}) must be above zero and at most half the renew deadline \
                 ({renew_deadline:?})"
            ));
        }
        Ok(self)
    }
}

/// What the election needs of a Lease's spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// `holderIdentity`; `None` (or empty) when released or never held.
    pub holder: Option<String>,
    /// `leaseDurationSeconds` as the holder wrote it.
    pub duration: Option<Duration>,
    /// `leaseTransitions`.
    pub transitions: i32,
}

impl Record {
    fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }
}

/// A Lease as this replica has seen it: its record, its `resourceVersion`, and when (on this
/// replica's clock) that version was first seen.
#[derive(Clone, Debug)]
pub struct Seen {
    pub record: Record,
    pub version: String,
    pub since: Instant,
}

/// Keeps what this replica has seen of the Lease across reads.
#[derive(Debug, Default)]
pub struct Observer {
    seen: Option<Seen>,
}

impl Observer {
    /// Records a read at `now`. The clock restarts only when the version changed: a holder
    /// that stopped renewing leaves the version as it is, and its lease runs out.
    pub fn observe(&mut self, version: &str, record: Record, now: Instant) -> &Seen {
        let since = match &self.seen {
            Some(seen) if seen.version == version => seen.since,
            _ => now,
        };
        self.seen.insert(Seen { record, version: version.to_string(), since })
    }

    /// The Lease does not exist (deleted, or never created).
    pub fn absent(&mut self) {
        self.seen = None;
    }

    pub fn seen(&self) -> Option<&Seen> {
        self.seen.as_ref()
    }
}

/// What a replica does with the Lease next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// There is no Lease: create it, held by this replica (a create fails if another
    /// replica created it first).
    Create,
    /// Take the Lease over (free or expired), counting one more transition.
    Acquire { transitions: i32 },
    /// This replica holds the Lease: renew it.
    Renew,
    /// Another replica holds it; it expires at `until` unless renewed.
    Wait { holder: String, until: Instant },
}

/// The next step of replica `me`, which uses `own` as the duration of a Lease whose record
/// carries none.
pub fn decide(me: &str, seen: Option<&Seen>, own: Duration, now: Instant) -> Step {
    let Some(seen) = seen else { return Step::Create };
    let transitions = seen.record.transitions;
    match seen.record.holder() {
        Some(holder) if holder == me => Step::Renew,
        None => Step::Acquire { transitions: transitions.saturating_add(1) },
        Some(holder) => {
            let until = seen.since + seen.record.duration.filter(|d| !d.is_zero()).unwrap_or(own);
            if now >= until {
                Step::Acquire { transitions: transitions.saturating_add(1) }
            } else {
                Step::Wait { holder: holder.to_string(), until }
            }
        }
    }
}

/// Whether the holder, last renewed at `renewed`, still leads at `now`.
pub fn still_leading(renewed: Instant, now: Instant, timing: &Timing) -> bool {
    now.saturating_duration_since(renewed) < timing.renew_deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn held_by(holder: &str, transitions: i32) -> Record {
        Record { holder: Some(holder.into()), duration: Some(S(15)), transitions }
    }

    #[test]
    fn no_lease_is_created_and_ones_own_is_renewed() {
        let t0 = Instant::now();
        assert_eq!(decide("a", None, S(15), t0), Step::Create);
        let mut seen = Observer::default();
        let s = seen.observe("1", held_by("a", 0), t0);
        assert_eq!(decide("a", Some(s), S(15), t0 + S(60)), Step::Renew, "never expires for its holder");
    }

    #[test]
    fn anothers_lease_is_taken_once_it_stopped_changing_for_its_duration() {
        let t0 = Instant::now();
        let mut seen = Observer::default();
        seen.observe("7", held_by("b", 3), t0);
        // Read again and again unchanged: the clock runs from the first read of version 7.
        let s = seen.observe("7", held_by("b", 3), t0 + S(14)).clone();
        assert_eq!(decide("a", Some(&s), S(15), t0 + S(14)), Step::Wait { holder: "b".into(), until: t0 + S(15) });
        assert_eq!(decide("a", Some(&s), S(15), t0 + S(15)), Step::Acquire { transitions: 4 });
    }

    #[test]
    fn a_renewing_holder_keeps_its_lease_however_long() {
        let t0 = Instant::now();
        let mut seen = Observer::default();
        for i in 0..100u64 {
            // The holder renews every 2 s: a new version each time.
            let now = t0 + S(2 * i);
            let s = seen.observe(&i.to_string(), held_by("b", 1), now).clone();
            assert!(matches!(decide("a", Some(&s), S(15), now + S(1)), Step::Wait { .. }), "at {i}");
        }
    }

    #[test]
    fn expiry_is_measured_on_the_readers_clock_not_the_holders() {
        // The record does not even carry the holder's renewTime: a holder whose clock is an
        // hour behind (or ahead) is judged by when this replica saw its record change.
        let t0 = Instant::now();
        let mut seen = Observer::default();
        seen.observe("1", held_by("b", 0), t0);
        let s = seen.observe("2", held_by("b", 0), t0 + S(14)).clone();
        assert_eq!(s.since, t0 + S(14));
        assert!(matches!(decide("a", Some(&s), S(15), t0 + S(28)), Step::Wait { .. }));
        assert_eq!(decide("a", Some(&s), S(15), t0 + S(29)), Step::Acquire { transitions: 1 });
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let t0 = Instant::now();
        for holder in [None, Some(String::new())] {
            let mut seen = Observer::default();
            let s = seen.observe("9", Record { holder, duration: Some(S(1)), transitions: 5 }, t0).clone();
            assert_eq!(decide("a", Some(&s), S(15), t0), Step::Acquire { transitions: 6 });
        }
    }

    #[test]
    fn the_holders_duration_counts_and_ours_only_when_it_wrote_none() {
        let t0 = Instant::now();
        let mut seen = Observer::default();
        let long = Record { holder: Some("b".into()), duration: Some(S(60)), transitions: 0 };
        let s = seen.observe("1", long, t0).clone();
        assert!(matches!(decide("a", Some(&s), S(15), t0 + S(59)), Step::Wait { .. }));
        for duration in [None, Some(Duration::ZERO)] {
            let mut seen = Observer::default();
            let s = seen.observe("1", Record { holder: Some("b".into()), duration, transitions: 0 }, t0).clone();
            assert_eq!(decide("a", Some(&s), S(15), t0 + S(15)), Step::Acquire { transitions: 1 });
        }
    }

    #[test]
    fn a_deleted_lease_is_created_again() {
        let t0 = Instant::now();
        let mut seen = Observer::default();
        seen.observe("1", held_by("b", 0), t0);
        seen.absent();
        assert_eq!(decide("a", seen.seen(), S(15), t0), Step::Create);
    }

    #[test]
    fn the_holder_stops_leading_at_the_renew_deadline_before_anyone_may_take_over() {
        let timing = Timing::default();
        let t0 = Instant::now();
        assert!(still_leading(t0, t0 + S(9), &timing));
        assert!(!still_leading(t0, t0 + S(10), &timing));
        // A standby that saw the last renewal at once may take over 15 s later, 5 s after
        // the old holder stopped.
        assert!(timing.lease_duration > timing.renew_deadline);
    }

    #[test]
    fn timings_that_could_let_two_replicas_lead_are_refused() {
        assert!(Timing::default().validated().is_ok());
        let t = |l, r, p| Timing { lease_duration: S(l), renew_deadline: S(r), retry_period: S(p) }.validated();
        assert!(t(15, 15, 2).unwrap_err().contains("shorter than the lease duration"));
        assert!(t(15, 10, 6).unwrap_err().contains("at most half the renew deadline"));
        assert!(t(15, 10, 0).is_err());
        assert!(t(0, 0, 0).unwrap_err().contains("1 s or more"));
        assert!(t(4, 2, 1).is_ok());
    }
}
