//! What the cases of the leased FIFO queue recipes (the lock, the semaphore
//! and the RW lock) share: their stored row read and waited for, and the
//! cases every one of them must pass — a request that times out or is
//! cancelled leaves the queue, and a refused withdrawal or release is tried
//! again. The recipes share one queue core, so each behaviour is written
//! once, over [`Queued`].

use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{CountingStore, ErrorKind, Result, VersionedStore};
use bakery_recipes::lock::{Lock, LockGuard, LockState, LostReason};
use bakery_recipes::rwlock::{ReadGuard, RwLock, RwLockState, WriteGuard};
use bakery_recipes::semaphore::{Permit, Semaphore, SemaphoreState};
use tokio::task::JoinHandle;

use crate::faults::{Fault, FaultStore};
use crate::support::{wait_for, Grant, PATIENCE};
use crate::{unique_name, Clients};

/// The acquire timeout of the refused-withdrawal cases: long enough for the
/// test to see the request queued and script the refusals before it passes
/// (on a busy machine, a Cassandra enqueue and the read that sees it).
const WITHDRAWN_AFTER: Duration = Duration::from_secs(3);

/// Lease of the clients whose store calls are counted: a heartbeat is a
/// write of its own, and this one's (every lease/3, 200 s) never falls
/// inside a counted hold, however slow the machine.
pub(crate) const COUNTED_LEASE: Duration = Duration::from_secs(600);

/// A queue recipe as the shared cases use it: a holder takes `hold`, and an
/// `ask` must wait behind it (a semaphore of one permit; an RW lock's
/// writer behind a reader).
pub(crate) trait Queued: Send + Sync + Sized + 'static {
    /// The stored row, decoded.
    type State: Debug + Send;
    /// What a holder takes.
    type Held: Grant;
    /// What must wait behind a holder.
    type Asked: Grant;
    /// The recipe, in failure messages.
    const RECIPE: &'static str;
    /// Several clients may `hold` at once (the RW lock's readers).
    const SHARED_HOLD: bool;
    /// A client of `name` on `store` that waits at most `timeout`, with
    /// `lease` (or the recipe's default lease).
    fn handle(
        store: Arc<dyn VersionedStore>,
        name: &str,
        timeout: Duration,
        lease: Option<Duration>,
    ) -> Self;
    fn hold(&self) -> impl Future<Output = Result<Self::Held>> + Send + '_;
    fn ask(&self) -> impl Future<Output = Result<Self::Asked>> + Send + '_;
    /// The recipe's `inspect`.
    fn read<'a>(
        store: &'a dyn VersionedStore,
        name: &'a str,
    ) -> impl Future<Output = Result<Option<Self::State>>> + Send + 'a;
    /// How many requests wait in the row.
    fn queued(state: &Self::State) -> usize;
    /// Someone holds a grant in the row.
    fn held(state: &Self::State) -> bool;
    /// The row's last token: one per grant so far.
    fn token(state: &Self::State) -> u64;
}

/// The three impls differ only in names: the builder's settings, the
/// state, the grants and the methods that ask for them, who holds.
macro_rules! queued {
    (
        $recipe:ident $(.$setting:ident($value:expr))*, $what:literal, $state:ty,
        hold: $held:ty = $hold:ident, ask: $asked:ty = $ask:ident,
        shared: $shared:literal, held: |$s:ident| $is_held:expr
    ) => {
        impl Queued for $recipe {
            type State = $state;
            type Held = $held;
            type Asked = $asked;
            const RECIPE: &'static str = $what;
            const SHARED_HOLD: bool = $shared;
            fn handle(
                store: Arc<dyn VersionedStore>,
                name: &str,
                timeout: Duration,
                lease: Option<Duration>,
            ) -> Self {
                let builder = $recipe::builder(store, name)
                    $(.$setting($value))*
                    .acquire_timeout(timeout);
                match lease {
                    Some(lease) => builder.lease(lease),
                    None => builder,
                }
                .build()
                .expect(concat!("valid ", $what, " settings"))
            }
            fn hold(&self) -> impl Future<Output = Result<$held>> + Send + '_ {
                self.$hold()
            }
            fn ask(&self) -> impl Future<Output = Result<$asked>> + Send + '_ {
                self.$ask()
            }
            fn read<'a>(
                store: &'a dyn VersionedStore,
                name: &'a str,
            ) -> impl Future<Output = Result<Option<$state>>> + Send + 'a {
                $recipe::inspect(store, name)
            }
            fn queued(state: &$state) -> usize {
                state.queue.len()
            }
            fn held($s: &$state) -> bool {
                $is_held
            }
            fn token(state: &$state) -> u64 {
                state.token
            }
        }
    };
}
queued!(
    Lock, "lock", LockState,
    hold: LockGuard = acquire, ask: LockGuard = acquire,
    shared: false, held: |s| s.holder.is_some()
);
// One permit: a holder keeps everyone else waiting.
queued!(
    Semaphore.permits(1), "semaphore", SemaphoreState,
    hold: Permit = acquire, ask: Permit = acquire,
    shared: false, held: |s| !s.holders.is_empty()
);
queued!(
    RwLock, "rwlock", RwLockState,
    hold: ReadGuard = read, ask: WriteGuard = write,
    shared: true, held: |s| !s.holders.is_empty()
);

/// The stored row of `name`, `None` if it was never written.
pub(crate) async fn inspect<R: Queued>(
    store: &Arc<dyn VersionedStore>,
    name: &str,
) -> Option<R::State> {
    R::read(&**store, name)
        .await
        .unwrap_or_else(|e| panic!("inspect {}: {e}", R::RECIPE))
}

/// A task that reads the row of `name` every 2 ms until the clients
/// counted by `running` have all ended, handing each decoded state to
/// `seen` (decoding alone refuses a row that breaks the recipe's bound);
/// it returns how many rows it read.
pub(crate) fn sample_while_running<R: Queued>(
    store: &Arc<dyn VersionedStore>,
    name: &str,
    running: &Arc<AtomicUsize>,
    mut seen: impl FnMut(&R::State) + Send + 'static,
) -> JoinHandle<usize> {
    let (store, name, running) = (store.clone(), name.to_owned(), running.clone());
    tokio::spawn(async move {
        let mut samples = 0;
        while running.load(Ordering::SeqCst) > 0 {
            if let Some(state) = inspect::<R>(&store, &name).await {
                seen(&state);
                samples += 1;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        samples
    })
}

/// Wait (bounded) until the row of `name` exists and satisfies `done`.
pub(crate) async fn wait_for_state<R: Queued>(
    store: &Arc<dyn VersionedStore>,
    name: &str,
    what: &str,
    done: impl Fn(&R::State) -> bool,
) -> R::State {
    wait_for(what, || inspect::<R>(store, name), done).await
}

/// Another client's `ask` of `name`, in a task of its own, once its
/// request is the only one queued (as the case's store reads the row).
pub(crate) async fn queued_request<R: Queued>(
    clients: &Clients,
    name: &str,
) -> JoinHandle<Result<R::Asked>> {
    let waiting = {
        let client = R::handle(clients.client().await, name, PATIENCE, None);
        tokio::spawn(async move { client.ask().await })
    };
    wait_queued::<R>(&clients.store(), name, "the request queued", 1).await;
    waiting
}

/// A holder frozen (its store paused) and evicted: `lost` (its `lost()`)
/// completes with an eviction, and once its store answers again its late
/// release is refused as `Lost`.
pub(crate) async fn frozen_holder_learns_it_lost(
    frozen: impl Grant,
    lost: impl Future<Output = LostReason>,
    frozen_store: &FaultStore,
) {
    let reason = tokio::time::timeout(PATIENCE, lost)
        .await
        .expect("the frozen holder learns it is lost");
    assert!(
        matches!(reason, LostReason::LeaseExpired | LostReason::Evicted),
        "{reason:?}"
    );
    assert!(!frozen.is_held());
    frozen_store.resume();
    let err = frozen.release().await.expect_err("no longer held");
    assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
}

/// A grant a client of its own holds on a new row (named after
/// `prefix`): the case's store, the row's name, the grant.
pub(crate) async fn held<R: Queued>(
    clients: &Clients,
    prefix: &str,
) -> (Arc<dyn VersionedStore>, String, R::Held) {
    let name = unique_name(prefix);
    let held = R::handle(clients.client().await, &name, PATIENCE, None)
        .hold()
        .await
        .expect("hold");
    (clients.store(), name, held)
}

/// Wait (bounded) until `queued` requests wait in the row of `name`.
async fn wait_queued<R: Queued>(
    store: &Arc<dyn VersionedStore>,
    name: &str,
    what: &str,
    queued: usize,
) -> R::State {
    wait_for_state::<R>(store, name, what, |s| R::queued(s) == queued).await
}

/// Release `held`; then nobody holds `name` (a withdrawn request must not
/// be granted: it would be a ghost).
async fn released_to_nobody<R: Queued>(store: &Arc<dyn VersionedStore>, name: &str, held: R::Held) {
    held.release().await.expect("release");
    let state = inspect::<R>(store, name).await.expect("row");
    assert!(!R::held(&state), "granted to a ghost: {state:?}");
}

/// A request that times out leaves the queue before it returns, so a later
/// release grants nobody. `after` gets the timed-out client before that
/// release (the RW lock: its readers are not kept out by a ghost writer).
pub(crate) async fn timeout_withdraws_the_request<R, Fut>(
    clients: Clients,
    prefix: &str,
    after: impl FnOnce(R) -> Fut,
) where
    R: Queued,
    Fut: Future<Output = ()>,
{
    let (store, name, held) = held::<R>(&clients, prefix).await;
    let impatient = R::handle(
        clients.client().await,
        &name,
        Duration::from_millis(300),
        None,
    );
    let err = impatient.ask().await.expect_err("must time out");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    let state = inspect::<R>(&store, &name).await.expect("row");
    assert_eq!(
        R::queued(&state),
        0,
        "a timed-out request stayed queued: {state:?}"
    );
    after(impatient).await;
    released_to_nobody::<R>(&store, &name, held).await;
}

/// Dropping a waiting request withdraws it in the background.
pub(crate) async fn cancelled_request_leaves_the_queue<R: Queued>(clients: Clients, prefix: &str) {
    let (store, name, held) = held::<R>(&clients, prefix).await;
    let waiting = queued_request::<R>(&clients, &name).await;
    waiting.abort(); // drops the request's future
    wait_queued::<R>(&store, &name, "the cancelled request leave", 0).await;
    released_to_nobody::<R>(&store, &name, held).await;
}

/// A request whose withdrawal the store refused (a fault as it timed out)
/// is withdrawn once the store answers again: it does not stay queued for
/// the waiters behind it to wait out its lease. The request still ends
/// `TimedOut`, and the holder's release grants nobody.
pub(crate) async fn a_refused_withdrawal_is_tried_again<R: Queued>(clients: Clients, prefix: &str) {
    let (store, name, held) = held::<R>(&clients, prefix).await;
    let faulty = Arc::new(FaultStore::new(clients.client().await));
    let impatient = R::handle(faulty.clone(), &name, WITHDRAWN_AFTER, None);
    let waiting = tokio::spawn(async move { impatient.ask().await });
    wait_queued::<R>(&store, &name, "the request queued", 1).await;
    // Its next puts are its withdrawal's.
    faulty.script([Fault::Refuse, Fault::Refuse]);
    let err = waiting
        .await
        .expect("request task")
        .expect_err("must time out");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    wait_queued::<R>(&store, &name, "the refused request withdrawn", 0).await;
    assert_eq!(faulty.remaining(), 0, "the withdrawal met both refusals");
    released_to_nobody::<R>(&store, &name, held).await;
}

/// A release the store refused (`Unavailable`, reported to the caller) is
/// tried again until it applies: the grant is free again without anyone
/// waiting out the lease.
pub(crate) async fn a_refused_release_is_tried_again<R: Queued>(clients: Clients, prefix: &str) {
    let store = clients.store();
    let name = unique_name(prefix);
    let faulty = Arc::new(FaultStore::new(clients.client().await));
    let held = R::handle(faulty.clone(), &name, PATIENCE, None)
        .hold()
        .await
        .expect("hold");
    faulty.script([Fault::Refuse, Fault::Refuse]);
    let err = held.release().await.expect_err("the store refused it");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    wait_for_state::<R>(&store, &name, "the refused release given back", |s| {
        !R::held(s)
    })
    .await;
    assert_eq!(faulty.remaining(), 0, "the release met both refusals");
}

/// Writes of a waiting request whose outcome is unknown (`fault`, twice:
/// its first write, then its enqueue) are settled by reading the row: the
/// request ends queued exactly once and is granted at the holder's
/// release, not failed with the store's error.
pub(crate) async fn unknown_outcomes_while_asking_are_settled_by_a_read<R: Queued>(
    clients: Clients,
    prefix: &str,
    fault: Fault,
) {
    let (store, name, held) = held::<R>(&clients, prefix).await;
    let faulty = Arc::new(FaultStore::new(clients.client().await));
    faulty.script([fault, fault]);
    let client = R::handle(faulty.clone(), &name, PATIENCE, None);
    let waiting = tokio::spawn(async move { client.ask().await });
    let state = wait_queued::<R>(&store, &name, "the request queued", 1).await;
    let token = R::token(&state);
    assert_eq!(faulty.remaining(), 0, "both writes met their fault");
    held.release().await.expect("release");
    let asked = waiting
        .await
        .expect("request task")
        .expect("granted at the release, the unknown outcomes settled");
    let state = inspect::<R>(&store, &name).await.expect("row");
    assert_eq!(R::queued(&state), 0, "queued twice: {state:?}");
    assert_eq!(R::token(&state), token + 1, "one grant, to it: {state:?}");
    asked.release().await.expect("release");
}

/// Eight handles of one process contend for one row, `rounds` grants
/// each: they write the row in the process's turn, each deciding on the row
/// the last write left, so none conflicts with another at the store, and
/// every grant has a token of its own. Exclusive grants never overlap
/// anything; with a shared hold, every other round is one (never beside an
/// exclusive grant).
pub(crate) async fn clients_of_one_process_never_conflict<R: Queued>(
    store: Arc<dyn VersionedStore>,
    prefix: &str,
    rounds: u64,
) {
    const CLIENTS: u64 = 8;
    let name = unique_name(prefix);
    let counting = Arc::new(CountingStore::new(store));
    let store: Arc<dyn VersionedStore> = counting.clone();
    let exclusive = Arc::new(AtomicBool::new(false));
    // Every handle exists before any client runs: a client that ran all its
    // rounds before the next handle was built would drop the process's
    // writer, and the next one's first write would find a row it never saw.
    let handles: Vec<R> = (0..CLIENTS)
        .map(|_| R::handle(store.clone(), &name, PATIENCE, Some(COUNTED_LEASE)))
        .collect();
    let mut clients = Vec::new();
    for client in handles {
        let exclusive = exclusive.clone();
        clients.push(tokio::spawn(async move {
            for round in 0..rounds {
                if R::SHARED_HOLD && round % 2 == 1 {
                    let grant = client.hold().await.expect("hold");
                    assert!(
                        !exclusive.load(Ordering::SeqCst),
                        "a shared grant beside an exclusive one"
                    );
                    tokio::task::yield_now().await;
                    grant.release().await.expect("release");
                } else {
                    let grant = client.ask().await.expect("ask");
                    assert!(!exclusive.swap(true, Ordering::SeqCst), "two holders");
                    tokio::task::yield_now().await;
                    exclusive.store(false, Ordering::SeqCst);
                    grant.release().await.expect("release");
                }
            }
        }));
    }
    for client in clients {
        client.await.expect("client task");
    }
    crate::assert_clients_took_turns(counting.counts(), CLIENTS * rounds);
    let state = inspect::<R>(&store, &name).await.expect("row");
    assert_eq!(R::token(&state), CLIENTS * rounds, "one token per grant");
}
