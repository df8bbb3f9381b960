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
            let partial = if source.address == self.address {
                self.local_partial(phase_id, begin, end)
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
                        wire::i128s(&reply.sums).map(|sums| Partial { units: reply.units, sums })
                    }
                    Err(status) => {
                        tracing::warn!(peer = %source.address, %status, "partial sums unavailable");
                        None
                    }
                }
            };
            let mut expected = source.units.clone();
            expected.sort_unstable();
            let Some(mut partial) = partial.filter(|p| p.sums.len() == end - begin) else {
                return Err(ItemError::LostPeer(source.address.clone()));
            };
            partial.units.sort_unstable();
            if partial.units != expected {
                return Err(ItemError::LostPeer(source.address.clone()));
            }
            for (a, b) in total.iter_mut().zip(&partial.sums) {
                *a = a.wrapping_add(*b);
            }
        }
        Ok(wire::from_i128s(&total))
    }

    pub(super) fn local_partial(&self, phase: u64, begin: usize, end: usize) -> Option<Partial> {
        let partials = self.partials.lock().expect("partials lock");
        let p = partials.get(&phase)?;
        // The range comes from a peer's request: out of bounds is "none here", not a panic.
        let sums = p.sums.get(begin..end)?;
        Some(Partial { units: p.units.clone(), sums: sums.to_vec() })
    }
}
