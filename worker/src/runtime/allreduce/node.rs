//! One worker's part in a tree AllReduce.
//!
//! Up: for each chunk in order, fetch the children's subtree sums of that chunk (both at
//! once), add them to this worker's own partial and publish the result on its board, where
//! the parent's call for that chunk is waiting. Down: for each chunk in order, fetch the
//! total from the parent (the root takes it from its own up pass) and publish it for the
//! children. Both passes run at the same time, so while chunk `c` climbs one level, chunk
//! `c + 1` is summed below it and chunk `c - 1` of the total descends: the pipeline of the
//! paper's section 3, with one round trip per chunk and level.
//!
//! Only the root keeps the whole total (for the master); every other worker keeps a
//! running digest of it, which the master compares with the root's.

use super::board::{Board, Chunk, Pass, WaitError};
use super::chunks;
use crate::runtime::{proto, wire};
use linea_proto::client::PeerClient;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How long a worker waits for a chunk of its own board, and a peer's call for one.
pub const WAIT: Duration = Duration::from_secs(60);

/// This worker's place in one reduce.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub parent: Option<String>,
    pub children: Vec<String>,
    /// Sums in the vector, and per chunk.
    pub len: usize,
    pub chunk: usize,
}

/// Why this worker's part failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeError {
    /// This peer did not answer or answered garbage: the master treats it as lost.
    Lost(String),
    /// The reduce was given up elsewhere (a peer aborted, a newer tree replaced it).
    Aborted,
}

/// Fetches a chunk of a peer's board (gRPC between workers; in-process in tests).
pub trait Fetch: Sync {
    fn fetch(&self, peer: &str, pass: Pass, chunk: usize) -> impl Future<Output = Result<Chunk, NodeError>> + Send;
}

/// What this worker ends with.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeOutcome {
    /// The total (the root only; empty elsewhere).
    pub total: Vec<i128>,
    /// Digest of the total, in [`chunks::digest`]'s terms.
    pub digest: u64,
    /// Units the total covers, as the root counted them.
    pub units: u32,
}

/// Runs this worker's part; `own` is its partial (of `spec.len` sums) over `own_units`
/// units. On failure the board is aborted, so peers waiting on it hear at once.
pub async fn run<F: Fetch>(
    spec: &NodeSpec,
    own: &[i128],
    own_units: u32,
    board: &Board,
    fetch: &F,
) -> Result<NodeOutcome, NodeError> {
    let outcome = reduce(spec, own, own_units, board, fetch).await;
    if outcome.is_err() {
        board.abort();
    }
    outcome
}

async fn reduce<F: Fetch>(
    spec: &NodeSpec,
    own: &[i128],
    own_units: u32,
    board: &Board,
    fetch: &F,
) -> Result<NodeOutcome, NodeError> {
    let ranges = chunks::ranges(spec.len, spec.chunk);
    let count = ranges.len();
    let checked = |peer: &str, chunk: Chunk, len: usize| {
        if chunk.sums.len() == len { Ok(chunk) } else { Err(NodeError::Lost(peer.to_string())) }
    };
    let up = async {
        for (c, range) in ranges.iter().enumerate() {
            let mut sums = own[range.clone()].to_vec();
            let mut units = own_units;
            let (first, second) = match spec.children.as_slice() {
                [] => (None, None),
                [a] => (Some(fetch.fetch(a, Pass::Up, c).await), None),
                [a, b, ..] => {
                    let (x, y) = tokio::join!(fetch.fetch(a, Pass::Up, c), fetch.fetch(b, Pass::Up, c));
                    (Some(x), Some(y))
                }
            };
            for (child, reply) in spec.children.iter().zip([first, second].into_iter().flatten()) {
                let chunk = checked(child, reply?, range.len())?;
                chunks::combine(&mut sums, &chunk.sums);
                units += chunk.units;
            }
            let chunk = Chunk { sums: Arc::new(sums), units };
            if spec.parent.is_none() {
                board.put(Pass::Down, c, chunk.clone());
            }
            board.put(Pass::Up, c, chunk);
        }
        Ok::<(), NodeError>(())
    };
    let down = async {
        let root = spec.parent.is_none();
        let mut total = Vec::with_capacity(if root { spec.len } else { 0 });
        let mut digest = chunks::Digest::default();
        let mut units = 0;
        for (c, range) in ranges.iter().enumerate() {
            let chunk = match &spec.parent {
                Some(parent) => {
                    let chunk = checked(parent, fetch.fetch(parent, Pass::Down, c).await?, range.len())?;
                    board.put(Pass::Down, c, chunk.clone());
                    chunk
                }
                None => board.wait(Pass::Down, c, count, WAIT).await.map_err(|_| NodeError::Aborted)?,
            };
            if c == 0 {
                units = chunk.units;
            }
            digest.add(&chunk.sums);
            if root {
                total.extend_from_slice(&chunk.sums);
            }
        }
        Ok::<_, NodeError>((total, digest.finish(), units))
    };
    let ((), (total, digest, units)) = tokio::try_join!(up, down)?;
    Ok(NodeOutcome { total, digest, units })
}

/// [`Fetch`] over the Peer service: `FetchChunk` calls with the job's secret over the
/// workers' channels (TLS unless `--insecure`).
pub struct GrpcFetch {
    pub clients: HashMap<String, PeerClient>,
    pub session: String,
    pub phase: u64,
    pub generation: u64,
    pub chunks: usize,
}

impl Fetch for GrpcFetch {
    fn fetch(&self, peer: &str, pass: Pass, chunk: usize) -> impl Future<Output = Result<Chunk, NodeError>> + Send {
        let client = self.clients.get(peer).cloned();
        let request = proto::FetchChunkRequest {
            session: self.session.clone(),
            phase: self.phase,
            generation: self.generation,
            chunk: chunk as u32,
            chunks: self.chunks as u32,
            down: pass == Pass::Down,
        };
        let peer = peer.to_string();
        async move {
            let lost = || NodeError::Lost(peer.clone());
            let mut client = client.ok_or_else(lost)?;
            match client.fetch_chunk(request).await {
                Ok(reply) => {
                    let reply = reply.into_inner();
                    let sums = wire::i128s(&reply.sums).ok_or_else(lost)?.collect();
                    Ok(Chunk { sums: Arc::new(sums), units: reply.units })
                }
                // The peer is there but its part was given up: not its loss.
                Err(status) if status_is_abort(status.code()) => Err(NodeError::Aborted),
                Err(status) => {
                    tracing::warn!(%peer, %status, "allreduce chunk unavailable");
                    Err(lost())
                }
            }
        }
    }
}

fn status_is_abort(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Aborted | tonic::Code::DeadlineExceeded | tonic::Code::OutOfRange | tonic::Code::NotFound
    )
}

/// The status a peer's call is answered with when the chunk cannot be had.
pub fn wait_status(error: WaitError) -> tonic::Status {
    match error {
        WaitError::Aborted => tonic::Status::aborted("this worker's part of the allreduce was given up"),
        WaitError::TimedOut => tonic::Status::deadline_exceeded("the chunk did not come in time"),
        WaitError::OutOfRange => tonic::Status::out_of_range("no such chunk in this allreduce"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::board::Boards;
    use super::super::tree::Tree;
    use super::*;

    /// Peers in this process: a fetch waits on the peer's board directly. `dead` peers
    /// answer nothing, as a killed worker.
    struct Local {
        boards: HashMap<String, Arc<Boards>>,
        dead: Vec<String>,
        chunks: usize,
    }

    impl Fetch for Local {
        fn fetch(&self, peer: &str, pass: Pass, chunk: usize) -> impl Future<Output = Result<Chunk, NodeError>> + Send {
            let board = (!self.dead.iter().any(|d| d == peer)).then(|| self.boards[peer].board(1, 1));
            let (peer, chunks) = (peer.to_string(), self.chunks);
            async move {
                let board = board.ok_or(NodeError::Lost(peer))?;
                board.wait(pass, chunk, chunks, WAIT).await.map_err(|_| NodeError::Aborted)
            }
        }
    }

    async fn allreduce(
        workers: usize,
        len: usize,
        chunk: usize,
        dead: Vec<String>,
    ) -> Vec<Result<NodeOutcome, NodeError>> {
        let names: Vec<String> = (0..workers).map(|i| format!("w{i}")).collect();
        let tree = Tree::new(1, names.clone());
        let boards: HashMap<String, Arc<Boards>> =
            names.iter().map(|n| (n.clone(), Arc::new(Boards::default()))).collect();
        let fetch =
            Arc::new(Local { boards: boards.clone(), dead: dead.clone(), chunks: chunks::ranges(len, chunk).len() });
        let mut tasks = Vec::new();
        for (i, name) in names.iter().enumerate().filter(|(_, n)| !dead.contains(n)) {
            let spec = NodeSpec {
                parent: tree.parent(name).cloned(),
                children: tree.children(name).into_iter().cloned().collect(),
                len,
                chunk,
            };
            let own: Vec<i128> = (0..len).map(|j| ((i as i128 + 1) << 70) / (j as i128 + 1) - j as i128).collect();
            let (board, fetch) = (boards[name].board(1, 1), fetch.clone());
            tasks.push(tokio::spawn(async move { run(&spec, &own, i as u32, &board, &*fetch).await }));
        }
        let mut outcomes = Vec::new();
        for t in tasks {
            outcomes.push(t.await.unwrap());
        }
        outcomes
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_worker_ends_with_the_total_chunk_by_chunk() {
        for (workers, len, chunk) in [(1, 10, 3), (2, 0, 4), (5, 1000, 64), (7, 100, 7), (13, 33, 1000)] {
            let outcomes = allreduce(workers, len, chunk, Vec::new()).await;
            let mut expected = vec![0i128; len];
            for i in 0..workers {
                let own: Vec<i128> = (0..len).map(|j| ((i as i128 + 1) << 70) / (j as i128 + 1) - j as i128).collect();
                chunks::combine(&mut expected, &own);
            }
            let root = outcomes[0].as_ref().unwrap();
            assert_eq!(root.total, expected, "{workers} workers, {len} sums in chunks of {chunk}");
            assert_eq!(root.units as usize, (0..workers).sum::<usize>(), "every worker's units counted once");
            for o in &outcomes {
                let o = o.as_ref().unwrap();
                assert_eq!((o.digest, o.units), (chunks::digest(&expected), root.units));
            }
            assert!(outcomes[1..].iter().all(|o| o.as_ref().unwrap().total.is_empty()), "only the root keeps it");
        }
    }

    /// A dead worker: its parent and children name it lost; everyone else hears an abort
    /// (their peers gave up) instead of waiting out a timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_worker_is_named_by_its_neighbours_and_the_rest_unwind() {
        let outcomes = allreduce(7, 500, 50, vec!["w1".into()]).await;
        // Alive: w0 (parent of w1), w2, w3 and w4 (children of w1), w5, w6.
        let names = ["w0", "w2", "w3", "w4", "w5", "w6"];
        for (name, outcome) in names.iter().zip(&outcomes) {
            let error = outcome.as_ref().unwrap_err();
            match *name {
                "w0" | "w3" | "w4" => assert_eq!(error, &NodeError::Lost("w1".into()), "{name}"),
                _ => assert_eq!(error, &NodeError::Aborted, "{name}"),
            }
        }
    }
}
