//! The results of a run, and every form they are shown in: console tables,
//! JSON, SVG charts and the Markdown report.
//!
//! The [`Report`] is the single source; each output renders from it, so the
//! console, the JSON and the Markdown never disagree.

pub mod format;
pub mod json;
pub mod markdown;
pub mod svg;
pub mod table;

use std::collections::BTreeMap;

use serde::Serialize;

use super::checks::Check;
use super::machine::Machine;
use super::stats::{LatencySummary, QuantilePoint};

/// The version of the JSON layout; bumped when a field changes meaning or
/// goes away (new fields may appear without a bump).
pub const SCHEMA: &str = "bakery-bench/1";

/// Everything one `bakery bench` run measured, and under which conditions.
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
    /// Timed part of each cell, in milliseconds.
    pub duration_ms: u64,
    /// Sequence block size (and CACHE of the cached `nextval()` peer).
    pub block_size: u64,
    /// Background prefetch of sequences (always on in `bakery bench`).
    pub prefetch: bool,
    /// Untimed operations each client does before a cell's timed part.
    pub warmup_ops_per_client: u32,
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
}

/// Who implemented the operation of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Implementation {
    /// A bakery recipe or the primitive, on a bakery store.
    Bakery,
    /// A native peer through the raw driver.
    Native,
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
    /// Concurrent clients.
    pub clients: usize,
    /// Seconds from the start to the last client's stop.
    pub elapsed_s: f64,
    /// Successful operations (ids for `sequence`).
    pub ops: u64,
    /// `ops / elapsed_s`.
    pub ops_per_sec: f64,
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
    /// The first error message, if any.
    pub first_error: Option<String>,
    /// Jain's index of the per-client operation counts (1 = even).
    pub fairness: Option<f64>,
    /// The workload's extra counters (`waits`, `reservations`, …).
    pub extras: BTreeMap<String, u64>,
}

impl Report {
    /// The cells of `workload`, in run order.
    pub fn cells<'a>(&'a self, workload: &'a str) -> impl Iterator<Item = &'a CellResult> + 'a {
        self.results.iter().filter(move |r| r.workload == workload)
    }

    /// How many cells saw errors.
    pub fn cells_with_errors(&self) -> usize {
        self.results.iter().filter(|r| r.errors > 0).count()
    }
}

impl CellResult {
    /// The name of the series this cell belongs to in a chart:
    /// `target · implementation label`.
    pub fn series(&self) -> String {
        format!("{} · {}", self.target, self.label)
    }
}
