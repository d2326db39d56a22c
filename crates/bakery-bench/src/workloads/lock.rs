//! The `lock` workload: every client acquires and releases one lock, again
//! and again, so the lock is always contended (with more than one client).
//!
//! Variants: the fair lock with store notifications (on backends that have
//! them), the fair lock polling only, and the old try-and-back-off lock
//! ([`OldLock`], the baseline: try, and sleep a random back-off while it is
//! held; no queue), leader election on the fair lock (campaign + resign:
//! a leadership hand-over per operation), a one-permit semaphore and a
//! read-write lock taken by writers only (the same queue core as the lock,
//! with another grant rule and row). One operation is one acquire +
//! release; the
//! latency is the wait plus both writes. Besides throughput the table shows
//! fairness: Jain's index over the clients' grants (from the runner) and the
//! longest run of consecutive grants to one client while another client
//! was asking (a client that takes a lock nobody else wants is not served
//! ahead of anyone: at a cell's start the other clients may not have asked
//! yet, and with one client nobody ever does). Every grant is checked
//! for overlap with another (a violation is counted as an error). The row
//! bytes column is the mean size of the rows the recipe wrote: the fair
//! lock's queue lives in its row, so the row grows with the waiters, and
//! every write pays for its size (see the `cas` workload's 4 KiB rows).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bakery::{
    Bytes, Election, Key, Lock, PutOutcome, Result as StoreResult, RwLock, Semaphore, StoreLayer,
    Version, VersionedStore,
};

use crate::baseline::{self, OldLock};
use crate::journal::{monotonic_ns, Journal};
use crate::stats::LatencyHistogram;

use super::prelude::*;

/// The `lock` workload.
#[derive(Debug, Clone, Copy)]
pub struct LockWorkload;

const FAIR: Variant = Variant::new("fair", "Lock (FIFO)");
const FAIR_POLLING: Variant = Variant::new("fair-polling", "Lock (FIFO, no notify)");
const OLD: Variant = Variant::new("old", "old lock (try and back off)");
const ELECTION: Variant = Variant::new("election", "Election (campaign + resign)");
const SEMAPHORE: Variant = Variant::new("semaphore", "Semaphore (1 permit)");
const RWLOCK_WRITERS: Variant = Variant::new("rwlock-write", "RwLock (writers only)");

/// Extra column: most consecutive grants to the same client while another
/// client was asking.
pub const LONGEST_RUN: &str = "longest run";
/// Extra column: median hand-off, from the moment the holder starts its
/// release to the moment another client is inside (µs, rounded up).
pub const HANDOFF_P50: &str = "hand-off p50 µs";
/// Extra column: 99th percentile of the hand-off (µs, rounded up).
pub const HANDOFF_P99: &str = "hand-off p99 µs";
/// Extra figure (results.json only): the median hand-off in ns, which the
/// hand-off target is judged on. Rounded up to a whole µs, an in-process
/// hand-off of a few µs would read up to half a round trip longer.
pub const HANDOFF_P50_NS: &str = "hand-off p50 ns";
/// Extra column: mean size of the rows the recipe wrote (bytes).
pub const ROW_BYTES: &str = "row bytes";

/// The `lock` workload as the registry lists it.
pub const SPEC: WorkloadSpec = WorkloadSpec::new(
    "lock",
    "acq",
    &[FAIR, FAIR_POLLING, OLD, ELECTION, SEMAPHORE, RWLOCK_WRITERS],
    &LockWorkload,
)
.summary(
    "Lock acquire + release: the fair lock (with and without store \
             notifications), the old try-and-back-off lock, leader election's \
             campaign + resign, a one-permit semaphore, and a read-write lock \
             taken by writers only.",
)
.title(
    "lock: acquire + release of one lock by every client (acquisitions/s; latency = wait \
             + both writes; fairness = Jain's index over per-client grants; longest run = most \
             consecutive grants to one client while another asked; hand-off = from the \
             holder's release to the next client's grant)",
)
.extra_columns(&[LONGEST_RUN, HANDOFF_P50, HANDOFF_P99, ROW_BYTES])
// Enough grants for the fairness index to judge: 5 each gives the fairest
// lock ≥ 0.99 whatever the remainder.
.min_ops_per_client(5)
.across_processes();

#[async_trait]
impl Workload for LockWorkload {
    async fn setup(&self, store: &CellStore, cell: &CellSpec) -> Result<PreparedCell, BenchError> {
        let name = cell.recipe_name();
        let prepare_error = prepare_error("lock", store);
        let written = Arc::new(WrittenBytes::new(store.counted.clone()));
        let counted: Arc<dyn VersionedStore> = written.clone();
        let grants = Arc::new(GrantLog::new(cell.journal.clone()));
        let prefix = if cell.variant == OLD.id {
            baseline::KEY_PREFIX
        } else if cell.variant == SEMAPHORE.id {
            bakery::semaphore::KEY_PREFIX
        } else if cell.variant == RWLOCK_WRITERS.id {
            bakery::rwlock::KEY_PREFIX
        } else {
            bakery::lock::KEY_PREFIX
        };
        let row_name = if cell.variant == ELECTION.id {
            format!("{}{name}", bakery::election::LOCK_PREFIX)
        } else {
            name.clone()
        };
        let key = Key::with_prefix(prefix, &row_name).map_err(prepare_error)?;
        let mut clients = Vec::with_capacity(cell.clients);
        for index in 0..cell.clients {
            let kind = if cell.variant == OLD.id {
                LockKind::Old(OldLock::new(counted.clone(), &name).map_err(prepare_error)?)
            } else if cell.variant == SEMAPHORE.id {
                LockKind::Semaphore(
                    Semaphore::builder(counted.clone(), &name)
                        .permits(1)
                        .build()
                        .map_err(prepare_error)?,
                )
            } else if cell.variant == RWLOCK_WRITERS.id {
                LockKind::Writer(
                    RwLock::builder(counted.clone(), &name)
                        .build()
                        .map_err(prepare_error)?,
                )
            } else if cell.variant == ELECTION.id {
                LockKind::Election(
                    Election::builder(counted.clone(), &name)
                        .build()
                        .map_err(prepare_error)?,
                )
            } else {
                LockKind::Fair(
                    Lock::builder(counted.clone(), &name)
                        .notifications(cell.variant == FAIR.id)
                        .build()
                        .map_err(prepare_error)?,
                )
            };
            clients.push(LockClient {
                index,
                kind,
                grants: grants.clone(),
                written: written.clone(),
            });
        }
        let problems = Box::new(move || grants.problems());
        Ok(row_lock_cell(store, &counted, key, clients, problems))
    }
}

enum LockKind {
    Fair(Lock),
    Old(OldLock),
    Election(Election),
    Semaphore(Semaphore),
    Writer(RwLock),
}

/// The order of grants as seen inside the critical section (so it is the
/// real order), and an overlap detector. Shared by the native lock peers.
#[derive(Default)]
pub struct GrantLog {
    inside: AtomicBool,
    /// Clients between the start of their acquire and their grant.
    asking: AtomicUsize,
    runs: Mutex<Runs>,
    overlaps: Mutex<u64>,
    /// Across processes: where each grant is logged (and the shared
    /// counter incremented) for the parent's checks.
    journal: Option<Arc<Journal>>,
}

/// A client's acquire in progress ([`GrantLog::ask`]), and when it began
/// (on [`monotonic_ns`], when the log has a journal).
pub struct Asking<'a>(&'a GrantLog, u64);

impl Asking<'_> {
    /// Granted, with fencing token `token` if the lock gives one: client
    /// `index`'s critical section, which records the grant and detects
    /// overlap (and, across processes, logs it and increments the shared
    /// counter).
    pub fn critical_section(self, index: usize, token: Option<u64>) -> Result<(), OpError> {
        let (log, asked_ns) = (self.0, self.1);
        drop(self);
        log.critical_section(index, asked_ns, token)
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.asking.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Who held the lock last, how many times in a row, and the hand-offs:
/// the time from one client's release to another client's grant.
#[derive(Default)]
struct Runs {
    last: Option<usize>,
    current: u64,
    longest: u64,
    /// When the last holder started its release.
    left: Option<Instant>,
    /// Hand-offs between different clients (created with the first).
    handoffs: Option<LatencyHistogram>,
}

impl GrantLog {
    /// A log of grants, also written to `journal` if given (a cell across
    /// processes).
    pub fn new(journal: Option<Arc<Journal>>) -> Self {
        GrantLog {
            journal,
            ..GrantLog::default()
        }
    }

    /// A client starts to acquire: it asks until its grant (or its error:
    /// the returned [`Asking`] ends when dropped).
    pub fn ask(&self) -> Asking<'_> {
        self.asking.fetch_add(1, Ordering::SeqCst);
        let asked_ns = if self.journal.is_some() {
            monotonic_ns()
        } else {
            0
        };
        Asking(self, asked_ns)
    }

    /// Client `client` got the lock: an error if another client is inside.
    fn enter(&self, client: usize) -> Result<(), OpError> {
        // Its own ask has ended: anyone still asking is another client.
        let others_asking = self.asking.load(Ordering::SeqCst) > 0;
        if self.inside.swap(true, Ordering::SeqCst) {
            if let Ok(mut overlaps) = self.overlaps.lock() {
                *overlaps += 1;
            }
            return Err(OpError(
                "two clients held the lock at once (mutual exclusion violated)".into(),
            ));
        }
        if let Ok(mut runs) = self.runs.lock() {
            if runs.last == Some(client) {
                // Served again ahead of a client that asked, or again
                // because nobody else wanted the lock (a run of its own).
                runs.current = if others_asking { runs.current + 1 } else { 1 };
            } else {
                runs.current = 1;
                if let Some(left) = runs.left {
                    if runs.handoffs.is_none() {
                        runs.handoffs = LatencyHistogram::new().ok();
                    }
                    if let Some(handoffs) = runs.handoffs.as_mut() {
                        handoffs.record(left.elapsed());
                    }
                }
            }
            runs.last = Some(client);
            runs.longest = runs.longest.max(runs.current);
        }
        Ok(())
    }

    /// The client inside leaves: its release starts now.
    fn leave(&self) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.left = Some(Instant::now());
        }
        self.inside.store(false, Ordering::SeqCst);
    }

    /// Median and 99th percentile of the hand-offs so far, in ns (`None`
    /// before the first).
    fn handoff_ns(&self) -> Option<(u64, u64)> {
        let runs = self.runs.lock().ok()?;
        let summary = runs.handoffs.as_ref()?.summary();
        Some((summary.p50_ns, summary.p99_ns))
    }

    /// What the cell's finish reports: overlapping grants, if any.
    pub fn problems(&self) -> Vec<String> {
        let overlaps = self.overlaps.lock().map(|o| *o).unwrap_or(0);
        if overlaps > 0 {
            vec![format!("{overlaps} overlapping grants")]
        } else {
            Vec::new()
        }
    }

    /// Most consecutive grants to one client so far.
    fn longest_run(&self) -> u64 {
        self.runs.lock().map(|runs| runs.longest).unwrap_or(0)
    }

    /// The extras of client `index`: the longest run is a cell-wide
    /// figure, so only client 0 reports it (the runner sums extras).
    pub fn extras(&self, index: usize) -> Vec<(&'static str, u64)> {
        if index != 0 {
            return Vec::new();
        }
        let mut extras = vec![(LONGEST_RUN, self.longest_run())];
        if let Some((p50, p99)) = self.handoff_ns() {
            extras.extend([
                (HANDOFF_P50, p50.div_ceil(1000)),
                (HANDOFF_P99, p99.div_ceil(1000)),
                (HANDOFF_P50_NS, p50),
            ]);
        }
        extras
    }

    /// Client `index`'s critical section (empty in one process): records
    /// the grant and detects overlap.
    fn critical_section(
        &self,
        index: usize,
        asked_ns: u64,
        token: Option<u64>,
    ) -> Result<(), OpError> {
        self.enter(index)?;
        let journaled = match &self.journal {
            Some(journal) => journal.critical_section(asked_ns, token).map_err(OpError),
            None => Ok(()),
        };
        self.leave();
        journaled
    }
}

struct LockClient {
    index: usize,
    kind: LockKind,
    grants: Arc<GrantLog>,
    /// The sizes of the rows the cell's recipes wrote.
    written: Arc<WrittenBytes>,
}

#[async_trait]
impl BenchClient for LockClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let asking = self.grants.ask();
        let index = self.index;
        // Every kind: acquire, enter the logged section with the fencing
        // token, release.
        macro_rules! section {
            ($held:ident = $acquire:expr, $token:expr, $release:expr) => {{
                let $held = $acquire.await?;
                let entered = asking.critical_section(index, Some($token));
                $release.await?;
                entered
            }};
        }
        match &self.kind {
            LockKind::Fair(lock) => {
                section!(guard = lock.acquire(), guard.token(), guard.release())
            }
            LockKind::Old(lock) => {
                section!(guard = lock.acquire(), guard.token(), lock.release(guard))
            }
            LockKind::Semaphore(semaphore) => {
                section!(
                    permit = semaphore.acquire(),
                    permit.token(),
                    permit.release()
                )
            }
            LockKind::Writer(rwlock) => {
                section!(guard = rwlock.write(), guard.token(), guard.release())
            }
            LockKind::Election(election) => section!(
                leadership = election.campaign(),
                leadership.term(),
                leadership.resign()
            ),
        }
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
        let mut extras = self.grants.extras(self.index);
        // A cell-wide figure, like the grant log's: client 0 reports it.
        if let (0, Some(mean)) = (self.index, self.written.mean()) {
            extras.push((ROW_BYTES, mean));
        }
        extras
    }
}

/// A store layer that adds up the sizes of the rows written through it.
#[derive(Debug)]
struct WrittenBytes {
    inner: Arc<dyn VersionedStore>,
    bytes: AtomicU64,
    writes: AtomicU64,
}

impl WrittenBytes {
    fn new(inner: Arc<dyn VersionedStore>) -> Self {
        WrittenBytes {
            inner,
            bytes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    /// The mean size of the rows written so far, rounded (`None` before
    /// the first write).
    fn mean(&self) -> Option<u64> {
        let writes = self.writes.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        (writes > 0).then(|| (bytes + writes / 2) / writes)
    }
}

#[async_trait]
impl StoreLayer for WrittenBytes {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> StoreResult<PutOutcome> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(value.len() as u64, Ordering::Relaxed);
        self.inner.put_if_version(key, expected, value).await
    }
}

/// A cell's finish that only reports overlapping grants (there must be
/// none): what the native lock peers leave behind needs no cleanup.
pub struct CheckGrants(pub Arc<GrantLog>);

#[async_trait]
impl Finish for CheckGrants {
    async fn finish(self: Box<Self>, _had_errors: bool) -> Vec<String> {
        self.0.problems()
    }
}

/// One connection of a native lock peer: how it acquires and releases.
/// The rest of a native lock client (the warm-up, two round trips per
/// acquisition, the grant log and its extras) is [`native_lock_cell`]'s.
#[async_trait]
pub trait NativeLock: Send {
    /// What an acquisition hands to its release (e.g. the lock key held).
    type Held: Send;

    /// Acquire the lock (one round trip).
    async fn lock(&mut self) -> Result<Self::Held, OpError>;

    /// Release what [`lock`](Self::lock) acquired (one round trip).
    async fn unlock(&mut self, held: Self::Held) -> Result<(), OpError>;
}

/// A cell of lock `clients` on the row at `key`, each warmed up by reading
/// the row through `counted` ([`RowWarmUp`]); afterwards the row is deleted
/// and the grant log's `problems` reported.
pub(crate) fn row_lock_cell<C: BenchClient + 'static>(
    store: &CellStore,
    counted: &Arc<dyn VersionedStore>,
    key: Key,
    clients: Vec<C>,
    problems: Box<dyn FnOnce() -> Vec<String> + Send>,
) -> PreparedCell {
    let clients = clients
        .into_iter()
        .map(|client| {
            let warmed = RowWarmUp::new(counted.clone(), key.clone(), client);
            Box::new(warmed) as Box<dyn BenchClient>
        })
        .collect();
    PreparedCell {
        clients,
        finish: Some(Box::new(DeleteRowFinish {
            store: store.raw.clone(),
            key,
            problems,
        })),
    }
}

/// A lock client whose warm-up is one read of the cell's row: it opens the
/// client's connections and never takes a grant (a grant per client would
/// take minutes for the old lock at 64 clients, unmeasured anyway).
struct RowWarmUp<C> {
    store: Arc<dyn VersionedStore>,
    key: Key,
    client: C,
}

impl<C> RowWarmUp<C> {
    /// `client`, warmed up by reading `key` from `store`.
    fn new(store: Arc<dyn VersionedStore>, key: Key, client: C) -> Self {
        RowWarmUp { store, key, client }
    }
}

#[async_trait]
impl<C: BenchClient> BenchClient for RowWarmUp<C> {
    async fn warm_up(&mut self) -> Result<(), OpError> {
        self.store.get(&self.key).await?;
        Ok(())
    }

    async fn op(&mut self) -> Result<(), OpError> {
        self.client.op().await
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
        self.client.extras()
    }
}

/// A native lock peer's cell: one client per connection in `locks`, every
/// grant logged and checked for overlap afterwards (what the native lock
/// peers leave behind needs no cleanup).
pub fn native_lock_cell<L: NativeLock + 'static>(
    locks: Vec<L>,
    round_trips: &RoundTrips,
    journal: Option<Arc<Journal>>,
) -> PreparedCell {
    let grants = Arc::new(GrantLog::new(journal));
    let clients = locks
        .into_iter()
        .enumerate()
        .map(|(index, lock)| {
            Box::new(NativeLockClient {
                index,
                lock,
                grants: grants.clone(),
                round_trips: round_trips.clone(),
                warmed: false,
            }) as Box<dyn BenchClient>
        })
        .collect();
    PreparedCell {
        clients,
        finish: Some(Box::new(CheckGrants(grants))),
    }
}

struct NativeLockClient<L> {
    index: usize,
    lock: L,
    grants: Arc<GrantLog>,
    round_trips: RoundTrips,
    warmed: bool,
}

#[async_trait]
impl<L: NativeLock> BenchClient for NativeLockClient<L> {
    async fn op(&mut self) -> Result<(), OpError> {
        if !self.warmed {
            // Like the bakery lock clients: the warm-up opens, never grants.
            self.warmed = true;
            return Ok(());
        }
        self.round_trips.fetch_add(2, Ordering::Relaxed);
        let asking = self.grants.ask();
        let held = self.lock.lock().await?;
        let entered = asking.critical_section(self.index, None);
        self.lock.unlock(held).await?;
        entered
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
        self.grants.extras(self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Client `index` asks and is granted at once.
    fn granted(log: &GrantLog, index: usize) {
        log.ask()
            .critical_section(index, None)
            .expect("nobody else inside");
    }

    #[test]
    fn a_run_counts_only_grants_while_another_client_asks() {
        let log = GrantLog::default();
        // Nobody else asks (a cell's start, or one client): no run.
        for _ in 0..10 {
            granted(&log, 0);
        }
        assert_eq!(log.longest_run(), 1);
        // Client 1 asks and waits while client 0 is served three times
        // more: a run of four (the grant before it asked, and three ahead
        // of it).
        let waiting = log.ask();
        for _ in 0..3 {
            granted(&log, 0);
        }
        assert_eq!(log.longest_run(), 4);
        waiting
            .critical_section(1, None)
            .expect("nobody else inside");
        granted(&log, 0);
        assert_eq!(log.longest_run(), 4);
    }

    #[test]
    fn a_failed_acquire_stops_asking() {
        let log = GrantLog::default();
        drop(log.ask()); // the acquire failed
        granted(&log, 0);
        granted(&log, 0);
        assert_eq!(log.longest_run(), 1);
    }

    #[test]
    fn overlapping_grants_are_an_error() {
        let log = GrantLog::default();
        log.enter(0).expect("first inside");
        assert!(log.ask().critical_section(1, None).is_err());
        assert_eq!(log.problems().len(), 1);
    }
}
