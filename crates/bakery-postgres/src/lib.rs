#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod config;
mod durability;
mod error;
mod notify;
mod store;

pub use config::{
    PostgresConfig, RootCert, SslMode, TableName, CLIENT_GRACE, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_POOL_SIZE, DEFAULT_TABLE, DEFAULT_TIMEOUT, MAX_POOL_SIZE,
};
pub use error::client_error;
pub use store::PostgresStore;

/// The driver this backend is built on, re-exported so benchmarks and
/// advanced users can issue raw statements with the same version.
pub use tokio_postgres;

/// The URI schemes this backend answers to.
pub const SCHEMES: &[&str] = &["postgres", "postgresql"];

/// The backend name carried by every error of this crate.
pub(crate) const BACKEND: &str = "postgres";

bakery_core::driver!("postgres", PostgresStore, ["postgres", "postgresql"]);
