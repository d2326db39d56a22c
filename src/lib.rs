#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::Arc;

pub use bakery_core::{
    validate_name, Bytes, Capabilities, CountingStore, DeleteOutcome, Error, ErrorKind, Key,
    MemoryStore, OpCounts, PutOutcome, Result, Row, Version, VersionedStore, Watch, WatchSender,
};
pub use bakery_recipes::fence::{self, Fenced, FencedRead, FencedValue, FencedWrite};
pub use bakery_recipes::lamport;
pub use bakery_recipes::lock::{self, Lock, LockBuilder, LockGuard, LockState, LostReason};
pub use bakery_recipes::old_lock::{self, OldLock};
pub use bakery_recipes::sequence::{self, IdBatch, Sequence, SequenceBuilder, SequenceState};
pub use bakery_recipes::time::{self, TimeService};

/// The backend crates compiled into this build, for direct use of their
/// configuration types.
pub mod backends {
    #[cfg(feature = "cassandra")]
    pub use bakery_cassandra as cassandra;
    #[cfg(feature = "etcd")]
    pub use bakery_etcd as etcd;
    #[cfg(feature = "mongodb")]
    pub use bakery_mongodb as mongodb;
    #[cfg(feature = "postgres")]
    pub use bakery_postgres as postgres;
    #[cfg(feature = "redis")]
    pub use bakery_redis as redis;
    #[cfg(feature = "sqlite")]
    pub use bakery_sqlite as sqlite;
}

/// URI schemes this build understands, backend by backend.
///
/// ```
/// assert!(bakery::schemes().contains(&"memory"));
/// ```
pub fn schemes() -> Vec<&'static str> {
    #[cfg_attr(not(feature = "all-backends"), allow(unused_mut))]
    let mut all = vec!["memory"];
    #[cfg(feature = "sqlite")]
    all.extend_from_slice(bakery_sqlite::SCHEMES);
    #[cfg(feature = "postgres")]
    all.extend_from_slice(bakery_postgres::SCHEMES);
    #[cfg(feature = "redis")]
    all.extend_from_slice(bakery_redis::SCHEMES);
    #[cfg(feature = "etcd")]
    all.extend_from_slice(bakery_etcd::SCHEMES);
    #[cfg(feature = "mongodb")]
    all.extend_from_slice(bakery_mongodb::SCHEMES);
    #[cfg(feature = "cassandra")]
    all.extend_from_slice(bakery_cassandra::SCHEMES);
    all
}

/// Every scheme bakery knows, with the cargo feature that enables it.
const KNOWN: &[(&str, &str)] = &[
    ("memory", "(always)"),
    ("sqlite", "sqlite"),
    ("postgres", "postgres"),
    ("postgresql", "postgres"),
    ("redis", "redis"),
    ("rediss", "redis"),
    ("etcd", "etcd"),
    ("mongodb", "mongodb"),
    ("cassandra", "cassandra"),
    ("scylla", "cassandra"),
];

/// Open the store a URI names, picking the backend by scheme.
///
/// - `memory://` — [`MemoryStore`], in this process only;
/// - `sqlite://PATH` (`sqlite:///abs/path.db`, `sqlite://relative.db`,
///   `sqlite::memory:`) — the embedded default (feature `sqlite`).
///
/// A scheme whose feature is off gives an [`ErrorKind::Config`] error that
/// names the schemes compiled in.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery::Result<()> {
/// let store = bakery::connect("memory://").await?;
/// assert_eq!(store.backend(), "memory");
///
/// let err = bakery::connect("nosuch://x").await.unwrap_err();
/// assert_eq!(err.kind(), bakery::ErrorKind::Config);
/// # Ok(()) }
/// ```
pub async fn connect(uri: &str) -> Result<Arc<dyn VersionedStore>> {
    let scheme = uri
        .split_once(':')
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .ok_or_else(|| {
            Error::config(
                "connect",
                format!(
                    "{:?} is not a URI (expected SCHEME://…; compiled in: {})",
                    redact(uri),
                    schemes().join(", ")
                ),
            )
        })?;
    match scheme.as_str() {
        "memory" => {
            let rest = &uri[scheme.len() + 1..];
            if !(rest.is_empty() || rest == "//") {
                return Err(Error::config(
                    "memory",
                    "memory:// takes no path or options",
                ));
            }
            Ok(Arc::new(MemoryStore::new()))
        }
        #[cfg(feature = "sqlite")]
        s if bakery_sqlite::SCHEMES.contains(&s) => {
            Ok(Arc::new(bakery_sqlite::SqliteStore::connect(uri).await?))
        }
        #[cfg(feature = "postgres")]
        s if bakery_postgres::SCHEMES.contains(&s) => Ok(Arc::new(
            bakery_postgres::PostgresStore::connect(uri).await?,
        )),
        #[cfg(feature = "redis")]
        s if bakery_redis::SCHEMES.contains(&s) => {
            Ok(Arc::new(bakery_redis::RedisStore::connect(uri).await?))
        }
        #[cfg(feature = "etcd")]
        s if bakery_etcd::SCHEMES.contains(&s) => {
            Ok(Arc::new(bakery_etcd::EtcdStore::connect(uri).await?))
        }
        #[cfg(feature = "mongodb")]
        s if bakery_mongodb::SCHEMES.contains(&s) => {
            Ok(Arc::new(bakery_mongodb::MongoStore::connect(uri).await?))
        }
        #[cfg(feature = "cassandra")]
        s if bakery_cassandra::SCHEMES.contains(&s) => Ok(Arc::new(
            bakery_cassandra::CassandraStore::connect(uri).await?,
        )),
        other => {
            let compiled = schemes().join(", ");
            Err(match KNOWN.iter().find(|(s, _)| *s == other) {
                Some((_, feature)) => Error::config(
                    "connect",
                    format!(
                        "backend `{other}` not compiled in (enable the cargo feature `{feature}`); enabled: {compiled}"
                    ),
                ),
                None => Error::config(
                    "connect",
                    format!("unknown URI scheme `{other}`; enabled: {compiled}"),
                ),
            })
        }
    }
}

pub use bakery_core::uri::redact;
