//! How PostgresStore reports failures it cannot see the end of, against
//! the real server (`BAKERY_POSTGRES_URI`): a connection refused, a session
//! the server ends under a running statement, a connection lost after the
//! statement was sent. The mapper's SQLSTATE table and the driver's error
//! kinds are pinned one by one in `src/error.rs` (`driver_tests`,
//! `server_tests`); these tests go through the store's public API.

mod common;

use std::error::Error as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{ErrorKind, Operation, Sent, VersionedStore};
use bakery_postgres::PostgresStore;
use common::{
    applied, drop_tables, get_retrying, key, lock_row, on_relayed, raw_client, raw_row, server_uri,
    unique_table, with_options, Relayed,
};

/// The driver error behind a store error.
fn driver_error(err: &bakery_core::Error) -> &tokio_postgres::Error {
    err.source()
        .and_then(|s| s.downcast_ref::<tokio_postgres::Error>())
        .unwrap_or_else(|| panic!("no driver error behind {err}"))
}

#[tokio::test]
async fn connection_refused_on_an_unused_port_is_unavailable() {
    // A port the kernel just handed out and nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = PostgresStore::connect(&format!(
        "postgres://postgres@127.0.0.1:{port}/x?connect_timeout=2"
    ))
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(!err.outcome_unknown());
    assert_eq!(err.operation(), Some(Operation::Open), "{err}");
    assert_eq!(err.sent(), Some(Sent::No), "{err}");
    let e = driver_error(&err);
    let io = e
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .unwrap_or_else(|| panic!("{e:?}"));
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused, "{e:?}");
}

/// The pid of the one backend waiting for a lock in a statement `LIKE`
/// `pattern`.
async fn waiting_backend(admin: &tokio_postgres::Client, pattern: &str) -> i32 {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let rows = admin
                .query(
                    "SELECT pid FROM pg_stat_activity \
                     WHERE wait_event_type = 'Lock' AND query LIKE $1",
                    &[&pattern],
                )
                .await
                .unwrap();
            match rows.len() {
                0 => tokio::time::sleep(Duration::from_millis(10)).await,
                1 => return rows[0].get(0),
                n => panic!("{n} backends wait on {pattern}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no backend came to wait on {pattern}"))
}

async fn terminate(admin: &tokio_postgres::Client, pid: i32) {
    let row = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "backend {pid} was not terminated");
}

/// The server ends the session under a running statement (a shutdown, a
/// failover): FATAL 57P01. A write it ran is `Unknown` — it may have
/// applied, whatever happened here — and a read is `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_terminated_under_a_statement_is_unknown_for_writes_unavailable_for_reads() {
    let Some(uri) = server_uri("terminated") else {
        return;
    };
    let table = unique_table("bk_kill");
    // One pooled connection: its statements are prepared while opening,
    // so each call below is waiting in its execute phase when killed.
    let store = Arc::new(
        PostgresStore::connect(&with_options(
            &uri,
            &format!("table={table}&pool_size=1&timeout_ms=20000"),
        ))
        .await
        .unwrap(),
    );
    let admin = raw_client(&uri).await;
    let k = key("kill/k");
    let row = applied(&*store, &k, None, "v").await;
    // The store's statements, as pg_stat_activity shows them.
    let update = format!("WITH w AS (UPDATE %{table}% SET value = $3,%");
    let delete = format!("WITH w AS (UPDATE %{table}% SET value = NULL %");

    // Writes: the row is locked by another transaction, the write waits.
    let mut holder = raw_client(&uri).await;
    let tx = lock_row(&mut holder, &table, &k).await;
    let writes: [(&str, &String); 2] = [("put", &update), ("delete", &delete)];
    for (what, sql) in writes {
        let (caller, k2) = (store.clone(), k.clone());
        let version = row.version;
        let call = tokio::spawn(async move {
            if what == "put" {
                caller
                    .put_if_version(&k2, Some(version), "lost?".into())
                    .await
                    .map(|_| ())
            } else {
                caller.delete_if_version(&k2, version).await.map(|_| ())
            }
        });
        let pid = waiting_backend(&admin, sql).await;
        terminate(&admin, pid).await;
        let err = call.await.unwrap().expect_err(what);
        assert_eq!(err.kind(), ErrorKind::Unknown, "{what}: {err}");
        assert!(err.outcome_unknown());
        assert!(err.message().contains("57P01"), "{what}: {err}");
        assert!(err.message().contains("may or may not"), "{what}: {err}");
        let op = if what == "put" {
            Operation::Put
        } else {
            Operation::Delete
        };
        assert_eq!(err.operation(), Some(op), "{err}");
        assert_eq!(
            driver_error(&err).code().map(|c| c.code()),
            Some("57P01"),
            "{what}"
        );
        // A read (the row lock does not block it) until the pool has a
        // fresh connection: the killed one can still be handed out once,
        // before the driver has seen it end (`Unavailable`, retryable).
        assert_eq!(get_retrying(&store, &k).await, Some(row.clone()));
    }
    tx.rollback().await.unwrap();
    // It had not applied: Unknown is what the client can know, not a guess
    // that it did.
    assert_eq!(
        raw_row(&admin, &table, k.as_str()).await,
        Some((Some(b"v".to_vec()), Some(row.version as i64)))
    );

    // A read: the table is locked exclusively, the read waits.
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        .await
        .unwrap();
    let reader = {
        let (store, k) = (store.clone(), k.clone());
        tokio::spawn(async move { store.get(&k).await })
    };
    let get = format!("SELECT value, version FROM %{table}% WHERE key = $1");
    let pid = waiting_backend(&admin, &get).await;
    terminate(&admin, pid).await;
    let err = reader.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.message().contains("57P01"), "{err}");
    tx.rollback().await.unwrap();
    assert_eq!(get_retrying(&store, &k).await, Some(row));
    drop_tables(&uri, &[&table]).await;
}

/// The statement went out and the connection was lost before any reply
/// (the driver reports `Closed`): a write is `Unknown` — here it never
/// reached the server, but the client cannot know that — and a read is
/// `Unavailable`. Both before the client's own deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_after_the_statement_was_sent_is_unknown_for_writes() {
    on_relayed("lost_after_send", "timeout_ms=20000", async |relayed| {
        let Relayed {
            uri,
            relay,
            table,
            writer,
            reader,
            key: k,
            row,
        } = relayed;
        let (writer, reader) = (Arc::new(writer), Arc::new(reader));

        relay.hold.store(true, Ordering::SeqCst);
        let started = std::time::Instant::now();
        let put = {
            let (writer, k) = (writer.clone(), k.clone());
            tokio::spawn(async move {
                writer
                    .put_if_version(&k, Some(row.version), "lost?".into())
                    .await
            })
        };
        let get = {
            let (reader, k) = (reader.clone(), k.clone());
            tokio::spawn(async move { reader.get(&k).await })
        };
        // Each store's one connection (its statements prepared while opening)
        // has sent its call's statement, held by the relay: cut only then.
        relay.sent_statements(2).await;
        relay.cut();
        let err = put.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
        assert!(err.message().contains("may or may not"), "{err}");
        assert!(driver_error(&err).is_closed(), "{err}");
        assert_eq!(err.sent(), Some(Sent::Maybe), "{err}");
        let err = get.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(driver_error(&err).is_closed(), "{err}");
        assert_eq!(err.operation(), Some(Operation::Get), "{err}");
        // (A deadline would carry no driver error, and `is_closed()` above
        // says it is the lost connection; this only bounds a hang.)
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not the client's deadline: {:?}",
            started.elapsed()
        );

        relay.hold.store(false, Ordering::SeqCst);
        let admin = raw_client(&uri).await;
        assert_eq!(
            raw_row(&admin, &table, k.as_str()).await,
            Some((Some(b"v".to_vec()), Some(row.version as i64))),
            "the held write never reached the server"
        );
    })
    .await;
}
