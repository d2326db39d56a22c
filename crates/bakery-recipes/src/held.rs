//! What a held grant (lock guard, semaphore permit, read-write lock guard)
//! shares with its heartbeat task and its `lost()` futures.

use std::future::Future;

use tokio::sync::watch;

use crate::lock::LostReason;

/// Where a grant stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    Released,
    Lost(LostReason),
}

/// Completes with the reason once `status` says the grant is lost; never
/// after a release (nor if every sender goes without a loss). Independent
/// of the guard (`'static`), so it can be raced against the work.
pub(crate) fn lost(
    status: &watch::Sender<Status>,
) -> impl Future<Output = LostReason> + Send + 'static {
    let mut status = status.subscribe();
    async move {
        loop {
            if let Status::Lost(reason) = *status.borrow_and_update() {
                return reason;
            }
            if status.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}
