//! A recorded workload that keeps running while a cluster fails over, and
//! the figures and checks of what it saw (tests/cluster_*.rs).
//!
//! Counter clients increment a few counters by read-modify-write
//! `put_if_version` through bakery_verify's [`RecordingStore`], every value
//! unique (`<count>/<client>-<n>`), so the history goes to bakery_verify's
//! linearizability checker; sequence clients take ids; lock clients take
//! the fair lock and write a fenced value with its token — and every other
//! round once more with their previous, released token, which the fence
//! must refuse (tests/common/clients.rs). Each sequence and lock client
//! opens its own store. All run until [`Workload::stop`]; every error must
//! be one a fault may cause (`Unavailable`, `Unknown`, `TimedOut`, and for
//! the lock `Lost`). A client of a failed-over server is stopped and new
//! clients are started on the new one with the same [`Plan`] and
//! [`History`]: their calls all go into one history, checked as one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery::{Bytes, ErrorKind, Key, PutOutcome, Row, Sequence, VersionedStore};
use bakery_verify::history::{Call, History, Outcome, Reply};
use bakery_verify::RecordingStore;
use tokio::task::JoinHandle;

use super::clients::bounded;
use super::clients::{
    lock_client, lock_on, open_each, sequence_client, LockReport, LockTally, Progress,
};

/// A pause after a failed call, so a client does not spin on a refused
/// connection (no assertion depends on it).
const BACKOFF: Duration = Duration::from_millis(20);

/// The lock's lease: short, so clients opened after a failover wait little
/// for a holder that died with the old server.
const LEASE: Duration = Duration::from_secs(1);

/// How long opening the clients' stores may take (a bound, not a speed
/// check).
const OPEN_BOUND: Duration = Duration::from_secs(60);

/// What the clients work on: names shared by every client of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The counters.
    pub keys: Vec<Key>,
    /// Counter clients (each on counter `client % keys`), sharing one store.
    pub counter_clients: u64,
    /// The sequence's name.
    pub sequence: String,
    /// Sequence clients, each on its own store.
    pub sequence_clients: usize,
    /// Ids per block reservation (small, so reservations are frequent).
    pub block_size: u64,
    /// The lock's and fenced value's name.
    pub lock: String,
    /// Lock clients, each on its own store.
    pub lock_clients: u64,
}

impl Plan {
    /// A plan under names no other run uses, with three lock clients.
    pub fn new(case: &str, keys: usize, counter_clients: u64, sequence_clients: usize) -> Plan {
        Plan {
            keys: (0..keys)
                .map(|_| bakery_testkit::unique_key(case))
                .collect(),
            counter_clients,
            sequence: bakery_testkit::unique_name(case),
            sequence_clients,
            block_size: 3,
            lock: bakery_testkit::unique_name(case),
            lock_clients: 3,
        }
    }
}

/// The count a counter's value holds (`<count>/<tag>`).
pub fn count_of(value: &[u8]) -> u64 {
    let text = std::str::from_utf8(value).unwrap_or_default();
    bakery_testkit::number(text.split('/').next().unwrap_or_default().as_bytes())
}

fn row_count(row: &Option<Row>) -> u64 {
    row.as_ref().map_or(0, |r| count_of(&r.value))
}

/// The kind of an error a fault may cause; any other fails the test.
fn typed(what: &str, e: &bakery::Error) -> ErrorKind {
    match e.kind() {
        kind @ (ErrorKind::Unavailable | ErrorKind::Unknown | ErrorKind::TimedOut) => kind,
        other => panic!("{what} failed with {other:?}, not a fault's kind: {e}"),
    }
}

/// Clients running on one server.
pub struct Workload {
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    sequence_clients: usize,
    lock_clients: usize,
    counters: Vec<JoinHandle<u64>>,
    sequences: Vec<JoinHandle<super::clients::SequenceTally>>,
    locks: Vec<JoinHandle<LockTally>>,
}

/// What the clients of a [`Workload`] saw besides the history.
#[derive(Debug, Default)]
pub struct Observed {
    /// The ids each sequence client got, in order.
    pub ids: Vec<Vec<u64>>,
    /// What each lock client saw.
    pub locks: Vec<LockTally>,
    /// Typed errors of the counter clients' calls.
    pub counter_errors: u64,
    /// Typed errors of `Sequence::next`.
    pub sequence_errors: u64,
}

impl Observed {
    /// Adds `other`'s records (its clients are other clients).
    pub fn merge(&mut self, other: Observed) {
        self.ids.extend(other.ids);
        self.locks.extend(other.locks);
        self.counter_errors += other.counter_errors;
        self.sequence_errors += other.sequence_errors;
    }

    /// The lock clients' records, checked together (taken out of `self`).
    pub fn lock_report(&mut self) -> LockReport {
        LockReport::of(std::mem::take(&mut self.locks))
    }
}

impl Workload {
    /// Starts `plan`'s clients on the server of `uri`, recording into
    /// `history` as clients `first_client`, `first_client + 1`, …: the
    /// counter clients on one store, each sequence and lock client on a
    /// store of its own (its own `bakery::connect`).
    pub async fn start(uri: &str, history: &History, plan: &Plan, first_client: u64) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Progress::default());
        let shared = open_each(uri, 1, OPEN_BOUND).await.remove(0);
        let counters = (0..plan.counter_clients)
            .map(|i| {
                let client = first_client + i;
                let recorded = RecordingStore::new(shared.clone(), history.clone(), client);
                let key = plan.keys[i as usize % plan.keys.len()].clone();
                tokio::spawn(counter_client(recorded, key, client, stop.clone()))
            })
            .collect();
        let sequences = open_each(uri, plan.sequence_clients, OPEN_BOUND)
            .await
            .into_iter()
            .map(|store| {
                let seq = Sequence::builder(store, &plan.sequence)
                    .block_size(plan.block_size)
                    .build()
                    .expect("sequence");
                tokio::spawn(sequence_client(
                    seq,
                    history.clone(),
                    stop.clone(),
                    progress.clone(),
                ))
            })
            .collect();
        let locks = open_each(uri, plan.lock_clients as usize, OPEN_BOUND)
            .await
            .into_iter()
            .zip(0..)
            .map(|(store, i)| {
                let client = first_client + plan.counter_clients + i;
                let lock = lock_on(&store, &plan.lock, LEASE);
                tokio::spawn(lock_client(
                    lock,
                    history.clone(),
                    client,
                    stop.clone(),
                    progress.clone(),
                ))
            })
            .collect();
        Workload {
            stop,
            progress,
            sequence_clients: plan.sequence_clients,
            lock_clients: plan.lock_clients as usize,
            counters,
            sequences,
            locks,
        }
    }

    /// Every sequence client got an id, every lock client wrote under its
    /// grant, and a stale fenced write was tried: wait for this (with the
    /// counters' mark) before a fault, so the checks after it judge every
    /// client.
    pub fn all_served(&self) -> bool {
        self.progress
            .all_served(self.sequence_clients, self.lock_clients)
    }

    /// Waits (at most `bound`) until `acks` puts were acknowledged after
    /// `after_ns` (by any client) and every client was served
    /// ([`Workload::all_served`]); whether they were.
    pub async fn served(
        &self,
        history: &History,
        after_ns: u64,
        acks: u64,
        bound: Duration,
    ) -> bool {
        eventually(bound, || {
            acked_after(history, after_ns) >= acks && self.all_served()
        })
        .await
    }

    /// Stops the clients (each finishes its current call) and collects
    /// what they saw.
    pub async fn stop(self) -> Observed {
        self.stop.store(true, Ordering::Relaxed);
        let mut observed = Observed::default();
        for client in self.counters {
            observed.counter_errors += client.await.expect("counter client panicked");
        }
        for client in self.sequences {
            let tally = client.await.expect("sequence client panicked");
            observed.ids.push(tally.ids);
            observed.sequence_errors += tally.failures.len() as u64;
        }
        for client in self.locks {
            observed
                .locks
                .push(client.await.expect("lock client panicked"));
        }
        observed
    }
}

/// Read (after an error), put count + 1 at the version read; after a
/// conflict, the row it carries. Returns its typed errors.
async fn counter_client(
    store: RecordingStore,
    key: Key,
    client: u64,
    stop: Arc<AtomicBool>,
) -> u64 {
    let (mut errors, mut n) = (0, 0u64);
    let mut known: Option<Option<Row>> = None;
    while !stop.load(Ordering::Relaxed) {
        let row = match known.take() {
            Some(row) => row,
            None => match bounded("get", store.get(&key)).await {
                Ok(row) => row,
                Err(e) => {
                    failed(&mut errors, "get", &e).await;
                    continue;
                }
            },
        };
        n += 1;
        let value = Bytes::from(format!("{}/c{client}-{n}", row_count(&row) + 1));
        let put = store.put_if_version(&key, row.map(|r| r.version), value);
        match bounded("put_if_version", put).await {
            Ok(PutOutcome::Applied(now)) => known = Some(Some(now)),
            Ok(PutOutcome::Conflict(now)) => known = Some(now),
            Err(e) => failed(&mut errors, "put_if_version", &e).await,
        }
    }
    errors
}

/// Counts a failed call, whose error must be one a fault may cause, and
/// pauses before the next.
async fn failed(errors: &mut u64, what: &str, e: &bakery::Error) {
    typed(what, e);
    *errors += 1;
    tokio::time::sleep(BACKOFF).await;
}

/// Puts on `key` in `history` (optionally only those completed before
/// `before_ns`): acknowledged (applied) and of unknown outcome.
pub fn puts_on(history: &History, key: &Key, before_ns: Option<u64>) -> (u64, u64) {
    let (mut acked, mut unknown) = (0, 0);
    for op in history.operations() {
        let early = match (before_ns, op.completed_ns) {
            (None, _) => true,
            (Some(limit), Some(done)) => done < limit,
            (Some(_), None) => false,
        };
        if op.key != key.as_str() || !matches!(op.call, Call::Put { .. }) || !early {
            continue;
        }
        match op.outcome {
            Outcome::Ok {
                reply: Reply::Applied(_),
            } => acked += 1,
            ref o if o.may_have_applied() => unknown += 1,
            _ => {}
        }
    }
    (acked, unknown)
}

/// Acknowledged puts on `key`, completed before `before_ns`, that wrote a
/// count above `survived`: the increments a server that now holds count
/// `survived` has lost.
pub fn acked_above(history: &History, key: &Key, before_ns: u64, survived: u64) -> u64 {
    history
        .operations()
        .iter()
        .filter(|op| op.key == key.as_str() && op.completed_ns.is_some_and(|t| t < before_ns))
        .filter(|op| match &op.outcome {
            Outcome::Ok {
                reply: Reply::Applied(row),
            } => count_of(&row.value.0) > survived,
            _ => false,
        })
        .count() as u64
}

/// Acknowledged puts (on any key) completed after `after_ns`.
pub fn acked_after(history: &History, after_ns: u64) -> u64 {
    history
        .operations()
        .iter()
        .filter(|op| op.completed_ns.is_some_and(|t| t > after_ns))
        .filter(|op| {
            matches!(
                op.outcome,
                Outcome::Ok {
                    reply: Reply::Applied(_)
                }
            )
        })
        .count() as u64
}

/// Acknowledged increments the counters no longer hold: per key, the puts
/// acknowledged over the whole history less the counter's final value.
pub fn lost_acked(history: &History, keys: &[Key], values: &[u64]) -> u64 {
    keys.iter()
        .zip(values)
        .map(|(key, value)| puts_on(history, key, None).0.saturating_sub(*value))
        .sum()
}

/// Each counter (final `values` of `keys`) holds every acknowledged
/// increment in `history` and at most those plus the unknown ones.
pub fn assert_counters(who: &str, history: &History, keys: &[Key], values: &[u64]) {
    for (key, value) in keys.iter().zip(values) {
        let (acked, unknown) = puts_on(history, key, None);
        assert!(
            (acked..=acked + unknown).contains(value),
            "{who}: counter {key} = {value} outside [acked {acked}, acked + unknown {}]",
            acked + unknown
        );
    }
}

/// Polls `done` every 50 ms until it holds, for at most `bound`; returns
/// whether it did.
pub async fn eventually(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= bound {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The counters' final values, read (retrying while the store recovers,
/// up to `bound`) from `store`.
pub async fn read_counts(store: &dyn VersionedStore, keys: &[Key], bound: Duration) -> Vec<u64> {
    let mut out = Vec::new();
    for key in keys {
        let start = Instant::now();
        let row = loop {
            match bounded("get", store.get(key)).await {
                Ok(row) => break row,
                Err(e) if e.is_temporary() && start.elapsed() < bound => {
                    tokio::time::sleep(BACKOFF).await;
                }
                Err(e) => panic!("reading counter {key}: {e}"),
            }
        };
        out.push(row_count(&row));
    }
    out
}

/// Samples of a cluster's state, one every 100 ms from [`Sampler::start`]
/// to [`Sampler::stop`], taken on a thread of its own, not the runtime's:
/// a failed assertion ends the test without waiting for it.
pub struct Sampler<S> {
    samples: Arc<std::sync::Mutex<Vec<S>>>,
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl<S: Clone + Default + Send + 'static> Sampler<S> {
    /// Call `take` with the history's clock every 100 ms.
    pub fn start(history: &History, mut take: impl FnMut(u64) -> S + Send + 'static) -> Self {
        let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, done, history) = (samples.clone(), done.clone(), history.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let sample = take(history.now_ns());
                    samples.lock().expect("samples").push(sample);
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Sampler {
            samples,
            done,
            thread,
        }
    }

    /// The last sample (the default before the first).
    pub fn latest(&self) -> S {
        let samples = self.samples.lock().expect("samples");
        samples.last().cloned().unwrap_or_default()
    }

    /// Stop sampling; every sample taken, oldest first.
    pub fn stop(self) -> Vec<S> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler thread");
        let samples = self.samples.lock().expect("samples");
        samples.clone()
    }
}

/// What a cluster test that must keep every guarantee found.
pub struct Kept {
    /// The whole recorded history's linearizability.
    pub report: bakery_verify::linearizability::HistoryReport,
    /// The sequence ids' check.
    pub sequence: bakery_verify::checks::SequenceReport,
    /// Each counter's final value.
    pub values: Vec<u64>,
    /// The calls by outcome.
    pub counts: bakery_verify::workload::Counts,
    /// Typed errors of the counter and sequence clients.
    pub errors: (u64, u64),
    /// Sequence clients.
    pub sequence_clients: usize,
    /// The lock clients' check.
    pub locks: LockReport,
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "calls {} ({} put/get errors); history linearizable ({} ops, {} of unknown outcome); \
             {} sequence clients: {} ids, 0 duplicates, {} gaps, {} errors; counters {:?}; {}",
            self.counts,
            self.errors.0,
            self.report.ops(),
            self.report.unknown(),
            self.sequence_clients,
            self.sequence.ids,
            self.sequence.gaps,
            self.errors.1,
            self.values,
            self.locks
        )
    }
}

/// The end of a cluster test whose setup must keep every guarantee through
/// `fault`: record its report row, then assert that the history is
/// linearizable, no id was handed out twice (and some were, to three
/// clients or more), each counter holds every acknowledged increment and
/// at most the unknown ones more, and the lock clients (three or more) got
/// fenced writes accepted, no stale one, and no overlapping grants.
pub async fn assert_kept(
    row: (&str, &str, String),
    history: &History,
    mut observed: Observed,
    store: &dyn VersionedStore,
    keys: &[Key],
) -> Kept {
    let (backend, setup, fault) = row;
    let report = bakery_verify::linearizability::check(history);
    let sequence = bakery_verify::checks::check_sequence(&observed.ids);
    let values = read_counts(store, keys, Duration::from_secs(60)).await;
    let locks = observed.lock_report();
    super::report::FaultRow {
        suite: "cluster",
        backend: backend.into(),
        setup: setup.into(),
        fault: fault.clone(),
        counts: bakery_verify::workload::Counts::of(history),
        lost_acked: Some(lost_acked(history, keys, &values)),
        duplicate_ids: Some(sequence.duplicates),
        stale_accepted: Some(locks.stale_accepted()),
        sequence_clients: Some(observed.ids.len()),
        locks: Some((&locks).into()),
        verdict: format!(
            "{:?} ({} ops, {} unknown)",
            report.verdict(),
            report.ops(),
            report.unknown()
        ),
    }
    .record();
    let who = format!("cluster_{backend}");
    assert_eq!(
        report.verdict(),
        bakery_verify::linearizability::Verdict::Linearizable,
        "{who}: the history through {fault} is not linearizable:\n{report}"
    );
    assert!(
        sequence.passed(),
        "{who}: sequence ids through {fault}: {sequence:?}"
    );
    assert!(sequence.ids > 0, "{who}: no sequence id at all");
    assert!(
        observed.ids.len() >= 3 && observed.ids.iter().all(|ids| !ids.is_empty()),
        "{who}: want 3+ sequence clients, each with ids: {:?}",
        observed.ids.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert_counters(&who, history, keys, &values);
    locks.assert_kept(&who, 3);
    Kept {
        report,
        sequence,
        values,
        counts: bakery_verify::workload::Counts::of(history),
        errors: (observed.counter_errors, observed.sequence_errors),
        sequence_clients: observed.ids.len(),
        locks,
    }
}
