//! One allreduce of a vector of exact sums, timed against its length and the worker count: the tree
//! allreduce (runtime::allreduce) against the master-centred range aggregation. `allreduce-bench
//! [--lengths 1000,...] [--workers 2,4,...] [--repeats 3] [--max-cells 64000000]`, run by
//! bench/allreduce-bench.sh; results in docs/benchmarks/allreduce.md.
//!
//! Simulated: the workers are W tasks in this one process (on a tokio runtime of two
//! threads, the machine's cores), each with its own Peer gRPC server on a loopback port,
//! TLS with the job's member certificate and the job secret, as real workers. What is
//! real: the Peer service and its clients, the worker's tree code (`node::run` over
//! `GrpcFetch`, its boards and chunking), and for the ranges the worker's aggregation
//! pattern (ranges of 8,192 sums, one aggregator item at a time per worker, the sources
//! of a range fetched one after another with FetchPartial). What is not: no master,
//! scheduler or Work stream (the unit items that leave the partials, the item messages and
//! the final transfer of the total to the master — the same L sums for both — are not
//! timed), and every worker's partial is one shared vector.
//!
//! Timed per (L, W): the tree's reduce (until the root holds the total) and allreduce
//! (until every worker holds it), and the ranges' aggregation (until every range is
//! summed on its aggregator). Each the median of `--repeats` runs after one untimed run
//! that opens the connections. Both totals are checked equal (exact sums).

use linea_proto::auth::JobSecret;
use linea_proto::client::{Expect, PeerClient, Timeouts};
use linea_proto::peer::{ChunkFuture, PeerBackend};
use linea_proto::tls::{JobCertificates, Role, Transport, WORKER_NAME};
use linea_proto::v1 as proto;
use linea_worker::runtime::allreduce::board::{Boards, Pass};
use linea_worker::runtime::allreduce::chunks::{self, CHUNK_LEN};
use linea_worker::runtime::allreduce::node::{self, GrpcFetch, NodeSpec, WAIT, wait_status};
use linea_worker::runtime::allreduce::tree::Tree;
use linea_worker::runtime::scheduler::RANGE_LEN;
use linea_worker::runtime::wire;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

const SESSION: &str = "bench";

/// A simulated worker's Peer backend: one partial, and the boards of its tree reduces.
struct Sim {
    partial: Arc<Vec<i128>>,
    boards: Arc<Boards>,
}

impl PeerBackend for Sim {
    fn in_session(&self, session: &str) -> bool {
        session == SESSION
    }
    fn partial(&self, _phase: u64, begin: usize, end: usize) -> Option<proto::Partial> {
        Some(proto::Partial { units: vec![0], sums: wire::from_i128s(self.partial.get(begin..end)?) })
    }
    fn unit_state(&self, _: u32, _: u64) -> Option<Vec<u8>> {
        None
    }
    fn cell(&self, _: u32, _: u32) -> Option<Vec<u8>> {
        None
    }
    fn chunk(&self, r: proto::FetchChunkRequest) -> ChunkFuture {
        let board = self.boards.board(r.phase, r.generation);
        let pass = if r.down { Pass::Down } else { Pass::Up };
        Box::pin(async move {
            let chunk = board.wait(pass, r.chunk as usize, r.chunks as usize, WAIT).await.map_err(wait_status)?;
            Ok(proto::ReduceChunk { sums: wire::from_i128s(&chunk.sums), units: chunk.units })
        })
    }
}

struct Cluster {
    addresses: Vec<String>,
    boards: Vec<Arc<Boards>>,
    /// clients[i][j]: worker i's client to worker j.
    clients: Vec<Vec<PeerClient>>,
}

async fn cluster(workers: usize, partial: Arc<Vec<i128>>, secret: &JobSecret, member: &Transport) -> Cluster {
    let (mut addresses, mut boards) = (Vec::new(), Vec::new());
    for _ in 0..workers {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        addresses.push(format!("http://{}", listener.local_addr().expect("address")));
        let sim = Arc::new(Sim { partial: partial.clone(), boards: Arc::default() });
        boards.push(sim.boards.clone());
        let service = linea_proto::server::peer(sim, secret);
        let server = linea_proto::server::builder(member).expect("server").add_service(service);
        tokio::spawn(server.serve_with_incoming(linea_proto::server::incoming(listener)));
    }
    let mut clients = Vec::new();
    for _ in 0..workers {
        let mut row = Vec::new();
        for address in &addresses {
            let channel =
                linea_proto::client::lazy_channel(address, Timeouts::RUNTIME, member, Expect::Name(WORKER_NAME))
                    .expect("channel");
            row.push(linea_proto::client::peer(channel, secret));
        }
        clients.push(row);
    }
    Cluster { addresses, boards, clients }
}

/// One tree allreduce as reduce `id`: (seconds until the root has the total, until all do, total).
async fn tree(c: &Cluster, partial: &Arc<Vec<i128>>, id: u64) -> (f64, f64, Vec<i128>) {
    let workers = c.addresses.len();
    let tree = Tree::new(1, (0..workers).collect::<Vec<usize>>());
    let len = partial.len();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..workers {
        let spec = NodeSpec {
            parent: tree.parent(&i).map(|&p| c.addresses[p].clone()),
            children: tree.children(&i).into_iter().map(|&ch| c.addresses[ch].clone()).collect(),
            len,
            chunk: CHUNK_LEN,
        };
        let peers = tree.parent(&i).into_iter().chain(tree.children(&i));
        let fetch = GrpcFetch {
            clients: peers.map(|&p| (c.addresses[p].clone(), c.clients[i][p].clone())).collect::<HashMap<_, _>>(),
            session: SESSION.into(),
            phase: id,
            generation: 1,
            chunks: chunks::ranges(len, CHUNK_LEN).len(),
        };
        let (board, own) = (c.boards[i].board(id, 1), partial.clone());
        tasks.push(tokio::spawn(async move {
            let outcome = node::run(&spec, &own, 1, &board, &fetch).await.expect("allreduce");
            (outcome, start.elapsed().as_secs_f64())
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.expect("task"));
    }
    let all = done.iter().map(|d| d.1).fold(0.0, f64::max);
    let (root, root_time) = done.swap_remove(0);
    assert!(done.iter().all(|d| d.0.digest == root.digest), "every worker got the root's total");
    (root_time, all, root.total)
}

/// The master-centred range aggregation: range r summed by worker r mod W, one range at a
/// time per worker, its sources fetched one after another (the worker's `aggregate`).
async fn ranges(c: &Cluster, partial: &Arc<Vec<i128>>, id: u64) -> (f64, Vec<i128>) {
    let workers = c.addresses.len();
    let len = partial.len();
    let count = len.div_ceil(RANGE_LEN).max(1);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let clients = c.clients[w].clone();
        let own = partial.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for r in (w..count).step_by(workers) {
                let (begin, end) = (r * RANGE_LEN, ((r + 1) * RANGE_LEN).min(len));
                let mut total = own[begin..end].to_vec();
                for (j, client) in clients.iter().enumerate().filter(|&(j, _)| j != w) {
                    let request = proto::FetchPartialRequest {
                        session: SESSION.into(),
                        phase: id,
                        begin: begin as u32,
                        end: end as u32,
                    };
                    let reply = client.clone().fetch_partial(request).await.unwrap_or_else(|e| panic!("{j}: {e}"));
                    chunks::combine(
                        &mut total,
                        &wire::i128s(&reply.into_inner().sums).expect("whole sums").collect::<Vec<_>>(),
                    );
                }
                out.push((r, total));
            }
            out
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.extend(t.await.expect("task"));
    }
    let seconds = start.elapsed().as_secs_f64();
    results.sort_by_key(|r| r.0);
    (seconds, results.into_iter().flat_map(|r| r.1).collect())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn list(args: &[String], flag: &str, default: &[usize]) -> Vec<usize> {
    match args.iter().position(|a| a == flag) {
        Some(i) => args
            .get(i + 1)
            .unwrap_or_else(|| panic!("{flag} needs a value"))
            .split(',')
            .map(|v| v.parse::<f64>().unwrap_or_else(|_| panic!("{flag}: {v} is not a number")) as usize)
            .collect(),
        None => default.to_vec(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let lengths = list(&args, "--lengths", &[1_000, 10_000, 100_000, 1_000_000, 10_000_000]);
    let workers = list(&args, "--workers", &[2, 4, 8, 16, 32, 64]);
    let repeats = list(&args, "--repeats", &[3])[0].max(1);
    let max_cells = list(&args, "--max-cells", &[64_000_000])[0];
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let certs = JobCertificates::generate("bench", &["127.0.0.1".into()]).expect("certificates");
    let member = Transport::Tls(certs.tls(Role::Member).expect("member certificate"));
    let secret = JobSecret::generate();
    println!(
        "| sums (L) | workers (W) | chunks | tree reduce (s) | tree allreduce (s) | ranges (s) | ranges / tree allreduce |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for &len in &lengths {
        let partial: Arc<Vec<i128>> =
            Arc::new((0..len).map(|i| linea_engine::fixed::to_fixed128((i as f64).sin() * 1e3)).collect());
        for &w in &workers {
            if len * w > max_cells {
                println!("| {len} | {w} | skipped: L x W > --max-cells {max_cells} (memory) | | | | |");
                continue;
            }
            // This configuration's servers stay up until the process ends (a few hundred idle tasks).
            runtime.block_on(async {
                let c = cluster(w, partial.clone(), &secret, &member).await;
                let mut id = 10;
                // Untimed: opens every connection.
                tree(&c, &partial, id).await;
                ranges(&c, &partial, id).await;
                let (mut reduce, mut all, mut agg) = (Vec::new(), Vec::new(), Vec::new());
                for _ in 0..repeats {
                    id += 3;
                    let (r, a, total) = tree(&c, &partial, id).await;
                    let (g, sums) = ranges(&c, &partial, id).await;
                    assert!(total == sums, "tree and ranges disagree");
                    reduce.push(r);
                    all.push(a);
                    agg.push(g);
                }
                let (reduce, all, agg) = (median(reduce), median(all), median(agg));
                println!(
                    "| {len} | {w} | {} | {reduce:.4} | {all:.4} | {agg:.4} | {:.2} |",
                    chunks::ranges(len, CHUNK_LEN).len(),
                    agg / all
                );
                for b in &c.boards {
                    b.clear();
                }
            });
        }
    }
}
