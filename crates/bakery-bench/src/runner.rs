//! Runs one cell: its clients in parallel for the duration, timing every
//! operation into HDR histograms and counting store round trips.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bakery::CountingStore;
use crossbeam_utils::CachePadded;
use tokio::sync::Barrier;
use tokio::time::Instant;

use crate::error::BenchError;
use crate::model::{BenchClient, PreparedCell};
use crate::stats::LatencyHistogram;

/// After a failed operation a client pauses this long, so a store that is
/// down produces a countable trickle of errors instead of a busy loop.
const ERROR_PAUSE: Duration = Duration::from_millis(10);

/// A client yields to the scheduler after this many operations. Operations
/// that never wait (a cached `next()`) would otherwise keep a worker thread
/// to themselves and starve the other clients and the background prefetch.
const YIELD_EVERY: u32 = 256;

/// The start signal of a cell. It is given once every client waits for it,
/// and the clients wait awake (yielding in a loop), not asleep on a
/// barrier: a barrier wakes them all at once into one worker's queue, and
/// a client that runs first can then take a free lock hundreds of times
/// before the others have even asked (seen on the memory store with 64
/// clients: 1 of them past the barrier after 5 ms). A client that spins is
/// on some worker's queue all along, so each sees the start within one
/// pass of the scheduler.
#[derive(Default)]
struct StartSignal {
    waiting: AtomicUsize,
    given: AtomicBool,
    /// When to stop; set before `given`.
    stop: OnceLock<Stop>,
}

impl StartSignal {
    /// A client: wait (awake) for the start; then when to stop.
    async fn wait(&self) -> &Stop {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        loop {
            if self.given.load(Ordering::Acquire) {
                if let Some(stop) = self.stop.get() {
                    return stop;
                }
            }
            tokio::task::yield_now().await;
        }
    }

    /// The runner: until all `clients` wait.
    async fn all_waiting(&self, clients: usize) {
        while self.waiting.load(Ordering::Acquire) < clients {
            tokio::task::yield_now().await;
        }
    }

    fn give(&self, stop: Stop) {
        // Set once, by the one runner of the cell.
        let _ = self.stop.set(stop);
        self.given.store(true, Ordering::Release);
    }
}

/// How long after the end of a cell a client may take to finish its last
/// operation before it is abandoned (and counted as an error).
pub const STRAGGLER_GRACE: Duration = Duration::from_secs(60);

/// How far past its duration a cell may run to reach its workload's
/// operations per client ([`WorkloadSpec::min_ops_per_client`]), as a
/// multiple of the duration.
///
/// [`WorkloadSpec::min_ops_per_client`]: crate::model::WorkloadSpec::min_ops_per_client
pub const MAX_EXTENSION: u32 = 5;

/// The operations per client (on average) every cell runs to, whatever its
/// workload asks (within [`MAX_EXTENSION`]): a client that a busy machine
/// did not run before the duration ended would otherwise leave a cell of no
/// operations, a rate of 0 that measures nothing.
pub const MIN_OPS_PER_CLIENT: u64 = 1;

/// When a cell's clients stop: at the duration, or later if the cell has
/// fewer operations than it needs, but never after the cap.
struct Stop {
    deadline: Instant,
    cap: Instant,
    needed: u64,
    /// Operations done so far, one counter per client, each on its own
    /// cache line and written only by its client. One shared counter made
    /// the clients of an in-process store, tens of ns per operation,
    /// contend on its line on every operation: the memory store's
    /// `next()` at 2 to 64 clients ran at 6 M ids/s in some rounds and
    /// 16 M in others, as the clients happened to share a worker or not.
    done: Box<[CachePadded<AtomicU64>]>,
}

impl Stop {
    fn new(started: Instant, duration: Duration, needed: u64, clients: usize) -> Stop {
        Stop {
            deadline: started + duration,
            cap: started + duration * MAX_EXTENSION,
            needed,
            done: (0..clients).map(|_| CachePadded::default()).collect(),
        }
    }

    /// Client `client` has done `ops` operations.
    fn count(&self, client: usize, ops: u64) {
        if let Some(done) = self.done.get(client) {
            done.store(ops, Ordering::Relaxed);
        }
    }

    /// The counters are read only once the duration is over.
    fn reached(&self, now: Instant) -> bool {
        now >= self.deadline && (now >= self.cap || self.total() >= self.needed)
    }

    fn total(&self) -> u64 {
        self.done
            .iter()
            .map(|done| done.load(Ordering::Relaxed))
            .sum()
    }
}

/// Where a cell's round trips (and conflicts) are counted.
#[derive(Debug, Clone)]
pub enum RoundTripCounter {
    /// Calls through a bakery store wrapped in a [`CountingStore`].
    Store(Arc<CountingStore>),
    /// Requests a native peer sent (it has no conflicts).
    Native(Arc<AtomicU64>),
}

impl RoundTripCounter {
    /// (round trips, conflicts) so far.
    fn snapshot(&self) -> (u64, u64) {
        match self {
            RoundTripCounter::Store(store) => {
                let counts = store.counts();
                (counts.total(), counts.conflicts)
            }
            RoundTripCounter::Native(sent) => (sent.load(Ordering::Relaxed), 0),
        }
    }
}

/// What one cell measured.
#[derive(Debug)]
pub struct Measurement {
    /// From the start signal until the last client stopped.
    pub elapsed: Duration,
    /// Successful operations in the timed part.
    pub ops: u64,
    /// Successful operations per client (for the fairness index).
    pub ops_per_client: Vec<u64>,
    /// Failed operations, warm-up and checks included.
    pub errors: u64,
    /// Of those, failed checks of what the cell did (overlapping grants,
    /// duplicate ids, a count that disagrees): a broken guarantee, where
    /// an error may be an outage.
    pub violations: u64,
    /// The first error message seen (a failed check's, if any).
    pub first_error: Option<String>,
    /// Latency of every successful timed operation.
    pub latency: LatencyHistogram,
    /// Store round trips during the timed part (requests, for a peer).
    pub round_trips: u64,
    /// Conflicts during the timed part (puts and deletes that met another
    /// version).
    pub conflicts: u64,
    /// The workload's own counters, summed over the clients.
    pub extras: BTreeMap<String, u64>,
}

impl Measurement {
    /// Successful operations per second of wall time (0 for a cell that
    /// never started).
    pub fn ops_per_sec(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.ops as f64 / seconds
        } else {
            0.0
        }
    }

    /// Count `problems` (failed checks) as errors and violations; the
    /// first of them becomes the cell's first error.
    pub fn add_problems(&mut self, problems: Vec<String>) {
        let count = problems.len() as u64;
        self.errors += count;
        self.violations += count;
        if let Some(problem) = problems.into_iter().next() {
            self.first_error = Some(problem);
        }
    }

    /// A cell that could not even start: no operation, one error.
    pub fn failed(message: String) -> Result<Measurement, BenchError> {
        Ok(Measurement {
            elapsed: Duration::ZERO,
            ops: 0,
            ops_per_client: Vec::new(),
            errors: 1,
            violations: 0,
            first_error: Some(message),
            latency: LatencyHistogram::new()?,
            round_trips: 0,
            conflicts: 0,
            extras: BTreeMap::new(),
        })
    }
}

/// What one client task hands back.
struct ClientOutcome {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    latency: LatencyHistogram,
    extras: Vec<(&'static str, u64)>,
    stopped: Instant,
}

/// Run `cell` for `duration`, or until its clients did `min_ops_per_client`
/// operations on average if that is later (at most [`MAX_EXTENSION`] ×
/// `duration`).
///
/// Each client first does one untimed warm-up operation (connections, the
/// first block of a sequence, the first read of a counter); once all are
/// warm, the round-trip counters are read and the clients run until
/// the end, each timing every operation. A last operation that straddles
/// the end is finished and counted; `elapsed` includes it.
pub async fn measure(
    cell: PreparedCell,
    counter: &RoundTripCounter,
    duration: Duration,
    min_ops_per_client: u64,
) -> Result<Measurement, BenchError> {
    measure_gated(cell, counter, duration, min_ops_per_client, async {
        Ok(())
    })
    .await
}

/// [`measure`], the start also waiting for `gate` once every client is
/// warm: how a client in its own process starts with the other processes
/// of its cell ([`process`](crate::process)).
pub async fn measure_gated(
    cell: PreparedCell,
    counter: &RoundTripCounter,
    duration: Duration,
    min_ops_per_client: u64,
    gate: impl std::future::Future<Output = Result<(), BenchError>>,
) -> Result<Measurement, BenchError> {
    let PreparedCell { clients, finish } = cell;
    let count = clients.len();
    let warm = Arc::new(Barrier::new(count + 1));
    // Past the gate: the clients wait for it asleep, and only then awake
    // for the start (a gate may take a while, and other processes' clients
    // need the cores meanwhile).
    let gated = Arc::new(Barrier::new(count + 1));
    let go = Arc::new(StartSignal::default());
    let needed = min_ops_per_client.saturating_mul(count as u64);
    let mut tasks = Vec::with_capacity(count);
    for (index, client) in clients.into_iter().enumerate() {
        let (warm, gated, go) = (warm.clone(), gated.clone(), go.clone());
        tasks.push(tokio::spawn(run_client(client, index, [warm, gated], go)));
    }
    warm.wait().await;
    if let Err(err) = gate.await {
        tasks.iter().for_each(|task| task.abort());
        return Err(err);
    }
    gated.wait().await;
    go.all_waiting(count).await;
    let (trips_before, conflicts_before) = counter.snapshot();
    let started = Instant::now();
    go.give(Stop::new(started, duration, needed, count));

    let mut latency = LatencyHistogram::new()?;
    let mut ops_per_client = Vec::with_capacity(count);
    let mut errors = 0;
    let mut first_error = None;
    let mut extras = BTreeMap::new();
    let mut stopped = started;
    let end = if needed == 0 {
        duration
    } else {
        duration * MAX_EXTENSION
    };
    let give_up_at = started + end + STRAGGLER_GRACE;
    for mut task in tasks {
        let outcome = match tokio::time::timeout_at(give_up_at, &mut task).await {
            Ok(Ok(outcome)) => outcome?,
            Ok(Err(join)) => {
                return Err(BenchError::Internal(format!("a client task died: {join}")))
            }
            Err(_) => {
                task.abort();
                errors += 1;
                first_error.get_or_insert_with(|| {
                    format!(
                        "a client was still in an operation {}s after the end of the cell",
                        STRAGGLER_GRACE.as_secs()
                    )
                });
                ops_per_client.push(0);
                continue;
            }
        };
        latency.merge(&outcome.latency)?;
        ops_per_client.push(outcome.ops);
        errors += outcome.errors;
        if first_error.is_none() {
            first_error = outcome.first_error;
        }
        for (name, value) in outcome.extras {
            *extras.entry(name.to_string()).or_insert(0) += value;
        }
        stopped = stopped.max(outcome.stopped);
    }
    let elapsed = stopped.saturating_duration_since(started);
    let (trips_after, conflicts_after) = counter.snapshot();

    let problems = match finish {
        Some(finish) => finish.finish(errors > 0).await,
        None => Vec::new(),
    };
    let mut measurement = Measurement {
        elapsed,
        ops: ops_per_client.iter().sum(),
        ops_per_client,
        errors,
        violations: 0,
        first_error,
        latency,
        round_trips: trips_after.saturating_sub(trips_before),
        conflicts: conflicts_after.saturating_sub(conflicts_before),
        extras,
    };
    measurement.add_problems(problems);
    Ok(measurement)
}

/// One client's task: warm up, wait for the start, loop until the end.
async fn run_client(
    mut client: Box<dyn BenchClient>,
    index: usize,
    barriers: [Arc<Barrier>; 2],
    go: Arc<StartSignal>,
) -> Result<ClientOutcome, BenchError> {
    let mut outcome = ClientOutcome {
        ops: 0,
        errors: 0,
        first_error: None,
        latency: LatencyHistogram::new()?,
        extras: Vec::new(),
        stopped: Instant::now(),
    };
    if let Err(err) = client.warm_up().await {
        outcome.errors += 1;
        outcome.first_error = Some(format!("warm-up: {}", err.0));
    }
    for barrier in barriers {
        barrier.wait().await;
    }
    let stop = go.wait().await;
    let mut since_yield = 0u32;
    loop {
        let begun = Instant::now();
        if stop.reached(begun) {
            break;
        }
        let result = client.op().await;
        let took = begun.elapsed();
        match result {
            Ok(()) => {
                outcome.latency.record(took);
                outcome.ops += 1;
                stop.count(index, outcome.ops);
            }
            Err(err) => {
                outcome.errors += 1;
                outcome.first_error.get_or_insert(err.0);
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
        since_yield += 1;
        if since_yield >= YIELD_EVERY {
            since_yield = 0;
            tokio::task::yield_now().await;
        }
    }
    outcome.stopped = Instant::now();
    outcome.extras = client.extras();
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::OpError;

    /// A client whose operation waits `each` (a slow store's round trip).
    struct Slow {
        each: Duration,
    }

    #[async_trait::async_trait]
    impl BenchClient for Slow {
        async fn op(&mut self) -> Result<(), OpError> {
            tokio::time::sleep(self.each).await;
            Ok(())
        }
    }

    fn cell(clients: usize, each: Duration) -> PreparedCell {
        PreparedCell {
            clients: (0..clients)
                .map(|_| Box::new(Slow { each }) as Box<dyn BenchClient>)
                .collect(),
            finish: None,
        }
    }

    fn counter() -> RoundTripCounter {
        RoundTripCounter::Native(Arc::new(AtomicU64::new(0)))
    }

    // On a paused clock: time moves only when every task sleeps, so the
    // operations take exactly their 20 ms and the stops are exact.
    #[tokio::test(start_paused = true)]
    async fn a_cell_runs_past_its_duration_until_it_has_its_operations() {
        let (duration, each) = (Duration::from_millis(30), Duration::from_millis(20));
        let measured = measure(cell(3, each), &counter(), duration, 0)
            .await
            .unwrap();
        // Started at 0 and 20 ms, finished by 40 ms.
        assert_eq!(measured.ops, 2 * 3);
        let measured = measure(cell(3, each), &counter(), duration, 6)
            .await
            .unwrap();
        // Six each by 120 ms; a client that checked before the others
        // counted their sixth may begin a seventh. Well before the cap
        // (150 ms) either way.
        assert!((6 * 3..=7 * 3).contains(&measured.ops), "{}", measured.ops);
        assert!(measured.elapsed <= each * 7, "{:?}", measured.elapsed);
    }

    #[tokio::test(start_paused = true)]
    async fn the_extension_stops_at_its_cap() {
        let (duration, each) = (Duration::from_millis(20), Duration::from_millis(10));
        // Unreachable in 5 × 20 ms at 10 ms an operation.
        let needed = 1_000;
        let measured = measure(cell(2, each), &counter(), duration, needed)
            .await
            .unwrap();
        assert!(measured.ops > 0);
        assert!(
            measured.ops < needed * 2,
            "ran to {} operations instead of stopping at the cap",
            measured.ops
        );
        // The last operation that began before the cap (100 ms) ends at it.
        assert_eq!(measured.ops, 10 * 2);
        assert_eq!(measured.elapsed, duration * MAX_EXTENSION);
    }
}
