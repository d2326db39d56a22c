//! Measure the two compare-and-set strategies against a real Redis server:
//! CAS increments of a counter, by 1 and 8 concurrent tasks, each task on
//! its own key ("distinct") or all on one key ("hot").
//!
//! ```text
//! BAKERY_REDIS_URI=redis://127.0.0.1:16379/0 \
//!     cargo run --release -p bakery-redis --example cas_strategies
//! ```
//!
//! A server without an fsynced append-only file (e.g. to measure without
//! persistence) is refused at open unless the URI adds
//! `?accept_data_loss=true` (crate docs, "Durability").
//!
//! Options (environment): `BENCH_SECS` (per measurement, default 3) and
//! `BENCH_ROUNDS` (each scenario is measured this many times, strategies
//! interleaved, and the median is reported; default 3). Prints, never
//! asserts. Keys live under a per-run prefix and are removed at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery_core::{Bytes, Key, PutOutcome, Row, VersionedStore};
use bakery_redis::{CasStrategy, RedisConfig, RedisStore};

const STRATEGIES: [CasStrategy; 2] = [CasStrategy::Script, CasStrategy::Watch];
const SCENARIOS: [(usize, bool); 4] = [(1, false), (8, false), (1, true), (8, true)];

#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    applied: u64,
    conflicts: u64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn counter(row: &Option<Row>) -> u64 {
    row.as_ref()
        .and_then(|row| std::str::from_utf8(&row.value).ok()?.parse().ok())
        .unwrap_or(0)
}

/// CAS-increment `key` until `deadline`, retrying conflicts with the row the
/// store hands back (no extra read).
async fn hammer(store: Arc<RedisStore>, key: Key, deadline: Instant) -> bakery_core::Result<Tally> {
    let mut tally = Tally::default();
    let mut current = store.get(&key).await?;
    while Instant::now() < deadline {
        let next = Bytes::from((counter(&current) + 1).to_string());
        let expected = current.as_ref().map(|row| row.version);
        match store.put_if_version(&key, expected, next).await? {
            PutOutcome::Applied(row) => {
                tally.applied += 1;
                current = Some(row);
            }
            PutOutcome::Conflict(now) => {
                tally.conflicts += 1;
                current = now;
            }
        }
    }
    Ok(tally)
}

async fn measure(
    store: &Arc<RedisStore>,
    tasks: usize,
    hot: bool,
    tag: &str,
    secs: f64,
) -> bakery_core::Result<(f64, f64)> {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let name = if hot {
            format!("{tag}/hot")
        } else {
            format!("{tag}/k{t}")
        };
        let key = Key::new(name)?;
        handles.push(tokio::spawn(hammer(store.clone(), key, deadline)));
    }
    let mut total = Tally::default();
    for handle in handles {
        let tally = handle.await.map_err(|e| {
            bakery_core::Error::new(bakery_core::ErrorKind::Internal, "bench", e.to_string())
        })??;
        total.applied += tally.applied;
        total.conflicts += tally.conflicts;
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok((
        total.applied as f64 / elapsed,
        total.conflicts as f64 / elapsed,
    ))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> bakery_core::Result<()> {
    let uri = std::env::var("BAKERY_REDIS_URI")
        .unwrap_or_else(|_| "redis://127.0.0.1:16379/0".to_string());
    let secs: f64 = env_or("BENCH_SECS", 3.0);
    let rounds: usize = env_or("BENCH_ROUNDS", 3).max(1);
    let prefix = format!("bakery-bench-{}:", std::process::id());

    let base = RedisConfig::from_uri(&uri)?.with_prefix(prefix.clone());
    let mut stores = Vec::new();
    for strategy in STRATEGIES {
        let store = RedisStore::open(base.clone().with_cas(strategy)).await?;
        stores.push((strategy, Arc::new(store)));
    }
    // The server's durability settings decide what a write costs (an fsync
    // per write with `appendfsync always`), so print them with the figures.
    let mut raw = redis::Client::open(uri.split('?').next().unwrap_or(&uri))
        .map_err(|e| bakery_core::Error::config("bench", e.to_string()))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| bakery_core::Error::config("bench", e.to_string()))?;
    let mut settings = Vec::new();
    for name in ["appendonly", "appendfsync", "save"] {
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(&mut raw)
            .await
            .unwrap_or_default();
        settings.push(format!(
            "{name}={:?}",
            pair.get(1).cloned().unwrap_or_default()
        ));
    }
    println!("server: {base}");
    println!("server settings: {}", settings.join(" "));
    println!("{secs} s per measurement, median of {rounds} interleaved rounds\n");

    // results[scenario][strategy] = (ops/s samples, conflicts/s samples)
    let mut results = vec![vec![(Vec::new(), Vec::new()); STRATEGIES.len()]; SCENARIOS.len()];
    for round in 0..rounds {
        for (s, (tasks, hot)) in SCENARIOS.iter().enumerate() {
            // Alternate which strategy goes first, against drift.
            let order: Vec<usize> = if round % 2 == 0 {
                vec![0, 1]
            } else {
                vec![1, 0]
            };
            for i in order {
                let (strategy, store) = &stores[i];
                let tag = format!(
                    "r{round}/{strategy}/{tasks}{}",
                    if *hot { "h" } else { "d" }
                );
                let (ops, conflicts) = measure(store, *tasks, *hot, &tag, secs).await?;
                results[s][i].0.push(ops);
                results[s][i].1.push(conflicts);
            }
        }
    }

    println!(
        "| tasks | keys     | script ops/s | watch ops/s | script/watch | conflicts/s script | conflicts/s watch |"
    );
    println!(
        "|------:|----------|-------------:|------------:|-------------:|-------------------:|------------------:|"
    );
    for (s, (tasks, hot)) in SCENARIOS.iter().enumerate() {
        let script = median(&mut results[s][0].0);
        let watch = median(&mut results[s][1].0);
        let script_c = median(&mut results[s][0].1);
        let watch_c = median(&mut results[s][1].1);
        println!(
            "| {tasks:>5} | {:<8} | {script:>12.0} | {watch:>11.0} | {:>11.2}x | {script_c:>18.0} | {watch_c:>17.0} |",
            if *hot { "one hot" } else { "distinct" },
            script / watch,
        );
    }

    // Remove this run's hashes.
    let mut conn = raw;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .map_err(|e| bakery_core::Error::config("bench", e.to_string()))?;
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .map_err(|e| bakery_core::Error::config("bench", e.to_string()))?;
    }
    Ok(())
}
