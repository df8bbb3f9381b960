//! A fault-injecting HTTP/1.1 proxy between the S3 client and the server: per request it
//! forwards, adds latency, answers 503/500 itself, drops the connection, or forwards and
//! then cuts the response body short. A plan function chooses per request, from its
//! sequence number and method, so tests can be random-but-seeded or exact; or the test
//! arms faults at moments it chooses ([`Armed`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Wait this long, then forward.
    Latency(Duration),
    /// Answer 503 SlowDown (throttling) without forwarding.
    Throttle,
    /// Answer 500 InternalError without forwarding.
    ServerError,
    /// Close the connection after reading the request, answering nothing.
    Drop,
    /// Forward, then send the response head and only half its body, and close.
    Truncate,
}

pub type Plan = Arc<dyn Fn(u64, &str) -> Option<Fault> + Send + Sync>;

/// Faults at `rate` per request, each kind in turn, chosen by a seeded hash of the
/// request's number: the same seed gives the same fault sequence.
pub fn random_plan(rate: f64, seed: u64, kinds: Vec<Fault>) -> Plan {
    Arc::new(move |n, _method| {
        let h = splitmix(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        (((h >> 11) as f64 / (1u64 << 53) as f64) < rate).then(|| kinds[(splitmix(h) % kinds.len() as u64) as usize])
    })
}

/// Faults a test arms at moments it chooses: each is injected into the next request it
/// applies to, in the order armed (a truncation needs a response body: it waits for a GET,
/// and the faults armed after it go to the requests before that GET).
#[derive(Default)]
pub struct Armed {
    queue: Mutex<VecDeque<Fault>>,
}

impl Armed {
    pub fn arm(&self, fault: Fault, times: usize) {
        self.queue.lock().unwrap().extend(std::iter::repeat_n(fault, times));
    }

    /// Faults armed and not yet injected.
    pub fn pending(&self) -> usize {
        self.queue.lock().unwrap().len()
    }

    /// Disarms what was not injected; returns how many.
    pub fn clear(&self) -> usize {
        let mut queue = self.queue.lock().unwrap();
        let left = queue.len();
        queue.clear();
        left
    }

    pub fn plan(self: &Arc<Self>) -> Plan {
        let armed = self.clone();
        Arc::new(move |_n, method| {
            let mut queue = armed.queue.lock().unwrap();
            let next = queue.iter().position(|&f| f != Fault::Truncate || method == "GET")?;
            queue.remove(next)
        })
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Debug, Default)]
pub struct Counts {
    pub requests: AtomicU64,
    pub latency: AtomicU64,
    /// 503 SlowDown answers.
    pub throttles: AtomicU64,
    /// 500 InternalError answers.
    pub server_errors: AtomicU64,
    pub drops: AtomicU64,
    pub truncations: AtomicU64,
}

impl Counts {
    pub fn faults(&self) -> u64 {
        [&self.latency, &self.throttles, &self.server_errors, &self.drops, &self.truncations]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    pub fn summary(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{} requests: {} delayed, {} 503, {} 500, {} dropped, {} truncated",
            get(&self.requests),
            get(&self.latency),
            get(&self.throttles),
            get(&self.server_errors),
            get(&self.drops),
            get(&self.truncations)
        )
    }
}

pub struct FaultProxy {
    pub port: u16,
    pub counts: Arc<Counts>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FaultProxy {
    pub fn start(upstream_port: u16, plan: Plan) -> FaultProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Counts::default());
        let (c, sequence) = (counts.clone(), Arc::new(AtomicU64::new(0)));
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (plan, counts, sequence) = (plan.clone(), c.clone(), sequence.clone());
                tokio::spawn(async move {
                    let _ = serve(client, upstream_port, plan, counts, sequence).await;
                });
            }
        });
        FaultProxy { port, counts, runtime: Some(runtime) }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// An HTTP message head: the start line and header lines, as received.
struct Head {
    raw: Vec<u8>,
    first: String,
    content_length: Option<usize>,
    chunked: bool,
    close: bool,
}

async fn read_head<R: AsyncBufReadExt + Unpin>(r: &mut R) -> std::io::Result<Option<Head>> {
    let mut raw = Vec::new();
    loop {
        let before = raw.len();
        if r.read_until(b'\n', &mut raw).await? == 0 {
            return if raw.is_empty() { Ok(None) } else { Err(std::io::ErrorKind::UnexpectedEof.into()) };
        }
        if raw[before..] == *b"\r\n" {
            break;
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default().to_string();
    let (mut content_length, mut chunked, mut close) = (None, false, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_ascii_lowercase());
        match name.as_str() {
            "content-length" => content_length = value.parse().ok(),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "connection" => close = value == "close",
            _ => {}
        }
    }
    Ok(Some(Head { raw, first, content_length, chunked, close }))
}

/// Reads a body as framed (Content-Length or chunked), returning its bytes as sent.
async fn read_body<R: AsyncBufReadExt + Unpin>(r: &mut R, head: &Head) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if head.chunked {
        loop {
            let start = body.len();
            r.read_until(b'\n', &mut body).await?;
            let line = String::from_utf8_lossy(&body[start..]).into_owned();
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).await?;
            body.extend_from_slice(&chunk);
            if size == 0 {
                return Ok(body);
            }
        }
    }
    body.resize(head.content_length.unwrap_or(0), 0);
    r.read_exact(&mut body).await?;
    Ok(body)
}

fn canned(status: &str, code: &str) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected by the test proxy</Message></Error>"
    );
    format!("HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        .into_bytes()
}

async fn serve(
    client: TcpStream,
    upstream_port: u16,
    plan: Plan,
    counts: Arc<Counts>,
    sequence: Arc<AtomicU64>,
) -> std::io::Result<()> {
    // Without TCP_NODELAY, head and body in separate segments meet delayed ACKs: +40 ms.
    client.set_nodelay(true)?;
    let (client_read, mut client_write) = client.into_split();
    let mut client_read = BufReader::new(client_read);
    let mut upstream: Option<(BufReader<tokio::net::tcp::OwnedReadHalf>, tokio::net::tcp::OwnedWriteHalf)> = None;
    while let Some(request) = read_head(&mut client_read).await? {
        let body = read_body(&mut client_read, &request).await?;
        let method = request.first.split(' ').next().unwrap_or_default().to_string();
        counts.requests.fetch_add(1, Ordering::Relaxed);
        let fault = plan(sequence.fetch_add(1, Ordering::Relaxed), &method);
        match fault {
            Some(Fault::Drop) => {
                counts.drops.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Some(Fault::Throttle) => {
                counts.throttles.fetch_add(1, Ordering::Relaxed);
                client_write.write_all(&canned("503 Slow Down", "SlowDown")).await?;
                continue;
            }
            Some(Fault::ServerError) => {
                counts.server_errors.fetch_add(1, Ordering::Relaxed);
                client_write.write_all(&canned("500 Internal Server Error", "InternalError")).await?;
                continue;
            }
            Some(Fault::Latency(pause)) => {
                counts.latency.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(pause).await;
            }
            Some(Fault::Truncate) | None => {}
        }
        if upstream.is_none() {
            let stream = TcpStream::connect(("127.0.0.1", upstream_port)).await?;
            stream.set_nodelay(true)?;
            let (r, w) = stream.into_split();
            upstream = Some((BufReader::new(r), w));
        }
        let (up_read, up_write) = upstream.as_mut().expect("connected");
        up_write.write_all(&[request.raw.as_slice(), &body].concat()).await?;
        let response = loop {
            let head = read_head(up_read).await?.ok_or(std::io::ErrorKind::UnexpectedEof)?;
            if head.first.split(' ').nth(1).is_some_and(|s| s.starts_with('1')) {
                client_write.write_all(&head.raw).await?;
                continue;
            }
            break head;
        };
        let status = response.first.split(' ').nth(1).unwrap_or_default().to_string();
        let bodiless = method == "HEAD" || status == "204" || status == "304";
        let body = if bodiless { Vec::new() } else { read_body(up_read, &response).await? };
        if fault == Some(Fault::Truncate) && body.len() > 1 {
            counts.truncations.fetch_add(1, Ordering::Relaxed);
            client_write.write_all(&[response.raw.as_slice(), &body[..body.len() / 2]].concat()).await?;
            return Ok(());
        }
        client_write.write_all(&[response.raw.as_slice(), &body].concat()).await?;
        if response.close || request.close {
            return Ok(());
        }
    }
    Ok(())
}
