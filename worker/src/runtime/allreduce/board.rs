//! A worker's chunks of the reduces it takes part in, which its peers' calls wait on.
//!
//! A reduce is known by (phase, tree generation). Going up, chunk `c` is ready once this
//! worker has added its children's chunk `c` to its own partial; going down, once it has
//! the total's chunk `c` from its parent (the root: from its own up pass). A peer may ask
//! before this worker has even received its tree item, so a board is created by whichever
//! comes first. A reduce that fails here is marked aborted, which answers every waiting
//! peer at once (so a broken tree unwinds in a round trip per level, not a timeout).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Which pass a chunk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The sum over the worker's subtree.
    Up,
    /// The total.
    Down,
}

/// A ready chunk: its sums, and how many units they cover (for the up pass).
#[derive(Debug, Clone)]
pub struct Chunk {
    pub sums: Arc<Vec<i128>>,
    pub units: u32,
}

#[derive(Default)]
struct Chunks {
    up: Vec<Option<Chunk>>,
    down: Vec<Option<Chunk>>,
}

/// One reduce's chunks and the signal peers wait on.
pub struct Board {
    chunks: Mutex<Chunks>,
    /// Bumped at every change; `aborted` in the value once the reduce failed here.
    changed: watch::Sender<(u64, bool)>,
}

/// Why a wait ended without a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    /// This worker's part of the reduce failed (or a newer generation replaced it).
    Aborted,
    /// The chunk did not come in time.
    TimedOut,
    /// No such chunk in this reduce.
    OutOfRange,
}

impl Board {
    fn new() -> Self {
        Self { chunks: Mutex::new(Chunks::default()), changed: watch::channel((0, false)).0 }
    }

    fn bump(&self, abort: bool) {
        self.changed.send_modify(|(n, aborted)| {
            *n += 1;
            *aborted |= abort;
        });
    }

    /// Publishes chunk `c` of `pass`.
    pub fn put(&self, pass: Pass, c: usize, chunk: Chunk) {
        {
            let mut chunks = self.chunks.lock().expect("board lock");
            let list = match pass {
                Pass::Up => &mut chunks.up,
                Pass::Down => &mut chunks.down,
            };
            if list.len() <= c {
                list.resize(c + 1, None);
            }
            list[c] = Some(chunk);
        }
        self.bump(false);
    }

    pub fn abort(&self) {
        self.bump(true);
    }

    pub fn aborted(&self) -> bool {
        self.changed.borrow().1
    }

    fn get(&self, pass: Pass, c: usize) -> Option<Chunk> {
        let chunks = self.chunks.lock().expect("board lock");
        let list = match pass {
            Pass::Up => &chunks.up,
            Pass::Down => &chunks.down,
        };
        list.get(c).cloned().flatten()
    }

    /// Chunk `c` of `pass`, waiting up to `timeout` for it.
    pub async fn wait(&self, pass: Pass, c: usize, chunks: usize, timeout: Duration) -> Result<Chunk, WaitError> {
        if c >= chunks.max(1) {
            return Err(WaitError::OutOfRange);
        }
        let mut changes = self.changed.subscribe();
        let ready = async {
            loop {
                if changes.borrow_and_update().1 {
                    return Err(WaitError::Aborted);
                }
                if let Some(chunk) = self.get(pass, c) {
                    return Ok(chunk);
                }
                if changes.changed().await.is_err() {
                    return Err(WaitError::Aborted);
                }
            }
        };
        tokio::time::timeout(timeout, ready).await.unwrap_or(Err(WaitError::TimedOut))
    }
}

/// Every reduce this worker takes part in, by (phase, generation).
#[derive(Default)]
pub struct Boards {
    boards: Mutex<HashMap<(u64, u64), Arc<Board>>>,
}

impl Boards {
    /// The board of (phase, generation), created if new. A newer generation of the same
    /// phase aborts the older ones (their tree is gone); boards of phases two or more
    /// before `phase` are dropped (phases run one at a time).
    pub fn board(&self, phase: u64, generation: u64) -> Arc<Board> {
        let mut boards = self.boards.lock().expect("boards lock");
        if let Some(board) = boards.get(&(phase, generation)) {
            return board.clone();
        }
        boards.retain(|&(p, g), board| {
            if p == phase && g < generation {
                board.abort();
            }
            p + 2 > phase
        });
        boards.entry((phase, generation)).or_insert_with(|| Arc::new(Board::new())).clone()
    }

    /// Drops every board (a new master session).
    pub fn clear(&self) {
        let mut boards = self.boards.lock().expect("boards lock");
        for board in boards.values() {
            board.abort();
        }
        boards.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(30);

    fn chunk(v: i128) -> Chunk {
        Chunk { sums: Arc::new(vec![v]), units: 1 }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_peer_gets_the_chunk_when_it_is_put_and_an_abort_when_the_reduce_fails() {
        let boards = Arc::new(Boards::default());
        let board = boards.board(5, 1);
        let waiting = {
            let board = board.clone();
            tokio::spawn(async move { board.wait(Pass::Up, 1, 3, LONG).await })
        };
        board.put(Pass::Up, 0, chunk(10));
        board.put(Pass::Up, 1, chunk(11));
        assert_eq!(*waiting.await.unwrap().unwrap().sums, [11]);
        assert_eq!(board.wait(Pass::Up, 3, 3, LONG).await.unwrap_err(), WaitError::OutOfRange);
        assert_eq!(board.wait(Pass::Down, 0, 3, Duration::from_millis(1)).await.unwrap_err(), WaitError::TimedOut);
        let down = {
            let board = board.clone();
            tokio::spawn(async move { board.wait(Pass::Down, 2, 3, LONG).await })
        };
        // A newer tree for the same phase: the old board's waiters are answered at once.
        let newer = boards.board(5, 2);
        assert_eq!(down.await.unwrap().unwrap_err(), WaitError::Aborted);
        assert!(board.aborted() && !newer.aborted());
        assert!(Arc::ptr_eq(&newer, &boards.board(5, 2)), "one board per (phase, generation)");
        boards.board(7, 1);
        assert!(boards.boards.lock().unwrap().keys().all(|&(p, _)| p >= 6), "old phases dropped");
    }
}
