//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bakery_core::VersionedStore;
use bakery_redis::{CasStrategy, RedisConfig, RedisStore};

/// Both strategies, for tests that must pass on each.
pub const STRATEGIES: [CasStrategy; 2] = [CasStrategy::Script, CasStrategy::Watch];

/// The server under test, from `BAKERY_REDIS_URI`. Unset: under `CI=true`
/// the test FAILS (a CI run must exercise the server); on a developer
/// machine it prints why and the test returns early.
pub fn server_uri(test: &str) -> Option<String> {
    bakery_testkit::server_uri("BAKERY_REDIS_URI", test)
}

/// A key prefix no other test or run uses, so tests can share a server.
pub fn unique_prefix(test: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "bakery-test:{test}:{}-{nanos}-{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store on the test server with a fresh prefix and `strategy`.
pub async fn store(uri: &str, test: &str, strategy: CasStrategy) -> RedisStore {
    store_with(uri, test, |c| c.with_cas(strategy)).await
}

/// A store on the test server with a fresh prefix, configured further by `f`.
pub async fn store_with(
    uri: &str,
    test: &str,
    f: impl FnOnce(RedisConfig) -> RedisConfig,
) -> RedisStore {
    let config = RedisConfig::from_uri(uri)
        .expect("BAKERY_REDIS_URI parses")
        .with_prefix(unique_prefix(test));
    RedisStore::open(f(config))
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test server: {e}"))
}

/// A raw connection to the test server, to write foreign data and inspect
/// the layout.
pub async fn raw(uri: &str) -> redis::aio::MultiplexedConnection {
    let base = uri.split('?').next().unwrap_or(uri);
    redis::Client::open(base)
        .expect("raw client")
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .expect("raw connection")
}

/// Run the raw command `args` (its name, then its arguments) on `conn`;
/// the test fails, naming the command, if it does.
pub async fn query<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> T {
    let (name, rest) = args.split_first().expect("a command name");
    redis::cmd(name)
        .arg(rest)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")))
}

/// Remove every Redis key of `store` (tests clean up after themselves).
pub async fn cleanup(uri: &str, store: &RedisStore) {
    let mut conn = raw(uri).await;
    let pattern = format!("{}*", store.config().prefix());
    let keys: Vec<String> = query(&mut conn, &["KEYS", &pattern]).await;
    if !keys.is_empty() {
        let mut del = vec!["DEL"];
        del.extend(keys.iter().map(String::as_str));
        let _: i64 = query(&mut conn, &del).await;
    }
}

/// Run the conformance suite's `cas::` cases (the contract of `get`,
/// `put_if_version` and `delete_if_version`) on `store`.
pub async fn cas_cases(store: Arc<dyn VersionedStore>) {
    for case in bakery_testkit::cases() {
        if case.name.starts_with("cas::") {
            case.run_on(store.clone()).await;
        }
    }
}
