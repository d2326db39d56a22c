//! The raw clients of `bakery_bench::peers` against the real servers
//! (`BAKERY_<NAME>_URI`, exported by `scripts/backends.sh`): each
//! conditional write applies when it expects the current version and is
//! refused after another writer, and the native counters count.

#![cfg_attr(not(server_backend), allow(unused_imports, unused_macros, dead_code))]

use std::time::{SystemTime, UNIX_EPOCH};

use bakery_bench::peers::RAW_VALUE;

/// `$update` (a raw conditional update to [`RAW_VALUE`]) applies twice in
/// a row, each expecting the version the previous one produced; once
/// `$other_writer` has written, it is refused.
macro_rules! assert_chained_then_refused {
    ($update:expr, $other_writer:expr) => {
        assert!($update.await.expect("update"));
        assert!($update.await.expect("update"));
        $other_writer.await.expect("another writer");
        assert!(!$update.await.expect("stale update"));
    };
}

/// `$next` (a native counter's increment by one, on a new counter) counts
/// 1, then 2.
macro_rules! assert_counts_from_one {
    ($next:expr) => {
        assert_eq!($next.await.expect("1"), 1);
        assert_eq!($next.await.expect("2"), 2);
    };
}

/// The URI of the server in the environment variable `$var`; without one
/// the test returns early (skipped, as [`bakery_testkit::server_uri`] says).
macro_rules! uri_or_skip {
    ($var:literal) => {
        match bakery_testkit::server_uri($var, "peers") {
            Some(uri) => uri,
            None => return,
        }
    };
}

/// A name no other run uses: `prefix` + the time in hex.
fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}_{nanos:x}")
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_raw_cas_and_nextval() {
    use bakery_bench::peers::postgres;
    let uri = uri_or_skip!("BAKERY_POSTGRES_URI");
    let client = postgres::connect(&uri).await.expect("connect");
    let table = unique("bench_peer");
    let cas = postgres::RawCas::create(&client, &table)
        .await
        .expect("create");
    assert_chained_then_refused!(
        cas.update(&client, RAW_VALUE),
        client.batch_execute(&format!("UPDATE {table} SET version = version + 1"))
    );
    cas.drop_table(&client).await.expect("drop");

    let sequence = format!("{table}_seq");
    let nextval = postgres::sequence_with_nextval(&client, &sequence, 1)
        .await
        .expect("sequence");
    assert_counts_from_one!(postgres::nextval(&client, &nextval));
    postgres::drop_sequence(&client, &sequence)
        .await
        .expect("drop sequence");
}

/// A short plan of `consumer` and `outbox` on the PostgreSQL server: every
/// cell clean (the finishes check that no message was lost or applied
/// twice, and that the outbox's slot was dropped); the processed-keys peers
/// send four requests (BEGIN, INSERT, UPDATE, COMMIT) and one (the CTE)
/// per message, bakery's uncontended consumer one store call; the outbox
/// is not skipped (the test server has wal_level=logical).
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_consumer_peers_and_outbox() {
    let uri = uri_or_skip!("BAKERY_POSTGRES_URI");
    let report = run_clean(short_plan(&["consumer", "outbox"], uri, vec![1, 2])).await;
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    for (label, requests) in [
        ("processed-keys table, BEGIN/INSERT/UPDATE/COMMIT", 4.0),
        ("processed-keys table, one CTE statement", 1.0),
        ("Consumer::process, partition per client", 1.0),
    ] {
        for clients in [1, 2] {
            let cell = ran(&report, "consumer", Some(label), clients);
            assert_eq!(cell.round_trips_per_op, Some(requests), "{cell:#?}");
        }
    }
    let outbox: Vec<_> = report.cells("outbox").collect();
    assert_eq!(outbox.len(), 2, "{outbox:#?}");
    assert!(outbox.iter().all(|cell| cell.ops > 0), "{outbox:#?}");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_raw_cas_and_incrby() {
    use bakery::backends::redis::redis;
    use bakery_bench::peers::redis as peer;
    let uri = uri_or_skip!("BAKERY_REDIS_URI");
    let mut conn = peer::connect(&uri).await.expect("connect");
    let key = unique("bench-peer:cas");
    let cas = peer::RawCas::create(&mut conn, &key).await.expect("create");
    assert_chained_then_refused!(
        cas.update(&mut conn, RAW_VALUE),
        redis::cmd("HINCRBY")
            .arg(&key)
            .arg("ver")
            .arg(1)
            .query_async::<i64>(&mut conn)
    );
    cas.delete(&mut conn).await.expect("delete");

    let counter = unique("bench-peer:incr");
    assert_counts_from_one!(peer::incrby(&mut conn, &counter));
    redis::cmd("DEL")
        .arg(&counter)
        .query_async::<()>(&mut conn)
        .await
        .expect("delete counter");
}

/// A short plan of `lock` and `rwlock` on the Redis server: every cell
/// clean (no overlapping grant), the `SET NX PX` peer among them with at
/// least its two requests (a try and the release) per acquisition.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lock_peer_and_rwlock() {
    let uri = uri_or_skip!("BAKERY_REDIS_URI");
    let report = run_clean(short_plan(&["lock", "rwlock"], uri, vec![1, 4])).await;
    for clients in [1, 4] {
        let cell = ran(&report, "lock", Some("SET NX PX + Lua release"), clients);
        assert!(
            cell.round_trips_per_op.is_some_and(|r| r >= 2.0),
            "{cell:#?}"
        );
        ran(&report, "rwlock", None, clients);
    }
}

/// A short plan of `lock` on the PostgreSQL server with MariaDB's
/// `GET_LOCK` beside it (`Plan::mariadb`): its cells clean (no overlapping
/// grant, every `GET_LOCK` granted and released), two requests per
/// acquisition, and the same cells as `pg_advisory_lock()`.
#[cfg(all(feature = "postgres", feature = "mariadb"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_get_lock_beside_postgres() {
    let uri = uri_or_skip!("BAKERY_POSTGRES_URI");
    let mariadb = uri_or_skip!("BAKERY_MARIADB_URI");
    let mut plan = short_plan(&["lock"], uri, vec![1, 4]);
    plan.mariadb = Some(mariadb);
    let report = run_clean(plan).await;
    for label in ["MariaDB GET_LOCK() (its own server)", "pg_advisory_lock()"] {
        for clients in [1, 4] {
            let cell = ran(&report, "lock", Some(label), clients);
            assert_eq!(cell.round_trips_per_op, Some(2.0), "{cell:#?}");
        }
    }
}

/// `GET_LOCK` is the server's: a second connection is refused the name
/// another holds (0 after its timeout), and gets it once released.
#[cfg(feature = "mariadb")]
#[tokio::test]
async fn mariadb_get_lock_excludes_a_second_connection() {
    use bakery_bench::peers::get_lock;
    use mysql_async::prelude::Queryable;
    let url = uri_or_skip!("BAKERY_MARIADB_URI");
    let mut first = get_lock::connect(&url).await.expect("connect");
    let mut second = get_lock::connect(&url).await.expect("connect");
    let name = unique("bench_peer");
    let get = "SELECT GET_LOCK(?, ?)";
    let got: Option<i64> = first.exec_first(get, (&name, 0)).await.expect("get");
    assert_eq!(got, Some(1));
    let refused: Option<i64> = second.exec_first(get, (&name, 0)).await.expect("try");
    assert_eq!(refused, Some(0));
    let released: Option<i64> = first
        .exec_first("SELECT RELEASE_LOCK(?)", (&name,))
        .await
        .expect("release");
    assert_eq!(released, Some(1));
    let got: Option<i64> = second.exec_first(get, (&name, 0)).await.expect("get");
    assert_eq!(got, Some(1));
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_raw_cas() {
    use bakery_bench::peers::etcd;
    let uri = uri_or_skip!("BAKERY_ETCD_URI");
    let client = etcd::connect(&uri).await.expect("connect");
    let key = unique("bench-peer/cas");
    let cas = etcd::RawCas::create(&client, &key).await.expect("create");
    assert_chained_then_refused!(
        cas.update(&client, RAW_VALUE),
        client.kv_client().put(key.as_str(), "another writer", None)
    );
    cas.delete(&client).await.expect("delete");
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_raw_cas_and_auto_increment() {
    use bakery::backends::mysql::mysql_async::prelude::Queryable;
    use bakery_bench::peers::mysql;
    let uri = uri_or_skip!("BAKERY_MARIADB_URI");
    let mut conn = mysql::connect(&uri).await.expect("connect");
    let mut other = mysql::connect(&uri).await.expect("connect");
    let table = unique("bench_peer");
    let cas = mysql::RawCas::create(&mut conn, &table)
        .await
        .expect("create");
    assert_chained_then_refused!(
        cas.update(&mut conn, RAW_VALUE),
        other.query_drop(format!("UPDATE {table} SET version = 100"))
    );
    cas.drop_table(&mut conn).await.expect("drop");
    // AUTO_INCREMENT: ids from two connections are unique and increase per
    // connection.
    let auto = format!("{table}_auto");
    let insert = mysql::auto_increment_table(&mut conn, &auto)
        .await
        .expect("table");
    let insert_other = mysql::prepare_insert(&mut other, &auto)
        .await
        .expect("prepare");
    let mut seen = std::collections::HashSet::new();
    let (mut last, mut last_other) = (0, 0);
    for _ in 0..20 {
        let id = mysql::insert_id(&mut conn, &insert).await.expect("id");
        let id_other = mysql::insert_id(&mut other, &insert_other)
            .await
            .expect("id");
        assert!(id > last && id_other > last_other);
        assert!(seen.insert(id) && seen.insert(id_other));
        (last, last_other) = (id, id_other);
    }
    conn.query_drop(format!("DROP TABLE {auto}"))
        .await
        .expect("drop");
}

#[cfg(feature = "cassandra")]
#[tokio::test]
async fn cassandra_raw_cas() {
    use bakery::backends::cassandra::CassandraStore;
    use bakery_bench::peers::cassandra;
    let uri = uri_or_skip!("BAKERY_CASSANDRA_URI");
    let store = CassandraStore::connect(&uri).await.expect("connect");
    let table = unique("bench_peer");
    let cas = cassandra::RawCas::create(&store, &table)
        .await
        .expect("create");
    let keyspace = store.config().keyspace().to_string();
    assert_chained_then_refused!(
        cas.update(&store, RAW_VALUE),
        store.session().query_unpaged(
            format!(
                "UPDATE \"{keyspace}\".\"{table}\" SET version = 100 WHERE key = 'k' IF EXISTS"
            ),
            (),
        )
    );
    cas.drop_table(&store).await.expect("drop");
}

#[cfg(feature = "mongodb")]
#[tokio::test]
async fn mongodb_raw_insert() {
    use bakery_bench::peers::mongodb;
    let uri = uri_or_skip!("BAKERY_MONGODB_URI");
    let raw = mongodb::RawInsert::connect(&uri, &unique("bench_peer"))
        .await
        .expect("connect");
    raw.insert(RAW_VALUE).await.expect("insert");
    raw.insert(RAW_VALUE).await.expect("insert");
    raw.drop_collection().await.expect("drop");
}

/// A plan of `workloads` on `uri` with 100 ms cells, one round, in one
/// process.
#[cfg(feature = "dynamodb")]
#[tokio::test]
async fn dynamodb_raw_put() {
    use bakery::backends::dynamodb::DynamoStore;
    use bakery::{Bytes, Key, VersionedStore};
    use bakery_bench::peers::dynamodb;
    let uri = uri_or_skip!("BAKERY_DYNAMODB_URI");
    let store = DynamoStore::connect(&uri).await.expect("connect");
    let name = unique("bench_peer");
    let raw = dynamodb::RawPut::new(&store, &name);
    // The raw item is bakery's layout: bakery reads it, and writes over it
    // at the raw side's version, which the raw side then sees as a conflict.
    let key = Key::new(name.as_str()).expect("key");
    assert_chained_then_refused!(raw.put(RAW_VALUE), async {
        let outcome = store.put_if_version(&key, Some(2), Bytes::from_static(b"other"));
        outcome.await.map(|outcome| assert!(outcome.is_applied()))
    });
    assert_eq!(
        store.get(&key).await.expect("get").map(|row| row.version),
        Some(3)
    );
}

#[cfg(any(feature = "postgres", feature = "redis"))]
fn short_plan(workloads: &[&str], uri: String, clients: Vec<usize>) -> bakery_bench::Plan {
    let duration = std::time::Duration::from_millis(100);
    bakery_bench::Plan {
        block_size: 10,
        command: "test".into(),
        ..bakery_bench::Plan::new(workloads, &[&uri], clients, duration)
    }
}

/// The report of `plan`, which ran without an error in any cell.
#[cfg(any(feature = "postgres", feature = "redis"))]
async fn run_clean(plan: bakery_bench::Plan) -> bakery_bench::Report {
    let report = bakery_bench::run(plan).await.expect("run");
    assert_eq!(report.cells_with_errors(), 0, "{:#?}", report.results);
    report
}

/// The cell of `workload` (of the implementation `label`, if given) at
/// `clients` clients, which did some operations.
#[cfg(any(feature = "postgres", feature = "redis"))]
fn ran<'a>(
    report: &'a bakery_bench::Report,
    workload: &'a str,
    label: Option<&str>,
    clients: usize,
) -> &'a bakery_bench::results::CellResult {
    let cell = report
        .cells(workload)
        .find(|r| label.is_none_or(|label| r.label == label) && r.clients == clients)
        .unwrap_or_else(|| {
            panic!(
                "no {workload} cell of {label:?} at {clients} clients: {:#?}",
                report.results
            )
        });
    assert!(cell.ops > 0, "{cell:#?}");
    cell
}
