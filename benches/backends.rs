//! Criterion, per server backend, side by side in one run:
//!
//! - `cas/<backend>/bakery` vs `cas/<backend>/raw`: one `put_if_version`
//!   update against the same conditional operation issued raw through the
//!   same driver (the overhead ratio; target ≤ 1.15).
//! - `sequence/<backend>/block_{1,100,10000}` vs the native peer a user
//!   would reach for instead: `nextval()` on PostgreSQL, `INCRBY` on Redis.
//!   Throughput is in ids per second.
//!
//! Backends come from `BAKERY_<NAME>_URI` (start them with
//! `scripts/backends.sh start all` and `source target/backends.env`); a
//! backend without a URI is left out with a note.
//!
//! `cargo bench --all-features --bench backends`

// With no server backend compiled in, the shared helpers below are unused.
#![cfg_attr(
    not(any(
        feature = "postgres",
        feature = "redis",
        feature = "etcd",
        feature = "cassandra",
        feature = "mongodb"
    )),
    allow(dead_code, unused_imports)
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery::{Bytes, Key, PutOutcome, Sequence, VersionedStore};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn uri(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(uri) if !uri.is_empty() => Some(uri),
        _ => {
            eprintln!("backends bench: {var} not set; left out");
            None
        }
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{nanos:x}")
}

/// Time `iters` calls of an async operation, run back to back.
fn bench_async<F, Fut>(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, name: &str, op: F)
where
    F: Fn() -> Fut + Clone,
    Fut: std::future::Future<Output = ()>,
{
    group.bench_function(name, |b| {
        b.to_async(rt).iter_custom(|iters| {
            let op = op.clone();
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    op().await;
                }
                start.elapsed()
            }
        })
    });
}

/// `put_if_version` through bakery on one key, chained by version.
fn bench_bakery_cas(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    store: Arc<dyn VersionedStore>,
) {
    let key = Key::new(unique("bench/cas")).expect("key");
    let version = Arc::new(std::sync::Mutex::new(None));
    bench_async(group, rt, "bakery", || {
        let (store, key, version) = (store.clone(), key.clone(), version.clone());
        async move {
            let expected = *version.lock().expect("lock");
            match store
                .put_if_version(&key, expected, Bytes::from_static(b"0123456789abcdef"))
                .await
                .expect("cas")
            {
                PutOutcome::Applied(row) => *version.lock().expect("lock") = Some(row.version),
                PutOutcome::Conflict(_) => panic!("no one else writes this key"),
            }
        }
    });
}

/// Sequence throughput at block sizes 1, 100 and 10,000 (ids per second).
fn bench_sequences(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    store: Arc<dyn VersionedStore>,
) {
    for block in [1u64, 100, 10_000] {
        let seq = Sequence::builder(store.clone(), &unique(&format!("bench-{block}")))
            .block_size(block)
            .build()
            .expect("sequence");
        bench_async(group, rt, &format!("block_{block}"), || {
            let seq = seq.clone();
            async move {
                black_box(seq.next().await.expect("next"));
            }
        });
    }
}

fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(5));
    group.sample_size(30);
    group
}

#[cfg(feature = "postgres")]
fn postgres(c: &mut Criterion) {
    let Some(uri) = uri("BAKERY_POSTGRES_URI") else {
        return;
    };
    let rt = runtime();
    let store = rt.block_on(bakery::connect(&uri)).expect("connect");
    let client = rt.block_on(async {
        let (client, connection) = bakery::backends::postgres::tokio_postgres::connect(
            &uri,
            bakery::backends::postgres::tokio_postgres::NoTls,
        )
        .await
        .expect("raw connect");
        tokio::spawn(connection);
        client
    });
    let client = Arc::new(client);
    let table = unique("bench_raw").replace('-', "_");
    let (update, nextval) = rt.block_on(async {
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (key TEXT PRIMARY KEY, value BYTEA, version BIGINT NOT NULL);
                 INSERT INTO {table} VALUES ('k', 'v', 1);
                 CREATE SEQUENCE {table}_seq;"
            ))
            .await
            .expect("raw schema");
        let update = client
            .prepare(&format!(
                "UPDATE {table} SET value = $2, version = version + 1 WHERE key = $1 AND version = $3 RETURNING version"
            ))
            .await
            .expect("prepare");
        let nextval = client
            .prepare(&format!("SELECT nextval('{table}_seq')"))
            .await
            .expect("prepare");
        (update, nextval)
    });

    let mut g = group(c, "cas/postgres");
    bench_bakery_cas(&mut g, &rt, store.clone());
    let version = Arc::new(std::sync::atomic::AtomicI64::new(1));
    bench_async(&mut g, &rt, "raw", || {
        let (client, update, version) = (client.clone(), update.clone(), version.clone());
        async move {
            let v = version.load(std::sync::atomic::Ordering::Relaxed);
            let row = client
                .query_one(&update, &[&"k", &&b"0123456789abcdef"[..], &v])
                .await
                .expect("raw cas");
            version.store(row.get(0), std::sync::atomic::Ordering::Relaxed);
        }
    });
    g.finish();

    let mut g = group(c, "sequence/postgres");
    bench_sequences(&mut g, &rt, store);
    bench_async(&mut g, &rt, "nextval", || {
        let (client, nextval) = (client.clone(), nextval.clone());
        async move {
            let row = client.query_one(&nextval, &[]).await.expect("nextval");
            black_box(row.get::<_, i64>(0));
        }
    });
    g.finish();
    rt.block_on(client.batch_execute(&format!("DROP TABLE {table}; DROP SEQUENCE {table}_seq;")))
        .expect("cleanup");
}

#[cfg(not(feature = "postgres"))]
fn postgres(_: &mut Criterion) {
    eprintln!("backends bench: built without the postgres feature");
}

#[cfg(feature = "redis")]
fn redis(c: &mut Criterion) {
    use bakery::backends::redis::redis;
    let Some(uri) = uri("BAKERY_REDIS_URI") else {
        return;
    };
    let rt = runtime();
    let store = rt.block_on(bakery::connect(&uri)).expect("connect");
    let raw_uri = uri.split('?').next().unwrap_or(&uri).to_string();
    let conn = rt
        .block_on(async {
            redis::Client::open(raw_uri.as_str())?
                .get_multiplexed_async_connection()
                .await
        })
        .expect("raw connect");
    // The conditional write a user would script by hand: compare the
    // version field, then write value and version + 1.
    let cas = redis::Script::new(
        r"local v = redis.call('HGET', KEYS[1], 'ver')
          if v == ARGV[1] then
            local n = tonumber(v) + 1
            redis.call('HSET', KEYS[1], 'v', ARGV[2], 'ver', n)
            return n
          end
          return -1",
    );
    let key = unique("bench-raw:cas");
    let counter_key = unique("bench-raw:incr");
    rt.block_on(async {
        let mut conn = conn.clone();
        redis::cmd("HSET")
            .arg(&key)
            .arg("v")
            .arg("x")
            .arg("ver")
            .arg(1)
            .query_async::<()>(&mut conn)
            .await
    })
    .expect("raw setup");
    let version = Arc::new(std::sync::atomic::AtomicI64::new(1));

    let mut g = group(c, "cas/redis");
    bench_bakery_cas(&mut g, &rt, store.clone());
    bench_async(&mut g, &rt, "raw", || {
        let (mut conn, cas, key, version) =
            (conn.clone(), cas.clone(), key.clone(), version.clone());
        async move {
            let v = version.load(std::sync::atomic::Ordering::Relaxed);
            let new: i64 = cas
                .key(&key)
                .arg(v)
                .arg(&b"0123456789abcdef"[..])
                .invoke_async(&mut conn)
                .await
                .expect("raw cas");
            assert!(new > 0, "no one else writes this key");
            version.store(new, std::sync::atomic::Ordering::Relaxed);
        }
    });
    g.finish();

    let mut g = group(c, "sequence/redis");
    bench_sequences(&mut g, &rt, store);
    bench_async(&mut g, &rt, "incrby", || {
        let (mut conn, key) = (conn.clone(), counter_key.clone());
        async move {
            let id: i64 = redis::cmd("INCRBY")
                .arg(&key)
                .arg(1)
                .query_async(&mut conn)
                .await
                .expect("incrby");
            black_box(id);
        }
    });
    g.finish();
}

#[cfg(not(feature = "redis"))]
fn redis(_: &mut Criterion) {
    eprintln!("backends bench: built without the redis feature");
}

#[cfg(feature = "etcd")]
fn etcd(c: &mut Criterion) {
    use bakery::backends::etcd::etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
    let Some(uri) = uri("BAKERY_ETCD_URI") else {
        return;
    };
    let rt = runtime();
    let store = rt.block_on(bakery::connect(&uri)).expect("connect");
    let endpoint = uri
        .trim_start_matches("etcd://")
        .trim_end_matches('/')
        .to_string();
    let client = rt
        .block_on(Client::connect([endpoint], None))
        .expect("raw connect");
    let key = unique("bench-raw/cas");
    let first = rt
        .block_on(client.kv_client().put(key.clone(), "v", None))
        .expect("raw put");
    let revision = Arc::new(std::sync::atomic::AtomicI64::new(
        first.header().map(|h| h.revision()).unwrap_or(0),
    ));

    let mut g = group(c, "cas/etcd");
    bench_bakery_cas(&mut g, &rt, store.clone());
    bench_async(&mut g, &rt, "raw", || {
        let (mut kv, key, revision) = (client.kv_client(), key.clone(), revision.clone());
        async move {
            let rev = revision.load(std::sync::atomic::Ordering::Relaxed);
            let txn = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
                .and_then([TxnOp::put(key.clone(), &b"0123456789abcdef"[..], None)])
                .or_else([TxnOp::get(key.clone(), None)]);
            let resp = kv.txn(txn).await.expect("raw txn");
            assert!(resp.succeeded(), "no one else writes this key");
            let new = resp.header().map(|h| h.revision()).unwrap_or(0);
            revision.store(new, std::sync::atomic::Ordering::Relaxed);
        }
    });
    g.finish();

    let mut g = group(c, "sequence/etcd");
    bench_sequences(&mut g, &rt, store);
    g.finish();
}

#[cfg(not(feature = "etcd"))]
fn etcd(_: &mut Criterion) {
    eprintln!("backends bench: built without the etcd feature");
}

#[cfg(feature = "cassandra")]
fn cassandra(c: &mut Criterion) {
    use bakery::backends::cassandra::scylla::statement::SerialConsistency;
    use bakery::backends::cassandra::CassandraStore;
    let Some(uri) = uri("BAKERY_CASSANDRA_URI") else {
        return;
    };
    let rt = runtime();
    let store = Arc::new(rt.block_on(CassandraStore::connect(&uri)).expect("connect"));
    let keyspace = store.config().keyspace().to_string();
    let table = unique("bench_raw").replace('-', "_");
    // The same lightweight transaction bakery issues, raw through the same
    // session: compare the version, write value and version + 1, at SERIAL.
    let update = rt.block_on(async {
        let session = store.session();
        session
            .query_unpaged(
                format!(
                    "CREATE TABLE \"{keyspace}\".\"{table}\" (key text PRIMARY KEY, value blob, version bigint)"
                ),
                (),
            )
            .await
            .expect("raw table");
        session.await_schema_agreement().await.expect("schema agreement");
        session
            .query_unpaged(
                format!("INSERT INTO \"{keyspace}\".\"{table}\" (key, value, version) VALUES ('k', 0x00, 1)"),
                (),
            )
            .await
            .expect("raw row");
        let mut update = session
            .prepare(format!(
                "UPDATE \"{keyspace}\".\"{table}\" SET value = ?, version = ? WHERE key = 'k' IF version = ?"
            ))
            .await
            .expect("prepare");
        update.set_serial_consistency(Some(SerialConsistency::Serial));
        update
    });
    let version = Arc::new(std::sync::atomic::AtomicI64::new(1));

    let dyn_store: Arc<dyn VersionedStore> = store.clone();
    let mut g = group(c, "cas/cassandra");
    bench_bakery_cas(&mut g, &rt, dyn_store.clone());
    bench_async(&mut g, &rt, "raw", || {
        let (store, update, version) = (store.clone(), update.clone(), version.clone());
        async move {
            let v = version.load(std::sync::atomic::Ordering::Relaxed);
            let result = store
                .session()
                .execute_unpaged(&update, (&b"0123456789abcdef"[..], v + 1, v))
                .await
                .expect("raw lwt");
            let rows = result.into_rows_result().expect("lwt rows");
            let (applied,): (bool,) = rows.first_row().expect("[applied]");
            assert!(applied, "no one else writes this key");
            version.store(v + 1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    g.finish();

    let mut g = group(c, "sequence/cassandra");
    bench_sequences(&mut g, &rt, dyn_store);
    g.finish();
    let _ = rt.block_on(
        store
            .session()
            .query_unpaged(format!("DROP TABLE \"{keyspace}\".\"{table}\""), ()),
    );
}

#[cfg(not(feature = "cassandra"))]
fn cassandra(_: &mut Criterion) {
    eprintln!("backends bench: built without the cassandra feature");
}

#[cfg(feature = "mongodb")]
fn mongodb(c: &mut Criterion) {
    use bakery::backends::mongodb::mongodb::bson::{doc, Document};
    use bakery::backends::mongodb::mongodb::Client;
    let Some(uri) = uri("BAKERY_MONGODB_URI") else {
        return;
    };
    let rt = runtime();
    let store = rt.block_on(bakery::connect(&uri)).expect("connect");
    // The raw peer: the native write each strategy rests on, through the
    // same driver — one insert of an immutable document under a unique _id
    // (what `cas=insert` does; a duplicate _id is the conflict).
    let (base, query) = uri.split_once('?').unwrap_or((&uri, ""));
    let driver_query: Vec<&str> = query
        .split('&')
        .filter(|o| !o.is_empty() && !o.starts_with("cas="))
        .collect();
    let driver_uri = if driver_query.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", driver_query.join("&"))
    };
    let collection = rt
        .block_on(Client::with_uri_str(&driver_uri))
        .expect("raw connect")
        .database("bakery")
        .collection::<Document>(&unique("bench_raw"));
    let next = Arc::new(std::sync::atomic::AtomicI64::new(1));

    let mut g = group(c, "cas/mongodb");
    bench_bakery_cas(&mut g, &rt, store.clone());
    bench_async(&mut g, &rt, "raw", || {
        let (collection, next) = (collection.clone(), next.clone());
        async move {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let value = bakery::backends::mongodb::mongodb::bson::Binary {
                subtype: bakery::backends::mongodb::mongodb::bson::spec::BinarySubtype::Generic,
                bytes: b"0123456789abcdef".to_vec(),
            };
            collection
                .insert_one(doc! { "_id": format!("k#{n:020}"), "v": value, "ver": n })
                .await
                .expect("raw insert");
        }
    });
    g.finish();

    let mut g = group(c, "sequence/mongodb");
    bench_sequences(&mut g, &rt, store);
    g.finish();
    let _ = rt.block_on(async { collection.drop().await });
}

#[cfg(not(feature = "mongodb"))]
fn mongodb(_: &mut Criterion) {
    eprintln!("backends bench: built without the mongodb feature");
}

criterion_group!(benches, postgres, redis, etcd, cassandra, mongodb);
criterion_main!(benches);
