//! The baseline lock the bench measures bakery against ([`OldLock`]) is a
//! real lock: 4 clients, each with its own store handle (its own
//! `bakery::connect` on a server), take turns without overlap on the
//! in-memory model, SQLite and every real server the build has
//! (`BAKERY_<NAME>_URI`, exported by `scripts/backends.sh`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bakery_bench::baseline::OldLock;
use bakery_core::{ErrorKind, MemoryStore, VersionedStore};

const CLIENTS: usize = 4;
const ROUNDS: usize = 10;

/// A name no other run uses: `prefix` + the time in hex.
fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}_{nanos:x}")
}

/// `CLIENTS` separate clients x `ROUNDS` turns each through one `OldLock`
/// name: never two inside at once, every turn taken.
async fn excludes(clients: Vec<Arc<dyn VersionedStore>>) {
    let name = unique("old");
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|store| {
            let name = name.clone();
            let (inside, done) = (inside.clone(), done.clone());
            tokio::spawn(async move {
                let lock = OldLock::new(store, &name)
                    .expect("name")
                    .with_backoff(Duration::from_millis(5), Duration::from_millis(1));
                for _ in 0..ROUNDS {
                    let guard = lock.acquire().await.expect("acquire");
                    assert!(!inside.swap(true, Ordering::SeqCst), "overlap");
                    tokio::task::yield_now().await;
                    inside.store(false, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    lock.release(guard).await.expect("release");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("client");
    }
    assert_eq!(done.load(Ordering::SeqCst), CLIENTS * ROUNDS);
}

/// `CLIENTS` separate connections to `uri`.
async fn connect(uri: &str) -> Vec<Arc<dyn VersionedStore>> {
    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        clients.push(bakery::connect(uri).await.expect("connect"));
    }
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_lock_excludes_on_separate_memory_handles() {
    let store = MemoryStore::new();
    let clients = (0..CLIENTS)
        .map(|_| Arc::new(store.handle()) as Arc<dyn VersionedStore>)
        .collect();
    excludes(clients).await;
}

#[test]
fn old_lock_refuses_invalid_names() {
    let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
    for name in ["", "a/b", "with space", &"x".repeat(600)] {
        let err = OldLock::new(store.clone(), name).expect_err("bad name");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{name:?}");
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_lock_excludes_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let uri = format!("sqlite://{}", dir.path().join("old.db").display());
    excludes(connect(&uri).await).await;
}

/// One test per real server the build has; a server the run lacks fails in
/// CI (`server_uri`).
macro_rules! on_server {
    ($feature:literal, $test:ident, $var:literal) => {
        #[cfg(feature = $feature)]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let Some(uri) = bakery_testkit::server_uri($var, "baseline") else {
                return;
            };
            excludes(connect(&uri).await).await;
        }
    };
}

on_server!(
    "postgres",
    old_lock_excludes_on_postgres,
    "BAKERY_POSTGRES_URI"
);
on_server!("redis", old_lock_excludes_on_redis, "BAKERY_REDIS_URI");
on_server!("etcd", old_lock_excludes_on_etcd, "BAKERY_ETCD_URI");
on_server!(
    "cassandra",
    old_lock_excludes_on_cassandra,
    "BAKERY_CASSANDRA_URI"
);
on_server!(
    "mongodb",
    old_lock_excludes_on_mongodb,
    "BAKERY_MONGODB_URI"
);
