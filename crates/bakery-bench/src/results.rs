//! The results of a run as data: the [`Report`] every output renders from
//! (console tables, JSON, SVG, Markdown), built from a
//! [`Run`] by [`Report::from_run`]; and the types of
//! the target checks, which [`checks`](crate::checks) fills in.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::machine::Machine;
pub use crate::model::{Implementation, Skipped};
use crate::session::{CellRun, Run};
use crate::stats::{jain_index, LatencySummary, QuantilePoint};

/// The version of the JSON layout; bumped when a field changes meaning or
/// goes away (new fields may appear without a bump).
pub const SCHEMA: &str = "bakery-bench/1";

/// Everything one run measured, and under which conditions.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The version of bakery that ran.
    pub bakery_version: &'static str,
    /// The command line, passwords hidden.
    pub command: String,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// When it ended.
    pub finished_at: String,
    /// The machine.
    pub machine: Machine,
    /// The settings used.
    pub settings: Settings,
    /// The stores measured, with their server versions.
    pub targets: Vec<TargetInfo>,
    /// The workloads run, in order.
    pub workloads: Vec<WorkloadInfo>,
    /// One entry per cell.
    pub results: Vec<CellResult>,
    /// The workloads that could not run on a target, and why.
    pub skipped: Vec<Skipped>,
    /// The performance targets, met or not.
    pub checks: Vec<Check>,
}

/// How the run was set up.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Workloads run.
    pub workloads: Vec<String>,
    /// Client counts, each its own cell.
    pub clients: Vec<usize>,
    /// Process counts of the cells across processes (a client per OS
    /// process), each its own cell; empty when none ran.
    pub processes: Vec<usize>,
    /// Timed part of each cell, in milliseconds.
    pub duration_ms: u64,
    /// How many times each cell ran, in interleaved rounds; its figures
    /// are those of its median round (by operations/s).
    pub rounds: usize,
    /// Sequence block size (and CACHE of the cached `nextval()` peer).
    pub block_size: u64,
    /// Background prefetch of sequences (always on).
    pub prefetch: bool,
    /// Untimed operations each client does before a cell's timed part.
    pub warmup_ops_per_client: u32,
    /// How far past its duration a cell may run to reach its workload's
    /// `min_ops_per_client`, as a multiple of the duration.
    pub max_extension: u32,
    /// Worker threads of the async runtime the clients run on.
    pub runtime_worker_threads: usize,
    /// Unit of every latency figure.
    pub latency_unit: &'static str,
}

/// One store measured.
#[derive(Debug, Clone, Serialize)]
pub struct TargetInfo {
    /// The name tables use (the backend, numbered if it appears twice).
    pub label: String,
    /// The backend (`VersionedStore::backend`).
    pub backend: String,
    /// Its URI, password hidden.
    pub uri: String,
    /// The server (or library) version.
    pub version: String,
}

/// A workload that ran.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadInfo {
    /// `cas`, `sequence`, …
    pub name: String,
    /// The heading of its table.
    pub title: String,
    /// What an operation produces (`ops`, `ids`).
    pub unit: String,
    /// Its extra counters, in column order.
    pub extra_columns: Vec<String>,
    /// The operations per client (on average) its cells ran to, past the
    /// duration if need be (0: the duration alone).
    pub min_ops_per_client: u64,
}

/// One cell: a workload variant or peer, on one target, with N clients.
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    /// The workload.
    pub workload: String,
    /// The target label.
    pub target: String,
    /// The target's backend.
    pub backend: String,
    /// Bakery or native.
    pub implementation: Implementation,
    /// The variant id (`shared-key`, `next`) or, for a peer, its label.
    pub variant: String,
    /// What the table shows (`put_if_version, shared key`, `nextval()`).
    pub label: String,
    /// Concurrent clients (processes, across processes).
    pub clients: usize,
    /// Whether each client ran in an OS process of its own (the `across
    /// processes` tables) rather than as a task of the bench's process.
    pub across_processes: bool,
    /// Seconds from the start to the last client's stop.
    pub elapsed_s: f64,
    /// Successful operations (ids for `sequence`).
    pub ops: u64,
    /// `ops / elapsed_s`.
    pub ops_per_sec: f64,
    /// Operations/s of every round, in round order (the figures above are
    /// the median round's; its errors are every round's).
    pub rounds_ops_per_sec: Vec<f64>,
    /// Latency of the successful operations, nanoseconds.
    pub latency: LatencySummary,
    /// Latency at increasing quantiles, for the distribution charts.
    pub distribution: Vec<QuantilePoint>,
    /// Store round trips (bakery: every get/put/delete, counted by a
    /// `CountingStore`, background prefetches included; native: requests).
    pub round_trips: u64,
    /// `round_trips / ops`.
    pub round_trips_per_op: Option<f64>,
    /// Conditional writes that met another version (and were retried).
    pub conflicts: u64,
    /// `conflicts / ops`.
    pub conflicts_per_op: Option<f64>,
    /// Failed operations and failed checks (warm-up included).
    pub errors: u64,
    /// Of those, failed checks: overlapping grants, duplicate ids, a
    /// count that disagrees with what applied (a broken guarantee).
    #[serde(default)]
    pub violations: u64,
    /// The first error message, if any.
    pub first_error: Option<String>,
    /// Jain's index of the per-client operation counts (1 = even).
    pub fairness: Option<f64>,
    /// The workload's extra counters (`waits`, `reservations`, …).
    pub extras: BTreeMap<String, u64>,
}

impl Report {
    /// The cells of `workload` in one process, in run order.
    pub fn cells<'a>(&'a self, workload: &'a str) -> impl Iterator<Item = &'a CellResult> + 'a {
        self.results
            .iter()
            .filter(move |r| r.workload == workload && !r.across_processes)
    }

    /// The cells of `workload` across processes, in run order.
    pub fn cells_across_processes<'a>(
        &'a self,
        workload: &'a str,
    ) -> impl Iterator<Item = &'a CellResult> + 'a {
        self.results
            .iter()
            .filter(move |r| r.workload == workload && r.across_processes)
    }

    /// How many cells saw errors.
    pub fn cells_with_errors(&self) -> usize {
        self.results.iter().filter(|r| r.errors > 0).count()
    }

    /// How many cells failed a check ([`CellResult::violations`]).
    pub fn cells_with_violations(&self) -> usize {
        self.results.iter().filter(|r| r.violations > 0).count()
    }
}

impl CellResult {
    /// The name of the series this cell belongs to in a chart:
    /// `target · implementation label`.
    pub fn series(&self) -> String {
        if self.across_processes {
            format!("{} · {} (processes)", self.target, self.label)
        } else {
            format!("{} · {}", self.target, self.label)
        }
    }
}

impl Report {
    /// The report of `run`, its [`checks`](Report::checks) still empty
    /// ([`checks::evaluate`](crate::checks::evaluate) fills them in).
    pub fn from_run(run: Run) -> Report {
        let Run {
            workloads,
            clients,
            processes,
            duration,
            rounds,
            block_size,
            command,
            started_at,
            finished_at,
            machine,
            targets,
            cells,
            skipped,
        } = run;
        Report {
            schema: SCHEMA,
            bakery_version: env!("CARGO_PKG_VERSION"),
            command,
            started_at,
            finished_at,
            machine,
            settings: Settings {
                workloads: workloads.iter().map(|w| w.name.to_string()).collect(),
                clients,
                processes,
                duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
                rounds,
                block_size,
                prefetch: true,
                warmup_ops_per_client: 1,
                max_extension: crate::runner::MAX_EXTENSION,
                // The runtime's own count (set by the caller, or by
                // TOKIO_WORKER_THREADS), not the machine's cores.
                runtime_worker_threads: tokio::runtime::Handle::try_current().map_or_else(
                    |_| std::thread::available_parallelism().map_or(1, |n| n.get()),
                    |runtime| runtime.metrics().num_workers(),
                ),
                latency_unit: "ns",
            },
            targets: targets
                .into_iter()
                .map(|t| TargetInfo {
                    label: t.label,
                    backend: t.backend.to_string(),
                    uri: t.uri,
                    version: t.version,
                })
                .collect(),
            workloads: workloads
                .iter()
                .map(|w| WorkloadInfo {
                    name: w.name.to_string(),
                    title: w.title_for(block_size),
                    unit: w.unit.to_string(),
                    extra_columns: w.extra_columns.iter().map(|c| c.to_string()).collect(),
                    min_ops_per_client: w.min_ops_per_client,
                })
                .collect(),
            results: cells.into_iter().map(CellResult::from_run).collect(),
            skipped,
            checks: Vec::new(),
        }
    }
}

impl CellResult {
    /// The figures of one cell that ran.
    fn from_run(cell: CellRun) -> CellResult {
        let m = cell.measurement;
        let seconds = m.elapsed.as_secs_f64();
        let per_op = |count: u64| (m.ops > 0).then(|| count as f64 / m.ops as f64);
        let shares: Vec<f64> = m.ops_per_client.iter().map(|&n| n as f64).collect();
        CellResult {
            workload: cell.workload.to_string(),
            target: cell.target,
            backend: cell.backend.to_string(),
            implementation: cell.implementation,
            variant: cell.variant,
            label: cell.label,
            clients: cell.clients,
            across_processes: cell.across_processes,
            elapsed_s: seconds,
            ops: m.ops,
            ops_per_sec: m.ops_per_sec(),
            rounds_ops_per_sec: cell.round_rates,
            latency: m.latency.summary(),
            distribution: m.latency.distribution(),
            round_trips: m.round_trips,
            round_trips_per_op: per_op(m.round_trips),
            conflicts: m.conflicts,
            conflicts_per_op: per_op(m.conflicts),
            errors: m.errors,
            violations: m.violations,
            first_error: m.first_error,
            fairness: jain_index(&shares),
            extras: m.extras,
        }
    }
}

/// The outcome of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Met in every measured cell.
    Met,
    /// Missed in at least one cell.
    NotMet,
    /// This run had nothing to compare (e.g. no postgres URI).
    NotMeasured,
    /// Measured by the criterion suite, not by a run.
    SeeCriterion,
}

impl CheckStatus {
    /// `met`, `not met`, `not measured`, `criterion`.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Met => "met",
            CheckStatus::NotMet => "not met",
            CheckStatus::NotMeasured => "not measured",
            CheckStatus::SeeCriterion => "criterion",
        }
    }
}

/// One target and how the run did against it.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable id.
    pub id: &'static str,
    /// The target, in words.
    pub target: String,
    /// Met, not met, …
    pub status: CheckStatus,
    /// One line: the worst case, or why it was not measured.
    pub summary: String,
    /// One entry per compared cell.
    pub cells: Vec<CheckCell>,
}

/// One compared cell.
#[derive(Debug, Clone, Serialize)]
pub struct CheckCell {
    /// The target label.
    pub target: String,
    /// Clients.
    pub clients: usize,
    /// The measured ratio.
    pub ratio: f64,
    /// The same ratio in each round (both cells' figures from one round),
    /// when the run had more than one: the spread the noise of the
    /// machine puts on `ratio`. Empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub round_ratios: Vec<f64>,
    /// Whether it meets the target.
    pub met: bool,
}
