//! What the recipes report through the `metrics` crate's facade (feature
//! `metrics`): lock waits, holds, hand-offs, losses and evictions, sequence
//! reservations and waits. Without the feature every function here is an
//! empty inline call; with it and no recorder installed, a no-op.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `bakery_lock_acquisitions_total` | counter | `lock` | grants received by `acquire`/`try_acquire` |
//! | `bakery_lock_wait_seconds` | histogram | `lock` | from the call of `acquire` to its grant |
//! | `bakery_lock_hold_seconds` | histogram | `lock` | from a grant to its release |
//! | `bakery_lock_handoffs_total` | counter | `lock` | releases that handed the lock to a waiter in the same write |
//! | `bakery_lock_handoff_seconds` | histogram | `lock` | from a release's send to the grant of the waiter it handed the lock to, when both are in this process (across processes it would need synchronized clocks) |
//! | `bakery_lock_lost_total` | counter | `lock`, `reason` | grants lost: `evicted`, `lease_expired`, `row_gone`, `hold_limit` |
//! | `bakery_lock_evictions_total` | counter | `lock` | holders this process evicted after a lease of silence |
//! | `bakery_sequence_reservations_total` | counter | `sequence` | blocks reserved (one conditional write each) |
//! | `bakery_sequence_reserved_ids_total` | counter | `sequence` | ids in those blocks |
//! | `bakery_sequence_waits_total` | counter | `sequence` | `next()` calls that waited for the store |
//!
//! | `bakery_semaphore_acquisitions_total`, `bakery_rwlock_acquisitions_total` | counter | `semaphore` / `rwlock` | permits and read or write grants received |
//! | `bakery_semaphore_hold_seconds`, `bakery_rwlock_hold_seconds` | histogram | `semaphore` / `rwlock` | from a grant to its release |
//! | `bakery_semaphore_lost_total`, `bakery_rwlock_lost_total` | counter | `semaphore` / `rwlock`, `reason` | grants lost, as for the lock |
//!
//! The `lock` label is the lock's name (`election.NAME` for an election),
//! `sequence` the sequence's name: keep the number of names bounded.

use std::time::Duration;

use crate::lock::LostReason;

/// A recipe with its own row that reports grants, holds and losses.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Recipe {
    Semaphore,
    RwLock,
}

#[cfg(feature = "metrics")]
impl Recipe {
    /// Label, acquisitions, hold time, losses.
    fn names(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Recipe::Semaphore => (
                "semaphore",
                "bakery_semaphore_acquisitions_total",
                "bakery_semaphore_hold_seconds",
                "bakery_semaphore_lost_total",
            ),
            Recipe::RwLock => (
                "rwlock",
                "bakery_rwlock_acquisitions_total",
                "bakery_rwlock_hold_seconds",
                "bakery_rwlock_lost_total",
            ),
        }
    }
}

/// `recipe` `name` granted a permit or guard here.
#[inline]
pub(crate) fn acquired(recipe: Recipe, name: &str) {
    #[cfg(feature = "metrics")]
    {
        let (label, acquisitions, _, _) = recipe.names();
        metrics::counter!(acquisitions, label => name.to_owned()).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (recipe, name);
}

/// A grant of `recipe` `name` released after `held`.
#[inline]
pub(crate) fn released(recipe: Recipe, name: &str, held: Duration) {
    #[cfg(feature = "metrics")]
    {
        let (label, _, hold, _) = recipe.names();
        metrics::histogram!(hold, label => name.to_owned()).record(held.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (recipe, name, held);
}

/// A grant of `recipe` `name` was lost.
#[inline]
pub(crate) fn lost(recipe: Recipe, name: &str, reason: LostReason) {
    #[cfg(feature = "metrics")]
    {
        let (label, _, _, lost) = recipe.names();
        metrics::counter!(lost, label => name.to_owned(), "reason" => reason_label(reason))
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (recipe, name, reason);
}

#[cfg(feature = "metrics")]
fn reason_label(reason: LostReason) -> &'static str {
    match reason {
        LostReason::Evicted => "evicted",
        LostReason::LeaseExpired => "lease_expired",
        LostReason::RowGone => "row_gone",
        LostReason::HoldLimit => "hold_limit",
    }
}

/// A grant of lock `name` after waiting `wait` (zero for a try).
#[inline]
pub(crate) fn lock_acquired(name: &str, wait: Duration) {
    #[cfg(feature = "metrics")]
    {
        let labels = [("lock", name.to_owned())];
        metrics::counter!("bakery_lock_acquisitions_total", &labels).increment(1);
        metrics::histogram!("bakery_lock_wait_seconds", &labels).record(wait.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, wait);
}

/// A grant of lock `name` released after `held`; `handed_on`: to a waiter.
#[inline]
pub(crate) fn lock_released(name: &str, held: Duration, handed_on: bool) {
    #[cfg(feature = "metrics")]
    {
        let labels = [("lock", name.to_owned())];
        metrics::histogram!("bakery_lock_hold_seconds", &labels).record(held.as_secs_f64());
        if handed_on {
            metrics::counter!("bakery_lock_handoffs_total", &labels).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, held, handed_on);
}

/// A waiter of lock `name` got the grant a release of this process sent
/// `after` ago.
#[inline]
pub(crate) fn lock_handed_over(name: &str, after: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("bakery_lock_handoff_seconds", "lock" => name.to_owned())
        .record(after.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (name, after);
}

/// A grant of lock `name` was lost.
#[inline]
pub(crate) fn lock_lost(name: &str, reason: LostReason) {
    #[cfg(feature = "metrics")]
    {
        let reason = reason_label(reason);
        metrics::counter!("bakery_lock_lost_total", "lock" => name.to_owned(), "reason" => reason)
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, reason);
}

/// This process evicted the silent holder of lock `name`.
#[inline]
pub(crate) fn lock_evicted(name: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("bakery_lock_evictions_total", "lock" => name.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = name;
}

/// Sequence `name` reserved a block of `ids`.
#[inline]
pub(crate) fn sequence_reserved(name: &str, ids: u64) {
    #[cfg(feature = "metrics")]
    {
        let labels = [("sequence", name.to_owned())];
        metrics::counter!("bakery_sequence_reservations_total", &labels).increment(1);
        metrics::counter!("bakery_sequence_reserved_ids_total", &labels).increment(ids);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, ids);
}

/// A `next()` of sequence `name` waited for the store.
#[inline]
pub(crate) fn sequence_waited(name: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("bakery_sequence_waits_total", "sequence" => name.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = name;
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use bakery_core::MemoryStore;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use crate::lock::Lock;
    use crate::rwlock::RwLock;
    use crate::semaphore::Semaphore;
    use crate::sequence::Sequence;

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
}
