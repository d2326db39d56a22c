//! Job locks on a real store: data stored with the grant, `lock_at_most_for`,
//! `lock_at_least_for`, `extend`, and try-only schedulers that must not be
//! blocked forever by a crashed holder.

use std::sync::Arc;
use std::time::Duration;

use bakery_core::{ErrorKind, VersionedStore};
use bakery_recipes::lock::{Lock, LockBuilder, LostReason, MAX_DATA_LEN};
use tokio::time::Instant;

use crate::faults::FaultStore;
use crate::queued::wait_for_state;
use crate::support::{not_before, PATIENCE};
use crate::{unique_name, Case, Clients};

pub(crate) fn cases() -> Vec<Case> {
    crate::cases_of!("job":
        data_is_stored_with_the_grant_and_handed_on,
        at_most_releases_and_tells_the_holder,
        extend_moves_the_hold_limit,
        at_least_keeps_the_lock_after_an_early_release,
        try_acquire_evicts_a_holder_silent_for_a_lease,
    )
}

fn builder(store: &Arc<dyn VersionedStore>, name: &str) -> LockBuilder {
    Lock::builder(store.clone(), name).acquire_timeout(PATIENCE)
}

/// Each client's data is in its queue entry, then in the holder when the
/// lock reaches it; `holder()` reads it; oversized data and contradictory
/// job settings are refused before anything is sent.
async fn data_is_stored_with_the_grant_and_handed_on(clients: Clients) {
    let store = clients.store();
    let name = unique_name("data");
    let first = builder(&clients.client().await, &name)
        .data("10.0.0.1:8080")
        .build()
        .expect("valid");
    let second = builder(&clients.client().await, &name)
        .data("10.0.0.2:8080")
        .build()
        .expect("valid");
    let guard = first.acquire().await.expect("acquire");
    let holder = second.holder().await.expect("holder").expect("held");
    assert_eq!(holder.data.as_deref(), Some("10.0.0.1:8080"));

    let waiting = tokio::spawn(async move { second.acquire().await });
    let state = wait_for_state::<Lock>(&store, &name, "the second client queued", |s| {
        s.queue.len() == 1
    })
    .await;
    assert_eq!(state.queue[0].data.as_deref(), Some("10.0.0.2:8080"));
    guard.release().await.expect("release");
    let next = waiting.await.expect("join").expect("second granted");
    let holder = first.holder().await.expect("holder").expect("held");
    assert_eq!(holder.data.as_deref(), Some("10.0.0.2:8080"));
    next.release().await.expect("release");
    assert!(first.holder().await.expect("holder").is_none());

    let too_long = "x".repeat(MAX_DATA_LEN + 1);
    let err = builder(&clients.client().await, &name)
        .data(too_long)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let err = builder(&clients.client().await, &name)
        .lock_at_most_for(Duration::from_secs(1))
        .lock_at_least_for(Duration::from_secs(2))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}

/// A holder past its `lock_at_most_for` releases (the waiter gets the next
/// token long before the 30 s lease could have run out), learns it through
/// `lost()`, and its own late release is refused as lost.
async fn at_most_releases_and_tells_the_holder(clients: Clients) {
    const AT_MOST: Duration = Duration::from_millis(300);
    let name = unique_name("at-most");
    let job = builder(&clients.client().await, &name)
        .lease(PATIENCE)
        .lock_at_most_for(AT_MOST)
        .build()
        .expect("valid");
    let waiter = builder(&clients.client().await, &name)
        .lease(PATIENCE)
        .build()
        .expect("valid");
    // The limit counts from the grant write's send, after this.
    let (guard, next) = not_before(AT_MOST, "lock_at_most_for", async {
        let guard = job.acquire().await.expect("acquire");
        let next = waiter
            .acquire()
            .await
            .expect("granted after the hold limit");
        (guard, next)
    })
    .await;
    assert_eq!(next.token(), guard.token() + 1);
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("the holder is told");
    assert_eq!(reason, LostReason::HoldLimit);
    assert!(!guard.is_held());
    let err = guard.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    next.release().await.expect("release");
}

/// `extend` replaces the limit: the guard still holds well past the
/// original `lock_at_most_for`, a waiter times out, and a lost guard cannot
/// be extended.
async fn extend_moves_the_hold_limit(clients: Clients) {
    // Counted from the grant write's send: long beside a slow store's
    // acquire (a Cassandra LWT can take hundreds of ms, more under load),
    // so the original limit is still ahead when `extend` replaces it.
    const AT_MOST: Duration = Duration::from_secs(3);
    let name = unique_name("extend");
    let job = builder(&clients.client().await, &name)
        .lock_at_most_for(AT_MOST)
        .build()
        .expect("valid");
    let guard = job.acquire().await.expect("acquire");
    guard.extend(PATIENCE).expect("extend while held");
    // Waits past the original limit (which ends before AT_MOST from now)
    // by as much again: without the extension it would be handed the lock.
    let waiter = Lock::builder(clients.client().await, &name)
        .acquire_timeout(AT_MOST * 2)
        .build()
        .expect("valid");
    let err = waiter.acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(guard.is_held(), "held past the original limit");
    // Back to a short limit: it ends the hold.
    guard
        .extend(Duration::from_millis(100))
        .expect("extend while held");
    let reason = tokio::time::timeout(PATIENCE, guard.lost())
        .await
        .expect("the new limit ends the hold");
    assert_eq!(reason, LostReason::HoldLimit);
    let err = guard.extend(PATIENCE).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
}

/// A job that ends at once still keeps the lock for `lock_at_least_for`:
/// a try-lock during the rest is refused, the release returns only after
/// it, and the lock is free then. The try only shows something if it
/// finished inside the window (counted from the grant write's send, after
/// `asked`); a run whose acquire and try outlasted it (a slow store, a
/// loaded machine) is repeated with a longer window.
async fn at_least_keeps_the_lock_after_an_early_release(clients: Clients) {
    let mut at_least = Duration::from_secs(1);
    loop {
        let name = unique_name("at-least");
        let job = builder(&clients.client().await, &name)
            .lock_at_least_for(at_least)
            .build()
            .expect("valid");
        let other = builder(&clients.client().await, &name)
            .build()
            .expect("valid");
        // The limit counts from the grant write's send, after this.
        let asked = Instant::now();
        let guard = job.acquire().await.expect("acquire");
        let releasing = tokio::spawn(guard.release());
        let tried = other.try_acquire().await.expect("try");
        let tried_after = asked.elapsed();
        assert!(
            tried.is_none() || tried_after >= at_least,
            "a fast job's lock was free again {tried_after:?} after it was asked for, \
             before lock_at_least_for ({at_least:?})"
        );
        releasing.await.expect("join").expect("release");
        assert!(
            asked.elapsed() >= at_least,
            "released after {:?}, before lock_at_least_for ({at_least:?})",
            asked.elapsed()
        );
        if let Some(late) = tried {
            // The try came after the window: inconclusive, go again.
            late.release().await.expect("release");
            at_least *= 2;
            assert!(
                at_least <= PATIENCE,
                "no try-lock ever finished inside lock_at_least_for"
            );
            continue;
        }
        let next = other
            .try_acquire()
            .await
            .expect("try")
            .expect("free after lock_at_least_for");
        next.release().await.expect("release");
        return;
    }
}

/// Schedulers that only try (skip when busy) must not be locked out forever
/// by a crashed holder: a handle whose tries see the same heartbeat for a
/// whole lease evicts it and takes the lock with the next token.
async fn try_acquire_evicts_a_holder_silent_for_a_lease(clients: Clients) {
    const LEASE: Duration = Duration::from_millis(300);
    let name = unique_name("try-evict");
    let paused = Arc::new(FaultStore::new(clients.client().await));
    let crashed = Lock::builder(paused.clone() as Arc<dyn VersionedStore>, &name)
        .lease(LEASE)
        .build()
        .expect("valid");
    let crashed = crashed.acquire().await.expect("acquire");
    let crashed_token = crashed.token();
    paused.pause();
    let scheduler = builder(&clients.client().await, &name)
        .build()
        .expect("valid");
    let first_try = Instant::now();
    let guard = not_before(LEASE, "a lease of silence", async {
        loop {
            if let Some(guard) = scheduler.try_acquire().await.expect("try") {
                break guard;
            }
            assert!(first_try.elapsed() < PATIENCE, "never evicted");
            tokio::time::sleep(LEASE / 10).await;
        }
    })
    .await;
    assert_eq!(guard.token(), crashed_token + 1);
    guard.release().await.expect("release");
    drop(crashed); // its release (held by the pause) is never sent
}
