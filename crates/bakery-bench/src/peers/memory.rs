//! The in-process locks a user of the `memory://` store would take instead,
//! measured beside bakery's lock on that store to show what the runtime
//! alone costs:
//!
//! - `tokio::sync::Mutex`, the lock such a user reaches for. Its releaser
//!   usually takes it again before a woken waiter runs, so its hand-offs
//!   are rare and mostly to a task on the same thread.
//! - [`InProcessLock::fifo_handoff`]: a strict FIFO lock whose release
//!   hands the lock to the oldest waiter, as bakery's fair lock does, with
//!   no store at all. Its hand-off is one task wake-up on the same tokio
//!   runtime: the floor under any fair in-process lock's hand-off.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{oneshot, Mutex, OwnedMutexGuard};

use crate::error::BenchError;
use crate::model::{CellSpec, OpError, Peer, PreparedCell, RoundTrips};
use crate::workloads::lock::{native_lock_cell, NativeLock};

/// An in-process lock peer: its label, and how a cell's clients share one
/// lock. No lease, no fencing, no persistence: the lock lives in this
/// process only, and needs no server.
#[derive(Debug, Clone, Copy)]
pub struct InProcessLock {
    label: &'static str,
    cell: fn(usize, &RoundTrips) -> PreparedCell,
}

impl InProcessLock {
    /// One `tokio::sync::Mutex` per cell, shared by its clients: FIFO
    /// waiters, woken one at a time by the guard's drop.
    pub fn tokio_mutex() -> Self {
        InProcessLock {
            label: "tokio::sync::Mutex",
            cell: |clients, sent| {
                let mutex = Arc::new(Mutex::new(()));
                native_lock_cell(
                    (0..clients).map(|_| SharedMutex(mutex.clone())).collect(),
                    sent,
                    None,
                )
            },
        }
    }

    /// A strict FIFO lock on tokio primitives, one per cell: a release
    /// hands the lock to the oldest waiter through that waiter's oneshot
    /// channel (never to a client that arrives later), so every grant under
    /// contention is a hand-off to another, sleeping task. Nothing but the
    /// wake-up is between the release and the grant: no store, no encoding,
    /// no lease.
    pub fn fifo_handoff() -> Self {
        InProcessLock {
            label: "FIFO hand-off (tokio, no store)",
            cell: |clients, sent| {
                let queue = Arc::new(std::sync::Mutex::new(HandoffQueue::default()));
                native_lock_cell(
                    (0..clients).map(|_| QueuedClient(queue.clone())).collect(),
                    sent,
                    None,
                )
            },
        }
    }
}

#[async_trait]
impl Peer for InProcessLock {
    fn workload(&self) -> &'static str {
        "lock"
    }

    fn label(&self) -> String {
        self.label.to_string()
    }

    async fn setup(&self, cell: &CellSpec, sent: RoundTrips) -> Result<PreparedCell, BenchError> {
        Ok((self.cell)(cell.clients, &sent))
    }
}

struct SharedMutex(Arc<Mutex<()>>);

#[async_trait]
impl NativeLock for SharedMutex {
    type Held = OwnedMutexGuard<()>;

    async fn lock(&mut self) -> Result<OwnedMutexGuard<()>, OpError> {
        Ok(self.0.clone().lock_owned().await)
    }

    async fn unlock(&mut self, held: OwnedMutexGuard<()>) -> Result<(), OpError> {
        drop(held);
        Ok(())
    }
}

/// Whether the lock is held, and the waiters in arrival order.
#[derive(Default)]
struct HandoffQueue {
    held: bool,
    waiters: VecDeque<oneshot::Sender<()>>,
}

struct QueuedClient(Arc<std::sync::Mutex<HandoffQueue>>);

impl QueuedClient {
    fn queue(&self) -> Result<std::sync::MutexGuard<'_, HandoffQueue>, OpError> {
        self.0
            .lock()
            .map_err(|_| OpError("FIFO hand-off: a client panicked holding the queue".into()))
    }
}

#[async_trait]
impl NativeLock for QueuedClient {
    type Held = ();

    async fn lock(&mut self) -> Result<(), OpError> {
        let granted = {
            let mut queue = self.queue()?;
            if !queue.held {
                queue.held = true;
                return Ok(());
            }
            let (grant, granted) = oneshot::channel();
            queue.waiters.push_back(grant);
            granted
        };
        granted
            .await
            .map_err(|_| OpError("FIFO hand-off: the lock was dropped".into()))
    }

    async fn unlock(&mut self, _held: ()) -> Result<(), OpError> {
        let mut queue = self.queue()?;
        // A waiter that stopped waiting (its receiver dropped) is skipped.
        while let Some(next) = queue.waiters.pop_front() {
            if next.send(()).is_ok() {
                return Ok(());
            }
        }
        queue.held = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;

    /// Poll `waiting` once: is it still pending?
    async fn pending<F: Future + Unpin>(waiting: &mut F) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *waiting).poll(cx).is_pending())).await
    }

    fn clients(n: usize) -> Vec<QueuedClient> {
        let queue = Arc::new(std::sync::Mutex::new(HandoffQueue::default()));
        (0..n).map(|_| QueuedClient(queue.clone())).collect()
    }

    /// A release hands the lock to the oldest waiter, skipping one that
    /// stopped waiting, and the releaser queues behind the others.
    #[tokio::test]
    async fn a_release_hands_the_lock_to_the_oldest_waiter() {
        let mut clients = clients(4);
        let [a, b, c, d] = &mut clients[..] else {
            unreachable!("four clients")
        };
        a.lock().await.expect("free");
        let mut b_waits = b.lock();
        let mut c_waits = c.lock();
        let mut d_waits = d.lock();
        // Each polled once, in this order: they queue as b, c, d.
        assert!(pending(&mut b_waits).await);
        assert!(pending(&mut c_waits).await);
        assert!(pending(&mut d_waits).await);
        // a's release goes to b: c and d still wait.
        a.unlock(()).await.expect("release");
        assert!(pending(&mut d_waits).await, "d granted before b");
        assert!(pending(&mut c_waits).await, "c granted before b");
        assert!(!pending(&mut b_waits).await, "b not granted");
        drop(b_waits);
        // c stops waiting; b's release skips it and grants d.
        drop(c_waits);
        let mut a_again = a.lock();
        assert!(pending(&mut a_again).await, "a did not queue behind d");
        b.unlock(()).await.expect("release");
        assert!(pending(&mut a_again).await, "a granted before d");
        assert!(!pending(&mut d_waits).await, "d not granted");
        drop(d_waits);
        d.unlock(()).await.expect("release");
        assert!(!pending(&mut a_again).await, "a not granted last");
    }
}
