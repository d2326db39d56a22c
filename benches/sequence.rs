//! Criterion: the precise, per-operation view.
//!
//! - `next/cached` vs `next/raw_fetch_add`: the cost of `Sequence::next()`
//!   inside a block against a bare `AtomicU64::fetch_add`, same run
//!   (target: the cached path ≥ 0.5 × the raw throughput).
//! - `put_if_version/<backend>`: one compare-and-set update per iteration.
//! - `snowflake/*`: one time-ordered id per iteration from bakery's
//!   `Snowflake` (its worker id leased once, before the timing) and from
//!   the `ferroid` and `sonyflake` crates, each in its own layout's cap:
//!   4,096 ids a millisecond for Twitter's layout (bakery's default and
//!   ferroid's), 256 per 10 ms for Sonyflake's; `bakery_wide` is bakery
//!   with 14 sequence bits (16,384 a millisecond), to show the cost of the
//!   call below the cap. `snowflake_threads/<n>`: one generator shared by
//!   `n` tasks of a runtime of `n` threads.
//! - `snowflake_uncapped/*`: bakery and ferroid in one layout of 22
//!   sequence bits (39/2/22 from 2026: 4,194,304 ids a millisecond, a cap
//!   neither reaches), the generators' own cost (bakery's `next` and a
//!   `next_batch` of 1,000, per batch; ferroid's thread-safe and
//!   single-thread generators); beside it what one id's clock
//!   reads cost (`wall_clock_read`: `SystemTime::now`, which bakery reads
//!   per id; `monotonic_clock_read`: `Instant::now`, its lease check) and
//!   one uncontended compare-and-swap, the floor of ferroid's id (its
//!   clock is an atomic a ticker thread moves every millisecond).
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

fn snowflakes(c: &mut Criterion) {
    use bakery::snowflake::{Layout, Snowflake};

    let rt = runtime();
    let leased = |layout: Layout| {
        let store = Arc::new(bakery::MemoryStore::new());
        let ids = Snowflake::builder(store, "bench")
            .layout(layout)
            .build()
            .expect("snowflake");
        rt.block_on(ids.next()).expect("a worker id");
        ids
    };
    let mut group = c.benchmark_group("snowflake");
    group.throughput(Throughput::Elements(1));
    for (name, layout) in [
        ("bakery", Layout::default()),
        (
            "bakery_wide",
            Layout::default().timestamp_bits(39).sequence_bits(14),
        ),
    ] {
        let ids = leased(layout);
        group.bench_function(name, |b| {
            b.to_async(&rt)
                .iter(|| async { black_box(ids.next().await.expect("next")) })
        });
    }

    use ferroid::generator::{AtomicSnowflakeGenerator, BasicSnowflakeGenerator};
    use ferroid::id::SnowflakeTwitterId;
    use ferroid::time::{MonotonicClock, TWITTER_EPOCH};
    let ferroid: AtomicSnowflakeGenerator<SnowflakeTwitterId, _> =
        AtomicSnowflakeGenerator::new(0, MonotonicClock::<1>::with_epoch(TWITTER_EPOCH));
    group.bench_function("ferroid_atomic", |b| {
        b.iter(|| black_box(ferroid.next_id(|_| std::hint::spin_loop())))
    });

    let machine = || Ok(1);
    let sonyflake = sonyflake::Sonyflake::builder()
        .machine_id(&machine)
        .finalize()
        .expect("sonyflake");
    group.bench_function("sonyflake", |b| {
        b.iter(|| black_box(sonyflake.next_id().expect("id")))
    });
    group.finish();

    const BATCH: u64 = 1000;
    const CALLS: u64 = 1000;
    let mut group = c.benchmark_group("snowflake_uncapped");
    group.throughput(Throughput::Elements(1));
    let layout = Layout::default()
        .timestamp_bits(39)
        .worker_bits(2)
        .sequence_bits(22);
    let ids = leased(layout);
    group.bench_function("bakery", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(ids.next().await.expect("next")) })
    });
    // One iteration is a batch: the renderer divides by its size.
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function(format!("bakery_batch_{BATCH}"), |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(ids.next_batch(BATCH).await.expect("batch")) })
    });
    ferroid::define_snowflake_id!(
        UncappedId, u64,
        reserved: 1,
        timestamp: 39,
        machine_id: 2,
        sequence: 22
    );
    // bakery's epoch: 39 bits of milliseconds from Twitter's would end in 2027.
    let epoch = || MonotonicClock::<1>::with_epoch(Duration::from_millis(layout.epoch_ms()));
    let uncapped: AtomicSnowflakeGenerator<UncappedId, _> =
        AtomicSnowflakeGenerator::new(0, epoch());
    // A thousand calls an iteration (`_x1000`): one call is below the
    // nanosecond that criterion's bencher output resolves.
    group.throughput(Throughput::Elements(CALLS));
    group.bench_function(format!("ferroid_atomic_x{CALLS}"), |b| {
        b.iter(|| {
            for _ in 0..CALLS {
                black_box(uncapped.next_id(|_| std::hint::spin_loop()));
            }
        })
    });
    let single_thread: BasicSnowflakeGenerator<UncappedId, _> =
        BasicSnowflakeGenerator::new(0, epoch());
    group.bench_function(format!("ferroid_basic_x{CALLS}"), |b| {
        b.iter(|| {
            for _ in 0..CALLS {
                black_box(single_thread.next_id(|_| std::hint::spin_loop()));
            }
        })
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("wall_clock_read", |b| {
        b.iter(|| black_box(std::time::SystemTime::now()))
    });
    group.bench_function("monotonic_clock_read", |b| {
        b.iter(|| black_box(Instant::now()))
    });
    let word = AtomicU64::new(0);
    group.bench_function("compare_and_swap", |b| {
        b.iter(|| {
            let seen = word.load(Ordering::Relaxed);
            black_box(word.compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Relaxed))
        })
    });
    group.finish();

    let mut group = c.benchmark_group("snowflake_threads");
    group.throughput(Throughput::Elements(1));
    for threads in [1usize, 4, 16] {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let store = Arc::new(bakery::MemoryStore::new());
        let ids = Snowflake::builder(store, "bench-threads")
            .build()
            .expect("snowflake");
        rt.block_on(ids.next()).expect("a worker id");
        group.bench_function(threads.to_string(), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                rt.block_on(async {
                    let tasks: Vec<_> = (0..threads as u64)
                        .map(|task| {
                            // `iters` in all, shared out.
                            let per_task =
                                iters / threads as u64 + u64::from(task < iters % threads as u64);
                            let ids = ids.clone();
                            tokio::spawn(async move {
                                for _ in 0..per_task {
                                    black_box(ids.next().await.expect("next"));
                                }
                            })
                        })
                        .collect();
                    for task in tasks {
                        task.await.expect("task");
                    }
                });
                start.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, next_vs_fetch_add, put_if_version, snowflakes);
criterion_main!(benches);
