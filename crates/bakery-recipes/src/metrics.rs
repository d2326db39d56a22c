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
//! The semaphore and the read-write lock report the same seven as the
//! lock, named `bakery_semaphore_…` and `bakery_rwlock_…` (labels
//! `semaphore` and `rwlock`): permits and read or write grants received,
//! waits, holds, hand-offs and their time, losses and evictions.
//!
//! The `lock` label is the lock's name (`election.NAME` for an election),
//! `sequence` the sequence's name: keep the number of names bounded.

use std::time::Duration;

use crate::grant::LostReason;

/// The metric names of a queue recipe (`lock`, `semaphore`, `rwlock`):
/// its label, then acquisitions, wait, hold, hand-offs, hand-off time,
/// losses and evictions.
#[cfg(feature = "metrics")]
struct Names {
    label: &'static str,
    acquisitions: &'static str,
    wait: &'static str,
    hold: &'static str,
    handoffs: &'static str,
    handoff: &'static str,
    lost: &'static str,
    evictions: &'static str,
}

#[cfg(feature = "metrics")]
macro_rules! names {
    ($recipe:literal) => {
        Names {
            label: $recipe,
            acquisitions: concat!("bakery_", $recipe, "_acquisitions_total"),
            wait: concat!("bakery_", $recipe, "_wait_seconds"),
            hold: concat!("bakery_", $recipe, "_hold_seconds"),
            handoffs: concat!("bakery_", $recipe, "_handoffs_total"),
            handoff: concat!("bakery_", $recipe, "_handoff_seconds"),
            lost: concat!("bakery_", $recipe, "_lost_total"),
            evictions: concat!("bakery_", $recipe, "_evictions_total"),
        }
    };
}

#[cfg(feature = "metrics")]
fn names(recipe: &'static str) -> Names {
    match recipe {
        "semaphore" => names!("semaphore"),
        "rwlock" => names!("rwlock"),
        _ => names!("lock"),
    }
}

/// A grant received, `wait` after the call that asked for it.
#[inline]
pub(crate) fn acquired(recipe: &'static str, name: &str, wait: Duration) {
    #[cfg(feature = "metrics")]
    {
        let names = names(recipe);
        let labels = [(names.label, name.to_owned())];
        metrics::counter!(names.acquisitions, &labels).increment(1);
        metrics::histogram!(names.wait, &labels).record(wait.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (recipe, name, wait);
}

/// A grant released after `held`; `handed_on` if the release granted a
/// waiter in the same write.
#[inline]
pub(crate) fn released(recipe: &'static str, name: &str, held: Duration, handed_on: bool) {
    #[cfg(feature = "metrics")]
    {
        let names = names(recipe);
        let labels = [(names.label, name.to_owned())];
        metrics::histogram!(names.hold, &labels).record(held.as_secs_f64());
        if handed_on {
            metrics::counter!(names.handoffs, &labels).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (recipe, name, held, handed_on);
}

/// A waiter of this process received its grant `after` the release of
/// this process that handed it over was sent.
#[inline]
pub(crate) fn handed_over(recipe: &'static str, name: &str, after: Duration) {
    #[cfg(feature = "metrics")]
    {
        let names = names(recipe);
        metrics::histogram!(names.handoff, names.label => name.to_owned())
            .record(after.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (recipe, name, after);
}

/// A grant lost, for `reason`.
#[inline]
pub(crate) fn lost(recipe: &'static str, name: &str, reason: LostReason) {
    #[cfg(feature = "metrics")]
    {
        let names = names(recipe);
        metrics::counter!(names.lost, names.label => name.to_owned(), "reason" => reason_label(reason))
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (recipe, name, reason);
}

/// Holders this process evicted after a lease of silence.
#[inline]
pub(crate) fn evicted(recipe: &'static str, name: &str) {
    #[cfg(feature = "metrics")]
    {
        let names = names(recipe);
        metrics::counter!(names.evictions, names.label => name.to_owned()).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (recipe, name);
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
