#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod config;
mod durability;
mod error;
mod retry;
mod store;

pub use config::{
    CassandraConfig, Consistency, Replication, Serial, DEFAULT_KEYSPACE, DEFAULT_PORT,
    DEFAULT_TABLE, DEFAULT_TIMEOUT, MAX_NAME_LEN,
};
pub use store::CassandraStore;

/// The driver this backend is built on, re-exported so tests, benchmarks and
/// advanced users can issue raw statements with the same version.
pub use scylla;

/// The URI schemes this backend answers to. Both mean the same thing; the
/// server kind (Apache Cassandra or ScyllaDB) is detected on open.
pub const SCHEMES: &[&str] = &["cassandra", "scylla"];

/// The backend name carried by every error of this crate.
pub(crate) const BACKEND: &str = "cassandra";

bakery_core::driver!("cassandra", CassandraStore, ["cassandra", "scylla"]);
