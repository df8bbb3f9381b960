//! Range aggregation on the aggregator's side: one range of a RangeSum phase, summed over
//! the partial sums every holder kept, checked to cover exactly the units the master expects.

use super::{ItemError, WorkerCore};
use crate::runtime::{proto, wire};
use linea_engine::algorithm::Reduction;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A worker's partial sums of one RangeSum phase: over the listed units.
pub struct Partial {
    pub units: Vec<u32>,
    pub sums: Vec<i128>,
}

impl WorkerCore {
    /// Sums range `[begin, end)` of a RangeSum phase over every source's partial.
    pub(super) fn aggregate(
        &self,
        phase_id: u64,
        reduction: Reduction,
        item: &proto::AggregateItem,
    ) -> Result<Vec<u8>, ItemError> {
        let range = super::validate::aggregate_range(item, reduction)?;
        let (begin, end) = (range.start, range.end);
        let mut total = vec![0i128; end - begin];
        let session = self.session.lock().expect("session lock").clone();
        for source in &item.sources {
            let mut expected = source.units.clone();
            expected.sort_unstable();
            // Each source's sums are added straight into the total, under the partials lock
            // for this worker's own (a range is up to 128 KiB: copied per source, it was an
            // allocation above glibc's mmap threshold each time).
            let added = if source.address == self.address {
                let partials = self.partials.lock().expect("partials lock");
                partials.get(&phase_id).is_some_and(|p| {
                    p.sums
                        .get(begin..end)
                        .is_some_and(|sums| add_source(&mut total, &expected, &p.units, sums.iter().copied()))
                })
            } else {
                let request = proto::FetchPartialRequest {
                    session: session.clone(),
                    phase: phase_id,
                    begin: begin as u32,
                    end: end as u32,
                };
                let mut client = self.peer(&source.address)?;
                let fetch = client.fetch_partial(request);
                // A holder that does not answer within the master's patience is reported
                // slow (speculative execution) instead of waited for.
                let reply = match item.patience_ms {
                    0 => self.runtime.block_on(fetch),
                    // The timer is made inside the runtime: this is a rayon thread.
                    ms => match self
                        .runtime
                        .block_on(async { tokio::time::timeout(Duration::from_millis(ms.into()), fetch).await })
                    {
                        Ok(reply) => reply,
                        Err(_) => {
                            tracing::info!(peer = %source.address, ms, "partial sums not sent within the patience");
                            return Err(ItemError::SlowPeer(source.address.clone()));
                        }
                    },
                };
                match reply {
                    Ok(reply) => {
                        let reply = reply.into_inner();
                        self.traffic.partial_bytes_fetched.fetch_add(reply.sums.len() as u64, Ordering::Relaxed);
                        // Sums that are not whole i128s are a peer's error, like missing ones.
                        wire::i128s(&reply.sums)
                            .is_some_and(|sums| add_source(&mut total, &expected, &reply.units, sums))
                    }
                    Err(status) => {
                        tracing::warn!(peer = %source.address, %status, "partial sums unavailable");
                        false
                    }
                }
            };
            if !added {
                return Err(ItemError::LostPeer(source.address.clone()));
            }
        }
        Ok(wire::from_i128s(&total))
    }
}

/// Adds one source's `sums` of the range into `total` if they cover it exactly and come from
/// exactly the `expected` units (sorted); false (nothing added) otherwise: the source's
/// partial is missing, stale or another session's.
fn add_source(total: &mut [i128], expected: &[u32], units: &[u32], sums: impl ExactSizeIterator<Item = i128>) -> bool {
    let mut units = units.to_vec();
    units.sort_unstable();
    if sums.len() != total.len() || units != expected {
        return false;
    }
    for (a, b) in total.iter_mut().zip(sums) {
        *a = a.wrapping_add(b);
    }
    true
}
