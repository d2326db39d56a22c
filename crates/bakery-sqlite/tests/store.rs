//! SqliteStore against the contract MemoryStore defines, plus what only a
//! SQLite file has: sharing, schema checks, corrupt rows, lock contention.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{
    Bytes, Capabilities, DeleteOutcome, ErrorKind, Key, MemoryStore, PutOutcome, VersionedStore,
};
use bakery_sqlite::{SqliteConfig, SqliteStore};

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

fn file_uri(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

async fn file_store(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(SqliteConfig::new(dir.path().join("bakery.db")))
        .await
        .unwrap()
}

/// The whole row life cycle, as MemoryStore defines it.
async fn life_cycle(store: &dyn VersionedStore) {
    let k = key("seq/orders");
    assert_eq!(store.get(&k).await.unwrap(), None);

    // Create only if absent.
    let v1 = store
        .put_if_version(&k, None, "a".into())
        .await
        .unwrap()
        .applied()
        .expect("create applies");
    assert_eq!(
        (v1.key.as_str(), &v1.value[..], v1.version),
        ("seq/orders", &b"a"[..], 1)
    );
    assert_eq!(store.get(&k).await.unwrap(), Some(v1.clone()));

    // Create again: conflict carrying the current row.
    assert_eq!(
        store.put_if_version(&k, None, "x".into()).await.unwrap(),
        PutOutcome::Conflict(Some(v1.clone()))
    );

    // Update at the right version.
    let v2 = store
        .put_if_version(&k, Some(1), "b".into())
        .await
        .unwrap()
        .applied()
        .expect("update applies");
    assert_eq!((&v2.value[..], v2.version), (&b"b"[..], 2));

    // Stale and future versions conflict with the current row; nothing changes.
    for stale in [1, 3, u64::MAX] {
        assert_eq!(
            store
                .put_if_version(&k, Some(stale), "x".into())
                .await
                .unwrap(),
            PutOutcome::Conflict(Some(v2.clone())),
            "expected {stale}"
        );
    }
    assert_eq!(store.get(&k).await.unwrap(), Some(v2.clone()));

    // Delete at a wrong version conflicts, at the right one deletes.
    assert_eq!(
        store.delete_if_version(&k, 1).await.unwrap(),
        DeleteOutcome::Conflict(Some(v2.clone()))
    );
    assert_eq!(
        store.delete_if_version(&k, 2).await.unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(store.get(&k).await.unwrap(), None);

    // A tombstone looks absent: deleting again or updating it conflicts with None.
    assert_eq!(
        store.delete_if_version(&k, 2).await.unwrap(),
        DeleteOutcome::Conflict(None)
    );
    assert_eq!(
        store.put_if_version(&k, Some(2), "x".into()).await.unwrap(),
        PutOutcome::Conflict(None)
    );

    // Re-create continues above the tombstone: versions never repeat.
    let v3 = store
        .put_if_version(&k, None, "c".into())
        .await
        .unwrap()
        .applied()
        .expect("re-create applies");
    assert_eq!((&v3.value[..], v3.version), (&b"c"[..], 3));

    // Deleting an absent key conflicts with None; other keys are untouched.
    let other = key("other");
    assert_eq!(
        store.delete_if_version(&other, 1).await.unwrap(),
        DeleteOutcome::Conflict(None)
    );
    assert_eq!(store.get(&other).await.unwrap(), None);
    assert_eq!(store.get(&k).await.unwrap(), Some(v3));
}

#[tokio::test]
async fn life_cycle_on_a_file() {
    let dir = tempfile::tempdir().unwrap();
    life_cycle(&file_store(&dir).await).await;
}

#[tokio::test]
async fn life_cycle_in_memory() {
    for uri in ["sqlite::memory:", "sqlite://:memory:"] {
        life_cycle(&SqliteStore::connect(uri).await.unwrap()).await;
    }
}

#[tokio::test]
async fn life_cycle_on_the_reference() {
    // The same script passes on MemoryStore, so it states the contract.
    life_cycle(&MemoryStore::new()).await;
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

#[tokio::test]
async fn empty_binary_and_large_values_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = file_store(&dir).await;
    let cases: Vec<(&str, Bytes)> = vec![
        ("empty", Bytes::new()),
        ("binary", Bytes::from((0..=255).collect::<Vec<u8>>())),
        ("nul", Bytes::from_static(b"\0\0\0")),
        ("large", Bytes::from(vec![0xAB; 1 << 20])),
    ];
    for (name, value) in cases {
        let k = key(name);
        let row = store
            .put_if_version(&k, None, value.clone())
            .await
            .unwrap()
            .applied()
            .unwrap();
        assert_eq!(row.value, value);
        // An empty value is a live row, not a tombstone.
        assert_eq!(
            store.get(&k).await.unwrap().map(|r| r.value),
            Some(value),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_race_to_exactly_800() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.db");
    // Two stores: two separate connection pools, as two processes would have.
    let stores: Vec<Arc<dyn VersionedStore>> = vec![
        Arc::new(SqliteStore::open(SqliteConfig::new(&path)).await.unwrap()),
        Arc::new(SqliteStore::connect(&file_uri(&path)).await.unwrap()),
    ];
    let k = key("counter");
    let mut tasks = Vec::new();
    for task in 0..8 {
        let store = Arc::clone(&stores[task % 2]);
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            let mut written = Vec::new();
            for _ in 0..100 {
                written.push(common::increment(store.as_ref(), &k).await);
            }
            written
        }));
    }
    let mut all = BTreeSet::new();
    for task in tasks {
        for n in task.await.unwrap() {
            assert!(all.insert(n), "{n} was written twice");
        }
    }
    assert_eq!(all, (1..=800).collect::<BTreeSet<u64>>());
    for store in &stores {
        let row = store.get(&k).await.unwrap().unwrap();
        assert_eq!((common::number(&row.value), row.version), (800, 800));
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
    let row = store
        .put_if_version(&k, None, "v".into())
        .await
        .unwrap()
        .applied()
        .unwrap();
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
fn raw(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

#[tokio::test]
async fn corrupt_rows_are_typed_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.db");
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
        let k = key(k);
        let errors = [
            store.get(&k).await.unwrap_err(),
            store
                .put_if_version(&k, Some(1), "v".into())
                .await
                .unwrap_err(),
            store
                .put_if_version(&k, None, "v".into())
                .await
                .unwrap_err(),
            store.delete_if_version(&k, 1).await.unwrap_err(),
        ];
        for err in errors {
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{k}: {err}");
            assert_eq!(err.backend(), "sqlite");
            assert!(err.message().contains(&format!("`{k}`")), "{err}");
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
    assert!(store
        .put_if_version(&key("fine"), None, "v".into())
        .await
        .unwrap()
        .is_applied());
}

#[tokio::test]
async fn a_text_value_written_by_hand_reads_as_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("text.db");
    let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
    raw(&path)
        .execute("INSERT INTO bakery_rows VALUES ('t', 'hello', 4)", [])
        .unwrap();
    let row = store.get(&key("t")).await.unwrap().unwrap();
    assert_eq!((&row.value[..], row.version), (&b"hello"[..], 4));
}

#[tokio::test]
async fn version_overflow_is_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("max.db");
    let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
    raw(&path)
        .execute(
            "INSERT INTO bakery_rows VALUES ('top', x'00', ?1), ('dead', NULL, ?1)",
            [i64::MAX],
        )
        .unwrap();
    let top = i64::MAX as u64;
    let err = store
        .put_if_version(&key("top"), Some(top), "v".into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Exhausted, "{err}");
    // A tombstone at the top cannot be re-created either.
    let err = store
        .put_if_version(&key("dead"), None, "v".into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Exhausted, "{err}");
    // A mismatch is still a plain conflict, and delete at the top works.
    assert!(matches!(
        store.put_if_version(&key("top"), Some(1), "v".into()).await.unwrap(),
        PutOutcome::Conflict(Some(row)) if row.version == top
    ));
    assert_eq!(
        store.delete_if_version(&key("top"), top).await.unwrap(),
        DeleteOutcome::Deleted
    );
}

#[tokio::test]
async fn a_table_with_another_schema_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.db");
    let uri = file_uri(&path);
    let a = SqliteStore::connect(&format!("{uri}?table=order"))
        .await
        .unwrap();
    let b = SqliteStore::connect(&format!("{uri}?table=Select_"))
        .await
        .unwrap();
    let k = key("k");
    assert!(a
        .put_if_version(&k, None, "a".into())
        .await
        .unwrap()
        .is_applied());
    assert_eq!(b.get(&k).await.unwrap(), None);
    assert_eq!(a.config().table(), "order");
}

#[tokio::test]
async fn a_missing_parent_directory_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not").join("yet").join("there.db");
    let store = SqliteStore::connect(&file_uri(&path)).await.unwrap();
    assert!(path.is_file());
    assert!(store
        .put_if_version(&key("k"), None, "v".into())
        .await
        .unwrap()
        .is_applied());
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("durable.db");
    {
        let store = file_store_at(&path).await;
        let (a, b) = (key("a"), key("b"));
        assert!(store
            .put_if_version(&a, None, "1".into())
            .await
            .unwrap()
            .is_applied());
        assert!(store
            .put_if_version(&a, Some(1), "2".into())
            .await
            .unwrap()
            .is_applied());
        assert!(store
            .put_if_version(&b, None, "x".into())
            .await
            .unwrap()
            .is_applied());
        assert_eq!(
            store.delete_if_version(&b, 1).await.unwrap(),
            DeleteOutcome::Deleted
        );
    }
    let store = file_store_at(&path).await;
    let a = store.get(&key("a")).await.unwrap().unwrap();
    assert_eq!((&a.value[..], a.version), (&b"2"[..], 2));
    assert_eq!(store.get(&key("b")).await.unwrap(), None);
    let b = store
        .put_if_version(&key("b"), None, "y".into())
        .await
        .unwrap()
        .applied()
        .unwrap();
    assert_eq!(b.version, 2, "the tombstone's version survived the reopen");
    // WAL is a property of the file.
    let mode: String = raw(&path)
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_held_write_lock_makes_writes_unavailable_not_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let store = SqliteStore::connect(&format!("{}?busy_timeout_ms=50", file_uri(&path)))
        .await
        .unwrap();
    let k = key("k");
    let row = store
        .put_if_version(&k, None, "v".into())
        .await
        .unwrap()
        .applied()
        .unwrap();

    let other = raw(&path);
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = store
        .put_if_version(&k, Some(1), "w".into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_temporary() && !err.outcome_unknown());
    let err = store.delete_if_version(&k, 1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    // WAL: readers are not blocked by the writer.
    assert_eq!(store.get(&k).await.unwrap(), Some(row));
    other.execute_batch("ROLLBACK").unwrap();

    // Nothing was applied, and the store works again.
    let row = store
        .put_if_version(&k, Some(1), "w".into())
        .await
        .unwrap()
        .applied()
        .unwrap();
    assert_eq!(row.version, 2);
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.db");
    std::fs::write(&path, vec![0x5A; 8192]).unwrap();
    let err = SqliteStore::open(SqliteConfig::new(&path))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert_eq!(err.backend(), "sqlite");
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
        Capabilities::PERSISTENT | Capabilities::SHARED | Capabilities::LINEARIZABLE_READS
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
    assert!(a
        .put_if_version(&k, None, "a".into())
        .await
        .unwrap()
        .is_applied());
    assert_eq!(b.get(&k).await.unwrap(), None);
    // Many concurrent calls on the single connection see one database.
    let a = Arc::new(a);
    let n = key("n");
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (a, n) = (Arc::clone(&a), n.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                common::increment(a.as_ref(), &n).await;
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
    for uri in [
        "sqlite://",
        "sqlite://x.db?nope=1",
        "sqlite::memory:?pool_size=3",
    ] {
        let err = SqliteStore::connect(uri).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{uri}");
    }
    let err = SqliteStore::open(SqliteConfig::memory().with_table("x y"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
}

/// `accept_data_loss`: the shared checks every backend passes (with
/// `synchronous=normal`, the setting it unlocks).
#[test]
fn accept_data_loss_option() {
    bakery_testkit::options::accept_data_loss("sqlite://a.db", |uri| {
        let config = bakery_sqlite::SqliteConfig::from_uri(uri)?;
        Ok(bakery_testkit::options::Parsed {
            accept_data_loss: config.accept_data_loss(),
            shown: None,
        })
    });
}
