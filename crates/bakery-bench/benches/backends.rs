//! Criterion, per server backend, side by side in one run:
//!
//! - `cas/<backend>/bakery` vs `cas/<backend>/raw`: one `put_if_version`
//!   update against the same conditional operation issued raw through the
//!   same driver (the overhead ratio; target ≤ 1.15).
//! - `sequence/<backend>/block_{1,100,10000}` vs the native peer a user
//!   would reach for instead: `nextval()` on PostgreSQL, `INCRBY` on Redis.
//!   Throughput is in ids per second.
//!
//! The raw side is `bakery_bench::peers`: the same native clients
//! `bakery bench` measures beside bakery.
//!
//! Backends come from `BAKERY_<NAME>_URI` (start them with
//! `scripts/backends.sh start all` and `source target/backends.env`); a
//! backend without a URI is left out with a note.
//!
//! `cargo bench -p bakery-bench --all-features --bench backends`

// With no server backend compiled in, the shared helpers below are unused.
#![cfg_attr(not(server_backend), allow(dead_code, unused_imports))]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery::{Bytes, Key, PutOutcome, Sequence, VersionedStore};
#[cfg(server_backend)]
use bakery_bench::peers::{self, RAW_VALUE};
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
    bakery_testkit::unique_name(prefix)
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

/// The bakery store of the server in `var` (left out with a note when
/// unset): its URI, a runtime, and the store opened on it.
fn connect(var: &str) -> Option<(String, Runtime, Arc<dyn VersionedStore>)> {
    let uri = uri(var)?;
    let rt = runtime();
    let store = rt.block_on(bakery::connect(&uri)).expect("connect");
    Some((uri, rt, store))
}

/// `cas/<backend>`: bakery's `put_if_version` on `store`, then `raw`, the
/// same conditional write issued raw.
fn bench_cas<F, Fut>(
    c: &mut Criterion,
    rt: &Runtime,
    backend: &str,
    store: Arc<dyn VersionedStore>,
    raw: F,
) where
    F: Fn() -> Fut + Clone,
    Fut: std::future::Future<Output = ()>,
{
    let mut g = group(c, &format!("cas/{backend}"));
    bench_bakery_cas(&mut g, rt, store);
    bench_async(&mut g, rt, "raw", raw);
    g.finish();
}

/// `sequence/<backend>` with bakery's sequences on `store` timed; the
/// caller adds the native peer, if any, and finishes it.
fn sequence_group<'a>(
    c: &'a mut Criterion,
    rt: &Runtime,
    backend: &str,
    store: Arc<dyn VersionedStore>,
) -> BenchmarkGroup<'a, WallTime> {
    let mut g = group(c, &format!("sequence/{backend}"));
    bench_sequences(&mut g, rt, store);
    g
}

#[cfg(feature = "postgres")]
fn postgres(c: &mut Criterion) {
    use peers::postgres;
    let Some((uri, rt, store)) = connect("BAKERY_POSTGRES_URI") else {
        return;
    };
    let client = Arc::new(rt.block_on(postgres::connect(&uri)).expect("raw connect"));
    let table = unique("bench_raw").replace('-', "_");
    let sequence = format!("{table}_seq");
    let (cas, nextval) = rt.block_on(async {
        let cas = postgres::RawCas::create(&client, &table)
            .await
            .expect("raw schema");
        let nextval = postgres::sequence_with_nextval(&client, &sequence, 1)
            .await
            .expect("raw sequence");
        (Arc::new(cas), nextval)
    });

    bench_cas(c, &rt, "postgres", store.clone(), || {
        let (client, cas) = (client.clone(), cas.clone());
        async move {
            let applied = cas.update(&client, RAW_VALUE).await.expect("raw cas");
            assert!(applied, "no one else writes this row");
        }
    });

    let mut g = sequence_group(c, &rt, "postgres", store);
    bench_async(&mut g, &rt, "nextval", || {
        let (client, nextval) = (client.clone(), nextval.clone());
        async move {
            black_box(postgres::nextval(&client, &nextval).await.expect("nextval"));
        }
    });
    g.finish();
    rt.block_on(async {
        cas.drop_table(&client).await?;
        postgres::drop_sequence(&client, &sequence).await
    })
    .expect("cleanup");
}

#[cfg(feature = "redis")]
fn redis(c: &mut Criterion) {
    use peers::redis;
    let Some((uri, rt, store)) = connect("BAKERY_REDIS_URI") else {
        return;
    };
    let conn = rt.block_on(redis::connect(&uri)).expect("raw connect");
    let counter_key = unique("bench-raw:incr");
    let cas = Arc::new(
        rt.block_on(redis::RawCas::create(
            &mut conn.clone(),
            &unique("bench-raw:cas"),
        ))
        .expect("raw setup"),
    );

    bench_cas(c, &rt, "redis", store.clone(), || {
        let (mut conn, cas) = (conn.clone(), cas.clone());
        async move {
            let applied = cas.update(&mut conn, RAW_VALUE).await.expect("raw cas");
            assert!(applied, "no one else writes this key");
        }
    });

    let mut g = sequence_group(c, &rt, "redis", store);
    bench_async(&mut g, &rt, "incrby", || {
        let (mut conn, key) = (conn.clone(), counter_key.clone());
        async move {
            black_box(redis::incrby(&mut conn, &key).await.expect("incrby"));
        }
    });
    g.finish();
    let _ = rt.block_on(cas.delete(&mut conn.clone()));
}

#[cfg(feature = "etcd")]
fn etcd(c: &mut Criterion) {
    use peers::etcd;
    let Some((uri, rt, store)) = connect("BAKERY_ETCD_URI") else {
        return;
    };
    let client = Arc::new(rt.block_on(etcd::connect(&uri)).expect("raw connect"));
    let cas = Arc::new(
        rt.block_on(etcd::RawCas::create(&client, &unique("bench-raw/cas")))
            .expect("raw put"),
    );

    bench_cas(c, &rt, "etcd", store.clone(), || {
        let (client, cas) = (client.clone(), cas.clone());
        async move {
            let applied = cas.update(&client, RAW_VALUE).await.expect("raw txn");
            assert!(applied, "no one else writes this key");
        }
    });
    sequence_group(c, &rt, "etcd", store).finish();
    let _ = rt.block_on(cas.delete(&client));
}

#[cfg(feature = "cassandra")]
fn cassandra(c: &mut Criterion) {
    use bakery::backends::cassandra::CassandraStore;
    use peers::cassandra;
    let Some(uri) = uri("BAKERY_CASSANDRA_URI") else {
        return;
    };
    let rt = runtime();
    let store = Arc::new(rt.block_on(CassandraStore::connect(&uri)).expect("connect"));
    // The same lightweight transaction bakery issues, raw through the same
    // session: compare the version, write value and version + 1, at SERIAL.
    let table = unique("bench_raw").replace('-', "_");
    let cas = Arc::new(
        rt.block_on(cassandra::RawCas::create(&store, &table))
            .expect("raw table"),
    );

    let dyn_store: Arc<dyn VersionedStore> = store.clone();
    bench_cas(c, &rt, "cassandra", dyn_store.clone(), || {
        let (store, cas) = (store.clone(), cas.clone());
        async move {
            let applied = cas.update(&store, RAW_VALUE).await.expect("raw lwt");
            assert!(applied, "no one else writes this row");
        }
    });
    sequence_group(c, &rt, "cassandra", dyn_store).finish();
    let _ = rt.block_on(cas.drop_table(&store));
}

#[cfg(feature = "mongodb")]
fn mongodb(c: &mut Criterion) {
    use peers::mongodb;
    let Some((uri, rt, store)) = connect("BAKERY_MONGODB_URI") else {
        return;
    };
    // The raw peer: the native write each strategy rests on, through the
    // same driver — one insert of an immutable document under a unique _id
    // (what `cas=insert` does; a duplicate _id is the conflict).
    let raw = Arc::new(
        rt.block_on(mongodb::RawInsert::connect(&uri, &unique("bench_raw")))
            .expect("raw connect"),
    );

    bench_cas(c, &rt, "mongodb", store.clone(), || {
        let raw = raw.clone();
        async move {
            raw.insert(RAW_VALUE).await.expect("raw insert");
        }
    });
    sequence_group(c, &rt, "mongodb", store).finish();
    let _ = rt.block_on(raw.drop_collection());
}

#[cfg(feature = "mysql")]
fn mysql(c: &mut Criterion) {
    use peers::mysql;
    let Some((uri, rt, store)) = connect("BAKERY_MARIADB_URI") else {
        return;
    };
    // The raw peers: the conditional UPDATE bakery's store prepares, and an
    // AUTO_INCREMENT insert per id, each on a connection of its own.
    let table = unique("bench_raw").replace('-', "_");
    let auto = format!("{table}_auto");
    let (conn, cas, insert) = rt.block_on(async {
        let mut conn = mysql::connect(&uri).await.expect("raw connect");
        let cas = mysql::RawCas::create(&mut conn, &table)
            .await
            .expect("raw table");
        let insert = mysql::auto_increment_table(&mut conn, &auto)
            .await
            .expect("auto_increment table");
        (conn, Arc::new(cas), insert)
    });
    let conn = Arc::new(tokio::sync::Mutex::new(conn));

    bench_cas(c, &rt, "mysql", store.clone(), || {
        let (conn, cas) = (conn.clone(), cas.clone());
        async move {
            let mut conn = conn.lock().await;
            let applied = cas.update(&mut conn, RAW_VALUE).await.expect("raw cas");
            assert!(applied, "no one else writes this row");
        }
    });

    let mut g = sequence_group(c, &rt, "mysql", store);
    bench_async(&mut g, &rt, "auto_increment", || {
        let (conn, insert) = (conn.clone(), insert.clone());
        async move {
            let mut conn = conn.lock().await;
            black_box(mysql::insert_id(&mut conn, &insert).await.expect("insert"));
        }
    });
    g.finish();
    rt.block_on(async {
        use bakery::backends::mysql::mysql_async::prelude::Queryable;
        let mut conn = conn.lock().await;
        let _ = cas.drop_table(&mut conn).await;
        let _ = conn
            .query_drop(format!("DROP TABLE IF EXISTS {auto}"))
            .await;
    });
}

#[cfg(feature = "dynamodb")]
fn dynamodb(c: &mut Criterion) {
    use bakery::backends::dynamodb::DynamoStore;
    use peers::dynamodb;
    let Some((uri, rt, store)) = connect("BAKERY_DYNAMODB_URI") else {
        return;
    };
    // DynamoDB's own conditional write through the raw SDK (a client of
    // its own, on the same table): a PutItem of the whole item with
    // `ConditionExpression: ver = :n`.
    let other = rt
        .block_on(DynamoStore::connect(&uri))
        .expect("raw connect");
    let raw = Arc::new(dynamodb::RawPut::new(&other, &unique("bench/raw")));
    bench_cas(c, &rt, "dynamodb", store.clone(), || {
        let raw = raw.clone();
        async move {
            let applied = raw.put(RAW_VALUE).await.expect("raw put");
            assert!(applied, "no one else writes this key");
        }
    });
    // The same request as bakery's update (its guard on the value's type,
    // ALL_OLD on a refusal), raw: what the guard costs the server is then
    // on both sides.
    let guarded = Arc::new(dynamodb::RawPut::guarded(
        &other,
        &unique("bench/raw-guarded"),
    ));
    let mut g = group(c, "cas/dynamodb");
    bench_async(&mut g, &rt, "raw_same_condition", || {
        let guarded = guarded.clone();
        async move {
            let applied = guarded.put(RAW_VALUE).await.expect("raw put");
            assert!(applied, "no one else writes this key");
        }
    });
    g.finish();
    sequence_group(c, &rt, "dynamodb", store).finish();
}

/// The stand-ins of the backends this build has no feature for: a note
/// instead of their benchmarks.
macro_rules! built_without {
    ($($backend:ident: $feature:literal),* $(,)?) => {$(
        #[cfg(not(feature = $feature))]
        fn $backend(_: &mut Criterion) {
            eprintln!(concat!("backends bench: built without the ", $feature, " feature"));
        }
    )*};
}

built_without!(
    postgres: "postgres",
    redis: "redis",
    etcd: "etcd",
    cassandra: "cassandra",
    mongodb: "mongodb",
    mysql: "mysql",
    dynamodb: "dynamodb",
);

criterion_group!(benches, postgres, redis, etcd, cassandra, mongodb, mysql, dynamodb);
criterion_main!(benches);
