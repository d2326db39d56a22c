//! Every recipe reports what happened to the `metrics` facade.
#![cfg(feature = "metrics")]

use std::collections::HashMap;
use std::sync::Arc;

use bakery_core::MemoryStore;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use bakery_recipes::lock::Lock;
use bakery_recipes::rwlock::RwLock;
use bakery_recipes::semaphore::Semaphore;
use bakery_recipes::sequence::Sequence;

/// Run `body` on a current-thread runtime with a recorder local to this
/// thread; the values by `name{label=value,…}`.
fn recorded<F: std::future::Future<Output = ()>>(
    body: impl FnOnce() -> F,
) -> HashMap<String, DebugValue> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(body())
    });
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

fn count(values: &HashMap<String, DebugValue>, key: &str) -> u64 {
    match values.get(key) {
        Some(DebugValue::Counter(n)) => *n,
        Some(DebugValue::Histogram(samples)) => samples.len() as u64,
        Some(other) => panic!("{key}: {other:?}"),
        None => 0,
    }
}

#[test]
fn lock_and_sequence_report_what_happened() {
    let values = recorded(|| async {
        let store = Arc::new(MemoryStore::new());
        let first = Lock::builder(store.clone(), "jobs").build().expect("valid");
        let second = Lock::builder(store.clone(), "jobs").build().expect("valid");
        let held = first.acquire().await.expect("acquire");
        let waiting = tokio::spawn(async move { second.acquire().await });
        while Lock::inspect(&*store, "jobs")
            .await
            .expect("inspect")
            .is_some_and(|state| state.queue.is_empty())
        {
            tokio::task::yield_now().await;
        }
        held.release().await.expect("release"); // hands on
        let next = waiting.await.expect("join").expect("granted");
        next.release().await.expect("release"); // frees

        let exports = Semaphore::builder(store.clone(), "exports")
            .permits(2)
            .build()
            .expect("valid");
        let permit = exports.acquire().await.expect("permit");
        permit.release().await.expect("release");
        let config = RwLock::builder(store.clone(), "config")
            .build()
            .expect("valid");
        config
            .read()
            .await
            .expect("read")
            .release()
            .await
            .expect("release");
        config
            .write()
            .await
            .expect("write")
            .release()
            .await
            .expect("release");

        let ids = Sequence::builder(store, "orders").build().expect("valid");
        ids.next().await.expect("an id");
    });
    assert_eq!(
        count(&values, "bakery_lock_acquisitions_total{lock=jobs}"),
        2
    );
    assert_eq!(count(&values, "bakery_lock_wait_seconds{lock=jobs}"), 2);
    assert_eq!(count(&values, "bakery_lock_hold_seconds{lock=jobs}"), 2);
    assert_eq!(count(&values, "bakery_lock_handoffs_total{lock=jobs}"), 1);
    assert_eq!(count(&values, "bakery_lock_handoff_seconds{lock=jobs}"), 1);
    assert_eq!(
        count(&values, "bakery_lock_lost_total{lock=jobs,reason=evicted}"),
        0
    );
    assert!(
        count(
            &values,
            "bakery_sequence_reservations_total{sequence=orders}"
        ) >= 1
    );
    assert!(
        count(
            &values,
            "bakery_sequence_reserved_ids_total{sequence=orders}"
        ) >= 1
    );
    assert_eq!(
        count(&values, "bakery_sequence_waits_total{sequence=orders}"),
        1
    );
    let semaphore = |metric: &str| count(&values, &format!("{metric}{{semaphore=exports}}"));
    assert_eq!(semaphore("bakery_semaphore_acquisitions_total"), 1);
    assert_eq!(semaphore("bakery_semaphore_hold_seconds"), 1);
    let rwlock = |metric: &str| count(&values, &format!("{metric}{{rwlock=config}}"));
    assert_eq!(rwlock("bakery_rwlock_acquisitions_total"), 2);
    assert_eq!(rwlock("bakery_rwlock_hold_seconds"), 2);
}
