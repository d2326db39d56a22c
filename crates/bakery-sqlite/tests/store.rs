//! What only SQLite has: the in-memory database, a differential run against
//! MemoryStore, the pool, schema checks, corrupt rows, lock contention,
//! files and directories. The contract itself is the conformance suite's
//! (`cargo test -p bakery --test conformance -- sqlite::`), on a file.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{
    Bytes, Capabilities, DeleteOutcome, ErrorKind, Key, MemoryStore, Operation, Sent,
    VersionedStore,
};
use bakery_sqlite::{SqliteConfig, SqliteStore};
use bakery_testkit::{applied, corrupt};
use rusqlite::types::Value;
use rusqlite::OptionalExtension;

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

fn file_uri(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

async fn file_store(dir: &tempfile::TempDir) -> SqliteStore {
    file_store_at(&dir.path().join("bakery.db")).await
}

/// The conformance suite runs on a file; its compare-and-set cases run here
/// on the in-memory database (one connection, a database of its own), a
/// fresh one per case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_cas_cases_pass_in_memory() {
    let cases: Vec<_> = bakery_testkit::cases()
        .into_iter()
        .filter(|case| case.name.starts_with("cas::"))
        .collect();
    assert!(cases.len() > 5, "{cases:?}");
    for case in cases {
        let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
        case.run_on(Arc::new(store)).await;
    }
}

/// A tiny deterministic generator, so the differential test needs no crate.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn matches_memory_store_on_random_operations() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = file_store(&dir).await;
    let memory = MemoryStore::new();
    let keys = [key("a"), key("b"), key("c/d")];
    let mut rng = Lcg(7);
    let (mut applied, mut deleted) = (0, 0);
    for step in 0..2_000 {
        let k = &keys[rng.below(3) as usize];
        // Half the time present the current version (read from the
        // reference, so the compared calls are untouched), else a random one.
        let truth = memory.get(k).await.unwrap().map(|row| row.version);
        let random = rng.below(12);
        let version = if rng.below(2) == 0 {
            truth
        } else {
            (random > 0).then_some(random)
        };
        match rng.below(5) {
            0 => assert_eq!(
                sqlite.get(k).await.unwrap(),
                memory.get(k).await.unwrap(),
                "{step}"
            ),
            1 | 2 => {
                let value = Bytes::from(format!("{step}"));
                let out = sqlite
                    .put_if_version(k, version, value.clone())
                    .await
                    .unwrap();
                assert_eq!(
                    out,
                    memory.put_if_version(k, version, value).await.unwrap(),
                    "step {step}: put {k} at {version:?}"
                );
                applied += usize::from(out.is_applied());
            }
            _ => {
                let version = version.unwrap_or(random);
                let out = sqlite.delete_if_version(k, version).await.unwrap();
                assert_eq!(
                    out,
                    memory.delete_if_version(k, version).await.unwrap(),
                    "step {step}: delete {k} at {version}"
                );
                deleted += usize::from(out == DeleteOutcome::Deleted);
            }
        }
    }
    // The script really exercises writes, deletes and re-creates.
    assert!(
        applied > 300 && deleted > 100,
        "applied {applied}, deleted {deleted}"
    );
    for k in &keys {
        assert_eq!(sqlite.get(k).await.unwrap(), memory.get(k).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_calls_share_a_small_pool() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteStore::connect(&format!(
            "{}?pool_size=2",
            file_uri(&dir.path().join("p.db"))
        ))
        .await
        .unwrap(),
    );
    let k = key("k");
    let row = applied(&*store, &k, None, "v").await;
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (store, k) = (Arc::clone(&store), k.clone());
        tasks.push(tokio::spawn(async move { store.get(&k).await.unwrap() }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Some(row.clone()));
    }
}

/// Open `path` with a raw rusqlite connection, as a foreign writer would.
/// A path `name` in a fresh directory (removed when the guard drops).
fn scratch(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    (dir, path)
}

fn raw(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

/// The stored `(value, version)` of `k`, as SQLite typed them.
fn raw_row(path: &Path, k: &str) -> Option<(Value, Value)> {
    raw(path)
        .query_row(
            "SELECT value, version FROM bakery_rows WHERE key = ?1",
            [k],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .unwrap()
}

#[tokio::test]
async fn corrupt_rows_are_typed_errors_naming_the_key() {
    let (_dir, path) = scratch("junk.db");
    // A hand-made table: the expected columns, but version may be NULL.
    raw(&path)
        .execute_batch(
            "CREATE TABLE bakery_rows (key TEXT PRIMARY KEY, value BLOB, version INTEGER)",
        )
        .unwrap();
    let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
    let junk: &[(&str, &str)] = &[
        ("null-version", "x'01', NULL"),
        ("negative-version", "x'01', -3"),
        ("zero-version", "x'01', 0"),
        ("text-version", "x'01', 'seven'"),
        ("real-version", "x'01', 1.5"),
        ("blob-version", "x'01', x'07'"),
        ("integer-value", "42, 1"),
        ("real-value", "4.2, 1"),
    ];
    {
        let conn = raw(&path);
        for (k, values) in junk {
            // Test-only SQL: fixed literals, no user input.
            conn.execute(
                &format!("INSERT INTO bakery_rows (key, value, version) VALUES (?1, {values})"),
                [k],
            )
            .unwrap();
        }
    }
    for (k, _) in junk {
        let errors = corrupt::rejected(&store, "sqlite", k, &[Some(1), None], 1, async |k| {
            raw_row(&path, k)
        })
        .await;
        for (op, err) in errors {
            assert_eq!(err.operation(), Some(op), "{k}: {err}");
        }
    }
    // Nothing was changed, and the store still works for good keys.
    let version: Option<i64> = raw(&path)
        .query_row(
            "SELECT version FROM bakery_rows WHERE key = 'null-version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, None);
    applied(&store, &key("fine"), None, "v").await;
}

#[tokio::test]
async fn a_text_value_written_by_hand_reads_as_its_bytes() {
    let (_dir, path) = scratch("text.db");
    let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
    raw(&path)
        .execute("INSERT INTO bakery_rows VALUES ('t', 'hello', 4)", [])
        .unwrap();
    let row = store.get(&key("t")).await.unwrap().unwrap();
    assert_eq!((&row.value[..], row.version), (&b"hello"[..], 4));
}

#[tokio::test]
async fn version_overflow_is_exhausted() {
    let (_dir, path) = scratch("max.db");
    let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
    raw(&path)
        .execute(
            "INSERT INTO bakery_rows VALUES ('top', x'00', ?1), ('dead', NULL, ?1)",
            [i64::MAX],
        )
        .unwrap();
    corrupt::at_max_version(&store, "top", "dead", async |k| raw_row(&path, k)).await;
}

#[tokio::test]
async fn a_table_with_another_schema_is_a_config_error() {
    let (_dir, path) = scratch("other.db");
    raw(&path)
        .execute_batch(
            "CREATE TABLE bakery_rows (id INTEGER PRIMARY KEY, data TEXT);
             CREATE TABLE wrong_types (key TEXT PRIMARY KEY, value BLOB, version TEXT);
             CREATE TABLE extra_column (key TEXT PRIMARY KEY, value BLOB, version INTEGER, x);
             CREATE TABLE no_pk (key TEXT, value BLOB, version INTEGER);
             CREATE VIEW a_view AS SELECT 1;",
        )
        .unwrap();
    for (table, needle) in [
        (
            "bakery_rows",
            "table bakery_rows exists with an unexpected schema",
        ),
        ("wrong_types", "unexpected schema"),
        ("extra_column", "unexpected schema"),
        ("no_pk", "unexpected schema"),
        ("a_view", "not a table"),
    ] {
        let err = SqliteStore::open(SqliteConfig::new(&path).with_table(table))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{table}: {err}");
        assert!(err.message().contains(needle), "{table}: {err}");
        assert_eq!(err.backend(), "sqlite");
    }
    // A fresh table in the same file is fine.
    assert!(
        SqliteStore::open(SqliteConfig::new(&path).with_table("fresh"))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn tables_are_independent_and_keywords_are_quoted() {
    let (_dir, path) = scratch("two.db");
    let uri = file_uri(&path);
    let a = SqliteStore::connect(&format!("{uri}?table=order"))
        .await
        .unwrap();
    let b = SqliteStore::connect(&format!("{uri}?table=Select_"))
        .await
        .unwrap();
    let k = key("k");
    applied(&a, &k, None, "a").await;
    assert_eq!(b.get(&k).await.unwrap(), None);
    assert_eq!(a.config().table(), "order");
}

#[tokio::test]
async fn a_missing_parent_directory_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not").join("yet").join("there.db");
    let store = SqliteStore::connect(&file_uri(&path)).await.unwrap();
    assert!(path.is_file());
    applied(&store, &key("k"), None, "v").await;
}

#[tokio::test]
async fn create_false_refuses_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("x.db");
    let err = SqliteStore::connect(&format!("{}?create=false", file_uri(&path)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.message().contains("does not exist"), "{err}");
    assert!(!path.parent().unwrap().exists());
    // With an existing file, create=false opens it.
    let path = dir.path().join("there.db");
    drop(file_store_at(&path).await);
    assert!(
        SqliteStore::connect(&format!("{}?create=false", file_uri(&path)))
            .await
            .is_ok()
    );
}

async fn file_store_at(path: &Path) -> SqliteStore {
    SqliteStore::open(SqliteConfig::new(path)).await.unwrap()
}

#[tokio::test]
async fn rows_and_tombstones_survive_a_reopen() {
    let (_dir, path) = scratch("durable.db");
    {
        let store = file_store_at(&path).await;
        let (a, b) = (key("a"), key("b"));
        applied(&store, &a, None, "1").await;
        applied(&store, &a, Some(1), "2").await;
        applied(&store, &b, None, "x").await;
        assert_eq!(
            store.delete_if_version(&b, 1).await.unwrap(),
            DeleteOutcome::Deleted
        );
    }
    let store = file_store_at(&path).await;
    let a = store.get(&key("a")).await.unwrap().unwrap();
    assert_eq!((&a.value[..], a.version), (&b"2"[..], 2));
    assert_eq!(store.get(&key("b")).await.unwrap(), None);
    let b = applied(&store, &key("b"), None, "y").await;
    assert_eq!(b.version, 2, "the tombstone's version survived the reopen");
    // WAL is a property of the file.
    let mode: String = raw(&path)
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_held_write_lock_makes_writes_unavailable_not_reads() {
    let (_dir, path) = scratch("busy.db");
    let store = SqliteStore::connect(&format!("{}?busy_timeout_ms=50", file_uri(&path)))
        .await
        .unwrap();
    let k = key("k");
    let row = applied(&store, &k, None, "v").await;

    let other = raw(&path);
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = store
        .put_if_version(&k, Some(1), "w".into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_temporary() && !err.outcome_unknown());
    assert_eq!(err.operation(), Some(Operation::Put), "{err}");
    assert_eq!(err.sent(), Some(Sent::No), "{err}");
    assert!(err.message().contains("nothing was applied"), "{err}");
    let err = store.delete_if_version(&k, 1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(err.operation(), Some(Operation::Delete), "{err}");
    // WAL: readers are not blocked by the writer.
    assert_eq!(store.get(&k).await.unwrap(), Some(row));
    other.execute_batch("ROLLBACK").unwrap();

    // Nothing was applied, and the store works again.
    let row = applied(&store, &k, Some(1), "w").await;
    assert_eq!(row.version, 2);
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_corrupt() {
    let (_dir, path) = scratch("junk.db");
    std::fs::write(&path, vec![0x5A; 8192]).unwrap();
    let err = SqliteStore::open(SqliteConfig::new(&path))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!(err.backend(), "sqlite");
    assert_eq!(err.operation(), Some(Operation::Open), "{err}");
}

#[tokio::test]
async fn a_directory_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteStore::open(SqliteConfig::new(dir.path()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
}

#[tokio::test]
async fn capabilities_and_backend() {
    let dir = tempfile::tempdir().unwrap();
    let file = file_store(&dir).await;
    assert_eq!(file.backend(), "sqlite");
    assert_eq!(
        file.capabilities(),
        Capabilities::PERSISTENT
            | Capabilities::SHARED
            | Capabilities::LINEARIZABLE_READS
            | Capabilities::WATCH
    );
    let memory = SqliteStore::connect("sqlite::memory:").await.unwrap();
    assert_eq!(memory.backend(), "sqlite");
    assert_eq!(memory.capabilities(), Capabilities::LINEARIZABLE_READS);
    assert!(format!("{memory:?}").contains("Memory"));
}

#[tokio::test]
async fn in_memory_databases_are_private_to_their_store() {
    let a = SqliteStore::connect("sqlite::memory:").await.unwrap();
    let b = SqliteStore::connect("sqlite::memory:").await.unwrap();
    let k = key("k");
    applied(&a, &k, None, "a").await;
    assert_eq!(b.get(&k).await.unwrap(), None);
    // Many concurrent calls on the single connection see one database.
    let a = Arc::new(a);
    let n = key("n");
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (a, n) = (Arc::clone(&a), n.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                bakery_testkit::count_up(a.as_ref(), &n, 1).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(a.get(&n).await.unwrap().unwrap().version, 100);
}

#[tokio::test]
async fn bad_uris_fail_before_touching_the_disk() {
    for uri in ["sqlite://", "sqlite::memory:?pool_size=3"] {
        let err = SqliteStore::connect(uri).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{uri}");
    }
    let err = SqliteStore::open(SqliteConfig::memory().with_table("x y"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
}

/// A `notify` wakes the key's watches even when the change feed already
/// saw the write it follows and, the write being this store's own, kept
/// quiet about it. The pause lets the feed (checking every 2 ms at most)
/// see the write first: the order that once lost the wake-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notify_after_the_feed_saw_the_write_still_wakes() {
    let dir = tempfile::tempdir().unwrap();
    let store = file_store(&dir).await;
    let k = key("notified");
    let mut watch = store.watch(&k).await.unwrap().expect("a file has WATCH");
    applied(&store, &k, None, "v1").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        bakery_testkit::watch::is_quiet(&mut watch).await,
        "an own write woke the watch before any notify"
    );
    store.notify(&k).await.unwrap();
    assert!(bakery_testkit::watch::next_wake(&mut watch).await);
    // A notify of another key wakes nobody here.
    store.notify(&key("other")).await.unwrap();
    assert!(bakery_testkit::watch::is_quiet(&mut watch).await);
}
