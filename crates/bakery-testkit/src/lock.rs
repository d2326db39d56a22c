//! The lock recipes (fair lock, fenced values, time service, the old
//! baseline lock) on a real store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{Bytes, ErrorKind, Key, PutOutcome, VersionedStore};
use bakery_recipes::fence::{FencedRead, FencedValue};
use bakery_recipes::lock::{Lock, LostReason};
use bakery_recipes::time::TimeService;

use crate::faults::{Fault, FaultStore};
use crate::queued::{self, queued_request, wait_for_state, Queued, COUNTED_LEASE};
use crate::support::{assert_corrupt, assert_distinct_tokens, join_clients, not_before, PATIENCE};
use crate::{unique_name, Case, Clients};

pub(crate) fn cases() -> Vec<Case> {
    crate::cases_of!("lock":
        fenced_counter_eight_clients_fifty_each,
        waiters_are_granted_in_request_order,
        release_hands_off_with_the_next_token,
        try_acquire_refuses_when_held_or_queued,
        acquire_timeout_withdraws_the_request,
        cancelled_waiter_leaves_the_queue,
        a_refused_withdrawal_is_tried_again,
        a_refused_release_is_tried_again,
        unknown_outcomes_while_acquiring_are_settled_by_a_read,
        a_release_whose_outcome_is_unknown_is_settled_at_once,
        silent_holder_is_evicted_after_its_lease,
        paused_holder_loses_and_its_fenced_write_is_rejected,
        without_fencing_a_paused_holder_loses_an_update,
        uncontended_acquire_and_release_are_one_write_each,
        clients_of_one_process_never_conflict,
        corrupt_lock_row_is_a_typed_error_and_kept,
        invalid_names_and_settings_are_rejected,
        watch_capability_matches_behaviour,
        time_service_never_goes_back,
        reentrant_acquire_shares_the_grant_until_the_last_release,
    )
}

fn lock(store: &Arc<dyn VersionedStore>, name: &str) -> Lock {
    Lock::handle(store.clone(), name, PATIENCE, None)
}

fn short_lease(store: &Arc<dyn VersionedStore>, name: &str, lease_ms: u64) -> Lock {
    Lock::builder(store.clone(), name)
        .lease(Duration::from_millis(lease_ms))
        .acquire_timeout(PATIENCE)
        .build()
        .expect("valid lock settings")
}

fn number(data: &Bytes) -> u64 {
    std::str::from_utf8(data)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("fenced counter holds {data:?}, not a number"))
}

async fn read_counter(value: &FencedValue) -> u64 {
    match value.read().await.expect("read fenced counter") {
        Some(fenced) => number(&fenced.data),
        None => 0,
    }
}

/// Read the counter as the holder of `token` (raising the fence first).
async fn read_counter_fenced(value: &FencedValue, token: u64) -> u64 {
    match value.read_fenced(token).await.expect("fenced read") {
        FencedRead::Current(Some(data)) => number(&data),
        FencedRead::Current(None) => 0,
        FencedRead::Rejected { highest } => {
            panic!("the current holder (token {token}) was fenced off by {highest}")
        }
    }
}

/// Add one to the counter of `value` as the holder of `token` (`who`):
/// the fenced read and the write must both accept it.
async fn increment_fenced(value: &FencedValue, token: u64, who: &str) {
    let n = read_counter_fenced(value, token).await;
    let write = value
        .write(token, (n + 1).to_string().into())
        .await
        .unwrap_or_else(|e| panic!("{who}: fenced write: {e}"));
    assert!(write.is_accepted(), "{who} refused: {write:?}");
}

/// 8 clients × 50 acquisitions; each reads the lock row (it must show its
/// own grant), reads a fenced counter (raising the
/// fence to its token) and writes it back + 1 with its token (a blind
/// write, so only mutual exclusion keeps the count right). Final value 400, no write rejected, no two critical
/// sections overlapping, every grant a new token.
async fn fenced_counter_eight_clients_fifty_each(clients: Clients) {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 50;
    let name = unique_name("fenced-counter");
    let store = clients.store();
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = clients
        .clients(CLIENTS)
        .await
        .into_iter()
        .map(|store| {
            let name = name.clone();
            let (inside, tokens) = (inside.clone(), tokens.clone());
            tokio::spawn(async move {
                let lock = lock(&store, &name);
                let counter = FencedValue::new(store.clone(), &name).expect("fenced name");
                let linearizable = store
                    .capabilities()
                    .contains(bakery_core::Capabilities::LINEARIZABLE_READS);
                for _ in 0..ROUNDS {
                    let guard = lock.acquire().await.expect("acquire");
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two clients inside the critical section"
                    );
                    if linearizable {
                        // A holder reads the row of its own grant, never
                        // an older one.
                        let seen = Lock::inspect(&*store, &name)
                            .await
                            .expect("inspect")
                            .expect("the lock row");
                        assert_eq!(
                            seen.token,
                            guard.token(),
                            "the holder read a lock row older than its grant"
                        );
                    }
                    increment_fenced(&counter, guard.token(), "the current holder").await;
                    tokens.lock().expect("tokens").push(guard.token());
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    join_clients(tasks).await;
    let counter = FencedValue::new(store.clone(), &name).expect("fenced name");
    assert_eq!(read_counter(&counter).await, (CLIENTS * ROUNDS) as u64);
    assert_distinct_tokens(&tokens, CLIENTS * ROUNDS);
}

/// Five waiters enqueue one after another behind a holder; they are served
/// in exactly that order.
async fn waiters_are_granted_in_request_order(clients: Clients) {
    const WAITERS: usize = 5;
    let (store, name, holder) = queued::held::<Lock>(&clients, "fifo").await;
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let store_i = clients.client().await;
        let (name_i, served) = (name.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock(&store_i, &name_i).acquire().await.expect("acquire");
            served.lock().expect("served").push((i, guard.token()));
            guard.release().await.expect("release");
        }));
        wait_for_state::<Lock>(&store, &name, "the waiter enqueued", |s| {
            s.queue.len() == i + 1
        })
        .await;
    }
    holder.release().await.expect("release");
    for task in tasks {
        task.await.expect("waiter");
    }
    let served = served.lock().expect("served").clone();
    let order: Vec<usize> = served.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "not FIFO");
    let tokens: Vec<u64> = served.iter().map(|(_, t)| *t).collect();
    assert_eq!(tokens, (2..2 + WAITERS as u64).collect::<Vec<_>>());
}

async fn release_hands_off_with_the_next_token(clients: Clients) {
    let (store, name, first) = queued::held::<Lock>(&clients, "handoff").await;
    let waiting = queued_request::<Lock>(&clients, &name).await;
    let token = first.token();
    first.release().await.expect("release");
    // The release itself made the waiter the holder (direct hand-off).
    let state = Lock::inspect(&*store, &name).await.expect("inspect");
    let state = state.expect("row exists");
    assert_eq!(state.token, token + 1);
    assert!(state.queue.is_empty());
    assert!(state.holder.is_some(), "hand-off left the lock free");
    let second = waiting.await.expect("task").expect("acquire");
    assert_eq!(second.token(), token + 1);
    assert!(second.is_held());
    second.release().await.expect("release");
}

async fn try_acquire_refuses_when_held_or_queued(clients: Clients) {
    let name = unique_name("try");
    let a = lock(&clients.client().await, &name);
    let b = lock(&clients.client().await, &name);
    let guard = a.try_acquire().await.expect("try").expect("free lock");
    assert!(b.try_acquire().await.expect("try").is_none(), "held");
    let waiting = queued_request::<Lock>(&clients, &name).await;
    assert!(b.try_acquire().await.expect("try").is_none(), "queued");
    guard.release().await.expect("release");
    // Handed to the waiter: still refused.
    assert!(b.try_acquire().await.expect("try").is_none(), "handed off");
    waiting
        .await
        .expect("task")
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let again = b.try_acquire().await.expect("try").expect("free again");
    again.release().await.expect("release");
}

async fn acquire_timeout_withdraws_the_request(clients: Clients) {
    queued::timeout_withdraws_the_request(clients, "timeout", |_: Lock| async {}).await;
}

async fn cancelled_waiter_leaves_the_queue(clients: Clients) {
    queued::cancelled_request_leaves_the_queue::<Lock>(clients, "cancel").await;
}

/// A request whose withdrawal the store refused (a fault as its acquire
/// timed out) is withdrawn once the store answers again: it does not stay
/// queued for the waiters behind it to wait out its lease. The acquire
/// still ends `TimedOut`.
async fn a_refused_withdrawal_is_tried_again(clients: Clients) {
    queued::a_refused_withdrawal_is_tried_again::<Lock>(clients, "withdraw-again").await;
}

/// A release the store refused (`Unavailable`, reported to the caller) is
/// tried again until it applies: the lock is free again without anyone
/// waiting out the lease.
async fn a_refused_release_is_tried_again(clients: Clients) {
    queued::a_refused_release_is_tried_again::<Lock>(clients, "release-again").await;
}

/// A write of `acquire` or `try_acquire` whose outcome is unknown (its
/// reply lost after it applied, or its request lost before) is settled by
/// reading the row, as a conflict would be: the waiter is granted once at
/// the release, the try takes the free lock, and no error reaches either.
async fn unknown_outcomes_while_acquiring_are_settled_by_a_read(clients: Clients) {
    for fault in [Fault::LoseReply, Fault::LoseRequest] {
        queued::unknown_outcomes_while_asking_are_settled_by_a_read::<Lock>(
            clients.clone(),
            "unknown-ask",
            fault,
        )
        .await;
        let name = unique_name("unknown-try");
        let faulty = Arc::new(FaultStore::new(clients.client().await));
        let store: Arc<dyn VersionedStore> = faulty.clone();
        faulty.script([fault]);
        let guard = lock(&store, &name)
            .try_acquire()
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: settled by a read, not {e}"))
            .unwrap_or_else(|| panic!("{fault:?}: the free lock taken"));
        assert_eq!(faulty.remaining(), 0, "{fault:?}: the take met its fault");
        let state = Lock::inspect(&*clients.store(), &name)
            .await
            .expect("inspect")
            .expect("row");
        assert_eq!(state.token, 1, "{fault:?}: one grant: {state:?}");
        assert_eq!(guard.token(), 1, "{fault:?}");
        guard.release().await.expect("release");
    }
    // A store that never answers is not asked forever: after a few writes
    // of unknown outcome, the try returns the last one's error.
    let faulty = Arc::new(FaultStore::new(clients.client().await));
    let store: Arc<dyn VersionedStore> = faulty.clone();
    faulty.script([Fault::LoseRequest; 40]);
    let err = lock(&store, &unique_name("unknown-always"))
        .try_acquire()
        .await
        .expect_err("every write lost");
    assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
    // (Its withdrawal goes on in the background, meeting faults of its own.)
    assert!(
        faulty.remaining() >= 30,
        "it stopped after a few: {} left",
        faulty.remaining()
    );
}

/// A release whose outcome is unknown (its reply lost after it applied,
/// or its request lost before) is tried again at once: `release` returns
/// `Ok` and the lock is free, not the store's error with the lock held
/// until a retry in the background (which a process exiting next would
/// never make). A holder evicted before its release still gets `Lost`.
async fn a_release_whose_outcome_is_unknown_is_settled_at_once(clients: Clients) {
    for fault in [Fault::LoseReply, Fault::LoseRequest] {
        let name = unique_name("unknown-release");
        let faulty = Arc::new(FaultStore::new(clients.client().await));
        let store: Arc<dyn VersionedStore> = faulty.clone();
        let guard = lock(&store, &name).acquire().await.expect("acquire");
        faulty.script([fault]);
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: settled, not {e}"));
        assert_eq!(
            faulty.remaining(),
            0,
            "{fault:?}: the release met its fault"
        );
        let state = Lock::inspect(&*clients.store(), &name)
            .await
            .expect("inspect")
            .expect("row");
        assert!(state.holder.is_none(), "{fault:?}: still held: {state:?}");
    }
    // Evicted before it released, its first try lost on the way: the
    // second try finds the grant gone, and that is a loss, not a release.
    let name = unique_name("unknown-release-lost");
    let faulty = Arc::new(FaultStore::new(clients.client().await));
    let store: Arc<dyn VersionedStore> = faulty.clone();
    let held = short_lease(&store, &name, 400)
        .acquire()
        .await
        .expect("acquire");
    let lost = held.lost();
    faulty.pause();
    let waiter = lock(&clients.client().await, &name)
        .acquire()
        .await
        .expect("the waiter evicts the silent holder");
    tokio::time::timeout(PATIENCE, lost)
        .await
        .expect("the holder learns it lost");
    faulty.resume();
    faulty.script([Fault::LoseRequest]);
    let err = held
        .release()
        .await
        .expect_err("evicted before its release");
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    assert_eq!(faulty.remaining(), 0, "the release met its fault");
    waiter.release().await.expect("release");
}

/// A holder that stops talking to the store (its calls held, like a crashed
/// or partitioned client) is evicted by a waiter once it saw no heartbeat
/// for a whole lease on its own clock — and not before.
async fn silent_holder_is_evicted_after_its_lease(clients: Clients) {
    const LEASE_MS: u64 = 500;
    let name = unique_name("evict");
    let store = clients.client().await;
    let silent_store = Arc::new(FaultStore::new(clients.client().await));
    let silent = short_lease(
        &(silent_store.clone() as Arc<dyn VersionedStore>),
        &name,
        LEASE_MS,
    );
    let crashed = silent.acquire().await.expect("acquire");
    let crashed_token = crashed.token();
    silent_store.pause();
    let next = not_before(
        Duration::from_millis(LEASE_MS),
        "a lease of silence",
        lock(&store, &name).acquire(),
    )
    .await
    .expect("evict and acquire");
    assert_eq!(next.token(), crashed_token + 1);
    next.release().await.expect("release");
    drop(crashed); // its release (held by the pause) is never sent
}

/// Seed 003 + Kleppmann: the holder reads a counter and pauses past its
/// lease; another client takes over and increments twice; when the first resumes, `lost()` has fired and its
/// write with the old token is refused.
async fn paused_holder_loses_and_its_fenced_write_is_rejected(clients: Clients) {
    let outcome = paused_holder_scenario(clients, true).await;
    assert_eq!(
        outcome.final_value, 2,
        "the new holder's increments must survive"
    );
    assert_eq!(outcome.stale_write_accepted, Some(false));
    assert!(
        matches!(
            outcome.lost,
            Some(LostReason::LeaseExpired | LostReason::Evicted)
        ),
        "lost() did not fire: {:?}",
        outcome.lost
    );
}

/// Negative control: the same pause WITHOUT fencing (a plain last-writer-
/// wins write) must show the violation — the paused holder's stale write
/// (0 + 1) wipes out the new holder's two increments. Proves the fenced case can fail.
async fn without_fencing_a_paused_holder_loses_an_update(clients: Clients) {
    let outcome = paused_holder_scenario(clients, false).await;
    assert_eq!(outcome.stale_write_accepted, Some(true));
    assert_eq!(
        outcome.final_value, 1,
        "expected the lost update that fencing prevents"
    );
}

struct PausedOutcome {
    final_value: u64,
    stale_write_accepted: Option<bool>,
    lost: Option<LostReason>,
}

async fn paused_holder_scenario(clients: Clients, fenced: bool) -> PausedOutcome {
    const LEASE_MS: u64 = 400;
    let name = unique_name(if fenced { "paused" } else { "unfenced" });
    // B's store; A pauses its own.
    let store = clients.client().await;
    let paused_store = Arc::new(FaultStore::new(clients.client().await));
    let paused_dyn: Arc<dyn VersionedStore> = paused_store.clone();
    let a_lock = short_lease(&paused_dyn, &name, LEASE_MS);
    let a_value = FencedValue::new(paused_dyn.clone(), &name).expect("name");
    let plain_key = Key::new(format!("plain/{name}")).expect("key");

    // A takes the lock and reads the counter (0)...
    let a = a_lock.acquire().await.expect("A acquires");
    let a_read = if fenced {
        read_counter_fenced(&a_value, a.token()).await
    } else {
        plain_read(&*paused_dyn, &plain_key).await
    };
    let a_lost = a.lost();
    // ...and freezes past its lease.
    paused_store.pause();

    // B evicts A, then B (and again after it) increments the counter.
    let b = lock(&store, &name);
    for round in 0..2 {
        let guard = b.acquire().await.expect("B acquires");
        assert!(guard.token() > a.token());
        if fenced {
            let b_value = FencedValue::new(store.clone(), &name).expect("name");
            increment_fenced(&b_value, guard.token(), &format!("B, round {round}")).await;
        } else {
            let n = plain_read(&*store, &plain_key).await;
            plain_write(&*store, &plain_key, n + 1).await;
        }
        guard.release().await.expect("B releases");
    }

    // A's own clock has run past its lease while frozen: lost() fires even
    // before it can talk to the store again.
    let lost = tokio::time::timeout(PATIENCE, a_lost).await.ok();
    assert!(!a.is_held(), "a guard past its lease still claims the lock");
    paused_store.resume();
    // A resumes and finishes its critical section with the stale value.
    let stale_write_accepted = if fenced {
        let write = a_value
            .write(a.token(), (a_read + 1).to_string().into())
            .await
            .expect("A writes");
        Some(write.is_accepted())
    } else {
        plain_write(&*paused_dyn, &plain_key, a_read + 1).await;
        Some(true)
    };
    let err = a.release().await.expect_err("A no longer holds the lock");
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
    let final_value = if fenced {
        read_counter(&FencedValue::new(store.clone(), &name).expect("name")).await
    } else {
        plain_read(&*store, &plain_key).await
    };
    PausedOutcome {
        final_value,
        stale_write_accepted,
        lost,
    }
}

async fn plain_read(store: &dyn VersionedStore, key: &Key) -> u64 {
    match store.get(key).await.expect("get") {
        Some(row) => number(&row.value),
        None => 0,
    }
}

/// What a client without fencing does: overwrite whatever is there.
async fn plain_write(store: &dyn VersionedStore, key: &Key, value: u64) {
    let mut current = store.get(key).await.expect("get");
    loop {
        let expected = current.as_ref().map(|row| row.version);
        match store
            .put_if_version(key, expected, value.to_string().into())
            .await
            .expect("put")
        {
            PutOutcome::Applied(_) => return,
            PutOutcome::Conflict(now) => current = now,
        }
    }
}

async fn uncontended_acquire_and_release_are_one_write_each(store: Arc<dyn VersionedStore>) {
    let name = unique_name("cost");
    let counting = Arc::new(bakery_core::CountingStore::new(store));
    // A heartbeat (every lease/3) would be one more write: the lease is long
    // beside any hold here, however slow the machine.
    let lock = Lock::builder(counting.clone(), &name)
        .lease(COUNTED_LEASE)
        .build()
        .expect("settings");
    lock.acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let before = counting.counts();
    for _ in 0..5 {
        let guard = lock.acquire().await.expect("acquire");
        guard.release().await.expect("release");
    }
    let spent = counting.counts();
    assert_eq!(
        spent.puts - before.puts,
        10,
        "one write to take, one to release"
    );
    assert_eq!(spent.total() - before.total(), 10, "{spent:?}");
    assert_eq!(spent.conflicts, 0);
}

/// Eight handles of one process, contending: their writes go through the
/// process's one writer for the row, so none conflicts with another (and
/// the grants still never overlap).
async fn clients_of_one_process_never_conflict(store: Arc<dyn VersionedStore>) {
    queued::clients_of_one_process_never_conflict::<Lock>(store, "combined", 10).await;
}

async fn corrupt_lock_row_is_a_typed_error_and_kept(store: Arc<dyn VersionedStore>) {
    let name = unique_name("corrupt");
    let key = Key::with_prefix(bakery_recipes::lock::KEY_PREFIX, &name).expect("key");
    crate::applied(&*store, &key, None, "{not a lock").await;
    let lock = lock(&store, &name);
    assert_corrupt(lock.acquire().await, "acquire");
    assert_corrupt(lock.try_acquire().await, "try_acquire");
    assert_corrupt(Lock::inspect(&*store, &name).await, "inspect");
    let row = store.get(&key).await.expect("get").expect("kept");
    assert_eq!(&row.value[..], b"{not a lock");
}

async fn invalid_names_and_settings_are_rejected(store: Arc<dyn VersionedStore>) {
    for name in ["", "a/b", "with space", &"x".repeat(600)] {
        let err = Lock::builder(store.clone(), name)
            .build()
            .expect_err("bad name");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{name:?}");
        assert!(FencedValue::new(store.clone(), name).is_err());
        assert!(TimeService::new(store.clone(), name).is_err());
    }
    let err = Lock::builder(store.clone(), "ok")
        .lease(Duration::from_millis(1))
        .build()
        .expect_err("lease too short");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

/// A backend that claims WATCH wakes a watcher after a write + notify;
/// one that does not returns no watch (so waiters poll).
async fn watch_capability_matches_behaviour(store: Arc<dyn VersionedStore>) {
    let key = Key::with_prefix("lock", &unique_name("watch")).expect("key");
    let watch = store.watch(&key).await.expect("watch");
    let claims = store
        .capabilities()
        .contains(bakery_core::Capabilities::WATCH);
    match watch {
        None => assert!(!claims, "claims WATCH but watch() gave nothing"),
        Some(mut watch) => {
            assert!(claims, "delivers watches without claiming WATCH");
            // What the lock does on a change of holder: write, then notify.
            let _ = store
                .put_if_version(&key, None, "changed".into())
                .await
                .expect("write");
            store.notify(&key).await.expect("notify");
            let woke = tokio::time::timeout(PATIENCE, watch.changed()).await;
            assert_eq!(woke, Ok(true), "notify did not wake the watcher");
        }
    }
}

/// Clients with skewed clocks publish into one time register; each sees a
/// non-decreasing time and the register ends at the largest clock.
async fn time_service_never_goes_back(clients: Clients) {
    let name = unique_name("time");
    let store = clients.store();
    let skews: [u64; 4] = [0, 5_000, 1_000_000, 20];
    let stores = clients.clients(skews.len()).await;
    let tasks: Vec<_> = skews
        .iter()
        .zip(stores)
        .map(|(&skew, store)| {
            let service = TimeService::new(store, &name).expect("name");
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for tick in 0..20u64 {
                    seen.push(
                        service
                            .advance_to(1_000_000 + skew + tick * 10)
                            .await
                            .expect("advance"),
                    );
                    seen.push(service.read().await.expect("read").expect("published"));
                }
                seen
            })
        })
        .collect();
    for task in tasks {
        let seen = task.await.expect("client");
        assert!(
            seen.windows(2).all(|w| w[0] <= w[1]),
            "time went back: {seen:?}"
        );
    }
    let service = TimeService::new(store.clone(), &name).expect("name");
    let max = 1_000_000 + 1_000_000 + 19 * 10;
    assert_eq!(service.read().await.expect("read"), Some(max));
    assert_eq!(service.advance_to(5).await.expect("advance"), max);
}

/// A reentrant lock: the holding task's second acquire (and try) shares the
/// grant at once with the same token, another task still queues, and the
/// lock is free only after the last guard's release. Without reentrancy
/// the second acquire waits for itself: its request queues behind its own
/// grant. Every handle waits with PATIENCE (an uncontended acquire on a
/// slow store can take hundreds of ms); the acquires that must block are
/// watched until their request is in the queue, then dropped, which
/// withdraws it.
async fn reentrant_acquire_shares_the_grant_until_the_last_release(store: Arc<dyn VersionedStore>) {
    let name = unique_name("reenter");
    let reentrant = Lock::builder(store.clone(), &name)
        .reentrant(true)
        .acquire_timeout(PATIENCE)
        .build()
        .expect("valid");
    let other = lock(&store, &name);
    let outer = reentrant.acquire().await.expect("acquire");
    let inner = reentrant.acquire().await.expect("reenter");
    assert_eq!(inner.token(), outer.token());
    let tried = reentrant
        .try_acquire()
        .await
        .expect("try")
        .expect("reenter");
    assert_eq!(tried.token(), outer.token());
    let mut elsewhere = {
        let reentrant = reentrant.clone();
        tokio::spawn(async move { reentrant.acquire().await.map(|guard| guard.token()) })
    };
    tokio::select! {
        shared = &mut elsewhere => panic!("another task shared the grant: {shared:?}"),
        _ = wait_for_state::<Lock>(&store, &name, "the other task's request queued", |s| {
            s.queue.len() == 1
        }) => {}
    }
    elsewhere.abort(); // drops its acquire future
    wait_for_state::<Lock>(&store, &name, "the other task's request withdrawn", |s| {
        s.queue.is_empty()
    })
    .await;

    outer.release().await.expect("release outer");
    tried.release().await.expect("release tried");
    assert!(
        other.try_acquire().await.expect("try").is_none(),
        "freed early"
    );
    inner.release().await.expect("release inner");
    let next = other.try_acquire().await.expect("try").expect("free");
    next.release().await.expect("release");

    let plain = lock(&store, &name);
    let held = plain.acquire().await.expect("acquire");
    tokio::select! {
        again = plain.acquire() => panic!("not reentrant by default, yet acquired again: {again:?}"),
        _ = wait_for_state::<Lock>(&store, &name, "the second acquire queued behind its own grant", |s| {
            s.queue.len() == 1
        }) => {}
    } // the second acquire's future is dropped here
    wait_for_state::<Lock>(&store, &name, "the dropped request withdrawn", |s| {
        s.queue.is_empty()
    })
    .await;
    held.release().await.expect("release");
}
