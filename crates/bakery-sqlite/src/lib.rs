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

/// This backend as the facade's `connect` picks it: by a URI of one of its
/// schemes.
pub const DRIVER: bakery_core::Driver = bakery_core::Driver {
    name: "sqlite",
    schemes: SCHEMES,
    parsed_schemes: &["sqlite"],
    connect,
};

fn connect(uri: &str) -> bakery_core::driver::Connecting<'_> {
    bakery_core::driver::boxed(SqliteStore::connect(uri))
}
