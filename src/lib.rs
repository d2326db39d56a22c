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
pub use bakery_core::{Change, Driver, Operation, Sent};
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
pub use bakery_recipes::snowflake::{self, Snowflake, SnowflakeBuilder};
pub use bakery_recipes::time::{self, TimeService};

/// The backend crates compiled into this build, for direct use of their
/// configuration types.
pub mod backends {
    #[cfg(feature = "cassandra")]
    pub use bakery_cassandra as cassandra;
    #[cfg(feature = "dynamodb")]
    pub use bakery_dynamodb as dynamodb;
    #[cfg(feature = "etcd")]
    pub use bakery_etcd as etcd;
    #[cfg(feature = "mongodb")]
    pub use bakery_mongodb as mongodb;
    #[cfg(feature = "mysql")]
    pub use bakery_mysql as mysql;
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
    let compiled = BACKENDS
        .iter()
        .filter_map(|backend| backend.driver)
        .flat_map(|driver| driver.schemes.iter().copied());
    std::iter::once("memory").chain(compiled).collect()
}

/// A backend bakery has, whether or not this build compiled it in.
struct Backend {
    /// Its cargo feature here (and its driver's name).
    feature: &'static str,
    /// The schemes it answers to, so that a URI of a backend this build
    /// leaves out is told which feature to enable, not "unknown scheme".
    schemes: &'static [&'static str],
    /// Its crate's driver, when compiled in.
    driver: Option<&'static Driver>,
}

/// The list of backends: `feature => crate [schemes]`, one line each.
macro_rules! backends {
    ($($feature:literal => $krate:ident [$($scheme:literal),+]),+ $(,)?) => {
        /// Every backend bakery has, by its cargo feature.
        const BACKENDS: &[Backend] = &[$(Backend {
            feature: $feature,
            schemes: &[$($scheme),+],
            driver: {
                #[cfg(feature = $feature)]
                let driver = Some(&$krate::DRIVER);
                #[cfg(not(feature = $feature))]
                let driver = None;
                driver
            },
        }),+];
    };
}

backends! {
    "sqlite" => bakery_sqlite ["sqlite"],
    "postgres" => bakery_postgres ["postgres", "postgresql"],
    "redis" => bakery_redis ["redis", "rediss"],
    "etcd" => bakery_etcd ["etcd"],
    "mongodb" => bakery_mongodb ["mongodb", "mongodb+srv"],
    "cassandra" => bakery_cassandra ["cassandra", "scylla"],
    "mysql" => bakery_mysql ["mysql", "mariadb"],
    "dynamodb" => bakery_dynamodb ["dynamodb"],
}

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
        other => {
            if let Some(driver) = BACKENDS
                .iter()
                .filter_map(|backend| backend.driver)
                .find(|driver| driver.answers(other))
            {
                return (driver.connect)(uri).await;
            }
            let compiled = schemes().join(", ");
            let known = BACKENDS
                .iter()
                .find(|backend| backend.schemes.contains(&other));
            Err(match known {
                Some(Backend { feature, .. }) => Error::config(
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

    /// Each line of the list names every scheme its compiled-in crate
    /// parses, under the crate's own name.
    #[test]
    fn each_line_matches_its_compiled_crate() {
        let mut compiled = 0;
        for backend in BACKENDS {
            let Some(driver) = backend.driver else {
                continue;
            };
            compiled += 1;
            assert_eq!(driver.name, backend.feature);
            assert_eq!(
                driver.parsed_schemes, backend.schemes,
                "{}",
                backend.feature
            );
            for scheme in driver.schemes {
                assert!(driver.answers(scheme), "{}: {scheme}", backend.feature);
            }
        }
        assert_eq!(schemes().len() > 1, compiled > 0);
    }

    /// A scheme of a backend left out of the build names the feature to
    /// enable; `mongodb+srv` is known too.
    #[tokio::test]
    async fn a_known_scheme_that_is_not_compiled_in_names_its_feature() {
        for backend in BACKENDS {
            for scheme in backend.schemes {
                if crate::schemes().contains(scheme) {
                    continue;
                }
                let e = match connect(&format!("{scheme}://h/x")).await {
                    Ok(_) => panic!("{scheme}:// opened without its backend"),
                    Err(e) => e,
                };
                let text = e.to_string();
                // A scheme behind one of a compiled crate's own features
                // (`mongodb+srv` without `srv`): the crate's message names it.
                if backend.driver.is_some() {
                    assert!(text.contains("feature"), "{scheme}: {text}");
                    continue;
                }
                let feature = backend.feature;
                assert!(
                    text.contains(&format!("enable the cargo feature `{feature}`")),
                    "{scheme}: {text}"
                );
            }
        }
    }
}
