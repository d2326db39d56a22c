//! One benchmark run: connect the targets, run every cell in order with a
//! progress bar, and gather the [`Report`].

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bakery::{CountingStore, VersionedStore};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::checks;
use super::error::BenchError;
use super::machine::Machine;
use super::peers;
use super::report::{CellResult, Implementation, Report, Settings, TargetInfo, WorkloadInfo};
use super::runner::{self, Measurement, RoundTripCounter};
use super::stats::jain_index;
use super::versions::server_version;
use super::workload::{CellSpec, CellStore, Peer, PreparedCell, Workload};

/// Everything a run needs, checked and resolved from the arguments.
pub struct Plan {
    /// Workloads to run, in order.
    pub workloads: Vec<Box<dyn Workload>>,
    /// Store URIs, in order (the defaults already filled in).
    pub uris: Vec<String>,
    /// Client counts.
    pub clients: Vec<usize>,
    /// Timed part of each cell.
    pub duration: Duration,
    /// Sequence block size.
    pub block_size: u64,
    /// The command line, passwords hidden.
    pub command: String,
    /// Keeps the default SQLite file's directory until the run is over.
    pub scratch: Option<tempfile::TempDir>,
}

/// A store being measured.
struct Target {
    label: String,
    backend: &'static str,
    shown_uri: String,
    store: Arc<dyn VersionedStore>,
    peers: Vec<Box<dyn Peer>>,
}

/// What a cell measures.
enum Subject<'a> {
    /// A workload variant through bakery.
    Bakery {
        workload: &'a dyn Workload,
        variant: super::workload::Variant,
    },
    /// A native peer.
    Native {
        workload: &'a dyn Workload,
        peer: &'a dyn Peer,
    },
}

impl Subject<'_> {
    fn workload_name(&self) -> &'static str {
        match self {
            Subject::Bakery { workload, .. } | Subject::Native { workload, .. } => workload.name(),
        }
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
                    workload.prepare(&store, spec).await,
                    RoundTripCounter::Store(counted),
                )
            }
            Subject::Native { peer, .. } => {
                let sent = Arc::new(AtomicU64::new(0));
                (
                    peer.prepare(spec, sent.clone()).await,
                    RoundTripCounter::Native(sent),
                )
            }
        }
    }
}

/// Run `plan` and gather its report.
pub async fn execute(plan: Plan) -> Result<Report, BenchError> {
    let started_at = now_rfc3339();
    let progress = ClearOnDrop(progress_bar());

    let mut targets = Vec::with_capacity(plan.uris.len());
    for uri in &plan.uris {
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
            shown_uri,
            peers: peers::for_target(backend, uri, plan.block_size),
            store,
        });
    }
    number_duplicate_labels(&mut targets);

    let mut target_infos = Vec::with_capacity(targets.len());
    for (target, uri) in targets.iter().zip(&plan.uris) {
        progress.set_message(format!("asking {} for its version", target.label));
        target_infos.push(TargetInfo {
            label: target.label.clone(),
            backend: target.backend.to_string(),
            uri: target.shown_uri.clone(),
            version: server_version(target.backend, uri).await,
        });
    }

    // Every cell, in table order: per workload, per target, its variants
    // then its native peers, each at every client count.
    let mut cells: Vec<(&Target, Subject<'_>, usize)> = Vec::new();
    for workload in &plan.workloads {
        for target in &targets {
            for &variant in workload.variants() {
                for &clients in &plan.clients {
                    let subject = Subject::Bakery {
                        workload: workload.as_ref(),
                        variant,
                    };
                    cells.push((target, subject, clients));
                }
            }
            for peer in target
                .peers
                .iter()
                .filter(|p| p.workload() == workload.name())
            {
                for &clients in &plan.clients {
                    let subject = Subject::Native {
                        workload: workload.as_ref(),
                        peer: peer.as_ref(),
                    };
                    cells.push((target, subject, clients));
                }
            }
        }
    }

    show_cells(&progress, cells.len());
    let run_id = run_id();
    let mut results = Vec::with_capacity(cells.len());
    for (index, (target, subject, clients)) in cells.iter().enumerate() {
        let spec = CellSpec {
            tag: format!("{run_id}-{index}"),
            clients: *clients,
            variant: subject.variant_id(),
            block_size: plan.block_size,
        };
        let label = subject.label();
        progress.set_message(format!(
            "{} · {} · {label} · {clients} clients",
            subject.workload_name(),
            target.label
        ));
        let (prepared, counter) = subject.prepare(target, &spec).await;
        // A cell that cannot be set up (a peer refused by the server, …) is
        // reported as a failed cell; the other cells still run.
        let measured = match prepared {
            Ok(prepared) => runner::measure(prepared, &counter, plan.duration).await?,
            Err(err) => Measurement::failed(err.to_string())?,
        };
        results.push(cell_result(subject, target, label, *clients, measured));
        progress.inc(1);
    }
    drop(progress);
    drop(cells);
    drop(targets);
    // The default SQLite file goes only now that its store is closed.
    drop(plan.scratch);

    let checks = checks::evaluate(&results);
    Ok(Report {
        schema: super::report::SCHEMA,
        bakery_version: env!("CARGO_PKG_VERSION"),
        command: plan.command.clone(),
        started_at,
        finished_at: now_rfc3339(),
        machine: Machine::detect(),
        settings: Settings {
            workloads: plan
                .workloads
                .iter()
                .map(|w| w.name().to_string())
                .collect(),
            clients: plan.clients.clone(),
            duration_ms: u64::try_from(plan.duration.as_millis()).unwrap_or(u64::MAX),
            block_size: plan.block_size,
            prefetch: true,
            warmup_ops_per_client: 1,
            runtime_worker_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            latency_unit: "ns",
        },
        targets: target_infos,
        workloads: plan
            .workloads
            .iter()
            .map(|w| WorkloadInfo {
                name: w.name().to_string(),
                title: w.title(plan.block_size),
                unit: w.unit().to_string(),
                extra_columns: w.extra_columns().iter().map(|c| c.to_string()).collect(),
            })
            .collect(),
        results,
        checks,
    })
}

fn cell_result(
    subject: &Subject<'_>,
    target: &Target,
    label: String,
    clients: usize,
    m: Measurement,
) -> CellResult {
    let variant = match subject {
        Subject::Bakery { variant, .. } => variant.id.to_string(),
        Subject::Native { .. } => label.clone(),
    };
    let seconds = m.elapsed.as_secs_f64();
    let per_op = |count: u64| (m.ops > 0).then(|| count as f64 / m.ops as f64);
    let shares: Vec<f64> = m.ops_per_client.iter().map(|&n| n as f64).collect();
    CellResult {
        workload: subject.workload_name().to_string(),
        target: target.label.clone(),
        backend: target.backend.to_string(),
        implementation: subject.implementation(),
        variant,
        label,
        clients,
        elapsed_s: seconds,
        ops: m.ops,
        ops_per_sec: if seconds > 0.0 {
            m.ops as f64 / seconds
        } else {
            0.0
        },
        latency: m.latency.summary(),
        distribution: m.latency.distribution(),
        round_trips: m.round_trips,
        round_trips_per_op: per_op(m.round_trips),
        conflicts: m.conflicts,
        conflicts_per_op: per_op(m.conflicts),
        errors: m.errors,
        first_error: m.first_error,
        fairness: jain_index(&shares),
        extras: m.extras,
    }
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
/// stderr is not a terminal (pipes, CI logs, tests).
fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
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
