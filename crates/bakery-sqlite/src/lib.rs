#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod config;
mod durability;
mod error;
mod notify;
mod rows;
mod store;

pub use config::{
    Location, SqliteConfig, Synchronous, DEFAULT_BUSY_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_TABLE,
    MAX_POOL_SIZE,
};
pub use store::SqliteStore;

/// The URI schemes this backend answers to.
pub const SCHEMES: &[&str] = &["sqlite"];

/// The backend name carried by every error of this crate.
pub(crate) const BACKEND: &str = "sqlite";

bakery_core::driver!("sqlite", SqliteStore, ["sqlite"]);
