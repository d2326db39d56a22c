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
        assert!(
            output.status.success(),
            "a child failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let row = store.get(&counter()).await.unwrap().unwrap();
    let total = (CHILDREN + 1) * PER_CHILD;
    assert_eq!(
        (bakery_testkit::number(&row.value), row.version),
        (total, total)
    );
}
