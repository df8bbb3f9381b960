//! What a worker checks in the master's messages before acting on them. The master is
//! authenticated, but it may be of another version, or restarted mid-write: a phase whose
//! sums could never be sent back, or an aggregation range outside its phase, is refused
//! with a message instead of being allocated or indexed (fuzz/ feeds these every message).

use crate::error::{LineaError, Result};
use crate::runtime::proto;
use linea_engine::algorithm::Reduction;
use std::ops::Range;

/// Most exact sums one item can return: each is 16 bytes, and a reply larger than the
/// largest gRPC message could never reach the master.
pub const MAX_SUMS: usize = linea_proto::MAX_MESSAGE_BYTES / 16;

/// How a phase's results combine, from its description.
pub fn reduction(phase: &proto::Phase) -> Result<Reduction> {
    let len = phase.len as usize;
    let reduction = match proto::Reduction::try_from(phase.reduction) {
        Ok(proto::Reduction::None) => return Ok(Reduction::None),
        Ok(proto::Reduction::Sum) => Reduction::Sum { len },
        Ok(proto::Reduction::RangeSum) => Reduction::RangeSum { len },
        Ok(proto::Reduction::AllReduce) => Reduction::AllReduce { len },
        Err(_) => return Err(LineaError::Usage(format!("phase {}: unknown reduction {}", phase.id, phase.reduction))),
    };
    if len > MAX_SUMS {
        return Err(LineaError::Usage(format!(
            "phase {}: {len} sums per item, more than one message can carry ({MAX_SUMS})",
            phase.id
        )));
    }
    Ok(reduction)
}

/// The range of sums an aggregation item covers, checked against its phase.
pub fn aggregate_range(item: &proto::AggregateItem, reduction: Reduction) -> Result<Range<usize>> {
    let Reduction::RangeSum { len } = reduction else {
        return Err(LineaError::Usage("an aggregation item of a phase without range sums".into()));
    };
    let (begin, end) = (item.begin as usize, item.end as usize);
    if begin > end || end > len {
        return Err(LineaError::Usage(format!("aggregation range {begin}..{end} outside the phase's {len} sums")));
    }
    Ok(begin..end)
}

/// A tree item's place, checked against its phase: the phase is an allreduce, and the
/// chunk length is not zero.
pub fn tree_item(item: &proto::TreeItem, reduction: Reduction) -> Result<usize> {
    let Reduction::AllReduce { len } = reduction else {
        return Err(LineaError::Usage("a tree item of a phase that is no allreduce".into()));
    };
    if item.chunk == 0 || item.children.len() > 2 {
        return Err(LineaError::Usage(format!(
            "a tree item with chunks of {} sums and {} children",
            item.chunk,
            item.children.len()
        )));
    }
    Ok(len)
}

/// The job description: a loss and a kernel this worker knows, decodable.
pub fn job(job: &proto::JobInfo) -> Result<linea_engine::Loss> {
    let loss = crate::cli::parse_loss(&job.loss)
        .ok_or_else(|| LineaError::Usage(format!("the master asked for an unknown loss {:?}", job.loss)))?;
    super::kernels::kernel_for(&job.algorithm, &job.kernel)?;
    Ok(loss)
}

/// A phase body under the job's kernel: decodable.
pub fn phase_body(job: &proto::JobInfo, body: &[u8]) -> Result<()> {
    super::kernels::kernel_for(&job.algorithm, &job.kernel)?.decode_phase(body).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(reduction: proto::Reduction, len: u32) -> proto::Phase {
        proto::Phase { id: 3, reduction: reduction as i32, len, ..Default::default() }
    }

    #[test]
    fn sums_that_no_message_could_carry_are_refused_before_anything_is_allocated() {
        assert_eq!(reduction(&phase(proto::Reduction::Sum, 5)).unwrap(), Reduction::Sum { len: 5 });
        let huge = reduction(&phase(proto::Reduction::RangeSum, u32::MAX)).unwrap_err().to_string();
        assert!(huge.contains("more than one message can carry"), "{huge}");
        let unknown = proto::Phase { reduction: 9, ..phase(proto::Reduction::None, 0) };
        assert!(reduction(&unknown).unwrap_err().to_string().contains("unknown reduction 9"));
    }

    #[test]
    fn an_aggregation_range_outside_its_phase_is_refused() {
        let item = |begin, end| proto::AggregateItem { begin, end, sources: Vec::new(), patience_ms: 0 };
        let phase = Reduction::RangeSum { len: 10 };
        assert_eq!(aggregate_range(&item(2, 10), phase).unwrap(), 2..10);
        // Inverted (used to underflow `end - begin`) and past the end (used to allocate it).
        assert!(aggregate_range(&item(5, 4), phase).is_err());
        assert!(aggregate_range(&item(0, u32::MAX), phase).is_err());
        assert!(aggregate_range(&item(0, 1), Reduction::Sum { len: 10 }).is_err());
    }
}
