#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::Arc;

/// Store calls counted and timed through the `metrics` facade (feature
/// `metrics`); the recipes' own metrics are listed in [`metrics`].
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use bakery_core::MetricsStore;
pub use bakery_core::{
    validate_name, Bytes, Capabilities, CountingStore, DeleteOutcome, Error, ErrorKind, Key,
    MemoryStore, OpCounts, PutOutcome, Result, RetryPolicy, RetryStore, Row, StoreLayer,
    TracedStore, Version, VersionedStore, Watch, WatchSender,
};
pub use bakery_recipes::consumer::{self, Consumer, ConsumerBuilder, Processed};
pub use bakery_recipes::election::{self, Election, ElectionBuilder, Leader, Leadership};
pub use bakery_recipes::fence::{self, Fenced, FencedRead, FencedValue, FencedWrite};
pub use bakery_recipes::keys;
pub use bakery_recipes::lamport;
pub use bakery_recipes::lock::{self, Lock, LockBuilder, LockGuard, LockState, LostReason};
pub use bakery_recipes::metrics;
pub use bakery_recipes::once::{self, Execution, Idempotency, IdempotencyBuilder, RunError};
pub use bakery_recipes::rwlock::{self, ReadGuard, RwLock, RwLockBuilder, WriteGuard};
pub use bakery_recipes::semaphore::{self, Permit, Semaphore, SemaphoreBuilder};
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
    let compiled = COMPILED
        .iter()
        .flat_map(|(_, schemes)| schemes.iter().copied());
    std::iter::once("memory").chain(compiled).collect()
}

/// `(feature, SCHEMES)` of each backend crate this build has.
macro_rules! compiled {
    ($($feature:literal: $krate:ident),* $(,)?) => {
        &[$(#[cfg(feature = $feature)] ($feature, $krate::SCHEMES),)*]
    };
}

/// Each compiled-in backend crate's own `SCHEMES`, by cargo feature.
const COMPILED: &[(&str, &[&str])] = compiled!(
    "sqlite": bakery_sqlite, "postgres": bakery_postgres, "redis": bakery_redis,
    "etcd": bakery_etcd, "mongodb": bakery_mongodb, "cassandra": bakery_cassandra,
);

/// Every backend bakery has, by its cargo feature, with the URI schemes it
/// answers to — including backends this build leaves out, so their URIs get
/// "not compiled in (enable …)" rather than "unknown scheme". For each
/// compiled-in backend a test checks the crate's own `SCHEMES` against this
/// row, so the two cannot drift.
const BACKENDS: &[(&str, &[&str])] = &[
    ("sqlite", &["sqlite"]),
    ("postgres", &["postgres", "postgresql"]),
    ("redis", &["redis", "rediss"]),
    ("etcd", &["etcd"]),
    ("mongodb", &["mongodb", "mongodb+srv"]),
    ("cassandra", &["cassandra", "scylla"]),
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
///
/// Every call of the store it returns is traced as a debug-level span
/// (see [`TracedStore`]).
pub async fn connect(uri: &str) -> Result<Arc<dyn VersionedStore>> {
    let store = open_backend(uri).await?;
    Ok(Arc::new(TracedStore::new(store)))
}

/// The backend's own store for `uri`, chosen by scheme.
async fn open_backend(uri: &str) -> Result<Arc<dyn VersionedStore>> {
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
        // `mongodb+srv` goes to the crate even without its `srv` feature:
        // its error says which feature that is.
        #[cfg(feature = "mongodb")]
        s if bakery_mongodb::SCHEMES.contains(&s) || s == "mongodb+srv" => {
            Ok(Arc::new(bakery_mongodb::MongoStore::connect(uri).await?))
        }
        #[cfg(feature = "cassandra")]
        s if bakery_cassandra::SCHEMES.contains(&s) => Ok(Arc::new(
            bakery_cassandra::CassandraStore::connect(uri).await?,
        )),
        other => {
            let compiled = schemes().join(", ");
            let known = BACKENDS
                .iter()
                .find(|(_, schemes)| schemes.contains(&other));
            Err(match known {
                Some((feature, _)) => Error::config(
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

/// The `sqlite://` URI of a database file, percent-encoding the characters
/// the sqlite URI parser gives a meaning to (`%` escapes, `?` options).
/// `None` if the path is not valid UTF-8.
///
/// ```
/// use std::path::Path;
/// assert_eq!(
///     bakery::sqlite_uri(Path::new("/w 1/100%?/b.db")).as_deref(),
///     Some("sqlite:///w 1/100%25%3F/b.db")
/// );
/// assert_eq!(bakery::sqlite_uri(Path::new("b.db")).as_deref(), Some("sqlite://b.db"));
/// assert_eq!(
///     bakery::sqlite_uri(Path::new("/home/a/.local/share/bakery/bakery.db")).as_deref(),
///     Some("sqlite:///home/a/.local/share/bakery/bakery.db")
/// );
/// ```
pub fn sqlite_uri(path: &std::path::Path) -> Option<String> {
    let path = path.to_str()?;
    let mut uri = String::with_capacity(path.len() + 9);
    uri.push_str("sqlite://");
    for c in path.chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3F"),
            c => uri.push(c),
        }
    }
    Some(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The facade's table names every scheme each compiled-in crate answers
    /// to (a crate may answer to fewer: `mongodb+srv` needs a crate feature).
    #[test]
    fn the_backend_table_matches_each_compiled_crate() {
        for &(feature, crate_schemes) in COMPILED {
            let (_, table) = BACKENDS
                .iter()
                .find(|(f, _)| *f == feature)
                .unwrap_or_else(|| panic!("feature {feature} missing from BACKENDS"));
            for scheme in crate_schemes {
                assert!(
                    table.contains(scheme),
                    "{feature}: {scheme} missing from BACKENDS"
                );
            }
            assert!(
                crate_schemes.contains(&table[0]),
                "{feature}: {} is not answered",
                table[0]
            );
        }
        let all: Vec<&str> = BACKENDS
            .iter()
            .flat_map(|(_, s)| s.iter().copied())
            .collect();
        for scheme in schemes() {
            assert!(scheme == "memory" || all.contains(&scheme), "{scheme}");
        }
    }

    /// A scheme of a backend left out of the build names the feature to
    /// enable; `mongodb+srv` is known too.
    #[tokio::test]
    async fn a_known_scheme_that_is_not_compiled_in_names_its_feature() {
        for (feature, schemes) in BACKENDS {
            for scheme in *schemes {
                if crate::schemes().contains(scheme) {
                    continue;
                }
                let e = match connect(&format!("{scheme}://h/x")).await {
                    Ok(_) => panic!("{scheme}:// opened without its backend"),
                    Err(e) => e,
                };
                let text = e.to_string();
                // `mongodb+srv` with the mongodb feature but without the
                // crate's `srv` feature: the crate's own message names it.
                if *feature == "mongodb" && crate::schemes().contains(&"mongodb") {
                    assert!(text.contains("`srv` feature"), "{scheme}: {text}");
                    continue;
                }
                assert!(
                    text.contains(&format!("enable the cargo feature `{feature}`")),
                    "{scheme}: {text}"
                );
            }
        }
    }
}
