//! Retries with capped exponential backoff and full jitter, and hedged reads.
//!
//! Object stores answer a small fraction of requests with throttling (503 SlowDown), other
//! 5xx errors, resets or truncated bodies; all of them succeed when tried again a moment
//! later. Retries are ours, not the SDK's, because a truncated body fails while it is
//! read — after the SDK's own retry loop has returned — and because one loop lets the
//! error that finally surfaces say how many attempts were made and what the last one saw.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How hard to try before giving up on a request.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// Backoff before the first retry, doubled for each later one...
    pub base: Duration,
    /// ...up to this.
    pub cap: Duration,
    /// One attempt, body included, is abandoned (and retried) after this long.
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    /// Eight attempts spanning about 15 seconds of backoff at most: enough to ride out a
    /// throttling burst or a restarting server, short enough that a server that is gone
    /// is reported while someone is still watching.
    fn default() -> Self {
        RetryPolicy {
            attempts: 8,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// "Full jitter" (AWS Architecture Blog, *Exponential Backoff And Jitter*): uniform in
    /// [0, min(cap, base * 2^retry)], so clients that failed together don't retry together.
    pub fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self.base.saturating_mul(1u32 << retry.min(20)).min(self.cap);
        ceiling.mul_f64(random_unit())
    }
}

/// Why an attempt failed, as far as retrying is concerned.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Worth another attempt: throttling, 5xx, timeouts, resets, truncated bodies.
    Transient(String),
    /// Would fail the same way again: access denied, no such bucket, a bad request.
    Permanent(String),
    /// The object is not there (not retried: a missing manifest means "not a grid").
    NotFound,
    /// The bytes did not match the CRC-32C the store holds for the object; retried, since
    /// the damage may have happened on the wire.
    Checksum { expected: u32, actual: u32 },
    /// As `Checksum`, found by the SDK while the body streamed in; the text says which.
    Corrupt(String),
}

impl Failure {
    fn is_transient(&self) -> bool {
        matches!(self, Failure::Transient(_) | Failure::Checksum { .. } | Failure::Corrupt(_))
    }
}

/// Counters of one storage's requests, for the summary logged when it is dropped and
/// for the tests that inject faults.
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    pub hedges: AtomicU64,
    pub hedge_wins: AtomicU64,
}

/// Runs `attempt` until it succeeds, fails permanently, or the policy's attempts are
/// used up; returns the last failure and the number of attempts made.
pub async fn with_retries<T, F, Fut>(
    policy: &RetryPolicy,
    counters: &Counters,
    object: &str,
    mut attempt: F,
) -> Result<T, (Failure, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let mut made = 0;
    loop {
        made += 1;
        let failure = match tokio::time::timeout(policy.attempt_timeout, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(failure)) => failure,
            Err(_) => Failure::Transient(format!("no answer within {:?}", policy.attempt_timeout)),
        };
        if !failure.is_transient() || made >= policy.attempts {
            return Err((failure, made));
        }
        let pause = policy.backoff(made - 1);
        counters.retries.fetch_add(1, Ordering::Relaxed);
        tracing::info!(object, attempt = made, ?pause, "retrying after {failure:?}");
        tokio::time::sleep(pause).await;
    }
}

/// A read that, if the first request has not answered after `delay`, sends a second one;
/// the first success wins and the other request is dropped (which cancels it). Cuts the
/// tail latency of a store where a small fraction of requests are slow.
pub async fn hedged<T, F, Fut>(delay: Option<Duration>, counters: &Counters, mut start: F) -> Result<T, Failure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    counters.requests.fetch_add(1, Ordering::Relaxed);
    let first = start();
    let Some(delay) = delay else { return first.await };
    tokio::pin!(first);
    tokio::select! {
        result = &mut first => return result,
        () = tokio::time::sleep(delay) => {}
    }
    counters.requests.fetch_add(1, Ordering::Relaxed);
    counters.hedges.fetch_add(1, Ordering::Relaxed);
    let second = start();
    tokio::pin!(second);
    tokio::select! {
        result = &mut first => match result {
            Ok(value) => Ok(value),
            Err(_) => second.await.inspect(|_| { counters.hedge_wins.fetch_add(1, Ordering::Relaxed); }),
        },
        result = &mut second => match result {
            Ok(value) => {
                counters.hedge_wins.fetch_add(1, Ordering::Relaxed);
                Ok(value)
            }
            Err(_) => first.await,
        },
    }
}

/// A uniform number in [0, 1) from a process-wide SplitMix64 sequence seeded by the clock:
/// jitter only has to differ between processes and calls, not be unpredictable.
fn random_unit() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let _ = STATE.compare_exchange(0, seed | 1, Ordering::Relaxed, Ordering::Relaxed);
    let mut z = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap()
    }

    #[test]
    fn backoff_grows_to_the_cap_and_is_jittered() {
        let policy = RetryPolicy::default();
        let samples: Vec<Duration> = (0..200).map(|_| policy.backoff(10)).collect();
        assert!(samples.iter().all(|d| *d <= policy.cap));
        assert!(samples.iter().any(|d| *d > policy.cap / 2) && samples.iter().any(|d| *d < policy.cap / 2));
        assert!((0..100).all(|_| policy.backoff(0) <= policy.base));
    }

    #[test]
    fn transient_failures_are_retried_and_permanent_ones_are_not() {
        let policy = RetryPolicy { attempts: 4, ..RetryPolicy::default() };
        let counters = Counters::default();
        let calls = AtomicU32::new(0);
        let result = runtime().block_on(with_retries(&policy, &counters, "o", || async {
            match calls.fetch_add(1, Ordering::Relaxed) {
                0 | 1 => Err(Failure::Transient("503".into())),
                _ => Ok(7),
            }
        }));
        assert_eq!(result, Ok(7));
        assert_eq!(counters.retries.load(Ordering::Relaxed), 2);

        let calls = AtomicU32::new(0);
        let result: Result<(), _> = runtime().block_on(with_retries(&policy, &counters, "o", || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err(Failure::Permanent("403".into()))
        }));
        assert_eq!(result, Err((Failure::Permanent("403".into()), 1)));

        let result: Result<(), _> = runtime()
            .block_on(with_retries(&policy, &counters, "o", || async { Err(Failure::Transient("reset".into())) }));
        assert_eq!(result, Err((Failure::Transient("reset".into()), 4)));
    }

    #[test]
    fn a_slow_first_request_loses_to_the_hedge() {
        let counters = Counters::default();
        let calls = AtomicU32::new(0);
        let result = runtime().block_on(hedged(Some(Duration::from_millis(50)), &counters, || {
            let call = calls.fetch_add(1, Ordering::Relaxed);
            async move {
                let wait = if call == 0 { 10_000 } else { 10 };
                tokio::time::sleep(Duration::from_millis(wait)).await;
                Ok::<u32, Failure>(call)
            }
        }));
        assert_eq!(result, Ok(1));
        assert_eq!(counters.hedges.load(Ordering::Relaxed), 1);
        assert_eq!(counters.hedge_wins.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_fast_first_request_sends_no_hedge() {
        let counters = Counters::default();
        let result =
            runtime().block_on(hedged(Some(Duration::from_millis(50)), &counters, || async { Ok::<_, Failure>(3) }));
        assert_eq!(result, Ok(3));
        assert_eq!(counters.hedges.load(Ordering::Relaxed), 0);
    }
}
