//! One benchmark run: resolve the [`Plan`], connect the targets, run every
//! cell in order (with a progress bar on a terminal), and hand back the
//! [`Run`]: what was measured, cell by cell, for
//! [`results`](crate::results) to turn into a report.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bakery::{CountingStore, VersionedStore};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::BenchError;
use crate::machine::Machine;
use crate::model::{
    CellSpec, CellStore, Implementation, Peer, PreparedCell, Skipped, Variant, WorkloadSpec,
};
use crate::peers;
use crate::process::{self, WorkerCommand, WorkerJob};
use crate::runner::{self, Measurement, RoundTripCounter};
use crate::versions::server_version;
use crate::workloads;

/// The plan value that selects every workload of the registry.
pub const ALL_WORKLOADS: &str = "all";

/// What to measure: a plain description, checked and resolved when the run
/// starts ([`execute`]).
#[derive(Debug, Clone)]
pub struct Plan {
    /// Workload names ([`workloads::names`]), or [`ALL_WORKLOADS`]; they run
    /// in registry order, each once.
    pub workloads: Vec<String>,
    /// Store URIs, in order. Empty: `memory://` and, when the SQLite backend
    /// is compiled in, a fresh SQLite file in a temporary directory, deleted
    /// afterwards (never anyone's data).
    pub uris: Vec<String>,
    /// Client counts, one cell each (sorted and deduplicated).
    pub clients: Vec<usize>,
    /// Timed part of each cell.
    pub duration: Duration,
    /// How many times every cell runs (at least once). The rounds are
    /// interleaved (every cell once, then every cell again, …), so a burst
    /// of load on a shared machine lands in one round of many cells rather
    /// than in every round of one; each cell reports its median round.
    pub rounds: usize,
    /// Sequence block size (and the CACHE of the cached `nextval()` peer).
    pub block_size: u64,
    /// The command line that asked for the run, passwords hidden (shown in
    /// the report).
    pub command: String,
    /// Show a progress indicator on stderr (only when it is a terminal).
    pub progress: bool,
    /// Cells across processes too, besides those in one process: `None`,
    /// none.
    pub processes: Option<ProcessPlan>,
    /// A MariaDB or MySQL server (`mysql://user:password@host:port/db`)
    /// whose `GET_LOCK()` is measured as a lock peer beside every
    /// PostgreSQL target, in the same cells as `pg_advisory_lock()`
    /// (with the `mariadb` feature; `None`, not measured).
    pub mariadb: Option<String>,
}

impl Plan {
    /// A plan of `workloads` on `uris` with `clients`, each cell timed for
    /// `duration`, the rest as `bakery bench` has it by default: one round,
    /// block size 1000, in one process, no MariaDB peer; no progress
    /// indicator and no command line. Change the fields to differ.
    pub fn new(workloads: &[&str], uris: &[&str], clients: Vec<usize>, duration: Duration) -> Plan {
        Plan {
            workloads: workloads.iter().map(|w| w.to_string()).collect(),
            uris: uris.iter().map(|u| u.to_string()).collect(),
            clients,
            duration,
            rounds: 1,
            block_size: 1000,
            command: String::new(),
            progress: false,
            processes: None,
            mariadb: None,
        }
    }
}

/// The cells across processes of a [`Plan`]: the workloads that have them
/// ([`WorkloadSpec::across_processes`]) and their native peers, with a
/// client per OS process ([`process`]).
#[derive(Debug, Clone)]
pub struct ProcessPlan {
    /// Process counts, one cell each (sorted and deduplicated).
    pub counts: Vec<usize>,
    /// How to start a worker process.
    pub worker: WorkerCommand,
}

/// What a run measured, before it becomes a report.
pub struct Run {
    /// The workloads, in order.
    pub workloads: Vec<&'static WorkloadSpec>,
    /// Client counts, in order.
    pub clients: Vec<usize>,
    /// Process counts of the cells across processes, in order (empty:
    /// none ran).
    pub processes: Vec<usize>,
    /// Timed part of each cell.
    pub duration: Duration,
    /// Rounds each cell ran ([`Plan::rounds`]).
    pub rounds: usize,
    /// Sequence block size.
    pub block_size: u64,
    /// The command line, passwords hidden.
    pub command: String,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// When it ended.
    pub finished_at: String,
    /// The machine it ran on.
    pub machine: Machine,
    /// The stores measured, in order.
    pub targets: Vec<TargetRun>,
    /// Every cell, in table order.
    pub cells: Vec<CellRun>,
    /// The workloads that could not run on a target, once per pair.
    pub skipped: Vec<Skipped>,
}

/// A store that was measured.
#[derive(Debug, Clone)]
pub struct TargetRun {
    /// The name tables use (the backend, numbered if it appears twice).
    pub label: String,
    /// The backend (`VersionedStore::backend`).
    pub backend: &'static str,
    /// Its URI, password hidden.
    pub uri: String,
    /// The server (or library) version.
    pub version: String,
}

/// One cell that ran.
#[derive(Debug)]
pub struct CellRun {
    /// The workload.
    pub workload: &'static str,
    /// The target's label.
    pub target: String,
    /// The target's backend.
    pub backend: &'static str,
    /// Bakery or native.
    pub implementation: Implementation,
    /// The variant id or, for a peer, its label.
    pub variant: String,
    /// What the `implementation` column shows.
    pub label: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Whether each client ran in its own process.
    pub across_processes: bool,
    /// What the runner measured in the cell's median round (by
    /// operations/s), with the errors of every round.
    pub measurement: Measurement,
    /// Operations/s of every round the cell ran, in round order.
    pub round_rates: Vec<f64>,
}

/// A plan checked against this build, its defaults filled in.
struct Resolved {
    workloads: Vec<&'static WorkloadSpec>,
    uris: Vec<String>,
    clients: Vec<usize>,
    processes: Vec<usize>,
    /// Keeps the default SQLite file's directory until the run is over.
    scratch: Option<tempfile::TempDir>,
}

fn resolve(plan: &Plan) -> Result<Resolved, BenchError> {
    let mut wanted: Vec<&str> = Vec::new();
    let names = workloads::names();
    for name in &plan.workloads {
        let selected: Vec<&str> = if name == ALL_WORKLOADS {
            names.clone()
        } else if names.contains(&name.as_str()) {
            vec![name.as_str()]
        } else {
            return Err(BenchError::UnknownWorkload {
                name: name.clone(),
                available: names.join(", "),
            });
        };
        for name in selected {
            if !wanted.contains(&name) {
                wanted.push(name);
            }
        }
    }
    let workloads = workloads::registry()
        .into_iter()
        .filter(|w| wanted.contains(&w.name))
        .collect();

    let mut clients = plan.clients.clone();
    clients.sort_unstable();
    clients.dedup();
    let mut processes = plan
        .processes
        .as_ref()
        .map_or_else(Vec::new, |p| p.counts.clone());
    processes.sort_unstable();
    processes.dedup();

    let mut uris = plan.uris.clone();
    // A memory store beside shared ones runs its cells in one process
    // only; cells across processes on memory stores alone are refused.
    let per_process = |uri: &String| uri.starts_with("memory:");
    if !processes.is_empty() && !uris.is_empty() && uris.iter().all(per_process) {
        return Err(BenchError::NotShared {
            uri: bakery::redact(&uris[0]),
        });
    }
    let mut scratch = None;
    if uris.is_empty() {
        // A memory store is one process's: only the SQLite file is shared.
        if processes.is_empty() {
            uris.push("memory://".to_string());
        }
        if bakery::schemes().contains(&"sqlite") {
            let dir = tempfile::Builder::new()
                .prefix("bakery-bench-")
                .tempdir()
                .map_err(|e| {
                    BenchError::Internal(format!("cannot create a temporary directory: {e}"))
                })?;
            let file = dir.path().join("bench.db");
            let uri = bakery::sqlite_uri(&file).ok_or_else(|| {
                BenchError::Internal(format!(
                    "the temporary path {} is not valid UTF-8; name the stores to measure",
                    file.display()
                ))
            })?;
            uris.push(uri);
            scratch = Some(dir);
        }
    }
    Ok(Resolved {
        workloads,
        uris,
        clients,
        processes,
        scratch,
    })
}

/// A store being measured.
struct Target {
    label: String,
    backend: &'static str,
    /// As given (for the workers of cells across processes).
    uri: String,
    shown_uri: String,
    store: Arc<dyn VersionedStore>,
    peers: Vec<Box<dyn Peer>>,
}

/// What a cell measures.
#[derive(Clone, Copy)]
enum Subject<'a> {
    /// A workload variant through bakery.
    Bakery {
        workload: &'static WorkloadSpec,
        variant: Variant,
    },
    /// A native peer.
    Native {
        workload: &'static WorkloadSpec,
        peer: &'a dyn Peer,
    },
}

impl Subject<'_> {
    fn workload(&self) -> &'static WorkloadSpec {
        match self {
            Subject::Bakery { workload, .. } | Subject::Native { workload, .. } => workload,
        }
    }

    fn workload_name(&self) -> &'static str {
        self.workload().name
    }

    fn implementation(&self) -> Implementation {
        match self {
            Subject::Bakery { .. } => Implementation::Bakery,
            Subject::Native { .. } => Implementation::Native,
        }
    }

    /// The variant id a workload prepares (empty for a peer).
    fn variant_id(&self) -> &'static str {
        match self {
            Subject::Bakery { variant, .. } => variant.id,
            Subject::Native { .. } => "",
        }
    }

    /// What the `implementation` column shows.
    fn label(&self) -> String {
        match self {
            Subject::Bakery { variant, .. } => variant.label.to_string(),
            Subject::Native { peer, .. } => peer.label(),
        }
    }

    /// Set the cell up, and say where its round trips are counted.
    async fn prepare(
        &self,
        target: &Target,
        spec: &CellSpec,
    ) -> (Result<PreparedCell, BenchError>, RoundTripCounter) {
        match self {
            Subject::Bakery { workload, .. } => {
                let counted = Arc::new(CountingStore::new(target.store.clone()));
                let store = CellStore {
                    counted: counted.clone(),
                    raw: target.store.clone(),
                };
                (
                    workload.workload.setup(&store, spec).await,
                    RoundTripCounter::Store(counted),
                )
            }
            Subject::Native { peer, .. } => {
                let sent = Arc::new(AtomicU64::new(0));
                (
                    peer.setup(spec, sent.clone()).await,
                    RoundTripCounter::Native(sent),
                )
            }
        }
    }
}

/// Run `plan`: every cell, in table order (per workload, per target, its
/// variants then its native peers, each at every client count).
pub async fn execute(plan: Plan) -> Result<Run, BenchError> {
    let Resolved {
        workloads,
        uris,
        clients,
        processes,
        scratch,
    } = resolve(&plan)?;
    let started_at = now_rfc3339();
    let progress = ClearOnDrop(progress_bar(plan.progress));

    let mut targets = Vec::with_capacity(uris.len());
    for uri in &uris {
        let shown_uri = bakery::redact(uri);
        progress.set_message(format!("connecting to {shown_uri}"));
        let store = bakery::connect(uri)
            .await
            .map_err(|source| BenchError::Store {
                target: shown_uri.clone(),
                source,
            })?;
        let backend = store.backend();
        targets.push(Target {
            label: backend.to_string(),
            backend,
            uri: uri.clone(),
            shown_uri,
            peers: peers::for_target(backend, uri, plan.block_size, plan.mariadb.as_deref()),
            store,
        });
    }
    number_duplicate_labels(&mut targets);
    let postgres = targets
        .iter()
        .zip(&uris)
        .find_map(|(target, uri)| peers::postgres_source(target.backend, uri));

    let mut target_runs = Vec::with_capacity(targets.len());
    for (target, uri) in targets.iter().zip(&uris) {
        progress.set_message(format!("asking {} for its version", target.label));
        target_runs.push(TargetRun {
            label: target.label.clone(),
            backend: target.backend,
            uri: target.shown_uri.clone(),
            version: server_version(target.backend, uri).await,
        });
    }

    // (target, subject, clients, across processes), in table order: a
    // workload's cells in one process, then those across processes.
    let mut cells: Vec<(&Target, Subject<'_>, usize, bool)> = Vec::new();
    for workload in &workloads {
        for (counts, across) in [(&clients, false), (&processes, true)] {
            if across && !workload.across_processes {
                continue;
            }
            for target in &targets {
                if across && target.backend == "memory" {
                    continue; // one process's store (see the tables' title)
                }
                let peers = target
                    .peers
                    .iter()
                    .filter(|p| p.workload() == workload.name)
                    .map(|peer| Subject::Native {
                        workload,
                        peer: peer.as_ref(),
                    });
                let subjects = workload
                    .variants
                    .iter()
                    .map(|&variant| Subject::Bakery { workload, variant })
                    .chain(peers);
                for subject in subjects {
                    for &count in counts {
                        cells.push((target, subject, count, across));
                    }
                }
            }
        }
    }
    let worker = plan.processes.as_ref().map(|p| &p.worker);

    let rounds = plan.rounds.max(1);
    show_cells(&progress, cells.len() * rounds);
    let run_id = run_id();
    // Every round's measurement of each cell, by cell index.
    let mut measured: Vec<Vec<Measurement>> = cells.iter().map(|_| Vec::new()).collect();
    let mut skipped: Vec<Skipped> = Vec::new();
    for round in 0..rounds {
        for (index, &(target, subject, clients, across)) in cells.iter().enumerate() {
            let workload = subject.workload_name();
            if skipped
                .iter()
                .any(|s| s.workload == workload && s.target == target.label)
            {
                progress.inc(1);
                continue;
            }
            let spec = CellSpec {
                tag: cell_tag(&run_id, index, round),
                // Across processes the parent sets up only what the cell
                // shares (and its finish); each worker its own client.
                clients: if across { 0 } else { clients },
                variant: subject.variant_id(),
                block_size: plan.block_size,
                postgres: postgres.clone(),
                journal: None,
            };
            let label = subject.label();
            let of_rounds = if rounds > 1 {
                format!("round {}/{rounds} · ", round + 1)
            } else {
                String::new()
            };
            let of = if across { "processes" } else { "clients" };
            progress.set_message(format!(
                "{of_rounds}{workload} · {} · {label} · {clients} {of}",
                target.label
            ));
            let (prepared, counter) = subject.prepare(target, &spec).await;
            // A cell that cannot be set up (a peer refused by the server, …)
            // is reported as a failed cell; the other cells still run.
            // One that cannot run on this target is skipped, its reason kept.
            let min_ops = subject
                .workload()
                .min_ops_per_client
                .max(runner::MIN_OPS_PER_CLIENT);
            let outcome = match (prepared, worker.filter(|_| across)) {
                (Ok(prepared), None) => {
                    Ok(runner::measure(prepared, &counter, plan.duration, min_ops).await?)
                }
                (Ok(prepared), Some(worker)) => {
                    let job = WorkerJob {
                        uri: target.uri.clone(),
                        workload: workload.to_string(),
                        variant: match subject {
                            Subject::Bakery { variant, .. } => Some(variant.id.to_string()),
                            Subject::Native { .. } => None,
                        },
                        peer: match subject {
                            Subject::Bakery { .. } => None,
                            Subject::Native { .. } => Some(label.clone()),
                        },
                        tag: spec.tag.clone(),
                        block_size: plan.block_size,
                        postgres: spec.postgres.clone(),
                        mariadb: plan.mariadb.clone(),
                        duration_ns: u64::try_from(plan.duration.as_nanos()).unwrap_or(u64::MAX),
                        min_ops,
                        process: 0,
                        counter: None,
                    };
                    measure_across(worker, &job, clients, prepared).await
                }
                (Err(err), _) => Err(err),
            };
            let measurement = match outcome {
                Ok(measurement) => measurement,
                Err(BenchError::Unavailable(reason)) => {
                    skipped.push(Skipped {
                        workload: workload.to_string(),
                        target: target.label.clone(),
                        reason,
                    });
                    progress.inc(1);
                    continue;
                }
                Err(err) => Measurement::failed(err.to_string())?,
            };
            measured[index].push(measurement);
            progress.inc(1);
        }
    }
    let mut results = Vec::with_capacity(cells.len());
    for (&(target, subject, clients, across), measurements) in cells.iter().zip(measured) {
        let round_rates: Vec<f64> = measurements.iter().map(Measurement::ops_per_sec).collect();
        let Some(measurement) = median_round(measurements) else {
            continue; // skipped in every round
        };
        let label = subject.label();
        results.push(CellRun {
            workload: subject.workload_name(),
            target: target.label.clone(),
            backend: target.backend,
            implementation: subject.implementation(),
            variant: match subject {
                Subject::Bakery { variant, .. } => variant.id.to_string(),
                Subject::Native { .. } => label.clone(),
            },
            label,
            clients,
            across_processes: across,
            measurement,
            round_rates,
        });
    }
    drop(progress);
    drop(cells);
    drop(targets);
    // The default SQLite file goes only now that its store is closed.
    drop(scratch);

    Ok(Run {
        workloads,
        clients,
        processes,
        duration: plan.duration,
        rounds,
        block_size: plan.block_size,
        command: plan.command,
        started_at,
        finished_at: now_rfc3339(),
        machine: Machine::detect(),
        targets: target_runs,
        cells: results,
        skipped,
    })
}

/// The cell of `job` with a worker process per client (`processes`),
/// `prepared` the parent's set-up of it (no clients): its finish checks
/// and cleans up once the workers are done, even if they failed. Every
/// lock variant and peer the bench runs admits one holder at a time (the
/// semaphore has one permit).
async fn measure_across(
    worker: &WorkerCommand,
    job: &WorkerJob,
    processes: usize,
    prepared: PreparedCell,
) -> Result<Measurement, BenchError> {
    let measured = process::measure(worker, job, processes, 1).await;
    let problems = match prepared.finish {
        Some(finish) => {
            finish
                .finish(!matches!(measured, Ok(ref m) if m.errors == 0))
                .await
        }
        None => Vec::new(),
    };
    let mut measurement = match measured {
        Ok(measurement) => measurement,
        Err(BenchError::Unavailable(reason)) => return Err(BenchError::Unavailable(reason)),
        Err(err) => Measurement::failed(err.to_string())?,
    };
    measurement.add_problems(problems);
    Ok(measurement)
}

/// Backends that appear more than once become `redis-1`, `redis-2`, … (the
/// targets table maps each label to its URI).
fn number_duplicate_labels(targets: &mut [Target]) {
    let backends: Vec<&'static str> = targets.iter().map(|t| t.backend).collect();
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for target in targets.iter_mut() {
        if backends.iter().filter(|b| **b == target.backend).count() < 2 {
            continue;
        }
        let n = match seen.iter_mut().find(|(b, _)| *b == target.backend) {
            Some((_, n)) => {
                *n += 1;
                *n
            }
            None => {
                seen.push((target.backend, 1));
                1
            }
        };
        target.label = format!("{}-{n}", target.backend);
    }
}

/// Clears the progress bar however the run ends, so an error message
/// starts on a clean line.
struct ClearOnDrop(ProgressBar);

impl std::ops::Deref for ClearOnDrop {
    type Target = ProgressBar;
    fn deref(&self) -> &ProgressBar {
        &self.0
    }
}

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// The progress indicator on stderr: a spinner while connecting, a bar
/// once the cells are known ([`show_cells`]). indicatif hides it when
/// stderr is not a terminal (pipes, CI logs, tests); `show: false` hides it
/// always.
fn progress_bar(show: bool) -> ProgressBar {
    let target = if show {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(None, target);
    // The templates are constants; should one ever fail to parse, the
    // default style still works.
    if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed_precise} {wide_msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Switch the progress indicator to a bar over `cells` cells.
fn show_cells(bar: &ProgressBar, cells: usize) {
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {elapsed_precise} [{bar:30}] {pos}/{len} cells  {wide_msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_length(cells as u64);
}

/// The tag of cell `index` in round `round` (0-based): unique in the run,
/// so a round never meets the rows, keys or slots an earlier one left.
fn cell_tag(run_id: &str, index: usize, round: usize) -> String {
    match round {
        0 => format!("{run_id}-{index}"),
        _ => format!("{run_id}-{index}r{round}"),
    }
}

/// The round with the median rate (the slower of the two middle ones for an
/// even count), carrying the errors of every round: a failure in any round
/// stays visible, whichever round is shown. `None` without rounds.
fn median_round(mut rounds: Vec<Measurement>) -> Option<Measurement> {
    let errors: u64 = rounds.iter().map(|m| m.errors).sum();
    let violations: u64 = rounds.iter().map(|m| m.violations).sum();
    let first_error = rounds
        .iter()
        .filter(|m| m.violations > 0)
        .chain(&rounds)
        .find_map(|m| m.first_error.clone());
    rounds.sort_by(|a, b| a.ops_per_sec().total_cmp(&b.ops_per_sec()));
    let middle = rounds.len().checked_sub(1)? / 2;
    let mut median = rounds.into_iter().nth(middle)?;
    median.errors = errors;
    median.violations = violations;
    median.first_error = first_error;
    Some(median)
}

/// A name part unique to this run (lowercase hex of the time and the
/// process id), so runs sharing a server never touch each other's rows.
fn run_id() -> String {
    let millis = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{millis:x}-{:x}", std::process::id())
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(workloads: &[&str], uris: &[&str]) -> Plan {
        Plan {
            block_size: 10,
            command: "test".into(),
            ..Plan::new(workloads, uris, vec![4, 1, 4], Duration::from_millis(10))
        }
    }

    #[test]
    fn a_plan_resolves_in_registry_order_once_each() {
        let resolved = resolve(&plan(&["lock", "cas", "all"], &["memory://"])).expect("plan");
        let names: Vec<&str> = resolved.workloads.iter().map(|w| w.name).collect();
        assert_eq!(
            names,
            ["cas", "sequence", "lock", "rwlock", "once", "consumer", "outbox"]
        );
        assert_eq!(resolved.clients, [1, 4]);
        assert_eq!(resolved.uris, ["memory://"]);
        assert!(resolved.scratch.is_none());

        let err = resolve(&plan(&["nosuch"], &[])).err().expect("unknown");
        assert!(err.to_string().contains("cas, sequence, lock"), "{err}");
    }

    #[test]
    fn without_uris_the_stores_are_throwaway() {
        let resolved = resolve(&plan(&["cas"], &[])).expect("plan");
        assert_eq!(resolved.uris[0], "memory://");
        if bakery::schemes().contains(&"sqlite") {
            let dir = resolved.scratch.as_ref().expect("scratch dir");
            assert!(resolved.uris[1].starts_with("sqlite://"));
            assert!(resolved.uris[1].contains(&*dir.path().to_string_lossy()));
        }
        assert_eq!(
            bakery::sqlite_uri(std::path::Path::new("/w 1/100%?/b.db")).as_deref(),
            Some("sqlite:///w 1/100%25%3F/b.db")
        );
    }

    /// The recipes' workloads on the in-process stores (memory, and a
    /// SQLite file when compiled in): every cell clean, with the round trips
    /// the recipes promise (counted calls, not speed); the outbox, without
    /// a PostgreSQL target, skipped once per store.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn once_and_consumer_keep_their_round_trips() {
        let run = execute(plan(&["once", "consumer", "outbox"], &[]))
            .await
            .expect("run");
        let stores = run.targets.len();
        // 2 once + 2 consumer variants × 2 client counts per store.
        assert_eq!(run.cells.len(), stores * 4 * 2);
        assert_eq!(run.skipped.len(), stores, "{:?}", run.skipped);
        assert!(run.skipped.iter().all(|s| s.workload == "outbox"));
        for cell in &run.cells {
            let m = &cell.measurement;
            assert_eq!(m.errors, 0, "{cell:?}");
            assert!(m.ops > 0, "{cell:?}");
            let notifies = m.extras.get("notifies").copied().unwrap_or(0);
            match (cell.workload, cell.variant.as_str()) {
                // One conditional write per message.
                ("consumer", "partition-per-client") => assert_eq!(m.round_trips, m.ops),
                // Claim and completion, plus the completion's notify on a
                // store with WATCH (memory, a SQLite file).
                ("once", "new") => {
                    assert!(notifies == m.ops || notifies == 0, "{cell:?}");
                    assert_eq!(m.round_trips, 2 * m.ops + notifies, "{cell:?}");
                }
                // The claim meets the completed record: one write, a conflict.
                ("once", "replay") => {
                    assert_eq!(m.round_trips, m.ops, "{cell:?}");
                    assert_eq!(m.conflicts, m.ops, "{cell:?}");
                }
                _ => {}
            }
        }
    }

    /// Several rounds: every cell runs once per round and shows its median
    /// round, keeping every round's rate.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_cell_runs_once_per_round_and_shows_its_median() {
        let mut plan = plan(&["cas"], &["memory://"]);
        plan.rounds = 3;
        let run = execute(plan).await.expect("run");
        assert_eq!(run.rounds, 3);
        // 3 variants × 2 client counts, each once however many rounds.
        assert_eq!(run.cells.len(), 6);
        for cell in &run.cells {
            assert_eq!(cell.measurement.errors, 0, "{cell:?}");
            assert_eq!(cell.round_rates.len(), 3, "{cell:?}");
            let mut sorted = cell.round_rates.clone();
            sorted.sort_by(f64::total_cmp);
            assert_eq!(cell.measurement.ops_per_sec(), sorted[1], "{cell:?}");
        }
    }

    fn measured(ops: u64, errors: u64) -> Measurement {
        Measurement {
            elapsed: Duration::from_secs(1),
            ops,
            ops_per_client: vec![ops],
            errors,
            violations: 0,
            first_error: (errors > 0).then(|| format!("failed in the round of {ops}")),
            latency: crate::stats::LatencyHistogram::new().expect("histogram"),
            round_trips: ops,
            conflicts: 0,
            extras: Default::default(),
        }
    }

    #[test]
    fn the_median_round_carries_every_round_s_errors() {
        assert!(median_round(Vec::new()).is_none());
        let rounds = vec![
            measured(100, 0),
            measured(300, 2),
            measured(200, 0),
            measured(50, 1),
        ];
        let median = median_round(rounds).expect("median");
        // Of an even count, the slower middle round.
        assert_eq!(median.ops, 100);
        assert_eq!(median.round_trips, 100);
        assert_eq!(median.errors, 3);
        assert_eq!(
            median.first_error.as_deref(),
            Some("failed in the round of 300")
        );
        let one = median_round(vec![measured(7, 0)]).expect("one round");
        assert_eq!((one.ops, one.errors), (7, 0));
        // A failed check in any round is carried, and named first.
        let mut broken = measured(60, 0);
        broken.add_problems(vec!["ids handed out twice".into()]);
        let median = median_round(vec![measured(70, 1), broken, measured(80, 0)]).expect("median");
        assert_eq!((median.ops, median.errors, median.violations), (70, 2, 1));
        assert_eq!(median.first_error.as_deref(), Some("ids handed out twice"));
    }

    #[test]
    fn round_tags_are_unique_and_the_first_round_keeps_the_plain_tag() {
        assert_eq!(cell_tag("ab-1", 3, 0), "ab-1-3");
        assert_eq!(cell_tag("ab-1", 3, 2), "ab-1-3r2");
        assert_ne!(cell_tag("ab-1", 13, 1), cell_tag("ab-1", 1, 31));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_measures_every_cell() {
        let run = execute(plan(&["cas"], &["memory://", "memory://"]))
            .await
            .expect("run");
        let labels: Vec<&str> = run.targets.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["memory-1", "memory-2"]);
        // 2 targets × 3 variants × 2 client counts.
        assert_eq!(run.cells.len(), 12);
        for cell in &run.cells {
            assert_eq!(cell.measurement.errors, 0, "{cell:?}");
            assert!(cell.measurement.ops > 0, "{cell:?}");
        }
    }
}
