//! The `Processes` topology: recipe clients in separate OS processes, each
//! with its own store, as users run them.
//!
//! In one process the clients of a recipe share its per-process machinery
//! (one writer and one listener per row), so they never conflict; only
//! clients in different processes exercise the conflicts between them.
//! Each case here spawns children of the current executable, each opening
//! its own store on the same URI and running one client of a recipe for a
//! few rounds, logging every grant (with times from the machine's
//! `CLOCK_MONOTONIC`, which all processes share) and every id. The parent
//! then checks the logs:
//!
//! - lock: a plain file counter, read and written inside the critical
//!   section with no fencing, equals the number of grants; no two grants
//!   overlap; every grant's fenced write was accepted;
//! - read-write lock: a writer overlaps nobody (its counter is exact too);
//! - semaphore: at most `permits` holders at any instant;
//! - election: one leader at a time;
//! - tokens (terms) never repeat, and a grant that began after another
//!   ended has the larger token — for exclusive grants, strictly increasing
//!   in grant order;
//! - sequence: every id distinct across processes, increasing within each;
//! - every child exited 0 within [`CHILD_LIMIT`].
//!
//! The test binary's `main` must call [`child_main`] first: a child is the
//! same executable started with [`ROLE_VAR`] set.

use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery_core::VersionedStore;
use bakery_recipes::election::Election;
use bakery_recipes::fence::FencedValue;
use bakery_recipes::lock::Lock;
use bakery_recipes::rwlock::RwLock;
use bakery_recipes::semaphore::Semaphore;
use bakery_recipes::sequence::Sequence;

use crate::support;

/// The environment variable that makes a process a child of a case: its
/// role (`lock`, `sequence`, …). Set only by the parent of a case.
pub const ROLE_VAR: &str = "BAKERY_PROCESS_ROLE";
const URI_VAR: &str = "BAKERY_PROCESS_URI";
const DIR_VAR: &str = "BAKERY_PROCESS_DIR";
const NAME_VAR: &str = "BAKERY_PROCESS_NAME";
const INDEX_VAR: &str = "BAKERY_PROCESS_INDEX";
const PROCESSES_VAR: &str = "BAKERY_PROCESS_PROCESSES";
const ROUNDS_VAR: &str = "BAKERY_PROCESS_ROUNDS";
const PERMITS_VAR: &str = "BAKERY_PROCESS_PERMITS";

/// A hang guard, not a speed limit: a case whose children have not all
/// exited by then is stuck; they are killed and the case fails.
pub const CHILD_LIMIT: Duration = Duration::from_secs(240);

/// Lease of every grant: long enough that a holder starved of CPU on a
/// loaded machine is never evicted (eviction is not what these cases test).
const LEASE: Duration = Duration::from_secs(10);

/// How long a child waits for one grant before it fails.
const WAIT: Duration = Duration::from_secs(120);

/// How long a holder keeps its grant: long enough for the other processes'
/// requests to arrive while it holds.
const HOLD: Duration = Duration::from_millis(3);

/// Ids per reservation of the sequence clients: small, so that the
/// processes' reservations interleave many times.
const SEQUENCE_BLOCK: u64 = 20;

/// What a child does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `Sequence::next`, logging each id.
    Sequence,
    /// The fair lock: the file counter and a fenced write per grant.
    Lock,
    /// The lock client's critical section without taking the lock: the
    /// negative control, whose logs must fail the lock's checks.
    Unlocked,
    /// A semaphore permit, held briefly.
    Semaphore,
    /// The read-write lock: a writer every third round (it bumps the file
    /// counter), a reader otherwise.
    RwLock,
    /// An election candidate: campaign, lead briefly, resign.
    Election,
}

impl Role {
    const ALL: [Role; 6] = [
        Role::Sequence,
        Role::Lock,
        Role::Unlocked,
        Role::Semaphore,
        Role::RwLock,
        Role::Election,
    ];

    fn name(self) -> &'static str {
        match self {
            Role::Sequence => "sequence",
            Role::Lock => "lock",
            Role::Unlocked => "unlocked",
            Role::Semaphore => "semaphore",
            Role::RwLock => "rwlock",
            Role::Election => "election",
        }
    }

    fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.name() == name)
    }
}

/// The kind of a logged grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lock,
    Permit,
    Read,
    Write,
    Leader,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Lock,
        Kind::Permit,
        Kind::Read,
        Kind::Write,
        Kind::Leader,
    ];

    /// Held by one client at a time.
    fn is_exclusive(self) -> bool {
        matches!(self, Kind::Lock | Kind::Write | Kind::Leader)
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Permit => "permit",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Leader => "leader",
        }
    }
}

/// One grant as a child saw it: `start` after the grant returned, `end`
/// before the release was sent, in nanoseconds of `CLOCK_MONOTONIC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grant {
    process: usize,
    kind: Kind,
    token: u64,
    start: u64,
    end: u64,
}

/// The machine's monotonic clock, the same in every process (an `Instant`
/// cannot be compared across processes).
fn now_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => {
            let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
            let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
            secs * 1_000_000_000 + nanos
        }
        Err(e) => panic!("CLOCK_MONOTONIC: {e}"),
    }
}

// ---------------------------------------------------------------- children

type ChildError = Box<dyn std::error::Error + Send + Sync>;

/// What a child was told by its parent.
#[derive(Debug)]
struct ChildSpec {
    role: Role,
    uri: String,
    dir: PathBuf,
    name: String,
    index: usize,
    processes: usize,
    rounds: usize,
    permits: u32,
}

impl ChildSpec {
    fn from_env(role: &str) -> Result<ChildSpec, ChildError> {
        fn var(name: &str) -> Result<String, ChildError> {
            std::env::var(name).map_err(|e| format!("{name}: {e}").into())
        }
        fn number<T: std::str::FromStr>(name: &str) -> Result<T, ChildError>
        where
            T::Err: fmt::Display,
        {
            let text = var(name)?;
            text.parse()
                .map_err(|e| format!("{name}={text:?} is not a number: {e}").into())
        }
        Ok(ChildSpec {
            role: Role::parse(role).ok_or_else(|| format!("{ROLE_VAR}={role:?}: no such role"))?,
            uri: var(URI_VAR)?,
            dir: PathBuf::from(var(DIR_VAR)?),
            name: var(NAME_VAR)?,
            index: number(INDEX_VAR)?,
            processes: number(PROCESSES_VAR)?,
            rounds: number(ROUNDS_VAR)?,
            permits: number(PERMITS_VAR)?,
        })
    }
}

/// The child side of every case: if [`ROLE_VAR`] is set, this process is a
/// child — open the store with `open(uri)`, run the role, and return the
/// exit code (0: the role ran to its end; otherwise the reason is on
/// stderr). Returns `None` in any other process, which goes on as usual.
///
/// Call it first in the `main` of the test binary whose cases spawn the
/// children (they run `std::env::current_exe()`):
///
/// ```no_run
/// use std::sync::Arc;
/// use bakery_core::{MemoryStore, VersionedStore};
///
/// // First thing in `main` (the conformance runner opens with `bakery::connect`):
/// let open = |_uri: String| async move {
///     Ok(Arc::new(MemoryStore::new()) as Arc<dyn VersionedStore>)
/// };
/// if let Some(code) = bakery_testkit::processes::child_main(open) {
///     std::process::exit(code);
/// }
/// // … the test runner …
/// ```
pub fn child_main<F, Fut>(open: F) -> Option<i32>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = bakery_core::Result<Arc<dyn VersionedStore>>>,
{
    let role = std::env::var(ROLE_VAR).ok()?;
    let ran = ChildSpec::from_env(&role).and_then(|spec| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        runtime.block_on(async move {
            let store = open(spec.uri.clone()).await?;
            run_role(&spec, store).await
        })
    });
    Some(match ran {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bakery process child {role}: {e}");
            1
        }
    })
}

/// A child's log: one line per grant or id, written to its own file.
struct ChildLog(BufWriter<File>);

impl ChildLog {
    fn create(spec: &ChildSpec) -> std::io::Result<ChildLog> {
        Ok(ChildLog(BufWriter::new(File::create(log_path(
            &spec.dir, spec.index,
        ))?)))
    }

    fn grant(&mut self, kind: Kind, token: u64, start: u64, end: u64) -> std::io::Result<()> {
        writeln!(self.0, "grant {} {token} {start} {end}", kind.name())
    }

    fn id(&mut self, id: u64) -> std::io::Result<()> {
        writeln!(self.0, "id {id}")
    }
}

fn log_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("log-{index}"))
}

fn counter_path(dir: &Path) -> PathBuf {
    dir.join("counter")
}

fn stderr_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("stderr-{index}"))
}

/// Start together, so that the processes really contend: mark this one
/// ready, then wait until every one is.
async fn all_ready(spec: &ChildSpec) -> Result<(), ChildError> {
    File::create(spec.dir.join(format!("ready-{}", spec.index)))?;
    let deadline = Instant::now() + WAIT;
    loop {
        let ready = (0..spec.processes)
            .filter(|i| spec.dir.join(format!("ready-{i}")).exists())
            .count();
        if ready == spec.processes {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("only {ready} of {} processes started", spec.processes).into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Read, pause, write back one more: the classic lost update unless only
/// one process at a time runs it.
async fn bump_counter(path: &Path) -> Result<(), ChildError> {
    let text = std::fs::read_to_string(path)?;
    let n: u64 = text
        .trim()
        .parse()
        .map_err(|e| format!("counter file holds {text:?}: {e}"))?;
    tokio::time::sleep(HOLD).await;
    std::fs::write(path, (n + 1).to_string())?;
    Ok(())
}

/// The times (`now_ns`) `section` ran from and to.
async fn timed(
    section: impl Future<Output = Result<(), ChildError>>,
) -> Result<(u64, u64), ChildError> {
    let start = now_ns();
    section.await?;
    Ok((start, now_ns()))
}

/// Run `section` under `grant` (from after the grant to before the
/// release), release it, and log it as a grant of `kind`.
async fn hold(
    log: &mut ChildLog,
    kind: Kind,
    grant: impl support::Grant,
    section: impl Future<Output = Result<(), ChildError>>,
) -> Result<(), ChildError> {
    let (start, end) = timed(section).await?;
    let token = grant.token();
    grant.release().await?;
    log.grant(kind, token, start, end)?;
    Ok(())
}

/// What a holder that only holds does.
async fn pause() -> Result<(), ChildError> {
    tokio::time::sleep(HOLD).await;
    Ok(())
}

/// Once every process is ready, take `spec.rounds` grants of `kind` with
/// `take`, each held for a pause.
async fn hold_rounds<G, F>(
    spec: &ChildSpec,
    log: &mut ChildLog,
    kind: Kind,
    take: impl Fn() -> F,
) -> Result<(), ChildError>
where
    G: support::Grant,
    F: Future<Output = bakery_core::Result<G>>,
{
    all_ready(spec).await?;
    for _ in 0..spec.rounds {
        let grant = take().await?;
        hold(log, kind, grant, pause()).await?;
    }
    Ok(())
}

async fn run_role(spec: &ChildSpec, store: Arc<dyn VersionedStore>) -> Result<(), ChildError> {
    let mut log = ChildLog::create(spec)?;
    let counter = counter_path(&spec.dir);
    match spec.role {
        Role::Sequence => {
            let sequence = Sequence::builder(store, &spec.name)
                .block_size(SEQUENCE_BLOCK)
                .build()?;
            all_ready(spec).await?;
            for _ in 0..spec.rounds {
                log.id(sequence.next().await?)?;
            }
        }
        Role::Lock => {
            let lock = Lock::builder(store.clone(), &spec.name)
                .lease(LEASE)
                .acquire_timeout(WAIT)
                .build()?;
            let fence = FencedValue::new(store, &spec.name)?;
            all_ready(spec).await?;
            for round in 0..spec.rounds {
                let guard = lock.acquire().await?;
                let token = guard.token();
                let section = async {
                    bump_counter(&counter).await?;
                    let data = format!("{}/{round}", spec.index);
                    let written = fence.write(token, data.into()).await?;
                    if !written.is_accepted() {
                        return Err(format!(
                            "the fenced write of token {token} was refused: {written:?}"
                        )
                        .into());
                    }
                    Ok(())
                };
                hold(&mut log, Kind::Lock, guard, section).await?;
            }
        }
        Role::Unlocked => {
            all_ready(spec).await?;
            for round in 0..spec.rounds {
                let (start, end) = timed(bump_counter(&counter)).await?;
                log.grant(Kind::Lock, round as u64 + 1, start, end)?;
            }
        }
        Role::Semaphore => {
            let semaphore = Semaphore::builder(store, &spec.name)
                .permits(spec.permits)
                .lease(LEASE)
                .acquire_timeout(WAIT)
                .build()?;
            hold_rounds(spec, &mut log, Kind::Permit, || semaphore.acquire()).await?;
        }
        Role::RwLock => {
            let rwlock = RwLock::builder(store, &spec.name)
                .lease(LEASE)
                .acquire_timeout(WAIT)
                .build()?;
            all_ready(spec).await?;
            for round in 0..spec.rounds {
                if (spec.index + round).is_multiple_of(3) {
                    let guard = rwlock.write().await?;
                    hold(&mut log, Kind::Write, guard, bump_counter(&counter)).await?;
                } else {
                    let guard = rwlock.read().await?;
                    hold(&mut log, Kind::Read, guard, pause()).await?;
                }
            }
        }
        Role::Election => {
            let election = Election::builder(store, &spec.name)
                .value(format!("process-{}", spec.index))
                .lease(LEASE)
                .campaign_timeout(WAIT)
                .build()?;
            hold_rounds(spec, &mut log, Kind::Leader, || election.campaign()).await?;
        }
    }
    log.0.flush()?;
    Ok(())
}

// ----------------------------------------------------------------- parents

/// One case of the `Processes` topology: children of the current
/// executable (which must call [`child_main`] first) on one target.
#[derive(Clone, Copy)]
pub struct ProcessCase {
    /// Stable name, e.g. `lock_four_processes`.
    pub name: &'static str,
    /// Runs the case on `(backend label, URI)`; `Err` says what broke.
    /// Prints one summary line (figures for the docs) on stderr.
    pub run: fn(&str, &str) -> Result<(), String>,
}

impl fmt::Debug for ProcessCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The case `$name` runs [`run_case`] with `$spec` (`run` is a plain fn
/// pointer: no closure may capture the spec).
macro_rules! process_case {
    ($name:literal, $spec:ident) => {
        ProcessCase {
            name: $name,
            run: |backend, uri| run_case(backend, uri, &$spec),
        }
    };
}

/// The cases every shared backend runs in separate processes (not
/// `MemoryStore`: it lives in one process).
///
/// ```no_run
/// // In a test binary whose main calls `child_main` first:
/// for case in bakery_testkit::processes::cases() {
///     (case.run)("sqlite", "sqlite:///tmp/shared.db").expect("no violation");
/// }
/// ```
pub fn cases() -> Vec<ProcessCase> {
    vec![
        process_case!("sequence_four_processes", SEQUENCE),
        process_case!("lock_four_processes", LOCK),
        process_case!("semaphore_five_processes_two_permits", SEMAPHORE),
        process_case!("rwlock_four_processes", RWLOCK),
        process_case!("election_three_candidates", ELECTION),
    ]
}

/// The negative control of the lock's checks: four processes run the lock
/// client's critical section WITHOUT the lock; the case passes only if the
/// checks find the violations (overlapping grants, lost counter updates,
/// repeated tokens). Needs no backend: the store the children open is
/// never used.
///
/// ```no_run
/// bakery_testkit::processes::unlocked_clients_are_caught("sqlite:///tmp/x.db")
///     .expect("the checks caught the unlocked clients");
/// ```
pub fn unlocked_clients_are_caught(uri: &str) -> Result<(), String> {
    let spec = CaseSpec {
        role: Role::Unlocked,
        ..LOCK
    };
    let outcome = run_children(uri, &spec)?;
    let violations = check(&spec, &outcome);
    if violations.is_empty() {
        return Err("four unlocked processes showed no violation: the checks prove nothing".into());
    }
    let overlap = violations.iter().any(|v| v.contains("overlap"));
    let counter = violations.iter().any(|v| v.contains("counter"));
    if !(overlap && counter) {
        return Err(format!(
            "unlocked processes must show overlapping grants and a lost counter update, got: {violations:#?}"
        ));
    }
    eprintln!(
        "processes: negative control (no lock), {} processes: {} violations found",
        spec.processes,
        violations.len()
    );
    Ok(())
}

/// The shape of one case.
#[derive(Debug, Clone, Copy)]
struct CaseSpec {
    role: Role,
    processes: usize,
    rounds: usize,
    /// Semaphore permits (ignored by the other roles).
    permits: u32,
}

impl CaseSpec {
    /// `processes` children of `role`, `rounds` each (one permit: only a
    /// semaphore's spec sets more).
    const fn of(role: Role, processes: usize, rounds: usize) -> CaseSpec {
        CaseSpec {
            role,
            processes,
            rounds,
            permits: 1,
        }
    }
}

const SEQUENCE: CaseSpec = CaseSpec::of(Role::Sequence, 4, 2_000);
const LOCK: CaseSpec = CaseSpec::of(Role::Lock, 4, 15);
const SEMAPHORE: CaseSpec = CaseSpec {
    permits: 2,
    ..CaseSpec::of(Role::Semaphore, 5, 8)
};
const RWLOCK: CaseSpec = CaseSpec::of(Role::RwLock, 4, 12);
const ELECTION: CaseSpec = CaseSpec::of(Role::Election, 3, 3);

/// What the children left: each one's log, and the file counter.
#[derive(Debug, Default)]
struct Outcome {
    grants: Vec<Grant>,
    /// The ids of each process, in the order it got them.
    ids: Vec<Vec<u64>>,
    counter: u64,
    /// Children that did not exit 0: (index, status, stderr).
    failed: Vec<(usize, String, String)>,
}

fn run_case(backend: &str, uri: &str, spec: &CaseSpec) -> Result<(), String> {
    let outcome = run_children(uri, spec)?;
    let violations = check(spec, &outcome);
    let ids: usize = outcome.ids.iter().map(Vec::len).sum();
    eprintln!(
        "processes: {backend} {}: {} processes, {} grants, {ids} ids, {} tokens checked, {} violations",
        spec.role.name(),
        spec.processes,
        outcome.grants.len(),
        outcome.grants.len(),
        violations.len()
    );
    if violations.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} processes on {backend}: {} violations:\n{}",
            spec.processes,
            violations.len(),
            violations.join("\n")
        ))
    }
}

/// Spawn the children of `spec` on `uri`, wait for them (killing them all
/// past [`CHILD_LIMIT`]), and read what they left.
fn run_children(uri: &str, spec: &CaseSpec) -> Result<Outcome, String> {
    let dir = std::env::temp_dir().join(crate::unique_ident("bakery_processes"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::write(counter_path(&dir), "0").map_err(|e| format!("counter file: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| format!("current executable: {e}"))?;
    let name = crate::unique_name(spec.role.name());
    let mut children = Vec::new();
    for index in 0..spec.processes {
        let stderr =
            File::create(stderr_path(&dir, index)).map_err(|e| format!("stderr file: {e}"))?;
        let child = Command::new(&exe)
            .env(ROLE_VAR, spec.role.name())
            .env(URI_VAR, uri)
            .env(DIR_VAR, &dir)
            .env(NAME_VAR, &name)
            .env(INDEX_VAR, index.to_string())
            .env(PROCESSES_VAR, spec.processes.to_string())
            .env(ROUNDS_VAR, spec.rounds.to_string())
            .env(PERMITS_VAR, spec.permits.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn();
        match child {
            Ok(child) => children.push(child),
            Err(e) => {
                kill_all(&mut children);
                return Err(format!("spawning {}: {e}", exe.display()));
            }
        }
    }
    let statuses = wait_all(&mut children, CHILD_LIMIT);
    let mut outcome = Outcome::default();
    for (index, status) in statuses.into_iter().enumerate() {
        let ok = status.as_ref().is_ok_and(ExitStatus::success);
        if !ok {
            let status = match status {
                Ok(status) => status.to_string(),
                Err(why) => why,
            };
            let stderr = std::fs::read_to_string(stderr_path(&dir, index)).unwrap_or_default();
            outcome.failed.push((index, status, stderr));
        }
        let log = std::fs::read_to_string(log_path(&dir, index)).unwrap_or_default();
        let ids = parse_log(index, &log, &mut outcome.grants)?;
        outcome.ids.push(ids);
    }
    let counter =
        std::fs::read_to_string(counter_path(&dir)).map_err(|e| format!("counter: {e}"))?;
    outcome.counter = counter
        .trim()
        .parse()
        .map_err(|e| format!("the counter file holds {counter:?}: {e}"))?;
    // Kept only when something is wrong, for a look at the logs.
    if outcome.failed.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(outcome)
}

/// Wait for every child, up to `limit` in all; then kill the rest. Each
/// child's status, or why it has none.
fn wait_all(children: &mut [Child], limit: Duration) -> Vec<Result<ExitStatus, String>> {
    let deadline = Instant::now() + limit;
    let mut statuses: Vec<Option<Result<ExitStatus, String>>> = vec![None; children.len()];
    while statuses.iter().any(Option::is_none) {
        for (child, status) in children.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none() {
                match child.try_wait() {
                    Ok(Some(exit)) => *status = Some(Ok(exit)),
                    Ok(None) => {}
                    Err(e) => *status = Some(Err(format!("wait: {e}"))),
                }
            }
        }
        if Instant::now() > deadline {
            for (child, status) in children.iter_mut().zip(statuses.iter_mut()) {
                if status.is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                    *status = Some(Err(format!("still running after {limit:?}: killed")));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    statuses.into_iter().flatten().collect()
}

fn kill_all(children: &mut [Child]) {
    for child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Parse one child's log: its grants go to `grants`; returns its ids.
fn parse_log(process: usize, log: &str, grants: &mut Vec<Grant>) -> Result<Vec<u64>, String> {
    let mut ids = Vec::new();
    for line in log.lines() {
        let bad = || format!("process {process}: bad log line {line:?}");
        let fields: Vec<&str> = line.split_whitespace().collect();
        let number = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .ok_or_else(bad)
        };
        match fields.first() {
            Some(&"id") => ids.push(number(1)?),
            Some(&"grant") => {
                let kind = Kind::ALL
                    .into_iter()
                    .find(|k| fields.get(1) == Some(&k.name()))
                    .ok_or_else(bad)?;
                grants.push(Grant {
                    process,
                    kind,
                    token: number(2)?,
                    start: number(3)?,
                    end: number(4)?,
                });
            }
            _ => return Err(bad()),
        }
    }
    Ok(ids)
}

// ------------------------------------------------------------------ checks

/// Every violation of the case's properties in what its children left.
fn check(spec: &CaseSpec, outcome: &Outcome) -> Vec<String> {
    let mut violations: Vec<String> = outcome
        .failed
        .iter()
        .map(|(index, status, stderr)| format!("process {index} failed ({status}): {stderr}"))
        .collect();
    let rounds = spec.processes * spec.rounds;
    let ids: usize = outcome.ids.iter().map(Vec::len).sum();
    let expected = match spec.role {
        Role::Sequence => (0, rounds),
        _ => (rounds, 0),
    };
    if (outcome.grants.len(), ids) != expected {
        violations.push(format!(
            "expected (grants, ids) = {expected:?}, the logs hold ({}, {ids})",
            outcome.grants.len()
        ));
    }
    match spec.role {
        Role::Sequence => violations.extend(ids_distinct_and_increasing(&outcome.ids)),
        Role::Lock | Role::Unlocked | Role::Election => {
            violations.extend(at_most_holders(&outcome.grants, 1));
        }
        Role::Semaphore => {
            violations.extend(at_most_holders(&outcome.grants, spec.permits as usize));
        }
        Role::RwLock => violations.extend(writers_overlap_nobody(&outcome.grants)),
    }
    violations.extend(tokens_follow_grant_order(&outcome.grants));
    let bumps = match spec.role {
        Role::Lock | Role::Unlocked => Some(Kind::Lock),
        Role::RwLock => Some(Kind::Write),
        _ => None,
    };
    if let Some(kind) = bumps {
        let grants = outcome.grants.iter().filter(|g| g.kind == kind).count() as u64;
        if outcome.counter != grants {
            violations.push(format!(
                "the file counter is {} after {grants} {} grants: updates were lost",
                outcome.counter,
                kind.name()
            ));
        }
    }
    violations
}

fn overlap(a: &Grant, b: &Grant) -> bool {
    a.start < b.end && b.start < a.end
}

/// At most `limit` grants held at any instant (a sweep over starts and
/// ends; an end at the same instant as a start comes first).
fn at_most_holders(grants: &[Grant], limit: usize) -> Vec<String> {
    let mut events: Vec<(u64, bool, &Grant)> = grants
        .iter()
        .flat_map(|g| [(g.start, true, g), (g.end, false, g)])
        .collect();
    events.sort_by_key(|&(at, starts, _)| (at, starts));
    let mut holding: Vec<&Grant> = Vec::new();
    let mut violations = Vec::new();
    for (_, starts, grant) in events {
        if starts {
            holding.push(grant);
            if holding.len() > limit {
                violations.push(format!(
                    "{} grants overlap (at most {limit} allowed): {holding:?}",
                    holding.len()
                ));
            }
        } else {
            holding.retain(|g| !std::ptr::eq(*g, grant));
        }
    }
    violations
}

/// A writer of the read-write lock overlaps no other grant.
fn writers_overlap_nobody(grants: &[Grant]) -> Vec<String> {
    let mut violations = Vec::new();
    for (i, writer) in grants.iter().enumerate() {
        if writer.kind != Kind::Write {
            continue;
        }
        for (j, other) in grants.iter().enumerate() {
            if i != j && overlap(writer, other) {
                violations.push(format!(
                    "a writer and another grant overlap: {writer:?} {other:?}"
                ));
            }
        }
    }
    violations
}

/// Tokens never repeat, and where one of two grants is exclusive (a lock,
/// a writer, a leader), the one that began after the other ended has the
/// larger token: for exclusive grants, strictly increasing in grant order.
/// (Two shared grants — permits, readers — may start in the other order
/// than the row granted them: a holder learns of its grant a poll late.)
fn tokens_follow_grant_order(grants: &[Grant]) -> Vec<String> {
    let mut violations = Vec::new();
    let mut by_token: Vec<&Grant> = grants.iter().collect();
    by_token.sort_by_key(|g| g.token);
    for pair in by_token.windows(2) {
        if pair[0].token == pair[1].token {
            violations.push(format!(
                "token {} granted twice: {:?} {:?}",
                pair[0].token, pair[0], pair[1]
            ));
        }
    }
    for earlier in grants {
        for later in grants {
            let exclusive = earlier.kind.is_exclusive() || later.kind.is_exclusive();
            if exclusive && earlier.end < later.start && earlier.token >= later.token {
                violations.push(format!(
                    "token {} granted after token {} was released: {later:?} after {earlier:?}",
                    later.token, earlier.token
                ));
            }
        }
    }
    violations
}

/// Sequence ids: each distinct across all processes, increasing within
/// each process.
fn ids_distinct_and_increasing(ids: &[Vec<u64>]) -> Vec<String> {
    let mut violations = Vec::new();
    for (process, own) in ids.iter().enumerate() {
        if let Some(pair) = own.windows(2).find(|pair| pair[0] >= pair[1]) {
            violations.push(format!(
                "process {process}: id {} after {}",
                pair[1], pair[0]
            ));
        }
    }
    let mut all: Vec<(u64, usize)> = ids
        .iter()
        .enumerate()
        .flat_map(|(process, own)| own.iter().map(move |&id| (id, process)))
        .collect();
    all.sort_unstable();
    for pair in all.windows(2) {
        if pair[0].0 == pair[1].0 {
            violations.push(format!(
                "id {} handed to processes {} and {}",
                pair[0].0, pair[0].1, pair[1].1
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    //! Negative controls of the checks: hand-made logs that break each
    //! property must be flagged, and a clean log must pass.

    use super::*;

    fn grant(process: usize, kind: Kind, token: u64, start: u64, end: u64) -> Grant {
        Grant {
            process,
            kind,
            token,
            start,
            end,
        }
    }

    /// Processes 0 and 1 holding `kind` at once (tokens 1 and 2, from 10
    /// to 40 and from 12 to 30), then process 2's grant of `third`, token
    /// 3, from `start` to 50.
    fn two_at_once_then(kind: Kind, third: Kind, start: u64) -> Vec<Grant> {
        vec![
            grant(0, kind, 1, 10, 40),
            grant(1, kind, 2, 12, 30),
            grant(2, third, 3, start, 50),
        ]
    }

    /// Two processes taking turns cleanly.
    fn clean_lock() -> Outcome {
        Outcome {
            grants: vec![
                grant(0, Kind::Lock, 1, 10, 20),
                grant(1, Kind::Lock, 2, 25, 30),
                grant(0, Kind::Lock, 3, 31, 40),
                grant(1, Kind::Lock, 4, 45, 50),
            ],
            ids: vec![vec![], vec![]],
            counter: 4,
            failed: vec![],
        }
    }

    const TWO_BY_TWO: CaseSpec = CaseSpec::of(Role::Lock, 2, 2);

    /// One of `violations` mentions `needle`.
    #[track_caller]
    fn assert_flagged(violations: &[String], needle: &str) {
        assert!(
            violations.iter().any(|v| v.contains(needle)),
            "{violations:?}"
        );
    }

    #[test]
    fn a_clean_lock_log_passes() {
        assert_eq!(check(&TWO_BY_TWO, &clean_lock()), Vec::<String>::new());
    }

    #[test]
    fn overlapping_lock_grants_are_flagged() {
        let mut outcome = clean_lock();
        outcome.grants[1] = grant(1, Kind::Lock, 2, 15, 30);
        assert_flagged(&check(&TWO_BY_TWO, &outcome), "overlap");
    }

    #[test]
    fn a_lost_counter_update_is_flagged() {
        let mut outcome = clean_lock();
        outcome.counter = 3;
        assert_flagged(&check(&TWO_BY_TWO, &outcome), "counter");
    }

    #[test]
    fn a_repeated_token_is_flagged() {
        let mut outcome = clean_lock();
        outcome.grants[3].token = 3;
        assert_flagged(&tokens_follow_grant_order(&outcome.grants), "twice");
    }

    #[test]
    fn a_token_out_of_grant_order_is_flagged() {
        let mut outcome = clean_lock();
        (outcome.grants[1].token, outcome.grants[2].token) = (3, 2);
        assert_flagged(&tokens_follow_grant_order(&outcome.grants), "released");
    }

    #[test]
    fn shared_grants_may_start_out_of_token_order_but_not_around_a_writer() {
        let mut grants = vec![
            grant(0, Kind::Read, 2, 10, 20),
            grant(1, Kind::Read, 1, 25, 30),
            grant(2, Kind::Write, 3, 31, 40),
        ];
        assert_eq!(tokens_follow_grant_order(&grants), Vec::<String>::new());
        grants[2].token = 0;
        assert_eq!(tokens_follow_grant_order(&grants).len(), 2);
    }

    #[test]
    fn a_failed_child_is_flagged() {
        let mut outcome = clean_lock();
        outcome
            .failed
            .push((1, "exit status: 1".into(), "boom".into()));
        assert_flagged(&check(&TWO_BY_TWO, &outcome), "boom");
    }

    #[test]
    fn a_missing_grant_is_flagged() {
        let mut outcome = clean_lock();
        outcome.grants.pop();
        outcome.counter = 3;
        assert_flagged(&check(&TWO_BY_TWO, &outcome), "expected");
    }

    #[test]
    fn a_third_semaphore_holder_is_flagged() {
        let grants = two_at_once_then(Kind::Permit, Kind::Permit, 29);
        assert_eq!(at_most_holders(&grants, 3), Vec::<String>::new());
        assert_eq!(at_most_holders(&grants, 2).len(), 1);
        // A holder that ends as another starts is not held with it.
        let touching = [
            grant(0, Kind::Permit, 1, 10, 20),
            grant(1, Kind::Permit, 2, 20, 30),
        ];
        assert_eq!(at_most_holders(&touching, 1), Vec::<String>::new());
    }

    #[test]
    fn a_writer_beside_a_reader_is_flagged() {
        let readers = two_at_once_then(Kind::Read, Kind::Write, 41);
        assert_eq!(writers_overlap_nobody(&readers), Vec::<String>::new());
        let mut broken = readers.clone();
        broken[2].start = 35;
        assert_eq!(writers_overlap_nobody(&broken).len(), 1);
    }

    #[test]
    fn two_leaders_at_once_are_flagged() {
        let spec = CaseSpec {
            role: Role::Election,
            processes: 2,
            rounds: 1,
            permits: 1,
        };
        let mut outcome = Outcome {
            grants: vec![
                grant(0, Kind::Leader, 1, 10, 20),
                grant(1, Kind::Leader, 2, 21, 30),
            ],
            ids: vec![vec![], vec![]],
            ..Outcome::default()
        };
        assert_eq!(check(&spec, &outcome), Vec::<String>::new());
        outcome.grants[1].start = 19;
        assert!(!check(&spec, &outcome).is_empty());
    }

    #[test]
    fn a_duplicate_or_decreasing_id_is_flagged() {
        assert_eq!(
            ids_distinct_and_increasing(&[vec![1, 2, 5], vec![3, 4, 6]]),
            Vec::<String>::new()
        );
        let duplicate = ids_distinct_and_increasing(&[vec![1, 2, 5], vec![3, 5, 6]]);
        assert!(
            duplicate.iter().any(|v| v.contains("handed to")),
            "{duplicate:?}"
        );
        let decreasing = ids_distinct_and_increasing(&[vec![1, 4, 2], vec![3]]);
        assert!(
            decreasing.iter().any(|v| v.contains("after")),
            "{decreasing:?}"
        );
    }

    #[test]
    fn logs_parse_and_bad_lines_are_refused() {
        let mut grants = Vec::new();
        let ids = parse_log(2, "id 7\ngrant write 3 10 20\nid 9\n", &mut grants).expect("parses");
        assert_eq!(ids, vec![7, 9]);
        assert_eq!(grants, vec![grant(2, Kind::Write, 3, 10, 20)]);
        assert!(parse_log(0, "grant sideways 3 10 20\n", &mut grants).is_err());
        assert!(parse_log(0, "id seven\n", &mut grants).is_err());
    }

    #[test]
    fn every_role_parses_back_from_its_name() {
        for role in Role::ALL {
            assert_eq!(Role::parse(role.name()), Some(role));
        }
        assert_eq!(Role::parse("juggler"), None);
    }
}
