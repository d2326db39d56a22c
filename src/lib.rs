#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::sync::Arc;

pub use bakery_core::{
    validate_name, Bytes, Capabilities, CountingStore, DeleteOutcome, Error, ErrorKind, Key,
    MemoryStore, OpCounts, PutOutcome, Result, Row, Version, VersionedStore,
};
pub use bakery_recipes::sequence::{self, IdBatch, Sequence, SequenceBuilder, SequenceState};

/// The backend crates compiled into this build, for direct use of their
/// configuration types.
pub mod backends {
    #[cfg(feature = "etcd")]
    pub use bakery_etcd as etcd;
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

/// `uri` with any password replaced by `***`, for messages and logs: the
/// password of the authority (`user:pass@host`) and the value of query
/// options that hold secrets (`password`, `pass`, `pwd`, `secret`, `token`).
///
/// ```
/// assert_eq!(bakery::redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
/// assert_eq!(
///     bakery::redact("postgres://h/db?user=u&password=secret&sslmode=require"),
///     "postgres://h/db?user=u&password=***&sslmode=require"
/// );
/// ```
pub fn redact(uri: &str) -> String {
    let (base, query) = match uri.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (uri, None),
    };
    let mut out = redact_authority(base);
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if is_secret_option(name) => format!("{name}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

fn is_secret_option(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "password" | "pass" | "pwd" | "secret" | "token" | "auth"
    )
}

fn redact_authority(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => match authority[..at].split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{}", &rest[at + 1..]),
            None => uri.to_string(),
        },
        None => uri.to_string(),
    }
}
