//! What a worker accepts: the master's `MasterMessage`s (job, assignments), and its peers'
//! replies (`Partial`, `UnitState`, `CellBytes`), as protobuf bytes, through the checks the
//! worker makes before acting on them (worker::runtime::worker::validate, wire, codec).
//!
//! The input is a list of messages, each a selector byte, a length byte and that many bytes.
//! Checked: no panic, no allocation the message did not carry the bytes for, and what the
//! checks pass is in range (sums per item within one message, ranges within their phase).
use linea_engine::algorithm::Reduction;
use linea_engine::codec;
use linea_proto::v1::{self as proto, master_message, work_item};
use linea_worker::runtime::wire;
use linea_worker::runtime::worker::validate;
use prost::Message;
use std::collections::HashMap;

pub fn run(data: &[u8]) {
    let mut job: Option<proto::JobInfo> = None;
    let mut phases: HashMap<u64, Reduction> = HashMap::new();
    let mut rest = data;
    while let [selector, len, tail @ ..] = rest {
        let (body, next) = tail.split_at((*len as usize).min(tail.len()));
        rest = next;
        match selector % 4 {
            0 => {
                let Ok(message) = proto::MasterMessage::decode(body) else { continue };
                match message.body {
                    Some(master_message::Body::Job(info)) if validate::job(&info).is_ok() => job = Some(info),
                    Some(master_message::Body::Assignment(assignment)) => {
                        for phase in &assignment.phases {
                            let Ok(reduction) = validate::reduction(phase) else { continue };
                            if let Reduction::Sum { len } | Reduction::RangeSum { len } | Reduction::AllReduce { len } =
                                reduction
                            {
                                assert!(len <= validate::MAX_SUMS);
                            }
                            if let Some(info) = &job {
                                let _ = validate::phase_body(info, &phase.body);
                            }
                            phases.insert(phase.id, reduction);
                        }
                        for item in &assignment.items {
                            if let (Some(work_item::Kind::Tree(t)), Some(&reduction)) =
                                (&item.kind, phases.get(&item.phase))
                                && validate::tree_item(t, reduction).is_ok()
                            {
                                let Reduction::AllReduce { .. } = reduction else { panic!("{reduction:?}") };
                                assert!(t.chunk > 0 && t.children.len() <= 2);
                            }
                            let Some(work_item::Kind::Aggregate(a)) = &item.kind else { continue };
                            let Some(&reduction) = phases.get(&item.phase) else { continue };
                            if let Ok(range) = validate::aggregate_range(a, reduction) {
                                let Reduction::RangeSum { len } = reduction else { panic!("{reduction:?}") };
                                assert!(range.start <= range.end && range.end <= len);
                                // What the worker then allocates: one i128 per sum of the range.
                                let total = vec![0i128; range.len()];
                                assert_eq!(total.len(), range.end - range.start);
                            }
                        }
                    }
                    _ => {}
                }
            }
            1 => {
                let Ok(partial) = proto::Partial::decode(body) else { continue };
                if let Some(sums) = wire::i128s(&partial.sums) {
                    assert_eq!(wire::from_i128s(&sums.collect::<Vec<_>>()), partial.sums);
                }
            }
            2 => {
                let Ok(cell) = proto::CellBytes::decode(body) else { continue };
                let _ = codec::decode_cell(&cell.compressed, codec::cell_limit(64, 64));
            }
            _ => {
                let Ok(unit) = proto::UnitState::decode(body) else { continue };
                // SCD's unit state is a shard's predictions, CoCoA's a slot's duals.
                let _ = linea_engine::algorithm::decode::<linea_engine::scd::kernel::ShardPredictions>(
                    &unit.state,
                    "state",
                );
                let _ = linea_engine::algorithm::decode::<Vec<f64>>(&unit.state, "state");
            }
        }
    }
}
