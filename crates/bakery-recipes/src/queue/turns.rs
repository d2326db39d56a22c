//! Each queue recipe serves the clients of one process in the order they
//! asked, and clients in a closed loop take turns (the scenarios of
//! [`super::order`]), on one worker thread and on two.

use std::pin::pin;
use std::sync::Arc;

use bakery_core::{MemoryStore, VersionedStore};
use tokio::time::Instant;

use super::order::{self, poll_once};
use crate::lock::{Lock, LockGuard};
use crate::rwlock::{RwLock, WriteGuard};
use crate::semaphore::{Permit, Semaphore};

fn store() -> Arc<dyn VersionedStore> {
    Arc::new(MemoryStore::new())
}

fn locks(store: &Arc<dyn VersionedStore>, n: usize) -> Vec<Lock> {
    (0..n)
        .map(|_| Lock::builder(store.clone(), "turns").build().expect("lock"))
        .collect()
}

fn semaphores(store: &Arc<dyn VersionedStore>, n: usize) -> Vec<Semaphore> {
    (0..n)
        .map(|_| {
            Semaphore::builder(store.clone(), "turns")
                .permits(1)
                .build()
                .expect("semaphore")
        })
        .collect()
}

fn rwlocks(store: &Arc<dyn VersionedStore>, n: usize) -> Vec<RwLock> {
    (0..n)
        .map(|_| {
            RwLock::builder(store.clone(), "turns")
                .build()
                .expect("rwlock")
        })
        .collect()
}

async fn clients_take_turns() {
    order::clients_in_a_closed_loop_take_turns(
        locks(&store(), 4),
        |lock: Lock| async move { lock.acquire().await },
        LockGuard::release,
    )
    .await;
    order::clients_in_a_closed_loop_take_turns(
        semaphores(&store(), 4),
        |semaphore: Semaphore| async move { semaphore.acquire().await },
        Permit::release,
    )
    .await;
    order::clients_in_a_closed_loop_take_turns(
        rwlocks(&store(), 4),
        |rwlock: RwLock| async move { rwlock.write().await },
        WriteGuard::release,
    )
    .await;
}

#[tokio::test]
async fn clients_in_a_closed_loop_take_turns() {
    clients_take_turns().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_in_a_closed_loop_take_turns_on_two_threads() {
    clients_take_turns().await;
}

#[tokio::test]
async fn a_client_that_asked_first_is_served_first_though_not_polled_since() {
    for b_begins_while_held in [false, true] {
        let [a, b] = <[Lock; 2]>::try_from(locks(&store(), 2)).expect("two");
        order::asked_first_is_served_first(
            || a.acquire(),
            || b.acquire(),
            LockGuard::token,
            LockGuard::release,
            b_begins_while_held,
        )
        .await;
    }
    let [a, b] = <[Semaphore; 2]>::try_from(semaphores(&store(), 2)).expect("two");
    order::asked_first_is_served_first(
        || a.acquire(),
        || b.acquire(),
        Permit::token,
        Permit::release,
        true,
    )
    .await;
    let [a, b] = <[RwLock; 2]>::try_from(rwlocks(&store(), 2)).expect("two");
    order::asked_first_is_served_first(
        || a.write(),
        || b.write(),
        WriteGuard::token,
        WriteGuard::release,
        true,
    )
    .await;
}

/// An acquire future that is kept but never polled again holds the others
/// back for `ARRIVAL_PATIENCE` at most, once.
#[tokio::test(start_paused = true)]
async fn an_abandoned_acquire_holds_the_others_back_only_briefly() {
    let [a, b] = <[Lock; 2]>::try_from(locks(&store(), 2)).expect("two");
    let mut b_acquire = pin!(b.acquire());
    assert!(poll_once(b_acquire.as_mut()).await.is_pending());
    let started = Instant::now();
    a.acquire().await.unwrap().release().await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= order::ARRIVAL_PATIENCE, "waited {waited:?}");
    let again = Instant::now();
    a.acquire().await.unwrap().release().await.unwrap();
    assert!(again.elapsed() < order::ARRIVAL_PATIENCE, "waited again");
    // B kept its request: it is still served, after A.
    let b_guard = b_acquire.await.unwrap();
    assert_eq!(b_guard.token(), 3);
    b_guard.release().await.unwrap();
}
