#![doc = include_str!("../docs.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod durability;
mod error;
mod store;

pub use config::{DynamoConfig, DEFAULT_TABLE, DEFAULT_TIMEOUT, MAX_TIMEOUT, TABLE_WAIT};
pub use store::{DynamoStore, KEY_ATTR, VALUE_ATTR, VERSION_ATTR};

/// The SDK this backend is built on, re-exported so benchmarks, tests and
/// advanced users can issue raw requests with the same version.
pub use aws_sdk_dynamodb;

/// The URI schemes this backend answers to: `dynamodb`.
pub const SCHEMES: &[&str] = &["dynamodb"];

/// The backend name carried by every error of this crate.
const BACKEND: &str = "dynamodb";

bakery_core::driver!("dynamodb", DynamoStore, ["dynamodb"]);
