//! Network faults from a real TCP fault proxy (Toxiproxy) between the client
//! and each server backend: latency with jitter, connection resets, a
//! blackhole, a bandwidth stall, and a cut that lands after the requests
//! were sent (so replies of applied writes are lost — unknown outcomes on
//! purpose).
//!
//! For every server backend a proxy is put in front of the server, and every
//! client opens its store through it (with a short `timeout_ms`): one store
//! shared by the counter workers, and a store of its own for each of three
//! sequence clients and three lock clients (tests/common/clients.rs). One
//! proxy for all: each fault reaches every client at the same moment, so
//! one window tells which failures it caused. Under each fault the workers
//! increment one counter by read-modify-write `put_if_version` (the cut: a
//! batch of puts, each on a counter of its own) while the sequence clients
//! take ids and the lock clients write a fenced count under the fair lock.
//! Asserted, per backend and fault:
//! - the fault took effect and only while in place: calls failed during
//!   its window (under latency, or a throttle no call failed under: every
//!   round trip in the window was slow), none completed before it failed,
//!   none invoked a second after its removal failed (`Lost`, or an acquire timed out waiting for grants the fault
//!   left to lapse, reports an earlier fault, not a failed call);
//! - a latency above `timeout_ms` sends every call and gets no reply in
//!   time: puts end `Unknown`;
//! - the lock clients get fenced writes accepted, never a stale one, and
//!   no two grants confirmed by their release overlap; the fenced count
//!   holds every accepted increment and at most the unknown ones more;
//! - every call returns, within a bound (no hang), `Ok` or a typed error:
//!   `Unavailable`, `Unknown` or `TimedOut` — never another kind, no panic;
//! - once the fault is removed the SAME store value works again;
//! - the counter holds every acknowledged increment and at most the
//!   acknowledged plus the unknown-outcome ones (`Unavailable` promises
//!   "not applied", and is held to it);
//! - the cut, which loses the replies of requests the server received,
//!   produces unknown outcomes — and a put seen applied on the server while
//!   every reply is swallowed is one;
//! - no sequence id is handed out twice over all faults, and each handle's
//!   ids increase;
//! - every store call, recorded over all faults (bakery-verify's
//!   `RecordingStore`, each counter value unique), is linearizable per key
//!   (the Wing–Gong/Lowe checker; unknown outcomes may or may not apply).
//!
//! The counts per backend and fault are printed (`--nocapture`).
//!
//! Needs `BAKERY_TOXIPROXY_URL` and the backends' `BAKERY_<NAME>_URI`
//! (`scripts/backends.sh start all` exports them; `scripts/test.sh` runs
//! this). Without them it prints why and skips — except under `CI=true`,
//! where it fails.

mod common;

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery::{Bytes, ErrorKind, FencedValue, Key, PutOutcome, Row, Sequence, VersionedStore};
use bakery_testkit::proxy::{self, Direction, Proxy, Toxic, Toxiproxy};
use bakery_verify::history::{History, RecordingStore};
use bakery_verify::linearizability::{self, Verdict};
use bakery_verify::workload::Counts;
use common::clients::{
    failures_within, lock_client, lock_on, open_each, sequence_client, Failure, GrantSpan,
    LockReport, LockTally, SequenceTally,
};
use common::report::FaultRow;

/// The client's own deadline, given to every backend as `timeout_ms`.
const TIMEOUT_MS: u64 = 1000;

/// A call that takes longer than this hangs (a bound, not a speed check):
/// every backend must give up at about `TIMEOUT_MS`.
const CALL_BOUND: Duration = Duration::from_secs(20);

/// How long the store may take to work again once a fault is removed
/// (reconnecting; a bound, not a speed check).
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// How long a free-running fault stays in place.
const WINDOW: Duration = Duration::from_millis(1500);

/// Concurrent read-modify-write clients of the counter.
const WORKERS: usize = 4;

/// Sequence clients of one sequence, each on its own store, kept over all
/// faults.
const HANDLES: usize = 3;

/// Lock clients, each on its own store.
const LOCK_CLIENTS: usize = 3;

/// The lock's lease: above the client's deadline, so a slow call does not
/// lose it; the blackhole and the timeouts do.
const LEASE: Duration = Duration::from_secs(2);

/// How long after a fault's removal a call may still meet what the fault
/// left: a connection it broke, which the client finds dead only on use.
/// Such failures are counted apart ("reconnecting"). The Cassandra driver
/// (scylla 1.x) refills a broken pool after a pause that doubles with every
/// failed refill, from 50 ms up to 10 s (not configurable in its stable
/// API): after the cut's rounds its calls fail `Unavailable` ("the pool is
/// broken") for seconds after the server is reachable again.
fn reconnect_grace(backend: &str) -> Duration {
    match backend {
        "cassandra" => Duration::from_secs(10),
        _ => Duration::from_millis(TIMEOUT_MS),
    }
}

/// How long the clients go on once a fault is removed: every call invoked
/// after the [`reconnect_grace`] must succeed.
fn after(backend: &str) -> Duration {
    reconnect_grace(backend) + Duration::from_millis(500)
}

/// The latency above the client's deadline: every call is sent and its
/// reply comes too late.
const OVER_TIMEOUT: Duration = Duration::from_millis(TIMEOUT_MS * 3 / 2);

/// The least a round trip takes under [`Fault::Latency`]: 150 − 100 ms on
/// the reply, 30 − 20 ms on the request.
const LEAST_LATENCY: Duration = Duration::from_millis(60);

/// Rounds of the cut: each sends a batch of puts and cuts the connections
/// while their replies are held back (each kind of [`CutRound`] twice).
const CUT_ROUNDS: u32 = 8;

/// More rounds, only while no put of the cut was reported `Unknown` yet
/// (FerretDB's insert is the second round trip of its call: a
/// [`CutRound::Slowed`] round loses its reply only if it went out before
/// the deadline). A bound, not a retry of a check: each round's outcomes
/// are checked like the others'.
const MAX_CUT_ROUNDS: u32 = 3 * CUT_ROUNDS;

/// How long the proxy holds back every reply in the timed rounds of the
/// cut.
const CUT_HOLD: Duration = Duration::from_millis(200);

/// The hold of a [`CutRound::Slowed`] round: more than a third of the
/// client's deadline, so no call of three round trips finishes within it.
const SLOWED: Duration = Duration::from_millis(TIMEOUT_MS * 4 / 10);

/// How one round of the cut holds the replies back, and when it cuts (a
/// put is one round trip on most backends; on FerretDB a read, then an
/// insert, then a confirming read; more on a fresh connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CutRound {
    /// Every reply is swallowed (a blackhole); the cut comes once a put of
    /// the batch is seen applied on the server (or every put has given
    /// up). That put's reply certainly never came: it must be `Unknown`.
    Swallowed,
    /// Every reply is held back for [`SLOWED`]: a call of three round
    /// trips cannot finish within its deadline — FerretDB's write: a read,
    /// the insert, a confirming read — so once its insert went out, its
    /// outcome is lost whenever the cut comes. The cut comes once a put is
    /// seen applied (or every put has given up).
    Slowed,
    /// Every reply is held back for [`CUT_HOLD`]; the cut comes `n / 2`
    /// of it after sending: within the calls' second (3) or third (5)
    /// round trip — a sequence's reservation after its read, FerretDB's
    /// insert or its confirming read (timed: which calls it catches, and
    /// where, varies).
    Timed(u32),
}

impl CutRound {
    fn of(round: u32) -> CutRound {
        match round % 4 {
            0 => CutRound::Swallowed,
            1 => CutRound::Timed(3),
            2 => CutRound::Slowed,
            _ => CutRound::Timed(5),
        }
    }

    fn hold(self) -> Toxic {
        match self {
            CutRound::Swallowed => Toxic::timeout(Duration::ZERO),
            CutRound::Slowed => Toxic::latency(SLOWED, Duration::ZERO),
            CutRound::Timed(_) => Toxic::latency(CUT_HOLD, Duration::ZERO),
        }
        .named("hold")
    }

    /// After the cut, the replies the proxy still holds are written to
    /// closed connections once their latency has passed; removing the
    /// toxic before then makes Toxiproxy (2.12) wait 5 s per connection to
    /// flush them. So it is removed once they are out (a swallowed reply
    /// is not held).
    fn drain(self) -> Duration {
        let margin = Duration::from_millis(100);
        match self {
            CutRound::Swallowed => margin,
            CutRound::Slowed => SLOWED + margin,
            CutRound::Timed(_) => CUT_HOLD + margin,
        }
    }
}

/// How long the workers run before a free-running fault is put in place,
/// so each knows the counter's row when it starts.
const WARM_UP: Duration = Duration::from_millis(300);

/// A pause after a failed call, so a worker does not spin on a refused
/// connection (not needed for any assertion).
const BACKOFF: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// 150 ms ± 100 ms on the replies, 30 ms ± 20 ms on the requests.
    Latency,
    /// Every reply is dropped and its connection reset.
    ResetPeer,
    /// Every reply is swallowed; connections stay open until the fault is
    /// removed (the client's `timeout_ms` must fire).
    Blackhole,
    /// 1 KB/s each way.
    Bandwidth,
    /// Every reply held back for [`OVER_TIMEOUT`], longer than the client's
    /// `timeout_ms`: writes are sent, and their outcome is unknown.
    OverTimeout,
    /// Every reply held back, then every connection cut while a batch of
    /// puts is in flight: the requests applied, the replies are lost.
    Cut,
}

const FAULTS: [Fault; 6] = [
    Fault::Latency,
    Fault::ResetPeer,
    Fault::Blackhole,
    Fault::Bandwidth,
    Fault::OverTimeout,
    Fault::Cut,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Latency => "latency+jitter",
            Fault::ResetPeer => "reset_peer",
            Fault::Blackhole => "timeout(blackhole)",
            Fault::Bandwidth => "bandwidth 1KB/s",
            Fault::OverTimeout => "latency 1.5s > timeout_ms 1s",
            Fault::Cut => "cut after send",
        }
    }

    /// The toxics of a free-running fault.
    fn toxics(self) -> Vec<Toxic> {
        let ms = Duration::from_millis;
        match self {
            Fault::Latency => vec![
                Toxic::latency(ms(150), ms(100)),
                Toxic::latency(ms(30), ms(20)).direction(Direction::Upstream),
            ],
            Fault::ResetPeer => vec![Toxic::reset_peer(Duration::ZERO)],
            Fault::Blackhole => vec![Toxic::timeout(Duration::ZERO)],
            Fault::Bandwidth => vec![
                Toxic::bandwidth(1),
                Toxic::bandwidth(1).direction(Direction::Upstream),
            ],
            Fault::OverTimeout => vec![Toxic::latency(OVER_TIMEOUT, Duration::ZERO)],
            Fault::Cut => Vec::new(),
        }
    }
}

/// What the counter's clients saw under one fault.
#[derive(Debug, Default, Clone)]
struct Tally {
    puts: u64,
    acked: u64,
    conflicts: u64,
    unknown: u64,
    unavailable: u64,
    timed_out: u64,
    get_errors: u64,
    seq_ids: u64,
    seq_errors: u64,
    /// The counter calls that failed, on the history's clock.
    failures: Vec<Failure>,
    /// The counter calls that returned: (invoked, completed) ns.
    spans: Vec<(u64, u64)>,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.puts += o.puts;
        self.acked += o.acked;
        self.conflicts += o.conflicts;
        self.unknown += o.unknown;
        self.unavailable += o.unavailable;
        self.timed_out += o.timed_out;
        self.get_errors += o.get_errors;
        self.seq_ids += o.seq_ids;
        self.seq_errors += o.seq_errors;
        self.failures.extend(o.failures.iter().cloned());
        self.spans.extend(&o.spans);
    }

    /// A get of `key`, noted.
    async fn get(
        &mut self,
        ctx: &str,
        clock: &History,
        store: &dyn VersionedStore,
        key: &Key,
    ) -> bakery::Result<Option<Row>> {
        let invoked_ns = clock.now_ns();
        let got = bounded(ctx, "get", store.get(key)).await;
        self.timed(clock, "get", invoked_ns, &got);
        got
    }

    /// Notes a counter call's end: its span, or its failure.
    fn timed<T>(
        &mut self,
        clock: &History,
        what: &'static str,
        invoked_ns: u64,
        r: &bakery::Result<T>,
    ) {
        let completed_ns = clock.now_ns();
        match r {
            Ok(_) => self.spans.push((invoked_ns, completed_ns)),
            Err(e) => self.failures.push(Failure {
                what,
                kind: e.kind(),
                message: e.to_string(),
                invoked_ns,
                completed_ns,
            }),
        }
    }

    /// A put's error, which must be typed.
    fn put_failed(&mut self, ctx: &str, e: &bakery::Error) {
        match typed(ctx, "put_if_version", e) {
            ErrorKind::Unknown => self.unknown += 1,
            ErrorKind::Unavailable => self.unavailable += 1,
            _ => self.timed_out += 1,
        }
    }

    /// Put the counter of `row` plus one at `row`'s version, within
    /// [`CALL_BOUND`], counting the outcome: the row now known (`Some`) after
    /// an acknowledgement or a conflict, `None` after a failed put.
    async fn put_incremented(
        &mut self,
        ctx: &str,
        clock: &History,
        store: &dyn VersionedStore,
        key: &Key,
        row: &Option<Row>,
    ) -> Option<Option<Row>> {
        self.puts += 1;
        let put = store.put_if_version(
            key,
            row.as_ref().map(|r| r.version),
            counter_value(number(row) + 1),
        );
        let invoked_ns = clock.now_ns();
        let put = bounded(ctx, "put_if_version", put).await;
        self.timed(clock, "put_if_version", invoked_ns, &put);
        match put {
            Ok(PutOutcome::Applied(now)) => {
                self.acked += 1;
                Some(Some(now))
            }
            Ok(PutOutcome::Conflict(now)) => {
                self.conflicts += 1;
                Some(now)
            }
            Err(e) => {
                self.put_failed(ctx, &e);
                None
            }
        }
    }

    /// Puts that may have applied without being acknowledged.
    fn maybe_applied(&self) -> u64 {
        self.unknown + self.timed_out
    }
}

/// The error's kind, if it is one a network fault may produce; else the
/// test fails.
fn typed(ctx: &str, what: &str, e: &bakery::Error) -> ErrorKind {
    match e.kind() {
        kind @ (ErrorKind::Unavailable | ErrorKind::Unknown | ErrorKind::TimedOut) => kind,
        other => panic!("{ctx}: {what} failed with {other:?}, not a network fault's kind: {e}"),
    }
}

/// `call`, which must finish within [`CALL_BOUND`].
async fn bounded<T>(ctx: &str, what: &str, call: impl Future<Output = T>) -> T {
    match tokio::time::timeout(CALL_BOUND, call).await {
        Ok(done) => done,
        Err(_) => panic!("{ctx}: {what} hung for {CALL_BOUND:?}"),
    }
}

/// A counter's value: `<count>/<n>`, `n` unique in the run, so the
/// linearizability checker can tell every write apart.
fn counter_value(count: u64) -> Bytes {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    Bytes::from(format!("{count}/{n}"))
}

/// The count a counter's row holds (0: no row).
fn number(row: &Option<Row>) -> u64 {
    row.as_ref()
        .map_or(0, |r| common::cluster::count_of(&r.value))
}

/// One client of the counter: read, put +1 at the version read; after a
/// conflict, the row it returns; after an error, read again — and if that
/// read fails too, put at the last version it knew (a stale version only
/// conflicts), so puts are attempted under every fault. Until `stop`.
async fn counter_client(
    ctx: Arc<str>,
    clock: History,
    store: Arc<dyn VersionedStore>,
    key: Key,
    stop: Arc<AtomicBool>,
) -> Tally {
    let mut tally = Tally::default();
    let mut fresh: Option<Option<Row>> = None;
    let mut last: Option<Option<Row>> = None;
    while !stop.load(Ordering::Relaxed) {
        let row = match fresh.take() {
            Some(row) => row,
            None => match tally.get(&ctx, &clock, &*store, &key).await {
                Ok(row) => row,
                Err(e) => {
                    typed(&ctx, "get", &e);
                    tally.get_errors += 1;
                    match last.clone() {
                        Some(row) => row,
                        None => {
                            tokio::time::sleep(BACKOFF).await;
                            continue;
                        }
                    }
                }
            },
        };
        last = Some(row.clone());
        fresh = tally
            .put_incremented(&ctx, &clock, &*store, &key, &row)
            .await;
        if fresh.is_none() {
            tokio::time::sleep(BACKOFF).await;
        }
    }
    tally
}

/// Reads the counter (retrying while the store recovers) and puts +1 once,
/// with no fault in place; returns the tally and the row now known.
async fn increment(
    ctx: Arc<str>,
    clock: History,
    store: Arc<dyn VersionedStore>,
    key: Key,
) -> (Tally, Option<Row>) {
    let mut tally = Tally::default();
    let row = recovered(&ctx, "get", || store.get(&key)).await;
    let now = match tally
        .put_incremented(&ctx, &clock, &*store, &key, &row)
        .await
    {
        Some(now) => now,
        None => recovered(&ctx, "get", || store.get(&key)).await,
    };
    (tally, now)
}

/// Retries `call` (bounded each) while it fails with a temporary error, up
/// to [`RECOVERY_BOUND`]; the store must work again by then.
async fn recovered<T, F, Fut>(ctx: &str, what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bakery::Result<T>>,
{
    let start = Instant::now();
    loop {
        match bounded(ctx, what, call()).await {
            Ok(done) => return done,
            Err(e) if e.is_temporary() && start.elapsed() < RECOVERY_BOUND => {
                tokio::time::sleep(BACKOFF).await;
            }
            Err(e) => panic!(
                "{ctx}: {what} still fails after {:?} of retries with no fault in place: {e}",
                start.elapsed()
            ),
        }
    }
}

/// The same store works again: a read of `key` and a write of a probe key.
async fn works_again(ctx: &str, store: &Arc<dyn VersionedStore>, key: &Key) -> Option<Row> {
    let probe = bakery_testkit::unique_key("proxy-faults-probe");
    // Applied or (after an unknown outcome) a conflict: either is a reply.
    let _ = recovered(ctx, "put_if_version (probe)", || {
        store.put_if_version(&probe, None, Bytes::from_static(b"1"))
    })
    .await;
    recovered(ctx, "get", || store.get(key)).await
}

struct Backend {
    name: &'static str,
    /// The counter workers' store (recorded).
    store: Arc<dyn VersionedStore>,
    /// A store straight to the server (not recorded): sees which requests
    /// of the cut reached it.
    direct: Arc<dyn VersionedStore>,
    proxy: Proxy,
    /// The recorded history, and the clock of every client.
    history: History,
    /// The sequence clients, each on its own store (recorded).
    handles: Vec<Sequence>,
    /// Every id each handle has handed out, in order.
    ids: Vec<Vec<u64>>,
    /// The lock clients' stores, one each (not recorded).
    lock_stores: Vec<Arc<dyn VersionedStore>>,
    /// The lock's and fenced count's name.
    lock: String,
    /// What the lock clients saw over all faults.
    locks: Vec<LockTally>,
}

/// What the clients' failures and round trips show about a fault that was
/// in place from `on_ns` to `off_ns` on the history's clock.
#[derive(Debug, Default)]
struct Effect {
    /// Failures of calls that returned before the fault: must be 0.
    before: usize,
    /// Failures of calls overlapping the fault.
    during: usize,
    /// Failures of calls invoked within the [`reconnect_grace`] of its
    /// removal.
    reconnecting: usize,
    /// Failures of calls invoked later, but for those that report what the
    /// fault did earlier: must be 0.
    after: usize,
    /// The fastest counter call made entirely within the fault.
    fastest: Option<Duration>,
}

impl Effect {
    /// The fault was being put in place from `on_ns` and was removed at
    /// `off_ns`; all of it was in place from `in_place_ns` to
    /// `removing_ns`; calls may fail for `grace` after.
    fn of(
        failures: &[Failure],
        spans: &[(u64, u64)],
        (on_ns, off_ns): (u64, u64),
        (in_place_ns, removing_ns): (u64, u64),
        grace: Duration,
    ) -> Effect {
        let clean_ns = off_ns + grace.as_nanos() as u64;
        let fastest = spans
            .iter()
            .filter(|&&(invoked, completed)| invoked >= in_place_ns && completed <= removing_ns)
            .map(|&(invoked, completed)| completed - invoked)
            .min();
        Effect {
            before: failures.iter().filter(|f| f.completed_ns < on_ns).count(),
            during: failures_within(failures, on_ns, off_ns),
            reconnecting: failures
                .iter()
                .filter(|f| (off_ns..clean_ns).contains(&f.invoked_ns))
                .count(),
            after: failures
                .iter()
                .filter(|f| f.invoked_ns >= clean_ns && !f.reports_earlier_fault())
                .count(),
            fastest: fastest.map(Duration::from_nanos),
        }
    }

    /// The fault took effect, and only while in place.
    fn assert_took_effect(&self, ctx: &str, fault: Fault, failures: &[Failure]) {
        let first: Vec<&Failure> = failures.iter().take(3).collect();
        assert_eq!(
            self.before, 0,
            "{ctx}: calls failed before the fault: {self:?} {first:?}"
        );
        let last: Vec<&Failure> = failures.iter().rev().take(3).collect();
        assert_eq!(
            self.after, 0,
            "{ctx}: calls failed after the fault was removed: {self:?} {last:?}"
        );
        // A throttle shows as calls failing or slow.
        let slowed = fault == Fault::Bandwidth && self.during == 0;
        if fault == Fault::Latency || slowed {
            // Seen on every round trip within the window.
            let fastest = self
                .fastest
                .unwrap_or_else(|| panic!("{ctx}: no counter call within the window: {self:?}"));
            assert!(
                fastest >= LEAST_LATENCY,
                "{ctx}: a call took {fastest:?} under a latency of at least {LEAST_LATENCY:?}: \
                 the toxic was not in its path"
            );
        } else {
            assert!(
                self.during > 0,
                "{ctx}: no call failed while the fault was in place: {self:?}"
            );
        }
    }
}

impl Failure {
    /// `Lost` (a grant lost during the fault), or an acquire that timed
    /// out waiting for grants and places in the queue whose clients the
    /// fault cut off to lapse: the lock reporting an earlier fault, not a
    /// call failing.
    fn reports_earlier_fault(&self) -> bool {
        self.kind == ErrorKind::Lost
            || (self.what == "lock acquire" && self.kind == ErrorKind::TimedOut)
    }
}

/// The clients of one fault, running until [`Backend::stop`].
struct Running {
    stop: Arc<AtomicBool>,
    counters: Vec<tokio::task::JoinHandle<Tally>>,
    sequences: Vec<tokio::task::JoinHandle<SequenceTally>>,
    locks: Vec<tokio::task::JoinHandle<LockTally>>,
}

impl Backend {
    fn ctx(&self, fault: Fault) -> Arc<str> {
        Arc::from(format!("proxy_faults[{}/{}]", self.name, fault.name()))
    }

    /// Counter workers on `key`, the lock clients, and (unless the cut
    /// drives them itself) the sequence clients.
    fn start(&self, ctx: &Arc<str>, key: &Key, sequences: bool) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = (0..WORKERS)
            .map(|_| {
                let client = counter_client(
                    ctx.clone(),
                    self.history.clone(),
                    self.store.clone(),
                    key.clone(),
                    stop.clone(),
                );
                tokio::spawn(client)
            })
            .collect();
        let sequences = self
            .handles
            .iter()
            .filter(|_| sequences)
            .map(|seq| {
                let client = sequence_client(
                    seq.clone(),
                    self.history.clone(),
                    stop.clone(),
                    Arc::default(),
                );
                tokio::spawn(client)
            })
            .collect();
        let locks = self
            .lock_stores
            .iter()
            .zip(0..)
            .map(|(store, i)| {
                let lock = lock_on(store, &self.lock, LEASE);
                tokio::spawn(lock_client(
                    lock,
                    self.history.clone(),
                    i,
                    stop.clone(),
                    Arc::default(),
                ))
            })
            .collect();
        Running {
            stop,
            counters,
            sequences,
            locks,
        }
    }

    /// Stops the clients: the counter workers' tally, every client's
    /// failures, and the lock clients' tallies.
    async fn stop(&mut self, running: Running) -> (Tally, Vec<Failure>, Vec<LockTally>) {
        running.stop.store(true, Ordering::Relaxed);
        let mut tally = Tally::default();
        for client in running.counters {
            tally.add(&client.await.expect("counter client panicked"));
        }
        let mut failures = tally.failures.clone();
        for (i, client) in running.sequences.into_iter().enumerate() {
            let seen = client.await.expect("sequence client panicked");
            tally.seq_ids += seen.ids.len() as u64;
            tally.seq_errors += seen.failures.len() as u64;
            failures.extend(seen.failures);
            self.ids[i].extend(seen.ids);
        }
        let mut locks = Vec::new();
        for client in running.locks {
            let seen = client.await.expect("lock client panicked");
            failures.extend(seen.failures.iter().cloned());
            locks.push(seen);
        }
        (tally, failures, locks)
    }

    /// Waits until the fenced count moves (a lock client got a grant and
    /// its write accepted), within [`RECOVERY_BOUND`]: a fault that lost a
    /// grant holds the lock back until its lease runs out.
    async fn fenced_write_seen(&self, ctx: &str) {
        let value = FencedValue::new(self.direct.clone(), &self.lock).expect("fenced value");
        let read = || async { bounded(ctx, "fenced read", value.read()).await.ok() };
        let first = read().await;
        let start = Instant::now();
        while read().await == first {
            if start.elapsed() >= RECOVERY_BOUND {
                let state = bakery::Lock::inspect(&*self.direct, &self.lock).await;
                panic!(
                    "{ctx}: no fenced write accepted within {RECOVERY_BOUND:?} after the fault; \
                     the fenced value {first:?}, the lock {state:?}"
                );
            }
            tokio::time::sleep(BACKOFF).await;
        }
    }

    async fn run(&mut self, fault: Fault) -> Tally {
        let ctx = self.ctx(fault);
        // Free-running workers share one counter; the cut gives each put
        // of its batch a counter of its own, so every request the server
        // receives applies and a lost reply hides a real increment (and
        // the workers, running beside it, one more).
        let keys: Vec<Key> = match fault {
            Fault::Cut => (0..=WORKERS)
                .map(|_| bakery_testkit::unique_key("proxy-faults"))
                .collect(),
            _ => vec![bakery_testkit::unique_key("proxy-faults")],
        };
        let workers_key = &keys[keys.len() - 1];
        works_again(&ctx, &self.store, workers_key).await;
        let running = self.start(&ctx, workers_key, fault != Fault::Cut);
        tokio::time::sleep(WARM_UP).await;
        let on_ns = self.history.now_ns();
        // Every toxic of the fault is in place from `in_place_ns` until
        // `removing_ns`.
        let (mut in_place_ns, mut removing_ns) = (on_ns, on_ns);
        let mut tallies = match fault {
            Fault::Cut => self.cut(&ctx, &keys[..WORKERS]).await,
            _ => {
                for toxic in fault.toxics() {
                    self.proxy.add(toxic).await.expect("add toxic");
                }
                in_place_ns = self.history.now_ns();
                tokio::time::sleep(WINDOW).await;
                removing_ns = self.history.now_ns();
                self.proxy.clear().await.expect("remove toxics");
                Vec::new()
            }
        };
        let off_ns = self.history.now_ns();
        tokio::time::sleep(after(self.name)).await;
        self.fenced_write_seen(&ctx).await;
        let (workers, failures, locks) = self.stop(running).await;
        if fault == Fault::Cut {
            assert!(
                tallies.iter().any(|t| t.unknown > 0),
                "{ctx}: the cut lost the replies of puts in flight in up to {MAX_CUT_ROUNDS} rounds, \
                 yet none was reported Unknown"
            );
        }
        let mut effect = Effect::of(
            &failures,
            &workers.spans,
            (on_ns, off_ns),
            (in_place_ns, removing_ns),
            reconnect_grace(self.name),
        );
        // The cut's own puts failed within it too.
        effect.during += tallies
            .iter()
            .map(|t| (t.unavailable + t.unknown + t.timed_out) as usize)
            .sum::<usize>();
        tallies.push(workers);
        effect.assert_took_effect(&ctx, fault, &failures);
        let lock_report = LockReport::of(locks.clone());
        assert!(
            lock_report.writes_accepted > 0,
            "{ctx}: no fenced write accepted: {lock_report}"
        );
        lock_report.assert_safe(&ctx);
        self.locks.extend(locks);
        let mut tally = Tally::default();
        let (mut counter, mut most, mut lost) = (0, 0, 0);
        for (key, part) in keys.iter().zip(&tallies) {
            let value = number(&works_again(&ctx, &self.store, key).await);
            let bound = part.acked + part.maybe_applied();
            lost += part.acked.saturating_sub(value);
            assert!(
                value >= part.acked,
                "{ctx}: counter {key} = {value} lost acknowledged increments ({} acked): {part:?}",
                part.acked
            );
            assert!(
                value <= bound,
                "{ctx}: counter {key} = {value} holds more than acked + unknown ({bound}): a write \
                 reported as not applied (Unavailable or Conflict) did apply: {part:?}"
            );
            tally.add(part);
            counter += value;
            most += bound;
        }
        // A put that reads first (FerretDB's `insert` strategy) meets the
        // deadline on its read, unsent, unless it was past it when the
        // latency came; the cut proves its Unknown outcomes.
        if fault == Fault::OverTimeout && !put_reads_first(self.name) {
            assert!(
                tally.unknown > 0,
                "{ctx}: every reply came after the deadline, yet no put was reported Unknown"
            );
        }
        tally.seq_ids += self.more_ids(&ctx).await;
        FaultRow {
            suite: "proxy",
            backend: self.name.to_owned(),
            setup: "one server behind Toxiproxy".into(),
            fault: match fault {
                Fault::Cut => format!("{} ({CUT_ROUNDS}+ rounds)", fault.name()),
                _ => format!("{} for {WINDOW:?}", fault.name()),
            },
            counts: Counts {
                ok: tally.acked + tally.conflicts,
                failed: tally.unavailable,
                unknown: tally.maybe_applied(),
            },
            lost_acked: Some(lost),
            duplicate_ids: None,
            stale_accepted: Some(lock_report.stale_accepted()),
            sequence_clients: Some(HANDLES),
            locks: Some((&lock_report).into()),
            verdict: format!(
                "counter in [acked, acked + unknown]: {counter} in [{}, {most}]",
                tally.acked
            ),
        }
        .record();
        println!(
            "{ctx}: puts {} -> ok {} (applied {}, conflict {}), failed {} (unavailable {}, unknown {}, timed out {}); \
             get errors {}; counter {counter} in [{}, {most}] (unknown that applied: {}); seq ids {}, seq errors {}; \
             failures before/during/reconnecting/after the fault {}/{}/{}/{}, fastest counter call within it {:?}; {lock_report}",
            tally.puts,
            tally.acked + tally.conflicts,
            tally.acked,
            tally.conflicts,
            tally.unavailable + tally.unknown + tally.timed_out,
            tally.unavailable,
            tally.unknown,
            tally.timed_out,
            tally.get_errors,
            tally.acked,
            counter.saturating_sub(tally.acked),
            tally.seq_ids,
            tally.seq_errors,
            effect.before,
            effect.during,
            effect.reconnecting,
            effect.after,
            effect.fastest,
        );
        tally
    }

    /// [`CUT_ROUNDS`] rounds (more, up to [`MAX_CUT_ROUNDS`], while none
    /// had an `Unknown` put): increment each counter with no fault; make
    /// the proxy hold back every reply ([`CutRound`]); send a batch of
    /// puts, one per counter, and a call of each sequence handle; when the
    /// round says, disable the proxy: every connection is cut, the replies
    /// lost. One tally per counter.
    async fn cut(&mut self, ctx: &Arc<str>, keys: &[Key]) -> Vec<Tally> {
        let mut tallies = vec![Tally::default(); keys.len()];
        let mut round = 0;
        while round < CUT_ROUNDS
            || (tallies.iter().all(|t| t.unknown == 0) && round < MAX_CUT_ROUNDS)
        {
            let kind = CutRound::of(round);
            round += 1;
            // One increment of each counter at once, with no fault: the
            // batch below then finds connections open, with their
            // statements prepared, and its puts are sent at once.
            let warm: Vec<_> = keys
                .iter()
                .map(|key| {
                    tokio::spawn(increment(
                        ctx.clone(),
                        self.history.clone(),
                        self.store.clone(),
                        key.clone(),
                    ))
                })
                .collect();
            let mut rows = Vec::new();
            for (tally, warm) in tallies.iter_mut().zip(warm) {
                let (part, row) = bounded(ctx, "increment", warm)
                    .await
                    .expect("increment panicked");
                tally.add(&part);
                rows.push(row);
            }
            let known: Vec<Option<u64>> =
                rows.iter().map(|r| r.as_ref().map(|r| r.version)).collect();
            let hold = self.proxy.add(kind.hold()).await.expect("add toxic");
            let puts: Vec<_> = keys
                .iter()
                .zip(rows)
                .map(|(key, row)| {
                    let (store, key) = (self.store.clone(), key.clone());
                    tokio::spawn(async move {
                        let value = Bytes::from((number(&row) + 1).to_string());
                        store
                            .put_if_version(&key, row.map(|r| r.version), value)
                            .await
                    })
                })
                .collect();
            let take_ids = |handles: &[Sequence]| -> Vec<_> {
                handles
                    .iter()
                    .map(|seq| {
                        let seq = seq.clone();
                        tokio::spawn(async move { seq.next().await })
                    })
                    .collect()
            };
            let (sequences, seen) = match kind {
                CutRound::Timed(halves) => {
                    let sequences = take_ids(&self.handles);
                    // Times the cut inside a round trip of the calls.
                    tokio::time::sleep(CUT_HOLD * halves / 2).await;
                    (sequences, Vec::new())
                }
                // The sequence calls start after the puts have had the
                // open connections (a pool hands them out in order).
                _ => {
                    let seen = self.seen_applied(ctx, keys, &known, &puts).await;
                    (take_ids(&self.handles), seen)
                }
            };
            self.proxy.disable().await.expect("disable proxy");
            for (i, (tally, put)) in tallies.iter_mut().zip(puts).enumerate() {
                tally.puts += 1;
                let outcome = bounded(ctx, "put_if_version", put)
                    .await
                    .expect("put panicked");
                if kind == CutRound::Swallowed && seen.contains(&i) {
                    assert!(
                        matches!(&outcome, Err(e) if e.kind() == ErrorKind::Unknown),
                        "{ctx}: put {i} applied on the server and its reply was swallowed, yet it returned {outcome:?}"
                    );
                }
                match outcome {
                    Ok(PutOutcome::Applied(_)) => tally.acked += 1,
                    Ok(PutOutcome::Conflict(_)) => tally.conflicts += 1,
                    Err(e) => tally.put_failed(ctx, &e),
                }
            }
            for (i, next) in sequences.into_iter().enumerate() {
                match bounded(ctx, "Sequence::next", next)
                    .await
                    .expect("next panicked")
                {
                    Ok(id) => {
                        tallies[0].seq_ids += 1;
                        self.ids[i].push(id);
                    }
                    Err(e) => {
                        typed(ctx, "Sequence::next", &e);
                        tallies[0].seq_errors += 1;
                    }
                }
            }
            tokio::time::sleep(kind.drain()).await;
            self.proxy.remove(&hold).await.expect("remove toxic");
            self.proxy.enable().await.expect("enable proxy");
        }
        tallies
    }

    /// Waits until a put of the batch has applied on the server (the
    /// counter of key `i` moved past `known[i]`, read straight from the
    /// server) or every put has returned, within [`CALL_BOUND`]; the
    /// indexes of the counters seen moved.
    async fn seen_applied<T>(
        &self,
        ctx: &str,
        keys: &[Key],
        known: &[Option<u64>],
        puts: &[tokio::task::JoinHandle<T>],
    ) -> Vec<usize> {
        let start = Instant::now();
        loop {
            let mut seen = Vec::new();
            for (i, (key, known)) in keys.iter().zip(known).enumerate() {
                // A failed read is only one look less.
                if let Ok(Ok(row)) = tokio::time::timeout(CALL_BOUND, self.direct.get(key)).await {
                    if row.map(|r| r.version) != *known {
                        seen.push(i);
                    }
                }
            }
            if !seen.is_empty() || puts.iter().all(|put| put.is_finished()) {
                return seen;
            }
            assert!(
                start.elapsed() < CALL_BOUND,
                "{ctx}: no put of the cut applied or returned within {CALL_BOUND:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Each handle hands out ids again after the fault.
    async fn more_ids(&mut self, ctx: &str) -> u64 {
        for (i, seq) in self.handles.iter().enumerate() {
            for _ in 0..3 {
                let id = recovered(ctx, "Sequence::next", || seq.next()).await;
                self.ids[i].push(id);
            }
        }
        3 * self.handles.len() as u64
    }

    /// No id twice, over all handles and faults; each handle's ids increase.
    fn check_ids(&self) -> usize {
        let mut all = HashSet::new();
        for (i, ids) in self.ids.iter().enumerate() {
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "proxy_faults[{}]: sequence handle {i}'s ids do not increase: {ids:?}",
                self.name
            );
            for id in ids {
                assert!(
                    all.insert(*id),
                    "proxy_faults[{}]: id {id} handed out twice",
                    self.name
                );
            }
        }
        all.len()
    }
}

/// Whether `backend`'s put begins with a read of its own: FerretDB (the
/// `mongodb` server here) takes the `insert` strategy, a read, the insert
/// and a confirming read.
fn put_reads_first(backend: &str) -> bool {
    backend == "mongodb"
}

fn through_proxy(backend: &'static str, var: &str) {
    let who = format!("proxy_faults[{backend}]");
    // Both looked up first, so CI fails on either one missing.
    let api = Toxiproxy::from_env(&who);
    let uri = bakery_testkit::server_uri(var, &who);
    let (Some(api), Some(uri)) = (api, uri) else {
        return;
    };
    let upstream = proxy::upstream_of(&uri)
        .unwrap_or_else(|| panic!("{who}: {var} names no host:port: {}", bakery::redact(&uri)));
    bakery_testkit::runtime(2).block_on(async move {
        let started = Instant::now();
        let name = bakery_testkit::unique_ident(&format!("bakery_{backend}"));
        let proxy = api.create(&name, &upstream).await.unwrap_or_else(|e| panic!("{who}: {e}"));
        let proxied = proxy::with_option(&proxy.uri(&uri), "timeout_ms", &TIMEOUT_MS.to_string());
        // Opening is bounded by the short `timeout_ms` on some backends; a
        // busy machine may need a second try (bounded like a recovery).
        let store = recovered(&who, "connect through the proxy", || bakery::connect(&proxied)).await;
        let direct = recovered(&who, "connect to the server", || bakery::connect(&uri)).await;

        // The proxy is in the path: with it disabled, calls fail.
        proxy.disable().await.expect("disable proxy");
        let key = bakery_testkit::unique_key("proxy-faults-path");
        let cut = bounded(&who, "get", store.get(&key)).await;
        let err = cut.expect_err("a get succeeded with the proxy disabled: the client bypasses the proxy");
        typed(&who, "get", &err);
        proxy.enable().await.expect("enable proxy");
        // From here on every call is recorded, to be checked at the end.
        let history = History::new();
        let store: Arc<dyn VersionedStore> = Arc::new(RecordingStore::new(store, history.clone(), 0));

        // The sequence clients: each its own store (recorded), its own
        // dispatcher.
        let seq_name = bakery_testkit::unique_name("proxy-faults");
        let handles = open_each(&proxied, HANDLES, RECOVERY_BOUND)
            .await
            .into_iter()
            .zip(1..)
            .map(|(own, client)| {
                let own: Arc<dyn VersionedStore> = Arc::new(RecordingStore::new(own, history.clone(), client));
                Sequence::builder(own, &seq_name).block_size(3).build().expect("sequence")
            })
            .collect();
        let lock_stores = open_each(&proxied, LOCK_CLIENTS, RECOVERY_BOUND).await;
        let mut backend = Backend {
            name: backend,
            store,
            direct,
            proxy,
            history: history.clone(),
            handles,
            ids: vec![Vec::new(); HANDLES],
            lock_stores,
            lock: bakery_testkit::unique_name("proxy-faults-lock"),
            locks: Vec::new(),
        };
        let mut unknown_by_fault = Vec::new();
        for fault in FAULTS {
            let tally = backend.run(fault).await;
            unknown_by_fault.push((fault, tally.unknown));
        }
        let unique = backend.check_ids();
        let locks = LockReport::of(std::mem::take(&mut backend.locks));
        locks.assert_kept(&who, LOCK_CLIENTS);
        let fenced = locks.assert_count(&who, &backend.direct, &backend.lock).await;
        println!(
            "{who}: {HANDLES} sequence clients, {unique} ids, all unique and increasing per client; \
             {locks}, fenced count {fenced}; unknown outcomes by fault: {}; {:.1}s",
            unknown_by_fault
                .iter()
                .map(|(f, n)| format!("{} {n}", f.name()))
                .collect::<Vec<_>>()
                .join(", "),
            started.elapsed().as_secs_f64()
        );
        let report = linearizability::check(&history);
        println!("{who}: recorded history: {report}");
        FaultRow {
            suite: "proxy",
            backend: backend.name.to_owned(),
            setup: "one server behind Toxiproxy".into(),
            fault: format!("all {}, one recorded history", FAULTS.len()),
            counts: Counts::of(&history),
            lost_acked: None,
            duplicate_ids: Some((backend.ids.iter().map(Vec::len).sum::<usize>() - unique) as u64),
            stale_accepted: Some(locks.stale_accepted()),
            sequence_clients: Some(HANDLES),
            locks: Some((&locks).into()),
            verdict: format!("{:?} ({} ops, {} unknown)", report.verdict(), report.ops(), report.unknown()),
        }
        .record();
        assert_eq!(report.verdict(), Verdict::Linearizable, "{who}: {report}");
        let proxy = backend.proxy;
        proxy.delete().await.expect("delete proxy");
    });
}

#[test]
fn postgres_through_proxy() {
    through_proxy("postgres", "BAKERY_POSTGRES_URI");
}

#[test]
fn redis_through_proxy() {
    through_proxy("redis", "BAKERY_REDIS_URI");
}

#[test]
fn etcd_through_proxy() {
    through_proxy("etcd", "BAKERY_ETCD_URI");
}

#[test]
fn cassandra_through_proxy() {
    through_proxy("cassandra", "BAKERY_CASSANDRA_URI");
}

#[test]
fn mongodb_through_proxy() {
    through_proxy("mongodb", "BAKERY_MONGODB_URI");
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_through_proxy() {
    through_proxy("mysql", "BAKERY_MARIADB_URI");
}

/// DynamoDB (dynalite) through its `endpoint=`: the proxy fronts the HTTP
/// server the URI's endpoint names.
#[test]
fn dynamodb_through_proxy() {
    through_proxy("dynamodb", "BAKERY_DYNAMODB_URI");
}

/// The grant check's negative control: overlapping confirmed grants are
/// found; touching ones, and an overlap with a grant its release did not
/// confirm (lost), are not.
#[test]
fn overlapping_grants_are_found() {
    let grant = |token, start_ns, end_ns, confirmed| GrantSpan {
        client: token,
        token,
        start_ns,
        end_ns,
        confirmed,
    };
    let apart = [
        grant(1, 0, 10, true),
        grant(2, 10, 20, true),
        grant(3, 15, 30, false),
    ];
    assert_eq!(common::clients::overlapping_grants(&apart), 0);
    let overlapping = [
        grant(1, 0, 10, true),
        grant(2, 5, 20, true),
        grant(3, 8, 9, true),
    ];
    assert_eq!(common::clients::overlapping_grants(&overlapping), 3);
}
