//! What the master accepts from workers and callers: `WorkerMessage`s (Join, Completed,
//! Leave) and `DrainRequest`s as protobuf bytes, fed to the master's scheduler
//! (worker::runtime::scheduler) while it runs phases of every kind.
//!
//! The input is a list of operations, each a selector byte, a length byte and that many
//! bytes of a message. Item ids in a `Completed` are replaced by ids the scheduler really
//! sent, so results reach running items, of the right worker or of another. Checked: no
//! panic, and a phase that completes hands the algorithm exactly the sums and payloads its
//! shape says; anything else must be the phase's error.
use linea_proto::v1::{self as proto, master_message, work_item, worker_message};
use linea_worker::runtime::scheduler::{Collect, Outbox, PhaseResult, Scheduler, WorkerKey};
use prost::Message;
use std::sync::mpsc::{Receiver, channel};

const UNITS: usize = 5;

struct Run {
    scheduler: Scheduler,
    workers: Vec<WorkerKey>,
    /// Items sent: (worker, item id).
    sent: Vec<(WorkerKey, u64)>,
    phase: Option<(Collect, Receiver<PhaseResult>)>,
    /// Scale-in decisions so far: each new desired count is the next one, as in the master.
    decisions: u32,
}

impl Run {
    fn take(&mut self, outbox: Outbox) {
        for (worker, message) in outbox {
            if let Some(master_message::Body::Assignment(a)) = message.body {
                for item in a.items {
                    assert!(item.kind.is_some());
                    if let Some(work_item::Kind::Unit(u)) = &item.kind {
                        assert!((u.unit as usize) < UNITS, "unit {} of {UNITS}", u.unit);
                    }
                    self.sent.push((worker, item.id));
                }
            }
        }
    }

    fn check_result(&mut self) {
        let Some((collect, result)) = &self.phase else { return };
        let Ok(result) = result.try_recv() else { return };
        if let Ok(output) = result {
            let expected = match *collect {
                Collect::Nothing => 0,
                Collect::Sums(n) | Collect::Aggregated(n) | Collect::Tree(n) => n,
            };
            assert_eq!(output.sums.sums.len(), expected, "{collect:?}");
            assert_eq!(output.payloads.len(), UNITS);
        }
        self.phase = None;
    }
}

pub fn run(data: &[u8]) {
    let mut run =
        Run { scheduler: Scheduler::new(UNITS), workers: Vec::new(), sent: Vec::new(), phase: None, decisions: 0 };
    let mut rest = data;
    while let [selector, len, tail @ ..] = rest {
        let (body, next) = tail.split_at((*len as usize).min(tail.len()));
        rest = next;
        let pick = |n: usize| (*len as usize) % n.max(1);
        match selector % 6 {
            0 if run.phase.is_none() => {
                let collect = match selector / 6 % 4 {
                    0 => Collect::Nothing,
                    1 => Collect::Sums(*len as usize % 4),
                    // A tree allreduce over every worker.
                    3 => Collect::Tree(*len as usize % 5),
                    // Up to three aggregation ranges.
                    _ => Collect::Aggregated(*len as usize * 97),
                };
                let (reply, result) = channel();
                let phase = proto::Phase::decode(body).unwrap_or_default();
                let outbox = run.scheduler.start_phase(phase, collect, reply);
                run.take(outbox);
                run.phase = Some((collect, result));
            }
            1 | 2 => {
                let Ok(message) = proto::WorkerMessage::decode(body) else { continue };
                let outbox = match message.body {
                    Some(worker_message::Body::Join(join)) => {
                        // Threads as the message says, kept small enough to run quickly.
                        let (key, outbox) =
                            run.scheduler.join(join.worker_id, join.address, join.threads as usize % 64);
                        run.workers.push(key);
                        outbox
                    }
                    Some(worker_message::Body::Completed(mut done)) if !run.workers.is_empty() => {
                        let worker = run.workers[pick(run.workers.len())];
                        for (i, result) in done.results.iter_mut().enumerate() {
                            if !run.sent.is_empty() && selector & 0x40 == 0 {
                                result.item = run.sent[(pick(run.sent.len()) + i) % run.sent.len()].1;
                            }
                        }
                        run.scheduler.complete(worker, done.results)
                    }
                    Some(worker_message::Body::Leave(_)) if !run.workers.is_empty() => {
                        run.scheduler.drain(run.workers[pick(run.workers.len())])
                    }
                    _ => Outbox::new(),
                };
                run.take(outbox);
            }
            3 if !run.workers.is_empty() => {
                // The stream of a worker ended.
                let worker = run.workers.remove(pick(run.workers.len()));
                let outbox = run.scheduler.lose(worker);
                run.take(outbox);
            }
            4 => {
                let Ok(request) = proto::DrainRequest::decode(body) else { continue };
                if let Some(key) = run.scheduler.find_worker(&request.worker) {
                    let outbox = run.scheduler.drain(key);
                    run.take(outbox);
                }
            }
            5 => {
                let desired = (*len != 0).then_some(*len as usize % 8);
                run.decisions += 1;
                let outbox = run.scheduler.set_desired(desired, run.decisions);
                run.take(outbox);
            }
            _ => {}
        }
        run.check_result();
    }
    // Answer every item sent as its worker would: a sum phase gets its sums, a range its range.
    let answers: Vec<(WorkerKey, u64)> = run.sent.clone();
    for (worker, item) in answers {
        let len = match run.phase.as_ref().map(|p| p.0) {
            Some(Collect::Sums(n)) => n,
            _ => 0,
        };
        let sums = linea_worker::runtime::wire::from_i128s(&vec![1; len]);
        let outbox = run.scheduler.complete(worker, vec![proto::ItemResult { item, sums, ..Default::default() }]);
        run.take(outbox);
        run.check_result();
    }
}
