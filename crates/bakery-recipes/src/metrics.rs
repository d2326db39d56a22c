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

use crate::grant::LostReason;

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
