#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod config;
mod durability;
mod error;
mod store;

pub use config::{
    EtcdConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_TIMEOUT,
    MAX_PREFIX_LEN,
};
pub use store::EtcdStore;

/// The driver this backend is built on, re-exported so benchmarks and
/// advanced users can issue raw requests with the same version.
pub use etcd_client;

/// The URI schemes this backend answers to. (No `etcds`: this crate does not
/// build a TLS stack; see the crate docs.)
pub const SCHEMES: &[&str] = &["etcd"];

/// The backend name carried by every error of this crate.
pub(crate) const BACKEND: &str = "etcd";

bakery_core::driver!("etcd", EtcdStore, ["etcd"]);
