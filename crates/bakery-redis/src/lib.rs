#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]

mod config;
mod durability;
mod error;
mod notify;
mod store;

pub use config::{
    CasStrategy, RedisConfig, DEFAULT_POOL_SIZE, DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_TIMEOUT,
    MAX_POOL_SIZE, MAX_PREFIX_LEN, MAX_TIMEOUT, MAX_WAIT_REPLICAS,
};
pub use store::RedisStore;

/// The driver this backend is built on, re-exported so benchmarks and
/// advanced users can issue raw commands with the same version.
pub use redis;

/// The URI schemes this backend answers to: `redis`, and `rediss` (TLS) when
/// the `tls` feature (on by default) is enabled.
#[cfg(feature = "tls")]
pub const SCHEMES: &[&str] = &["redis", "rediss"];

/// The URI schemes this backend answers to: `redis` only, because this build
/// has the `tls` feature off (no `rediss`).
#[cfg(not(feature = "tls"))]
pub const SCHEMES: &[&str] = &["redis"];

/// The backend name carried by every error of this crate.
const BACKEND: &str = "redis";

bakery_core::driver!("redis", RedisStore, ["redis", "rediss"]);
