//! What the cases share while they wait for something that must happen.

use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

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

/// Counts a client out when its task ends, however it ends.
pub(crate) struct Running(pub(crate) Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
