//! What can stop a benchmark run, and the one-line form of every message.

use std::path::PathBuf;

/// Everything that stops a benchmark run (as opposed to an operation that
/// fails inside a cell, which is counted in the cell's `errors`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A store named by the plan could not be opened. `target` is the URI
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
    #[error("native peer {peer}: {message}")]
    Peer {
        /// The peer's label, e.g. `postgres nextval()`.
        peer: String,
        /// What went wrong, one line, without secrets.
        message: String,
    },
    /// A workload cannot run on a target (it needs a PostgreSQL source the
    /// plan does not have, a server setting, a cargo feature): its cells
    /// there are skipped and the reason printed — not an error of the run.
    #[error("{0}")]
    Unavailable(String),
    /// The plan named a workload this build does not have.
    #[error("unknown workload {name:?}; available: {available}")]
    UnknownWorkload {
        /// The requested workload.
        name: String,
        /// The workloads this build runs.
        available: String,
    },
    /// Writing a result file failed.
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
    /// The benchmark's own machinery failed (runtime, a task that died, a
    /// temporary directory that cannot be created).
    #[error("{0}")]
    Internal(String),
    /// `--processes` with a store only one process can reach.
    #[error(
        "{uri} is a store of one process: cells across processes need a store their \
         processes share (sqlite://, postgres://, …)"
    )]
    NotShared {
        /// The store's URI, password hidden.
        uri: String,
    },
    /// A worker process of a cell across processes failed or broke its
    /// protocol.
    #[error("worker process {process}: {message}")]
    Worker {
        /// Its index in the cell.
        process: usize,
        /// What went wrong, one line.
        message: String,
    },
}

/// Fold line breaks and runs of spaces, so every diagnostic stays on one line.
pub use bakery_core::error::one_line;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line() {
        assert_eq!(one_line("a\nb\r\n  c  \n"), "a b c");
        let err = BenchError::Peer {
            peer: "redis INCRBY".into(),
            message: one_line("cannot\nconnect"),
        };
        assert_eq!(err.to_string(), "native peer redis INCRBY: cannot connect");
    }
}
