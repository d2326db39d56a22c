#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod config;
mod durability;
mod error;
mod store;

pub use config::{
    MysqlConfig, TableName, CLIENT_GRACE, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE,
    DEFAULT_TABLE, DEFAULT_TIMEOUT, MAX_POOL_SIZE,
};
pub use store::MysqlStore;

/// The driver this backend is built on, re-exported so benchmarks and
/// advanced users can issue raw statements with the same version.
pub use mysql_async;

/// The URI schemes this backend answers to.
pub const SCHEMES: &[&str] = &["mysql", "mariadb"];

/// The backend name carried by every error of this crate.
pub(crate) const BACKEND: &str = "mysql";

bakery_core::driver!("mysql", MysqlStore, ["mysql", "mariadb"]);
