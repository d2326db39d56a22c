//! MysqlStore against a real server (`BAKERY_MARIADB_URI`): what only a
//! server has — tombstones, corrupt rows, concurrent creates of new keys,
//! lock waits, foreign tables. The contract itself is the conformance
//! suite's (`cargo test -p bakery --features mysql --test conformance -- mysql`).

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use bakery_core::{DeleteOutcome, ErrorKind, Key, PutOutcome, VersionedStore};
use bakery_testkit::corrupt;
use common::{drop_tables, exec, open, raw_conn, raw_row, server_uri, unique_table};

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

#[tokio::test]
async fn life_cycle_keeps_a_tombstone_at_the_deleted_version() {
    let Some(uri) = server_uri("life_cycle") else {
        return;
    };
    let table = unique_table("bk_life");
    let store = open(&uri, &format!("table={table}")).await;
    assert!(store.is_mariadb(), "the test server is MariaDB");
    let mut raw = raw_conn(&uri).await;
    corrupt::tombstone_life_cycle(&store, async |k| raw_row(&mut raw, &table, k).await).await;
    drop_tables(&uri, &[&table]).await;
}

#[tokio::test]
async fn corrupt_rows_are_typed_errors_naming_the_key_and_stay_unchanged() {
    let Some(uri) = server_uri("corrupt") else {
        return;
    };
    let table = unique_table("bk_corrupt");
    let mut raw = raw_conn(&uri).await;
    // Our shape by hand, with a nullable version the store never writes.
    exec(
        &mut raw,
        &format!(
            "CREATE TABLE {table} (`key` VARBINARY(512) NOT NULL PRIMARY KEY, `value` LONGBLOB NULL, `version` BIGINT NULL) ENGINE = InnoDB"
        ),
    )
    .await;
    let store = open(&uri, &format!("table={table}")).await;
    let mut writer = raw_conn(&uri).await;
    let insert = format!("INSERT INTO {table} VALUES (?, ?, ?)");
    let write = async |(k, value, version): corrupt::SignedRow| {
        use bakery_mysql::mysql_async::prelude::Queryable;
        writer
            .exec_drop(&insert, (k.as_bytes(), value, version))
            .await
            .unwrap();
    };
    let read = async |k: &str| raw_row(&mut raw, &table, k).await;
    corrupt::signed_versions(&store, "mysql", write, read).await;
    let fine = store
        .put_if_version(&key("c/fine"), None, "ok".into())
        .await
        .unwrap();
    assert!(fine.is_applied());
    drop_tables(&uri, &[&table]).await;
}

/// 16 clients, each on a store (and so connections) of its own, create and
/// then update the same new keys at once, round after round. InnoDB's
/// locks on a key not there yet (gap and insert-intention locks) are where
/// MySQL deadlocks usually come from: every call must end as an applied
/// write, a conflict carrying a newer row, or — if the server still picks
/// a deadlock victim or times out a lock wait — an `Unavailable` error (the
/// statement rolled back); and no version is ever handed to two writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_creating_and_updating_the_same_new_keys() {
    let Some(uri) = server_uri("concurrent_creates") else {
        return;
    };
    let table = unique_table("bk_race");
    let mut stores = Vec::new();
    for _ in 0..16 {
        stores.push(Arc::new(
            open(&uri, &format!("table={table}&pool_size=2")).await,
        ));
    }
    const ROUNDS: usize = 40;
    let mut tasks = Vec::new();
    for (client, store) in stores.iter().enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            let mut unavailable = 0usize;
            for round in 0..ROUNDS {
                // Several new keys per round, next to each other in the
                // index, so gaps are shared.
                for k in 0..3 {
                    let k = Key::new(format!("race/{round:04}/{k}")).unwrap();
                    let mut expected = None;
                    for _ in 0..3 {
                        let value = format!("{client}").into_bytes();
                        match store.put_if_version(&k, expected, value.into()).await {
                            Ok(PutOutcome::Applied(row)) => {
                                won.push((k.to_string(), row.version));
                                expected = Some(row.version);
                            }
                            Ok(PutOutcome::Conflict(Some(current))) => {
                                assert!(
                                    expected.is_none_or(|e| current.version > e),
                                    "a conflict must carry a newer row: {current:?} vs {expected:?}"
                                );
                                expected = Some(current.version);
                            }
                            Ok(PutOutcome::Conflict(None)) => {
                                panic!("{k}: conflict without a row, yet nobody deletes")
                            }
                            Err(e) if e.kind() == ErrorKind::Unavailable => unavailable += 1,
                            Err(e) => panic!("{k}: {e}"),
                        }
                    }
                }
            }
            (won, unavailable)
        }));
    }
    let mut owners: HashMap<(String, u64), usize> = HashMap::new();
    let mut unavailable = 0;
    let mut writes = 0;
    for (client, task) in tasks.into_iter().enumerate() {
        let (won, u) = task.await.unwrap();
        unavailable += u;
        writes += won.len();
        for version in won {
            if let Some(other) = owners.insert(version.clone(), client) {
                panic!("{version:?} applied for clients {other} and {client}");
            }
        }
    }
    // Every key got exactly versions 1..=n with no gap: one winner each.
    let mut raw = raw_conn(&uri).await;
    for round in 0..ROUNDS {
        for k in 0..3 {
            let name = format!("race/{round:04}/{k}");
            let (_, version) = raw_row(&mut raw, &table, &name).await.expect("created");
            let version = version.expect("a version") as u64;
            for v in 1..=version {
                assert!(
                    owners.contains_key(&(name.clone(), v)),
                    "{name} v{v} has no writer"
                );
            }
        }
    }
    println!(
        "16 clients: {writes} writes applied, {unavailable} Unavailable (deadlock or lock wait)"
    );
    drop_tables(&uri, &[&table]).await;
}

/// A write blocked on a row lock held by another transaction is aborted by
/// the server within the store's timeout: a clean `Unavailable` (nothing
/// applied), and the row is unchanged.
#[tokio::test]
async fn a_write_waiting_on_a_held_row_lock_is_unavailable_and_not_applied() {
    let Some(uri) = server_uri("lock_wait") else {
        return;
    };
    use bakery_mysql::mysql_async::prelude::Queryable;
    let table = unique_table("bk_wait");
    let store = open(&uri, &format!("table={table}&timeout_ms=1000")).await;
    let k = key("wait/one");
    let v1 = store.put_if_version(&k, None, "a".into()).await.unwrap();
    assert!(v1.is_applied());
    let mut holder = raw_conn(&uri).await;
    exec(&mut holder, "BEGIN").await;
    holder
        .exec_drop(
            format!("SELECT * FROM {table} WHERE `key` = ? FOR UPDATE"),
            (b"wait/one".to_vec(),),
        )
        .await
        .unwrap();
    let e = store
        .put_if_version(&k, Some(1), "b".into())
        .await
        .expect_err("the row is locked");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let e = store.delete_if_version(&k, 1).await.expect_err("locked");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    exec(&mut holder, "ROLLBACK").await;
    let mut raw = raw_conn(&uri).await;
    assert_eq!(
        raw_row(&mut raw, &table, "wait/one").await,
        Some((Some(b"a".to_vec()), Some(1)))
    );
    assert_eq!(
        store.delete_if_version(&k, 1).await.unwrap(),
        DeleteOutcome::Deleted
    );
    drop_tables(&uri, &[&table]).await;
}

/// A table of another shape, or a name that is not a table, is refused at
/// open naming the table.
#[tokio::test]
async fn a_foreign_table_is_refused() {
    let Some(uri) = server_uri("foreign_table") else {
        return;
    };
    let table = unique_table("bk_foreign");
    let mut raw = raw_conn(&uri).await;
    exec(
        &mut raw,
        &format!("CREATE TABLE {table} (id INT PRIMARY KEY, name TEXT) ENGINE = InnoDB"),
    )
    .await;
    let e =
        bakery_mysql::MysqlStore::connect(&common::with_options(&uri, &format!("table={table}")))
            .await
            .expect_err("a foreign table");
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    bakery_testkit::assert_mentions(&e, &[&table, "unexpected schema"]);
    drop_tables(&uri, &[&table]).await;
}

/// A table whose columns would not keep keys and values as written is
/// refused at open, naming what it found: a text key (its `_ci` collation
/// makes `A` and `a` one row), a short or padded binary key, a value column
/// that cuts values short or cannot hold a tombstone.
#[tokio::test]
async fn a_table_that_would_not_keep_keys_and_values_is_refused() {
    let Some(uri) = server_uri("lossy_table") else {
        return;
    };
    let mut raw = raw_conn(&uri).await;
    for (i, (key, value)) in [
        ("VARCHAR(512)", "LONGBLOB NULL"),
        ("VARBINARY(16)", "LONGBLOB NULL"),
        ("BINARY(255)", "LONGBLOB NULL"),
        ("VARBINARY(512)", "BLOB NULL"),
        ("VARBINARY(512)", "LONGBLOB NOT NULL"),
    ]
    .into_iter()
    .enumerate()
    {
        let table = unique_table(&format!("bk_lossy{i}"));
        exec(
            &mut raw,
            &format!(
                "CREATE TABLE {table} (`key` {key} NOT NULL PRIMARY KEY, `value` {value}, `version` BIGINT NOT NULL) ENGINE = InnoDB"
            ),
        )
        .await;
        let e = bakery_mysql::MysqlStore::connect(&common::with_options(
            &uri,
            &format!("table={table}"),
        ))
        .await
        .expect_err(&format!("key {key}, value {value}"));
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        bakery_testkit::assert_mentions(&e, &[&table, "unexpected schema"]);
        drop_tables(&uri, &[&table]).await;
    }
}

/// Every call runs with the session settings the guarantees rest on, also
/// on a connection the pool hands out again (the driver's reset on return
/// would drop them): READ COMMITTED and the statement limit.
#[tokio::test]
async fn pooled_connections_keep_the_session_settings() {
    let Some(uri) = server_uri("session") else {
        return;
    };
    let table = unique_table("bk_session");
    let store = open(&uri, &format!("table={table}&pool_size=1&timeout_ms=1500")).await;
    for round in 0..3 {
        let k = key(&format!("session/{round}"));
        assert!(store
            .put_if_version(&k, None, "x".into())
            .await
            .unwrap()
            .is_applied());
        let (isolation, limit, sql_mode) = store.session_settings().await.unwrap();
        assert_eq!(isolation, "READ-COMMITTED", "round {round}");
        assert_eq!(limit, "1.500000", "round {round}");
        assert_eq!(
            sql_mode, "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION",
            "round {round}"
        );
    }
    drop_tables(&uri, &[&table]).await;
}
