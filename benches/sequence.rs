//! Criterion: the precise, per-operation view.
//!
//! - `next/cached` vs `next/raw_fetch_add`: the cost of `Sequence::next()`
//!   inside a block against a bare `AtomicU64::fetch_add`, same run
//!   (target: the cached path ≥ 0.5 × the raw throughput).
//! - `put_if_version/<backend>`: one compare-and-set update per iteration.
//!
//! `cargo bench --bench sequence`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery::{Bytes, Key, PutOutcome, Sequence, VersionedStore};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn next_vs_fetch_add(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("next");
    group.throughput(Throughput::Elements(1));

    let counter = AtomicU64::new(0);
    group.bench_function("raw_fetch_add", |b| {
        b.iter(|| black_box(counter.fetch_add(1, Ordering::AcqRel)))
    });

    // The same increment inside the async harness, to show what the harness
    // itself costs per call.
    group.bench_function("raw_fetch_add_async", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(counter.fetch_add(1, Ordering::AcqRel)) })
    });

    // Blocks of 2^32 ids: every measured call takes the cached path (the
    // one refill per ~4 billion ids is invisible).
    let store = Arc::new(bakery::MemoryStore::new());
    let seq = Sequence::builder(store, "bench")
        .block_size(1 << 32)
        .build()
        .expect("sequence");
    rt.block_on(seq.next()).expect("first block");
    group.bench_function("cached", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(seq.next().await.expect("next")) })
    });
    group.finish();
}

fn put_if_version(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stores: Vec<(&str, Arc<dyn VersionedStore>)> =
        vec![("memory", Arc::new(bakery::MemoryStore::new()))];
    let sqlite_uri = format!("sqlite://{}/bench.db", dir.path().display());
    stores.push((
        "sqlite",
        rt.block_on(bakery::connect(&sqlite_uri)).expect("sqlite"),
    ));

    let mut group = c.benchmark_group("put_if_version");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(5));
    for (name, store) in stores {
        let key = Key::new(format!("bench/{name}")).expect("key");
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (store, key) = (store.clone(), key.clone());
                async move {
                    let mut version = store.get(&key).await.expect("get").map(|r| r.version);
                    let value = Bytes::from_static(b"0123456789abcdef");
                    let start = Instant::now();
                    for _ in 0..iters {
                        match store
                            .put_if_version(&key, version, value.clone())
                            .await
                            .expect("cas")
                        {
                            PutOutcome::Applied(row) => version = Some(row.version),
                            PutOutcome::Conflict(_) => panic!("no one else writes this key"),
                        }
                    }
                    start.elapsed()
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, next_vs_fetch_add, put_if_version);
criterion_main!(benches);
