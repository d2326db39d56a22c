//! What the cases share while they wait for something that must happen.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::VersionedStore;
use bakery_recipes::election::Leadership;
use bakery_recipes::lock::LockGuard;
use bakery_recipes::rwlock::{ReadGuard, WriteGuard};
use bakery_recipes::semaphore::Permit;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::Clients;

/// Upper bound on waiting for something that must happen; reaching it means
/// the behaviour is broken (never a speed check).
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// Read with `read` every 5 ms until it gives a value `done` accepts, and
/// return that value; panic naming `what` (and the last value seen, or "no
/// row") once [`PATIENCE`] has passed.
pub(crate) async fn wait_for<T, F, Fut>(what: &str, read: F, done: impl Fn(&T) -> bool) -> T
where
    T: Debug,
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let give_up = Instant::now() + PATIENCE;
    loop {
        let seen = read().await;
        match seen {
            Some(state) if done(&state) => return state,
            Some(state) => assert!(Instant::now() < give_up, "never saw {what}: {state:?}"),
            None => assert!(Instant::now() < give_up, "never saw {what}: no row"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Await `granted`, a grant that must not come before `bound` has passed
/// from now (`why`: a lease of silence, a hold limit), and check it did not.
pub(crate) async fn not_before<T>(
    bound: Duration,
    why: &str,
    granted: impl Future<Output = T>,
) -> T {
    let asked = Instant::now();
    let grant = granted.await;
    assert!(
        asked.elapsed() >= bound,
        "granted after {:?}, before {why}",
        asked.elapsed()
    );
    grant
}

/// Await every client task of a case (a panic in one fails the case).
pub(crate) async fn join_clients<T>(tasks: Vec<JoinHandle<T>>) -> Vec<T> {
    let mut done = Vec::with_capacity(tasks.len());
    for task in tasks {
        done.push(task.await.expect("client task"));
    }
    done
}

/// Run `task(i, client)` for `n` clients of their own (`i` in `0..n`),
/// each on a tokio task of its own; their results, in order.
pub(crate) async fn on_clients<T, F>(
    clients: &Clients,
    n: usize,
    task: impl Fn(usize, Arc<dyn VersionedStore>) -> F,
) -> Vec<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let stores = clients.clients(n).await;
    let tasks = stores.into_iter().enumerate();
    join_clients(
        tasks
            .map(|(i, store)| tokio::spawn(task(i, store)))
            .collect(),
    )
    .await
}

/// Every grant of a run had its own fencing token: `tokens` (pushed by
/// the holders, one a grant) holds `grants` tokens, no two alike.
#[track_caller]
pub(crate) fn assert_distinct_tokens(tokens: &Mutex<Vec<u64>>, grants: usize) {
    let tokens = tokens.lock().expect("tokens");
    let distinct: BTreeSet<u64> = tokens.iter().copied().collect();
    assert_eq!(tokens.len(), grants, "grants recorded");
    assert_eq!(distinct.len(), grants, "a token was granted twice");
}

/// A grant a case or a child process holds: a lock guard, a permit, a read
/// or write hold, a leadership.
pub(crate) trait Grant: Debug + Send + 'static {
    /// Its fencing token (a leadership's term).
    fn token(&self) -> u64;
    fn is_held(&self) -> bool;
    /// Give it back (a leadership: resign).
    fn release(self) -> impl Future<Output = bakery_core::Result<()>> + Send;
}

/// The queue recipes' guards have the same methods (one macro makes them),
/// but no trait of their own.
macro_rules! grant {
    ($($guard:ty),+) => {$(
        impl Grant for $guard {
            fn token(&self) -> u64 {
                <$guard>::token(self)
            }
            fn is_held(&self) -> bool {
                <$guard>::is_held(self)
            }
            fn release(self) -> impl Future<Output = bakery_core::Result<()>> + Send {
                <$guard>::release(self)
            }
        }
    )+};
}
grant!(LockGuard, Permit, ReadGuard, WriteGuard);

impl Grant for Leadership {
    fn token(&self) -> u64 {
        self.term()
    }
    fn is_held(&self) -> bool {
        self.is_leader()
    }
    fn release(self) -> impl Future<Output = bakery_core::Result<()>> + Send {
        self.resign()
    }
}

/// `result` (of `what`) is a `Corrupt` error, returned: a row the recipe
/// must not touch.
#[track_caller]
pub(crate) fn assert_corrupt<T: Debug>(
    result: bakery_core::Result<T>,
    what: &str,
) -> bakery_core::Error {
    let err = result.expect_err(what);
    assert_eq!(err.kind(), bakery_core::ErrorKind::Corrupt, "{what}: {err}");
    err
}

/// Every one of `built` (a recipe built with settings it must refuse) is
/// an `InvalidInput` error.
#[track_caller]
pub(crate) fn assert_settings_refused<T: Debug>(
    built: impl IntoIterator<Item = bakery_core::Result<T>>,
) {
    for (i, result) in built.into_iter().enumerate() {
        let err = result.expect_err("bad settings accepted");
        assert_eq!(
            err.kind(),
            bakery_core::ErrorKind::InvalidInput,
            "#{i}: {err}"
        );
    }
}

/// Counts a client out when its task ends, however it ends.
pub(crate) struct Running(pub(crate) Arc<AtomicUsize>);

impl Running {
    /// Spawn `client`, counted in `running` until its task ends.
    pub(crate) fn spawn(
        running: &Arc<AtomicUsize>,
        client: impl Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<()> {
        let counted = Running(running.clone());
        tokio::spawn(async move {
            let _counted = counted;
            client.await
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
