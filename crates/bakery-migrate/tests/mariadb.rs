//! Migration from a real MariaDB server (`scripts/backends.sh start
//! mariadb`): AUTO_INCREMENT tables and SEQUENCE objects, onto SQLite. Each
//! test works in a database of its own.
#![cfg(feature = "mariadb")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bakery_core::{ErrorKind, VersionedStore};
use bakery_migrate::{Action, Fence, Migrator, Options, Selection};
use bakery_recipes::sequence::Sequence;
use common::{created_and_fenced, in_schema, sqlite_target, writers_get_going};
use mysql_async::prelude::Queryable;
use mysql_async::Conn;

fn source_uri() -> Option<String> {
    bakery_testkit::server_uri("BAKERY_MARIADB_URI", "migrate from mariadb")
}

async fn conn(uri: &str) -> Conn {
    Conn::from_url(uri).await.expect("connect to mariadb")
}

async fn database(uri: &str, case: &str) -> (Conn, String) {
    let mut admin = conn(uri).await;
    let db = bakery_testkit::unique_ident(case);
    admin
        .query_drop(format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    (admin, db)
}

async fn drop_database(admin: &mut Conn, db: &str) {
    admin
        .query_drop(format!("DROP DATABASE {db}"))
        .await
        .unwrap();
}

/// Insert a row of id `id` (from bakery) into the table `t` of `db`.
async fn insert_as_bakery(admin: &mut Conn, db: &str, id: u64) {
    let sql = format!("INSERT INTO {db}.t (id, who) VALUES (?, 'bakery')");
    admin.exec_drop(sql, (id,)).await.unwrap();
}

// Old writers insert with AUTO_INCREMENT and NEXT VALUE FOR while the
// migration runs; then bakery clients insert their ids. No duplicate key;
// every old writer ends on the fence.
common::live_writers_onto_each_target!();

/// MariaDB's AUTO_INCREMENT and SEQUENCE onto bakery's own MariaDB backend
/// (the mysql store, a table of its own on the same server).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_writers_onto_mysql_backend() {
    let Some(uri) = source_uri() else { return };
    let table = bakery_testkit::unique_ident("bk_migrated");
    let target = bakery::connect(&format!("{uri}?table={table}"))
        .await
        .unwrap();
    assert_eq!(target.backend(), "mysql");
    live_writers(target, "mysql").await;
    let mut admin = conn(&uri).await;
    admin
        .query_drop(format!("DROP TABLE {table}"))
        .await
        .unwrap();
}

async fn live_writers(target: Arc<dyn VersionedStore>, label: &str) {
    let Some(uri) = source_uri() else { return };
    let (mut admin, db) = database(&uri, "live").await;
    admin
        .query_drop(format!(
            "CREATE TABLE {db}.auto (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, who TEXT) ENGINE=InnoDB;
             CREATE SEQUENCE {db}.seq CACHE 50;
             CREATE TABLE {db}.by_seq (id BIGINT PRIMARY KEY, who TEXT) ENGINE=InnoDB;"
        ))
        .await
        .unwrap();
    let inserted = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for sql in [
        format!("INSERT INTO {db}.auto (who) VALUES ('old')"),
        format!("INSERT INTO {db}.by_seq (id, who) VALUES (NEXT VALUE FOR {db}.seq, 'old')"),
    ] {
        for _ in 0..3 {
            let (uri, sql, inserted) = (uri.clone(), sql.clone(), inserted.clone());
            writers.push(tokio::spawn(async move {
                let mut conn = conn(&uri).await;
                loop {
                    match conn.query_drop(&sql).await {
                        Ok(()) => inserted.fetch_add(1, Ordering::Relaxed),
                        Err(e) => return e,
                    };
                }
            }));
        }
    }
    writers_get_going(&inserted, 200, &writers).await;
    let migrator = Migrator::connect(&uri, target.clone(), Options::default())
        .await
        .unwrap();
    let steps = migrator.apply(&in_schema(&db), &|_, _| {}).await.unwrap();
    created_and_fenced(&steps, 2);
    for writer in writers {
        let err = writer.await.unwrap();
        let code = match &err {
            mysql_async::Error::Server(e) => e.code,
            other => panic!("an old writer ended on {other}"),
        };
        // 1644: the fence trigger's SIGNAL; 4084: the sequence ran out.
        assert!(code == 1644 || code == 4084, "an old writer ended on {err}");
    }
    let mut clients = Vec::new();
    for (step, table) in steps.iter().zip(["auto", "by_seq"]) {
        for _ in 0..3 {
            let sequence = Sequence::builder(target.clone(), &step.target)
                .block_size(20)
                .build()
                .unwrap();
            let (uri, sql) = (
                uri.clone(),
                format!("INSERT INTO {db}.{table} (id, who) VALUES (?, 'bakery')"),
            );
            clients.push(tokio::spawn(async move {
                let mut conn = conn(&uri).await;
                for _ in 0..100 {
                    let id = sequence.next().await.unwrap();
                    conn.exec_drop(&sql, (id,))
                        .await
                        .unwrap_or_else(|e| panic!("collision or failure at id {id}: {e}"));
                }
            }));
        }
    }
    for c in clients {
        c.await.unwrap();
    }
    let mut rows = 0u64;
    for table in ["auto", "by_seq"] {
        let (all, distinct): (u64, u64) = admin
            .query_first(format!(
                "SELECT COUNT(*), COUNT(DISTINCT id) FROM {db}.{table}"
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(all, distinct);
        rows += all;
    }
    let old = inserted.load(Ordering::Relaxed);
    assert_eq!(rows, old + 600);
    eprintln!("live writers (mariadb) onto {label}: {old} rows by the old generators, 600 by bakery, 0 collisions");
    // Again: nothing changes.
    let again = migrator.apply(&in_schema(&db), &|_, _| {}).await.unwrap();
    for step in &again {
        assert!(
            matches!(step.action, Action::AlreadySafe { .. }),
            "{step:?}"
        );
        assert_eq!(step.fence, Fence::AlreadyPlaced, "{step:?}");
    }
    drop_database(&mut admin, &db).await;
}

/// Hand an AUTO_INCREMENT table and a sequence back, then forward again.
#[tokio::test]
async fn rollback_then_forward_again() {
    let Some(uri) = source_uri() else { return };
    let (mut admin, db) = database(&uri, "back").await;
    admin
        .query_drop(format!(
            "CREATE TABLE {db}.t (id INT AUTO_INCREMENT PRIMARY KEY, who TEXT) ENGINE=InnoDB;
             INSERT INTO {db}.t (who) VALUES ('old'), ('old'), ('old');
             CREATE SEQUENCE {db}.s;
             SELECT NEXT VALUE FOR {db}.s;"
        ))
        .await
        .unwrap();
    let (_dir, target) = sqlite_target().await;
    let migrator = Migrator::connect(&uri, target.clone(), Options::default())
        .await
        .unwrap();
    let all = in_schema(&db);
    let steps = migrator.apply(&all, &|_, _| {}).await.unwrap();
    assert!(
        steps.iter().all(|s| s.action == Action::Create),
        "{steps:?}"
    );
    let t = format!("{db}.t");
    let sequence = Sequence::builder(target.clone(), &t)
        .block_size(5)
        .build()
        .unwrap();
    for _ in 0..3 {
        let id = sequence.next().await.unwrap();
        insert_as_bakery(&mut admin, &db, id).await;
    }
    // Fenced: a generated id is refused, loudly.
    let err = admin
        .query_drop(format!("INSERT INTO {db}.t (who) VALUES ('forgotten')"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, mysql_async::Error::Server(e) if e.code == 1644),
        "{err}"
    );
    let back = migrator.back(&all).await.unwrap();
    let t_back = back.iter().find(|b| b.source == t).unwrap();
    let bakery_next = t_back.bakery_next.unwrap();
    assert!(t_back.source_next >= i128::from(bakery_next), "{t_back:?}");
    for _ in 0..3 {
        admin
            .query_drop(format!("INSERT INTO {db}.t (who) VALUES ('old again')"))
            .await
            .unwrap();
    }
    let smallest_new: u64 = admin
        .query_first(format!(
            "SELECT MIN(id) FROM {db}.t WHERE who = 'old again'"
        ))
        .await
        .unwrap()
        .unwrap();
    assert!(
        smallest_new >= bakery_next,
        "{smallest_new} < {bakery_next}"
    );
    let s_back = back.iter().find(|b| b.source == format!("{db}.s")).unwrap();
    let from_source: u64 = admin
        .query_first(format!("SELECT NEXT VALUE FOR {db}.s"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        from_source >= s_back.bakery_next.unwrap(),
        "sequence continues above bakery"
    );
    let fresh = Sequence::builder(target.clone(), &t).build().unwrap();
    assert_eq!(fresh.next().await.unwrap_err().kind(), ErrorKind::Config);
    // Forward again.
    let steps = migrator.apply(&all, &|_, _| {}).await.unwrap();
    assert!(
        steps
            .iter()
            .all(|s| matches!(s.action, Action::Reopen { .. })),
        "{steps:?}"
    );
    let reopened = Sequence::builder(target.clone(), &t).build().unwrap();
    let id = reopened.next().await.unwrap();
    insert_as_bakery(&mut admin, &db, id).await;
    drop_database(&mut admin, &db).await;
}

/// Wrong credentials and an unknown table: typed errors.
#[tokio::test]
async fn bad_input_is_typed() {
    let Some(uri) = source_uri() else { return };
    let (_dir, target) = sqlite_target().await;
    let mut wrong = url::Url::parse(&uri).unwrap();
    wrong.set_password(Some("not-the-password")).unwrap();
    let err = Migrator::connect(wrong.as_str(), target.clone(), Options::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(!err.to_string().contains("not-the-password"), "{err}");
    let migrator = Migrator::connect(&uri, target, Options::default())
        .await
        .unwrap();
    let err = migrator
        .plan(&Selection::names(["bakery_src.no_such_table"]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}
