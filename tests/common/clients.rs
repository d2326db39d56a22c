//! Separate sequence and lock clients for the fault and failover tests
//! (tests/faults.rs, tests/proxy_faults.rs, tests/cluster_*.rs), and the
//! checks of what they saw.
//!
//! "Separate" means each client opens its own store with its own
//! `bakery::connect` ([`open_each`]): its own connection pool, and so its
//! own per-process lock writer and sequence dispatcher — not clones of one
//! store handle, which would share them and hide what a second process
//! would see.
//!
//! A lock client takes the fair lock, raises a fenced value's fence to its
//! grant's token and reads the count it holds, writes the count + 1 with
//! the token, and (every other round, once the fence stands at the new
//! token) writes once more with its previous, released token, which the
//! fence must refuse. The count then holds every accepted increment and at
//! most the unknown ones more, if the fence kept the holders apart. It records each grant's span (after
//! `acquire` returned, before `release` was called) and whether the release
//! confirmed the grant was still its own. Every failure is kept with its
//! times on the shared clock, so a test can tell which fault caused it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery::{Bytes, ErrorKind, FencedRead, FencedValue, Lock, Sequence, VersionedStore};
use bakery_verify::checks::{check_fence, FenceReport, FencedOp};
use bakery_verify::History;

use super::cluster::count_of;

/// A call that takes longer than this hangs (a bound, not a speed check).
pub const CALL_BOUND: Duration = Duration::from_secs(30);

/// How long a client goes on after `stop` while it has made no progress
/// yet (an id; an accepted fenced write): a phase ends on the counters'
/// progress, and on a busy machine a client may not have had its turn by
/// then. A bound, not a speed check: a client with none by then reports
/// none, and the test's assertion fails.
const PROGRESS_BOUND: Duration = Duration::from_secs(60);

/// Whether a client stops now: `stop` is set, and it has made progress or
/// has gone on for [`PROGRESS_BOUND`] since `stop` (noted in `since`).
fn stopping(stop: &AtomicBool, progressed: bool, since: &mut Option<Instant>) -> bool {
    if !stop.load(Ordering::Relaxed) {
        return false;
    }
    progressed || since.get_or_insert_with(Instant::now).elapsed() >= PROGRESS_BOUND
}

/// A pause after a failed call, so a client does not spin on a refused
/// connection (no assertion depends on it).
const BACKOFF: Duration = Duration::from_millis(20);

/// `n` stores, each opened by its own `bakery::connect(uri)`; a temporary
/// failure (a server still starting, a short `timeout_ms` on a busy
/// machine) is retried for up to `bound`.
pub async fn open_each(uri: &str, n: usize, bound: Duration) -> Vec<Arc<dyn VersionedStore>> {
    let mut stores = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let store = loop {
            match bakery::connect(uri).await {
                Ok(store) => break store,
                Err(e) if e.is_temporary() && start.elapsed() < bound => {
                    tokio::time::sleep(BACKOFF).await;
                }
                Err(e) => panic!("connect {}: {e}", bakery::redact(uri)),
            }
        };
        stores.push(store);
    }
    stores
}

/// A failed call, on the shared clock.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The call, e.g. `Sequence::next`.
    pub what: &'static str,
    /// Its error's kind.
    pub kind: ErrorKind,
    /// Its error, for the report of a test that fails.
    pub message: String,
    /// When it was invoked (ns on the history's clock).
    pub invoked_ns: u64,
    /// When it returned.
    pub completed_ns: u64,
}

/// The failures among `failures` of calls that overlap `[from_ns, to_ns]`
/// (returned at or after `from_ns`, invoked before `to_ns`).
pub fn failures_within(failures: &[Failure], from_ns: u64, to_ns: u64) -> usize {
    failures
        .iter()
        .filter(|f| f.completed_ns >= from_ns && f.invoked_ns < to_ns)
        .count()
}

/// The kinds a fault may cause; any other fails the test. A lock call may
/// also end `Lost` (its lease ran out while the store was unreachable). A
/// store whose server became unsafe (a Redis replica cut off) refuses its
/// writes, unsent, with the durability re-check's `Config` error.
fn check_kind(what: &str, e: &bakery::Error) -> ErrorKind {
    match e.kind() {
        kind @ (ErrorKind::Unavailable | ErrorKind::Unknown | ErrorKind::TimedOut) => kind,
        ErrorKind::Lost if what.starts_with("lock") => ErrorKind::Lost,
        ErrorKind::Config if is_durability_refusal(e) => ErrorKind::Config,
        other => panic!("{what} failed with {other:?}, not a fault's kind: {e}"),
    }
}

/// The refusal of a live store's durability re-check (nothing was sent;
/// a recipe passes the store's error on by kind and message).
pub fn is_durability_refusal(e: &bakery::Error) -> bool {
    e.kind() == ErrorKind::Config && e.message().contains("durability re-check")
}

/// `call`, which must finish within [`CALL_BOUND`].
pub async fn bounded<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(CALL_BOUND, call)
        .await
        .unwrap_or_else(|_| panic!("{what} hung for {CALL_BOUND:?}"))
}

/// Runs `call` on `clock`: its result, or its failure noted (and a pause).
async fn timed<T>(
    clock: &History,
    failures: &mut Vec<Failure>,
    what: &'static str,
    call: impl std::future::Future<Output = bakery::Result<T>>,
) -> Option<T> {
    let invoked_ns = clock.now_ns();
    match bounded(what, call).await {
        Ok(done) => Some(done),
        Err(e) => {
            let kind = check_kind(what, &e);
            failures.push(Failure {
                what,
                kind,
                message: e.to_string(),
                invoked_ns,
                completed_ns: clock.now_ns(),
            });
            tokio::time::sleep(BACKOFF).await;
            None
        }
    }
}

/// What the clients of one run achieved so far, updated while they run: a
/// phase of a fault test lasts until every client has had its turn (on a
/// busy machine the counters alone may reach their mark first).
#[derive(Debug, Default)]
pub struct Progress {
    /// Sequence clients that got at least one id.
    sequence_clients_served: AtomicUsize,
    /// Lock clients that had at least one fenced write accepted.
    lock_clients_served: AtomicUsize,
    /// Deliberate writes with a released token that returned.
    stale_tried: AtomicU64,
}

impl Progress {
    /// Every one of `sequence_clients` got an id, every one of
    /// `lock_clients` wrote under its grant, and a stale write was tried.
    pub fn all_served(&self, sequence_clients: usize, lock_clients: usize) -> bool {
        self.sequence_clients_served.load(Ordering::Relaxed) >= sequence_clients
            && self.lock_clients_served.load(Ordering::Relaxed) >= lock_clients
            && (lock_clients == 0 || self.stale_tried.load(Ordering::Relaxed) > 0)
    }
}

/// What one sequence client saw.
#[derive(Debug, Default)]
pub struct SequenceTally {
    /// Its ids, in order.
    pub ids: Vec<u64>,
    /// Its failed calls.
    pub failures: Vec<Failure>,
}

/// Takes ids from `seq` until `stop` (and at least one, within
/// [`PROGRESS_BOUND`]).
pub async fn sequence_client(
    seq: Sequence,
    clock: History,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> SequenceTally {
    let mut tally = SequenceTally::default();
    let mut since = None;
    while !stopping(&stop, !tally.ids.is_empty(), &mut since) {
        if let Some(id) = timed(&clock, &mut tally.failures, "Sequence::next", seq.next()).await {
            if tally.ids.is_empty() {
                progress
                    .sequence_clients_served
                    .fetch_add(1, Ordering::Relaxed);
            }
            tally.ids.push(id);
        }
    }
    tally
}

/// One grant of the lock, as its holder saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantSpan {
    /// The holder.
    pub client: u64,
    /// The grant's fencing token.
    pub token: u64,
    /// When `acquire` returned (ns on the shared clock).
    pub start_ns: u64,
    /// When `release` was called.
    pub end_ns: u64,
    /// The release returned `Ok`: the grant was still this holder's, so no
    /// other grant may overlap its span. (After `Lost` or an error it may
    /// have: that is what the fence is for.)
    pub confirmed: bool,
}

/// Pairs of confirmed grants, of different tokens, whose spans overlap:
/// must be 0.
pub fn overlapping_grants(grants: &[GrantSpan]) -> u64 {
    let mut confirmed: Vec<&GrantSpan> = grants.iter().filter(|g| g.confirmed).collect();
    confirmed.sort_by_key(|g| g.start_ns);
    let mut pairs = 0;
    for (i, a) in confirmed.iter().enumerate() {
        // Sorted by start: only those starting before `a` ends can overlap.
        for b in confirmed[i + 1..]
            .iter()
            .take_while(|b| b.start_ns < a.end_ns)
        {
            if b.token != a.token {
                pairs += 1;
            }
        }
    }
    pairs
}

/// What one lock client saw.
#[derive(Debug, Default, Clone)]
pub struct LockTally {
    /// Fenced calls that returned (raises of the fence and writes).
    pub fenced: Vec<FencedOp>,
    /// Its grants.
    pub grants: Vec<GrantSpan>,
    /// Fenced writes with its own current token that were accepted.
    pub writes_accepted: u64,
    /// Writes with its previous, released token made after the fence was
    /// raised to the newer one.
    pub stale_tried: u64,
    /// Of those, accepted: must be 0.
    pub stale_accepted: u64,
    /// Fenced writes with its own token whose outcome is unknown.
    pub unknown_writes: u64,
    /// Its failed lock and fence calls.
    pub failures: Vec<Failure>,
    /// The client's number.
    client: u64,
}

/// The lock `name` and fenced value `name` on `store`, with `lease`.
pub fn lock_on(
    store: &Arc<dyn VersionedStore>,
    name: &str,
    lease: Duration,
) -> (Lock, FencedValue) {
    let lock = Lock::builder(store.clone(), name)
        .lease(lease)
        .acquire_timeout(2 * lease)
        .build()
        .expect("lock");
    let fence = FencedValue::new(store.clone(), name).expect("fenced value");
    (lock, fence)
}

/// Acquire, raise the fence to the token and read, (every other round)
/// write with the previous token, write with the token, release — until
/// `stop` (and one fenced write accepted, within [`PROGRESS_BOUND`]),
/// recording on `clock` as `client`.
pub async fn lock_client(
    (lock, fence): (Lock, FencedValue),
    clock: History,
    client: u64,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> LockTally {
    let mut tally = LockTally {
        client,
        ..LockTally::default()
    };
    let mut previous: Option<u64> = None;
    let mut round = 0u64;
    let mut since = None;
    while !stopping(&stop, tally.writes_accepted > 0, &mut since) {
        round += 1;
        let Some(guard) = timed(&clock, &mut tally.failures, "lock acquire", lock.acquire()).await
        else {
            continue;
        };
        let start_ns = clock.now_ns();
        let token = guard.token();
        let t = clock.now_ns();
        let raised = timed(
            &clock,
            &mut tally.failures,
            "lock read_fenced",
            fence.read_fenced(token),
        )
        .await;
        tally.note(
            &clock,
            client,
            token,
            t,
            raised.as_ref().map(|r| matches!(r, FencedRead::Current(_))),
        );
        let Some(FencedRead::Current(data)) = raised else {
            tally.release(&clock, guard, start_ns).await;
            continue;
        };
        let count = data.as_deref().map_or(0, count_of);
        // Only once the fence stands at the newer token is refusing the
        // older one certain.
        if let Some(stale) = previous.filter(|_| round.is_multiple_of(2)) {
            let t = clock.now_ns();
            let data = Bytes::from(format!("c{client}-{round}-stale"));
            let accepted = tally
                .fenced_write(&clock, "lock stale write", fence.write(stale, data))
                .await;
            if let Some(accepted) = accepted {
                tally.stale_tried += 1;
                tally.stale_accepted += u64::from(accepted);
                progress.stale_tried.fetch_add(1, Ordering::Relaxed);
            }
            tally.note(&clock, client, stale, t, accepted);
        }
        let t = clock.now_ns();
        let data = Bytes::from(format!("{}/c{client}-{round}", count + 1));
        let failed_before = tally.failures.len();
        let accepted = tally
            .fenced_write(&clock, "lock fenced write", fence.write(token, data))
            .await;
        if accepted == Some(true) && tally.writes_accepted == 0 {
            progress.lock_clients_served.fetch_add(1, Ordering::Relaxed);
        }
        tally.writes_accepted += u64::from(accepted == Some(true));
        if tally.failures.len() > failed_before
            && tally.failures[failed_before].kind != ErrorKind::Unavailable
        {
            tally.unknown_writes += 1;
        }
        tally.note(&clock, client, token, t, accepted);
        previous = Some(token);
        tally.release(&clock, guard, start_ns).await;
    }
    tally
}

impl LockTally {
    /// A fenced write (`what`, failures recorded): whether it was
    /// accepted, `None` if the call failed.
    async fn fenced_write(
        &mut self,
        clock: &History,
        what: &'static str,
        write: impl std::future::Future<Output = bakery::Result<bakery::FencedWrite>>,
    ) -> Option<bool> {
        let written = timed(clock, &mut self.failures, what, write).await;
        written.map(|w| w.is_accepted())
    }

    /// Releases `guard`, recording its grant's span.
    async fn release(&mut self, clock: &History, guard: bakery::LockGuard, start_ns: u64) {
        let token = guard.token();
        let end_ns = clock.now_ns();
        let released = timed(clock, &mut self.failures, "lock release", guard.release()).await;
        self.grants.push(GrantSpan {
            client: self.client,
            token,
            start_ns,
            end_ns,
            confirmed: released.is_some(),
        });
    }

    fn note(
        &mut self,
        clock: &History,
        client: u64,
        token: u64,
        invoked_ns: u64,
        accepted: Option<bool>,
    ) {
        if let Some(accepted) = accepted {
            self.fenced.push(FencedOp {
                client,
                token,
                accepted,
                invoked_ns,
                completed_ns: clock.now_ns(),
            });
        }
    }
}

/// The lock clients' records together, checked.
#[derive(Debug, Default)]
pub struct LockReport {
    /// Lock clients (each its own store).
    pub clients: usize,
    /// Grants, and of those confirmed by their release.
    pub grants: usize,
    pub confirmed: usize,
    /// Pairs of confirmed grants that overlap: must be 0.
    pub overlapping: u64,
    /// Fenced writes with the holder's own token accepted.
    pub writes_accepted: u64,
    /// Deliberate writes with a released token, and those accepted.
    pub stale_tried: u64,
    pub stale_accepted: u64,
    /// Fenced writes whose outcome is unknown.
    pub unknown_writes: u64,
    /// bakery_verify's check of every fenced call on the shared clock.
    pub fence: FenceReport,
    /// Failed lock and fence calls.
    pub failures: Vec<Failure>,
}

impl LockReport {
    /// All clients' tallies, checked together.
    pub fn of(tallies: Vec<LockTally>) -> LockReport {
        // A client may have run in several stretches (one tally each).
        let clients: std::collections::HashSet<u64> = tallies.iter().map(|t| t.client).collect();
        let mut report = LockReport {
            clients: clients.len(),
            ..LockReport::default()
        };
        let mut fenced = Vec::new();
        let mut grants = Vec::new();
        for t in tallies {
            fenced.extend(t.fenced);
            grants.extend(t.grants);
            report.writes_accepted += t.writes_accepted;
            report.stale_tried += t.stale_tried;
            report.stale_accepted += t.stale_accepted;
            report.unknown_writes += t.unknown_writes;
            report.failures.extend(t.failures);
        }
        report.grants = grants.len();
        report.confirmed = grants.iter().filter(|g| g.confirmed).count();
        report.overlapping = overlapping_grants(&grants);
        report.fence = check_fence(&fenced);
        report
    }

    /// Stale writes accepted by either count: the deliberate ones, and
    /// those bakery_verify's fence check finds.
    pub fn stale_accepted(&self) -> u64 {
        self.stale_accepted + self.fence.stale_accepted
    }

    /// Asserts that the fenced value `name` on `store` counts every
    /// accepted increment and at most the unknown ones more: the holders'
    /// read-modify-writes did not interleave.
    pub async fn assert_count(
        &self,
        who: &str,
        store: &Arc<dyn VersionedStore>,
        name: &str,
    ) -> u64 {
        let value = FencedValue::new(store.clone(), name).expect("fenced value");
        let count = bounded("fenced read", value.read())
            .await
            .unwrap_or_else(|e| panic!("{who}: reading the fenced count: {e}"))
            .map_or(0, |f| count_of(&f.data));
        let most = self.writes_accepted + self.unknown_writes;
        assert!(
            (self.writes_accepted..=most).contains(&count),
            "{who}: fenced count {count} outside [accepted {}, accepted + unknown {most}]: {self}",
            self.writes_accepted
        );
        count
    }

    /// Asserts every count: at least `min_clients` clients, grants,
    /// fenced writes accepted and deliberate stale writes tried; then
    /// [`LockReport::assert_safe`].
    pub fn assert_kept(&self, who: &str, min_clients: usize) {
        assert!(
            self.clients >= min_clients,
            "{who}: {} lock clients, want {min_clients}+",
            self.clients
        );
        assert!(
            self.confirmed > 0,
            "{who}: no grant confirmed by its release: {self}"
        );
        assert!(
            self.writes_accepted > 0,
            "{who}: no fenced write accepted: {self}"
        );
        assert!(
            self.stale_tried > 0,
            "{who}: no stale fenced write tried: {self}"
        );
        self.assert_safe(who);
    }

    /// Asserts no two confirmed grants overlapping, no stale write
    /// accepted, no sections overlapping in the fence's order.
    pub fn assert_safe(&self, who: &str) {
        assert_eq!(
            self.overlapping, 0,
            "{who}: confirmed grants overlap: {self}"
        );
        assert_eq!(
            self.stale_accepted(),
            0,
            "{who}: stale fenced writes accepted: {self} {:?}",
            self.fence.examples
        );
        assert!(
            self.fence.passed(),
            "{who}: fenced writes: {:?}",
            self.fence
        );
    }
}

impl std::fmt::Display for LockReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} lock clients, {} grants ({} confirmed, {} overlapping), fenced writes accepted {} \
             (unknown {}), stale tried {} accepted {} (fence check: {} stale, {} overlapping sections), \
             {} lock errors",
            self.clients,
            self.grants,
            self.confirmed,
            self.overlapping,
            self.writes_accepted,
            self.unknown_writes,
            self.stale_tried,
            self.stale_accepted,
            self.fence.stale_accepted,
            self.fence.overlapping_sections,
            self.failures.len()
        )
    }
}
