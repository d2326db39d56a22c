//! PostgresStore against a real server (`BAKERY_POSTGRES_URI`): what only a
//! server has — table creation races, foreign schemas, corrupt rows,
//! timeouts on both sides, unreachable servers. The contract itself is the
//! conformance suite's (`cargo test -p bakery --features postgres --test conformance`).

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery_core::{ErrorKind, Key, PutOutcome, VersionedStore, Watch};
use bakery_postgres::PostgresStore;
use bakery_testkit::corrupt;
use bakery_testkit::watch::{
    count_reaches, next_wake, recovers_from_a_lost_feed, the_last_watch_still_wakes,
};
use common::{
    applied, bare_table, drop_tables, exec, key, lock_row, on_relayed, raw_client, raw_row,
    raw_server, server_uri, unique_table, with_options, Relayed,
};

async fn open(uri: &str, table: &str) -> PostgresStore {
    PostgresStore::connect(&with_options(uri, &format!("table={table}")))
        .await
        .unwrap_or_else(|e| panic!("open table {table}: {e}"))
}

async fn open_err(uri: &str, table: &str) -> bakery_core::Error {
    PostgresStore::connect(&with_options(uri, &format!("table={table}")))
        .await
        .expect_err("opening must fail")
}

/// Run `body` with the server URI, a fresh table's name `PREFIX_…` and a
/// store on it, then drop the table; without a server, print why and pass
/// (see [`server_uri`]).
async fn on_fresh_table(
    test: &str,
    prefix: &str,
    body: impl AsyncFnOnce(&str, &str, Arc<PostgresStore>),
) {
    let Some(uri) = server_uri(test) else {
        return;
    };
    let table = unique_table(prefix);
    body(&uri, &table, Arc::new(open(&uri, &table).await)).await;
    drop_tables(&uri, &[&table]).await;
}

#[tokio::test]
async fn life_cycle_keeps_a_tombstone_at_the_deleted_version() {
    on_fresh_table("life_cycle", "bk_life", async |uri, table, store| {
        let raw = raw_client(uri).await;
        corrupt::tombstone_life_cycle(&*store, async |k| raw_row(&raw, table, k).await).await;
    })
    .await;
}

/// Under contention every conflict must carry a row that really conflicts:
/// strictly newer than the version presented (the counter is never
/// deleted; `common::race` checks each one). A conflict built from a
/// snapshot older than the row the write waited for would hand back the
/// presented version itself: this is the re-run of `Statements` at work.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conflicts_under_contention_carry_a_newer_row() {
    on_fresh_table("contention", "bk_contend", async |_, _, store| {
        let race = common::race(store, key("contend/counter"), 100).await;
        assert_eq!(race.unavailable, 0, "no call may fail: {race:?}");
        assert!(
            race.conflicts > 0,
            "8 writers on one key must have conflicted"
        );
    })
    .await;
}

/// Creates and deletes racing on one key. What a conflict carries and
/// that no version repeats is the conformance suite's churn case; what is
/// this store's own is that its re-run of `Statements` settles nearly every
/// race: a delete never fails, and a create gives up (`Unavailable` after
/// its lost races) only rarely.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_and_delete_churn_rarely_gives_up() {
    on_fresh_table("churn", "bk_churn", async |_, _, store| {
        let k = key("churn/k");
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (store, k) = (store.clone(), k.clone());
                tokio::spawn(async move {
                    let mut gave_up = 0;
                    for _ in 0..60 {
                        let version = match store.put_if_version(&k, None, "x".into()).await {
                            Ok(PutOutcome::Applied(row) | PutOutcome::Conflict(Some(row))) => {
                                row.version
                            }
                            Ok(PutOutcome::Conflict(None)) => {
                                panic!("a create conflicted with no row")
                            }
                            Err(e) if e.kind() == ErrorKind::Unavailable => {
                                gave_up += 1;
                                continue;
                            }
                            Err(e) => panic!("create: {e}"),
                        };
                        if let Err(e) = store.delete_if_version(&k, version).await {
                            panic!("delete: {e}");
                        }
                    }
                    gave_up
                })
            })
            .collect();
        let mut gave_up = 0;
        for task in tasks {
            gave_up += task.await.unwrap();
        }
        assert!(
            gave_up <= 8,
            "{gave_up} creates gave up after repeated races"
        );
    })
    .await;
}

#[tokio::test]
async fn custom_and_schema_qualified_tables() {
    let Some((uri, raw)) = raw_server("custom_table").await else {
        return;
    };
    let table = unique_table("bk_custom");
    let store = open(&uri, &table).await;
    assert_eq!(store.config().table().name(), table);
    let k = key("custom/k");
    applied(&store, &k, None, "here").await;
    assert_eq!(
        raw_row(&raw, &table, "custom/k").await,
        Some((Some(b"here".to_vec()), Some(1)))
    );
    let default = raw
        .query_one(
            "SELECT to_regclass('bakery_rows') IS NULL OR NOT EXISTS (SELECT 1 FROM bakery_rows WHERE key = 'custom/k')",
            &[],
        )
        .await;
    if let Ok(row) = default {
        assert!(
            row.get::<_, bool>(0),
            "the row went to the custom table only"
        );
    }

    // Schema-qualified, mixed case: quoted, so the case is kept.
    exec(&raw, "CREATE SCHEMA IF NOT EXISTS bk_test_schema").await;
    let name = format!("Mixed_{}", unique_table("t"));
    let store = open(&uri, &format!("bk_test_schema.{name}")).await;
    applied(&store, &k, None, "qualified").await;
    assert_eq!(
        raw_row(&raw, &format!("bk_test_schema.\"{name}\""), "custom/k").await,
        Some((Some(b"qualified".to_vec()), Some(1)))
    );
    // A schema that does not exist is a configuration error.
    let err = open_err(&uri, &format!("{}.t", unique_table("bk_noschema"))).await;
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    drop_tables(&uri, &[&table, &format!("bk_test_schema.\"{name}\"")]).await;
}

#[tokio::test]
async fn a_table_of_another_shape_is_a_config_error() {
    let Some((uri, raw)) = raw_server("wrong_schema").await else {
        return;
    };
    let mut made = Vec::new();
    let cases = [
        (
            "key TEXT PRIMARY KEY, value TEXT, version INTEGER NOT NULL",
            "unexpected schema",
        ),
        (
            "key TEXT PRIMARY KEY, value BYTEA NOT NULL, version BIGINT NOT NULL",
            "unexpected schema",
        ),
        (
            "key TEXT PRIMARY KEY, value BYTEA, version BIGINT NOT NULL, extra INT",
            "unexpected schema",
        ),
        (
            "key VARCHAR(10) PRIMARY KEY, value BYTEA, version BIGINT",
            "unexpected schema",
        ),
        ("key TEXT, value BYTEA, version BIGINT", "no unique index"),
        ("id INT", "unexpected schema"),
    ];
    for (columns, needle) in cases {
        let table = unique_table("bk_wrong");
        exec(&raw, &format!("CREATE TABLE {table} ({columns})")).await;
        let err = open_err(&uri, &table).await;
        assert_eq!(err.kind(), ErrorKind::Config, "{columns}: {err}");
        assert_eq!(err.backend(), "postgres");
        assert!(err.message().contains(needle), "{columns}: {err}");
        assert!(err.message().contains(&table), "{columns}: {err}");
        made.push(table);
    }
    let view = unique_table("bk_view");
    let sql = format!(
        "CREATE VIEW {view} AS SELECT 'k'::text AS key, NULL::bytea AS value, 1::bigint AS version"
    );
    exec(&raw, &sql).await;
    let err = open_err(&uri, &view).await;
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.message().contains("a view"), "{err}");
    // Our own shape, made by hand (nullable version, no CHECK): accepted.
    let table = bare_table(&raw, "bk_by_hand").await;
    open(&uri, &table).await;
    made.push(view);
    made.push(table);
    let made: Vec<&str> = made.iter().map(String::as_str).collect();
    drop_tables(&uri, &made).await;
}

#[tokio::test]
async fn corrupt_rows_are_typed_errors_naming_the_key_and_stay_unchanged() {
    let Some((uri, raw)) = raw_server("corrupt").await else {
        return;
    };
    // Without the CHECK and NOT NULL the store would have added.
    let table = bare_table(&raw, "bk_corrupt").await;
    let store = open(&uri, &table).await;
    let insert = format!("INSERT INTO {table} VALUES ($1, $2, $3)");
    let write = async |(k, value, version): corrupt::SignedRow| {
        raw.execute(&insert, &[&k, &value, &version]).await.unwrap();
    };
    let read = async |k: &str| raw_row(&raw, &table, k).await;
    corrupt::signed_versions(&store, "postgres", write, read).await;
    // Other rows of the same table are fine.
    applied(&store, &key("c/fine"), None, "ok").await;
    drop_tables(&uri, &[&table]).await;
}

#[tokio::test]
async fn server_statement_timeout_is_unavailable_and_reads_do_not_wait() {
    let Some(uri) = server_uri("statement_timeout") else {
        return;
    };
    let table = unique_table("bk_timeout");
    let store = PostgresStore::connect(&with_options(
        &uri,
        &format!("table={table}&timeout_ms=200"),
    ))
    .await
    .unwrap();
    let k = key("locked/k");
    let row = applied(&store, &k, None, "v").await;
    let mut raw = raw_client(&uri).await;
    let tx = lock_row(&mut raw, &table, &k).await;
    let started = Instant::now();
    let err = store
        .put_if_version(&k, Some(row.version), "blocked".into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.message().contains("nothing was applied"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let err = store.delete_if_version(&k, row.version).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    // MVCC: a read does not wait for the row lock.
    assert_eq!(store.get(&k).await.unwrap(), Some(row.clone()));
    tx.rollback().await.unwrap();
    let next = applied(&store, &k, Some(row.version), "free").await;
    assert_eq!(
        next.version,
        row.version + 1,
        "the timed-out writes did not apply"
    );
    drop_tables(&uri, &[&table]).await;
}

#[tokio::test]
async fn client_timeout_after_send_is_unknown_for_writes_unavailable_for_reads() {
    let options = "timeout_ms=300&connect_timeout=2";
    on_relayed("client_timeout", options, async |relayed| {
        let Relayed {
            relay,
            writer,
            reader,
            key: k,
            row,
            ..
        } = relayed;

        relay.hold.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let err = reader.get(&k).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        let err = writer
            .put_if_version(&k, Some(row.version), "lost?".into())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
        assert!(err.outcome_unknown());
        assert!(err.message().contains("may or may not"), "{err}");
        let err = writer.delete_if_version(&k, row.version).await.unwrap_err();
        // The stalled connection was dropped; a new one cannot get through.
        assert!(err.is_temporary(), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{:?}",
            started.elapsed()
        );

        // Once the network flows again the bytes held in the "network" reach
        // the server: the write may apply now, after it was reported Unknown.
        // That is exactly why Unknown is not Unavailable.
        relay.hold.store(false, Ordering::Relaxed);
        let now = reader.get(&k).await.expect("the store recovers").unwrap();
        let late = now.version == row.version + 1 && &now.value[..] == b"lost?";
        assert!(now == row || late, "{now:?}");
    })
    .await;
}

#[tokio::test]
async fn bad_credentials_and_databases_are_config_errors_without_the_password() {
    let Some(uri) = server_uri("credentials") else {
        return;
    };
    let base: tokio_postgres::Config = uri.split('?').next().unwrap().parse().unwrap();
    let host = match &base.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        #[allow(unreachable_patterns)]
        _ => return,
    };
    let port = base.get_ports().first().copied().unwrap_or(5432);
    let user = base.get_user().unwrap();
    let cases = [
        format!("postgres://bk_no_such_role:hunter2-SECRET@{host}:{port}/postgres"),
        format!("postgres://{user}:hunter2-SECRET@{host}:{port}/bk_no_such_database"),
    ];
    for bad in cases {
        let err = PostgresStore::connect(&bad).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        let text = format!("{err} {err:?}");
        assert!(!text.contains("hunter2-SECRET"), "{text}");
    }
    // `require` connects where the server has TLS (scripts/backends.sh runs
    // it with ssl=on), and refuses, not falls back, where it has none.
    let ssl_on = raw_client(&uri)
        .await
        .query_one("SHOW ssl", &[])
        .await
        .expect("SHOW ssl")
        .get::<_, String>(0)
        == "on";
    let table = unique_table("bk_tls");
    let required = PostgresStore::connect(&format!(
        "postgres://{user}@{host}:{port}/{}?sslmode=require&table={table}",
        base.get_dbname().unwrap_or("postgres")
    ))
    .await;
    if ssl_on {
        let store = required.unwrap_or_else(|e| panic!("ssl is on, yet `require` failed: {e}"));
        applied(&store, &key("tls/k"), None, "over TLS").await;
        drop_tables(&uri, &[&table]).await;
    } else {
        let err = required.expect_err("ssl is off, yet `require` connected");
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(err.message().contains("TLS"), "{err}");
    }
}

async fn watch(store: &PostgresStore, k: &Key) -> Watch {
    store.watch(k).await.unwrap().expect("postgres can watch")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_watch_removes_its_registration() {
    on_fresh_table("drop_watch", "bk_watch", async |_, _, store| {
        let k = key("lock/a");
        let kept = watch(&store, &k).await;
        let dropped = watch(&store, &key("lock/other")).await;
        let dropped_too = watch(&store, &k).await;
        assert_eq!(store.active_watches(), 3);
        drop(dropped);
        drop(dropped_too);
        count_reaches("active watches", || store.active_watches(), 1).await;
        the_last_watch_still_wakes(&*store, &k, kept, || store.active_watches()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listen_session_ends_its_watches_and_the_next_watch_reconnects() {
    on_fresh_table("lost_listener", "bk_watch", async |uri, _, store| {
        let k = key("lock/a");
        let w = watch(&store, &k).await;
        // The session's last statement is its LISTEN: find it and kill it.
        let raw = raw_client(uri).await;
        let killed: i64 = raw
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1",
                &[&format!("LISTEN \"{}\"", store.channel())],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(killed, 1, "exactly one LISTEN session per store");
        // The next watch opens a new session.
        recovers_from_a_lost_feed(&*store, &k, w, || store.active_watches()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qualified_and_long_table_names_have_working_channels() {
    let Some((uri, raw)) = raw_server("qualified_channels").await else {
        return;
    };
    exec(&raw, "CREATE SCHEMA IF NOT EXISTS bk_test_schema").await;
    let qualified = format!("bk_test_schema.Mixed_{}", unique_table("w"));
    // 63 bytes, the longest table name: with `bakery_` in front, too long
    // for a channel name.
    let base = unique_table("bk_long");
    let long = format!("{base}_{}", "x".repeat(62 - base.len()));
    assert_eq!(long.len(), 63);
    let k = key("lock/a");
    for table in [&qualified, &long] {
        let store = open(&uri, table).await;
        assert!(store.channel().len() <= 63, "{}", store.channel());
        let mut w = watch(&store, &k).await;
        store.notify(&k).await.unwrap();
        assert!(next_wake(&mut w).await, "{table}");
    }
    let (schema, name) = qualified.split_once('.').unwrap();
    drop_tables(&uri, &[&format!("{schema}.\"{name}\""), &long]).await;
}
