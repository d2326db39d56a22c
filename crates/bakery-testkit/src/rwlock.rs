//! The read-write lock on a real store: never a writer with anyone, many
//! readers together, writer preference, readers queued behind a writer
//! granted together, eviction of a paused writer, withdrawal on timeout or
//! cancel, and typed errors for rows it must not touch.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{ErrorKind, Key, VersionedStore};
use bakery_recipes::rwlock::{self, Mode, ReadGuard, RwLock, RwLockBuilder};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

use crate::faults::FaultStore;
use crate::queued::{
    self, frozen_holder_learns_it_lost, inspect, sample_while_running, wait_for_state,
};
use crate::support::{
    assert_distinct_tokens, assert_settings_refused, join_clients, not_before, Grant, Running,
    PATIENCE,
};
use crate::{unique_name, Case, Clients};

pub(crate) fn cases() -> Vec<Case> {
    crate::cases_of!("rwlock":
        never_a_writer_with_anyone,
        clients_of_one_process_never_conflict,
        queued_writer_blocks_new_readers,
        readers_behind_a_writer_are_granted_together,
        paused_writer_is_evicted_after_its_lease,
        acquire_timeout_withdraws_the_request,
        cancelled_acquire_leaves_the_queue,
        corrupt_row_is_a_typed_error_and_kept,
    )
}

fn rwlock(store: &Arc<dyn VersionedStore>, name: &str) -> RwLockBuilder {
    RwLock::builder(store.clone(), name).acquire_timeout(PATIENCE)
}

/// A task in which `owner`, a client of `name` on `store`, reads, then
/// waits until every reader sharing `together` holds at the same time
/// (`why` fails the case if they never do: a lock that let them in one
/// after the other); it returns the read guard, still held.
fn reader_held_together(
    store: &Arc<dyn VersionedStore>,
    name: &str,
    owner: String,
    together: &Arc<Barrier>,
    why: &'static str,
) -> JoinHandle<ReadGuard> {
    let lock = rwlock(store, name).owner(owner).build().expect("valid");
    let together = together.clone();
    tokio::spawn(async move {
        let guard = lock.read().await.expect("read");
        tokio::time::timeout(PATIENCE, together.wait())
            .await
            .expect(why);
        assert!(guard.is_held(), "{why}: lost while waiting");
        guard
    })
}

/// 4 readers and 2 writers × 15 rounds each. Inside every critical
/// section a shared (readers inside, writer inside) pair is checked: a
/// writer never finds anyone inside, a reader never finds a writer. It is
/// not a mutex either: first, with no writer about, the 4 readers all hold
/// at once (a barrier only they can pass together). Every grant has its
/// own token, and the stored row, sampled while the clients run, always
/// decodes (decoding refuses a writer stored beside anyone).
async fn never_a_writer_with_anyone(clients: Clients) {
    let store = clients.store();
    const READERS: usize = 4;
    const WRITERS: usize = 2;
    const ROUNDS: usize = 15;
    let name = unique_name("rw-excl");
    let readers_inside = Arc::new(AtomicUsize::new(0));
    let writer_inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let together = Arc::new(Barrier::new(READERS));
    let mut first = Vec::new();
    for c in 0..READERS {
        let (client, owner) = (clients.client().await, format!("first-reader-{c}"));
        let why = "all the readers hold at once: it behaves as a mutex";
        first.push(reader_held_together(&client, &name, owner, &together, why));
    }
    for guard in join_clients(first).await {
        tokens.lock().expect("tokens").push(guard.token());
        guard.release().await.expect("release");
    }
    let running = Arc::new(AtomicUsize::new(READERS + WRITERS));
    // Decoding refuses a row with a writer and anyone else.
    let sampler = sample_while_running::<RwLock>(&store, &name, &running, |_| ());
    let mut tasks = Vec::new();
    for c in 0..READERS + WRITERS {
        let mode = if c < READERS { Mode::Read } else { Mode::Write };
        let lock = rwlock(&clients.client().await, &name)
            .owner(format!("{mode}-{c}"))
            .build()
            .expect("valid");
        let (readers_inside, writer_inside, tokens) = (
            readers_inside.clone(),
            writer_inside.clone(),
            tokens.clone(),
        );
        tasks.push(Running::spawn(&running, async move {
            for round in 0..ROUNDS {
                let what = format!("{mode} client {c}, round {round}");
                match mode {
                    Mode::Read => {
                        let guard = lock
                            .read()
                            .await
                            .unwrap_or_else(|e| panic!("{what}: read: {e}"));
                        readers_inside.fetch_add(1, Ordering::SeqCst);
                        assert!(
                            !writer_inside.load(Ordering::SeqCst),
                            "{what}: a writer inside"
                        );
                        tokens.lock().expect("tokens").push(guard.token());
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        assert!(
                            !writer_inside.load(Ordering::SeqCst),
                            "{what}: a writer came in"
                        );
                        assert!(guard.is_held(), "{what}: lost during the work");
                        readers_inside.fetch_sub(1, Ordering::SeqCst);
                        guard
                            .release()
                            .await
                            .unwrap_or_else(|e| panic!("{what}: release: {e}"));
                    }
                    Mode::Write => {
                        let guard = lock
                            .write()
                            .await
                            .unwrap_or_else(|e| panic!("{what}: write: {e}"));
                        assert!(
                            !writer_inside.swap(true, Ordering::SeqCst),
                            "{what}: another writer inside"
                        );
                        assert_eq!(
                            readers_inside.load(Ordering::SeqCst),
                            0,
                            "{what}: readers inside"
                        );
                        tokens.lock().expect("tokens").push(guard.token());
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        assert_eq!(
                            readers_inside.load(Ordering::SeqCst),
                            0,
                            "{what}: a reader came in"
                        );
                        assert!(guard.is_held(), "{what}: lost during the work");
                        writer_inside.store(false, Ordering::SeqCst);
                        guard
                            .release()
                            .await
                            .unwrap_or_else(|e| panic!("{what}: release: {e}"));
                    }
                }
            }
        }));
    }
    join_clients(tasks).await;
    let samples = sampler.await.expect("sampler");
    assert!(samples > 0, "the sampler never read the row");
    let grants = READERS + (READERS + WRITERS) * ROUNDS;
    assert_distinct_tokens(&tokens, grants);
    let state = inspect::<RwLock>(&store, &name).await.expect("row");
    assert!(
        state.holders.is_empty() && state.queue.is_empty(),
        "{state:?}"
    );
    assert_eq!(state.token, grants as u64);
}

/// Eight handles of one process, each alternating write and read grants:
/// they write the row in the process's turn, each deciding on the row the
/// last write left, so none conflicts with another at the store.
async fn clients_of_one_process_never_conflict(store: Arc<dyn VersionedStore>) {
    queued::clients_of_one_process_never_conflict::<RwLock>(store, "rw-turn", 6).await;
}

/// Await `grant` in a task of its own, note its token in `order` under
/// `who`, and release it: the order in which queued clients were served.
fn noted_grant<G: Grant>(
    who: &'static str,
    order: &Arc<Mutex<Vec<(&'static str, u64)>>>,
    grant: impl Future<Output = bakery_core::Result<G>> + Send + 'static,
) -> JoinHandle<()> {
    let order = order.clone();
    tokio::spawn(async move {
        let guard = grant.await.unwrap_or_else(|e| panic!("{who}: {e}"));
        order.lock().expect("order").push((who, guard.token()));
        guard.release().await.expect("release");
    })
}

/// With a reader holding, a queued writer blocks new readers: `try_read`
/// refuses, a `read()` queues behind the writer, and the writer is granted
/// (and done) before that reader.
async fn queued_writer_blocks_new_readers(clients: Clients) {
    let store = clients.store();
    let name = unique_name("rw-pref");
    let lock = rwlock(&clients.client().await, &name)
        .build()
        .expect("valid");
    let first = lock.read().await.expect("first reader");
    let second = lock
        .try_read()
        .await
        .expect("try_read")
        .expect("readers share while nobody queues");
    let order = Arc::new(Mutex::new(Vec::new()));
    let lock = rwlock(&clients.client().await, &name)
        .owner("writer")
        .build()
        .expect("valid");
    let writer = noted_grant("writer", &order, async move { lock.write().await });
    wait_for_state::<RwLock>(&store, &name, "the writer queued", |s| s.queue.len() == 1).await;
    let other = rwlock(&clients.client().await, &name)
        .build()
        .expect("valid");
    assert!(
        other.try_read().await.expect("try_read").is_none(),
        "a reader joined the readers in front of a queued writer"
    );
    assert!(other.try_write().await.expect("try_write").is_none());
    let lock = rwlock(&clients.client().await, &name)
        .owner("late-reader")
        .build()
        .expect("valid");
    let reader = noted_grant("reader", &order, async move { lock.read().await });
    let state =
        wait_for_state::<RwLock>(&store, &name, "the reader queued", |s| s.queue.len() == 2).await;
    let queued: Vec<(&str, Mode)> = state
        .queue
        .iter()
        .map(|w| (w.owner.as_str(), w.mode))
        .collect();
    assert_eq!(
        queued,
        [("writer", Mode::Write), ("late-reader", Mode::Read)]
    );
    assert_eq!(state.readers(), 2);
    first.release().await.expect("release");
    let state = inspect::<RwLock>(&store, &name).await.expect("row");
    assert_eq!(
        state.queue.len(),
        2,
        "granted while a reader still holds: {state:?}"
    );
    second.release().await.expect("release");
    tokio::time::timeout(PATIENCE, writer)
        .await
        .expect("writer granted")
        .expect("writer task");
    tokio::time::timeout(PATIENCE, reader)
        .await
        .expect("reader granted")
        .expect("reader task");
    let order = order.lock().expect("order").clone();
    assert_eq!(
        order,
        [("writer", 3), ("reader", 4)],
        "writer first, in FIFO order"
    );
}

/// Two readers queued behind a writer are both granted by its release, in
/// the same write: distinct tokens, held at the same time.
async fn readers_behind_a_writer_are_granted_together(clients: Clients) {
    let store = clients.store();
    let name = unique_name("rw-batch");
    let writer = rwlock(&clients.client().await, &name)
        .build()
        .expect("valid")
        .write()
        .await
        .expect("write");
    let both_in = Arc::new(Barrier::new(2));
    let mut readers = Vec::new();
    for i in 0..2 {
        let (client, owner) = (clients.client().await, format!("reader-{i}"));
        let why = "the other reader holds at the same time";
        readers.push(reader_held_together(&client, &name, owner, &both_in, why));
        wait_for_state::<RwLock>(&store, &name, "the reader queued", |s| {
            s.queue.len() == i + 1
        })
        .await;
    }
    assert_eq!(writer.token(), 1);
    writer.release().await.expect("release");
    let state =
        wait_for_state::<RwLock>(&store, &name, "both readers granted", |s| s.readers() == 2).await;
    assert!(state.queue.is_empty(), "{state:?}");
    let mut guards = Vec::new();
    let mut tokens = BTreeSet::new();
    for reader in readers {
        let guard = tokio::time::timeout(PATIENCE, reader)
            .await
            .expect("reader granted")
            .expect("reader task");
        tokens.insert(guard.token());
        guards.push(guard);
    }
    assert_eq!(
        tokens,
        BTreeSet::from([2, 3]),
        "one new token each, after the writer's"
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
    let state = inspect::<RwLock>(&store, &name).await.expect("row");
    assert!(state.holders.is_empty(), "{state:?}");
}

/// A writer with a short lease freezes (its store calls held, like a
/// stopped process). A reader evicts it after a whole lease of silence and
/// is granted with a larger token; the frozen guard learns it lost, and its
/// late release is refused with `Lost`.
async fn paused_writer_is_evicted_after_its_lease(clients: Clients) {
    let store = clients.store();
    const LEASE: Duration = Duration::from_millis(500);
    let name = unique_name("rw-evict");
    let frozen_store = Arc::new(FaultStore::new(clients.client().await));
    let frozen = rwlock(&(frozen_store.clone() as Arc<dyn VersionedStore>), &name)
        .lease(LEASE)
        .build()
        .expect("valid")
        .write()
        .await
        .expect("frozen writer");
    let frozen_lost = frozen.lost();
    frozen_store.pause();

    let next = not_before(
        LEASE,
        "a lease of silence",
        rwlock(&clients.client().await, &name)
            .build()
            .expect("valid")
            .read(),
    )
    .await
    .expect("evict and read");
    assert!(next.token() > frozen.token());
    let state = inspect::<RwLock>(&store, &name).await.expect("row");
    assert!(!state.has_writer(), "{state:?}");
    frozen_holder_learns_it_lost(frozen, frozen_lost, &frozen_store).await;
    assert!(next.is_held());
    next.release().await.expect("release");
    let state = inspect::<RwLock>(&store, &name).await.expect("row");
    assert!(state.holders.is_empty(), "{state:?}");
}

/// A writer that times out leaves the queue before it returns: readers are
/// not kept out by a ghost writer, and a later release grants nobody.
async fn acquire_timeout_withdraws_the_request(clients: Clients) {
    queued::timeout_withdraws_the_request(clients, "rw-timeout", |impatient: RwLock| async move {
        let reader = impatient
            .try_read()
            .await
            .expect("try_read")
            .expect("no writer queues any more");
        reader.release().await.expect("release");
    })
    .await;
}

/// Dropping a waiting `write()` withdraws its request in the background.
async fn cancelled_acquire_leaves_the_queue(clients: Clients) {
    queued::cancelled_request_leaves_the_queue::<RwLock>(clients, "rw-cancel").await;
}

/// A row that is not a read-write lock, or one holding a writer together
/// with a reader, is a typed error naming the key; the row is not touched.
/// Bad settings are refused before anything is sent.
async fn corrupt_row_is_a_typed_error_and_kept(store: Arc<dyn VersionedStore>) {
    for (label, value) in [
        ("garbage", "{not an rwlock".to_owned()),
        (
            "mixed",
            r#"{"token":2,"holders":[
                {"id":"a","owner":"o","mode":"write","token":1,"beat":1,"lease_ms":1000},
                {"id":"b","owner":"o","mode":"read","token":2,"beat":1,"lease_ms":1000}]}"#
                .to_owned(),
        ),
    ] {
        let name = unique_name(&format!("rw-corrupt-{label}"));
        let key = Key::with_prefix(rwlock::KEY_PREFIX, &name).expect("key");
        let seeded = crate::applied(&*store, &key, None, &value).await;
        let lock = rwlock(&store, &name).build().expect("valid");
        let errors = [
            lock.read().await.map(|_| ()).expect_err("read"),
            lock.write().await.map(|_| ()).expect_err("write"),
            lock.try_read().await.map(|_| ()).expect_err("try_read"),
            lock.try_write().await.map(|_| ()).expect_err("try_write"),
            RwLock::inspect(&*store, &name)
                .await
                .map(|_| ())
                .expect_err("inspect"),
        ];
        for err in errors {
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{label}: {err}");
            assert!(err.message().contains(key.as_str()), "{label}: {err}");
        }
        let row = store.get(&key).await.expect("get").expect("kept");
        assert_eq!(
            row.version, seeded.version,
            "{label}: the row was rewritten"
        );
        assert_eq!(&row.value[..], value.as_bytes());
    }
    assert_settings_refused([
        rwlock(&store, "x").lease(Duration::from_millis(1)).build(),
        rwlock(&store, "x").poll_interval(Duration::ZERO).build(),
        rwlock(&store, "bad/name").build(),
    ]);
}
