//! The counting semaphore on a real store: never more than N holders, FIFO
//! grants, the soft form, eviction of a silent holder, withdrawal on
//! timeout or cancel, and typed errors for rows it must not touch.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{ErrorKind, Key, VersionedStore};
use bakery_recipes::semaphore::{self, Semaphore, SemaphoreBuilder};
use tokio::time::Instant;

use crate::faults::FaultStore;
use crate::queued::{
    self, frozen_holder_learns_it_lost, inspect, sample_while_running, wait_for_state,
};
use crate::support::{
    assert_corrupt, assert_distinct_tokens, assert_settings_refused, join_clients, not_before,
    Running, PATIENCE,
};
use crate::{unique_name, Case, Clients};

pub(crate) fn cases() -> Vec<Case> {
    crate::cases_of!("semaphore":
        never_more_than_n_holders_at_once,
        waiters_are_granted_in_queue_order,
        clients_of_one_process_never_conflict,
        try_acquire_refuses_when_full_or_queued,
        paused_holder_is_evicted_after_its_lease,
        acquire_timeout_withdraws_the_request,
        cancelled_acquire_leaves_the_queue,
        refused_withdrawals_and_releases_are_tried_again,
        corrupt_row_and_other_permit_count_are_typed_errors,
    )
}

fn semaphore(store: &Arc<dyn VersionedStore>, name: &str, permits: u32) -> SemaphoreBuilder {
    Semaphore::builder(store.clone(), name)
        .permits(permits)
        .acquire_timeout(PATIENCE)
}

/// 8 clients × 20 acquisitions of a 3-permit semaphore: the number of
/// clients inside never exceeds 3 and every grant has its own token. It
/// must not under-admit either: the first grants are held until 3 clients
/// are inside at once and the stored row has been seen with 3 holders, so
/// a semaphore that admits fewer fails here on any machine, however slowly
/// its grants arrive (the wait is bounded; timing alone used to decide it).
async fn never_more_than_n_holders_at_once(clients: Clients) {
    let store = clients.store();
    const PERMITS: usize = 3;
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 20;
    let name = unique_name("sem-bound");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let running = Arc::new(AtomicUsize::new(CLIENTS));
    let most_stored = Arc::new(AtomicUsize::new(0));
    // Decoding refuses a row with more holders than permits.
    let sampler = {
        let most_stored = most_stored.clone();
        sample_while_running::<Semaphore>(&store, &name, &running, move |state| {
            most_stored.fetch_max(state.holders.len(), Ordering::SeqCst);
        })
    };
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let sem = semaphore(&clients.client().await, &name, PERMITS as u32)
            .owner(format!("client-{c}"))
            .build()
            .expect("valid");
        let (inside, most, tokens) = (inside.clone(), most.clone(), tokens.clone());
        let most_stored = most_stored.clone();
        tasks.push(Running::spawn(&running, async move {
            for round in 0..ROUNDS {
                let permit = sem
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("client {c}, round {round}: acquire: {e}"));
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(
                    now <= PERMITS,
                    "{now} clients inside a {PERMITS}-permit semaphore"
                );
                tokens.lock().expect("tokens").push(permit.token());
                // Until the semaphore has shown it admits PERMITS at once
                // (in the clients and in the stored row), hold the permit.
                let give_up = Instant::now() + PATIENCE;
                while (most.load(Ordering::SeqCst) < PERMITS
                    || most_stored.load(Ordering::SeqCst) < PERMITS)
                    && Instant::now() < give_up
                {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                // The work done under the permit: long enough for grants to
                // overlap (the bound above holds however long it is).
                tokio::time::sleep(Duration::from_millis(10)).await;
                assert!(permit.is_held(), "permit lost during the work");
                inside.fetch_sub(1, Ordering::SeqCst);
                permit
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("client {c}, round {round}: release: {e}"));
            }
        }));
    }
    join_clients(tasks).await;
    sampler.await.expect("sampler");
    let most_stored = most_stored.load(Ordering::SeqCst);
    assert_distinct_tokens(&tokens, CLIENTS * ROUNDS);
    assert_eq!(
        most_stored, PERMITS,
        "never {PERMITS} holders stored at once: the semaphore under-admits"
    );
    assert_eq!(
        most.load(Ordering::SeqCst),
        PERMITS,
        "never {PERMITS} clients inside at once: the semaphore under-admits"
    );
    let state = inspect::<Semaphore>(&store, &name).await.expect("row");
    assert!(
        state.holders.is_empty() && state.queue.is_empty(),
        "{state:?}"
    );
    assert_eq!(state.token, (CLIENTS * ROUNDS) as u64);
}

/// With both permits held, four waiters queue one after another; they are
/// granted in exactly that order (grant order is token order).
async fn waiters_are_granted_in_queue_order(clients: Clients) {
    let store = clients.store();
    const WAITERS: usize = 4;
    let name = unique_name("sem-fifo");
    let holders = semaphore(&clients.client().await, &name, 2)
        .build()
        .expect("valid");
    let first = holders.acquire().await.expect("first permit");
    let second = holders.acquire().await.expect("second permit");
    let granted = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let sem = semaphore(&clients.client().await, &name, 2)
            .owner(format!("waiter-{i}"))
            .build()
            .expect("valid");
        let granted = granted.clone();
        tasks.push(tokio::spawn(async move {
            let permit = sem.acquire().await.expect("acquire");
            granted.lock().expect("granted").push((i, permit.token()));
            permit.release().await.expect("release");
        }));
        wait_for_state::<Semaphore>(&store, &name, "the waiter queued", |s| {
            s.queue.len() == i + 1
        })
        .await;
    }
    let state = inspect::<Semaphore>(&store, &name).await.expect("row");
    let queued: Vec<&str> = state.queue.iter().map(|w| w.owner.as_str()).collect();
    assert_eq!(queued, ["waiter-0", "waiter-1", "waiter-2", "waiter-3"]);
    first.release().await.expect("release");
    second.release().await.expect("release");
    for task in tasks {
        task.await.expect("waiter");
    }
    let mut granted = granted.lock().expect("granted").clone();
    granted.sort_unstable();
    let tokens: Vec<u64> = granted.iter().map(|(_, token)| *token).collect();
    assert_eq!(
        tokens,
        [3, 4, 5, 6],
        "waiter i must get token 3 + i (FIFO): {granted:?}"
    );
}

/// Eight handles of one process contend for one permit: they write in the
/// process's turn, each deciding on the row the last write left, so none
/// conflicts with another at the store, and every one is served (a client
/// re-joining after its release must not keep the others from joining).
async fn clients_of_one_process_never_conflict(store: Arc<dyn VersionedStore>) {
    queued::clients_of_one_process_never_conflict::<Semaphore>(store, "sem-turn", 10).await;
}

/// The soft form takes a free permit, and refuses while every permit is
/// held, while someone queues, and after a release that handed the permit
/// to that waiter.
async fn try_acquire_refuses_when_full_or_queued(clients: Clients) {
    let store = clients.store();
    let name = unique_name("sem-try");
    let sem = semaphore(&clients.client().await, &name, 2)
        .build()
        .expect("valid");
    let other = semaphore(&clients.client().await, &name, 2)
        .build()
        .expect("valid");
    let a = sem.try_acquire().await.expect("try").expect("free");
    let b = sem
        .try_acquire()
        .await
        .expect("try")
        .expect("one more free");
    assert_eq!((a.token(), b.token()), (1, 2));
    assert!(other.try_acquire().await.expect("try").is_none(), "full");

    let waiting = {
        let sem = semaphore(&clients.client().await, &name, 2)
            .build()
            .expect("valid");
        tokio::spawn(async move { sem.acquire().await })
    };
    wait_for_state::<Semaphore>(&store, &name, "the waiter queued", |s| s.queue.len() == 1).await;
    assert!(other.try_acquire().await.expect("try").is_none(), "queued");
    a.release().await.expect("release");
    // The release granted the freed permit to the waiter in the same write.
    assert!(
        other.try_acquire().await.expect("try").is_none(),
        "handed on"
    );
    let c = waiting.await.expect("task").expect("waiter granted");
    assert_eq!(c.token(), 3);
    b.release().await.expect("release");
    let d = other.try_acquire().await.expect("try").expect("free again");
    assert_eq!(d.token(), 4);
    c.release().await.expect("release");
    d.release().await.expect("release");
}

/// Two leased holders; one freezes (its store calls held, like a stopped
/// process). A waiter evicts the frozen one — after a whole lease of
/// silence, with a larger token — and not the one that heartbeats; the
/// frozen permit learns it lost, and its late release is refused.
/// Eviction counts each holder's own lease. The live holder's is long
/// beside a heartbeat's gap on a loaded machine (it beats every lease/3),
/// and shorter than the frozen one's: by the time the waiter may evict the
/// frozen holder it has watched the live one for more than a whole lease,
/// so only its heartbeat can have kept its permit.
async fn paused_holder_is_evicted_after_its_lease(clients: Clients) {
    let store = clients.store();
    const LIVE_LEASE: Duration = Duration::from_secs(3);
    const FROZEN_LEASE: Duration = Duration::from_secs(4);
    let name = unique_name("sem-evict");
    let frozen_store = Arc::new(FaultStore::new(clients.client().await));
    let live = semaphore(&clients.client().await, &name, 2)
        .lease(LIVE_LEASE)
        .build()
        .expect("valid")
        .acquire()
        .await
        .expect("live permit");
    let frozen = semaphore(&(frozen_store.clone() as Arc<dyn VersionedStore>), &name, 2)
        .lease(FROZEN_LEASE)
        .build()
        .expect("valid")
        .acquire()
        .await
        .expect("frozen permit");
    let frozen_lost = frozen.lost();
    frozen_store.pause();

    let next = not_before(
        FROZEN_LEASE,
        "a lease of silence",
        semaphore(&clients.client().await, &name, 2)
            .build()
            .expect("valid")
            .acquire(),
    )
    .await
    .expect("evict and acquire");
    assert!(next.token() > frozen.token() && next.token() > live.token());
    let state = inspect::<Semaphore>(&store, &name).await.expect("row");
    let tokens: BTreeSet<u64> = state.holders.iter().map(|h| h.token).collect();
    assert_eq!(
        tokens,
        BTreeSet::from([live.token(), next.token()]),
        "the heartbeating holder must keep its permit: {state:?}"
    );
    assert!(live.is_held());
    frozen_holder_learns_it_lost(frozen, frozen_lost, &frozen_store).await;

    live.release().await.expect("release");
    next.release().await.expect("release");
    let state = inspect::<Semaphore>(&store, &name).await.expect("row");
    assert!(state.holders.is_empty(), "{state:?}");
}

/// A waiter that times out leaves the queue before it returns, so a later
/// release does not hand the permit to a ghost.
async fn acquire_timeout_withdraws_the_request(clients: Clients) {
    queued::timeout_withdraws_the_request(clients, "sem-timeout", |_: Semaphore| async {}).await;
}

/// A withdrawal and a release the store refused are tried again until
/// they apply: neither a timed-out request nor a released permit stays in
/// the row for others to wait out its lease.
async fn refused_withdrawals_and_releases_are_tried_again(clients: Clients) {
    queued::a_refused_withdrawal_is_tried_again::<Semaphore>(clients.clone(), "sem-again").await;
    queued::a_refused_release_is_tried_again::<Semaphore>(clients, "sem-again").await;
}

/// Dropping a waiting acquire withdraws its request in the background.
async fn cancelled_acquire_leaves_the_queue(clients: Clients) {
    queued::cancelled_request_leaves_the_queue::<Semaphore>(clients, "sem-cancel").await;
}

/// A row that is not a semaphore, and a semaphore stored with another
/// number of permits, are typed errors; neither row is touched. Bad
/// settings are refused before anything is sent.
async fn corrupt_row_and_other_permit_count_are_typed_errors(store: Arc<dyn VersionedStore>) {
    let name = unique_name("sem-corrupt");
    let key = Key::with_prefix(semaphore::KEY_PREFIX, &name).expect("key");
    crate::applied(&*store, &key, None, "{not a semaphore").await;
    let sem = semaphore(&store, &name, 2).build().expect("valid");
    let err = assert_corrupt(sem.acquire().await, "acquire");
    assert!(err.message().contains(key.as_str()), "{err}");
    assert_corrupt(sem.try_acquire().await, "try_acquire");
    assert_corrupt(Semaphore::inspect(&*store, &name).await, "inspect");
    let row = store.get(&key).await.expect("get").expect("kept");
    assert_eq!(&row.value[..], b"{not a semaphore");

    let name = unique_name("sem-permits");
    let two = semaphore(&store, &name, 2).build().expect("valid");
    let permit = two.acquire().await.expect("acquire");
    let key = Key::with_prefix(semaphore::KEY_PREFIX, &name).expect("key");
    let before = store.get(&key).await.expect("get").expect("row");
    let three = semaphore(&store, &name, 3).build().expect("valid");
    let err = three.acquire().await.expect_err("other permit count");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.message().contains("2 permits"), "{err}");
    let err = three.try_acquire().await.expect_err("other permit count");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    let after = store.get(&key).await.expect("get").expect("row");
    assert_eq!(after.version, before.version, "the row was rewritten");
    assert_eq!(
        inspect::<Semaphore>(&store, &name)
            .await
            .expect("row")
            .permits,
        2
    );
    permit.release().await.expect("release");

    assert_settings_refused([
        Semaphore::builder(store.clone(), &name).build(),
        semaphore(&store, &name, 0).build(),
        semaphore(&store, &name, semaphore::MAX_PERMITS + 1).build(),
        semaphore(&store, &name, 1)
            .lease(Duration::from_millis(1))
            .build(),
        semaphore(&store, "bad/name", 1).build(),
    ]);
}
