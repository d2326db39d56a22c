//! The durability check at open and what the compare-and-set does under
//! database defaults bakery does not expect (isolation levels, read-only),
//! against a real server (`BAKERY_POSTGRES_URI`). Each test that changes a
//! default does it on a scratch database it creates and drops: never
//! server-wide, the server is shared. `synchronous_commit` on bakery's own
//! sessions is checked by a unit test in `src/store.rs` (it needs the pool).

mod common;

use std::sync::Arc;

use bakery_core::{DeleteOutcome, ErrorKind, PutOutcome, VersionedStore};
use bakery_postgres::PostgresStore;
use common::{
    drop_database, drop_tables, key, race, raw_client, raw_client_in, scratch_database, server_uri,
    set_database_default, unique_table, with_options,
};

/// `SHOW setting` on a plain session (not bakery's) in database `db`.
async fn plain_session_shows(uri: &str, db: &str, setting: &str) -> String {
    raw_client_in(uri, Some(db))
        .await
        .query_one(&format!("SHOW {setting}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// The project's server is durable (`fsync`, `full_page_writes` on): the
/// default URI opens, and so does one with the opt-in (nothing to accept).
#[tokio::test]
async fn the_project_server_is_durable_and_opens_with_the_default_uri() {
    let Some(uri) = server_uri("durable_server") else {
        return;
    };
    let raw = raw_client(&uri).await;
    let row = raw
        .query_one(
            "SELECT current_setting('fsync'), current_setting('full_page_writes')",
            &[],
        )
        .await
        .unwrap();
    let (fsync, fpw): (String, String) = (row.get(0), row.get(1));
    assert_eq!(
        (fsync.as_str(), fpw.as_str()),
        ("on", "on"),
        "the test server"
    );
    let table = unique_table("bk_durable");
    let store = PostgresStore::connect(&with_options(&uri, &format!("table={table}")))
        .await
        .unwrap_or_else(|e| panic!("default URI on a durable server: {e}"));
    assert!(!store.config().accept_data_loss());
    assert!(store
        .put_if_version(&key("durable/k"), None, "x".into())
        .await
        .unwrap()
        .is_applied());
    let opted_in = PostgresStore::connect(&with_options(
        &uri,
        &format!("table={table}&accept_data_loss=true"),
    ))
    .await
    .unwrap();
    assert!(opted_in.config().accept_data_loss());
    drop_tables(&uri, &[&table]).await;
}

/// `ALTER DATABASE … SET default_transaction_isolation` to `repeatable
/// read` or `serializable`: bakery's startup packet sets `read committed`,
/// which outranks database and role defaults, so the CAS keeps its READ
/// COMMITTED semantics — no serialization failure, no error at all.
/// Forced for the session through the URI's `options=` (which come after
/// bakery's and win), the statement can fail with 40001: `Unavailable`
/// (nothing applied, retry), never `Internal`, never a lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stricter_isolation_defaults_give_correct_conflicts_or_retryable_errors() {
    let Some(uri) = server_uri("isolation") else {
        return;
    };
    for level in ["repeatable read", "serializable"] {
        let (db, db_uri) = scratch_database(
            &uri,
            "bk_iso",
            &[("default_transaction_isolation", &format!("'{level}'"))],
        )
        .await;
        assert_eq!(
            plain_session_shows(&uri, &db, "default_transaction_isolation").await,
            level,
            "the database default reaches a plain session"
        );

        let store = Arc::new(PostgresStore::connect(&db_uri).await.unwrap());
        let race_default = race(store, key("iso/database_default"), 50).await;
        eprintln!("ALTER DATABASE default_transaction_isolation = {level}: {race_default:?}");
        assert_eq!(
            race_default.unavailable, 0,
            "the database default must not reach bakery's sessions: {race_default:?}"
        );
        assert!(race_default.conflicts > 0, "{race_default:?}");

        let forced_uri = with_options(
            &db_uri,
            &format!(
                "options=-c%20default_transaction_isolation%3D{}",
                level.replace(' ', "%5C%20")
            ),
        );
        let store = Arc::new(PostgresStore::connect(&forced_uri).await.unwrap());
        let race_forced = race(store, key("iso/forced"), 50).await;
        eprintln!("options=-c default_transaction_isolation={level}: {race_forced:?}");
        assert_eq!(
            race_forced.unavailable, race_forced.serialization_failures,
            "every Unavailable is a 40001: {race_forced:?}"
        );
        drop_database(&uri, &db).await;
    }
}

/// `default_transaction_read_only = on` (a database put in read-only mode;
/// a standby looks the same to bakery): a store on an existing table opens
/// and reads; writes fail with SQLSTATE 25006 as `Unavailable`, nothing
/// applied; opening on a missing table fails the same way (it cannot be
/// created).
#[tokio::test]
async fn a_read_only_database_refuses_writes_as_unavailable() {
    let Some(uri) = server_uri("read_only") else {
        return;
    };
    let (db, db_uri) = scratch_database(&uri, "bk_ro", &[]).await;
    let k = key("ro/k");
    let writable = PostgresStore::connect(&db_uri).await.unwrap();
    let row = match writable.put_if_version(&k, None, "a".into()).await.unwrap() {
        PutOutcome::Applied(row) => row,
        other => panic!("{other:?}"),
    };
    drop(writable);
    set_database_default(&uri, &db, "default_transaction_read_only", "on").await;
    assert_eq!(
        plain_session_shows(&uri, &db, "default_transaction_read_only").await,
        "on"
    );

    let store = PostgresStore::connect(&db_uri)
        .await
        .expect("an existing table opens read-only");
    assert_eq!(store.get(&k).await.unwrap(), Some(row.clone()));
    let refused = [
        store
            .put_if_version(&k, Some(1), "b".into())
            .await
            .unwrap_err(),
        store
            .put_if_version(&key("ro/new"), None, "b".into())
            .await
            .unwrap_err(),
        store.delete_if_version(&k, 1).await.unwrap_err(),
    ];
    for e in &refused {
        eprintln!("read-only write: {:?}: {e}", e.kind());
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(e.message().contains("25006"), "{e}");
        assert!(e.message().contains("read-only"), "{e}");
        assert!(e.message().contains("nothing was applied"), "{e}");
    }
    assert_eq!(store.get(&k).await.unwrap(), Some(row.clone()));
    assert_eq!(store.get(&key("ro/new")).await.unwrap(), None);
    let notified = store.notify(&k).await;
    eprintln!("read-only notify: {notified:?}");

    let missing = PostgresStore::connect(&with_options(&db_uri, "table=not_there"))
        .await
        .expect_err("a missing table cannot be created read-only");
    eprintln!(
        "read-only open, missing table: {:?}: {missing}",
        missing.kind()
    );
    assert_eq!(missing.kind(), ErrorKind::Unavailable, "{missing}");
    assert!(missing.message().contains("read-only"), "{missing}");

    // Writable again: new sessions write.
    set_database_default(&uri, &db, "default_transaction_read_only", "off").await;
    let store = PostgresStore::connect(&db_uri).await.unwrap();
    assert_eq!(
        store.delete_if_version(&k, 1).await.unwrap(),
        DeleteOutcome::Deleted
    );
    drop(store);
    drop_database(&uri, &db).await;
}
