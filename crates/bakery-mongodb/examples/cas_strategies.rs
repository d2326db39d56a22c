//! Run both compare-and-set strategies against a real server and show what
//! each guarantees there: CAS increments of one counter, first by one task
//! (latency), then by 8 concurrent tasks on the same key (lost updates).
//!
//! ```text
//! BAKERY_MONGODB_URI='mongodb://127.0.0.1:17017/bakery' \
//!     cargo run --release -p bakery-mongodb --example cas_strategies
//! ```
//!
//! On real MongoDB both strategies end at exactly `tasks × increments`. On
//! FerretDB v1 `update` loses updates (its update is not atomic, FerretDB
//! issue 3040) and `insert` does not — which is why bakery gives FerretDB
//! `insert` by default and refuses `update` there unless the URI says
//! `allow_unproven_update=true`. Options (environment): `INCREMENTS`
//! per task (default 100). Prints, never asserts. Each strategy uses a
//! scratch collection that is dropped at the end.

use std::sync::Arc;
use std::time::Instant;

use bakery_core::{Bytes, Key, PutOutcome, Row, VersionedStore};
use bakery_mongodb::{CasStrategy, MongoConfig, MongoStore};

const TASKS: u64 = 8;

fn counter(row: &Option<Row>) -> u64 {
    row.as_ref()
        .and_then(|row| std::str::from_utf8(&row.value).ok()?.parse().ok())
        .unwrap_or(0)
}

/// CAS-increment `key` `n` times, retrying conflicts with the row the store
/// hands back (no extra read). Returns (applied, conflicts).
async fn increment(store: &MongoStore, key: &Key, n: u64) -> bakery_core::Result<(u64, u64)> {
    let (mut applied, mut conflicts) = (0, 0);
    let mut current = store.get(key).await?;
    while applied < n {
        let next = Bytes::from((counter(&current) + 1).to_string());
        let expected = current.as_ref().map(|row| row.version);
        match store.put_if_version(key, expected, next).await? {
            PutOutcome::Applied(row) => {
                applied += 1;
                current = Some(row);
            }
            PutOutcome::Conflict(now) => {
                conflicts += 1;
                current = now;
            }
        }
    }
    Ok((applied, conflicts))
}

#[tokio::main]
async fn main() -> bakery_core::Result<()> {
    let Ok(uri) = std::env::var("BAKERY_MONGODB_URI") else {
        eprintln!("set BAKERY_MONGODB_URI, e.g. mongodb://127.0.0.1:17017/bakery");
        return Ok(());
    };
    let increments: u64 = std::env::var("INCREMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    for cas in [CasStrategy::Update, CasStrategy::Insert] {
        let collection = format!("bakery_example_{}_{}", cas, std::process::id());
        // `update` is refused on any server but MongoDB unless explicitly
        // allowed: this example exists to show what it does there.
        let config = MongoConfig::from_uri(&uri)?
            .with_cas(cas)
            .with_allow_unproven_update(true)
            .with_collection(collection);
        let store = Arc::new(MongoStore::open(config).await?);
        println!("{cas}: on {}", store.server());

        let key = Key::new("example/sequential")?;
        let started = Instant::now();
        increment(&store, &key, increments).await?;
        let per_write = started.elapsed() / u32::try_from(increments).unwrap_or(1);

        let key = Key::new("example/hot")?;
        let started = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (store, key) = (store.clone(), key.clone());
                tokio::spawn(async move { increment(&store, &key, increments).await })
            })
            .collect();
        let (mut applied, mut conflicts) = (0, 0);
        for task in tasks {
            let (a, c) = task.await.expect("task panicked")?;
            applied += a;
            conflicts += c;
        }
        let took = started.elapsed();
        let end = counter(&store.get(&key).await?);
        println!(
            "cas={cas:<6}  1 task: {per_write:>9.2?} per applied write  |  {TASKS} tasks: {applied} acknowledged, \
             counter ends at {end} ({} lost), {conflicts} conflicts, {took:.2?}",
            applied - end.min(applied)
        );
        store.collection().drop().await.map_err(|e| {
            bakery_core::Error::new(
                bakery_core::ErrorKind::Unavailable,
                "mongodb",
                e.to_string(),
            )
        })?;
    }
    Ok(())
}
