//! What the source tests share: a throwaway SQLite target, a selection
//! of one schema (database), and the steps of the live-writers case.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bakery_core::VersionedStore;
use bakery_migrate::{Action, Fence, Selection, Step};
use tokio::task::JoinHandle;

/// A fresh SQLite store; keep the directory alive while it is used.
pub async fn sqlite_target() -> (tempfile::TempDir, Arc<dyn VersionedStore>) {
    let dir = tempfile::tempdir().unwrap();
    let uri = bakery::sqlite_uri(&dir.path().join("bakery.db")).unwrap();
    (dir, bakery::connect(&uri).await.unwrap())
}

/// Every generator of `schema` (a PostgreSQL schema, a MariaDB database).
pub fn in_schema(schema: &str) -> Selection {
    Selection {
        all: true,
        schemas: vec![schema.to_string()],
        names: vec![],
    }
}

/// Let the old writers get going (a condition, not a sleep): wait, at most a
/// minute, until they inserted `rows`; every one must still be writing.
pub async fn writers_get_going<T>(inserted: &AtomicU64, rows: u64, writers: &[JoinHandle<T>]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while inserted.load(Ordering::Relaxed) < rows {
        assert!(
            writers.iter().all(|w| !w.is_finished()) && tokio::time::Instant::now() < deadline,
            "the old writers stopped before the migration"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The first apply: `count` steps, each creating its bakery sequence and
/// placing its fence.
pub fn created_and_fenced(steps: &[Step], count: usize) {
    assert_eq!(steps.len(), count, "{steps:?}");
    for step in steps {
        assert_eq!(step.action, Action::Create, "{step:?}");
        assert_eq!(step.fence, Fence::Placed, "{step:?}");
    }
}

/// The live-writers case of a source's test file (its `live_writers`,
/// taking a target store and its label), onto SQLite and onto the
/// PostgreSQL backend (`BAKERY_POSTGRES_URI`).
macro_rules! live_writers_onto_each_target {
    () => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn live_writers_onto_sqlite() {
            let (_dir, target) = common::sqlite_target().await;
            live_writers(target, "sqlite").await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn live_writers_onto_postgres_backend() {
            let Some(uri) =
                bakery_testkit::server_uri("BAKERY_POSTGRES_URI", "migrate onto postgres")
            else {
                return;
            };
            live_writers(bakery::connect(&uri).await.unwrap(), "postgres").await;
        }
    };
}
pub(crate) use live_writers_onto_each_target;
