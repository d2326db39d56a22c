//! A fair distributed read-write lock: many readers or one writer, granted
//! in FIFO order with writer preference, leased, each grant with a fencing
//! token — on one row, written only with `put_if_version`.
//!
//! # How it works
//! The row (`rwlock/NAME`) holds `{token, holders, queue}` ([`RwLockState`]),
//! like the [semaphore](crate::semaphore)'s row, with a mode (read or
//! write) on every holder and waiter.
//! - **Many readers or one writer.** A writer is never stored together with
//!   another holder; a row that says otherwise is refused as
//!   [`ErrorKind::Corrupt`].
//! - **Writer-preferring FIFO.** A request takes the lock with one write
//!   when nobody queues and the holders allow it (a reader joins current
//!   readers, a writer needs nobody); otherwise it appends itself to the
//!   queue with one write. A reader never joins the current readers while
//!   anyone queues, so a queued writer is not starved by a stream of new
//!   readers. Grants follow the queue order: when the holders leave, the
//!   head is granted, and if it is a reader so is every reader right
//!   behind it up to the next writer — in the same write, each with the
//!   next fencing token.
//! - **Direct hand-off.** The new holders learn of their grant from their
//!   process's one listener on the row, which wakes only the waiters a row
//!   grants: directly when the grant was written in the same process,
//!   else from the store's watch where it has
//!   [`Capabilities::WATCH`](bakery_core::Capabilities::WATCH), else from
//!   one poll for the whole process: at the next timer tick (1 ms) after
//!   another process changed the row, backing off to the poll interval
//!   while it does not. Every waiter reads at least every lease/4 either way.
//! - **Leases without synchronized clocks.** Each holder advances its own
//!   heartbeat counter every lease/3. A waiter that sees the same
//!   (holder, heartbeat) for a whole lease of that holder *on its own
//!   monotonic clock* evicts it with a write that applies only while that
//!   heartbeat still stands (a handed-over grant not claimed within its
//!   lease too).
//! - **Fencing.** Every grant takes the next token ([`ReadGuard::token`],
//!   [`WriteGuard::token`]). A lease never guarantees exclusion by itself
//!   (a paused writer outlives its lease); a token checked where the
//!   protected resource is written does.
//!
//! # No upgrade (yet)
//! A read guard cannot be turned into a write guard. The naive upgrade
//! ("a reader waits until it is the only holder, then becomes the writer")
//! deadlocks as soon as two readers upgrade at once: each waits for the
//! other to leave, and neither does. Releasing the read and queueing for
//! the write is not an upgrade either (another writer may come between).
//! A safe upgrade needs a third mode, an *upgradeable read* (shares with
//! readers, excludes writers and other upgradeable readers, and alone may
//! become the writer once the plain readers drain), as DistributedLock
//! offers. That mode is left for later; until then release and take
//! [`RwLock::write`], and re-check what was read.
//!
//! # Limits
//! The whole state is one row, rewritten by every grant, release and
//! heartbeat: every holder adds about a hundred bytes to it, and so does a
//! waiter, except one that repeats the owner, mode and lease of the waiter before it
//! (one process's clients): that one is stored as its bare id, 14 bytes.
//! Rows written by earlier versions (every waiter whole) read as before.
//! The clients of one process share one writer of the row, which combines
//! their requests into one conditional write, so they never conflict with
//! each other; clients in different processes contend on it (many readers
//! heartbeating in different processes make many conflicts). It is the
//! same leased FIFO queue as the [lock](crate::lock)'s, with readers. The queue is not capped. Not reentrant: a second `read()` or
//! `write()` by the same holder is a separate request (and a `write()` by a
//! reader waits for itself until its timeout).
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use bakery_core::MemoryStore;
//! use bakery_recipes::rwlock::RwLock;
//!
//! # #[tokio::main]
//! # async fn main() -> bakery_core::Result<()> {
//! let store = Arc::new(MemoryStore::new());
//! let config = RwLock::builder(store.clone(), "config")
//!     .lease(Duration::from_secs(10))
//!     .build()?;
//!
//! let a = config.read().await?;
//! let b = config.read().await?;
//! assert_eq!((a.token(), b.token()), (1, 2), "readers share the lock");
//! // Readers hold: a writer would have to wait, so the soft form refuses.
//! assert!(config.try_write().await?.is_none());
//!
//! a.release().await?;
//! b.release().await?;
//! let w = config.try_write().await?.expect("nobody holds the lock");
//! assert_eq!(w.token(), 3, "every grant gets a larger token");
//! assert!(config.try_read().await?.is_none(), "a writer excludes readers");
//!
//! let state = RwLock::inspect(&*store, "config").await?.expect("written");
//! assert!(state.has_writer());
//! w.release().await?;
//! # Ok(()) }
//! ```

mod guard;
mod state;

use std::sync::Arc;

#[cfg(doc)]
use bakery_core::ErrorKind;
use bakery_core::{Key, Result, VersionedStore};

pub use crate::grant::LostReason;
pub use crate::queue::handle::{DEFAULT_LEASE, DEFAULT_POLL_INTERVAL, MIN_LEASE};
pub use guard::{ReadGuard, WriteGuard};
pub use state::{Holder, Mode, RwLockState, Waiter};

use crate::queue::acquire;
use crate::queue::handle::{QueueHandle, Settings};
use crate::queue::hold::Hold;
use crate::queue::row::{self, Shape};
use crate::queue::state::Rule;

/// Key prefix of read-write lock rows: the lock `config` is stored under
/// `rwlock/config`.
pub const KEY_PREFIX: &str = "rwlock";

/// Configures a [`RwLock`]; start with [`RwLock::builder`].
#[derive(Debug, Clone)]
pub struct RwLockBuilder {
    settings: Settings,
}

crate::queue::handle::builder_setters! { RwLockBuilder {
    recipe: "rwlock",
    survives: "a hold",
    waits: "[`RwLock::read`] and [`RwLock::write`]",
}}

impl RwLockBuilder {
    /// Check the settings and build the lock. No store call is made.
    pub fn build(self) -> Result<RwLock> {
        let handle = QueueHandle::new(Shape::RwLock, Rule::ReadWrite, KEY_PREFIX, self.settings)?;
        Ok(RwLock {
            handle: Arc::new(handle),
        })
    }
}

/// A fair, leased read-write lock stored in one row. Cheap to clone; clones
/// (and concurrent `read`/`write` calls) are separate contenders. See the
/// [module docs](self).
#[derive(Clone)]
pub struct RwLock {
    handle: Arc<QueueHandle>,
}

crate::queue::handle::handle_accessors!(RwLock, "lock", "holds");

impl RwLock {
    /// Start configuring the read-write lock `name` (letters, digits,
    /// `_ - . : @ + =`).
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> RwLockBuilder {
        RwLockBuilder {
            settings: Settings::new(store, name),
        }
    }

    /// Wait until the lock is granted for reading (shared with other
    /// readers), in FIFO order of request: behind any writer that asked
    /// earlier.
    ///
    /// Errors: [`ErrorKind::TimedOut`] after the builder's `acquire_timeout`
    /// (the request is withdrawn from the queue first);
    /// [`ErrorKind::Corrupt`] if the row is not a read-write lock; store
    /// errors as they come (the request is then withdrawn in the
    /// background, or its grant expires with the lease). Dropping the
    /// future withdraws the request too.
    pub async fn read(&self) -> Result<ReadGuard> {
        self.acquire(Mode::Read).await.map(ReadGuard)
    }

    /// Wait until the lock is granted for writing (nobody else holds it),
    /// in FIFO order of request. Errors as [`RwLock::read`].
    pub async fn write(&self) -> Result<WriteGuard> {
        self.acquire(Mode::Write).await.map(WriteGuard)
    }

    /// The soft form of [`RwLock::read`]: take the lock for reading only if
    /// no writer holds it and nobody queues; otherwise `Ok(None)` at once.
    /// Never queues.
    pub async fn try_read(&self) -> Result<Option<ReadGuard>> {
        Ok(self.try_acquire(Mode::Read).await?.map(ReadGuard))
    }

    /// The soft form of [`RwLock::write`]: take the lock for writing only
    /// if nobody holds it and nobody queues; otherwise `Ok(None)` at once.
    /// Never queues. A holder that this process's tries saw silent (same
    /// heartbeat) for a whole lease on this machine's clock is evicted when
    /// nobody waits (for `try_read` too), so crashed holders do not shut
    /// out try-only clients forever.
    pub async fn try_write(&self) -> Result<Option<WriteGuard>> {
        Ok(self.try_acquire(Mode::Write).await?.map(WriteGuard))
    }

    /// The stored state of lock `name` (holders, queue, last token), or
    /// `None` if it was never written. For `bakery rwlock show`.
    pub async fn inspect(store: &dyn VersionedStore, name: &str) -> Result<Option<RwLockState>> {
        let key = Key::with_prefix(KEY_PREFIX, name)?;
        match store.get(&key).await? {
            Some(row) => Ok(Some(row::decode(Shape::RwLock, &row)?.into())),
            None => Ok(None),
        }
    }

    async fn acquire(&self, mode: Mode) -> Result<Hold> {
        let name = &self.handle.name;
        let grant = acquire::acquire(&self.handle, self.handle.ask(mode), |limit| {
            format!("rwlock {name} not granted for {mode} within {limit:?}")
        })
        .await?;
        Ok(Hold::start(self.handle.clone(), grant, state::held(mode)))
    }

    async fn try_acquire(&self, mode: Mode) -> Result<Option<Hold>> {
        let grant = acquire::try_acquire(&self.handle, self.handle.ask(mode)).await?;
        Ok(grant.map(|grant| Hold::start(self.handle.clone(), grant, state::held(mode))))
    }
}
