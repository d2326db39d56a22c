#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod builder;
mod counting;
pub mod driver;
pub mod durability;
pub mod error;
#[cfg(test)]
mod flaky;
mod key;
mod layer;
mod memory;
#[cfg(feature = "metrics")]
mod metrics;
pub mod options;
mod retry;
mod store;
pub mod uri;
pub mod watchers;

pub use bytes::Bytes;
pub use counting::{CountingStore, OpCounts};
pub use driver::Driver;
pub use error::{BoxError, Error, ErrorKind, Operation, Result, Sent};
pub use key::{validate_name, Key, MAX_KEY_LEN};
pub use layer::{StoreLayer, TracedStore};
pub use memory::MemoryStore;
#[cfg(feature = "metrics")]
pub use metrics::MetricsStore;
pub use retry::{RetryPolicy, RetryStore};
pub use store::{
    signed_version, within, Capabilities, Change, DeleteOutcome, OwnWrite, OwnWrites, PutOutcome,
    Row, Stored, Version, VersionedStore, Watch, WatchSender,
};

/// Re-exported so backend crates implement the trait with the same macro.
pub use async_trait::async_trait;
