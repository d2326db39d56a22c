//! A fair distributed lock: FIFO acquire, soft try-lock, leases kept alive by
//! a heartbeat, a lost-lock signal and fencing tokens — on one row, written
//! only with `put_if_version`.
//!
//! # How it works
//! The row holds `{token, holder, queue}` ([`LockState`]); a queued waiter
//! that repeats the owner and lease of the entry before it is stored as its
//! bare id (11 characters), so a queue of one process's clients costs 14
//! bytes a waiter. The lock is the one-holder case of the leased FIFO queue
//! that the [semaphore](crate::semaphore) and the
//! [read-write lock](crate::rwlock) share:
//! - **Order without clocks.** `acquire` takes a free lock with one write, or
//!   appends itself to the queue with one write. The queue is in the order
//!   those writes applied, so grants are FIFO with no clock involved.
//! - **Direct hand-off.** `release` gives the lock to the head of the queue in
//!   the same write (with a new fencing token). The new holder learns it
//!   from a wake-up (below) or its next read; its lease runs from its last
//!   request before (which the hand-off followed), so taking over costs no
//!   write.
//! - **One writer per process.** A process's enqueues, takes and releases
//!   of one lock go through one writer, which applies the requests waiting
//!   together to the newest row in one conditional write (in order, so FIFO
//!   holds). Clients in one process never conflict with each other, and a
//!   release often carries the next enqueues. Their first requests reach
//!   the writer in the order they called `acquire`: a client that releases
//!   and asks again at once waits behind those that asked before it, even
//!   when the runtime has not run them since (one that is not polled for
//!   100 ms loses its place).
//! - **Leases without synchronized clocks.** The holder advances a heartbeat
//!   counter every lease/3. A waiter that sees the same (holder, heartbeat)
//!   for a whole lease *on its own monotonic clock* evicts the holder with a
//!   write conditioned on exactly that state. A waiter handed the lock that
//!   does not claim it within the lease is evicted the same way. The count
//!   is kept per process: an acquire goes on from what the process's other
//!   waiters (and earlier acquires) saw.
//! - **Giving back.** A request given up (cancelled, timed out, failed
//!   after its enqueue may have applied) is withdrawn, and a grant whose
//!   release failed is released, in the background until the store
//!   answers: a fault leaves no request behind for a lease to clear.
//! - **Fencing.** Every grant increments [`LockGuard::token`]. A lease never
//!   guarantees mutual exclusion by itself (a paused holder outlives its
//!   lease); checking the token where the protected data is written does —
//!   see [`FencedValue`](crate::fence::FencedValue).
//! - **Wake-ups.** A waiter registers with its process's dispatcher for
//!   the lock row before its enqueue write (so it needs no read before
//!   waiting). The dispatcher listens to the store once for the whole
//!   process ([`VersionedStore::watch`] where the backend has
//!   [`Capabilities::WATCH`](bakery_core::Capabilities::WATCH), else one
//!   poll with exponential backoff) and hands each row only to the waiter
//!   it names the holder: a hand-off wakes one waiter, not the queue. A
//!   release in the same process hands its row to the dispatcher directly
//!   (the next holder learns of its grant with no round trip), and every
//!   change of holder calls [`VersionedStore::notify`] for the other
//!   processes. Every waiter still reads at least every lease/4, so the
//!   lease of a grant it learns of never counts from further back, and it
//!   sees whether the holder's heartbeat moves.
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use bakery_core::MemoryStore;
//! use bakery_recipes::lock::Lock;
//!
//! # #[tokio::main]
//! # async fn main() -> bakery_core::Result<()> {
//! let store = Arc::new(MemoryStore::new());
//! let lock = Lock::builder(store.clone(), "nightly-report")
//!     .lease(Duration::from_secs(10))
//!     .build()?;
//!
//! let guard = lock.acquire().await?;
//! assert_eq!(guard.token(), 1);
//! // A second client: the soft form refuses at once while the lock is held.
//! let other = Lock::builder(store, "nightly-report").build()?;
//! assert!(other.try_acquire().await?.is_none());
//! guard.release().await?;
//! let guard = other.try_acquire().await?.expect("free now");
//! assert_eq!(guard.token(), 2, "every grant gets a larger token");
//! # Ok(()) }
//! ```

mod guard;
mod state;

use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Key, Result, VersionedStore};

pub use crate::grant::LostReason;
pub use crate::queue::handle::{DEFAULT_LEASE, DEFAULT_POLL_INTERVAL, MIN_LEASE};
pub use guard::LockGuard;
pub use state::{Holder, LockState, Waiter};

use crate::queue::acquire;
use crate::queue::handle::{QueueHandle, Settings};
use crate::queue::hold::{Hold, TaskHolds};
use crate::queue::row::{self, Shape};
use crate::queue::state::{Mode, Rule};

/// Key prefix of lock rows: the lock `jobs` is stored under `lock/jobs`.
pub const KEY_PREFIX: &str = "lock";

/// Longest [`LockBuilder::data`] accepted, in bytes: it is copied into the
/// lock's row with every waiter.
pub const MAX_DATA_LEN: usize = crate::queue::handle::MAX_DATA_LEN;

/// Configures a [`Lock`]; start with [`Lock::builder`].
#[derive(Debug, Clone)]
pub struct LockBuilder {
    settings: Settings,
    reentrant: bool,
}

crate::queue::handle::builder_setters! { LockBuilder {
    recipe: "lock",
    survives: "the lock",
    waits: "[`Lock::acquire`]",
    /// A small value stored with every grant of this handle (at most
    /// [`MAX_DATA_LEN`] bytes), readable by everyone: [`Lock::holder`],
    /// [`Lock::inspect`], `bakery lock show`. E.g. the address of the node
    /// running the job, or the leader's endpoint.
    [settings] data(data: impl Into<String>) Some;
    /// Hold a grant at most this long (a job lock's `lockAtMostFor`): then
    /// the guard stops renewing its lease, releases the lock and reports
    /// [`LostReason::HoldLimit`] through [`LockGuard::lost`]. The job should
    /// race its work against `lost()` and fence its writes; extend the
    /// limit with [`LockGuard::extend`]. Default: no limit.
    [settings] lock_at_most_for(at_most: Duration) Some;
    /// Keep a grant at least this long (a job lock's `lockAtLeastFor`): a
    /// release earlier than this after the grant keeps renewing the lease
    /// and hands the lock on only when the time is up, so a job that ends
    /// fast does not run again on a node whose scheduler fires a little
    /// later. Held by this process: if it exits first, the lease ends the
    /// hold. Default: zero.
    [settings] lock_at_least_for(at_least: Duration) Some;
    /// Let a task that holds a grant of this handle (or a clone) acquire
    /// again: it gets another guard on the same grant (same token) at once,
    /// and the lock is released when the last of them is. Default `false`:
    /// a second acquire queues behind the task's own grant (and waits for
    /// it, logging a warning), since a guard may have moved to another task.
    ///
    /// A task is a tokio task (or the future a runtime's `block_on` runs);
    /// only opt in if the guards stay in the task that acquired them.
    reentrant(reentrant: bool);
}}

impl LockBuilder {
    /// Check the settings and build the lock. No store call is made.
    pub fn build(self) -> Result<Lock> {
        let handle = QueueHandle::new(Shape::Lock, Rule::Permits(1), KEY_PREFIX, self.settings)?;
        Ok(Lock {
            handle: Arc::new(handle),
            reentrant: self.reentrant,
            task_holds: Arc::default(),
        })
    }
}

/// A fair, lease-based distributed lock stored in one row. Cheap to clone;
/// clones (and concurrent `acquire` calls) are separate contenders. See the
/// [module docs](self).
#[derive(Clone)]
pub struct Lock {
    handle: Arc<QueueHandle>,
    reentrant: bool,
    /// The grants this handle's tasks hold (what a reentrant acquire shares).
    task_holds: Arc<TaskHolds>,
}

crate::queue::handle::handle_accessors!(Lock, "lock", "grants");

impl Lock {
    /// Start configuring the lock `name` (letters, digits, `_ - . : @ + =`).
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> LockBuilder {
        LockBuilder {
            settings: Settings::new(store, name),
            reentrant: false,
        }
    }

    /// Wait until the lock is granted, in FIFO order of request.
    ///
    /// Errors: [`ErrorKind::TimedOut`](bakery_core::ErrorKind::TimedOut)
    /// after the builder's `acquire_timeout` (the request is withdrawn from
    /// the queue first, or in the background if the store refuses that);
    /// store errors as they come (the request is withdrawn in the
    /// background until the store answers, or expires with the lease).
    /// Dropping the future withdraws the request too.
    pub async fn acquire(&self) -> Result<LockGuard> {
        if let Some(guard) = self.reenter() {
            return Ok(guard);
        }
        let name = &self.handle.name;
        let grant = acquire::acquire(&self.handle, self.handle.ask(Mode::Write), |limit| {
            format!("lock {name} not granted within {limit:?}")
        })
        .await?;
        Ok(self.hold(grant))
    }

    /// The soft form (skip when busy): take the lock only if nobody holds it
    /// and nobody waits; otherwise `Ok(None)` at once. Never queues. A holder
    /// that this process saw silent (same heartbeat) for a whole lease on
    /// this machine's clock is evicted, so a crashed job holder
    /// does not block try-only schedulers forever; behind waiters, they
    /// evict it.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        if let Some(guard) = self.reenter() {
            return Ok(Some(guard));
        }
        let grant = acquire::try_acquire(&self.handle, self.handle.ask(Mode::Write)).await?;
        Ok(grant.map(|grant| self.hold(grant)))
    }

    fn hold(&self, grant: acquire::Grant) -> LockGuard {
        let hold = Hold::start(self.handle.clone(), grant, "lock");
        self.task_holds.record(&hold);
        LockGuard(hold)
    }

    /// Another guard on the grant the current task holds (reentrant locks).
    fn reenter(&self) -> Option<LockGuard> {
        self.task_holds
            .reenter(self.reentrant, &self.handle.name)
            .map(LockGuard)
    }

    /// The current holder of the lock (with its data), read from the store.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use bakery_core::MemoryStore;
    /// # use bakery_recipes::lock::Lock;
    /// # #[tokio::main]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = Arc::new(MemoryStore::new());
    /// let lock = Lock::builder(store, "reports").data("10.0.0.7:8080").build()?;
    /// let guard = lock.acquire().await?;
    /// let holder = lock.holder().await?.expect("held");
    /// assert_eq!(holder.data.as_deref(), Some("10.0.0.7:8080"));
    /// guard.release().await?;
    /// assert!(lock.holder().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn holder(&self) -> Result<Option<Holder>> {
        let row = self.handle.store.get(&self.handle.key).await?;
        self.handle.writer.remember(row.as_ref());
        match &row {
            Some(row) => Ok(self
                .handle
                .writer
                .head(row)?
                .holders
                .first()
                .map(state::lock_holder)),
            None => Ok(None),
        }
    }

    /// The stored state of lock `name` (holder, token, queue), or `None` if
    /// it was never taken.
    pub async fn inspect(store: &dyn VersionedStore, name: &str) -> Result<Option<LockState>> {
        let key = Key::with_prefix(KEY_PREFIX, name)?;
        match store.get(&key).await? {
            Some(row) => Ok(Some(row::decode(Shape::Lock, &row)?.into())),
            None => Ok(None),
        }
    }
}
