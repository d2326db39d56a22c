//! What can stop `bakery bench`.

use std::path::PathBuf;

use crate::output::CliError;

/// Everything that stops a benchmark run (as opposed to an operation that
/// fails inside a cell, which is counted in the cell's `errors`).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A store named by `--uri` could not be opened. `target` is the URI
    /// with any password hidden.
    #[error("{source} (store {target})")]
    Store {
        /// The redacted URI.
        target: String,
        /// Why it failed.
        source: bakery::Error,
    },
    /// A workload could not set up a cell on a store (create keys, build a
    /// sequence handle).
    #[error("{workload} on {target}: cannot prepare: {source}")]
    Prepare {
        /// The workload.
        workload: &'static str,
        /// The target label.
        target: String,
        /// Why it failed.
        source: bakery::Error,
    },
    /// A native peer (PostgreSQL `nextval()`, Redis `INCRBY`, …) could not
    /// connect or set up its objects.
    #[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
    #[error("native peer {peer}: {message}")]
    Peer {
        /// The peer's label, e.g. `postgres nextval()`.
        peer: String,
        /// What went wrong, one line, without secrets.
        message: String,
    },
    /// `--workload` named a workload this build does not have yet.
    #[error("the {name} workload is not available yet (it comes with the {name} recipe); available: {available}")]
    NotAvailable {
        /// The requested workload.
        name: &'static str,
        /// The workloads this build runs.
        available: String,
    },
    /// Writing a result file under `--out` failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Drawing a chart failed.
    #[error("cannot draw {}: {message}", path.display())]
    Chart {
        /// The SVG file.
        path: PathBuf,
        /// What plotters reported.
        message: String,
    },
    /// The benchmark ran and its results were printed, but some cells saw
    /// failed operations: the run is not a clean measurement.
    #[error("{cells} of the measured cells had errors (see the `errors` column{})", match written { Some(dir) => format!("; results written to {}", dir.display()), None => String::new() })]
    CellsHadErrors {
        /// How many cells had errors.
        cells: usize,
        /// Where the results were written, if `--out` was given.
        written: Option<PathBuf>,
    },
    /// The benchmark's own machinery failed (runtime, a task that died).
    #[error("{0}")]
    Internal(String),
}

impl From<BenchError> for CliError {
    fn from(err: BenchError) -> Self {
        match err {
            BenchError::Store { target, source } => {
                CliError::with_context(source, format!("store {target}"))
            }
            other => CliError::Message(other.to_string()),
        }
    }
}
