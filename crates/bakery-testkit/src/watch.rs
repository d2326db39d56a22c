//! WATCH, verified: a backend that claims it delivers a wake-up to every
//! watch of a key when another client writes that key and notifies (what
//! the lock does on a change of holder), and to no watch of another key.
//!
//! On a SHARED backend the writer is a second store (another process, as
//! far as the server can tell); otherwise the store itself. A backend that
//! does not claim WATCH must return no watch at all (checked by
//! `lock::watch_capability_matches_behaviour`).
//!
//! The waiting helpers are public for backends' own watch tests.

use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Capabilities, Change, Key, VersionedStore, Watch};

use crate::{target_case, unique_name, Target, TargetCase};

/// The bound on every wait for a wake-up: a broken watch fails, never hangs.
pub const WAKE_LIMIT: Duration = Duration::from_secs(10);

/// How long a watch must stay quiet where no wake-up is due. A wake-up
/// inside it is a bug whatever the timing, so the check cannot fail
/// spuriously; a late wrong wake-up could slip past it, never a right one.
pub const QUIET: Duration = Duration::from_millis(300);

/// The next wake-up of `watch` within [`WAKE_LIMIT`]: `true` (woken) or
/// `false` (the backend ended the watch). Panics if none comes.
pub async fn next_wake(watch: &mut Watch) -> bool {
    match tokio::time::timeout(WAKE_LIMIT, watch.changed()).await {
        Ok(woke) => woke,
        Err(_) => panic!("no wake-up within {WAKE_LIMIT:?}"),
    }
}

/// True when `watch` neither wakes nor ends for [`QUIET`].
pub async fn is_quiet(watch: &mut Watch) -> bool {
    tokio::time::timeout(QUIET, watch.changed()).await.is_err()
}

/// Wait (bounded by [`WAKE_LIMIT`]) until `count()` is `n`, e.g. a
/// backend's count of the watches it feeds; panics naming `what` if it
/// stays elsewhere.
pub async fn count_reaches(what: &str, count: impl Fn() -> usize, n: usize) {
    let reached = tokio::time::timeout(WAKE_LIMIT, async {
        while count() != n {
            tokio::task::yield_now().await;
        }
    })
    .await;
    if reached.is_err() {
        panic!("{what} stayed at {}, expected {n}", count());
    }
}

/// `kept`, the last watch of `key` left after the others were dropped,
/// still wakes on a `notify` of `key`; once it is dropped too, the store's
/// count of fed watches (`active`) drops to 0.
pub async fn the_last_watch_still_wakes(
    store: &dyn VersionedStore,
    key: &Key,
    mut kept: Watch,
    active: impl Fn() -> usize,
) {
    store.notify(key).await.unwrap();
    assert!(
        next_wake(&mut kept).await,
        "the remaining watch still works"
    );
    drop(kept);
    count_reaches("active watches", active, 0).await;
}

/// After `store` lost the connection that feeds its watches: `lost` (a
/// watch of `key` from before) ends, so its waiter falls back to polling,
/// the store's count of fed watches (`active`) drops to 0, and a new watch
/// of `key` (a new connection) is woken by `notify` again.
pub async fn recovers_from_a_lost_feed(
    store: &dyn VersionedStore,
    key: &Key,
    mut lost: Watch,
    active: impl Fn() -> usize,
) {
    assert!(
        !next_wake(&mut lost).await,
        "a lost feed tells the waiter to poll"
    );
    count_reaches("active watches", active, 0).await;
    let mut again = store
        .watch(key)
        .await
        .unwrap()
        .expect("a store that watched");
    store.notify(key).await.unwrap();
    assert!(next_wake(&mut again).await, "the new watch is fed");
}

pub(crate) fn cases() -> Vec<TargetCase> {
    vec![
        target_case!("watch", WATCH, a_change_by_another_client_wakes_every_watch),
        target_case!("watch", WATCH, a_change_of_another_key_wakes_no_watch),
        target_case!("watch", WATCH, a_row_handed_over_is_the_row_written),
    ]
}

/// Watches are claimed: returns the store to watch on and the one that
/// writes (another store when the backend is SHARED). `None` when WATCH is
/// not claimed (nothing to check here).
async fn watcher_and_writer(
    target: &Target,
) -> Option<(Arc<dyn VersionedStore>, Arc<dyn VersionedStore>)> {
    let store = target.store();
    let caps = store.capabilities();
    if !caps.contains(Capabilities::WATCH) {
        return None;
    }
    let writer = if caps.contains(Capabilities::SHARED) {
        target.reopen().await
    } else {
        store.clone()
    };
    Some((store, writer))
}

async fn watch(store: &dyn VersionedStore, key: &Key) -> Watch {
    store
        .watch(key)
        .await
        .unwrap_or_else(|e| panic!("watch {key}: {e}"))
        .unwrap_or_else(|| panic!("claims WATCH but watch({key}) gave none"))
}

/// Write `key` and notify, as a lock hand-off does.
async fn change(store: &dyn VersionedStore, key: &Key, value: &'static str) {
    let current = store
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"));
    let outcome = store
        .put_if_version(key, current.map(|row| row.version), value.into())
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
    assert!(outcome.is_applied(), "put {key}: {outcome:?}");
    store
        .notify(key)
        .await
        .unwrap_or_else(|e| panic!("notify {key}: {e}"));
}

async fn wakes(watch: &mut Watch, what: &str) {
    assert!(
        next_wake(watch).await,
        "{what}: the watch ended instead of waking"
    );
}

async fn stays_quiet(watch: &mut Watch, what: &str) {
    assert!(
        is_quiet(watch).await,
        "{what}: a watch woke where no change was due"
    );
}

/// Two watches on the watcher's store and one on the writer's all wake when
/// the writer changes the key; and again on a second change (a watch keeps
/// delivering after its first wake-up).
async fn a_change_by_another_client_wakes_every_watch(target: Target) {
    let Some((store, writer)) = watcher_and_writer(&target).await else {
        return;
    };
    let key = Key::with_prefix("lock", &unique_name("watch-wakes")).expect("key");
    let mut first = watch(&*store, &key).await;
    let mut second = watch(&*store, &key).await;
    let mut at_writer = watch(&*writer, &key).await;
    change(&*writer, &key, "one").await;
    wakes(&mut first, "first watch, first change").await;
    wakes(&mut second, "second watch on the same store").await;
    wakes(&mut at_writer, "the writer's own watch").await;
    change(&*writer, &key, "two").await;
    wakes(&mut first, "first watch, second change").await;
}

/// A change of key `…ab` must not wake a watch of key `…a` (a prefix of
/// it), nor a change of `…a` the watch of `…ab`. (A change may wake a watch
/// of its own key twice — a write and its notify — which is allowed.)
async fn a_change_of_another_key_wakes_no_watch(target: Target) {
    let Some((store, writer)) = watcher_and_writer(&target).await else {
        return;
    };
    let name = unique_name("watch-keys");
    let a = Key::with_prefix("lock", &name).expect("key a");
    let ab = Key::with_prefix("lock", &format!("{name}b")).expect("key ab");
    let mut watch_a = watch(&*store, &a).await;
    let mut watch_ab = watch(&*store, &ab).await;
    change(&*writer, &ab, "b").await;
    // Once B's wake-up is here, a wrong wake-up of A is due too.
    wakes(&mut watch_ab, "watch of the changed key").await;
    stays_quiet(
        &mut watch_a,
        "watch of a key that is a prefix of the changed one",
    )
    .await;
    change(&*writer, &a, "a").await;
    wakes(&mut watch_a, "watch of the changed key").await;
    stays_quiet(&mut watch_ab, "a change of A woke B").await;
}

/// A backend may hand the row a change left to its watches
/// ([`Change::Row`]; waiters then decide without a read): that row must be
/// the one written — key, value and version — never an older one.
async fn a_row_handed_over_is_the_row_written(target: Target) {
    let Some((store, writer)) = watcher_and_writer(&target).await else {
        return;
    };
    let key = Key::with_prefix("lock", &unique_name("watch-rows")).expect("key");
    let mut watch = watch(&*store, &key).await;
    let mut last = None;
    for value in ["one", "two"] {
        change(&*writer, &key, value).await;
        let written = writer
            .get(&key)
            .await
            .unwrap_or_else(|e| panic!("get {key}: {e}"))
            .unwrap_or_else(|| panic!("{key} has no row after a write"));
        match tokio::time::timeout(WAKE_LIMIT, watch.next_change()).await {
            Err(_) => panic!("{value}: no wake-up within {WAKE_LIMIT:?}"),
            Ok(None) => panic!("{value}: the watch ended instead of waking"),
            Ok(Some(Change::Read)) => {}
            Ok(Some(Change::Row(row))) => {
                assert_eq!(
                    row, written,
                    "{value}: the row handed over is not the one written"
                );
                assert!(
                    last < Some(row.version),
                    "{value}: an older row handed over"
                );
                last = Some(row.version);
            }
        }
    }
}
