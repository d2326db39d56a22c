//! (b) A thin client: it reserves a block of ids over HTTP
//! (`POST /v1/sequences/{name}/reserve?size=N`) and hands the ids out from
//! memory, reserving the next block when one is used up. Its rate counts
//! every id handed out in the timed part, the reservation requests' time
//! included.

use std::hint::black_box;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

use bakery_serve::Block;
use hyper::{Method, Uri};

use crate::http::{self, Conn, Reply};
use crate::stats::{Phases, Tally};

/// Ids handed out between two looks at the clock.
const CHUNK: u64 = 1 << 16;

/// Failed reservations in a row after which the client gives up.
const MAX_FAILURES: u32 = 100;

/// What a program in another language would write: one connection, the
/// current block, and a request when it runs out.
pub struct ThinClient {
    conn: Conn,
    reserve: Uri,
    size: u64,
    next: u64,
    end: u64,
    /// Every block received, for the check that none overlap.
    blocks: Vec<Range<u64>>,
    /// Reservation latencies (timed part), failures (all).
    tally: Tally,
    timing: bool,
}

impl ThinClient {
    pub async fn open(addr: SocketAddr, sequence: &str, size: u64) -> Result<ThinClient, String> {
        Ok(ThinClient {
            conn: Conn::open(addr).await?,
            reserve: http::target(&format!("/v1/sequences/{sequence}/reserve?size={size}"))?,
            size,
            next: 0,
            end: 0,
            blocks: Vec::new(),
            tally: Tally::new(),
            timing: false,
        })
    }

    /// The next id, from memory, or from a new block.
    #[inline]
    pub async fn next(&mut self) -> Result<u64, String> {
        if self.next == self.end {
            self.refill().await?;
        }
        let id = self.next;
        self.next += 1;
        Ok(id)
    }

    #[inline(never)]
    async fn refill(&mut self) -> Result<(), String> {
        let mut failures = 0;
        loop {
            let begin = Instant::now();
            let answer = self.conn.call(Method::POST, &self.reserve, None).await;
            let latency = begin.elapsed();
            match answer.and_then(Reply::ok).and_then(|body| self.read(&body)) {
                Ok(block) => {
                    if self.timing {
                        self.tally.record(latency);
                    }
                    self.next = block.start;
                    self.end = block.end;
                    self.blocks.push(block);
                    return Ok(());
                }
                Err(err) => {
                    self.tally.error(err.clone());
                    failures += 1;
                    if failures >= MAX_FAILURES {
                        return Err(format!("{failures} reservations failed in a row: {err}"));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
    }

    fn read(&self, body: &[u8]) -> Result<Range<u64>, String> {
        let block: Block =
            serde_json::from_slice(body).map_err(|err| format!("reserve body: {err}"))?;
        if block.end.checked_sub(block.start) != Some(self.size) {
            return Err(format!(
                "asked for {} ids, got {}..{}",
                self.size, block.start, block.end
            ));
        }
        Ok(block.start..block.end)
    }
}

/// A finished cell.
pub struct BlockCell {
    pub size: u64,
    /// Which round of the cell (from 1).
    pub round: usize,
    pub ids: u64,
    pub per_sec: f64,
    /// Reservations of the timed part and their latencies.
    pub reserves: Tally,
    pub problems: Vec<String>,
}

/// Run one cell: one thin client with blocks of `size` ids.
pub async fn run(
    addr: SocketAddr,
    sequence: &str,
    size: u64,
    round: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<BlockCell, String> {
    let mut client = ThinClient::open(addr, sequence, size).await?;
    let phases = Phases::start(warmup, duration);
    let mut last: Option<u64> = None;
    let mut backwards = 0u64;
    let mut handed = 0u64;
    let mut timed_ids = 0u64;
    let mut timed_start: Option<Instant> = None;
    let finished = loop {
        for _ in 0..CHUNK {
            let id = black_box(client.next().await?);
            if last.is_some_and(|before| id <= before) {
                backwards += 1;
            }
            last = Some(id);
        }
        handed += CHUNK;
        let now = Instant::now();
        match timed_start {
            None if now >= phases.timed_from => {
                timed_start = Some(now);
                timed_ids = handed;
                client.timing = true;
            }
            Some(_) if now >= phases.until => break now,
            _ => {}
        }
    };
    let timed = timed_start.map_or(Duration::ZERO, |start| finished - start);
    let ids = handed - timed_ids;
    let mut problems = Vec::new();
    if backwards > 0 {
        problems.push(format!("{backwards} id(s) not above the one before"));
    }
    let mut blocks = client.blocks;
    blocks.sort_unstable_by_key(|block| block.start);
    let overlaps = blocks
        .windows(2)
        .filter(|pair| pair[1].start < pair[0].end)
        .count();
    if overlaps > 0 {
        problems.push(format!(
            "{overlaps} block(s) overlapping the one before among {}",
            blocks.len()
        ));
    }
    Ok(BlockCell {
        size,
        round,
        ids,
        per_sec: ids as f64 / timed.as_secs_f64().max(f64::MIN_POSITIVE),
        reserves: client.tally,
        problems,
    })
}
