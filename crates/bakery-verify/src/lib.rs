#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod checks;
pub mod faulty;
pub mod history;
pub mod linearizability;
pub mod workload;

pub use faulty::{Fault, FaultyStore};
pub use history::{History, RecordingStore};
pub use workload::{verify, Config, Report, Status, CHECKS};

/// Why a verification could not run. Store errors met by the workloads are
/// results (counted and checked), not errors; these are about the run
/// itself.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::MemoryStore;
/// use bakery_verify::{verify, Config, VerifyError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let config = Config { clients: 0, ..Config::default() };
/// let err = verify(Arc::new(MemoryStore::new()), &config).await.unwrap_err();
/// assert!(matches!(err, VerifyError::Config(_)));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The configuration cannot be run.
    #[error("bad verify configuration: {0}")]
    Config(String),
    /// A name or key built from the configuration was refused, or a recipe
    /// could not be set up.
    #[error(transparent)]
    Store(#[from] bakery_core::Error),
    /// A workload client task panicked or was cancelled.
    #[error("a workload client task failed: {0}")]
    Task(String),
}
