//! Each queue recipe serves the clients of one process in the order they
//! asked, and clients in a closed loop take turns (the scenarios of
//! [`super::order`]), on one worker thread and on two.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;

use bakery_core::{MemoryStore, Result, VersionedStore};
use tokio::time::Instant;

use super::order::{self, poll_once};
use crate::lock::{Lock, LockGuard};
use crate::rwlock::{RwLock, WriteGuard};
use crate::semaphore::{Permit, Semaphore};

/// `n` clients of the row `turns` of a new store, each built by `build`.
fn clients<C>(n: usize, build: fn(Arc<dyn VersionedStore>) -> Result<C>) -> Vec<C> {
    let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
    (0..n)
        .map(|_| build(store.clone()).expect("client"))
        .collect()
}

/// Two clients, as [`clients`] builds them.
fn two<C>(build: fn(Arc<dyn VersionedStore>) -> Result<C>) -> [C; 2] {
    <[C; 2]>::try_from(clients(2, build)).unwrap_or_else(|_| unreachable!("two clients"))
}

// Each recipe's client and exclusive grant, for the scenarios.

fn lock(store: Arc<dyn VersionedStore>) -> Result<Lock> {
    Lock::builder(store, "turns").build()
}

fn semaphore(store: Arc<dyn VersionedStore>) -> Result<Semaphore> {
    Semaphore::builder(store, "turns").permits(1).build()
}

fn rwlock(store: Arc<dyn VersionedStore>) -> Result<RwLock> {
    RwLock::builder(store, "turns").build()
}

async fn acquire_lock(lock: Lock) -> Result<LockGuard> {
    lock.acquire().await
}

async fn acquire_permit(semaphore: Semaphore) -> Result<Permit> {
    semaphore.acquire().await
}

async fn write(rwlock: RwLock) -> Result<WriteGuard> {
    rwlock.write().await
}

async fn clients_take_turns() {
    order::clients_in_a_closed_loop_take_turns(clients(4, lock), acquire_lock, LockGuard::release)
        .await;
    order::clients_in_a_closed_loop_take_turns(
        clients(4, semaphore),
        acquire_permit,
        Permit::release,
    )
    .await;
    order::clients_in_a_closed_loop_take_turns(clients(4, rwlock), write, WriteGuard::release)
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

/// [`order::asked_first_is_served_first`] for two clients that `build`
/// makes, taking their grant with `acquire`.
async fn asked_first<C, H, FA, FR>(
    build: fn(Arc<dyn VersionedStore>) -> Result<C>,
    acquire: impl Fn(C) -> FA,
    token: impl Fn(&H) -> u64,
    release: impl Fn(H) -> FR,
    b_begins_while_held: bool,
) where
    C: Clone,
    FA: Future<Output = Result<H>>,
    FR: Future<Output = Result<()>>,
{
    let [a, b] = two(build);
    order::asked_first_is_served_first(
        || acquire(a.clone()),
        || acquire(b.clone()),
        token,
        release,
        b_begins_while_held,
    )
    .await;
}

#[tokio::test]
async fn a_client_that_asked_first_is_served_first_though_not_polled_since() {
    for held in [false, true] {
        asked_first(
            lock,
            acquire_lock,
            LockGuard::token,
            LockGuard::release,
            held,
        )
        .await;
    }
    asked_first(
        semaphore,
        acquire_permit,
        Permit::token,
        Permit::release,
        true,
    )
    .await;
    asked_first(rwlock, write, WriteGuard::token, WriteGuard::release, true).await;
}

/// An acquire future that is kept but never polled again holds the others
/// back for `ARRIVAL_PATIENCE` at most, once.
#[tokio::test(start_paused = true)]
async fn an_abandoned_acquire_holds_the_others_back_only_briefly() {
    let [a, b] = two(lock);
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
