#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod durability;
mod error;
mod store;

pub use config::{
    CasStrategy, MongoConfig, ALLOW_UNPROVEN_UPDATE, DEFAULT_COLLECTION, DEFAULT_DATABASE,
    DEFAULT_TIMEOUT, MAX_COLLECTION_LEN, MAX_TIMEOUT,
};
pub use store::{MongoStore, ServerInfo, ServerKind, LAYOUT_ID};

/// The driver this backend is built on, re-exported so benchmarks, tests and
/// advanced users can issue raw commands with the same version.
pub use mongodb;

/// The URI schemes this backend answers to: `mongodb`, and `mongodb+srv`
/// (DNS seed lists) when the `srv` feature is enabled.
#[cfg(feature = "srv")]
pub const SCHEMES: &[&str] = &["mongodb", "mongodb+srv"];

/// The URI schemes this backend answers to: `mongodb` only, because this
/// build has the `srv` feature off (no `mongodb+srv`, which needs a DNS
/// resolver).
#[cfg(not(feature = "srv"))]
pub const SCHEMES: &[&str] = &["mongodb"];

/// The backend name carried by every error of this crate.
const BACKEND: &str = "mongodb";

bakery_core::driver!("mongodb", MongoStore, ["mongodb", "mongodb+srv"]);
