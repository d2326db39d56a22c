#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod durability;
mod error;
mod store;

pub use config::{DynamoConfig, DEFAULT_TABLE, DEFAULT_TIMEOUT, MAX_TIMEOUT, TABLE_WAIT};
pub use store::DynamoStore;

/// The partition key attribute of bakery's items: the row's key (a
/// string), the table's only key.
pub const KEY_ATTR: &str = "k";
/// The version attribute (a number); a tombstone keeps it.
pub const VERSION_ATTR: &str = "ver";
/// The value attribute (binary); absent in a tombstone.
pub const VALUE_ATTR: &str = "v";

/// The SDK this backend is built on, re-exported so benchmarks, tests and
/// advanced users can issue raw requests with the same version.
pub use aws_sdk_dynamodb;

/// The URI schemes this backend answers to: `dynamodb`.
pub const SCHEMES: &[&str] = &["dynamodb"];

/// The backend name carried by every error of this crate.
const BACKEND: &str = "dynamodb";

bakery_core::driver!("dynamodb", DynamoStore, ["dynamodb"]);
