//! Cells across processes: the same measurement as a cell in one process
//! (the same workload or peer, set up by the same code, timed by the same
//! [`runner`]), with each client in an OS process of its own, as separate
//! services would run it.
//!
//! The parent sets the cell up once with no clients (what the cell shares,
//! and its finish), then starts one worker per client: a command that runs
//! [`worker`] (`bakery bench --worker`, [`WorkerCommand`]). The worker
//! opens its own store and runs one client. Over its stdin and stdout the
//! two speak JSON lines:
//!
//! 1. parent → worker: the [`WorkerJob`];
//! 2. worker → parent: `ready` once its client is warm (or `failed`);
//! 3. parent → worker, once every worker is ready: the start, an instant
//!    on `CLOCK_MONOTONIC` shortly ahead, so all start together;
//! 4. worker → parent: `done`, with its measurement and its
//!    [`Journal`]: grants, ids.
//!
//! The parent merges the measurements into one (operations per process
//! give the fairness index, the histograms merge) and checks the journals
//! together ([`journal::check_grants`], [`journal::check_ids`]): a
//! violation is an error of the cell.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use bakery::CountingStore;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader, Lines};

use crate::error::{one_line, BenchError};
use crate::journal::{self, monotonic_ns, Grant, Journal};
use crate::model::{CellSpec, CellStore, PreparedCell};
use crate::peers;
use crate::runner::{self, Measurement, RoundTripCounter};
use crate::stats::LatencyHistogram;
use crate::workloads::{self, lock, rwlock};

/// How to start a worker: a program and its arguments (`bakery bench
/// --worker`), which runs [`worker`] on its stdin and stdout.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The program (`std::env::current_exe()` for the CLI).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// What one worker runs: one client of a cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerJob {
    /// The store, as given (password included: it goes over a pipe, never
    /// on a command line).
    pub uri: String,
    /// The workload ([`WorkloadSpec::name`](crate::model::WorkloadSpec::name)).
    pub workload: String,
    /// The bakery variant's id, or `None` for a peer.
    pub variant: Option<String>,
    /// The native peer's label, or `None` for a bakery variant.
    pub peer: Option<String>,
    /// The cell's tag ([`CellSpec::tag`]), the same in every worker.
    pub tag: String,
    /// The plan's block size.
    pub block_size: u64,
    /// [`CellSpec::postgres`].
    pub postgres: Option<String>,
    /// [`Plan::mariadb`](crate::Plan::mariadb): a native peer may be on it.
    pub mariadb: Option<String>,
    /// The timed part, in nanoseconds.
    pub duration_ns: u64,
    /// Operations the client runs to, past the duration if need be.
    pub min_ops: u64,
    /// This worker's index in the cell.
    pub process: usize,
    /// The counter file the lock's critical sections increment.
    pub counter: Option<PathBuf>,
}

/// A line from the parent after the job.
#[derive(Debug, Serialize, Deserialize)]
struct Start {
    /// When to start, on [`monotonic_ns`].
    start_ns: u64,
}

/// A line from a worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "message")]
enum FromWorker {
    /// Set up and warm.
    Ready,
    /// The cell cannot run: set-up failed (`unavailable`: the workload
    /// cannot run on this store at all).
    Failed { error: String, unavailable: bool },
    /// Finished.
    Done(Box<WorkerOutcome>),
}

/// What one worker measured and logged.
#[derive(Debug, Serialize, Deserialize)]
struct WorkerOutcome {
    /// When its client's timed part started and its last operation ended,
    /// on [`monotonic_ns`].
    started_ns: u64,
    stopped_ns: u64,
    ops: u64,
    errors: u64,
    /// Of those, failed checks ([`Measurement::violations`]).
    #[serde(default)]
    violations: u64,
    first_error: Option<String>,
    /// The latency histogram, as (value, count) pairs.
    latency: Vec<(u64, u64)>,
    round_trips: u64,
    conflicts: u64,
    extras: BTreeMap<String, u64>,
    grants: Vec<Grant>,
    ids: Vec<(u64, u64)>,
}

/// How far ahead of the moment every worker is ready the cell starts: the
/// time the workers need to read the start and wait for it, per worker on
/// top of a base (on a machine with fewer cores than workers, they wake one
/// after another).
const START_LEAD: Duration = Duration::from_millis(50);
const START_LEAD_PER_PROCESS: Duration = Duration::from_millis(2);

/// How long a worker may take to set up and warm up.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The extras that are figures of the whole cell (each worker reports its
/// own): recomputed from the merged grants or averaged, never summed.
const CELL_WIDE: &[&str] = &[
    lock::LONGEST_RUN,
    lock::HANDOFF_P50,
    lock::HANDOFF_P99,
    lock::HANDOFF_P50_NS,
    lock::ROW_BYTES,
    rwlock::MOST_READERS,
];

/// [`worker`] on this process's stdin and stdout: what the worker command
/// runs.
pub async fn worker_on_stdio() -> Result<(), BenchError> {
    worker(BufReader::new(tokio::io::stdin()), tokio::io::stdout()).await
}

/// The worker: read a [`WorkerJob`] from `input`, run its client and write
/// the outcome to `output` (the protocol of this module's heading). An
/// error is one of the worker itself (a broken pipe, a job it cannot
/// parse); a cell that cannot run is reported to the parent.
pub async fn worker<R, W>(input: R, mut output: W) -> Result<(), BenchError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = input.lines();
    let job: WorkerJob = read_line(&mut lines, "the job").await?;
    let (cell, counter, journal) = match prepare(&job).await {
        Ok(prepared) => prepared,
        Err(err) => {
            let unavailable = matches!(err, BenchError::Unavailable(_));
            let failed = FromWorker::Failed {
                error: err.to_string(),
                unavailable,
            };
            return write_line(&mut output, &failed).await;
        }
    };
    let output_ref = &mut output;
    let lines_ref = &mut lines;
    let mut started_ns = 0;
    let started_ref = &mut started_ns;
    let gate = async move {
        write_line(output_ref, &FromWorker::Ready).await?;
        let start: Start = read_line(lines_ref, "the start").await?;
        wait_until(start.start_ns).await;
        *started_ref = monotonic_ns();
        Ok(())
    };
    let duration = Duration::from_nanos(job.duration_ns);
    let measured = runner::measure_gated(cell, &counter, duration, job.min_ops, gate).await?;
    let elapsed_ns = u64::try_from(measured.elapsed.as_nanos()).unwrap_or(u64::MAX);
    let outcome = WorkerOutcome {
        started_ns,
        stopped_ns: started_ns.saturating_add(elapsed_ns),
        ops: measured.ops,
        errors: measured.errors,
        violations: measured.violations,
        first_error: measured.first_error,
        latency: measured.latency.counts(),
        round_trips: measured.round_trips,
        conflicts: measured.conflicts,
        extras: measured.extras,
        grants: journal.grants(),
        ids: journal.ids(),
    };
    write_line(&mut output, &FromWorker::Done(Box::new(outcome))).await
}

/// The worker's one client, ready to run, without its cell's finish (the
/// parent's), where its round trips are counted, and its journal.
async fn prepare(
    job: &WorkerJob,
) -> Result<(PreparedCell, RoundTripCounter, Arc<Journal>), BenchError> {
    let shown_uri = bakery::redact(&job.uri);
    let store = bakery::connect(&job.uri)
        .await
        .map_err(|source| BenchError::Store {
            target: shown_uri,
            source,
        })?;
    let journal = Arc::new(Journal::new(job.process, job.counter.as_deref())?);
    let workload = workloads::registry()
        .into_iter()
        .find(|w| w.name == job.workload)
        .ok_or_else(|| BenchError::Internal(format!("no workload {:?}", job.workload)))?;
    let variant = match &job.variant {
        Some(id) => workload
            .variants
            .iter()
            .find(|v| v.id == id)
            .map(|v| v.id)
            .ok_or_else(|| {
                BenchError::Internal(format!("no variant {id:?} of {}", workload.name))
            })?,
        None => "",
    };
    let spec = CellSpec {
        tag: job.tag.clone(),
        clients: 1,
        variant,
        block_size: job.block_size,
        postgres: job.postgres.clone(),
        journal: Some(journal.clone()),
    };
    let (prepared, counter) = match &job.peer {
        None => {
            let counted = Arc::new(CountingStore::new(store.clone()));
            let cell_store = CellStore {
                counted: counted.clone(),
                raw: store,
            };
            let prepared = workload.workload.setup(&cell_store, &spec).await?;
            (prepared, RoundTripCounter::Store(counted))
        }
        Some(label) => {
            let peer = peers::for_target(
                store.backend(),
                &job.uri,
                job.block_size,
                job.mariadb.as_deref(),
            )
            .into_iter()
            .find(|p| p.workload() == workload.name && p.label() == *label)
            .ok_or_else(|| BenchError::Internal(format!("no native peer {label:?}")))?;
            let sent = Arc::new(AtomicU64::new(0));
            let prepared = peer.setup(&spec, sent.clone()).await?;
            (prepared, RoundTripCounter::Native(sent))
        }
    };
    let cell = PreparedCell {
        clients: prepared.clients,
        finish: None,
    };
    Ok((cell, counter, journal))
}

/// Wait for the instant `start_ns` on [`monotonic_ns`]: asleep until just
/// before it, then awake for the last stretch.
async fn wait_until(start_ns: u64) {
    let now = monotonic_ns();
    if let Some(ahead) = start_ns.checked_sub(now) {
        let asleep = ahead.saturating_sub(1_000_000);
        if asleep > 0 {
            tokio::time::sleep(Duration::from_nanos(asleep)).await;
        }
    }
    while monotonic_ns() < start_ns {
        std::hint::spin_loop();
    }
}

async fn write_line<W: AsyncWrite + Unpin, T: Serialize>(
    output: &mut W,
    message: &T,
) -> Result<(), BenchError> {
    let mut line = serde_json::to_string(message)
        .map_err(|e| BenchError::Internal(format!("cannot encode a worker message: {e}")))?;
    line.push('\n');
    output
        .write_all(line.as_bytes())
        .await
        .and(output.flush().await)
        .map_err(|e| BenchError::Internal(format!("cannot write to the worker pipe: {e}")))
}

async fn read_line<R: AsyncBufRead + Unpin, T: for<'de> Deserialize<'de>>(
    lines: &mut Lines<R>,
    what: &str,
) -> Result<T, BenchError> {
    let line = lines
        .next_line()
        .await
        .map_err(|e| BenchError::Internal(format!("cannot read {what}: {e}")))?
        .ok_or_else(|| BenchError::Internal(format!("the pipe closed before {what}")))?;
    serde_json::from_str(&line)
        .map_err(|e| BenchError::Internal(format!("cannot parse {what}: {e}")))
}

/// One worker process, seen from the parent.
struct Running {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Running {
    /// The next message of this worker, of process index `process`: `what`
    /// (`ready`, `done`) within `timeout`, else the error `late`.
    async fn message(
        &mut self,
        process: usize,
        what: &str,
        timeout: Duration,
        late: &str,
    ) -> Result<FromWorker, BenchError> {
        tokio::time::timeout(timeout, read_line(&mut self.stdout, what))
            .await
            .map_err(|_| worker_error(process, late.into()))?
            .map_err(|e| worker_error(process, e.to_string()))
    }
}

/// Run the cell of `job` (its `process` and `counter` filled in per
/// worker) with `processes` workers started by `command`, and merge what
/// they measured; the cross-process checks' problems are errors of the
/// measurement. `holders`: how many may hold the lock at once (a lock
/// workload's). An `Err` is a cell that could not run (a worker that could
/// not start, or failed to set up; [`BenchError::Unavailable`] if the
/// workload cannot run on the store).
pub async fn measure(
    command: &WorkerCommand,
    job: &WorkerJob,
    processes: usize,
    holders: usize,
) -> Result<Measurement, BenchError> {
    let dir = tempfile::Builder::new()
        .prefix("bakery-bench-processes-")
        .tempdir()
        .map_err(|e| BenchError::Internal(format!("cannot create a temporary directory: {e}")))?;
    let counter = dir.path().join("counter");
    journal::create_counter(&counter)?;

    let mut workers = Vec::with_capacity(processes);
    for process in 0..processes {
        let mut child = tokio::process::Command::new(&command.program)
            .args(&command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| worker_error(process, format!("cannot start: {e}")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(worker_error(process, "no pipes".into()));
        };
        let mut running = Running {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        };
        let job = WorkerJob {
            process,
            counter: Some(counter.clone()),
            ..job.clone()
        };
        write_line(&mut running.stdin, &job)
            .await
            .map_err(|e| worker_error(process, e.to_string()))?;
        workers.push(running);
    }
    for (process, running) in workers.iter_mut().enumerate() {
        let message = running
            .message(process, "ready", READY_TIMEOUT, "not ready in time")
            .await?;
        match message {
            FromWorker::Ready => {}
            FromWorker::Failed {
                error,
                unavailable: true,
            } => return Err(BenchError::Unavailable(error)),
            FromWorker::Failed { error, .. } => return Err(worker_error(process, error)),
            FromWorker::Done(_) => {
                return Err(worker_error(process, "done before the start".into()))
            }
        }
    }
    let lead = START_LEAD + START_LEAD_PER_PROCESS * processes as u32;
    let start_ns = monotonic_ns() + u64::try_from(lead.as_nanos()).unwrap_or(u64::MAX);
    for (process, running) in workers.iter_mut().enumerate() {
        write_line(&mut running.stdin, &Start { start_ns })
            .await
            .map_err(|e| worker_error(process, e.to_string()))?;
    }
    let duration = Duration::from_nanos(job.duration_ns);
    let done_timeout = lead + duration * runner::MAX_EXTENSION + runner::STRAGGLER_GRACE;
    let mut outcomes = Vec::with_capacity(processes);
    for (process, running) in workers.iter_mut().enumerate() {
        let message = running
            .message(process, "done", done_timeout, "did not finish in time")
            .await?;
        match message {
            FromWorker::Done(outcome) => outcomes.push(*outcome),
            other => {
                return Err(worker_error(
                    process,
                    format!("sent {other:?} instead of done"),
                ))
            }
        }
    }
    for (process, mut running) in workers.into_iter().enumerate() {
        drop(running.stdin);
        let status = running
            .child
            .wait()
            .await
            .map_err(|e| worker_error(process, e.to_string()))?;
        if !status.success() {
            return Err(worker_error(process, format!("exited with {status}")));
        }
    }
    let counted = journal::read_counter(&counter)?;
    merge(outcomes, start_ns, holders, counted)
}

fn worker_error(process: usize, message: String) -> BenchError {
    BenchError::Worker {
        process,
        message: one_line(&message),
    }
}

/// One measurement of the workers' outcomes, the cross-process checks'
/// problems counted as its errors (the first of them its first error: a
/// violation is what a reader must see first).
fn merge(
    outcomes: Vec<WorkerOutcome>,
    start_ns: u64,
    holders: usize,
    counter: u64,
) -> Result<Measurement, BenchError> {
    let stopped_ns = outcomes
        .iter()
        .map(|o| o.stopped_ns)
        .max()
        .unwrap_or(start_ns);
    let mut latency = LatencyHistogram::new()?;
    let mut extras: BTreeMap<String, u64> = BTreeMap::new();
    let mut cell_wide: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let (mut errors, mut round_trips, mut conflicts) = (0, 0, 0);
    let mut violations_in_workers = 0;
    let mut first_error = None;
    let mut ops_per_client = Vec::with_capacity(outcomes.len());
    let mut grants = Vec::new();
    let mut ids = Vec::new();
    for outcome in outcomes {
        latency.merge(&LatencyHistogram::from_counts(&outcome.latency)?)?;
        ops_per_client.push(outcome.ops);
        errors += outcome.errors;
        violations_in_workers += outcome.violations;
        if first_error.is_none() || outcome.violations > 0 {
            first_error = outcome.first_error.or(first_error);
        }
        round_trips += outcome.round_trips;
        conflicts += outcome.conflicts;
        for (name, value) in outcome.extras {
            if CELL_WIDE.contains(&name.as_str()) {
                cell_wide.entry(name).or_default().push(value);
            } else {
                *extras.entry(name).or_insert(0) += value;
            }
        }
        grants.extend(outcome.grants);
        ids.extend(outcome.ids);
    }
    let mut problems = Vec::new();
    if !grants.is_empty() {
        problems.extend(journal::check_grants(&mut grants, holders, Some(counter)));
    } else if counter > 0 {
        problems.push(format!(
            "the shared counter reads {counter} without a grant"
        ));
    }
    // The cell-wide figures the workers reported, recomputed from every
    // process's grants: a lock's runs and hand-offs, a read-write lock's
    // most readers inside at once.
    if cell_wide.contains_key(lock::LONGEST_RUN) {
        extras.insert(lock::LONGEST_RUN.into(), journal::longest_run(&grants));
        if let Some(handoffs) = journal::handoffs(&grants)? {
            let summary = handoffs.summary();
            extras.insert(lock::HANDOFF_P50.into(), summary.p50_ns.div_ceil(1000));
            extras.insert(lock::HANDOFF_P99.into(), summary.p99_ns.div_ceil(1000));
            extras.insert(lock::HANDOFF_P50_NS.into(), summary.p50_ns);
        }
    }
    if cell_wide.contains_key(rwlock::MOST_READERS) {
        extras.insert(rwlock::MOST_READERS.into(), journal::most_shared(&grants));
    }
    if let Some(means) = cell_wide.get(lock::ROW_BYTES) {
        let count = means.len() as u64;
        extras.insert(
            lock::ROW_BYTES.into(),
            (means.iter().sum::<u64>() + count / 2) / count.max(1),
        );
    }
    problems.extend(journal::check_ids(ids));
    let mut measurement = Measurement {
        elapsed: Duration::from_nanos(stopped_ns.saturating_sub(start_ns)),
        ops: ops_per_client.iter().sum(),
        ops_per_client,
        errors,
        violations: violations_in_workers,
        first_error,
        latency,
        round_trips,
        conflicts,
        extras,
    };
    measurement.add_problems(problems);
    Ok(measurement)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ops: u64, grants: Vec<Grant>, ids: Vec<(u64, u64)>) -> WorkerOutcome {
        let mut latency = LatencyHistogram::new().expect("histogram");
        latency.record(Duration::from_micros(ops));
        WorkerOutcome {
            started_ns: 1_000,
            stopped_ns: 1_000 + ops * 1_000,
            ops,
            errors: 0,
            violations: 0,
            first_error: None,
            latency: latency.counts(),
            round_trips: 2 * ops,
            conflicts: 1,
            extras: BTreeMap::from([
                ("waits".to_string(), 1),
                (lock::ROW_BYTES.to_string(), 100),
                (lock::LONGEST_RUN.to_string(), 7),
            ]),
            grants,
            ids,
        }
    }

    fn grant(process: usize, entered_ns: u64) -> Grant {
        Grant {
            process,
            asked_ns: entered_ns - 1,
            entered_ns,
            left_ns: entered_ns + 5,
            token: Some(entered_ns),
            shared: false,
        }
    }

    #[test]
    fn outcomes_merge_into_one_measurement() {
        let merged = merge(
            vec![
                outcome(3, vec![grant(0, 10), grant(0, 30)], Vec::new()),
                outcome(1, vec![grant(1, 20)], Vec::new()),
            ],
            1_000,
            1,
            3,
        )
        .expect("merge");
        assert_eq!(merged.errors, 0, "{:?}", merged.first_error);
        assert_eq!(merged.ops_per_client, [3, 1]);
        assert_eq!(
            (merged.ops, merged.round_trips, merged.conflicts),
            (4, 8, 2)
        );
        assert_eq!(merged.elapsed, Duration::from_micros(3));
        assert_eq!(merged.latency.summary().max_ns / 1000, 3);
        assert_eq!(merged.extras["waits"], 2);
        assert_eq!(merged.extras[lock::ROW_BYTES], 100, "averaged, not summed");
        assert_eq!(merged.extras[lock::LONGEST_RUN], 1);
    }

    /// A read-write lock's cell: readers together pass, the counter
    /// counting the writer only, the most readers recomputed from the
    /// grants (not the lock's figures); a writer beside a reader fails.
    #[test]
    fn shared_grants_merge_and_a_writer_beside_a_reader_fails() {
        let reader = |process, entered_ns| Grant {
            shared: true,
            left_ns: entered_ns + 20,
            ..grant(process, entered_ns)
        };
        let with_most = |mut o: WorkerOutcome| {
            o.extras = BTreeMap::from([(rwlock::MOST_READERS.to_string(), 1)]);
            o
        };
        let merged = merge(
            vec![
                with_most(outcome(2, vec![grant(0, 10), grant(0, 100)], Vec::new())),
                with_most(outcome(1, vec![reader(1, 20)], Vec::new())),
                with_most(outcome(1, vec![reader(2, 30)], Vec::new())),
            ],
            1_000,
            1,
            2,
        )
        .expect("merge");
        assert_eq!(merged.errors, 0, "{:?}", merged.first_error);
        assert_eq!(merged.extras[rwlock::MOST_READERS], 2);
        assert!(!merged.extras.contains_key(lock::LONGEST_RUN));
        let merged = merge(
            vec![
                with_most(outcome(1, vec![grant(0, 25)], Vec::new())),
                with_most(outcome(1, vec![reader(1, 20)], Vec::new())),
            ],
            1_000,
            1,
            1,
        )
        .expect("merge");
        assert_eq!(merged.errors, 1);
        assert_first_error(&merged, "exclusion violated");
    }

    /// The cell's first error says `what`.
    fn assert_first_error(merged: &Measurement, what: &str) {
        assert!(
            merged
                .first_error
                .as_deref()
                .is_some_and(|e| e.contains(what)),
            "{:?}",
            merged.first_error
        );
    }

    /// The negative control: a lost increment and duplicate ids are
    /// errors of the cell, a violation its first error.
    #[test]
    fn violations_are_errors_of_the_cell() {
        let merged = merge(
            vec![outcome(2, vec![grant(0, 10), grant(1, 12)], Vec::new())],
            1_000,
            1,
            1,
        )
        .expect("merge");
        assert_eq!(merged.errors, 2, "overlap and a lost increment");
        assert_eq!(merged.violations, 2, "both are failed checks");
        assert_first_error(&merged, "exclusion violated");
        let merged = merge(
            vec![
                outcome(5, Vec::new(), vec![(1, 5)]),
                outcome(5, Vec::new(), vec![(5, 9)]),
            ],
            1_000,
            1,
            0,
        )
        .expect("merge");
        assert_eq!((merged.errors, merged.violations), (1, 1));
        assert_first_error(&merged, "1 ids handed out twice");
    }
}
