//! Several OS processes increment one counter in one SQLite file. The test
//! binary re-runs itself: `child_worker` is the child's body.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bakery_core::{Key, VersionedStore};
use bakery_sqlite::{SqliteConfig, SqliteStore};

const CHILD_DB: &str = "BAKERY_SQLITE_TEST_CHILD_DB";
const CHILDREN: u64 = 4;
const PER_CHILD: u64 = 100;

/// Created by the parent once every process may start.
fn go_file(db: &Path) -> PathBuf {
    db.with_extension("go")
}

fn counter() -> Key {
    Key::new("counter").unwrap()
}

#[test]
#[ignore = "helper: run as a child process by `processes_share_one_file`"]
fn child_worker() {
    let Ok(path) = std::env::var(CHILD_DB) else {
        return; // run by hand with --ignored: nothing to do
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
        // Start together, so that the processes really contend.
        let go = go_file(Path::new(&path));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !go.exists() {
            assert!(Instant::now() < deadline, "no start signal");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for _ in 0..PER_CHILD {
            bakery_testkit::count_up(&store, &counter(), 1).await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_share_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..CHILDREN)
        .map(|_| {
            Command::new(&exe)
                .args(["child_worker", "--exact", "--ignored", "--test-threads=1"])
                .env(CHILD_DB, &path)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // This process takes part too.
    let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
    std::fs::write(go_file(&path), b"").unwrap();
    for _ in 0..PER_CHILD {
        bakery_testkit::count_up(&store, &counter(), 1).await;
    }
    for child in children {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        assert_child_succeeded(&output);
    }
    let row = store.get(&counter()).await.unwrap().unwrap();
    let total = (CHILDREN + 1) * PER_CHILD;
    assert_eq!(
        (bakery_testkit::number(&row.value), row.version),
        (total, total)
    );
}

const WRITER_DB: &str = "BAKERY_SQLITE_TEST_WRITER_DB";
const WRITER_KEY: &str = "BAKERY_SQLITE_TEST_WRITER_KEY";

#[test]
#[ignore = "helper: run as a child process by `a_write_in_another_process_wakes_its_key_s_watches`"]
fn child_writer() {
    let (Ok(path), Ok(key)) = (std::env::var(WRITER_DB), std::env::var(WRITER_KEY)) else {
        return; // run by hand with --ignored: nothing to do
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
        let key = Key::new(key).unwrap();
        let written = store
            .put_if_version(&key, None, "from the child".into())
            .await
            .unwrap();
        assert!(written.applied().is_some(), "the key was already written");
    });
}

/// Write `key` once from a child process (no `notify`: another process's
/// notify cannot reach this one anyway).
async fn write_in_a_child(path: &Path, key: &str) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe);
    child
        .args(["child_writer", "--exact", "--ignored", "--test-threads=1"])
        .env(WRITER_DB, path)
        .env(WRITER_KEY, key);
    let output = tokio::task::spawn_blocking(move || child.output().unwrap())
        .await
        .unwrap();
    assert_child_succeeded(&output);
}

/// The change feed: a watch in this process wakes, with the row, when
/// another process writes its key, and stays quiet when it writes another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_another_process_wakes_its_key_s_watches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("watched.db");
    let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
    let watched = Key::new("watched").unwrap();
    let mut watch = store
        .watch(&watched)
        .await
        .unwrap()
        .expect("a file database has a change feed");

    write_in_a_child(&path, "other").await;
    assert!(
        bakery_testkit::watch::is_quiet(&mut watch).await,
        "a write of another key woke the watch"
    );

    write_in_a_child(&path, "watched").await;
    let change = tokio::time::timeout(bakery_testkit::watch::WAKE_LIMIT, watch.next_change())
        .await
        .expect("no wake-up after another process wrote the key")
        .expect("the watch ended");
    match change {
        bakery_core::Change::Row(row) => {
            assert_eq!((&row.value[..], row.version), (&b"from the child"[..], 1));
        }
        other => panic!("expected the row the child wrote, got {other:?}"),
    }
}

/// A child process exited cleanly; otherwise fail with what it printed.
fn assert_child_succeeded(output: &std::process::Output) {
    assert!(
        output.status.success(),
        "a child failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
