//! The workloads: concurrent clients on one store, recorded, then checked.
//! [`verify`] runs them all and returns a [`Report`].

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery_core::{DeleteOutcome, ErrorKind, Key, PutOutcome, Version, VersionedStore};
use bakery_recipes::fence::{FencedRead, FencedValue};
use bakery_recipes::lock::Lock;
use bakery_recipes::sequence::Sequence;
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::checks::{
    check_fence, check_fifo, check_sequence, FenceReport, FencedOp, FifoReport, LockRequest,
    SequenceReport,
};
use crate::history::{History, Outcome, RecordingStore};
use crate::linearizability::{check_operations, Verdict, DEFAULT_STEP_LIMIT};
use crate::VerifyError;

/// What the workloads do. Every count is per client; each workload also
/// stops after `duration`.
///
/// ```
/// use std::time::Duration;
/// use bakery_verify::Config;
///
/// let config = Config { clients: 8, keys: 1, duration: Duration::from_secs(30), ..Config::default() };
/// assert!(config.namespace.starts_with("verify-"));
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// Concurrent clients (default 4).
    pub clients: usize,
    /// Keys the CAS workload spreads over (default 3). Fewer keys, more
    /// contention.
    pub keys: usize,
    /// Longest time each workload runs (default 10 s).
    pub duration: Duration,
    /// Store calls per client in the CAS workload (default 500).
    pub cas_ops: u64,
    /// Ids per client in the sequence workload (default 1000).
    pub sequence_ids: u64,
    /// Ids per block reservation in the sequence workload (default 5):
    /// small, so clients contend on the row.
    pub block_size: u64,
    /// Lock acquisitions per client in the lock workload (default 20).
    pub lock_rounds: u64,
    /// The lock's lease (default 10 s).
    pub lease: Duration,
    /// Seed of the clients' choices (default 1).
    pub seed: u64,
    /// Prefix of every key and name written; unique per run by default,
    /// so runs never see each other's rows.
    pub namespace: String,
    /// Linearizability search steps allowed per key (default 1,000,000).
    pub step_limit: u64,
}

impl Default for Config {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Config {
            clients: 4,
            keys: 3,
            duration: Duration::from_secs(10),
            cas_ops: 500,
            sequence_ids: 1000,
            block_size: 5,
            lock_rounds: 20,
            lease: Duration::from_secs(10),
            seed: 1,
            namespace: format!("verify-{}-{nanos}", std::process::id()),
            step_limit: DEFAULT_STEP_LIMIT,
        }
    }
}

impl Config {
    fn check(&self) -> Result<(), VerifyError> {
        if self.clients == 0 || self.keys == 0 {
            return Err(VerifyError::Config(
                "clients and keys must be at least 1".into(),
            ));
        }
        bakery_core::validate_name(&self.namespace)?;
        Ok(())
    }
}

/// Calls that returned, failed without applying, or may have applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Returned a result.
    pub ok: u64,
    /// Failed without applying.
    pub failed: u64,
    /// Unknown outcome (or never completed).
    pub unknown: u64,
}

impl Counts {
    /// The counts of a recorded history.
    pub fn of(history: &History) -> Counts {
        let mut counts = Counts::default();
        for op in history.operations() {
            match op.outcome {
                Outcome::Ok { .. } => counts.ok += 1,
                Outcome::Fail { .. } => counts.failed += 1,
                Outcome::Pending | Outcome::Unknown { .. } => counts.unknown += 1,
            }
        }
        counts
    }

    fn note<T>(&mut self, result: &bakery_core::Result<T>) {
        match result {
            Ok(_) => self.ok += 1,
            Err(e) if e.kind() == ErrorKind::Unknown => self.unknown += 1,
            Err(_) => self.failed += 1,
        }
    }

    fn add(&mut self, other: Counts) {
        self.ok += other.ok;
        self.failed += other.failed;
        self.unknown += other.unknown;
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ok {} failed {} unknown {}",
            self.ok, self.failed, self.unknown
        )
    }
}

/// SplitMix64: small, seeded, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// Nanoseconds on one monotonic clock shared by a workload's clients.
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn ns(self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

async fn join_all<T>(tasks: Vec<JoinHandle<T>>) -> Result<Vec<T>, VerifyError> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.map_err(|e| VerifyError::Task(e.to_string()))?);
    }
    Ok(out)
}

/// A recorded CAS run: the history and its counts.
#[derive(Debug, Clone)]
pub struct CasRun {
    /// Every store call, as recorded.
    pub history: History,
    /// Its calls by outcome.
    pub counts: Counts,
}

/// `config.clients` clients doing random `get`s, read-modify-write puts
/// with the version they last saw (sometimes a deliberately stale one, and
/// creates of absent keys) and occasional deletes over `config.keys` keys,
/// every value written unique. Store errors are recorded, not returned.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::MemoryStore;
/// use bakery_verify::{linearizability, workload::{run_cas, Config}};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), bakery_verify::VerifyError> {
/// let config = Config { cas_ops: 20, ..Config::default() };
/// let run = run_cas(Arc::new(MemoryStore::new()), &config).await?;
/// assert_eq!(run.counts.ok, 80);
/// let report = linearizability::check(&run.history);
/// assert_eq!(report.verdict(), linearizability::Verdict::Linearizable);
/// # Ok(()) }
/// ```
pub async fn run_cas(
    store: Arc<dyn VersionedStore>,
    config: &Config,
) -> Result<CasRun, VerifyError> {
    config.check()?;
    let history = History::new();
    let keys: Arc<Vec<Key>> = Arc::new(
        (0..config.keys)
            .map(|i| Key::new(format!("{}/cas/{i}", config.namespace)))
            .collect::<bakery_core::Result<_>>()?,
    );
    let deadline = Instant::now() + config.duration;
    let tasks = (0..config.clients as u64)
        .map(|client| {
            let store = RecordingStore::new(store.clone(), history.clone(), client);
            let rng = Rng(config.seed ^ client.wrapping_mul(0xA24B_AED4_963E_E407));
            tokio::spawn(cas_client(
                store,
                keys.clone(),
                client,
                config.cas_ops,
                deadline,
                rng,
            ))
        })
        .collect();
    join_all(tasks).await?;
    let counts = Counts::of(&history);
    Ok(CasRun { history, counts })
}

async fn cas_client(
    store: RecordingStore,
    keys: Arc<Vec<Key>>,
    client: u64,
    ops: u64,
    deadline: Instant,
    mut rng: Rng,
) {
    // What this client last saw of each key: `None` = unsure, read first.
    let mut seen: Vec<Option<Option<Version>>> = vec![None; keys.len()];
    for n in 0..ops {
        if Instant::now() >= deadline {
            break;
        }
        let k = rng.below(keys.len() as u64) as usize;
        let (key, roll) = (&keys[k], rng.below(100));
        let known = seen[k];
        seen[k] = match known {
            Some(Some(version)) if (25..35).contains(&roll) => {
                match store.delete_if_version(key, version).await {
                    Ok(DeleteOutcome::Deleted) => Some(None),
                    Ok(DeleteOutcome::Conflict(row)) => Some(row.map(|r| r.version)),
                    Err(_) => None,
                }
            }
            Some(current) if roll >= 25 => {
                let expected = match (roll < 40, current) {
                    (false, current) => current,
                    (true, Some(v)) if v > 1 && rng.below(2) == 0 => Some(v - 1),
                    (true, Some(_)) => None,
                    (true, None) => Some(1 + rng.below(3)),
                };
                let value = format!("c{client}-{n}").into();
                match store.put_if_version(key, expected, value).await {
                    Ok(PutOutcome::Applied(row)) => Some(Some(row.version)),
                    Ok(PutOutcome::Conflict(row)) => Some(row.map(|r| r.version)),
                    Err(_) => None,
                }
            }
            _ => store.get(key).await.ok().map(|row| row.map(|r| r.version)),
        };
        // Let the other clients interleave, even on one thread.
        tokio::task::yield_now().await;
    }
}

/// A sequence run: the ids each client got, in order, and the verdict.
#[derive(Debug, Clone)]
pub struct SequenceRun {
    /// Per client, in the order received.
    pub ids: Vec<Vec<u64>>,
    /// `next()` calls by outcome.
    pub counts: Counts,
    /// The check of `ids`.
    pub report: SequenceReport,
}

/// `config.clients` [`Sequence`] handles on one name with small blocks,
/// each taking `config.sequence_ids` ids; then [`check_sequence`].
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::MemoryStore;
/// use bakery_verify::workload::{run_sequence, Config};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), bakery_verify::VerifyError> {
/// let config = Config { sequence_ids: 30, ..Config::default() };
/// let run = run_sequence(Arc::new(MemoryStore::new()), &config).await?;
/// assert!(run.report.passed());
/// assert_eq!(run.report.ids, 120);
/// # Ok(()) }
/// ```
pub async fn run_sequence(
    store: Arc<dyn VersionedStore>,
    config: &Config,
) -> Result<SequenceRun, VerifyError> {
    config.check()?;
    let name = format!("{}-seq", config.namespace);
    let deadline = Instant::now() + config.duration;
    let mut tasks = Vec::new();
    for client in 0..config.clients {
        let sequence = Sequence::builder(store.clone(), &name)
            .block_size(config.block_size)
            .node_id(format!("verify-{client}"))
            .build()?;
        let count = config.sequence_ids;
        tasks.push(tokio::spawn(async move {
            let (mut ids, mut counts) = (Vec::new(), Counts::default());
            for _ in 0..count {
                if Instant::now() >= deadline {
                    break;
                }
                let result = sequence.next().await;
                counts.note(&result);
                ids.extend(result.ok());
                tokio::task::yield_now().await;
            }
            (ids, counts)
        }));
    }
    let mut run = SequenceRun {
        ids: Vec::new(),
        counts: Counts::default(),
        report: SequenceReport::default(),
    };
    for (ids, counts) in join_all(tasks).await? {
        run.ids.push(ids);
        run.counts.add(counts);
    }
    run.report = check_sequence(&run.ids);
    Ok(run)
}

/// A lock run: the fenced calls, the requests, and both verdicts.
#[derive(Debug, Clone)]
pub struct LockRun {
    /// Every fenced call that returned (a raise of the fence or a write).
    pub fenced: Vec<FencedOp>,
    /// Every `acquire`, with when it was seen queued.
    pub requests: Vec<LockRequest>,
    /// True if some holder lost its lease (then FIFO is not judged).
    pub lease_expired: bool,
    /// Acquires, fenced calls and releases by outcome.
    pub counts: Counts,
    /// The check of `fenced`.
    pub fence: FenceReport,
    /// The check of `requests`.
    pub fifo: FifoReport,
}

/// `config.clients` clients taking the fair [`Lock`] `config.lock_rounds`
/// times each; each holder raises the fence of one [`FencedValue`] with its
/// token and writes through it (yielding in between, so others queue), and
/// every other round also writes with the token of its previous, released
/// grant (which the fence must refuse). An observer notes when each request
/// is seen waiting in the queue. Then [`check_fence`] and [`check_fifo`].
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::MemoryStore;
/// use bakery_verify::workload::{run_fenced_lock, Config};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), bakery_verify::VerifyError> {
/// let config = Config { clients: 2, lock_rounds: 3, ..Config::default() };
/// let run = run_fenced_lock(Arc::new(MemoryStore::new()), &config).await?;
/// assert!(run.fence.passed() && run.fifo.passed());
/// assert_eq!(run.requests.len(), 6);
/// # Ok(()) }
/// ```
pub async fn run_fenced_lock(
    store: Arc<dyn VersionedStore>,
    config: &Config,
) -> Result<LockRun, VerifyError> {
    config.check()?;
    let name = format!("{}-lock", config.namespace);
    let clock = Clock(Instant::now());
    let deadline = Instant::now() + config.duration;
    let stop = Arc::new(AtomicBool::new(false));
    let observer = tokio::spawn(observe_queue(
        store.clone(),
        name.clone(),
        clock,
        stop.clone(),
    ));
    let mut tasks = Vec::new();
    for client in 0..config.clients as u64 {
        let fence = FencedValue::new(store.clone(), &format!("{}-fence", config.namespace))?;
        let locks = (0..config.lock_rounds)
            .map(|round| {
                Lock::builder(store.clone(), &name)
                    .lease(config.lease)
                    .acquire_timeout(config.duration + config.lease)
                    .owner(format!("c{client}-r{round}"))
                    .build()
            })
            .collect::<bakery_core::Result<Vec<_>>>()?;
        tasks.push(tokio::spawn(lock_client(
            client, locks, fence, clock, deadline,
        )));
    }
    let results = join_all(tasks).await;
    stop.store(true, Ordering::Relaxed);
    let queued = join_all(vec![observer]).await?.pop().unwrap_or_default();
    let mut run = LockRun {
        fenced: Vec::new(),
        requests: Vec::new(),
        lease_expired: false,
        counts: Counts::default(),
        fence: FenceReport::default(),
        fifo: FifoReport::default(),
    };
    for client in results? {
        for (owner, mut request) in client.requests {
            request.queued_ns = queued.get(&owner).copied();
            run.requests.push(request);
        }
        run.fenced.extend(client.fenced);
        run.lease_expired |= client.lease_expired;
        run.counts.add(client.counts);
    }
    run.fence = check_fence(&run.fenced);
    run.fifo = check_fifo(&run.requests);
    Ok(run)
}

/// First time each waiter (by owner) was seen in the lock's queue.
async fn observe_queue(
    store: Arc<dyn VersionedStore>,
    name: String,
    clock: Clock,
    stop: Arc<AtomicBool>,
) -> HashMap<String, u64> {
    let mut first_seen = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        if let Ok(Some(state)) = Lock::inspect(&*store, &name).await {
            let now = clock.ns();
            for waiter in state.queue {
                first_seen.entry(waiter.owner.to_string()).or_insert(now);
            }
        }
        tokio::task::yield_now().await;
    }
    first_seen
}

#[derive(Default)]
struct LockClient {
    requests: Vec<(String, LockRequest)>,
    fenced: Vec<FencedOp>,
    lease_expired: bool,
    counts: Counts,
}

async fn lock_client(
    client: u64,
    locks: Vec<Lock>,
    fence: FencedValue,
    clock: Clock,
    deadline: Instant,
) -> LockClient {
    let mut out = LockClient::default();
    let mut previous = None;
    for (round, lock) in locks.into_iter().enumerate() {
        if Instant::now() >= deadline {
            break;
        }
        let owner = format!("c{client}-r{round}");
        let invoked_ns = clock.ns();
        let guard = lock.acquire().await;
        out.counts.note(&guard);
        let token = guard.as_ref().ok().map(|g| g.token());
        let request = LockRequest {
            client,
            invoked_ns,
            queued_ns: None,
            token,
        };
        out.requests.push((owner, request));
        let (Ok(guard), Some(token)) = (guard, token) else {
            continue;
        };
        let mut record = |token, invoked_ns, result: bakery_core::Result<bool>| {
            out.counts.note(&result);
            if let Ok(accepted) = result {
                let completed_ns = clock.ns();
                out.fenced.push(FencedOp {
                    client,
                    token,
                    accepted,
                    invoked_ns,
                    completed_ns,
                });
            }
        };
        let data = format!("c{client}-r{round}");
        let t = clock.ns();
        let raised = fence.read_fenced(token).await;
        record(
            token,
            t,
            raised.map(|r| matches!(r, FencedRead::Current(_))),
        );
        tokio::task::yield_now().await;
        if let Some(stale) = previous.filter(|_| round % 2 == 1) {
            // A released grant's token, after a newer one raised the fence.
            let t = clock.ns();
            let written = fence.write(stale, format!("{data}-stale").into()).await;
            record(stale, t, written.map(|w| w.is_accepted()));
        }
        let t = clock.ns();
        let written = fence.write(token, data.into()).await;
        record(token, t, written.map(|w| w.is_accepted()));
        tokio::task::yield_now().await;
        let expired = !guard.is_held();
        let released = guard.release().await;
        previous = Some(token);
        out.lease_expired |= expired || matches!(&released, Err(e) if e.kind() == ErrorKind::Lost);
        out.counts.note(&released);
        tokio::task::yield_now().await;
    }
    out
}

/// A check's result in a [`Report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The guarantee held.
    Pass,
    /// The guarantee was broken: see the excerpt.
    Fail,
    /// The check could not decide (search limit): not a pass.
    Inconclusive,
    /// Not judged (FIFO order after a lease expired).
    Skipped,
}

/// One check of a [`Report`].
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// `cas-linearizability`, `sequence`, `fenced-writes` or `lock-fifo`.
    pub name: String,
    /// The workload's calls by outcome.
    pub counts: Counts,
    /// The verdict.
    pub status: Status,
    /// The check's figures, in one line.
    pub summary: String,
    /// When it did not pass: what went wrong, line by line.
    pub excerpt: Vec<String>,
}

impl CheckReport {
    fn new(
        name: &str,
        counts: Counts,
        passed: bool,
        summary: String,
        excerpt: Vec<String>,
    ) -> Self {
        CheckReport {
            name: name.into(),
            counts,
            status: if passed { Status::Pass } else { Status::Fail },
            summary,
            excerpt: if passed { Vec::new() } else { excerpt },
        }
    }
}

/// What [`verify`] found: one [`CheckReport`] per check.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The store's backend name.
    pub backend: String,
    /// The prefix of every key and name the run wrote.
    pub namespace: String,
    /// The checks, in the order run.
    pub checks: Vec<CheckReport>,
    /// The CAS workload's full history (write it out when a check failed:
    /// [`History::to_json`]); not serialised with the report.
    #[serde(skip)]
    pub history: History,
}

impl Report {
    /// True when every check passed (or was skipped).
    pub fn passed(&self) -> bool {
        self.checks
            .iter()
            .all(|c| matches!(c.status, Status::Pass | Status::Skipped))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        writeln!(f, "{verdict}: {} ({})", self.backend, self.namespace)?;
        for check in &self.checks {
            writeln!(
                f,
                "  {:<20} {:<12} {}; {}",
                check.name,
                format!("{:?}", check.status).to_lowercase(),
                check.counts,
                check.summary
            )?;
            for line in &check.excerpt {
                writeln!(f, "    {line}")?;
            }
        }
        Ok(())
    }
}

/// The names of [`verify`]'s checks, in the order its [`Report`] lists them.
///
/// ```
/// assert_eq!(bakery_verify::CHECKS[0], "cas-linearizability");
/// ```
pub const CHECKS: [&str; 4] = [
    "cas-linearizability",
    "sequence",
    "fenced-writes",
    "lock-fifo",
];

/// Run the three workloads on `store` and check them: CAS
/// linearizability, sequence ids, fenced writes and lock FIFO order. Store
/// errors are part of the result; only a bad `config` or a crashed client
/// task is an error.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::MemoryStore;
/// use bakery_verify::{verify, Config, Status};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), bakery_verify::VerifyError> {
/// let config = Config { cas_ops: 30, sequence_ids: 30, lock_rounds: 2, ..Config::default() };
/// let report = verify(Arc::new(MemoryStore::new()), &config).await?;
/// assert!(report.checks.iter().all(|c| c.status == Status::Pass), "{report}");
/// let json = serde_json::to_string(&report).unwrap();
/// assert!(json.contains(r#""name":"cas-linearizability""#));
/// # Ok(()) }
/// ```
pub async fn verify(
    store: Arc<dyn VersionedStore>,
    config: &Config,
) -> Result<Report, VerifyError> {
    config.check()?;
    let cas = run_cas(store.clone(), config).await?;
    let lin = check_operations(&cas.history.operations(), config.step_limit);
    let seq = run_sequence(store.clone(), config).await?;
    let lock = run_fenced_lock(store.clone(), config).await?;

    let mut cas_check = CheckReport::new(
        CHECKS[0],
        cas.counts,
        lin.verdict() == Verdict::Linearizable,
        format!(
            "{}: {} keys, {} ops checked ({} unknown)",
            match lin.verdict() {
                Verdict::Linearizable => "linearizable",
                Verdict::NotLinearizable => "NOT linearizable",
                Verdict::Inconclusive => "inconclusive",
            },
            lin.keys.len(),
            lin.ops(),
            lin.unknown()
        ),
        lin.to_string().lines().skip(1).map(str::to_owned).collect(),
    );
    if lin.verdict() == Verdict::Inconclusive {
        cas_check.status = Status::Inconclusive;
    }
    let s = &seq.report;
    let seq_check = CheckReport::new(
        CHECKS[1],
        seq.counts,
        s.passed(),
        format!(
            "{} ids, {} duplicates, {} non-increasing, {} gaps",
            s.ids, s.duplicates, s.non_increasing, s.gaps
        ),
        s.examples.clone(),
    );
    let fe = &lock.fence;
    let fence_check = CheckReport::new(
        CHECKS[2],
        lock.counts,
        fe.passed(),
        format!(
            "{} accepted, {} rejected, {} stale accepted, {} overlapping sections",
            fe.accepted, fe.rejected, fe.stale_accepted, fe.overlapping_sections
        ),
        fe.examples.clone(),
    );
    let fi = &lock.fifo;
    let mut fifo_check = CheckReport::new(
        CHECKS[3],
        lock.counts,
        fi.passed(),
        format!(
            "{} requests, {} ordered pairs, {} violations",
            fi.requests, fi.ordered_pairs, fi.violations
        ),
        fi.examples.clone(),
    );
    if lock.lease_expired {
        fifo_check.status = Status::Skipped;
        fifo_check.summary.push_str("; not judged: a lease expired");
    }
    Ok(Report {
        backend: store.backend().into(),
        namespace: config.namespace.clone(),
        checks: vec![cas_check, seq_check, fence_check, fifo_check],
        history: cas.history,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bakery_core::MemoryStore;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verify_passes_on_the_reference_store() {
        let config = Config {
            cas_ops: 100,
            sequence_ids: 200,
            lock_rounds: 6,
            ..Config::default()
        };
        let report = verify(Arc::new(MemoryStore::new()), &config).await.unwrap();
        assert!(report.passed(), "{report}");
        let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
        let expected = "cas-linearizability sequence fenced-writes lock-fifo";
        assert_eq!(names.join(" "), expected);
        assert_eq!(report.checks[0].counts.ok, 400);
        assert_eq!(report.checks[1].counts.ok, 800);
        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert_eq!(json["checks"][0]["status"], "pass");
    }

    /// On one thread the schedule is fixed: holders yield inside their
    /// critical section, so others queue, and the stale writes are refused.
    #[tokio::test]
    async fn the_lock_workload_sees_queueing_and_refused_stale_tokens() {
        let config = Config {
            clients: 3,
            lock_rounds: 6,
            ..Config::default()
        };
        let run = run_fenced_lock(Arc::new(MemoryStore::new()), &config)
            .await
            .unwrap();
        assert!(run.fence.passed() && run.fifo.passed(), "{run:?}");
        assert_eq!(run.fence.rejected, 9, "{:?}", run.fence);
        assert!(run.fifo.ordered_pairs > 0, "{:?}", run.fifo);
        assert!(!run.lease_expired);
        let tokens: Vec<_> = run.requests.iter().filter_map(|r| r.token).collect();
        assert_eq!(tokens.len(), 18);
    }

    #[tokio::test]
    async fn the_same_seed_makes_the_same_choices() {
        let config = Config {
            clients: 1,
            cas_ops: 50,
            ..Config::default()
        };
        let calls = |run: CasRun| -> Vec<String> {
            let ops = run.history.operations();
            ops.into_iter().map(|op| format!("{:?}", op.call)).collect()
        };
        let a = run_cas(Arc::new(MemoryStore::new()), &config)
            .await
            .unwrap();
        let b = run_cas(Arc::new(MemoryStore::new()), &config)
            .await
            .unwrap();
        assert_eq!(calls(a), calls(b));
    }

    #[tokio::test]
    async fn a_bad_config_is_a_typed_error() {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        let no_clients = Config {
            clients: 0,
            ..Config::default()
        };
        let err = verify(store.clone(), &no_clients).await.unwrap_err();
        assert!(matches!(err, VerifyError::Config(_)), "{err}");
        let bad_name = Config {
            namespace: "has space".into(),
            ..Config::default()
        };
        let err = run_cas(store, &bad_name).await.unwrap_err();
        assert!(matches!(err, VerifyError::Store(_)), "{err}");
    }
}
