//! A fair distributed counting semaphore: N leased permits, granted in FIFO
//! order, each with a fencing token — on one row, written only with
//! `put_if_version`.
//!
//! # How it works
//! The row (`semaphore/NAME`) holds `{token, permits, holders, queue}`
//! ([`SemaphoreState`]), like the [lock](crate::lock)'s row with a list of
//! holders instead of one.
//! - **Order without clocks.** `acquire` takes a free permit with one write
//!   when nobody queues, or appends itself to the queue with one write. The
//!   queue is in the order those writes applied, so grants are FIFO with no
//!   clock involved, and a newcomer never overtakes a waiter.
//! - **Direct hand-off.** A release (or an eviction) removes the holder and,
//!   in the same write, grants freed permits to the head of the queue, each
//!   with the next fencing token. The new holder learns it from its
//!   process's one listener on the row, which wakes only the waiters a row
//!   grants: directly when the grant was written in the same process,
//!   else from the store's watch where it has
//!   [`Capabilities::WATCH`](bakery_core::Capabilities::WATCH), else from
//!   one poll for the whole process: at the next timer tick (1 ms) after
//!   another process changed the row, backing off to the poll interval
//!   while it does not. Every waiter reads at least every lease/4 either way. Its
//!   lease runs from its last request before the hand-off, so taking a
//!   handed-over permit costs no write.
//! - **Leases without synchronized clocks.** Each holder advances its own
//!   heartbeat counter every lease/3. A waiter that sees the same
//!   (holder, heartbeat) for a whole lease of that holder *on its own
//!   monotonic clock* evicts it with a write conditioned on exactly that
//!   row version. A handed-over permit that is not claimed within its lease
//!   is evicted the same way.
//! - **Fencing.** Every grant takes the next [`Permit::token`]. A lease
//!   never guarantees the bound by itself (a paused holder outlives its
//!   lease); a token checked where the protected resource is written does.
//!
//! # Limits
//! The whole state is one row, rewritten by every grant, release and
//! heartbeat: every holder adds about a hundred bytes to it, and so does a
//! waiter, except one that repeats the owner and lease of the waiter before it
//! (one process's clients): that one is stored as its bare id, 14 bytes.
//! Rows written by earlier versions (every waiter whole) read as before.
//! The clients of one process share one writer of the row, which combines
//! their requests into one conditional write, so they never conflict with
//! each other; clients in different processes contend on it. It is the
//! same leased FIFO queue as the [lock](crate::lock)'s, with N permits. Permits are capped at
//! [`MAX_PERMITS`]; the queue is not capped. The number of permits is fixed
//! by the first client that writes the row: a client configured with
//! another number gets [`ErrorKind::Config`] (delete the row, when nobody
//! uses it, to change it).
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use bakery_core::MemoryStore;
//! use bakery_recipes::semaphore::Semaphore;
//!
//! # #[tokio::main]
//! # async fn main() -> bakery_core::Result<()> {
//! let store = Arc::new(MemoryStore::new());
//! let exports = Semaphore::builder(store.clone(), "exports")
//!     .permits(2)
//!     .lease(Duration::from_secs(10))
//!     .build()?;
//!
//! let first = exports.acquire().await?;
//! let second = exports.acquire().await?;
//! assert_eq!((first.token(), second.token()), (1, 2));
//! // Both permits are held: the soft form refuses at once.
//! assert!(exports.try_acquire().await?.is_none());
//!
//! first.release().await?;
//! let third = exports.try_acquire().await?.expect("one permit is free");
//! assert_eq!(third.token(), 3, "every grant gets a larger token");
//!
//! let state = Semaphore::inspect(&*store, "exports").await?.expect("written");
//! assert_eq!((state.permits, state.holders.len()), (2, 2));
//! # second.release().await?;
//! # third.release().await?;
//! # Ok(()) }
//! ```

mod permit;
mod state;

use std::sync::Arc;

#[cfg(doc)]
use bakery_core::ErrorKind;
use bakery_core::{Error, Key, Result, VersionedStore};

pub use crate::grant::LostReason;
pub use crate::queue::handle::{DEFAULT_LEASE, DEFAULT_POLL_INTERVAL, MIN_LEASE};
pub use permit::Permit;
pub use state::{Holder, SemaphoreState, Waiter};

use crate::queue::acquire;
use crate::queue::handle::{QueueHandle, Settings};
use crate::queue::hold::Hold;
use crate::queue::row::{self, Shape};
use crate::queue::state::{Mode, Rule};

/// Key prefix of semaphore rows: the semaphore `exports` is stored under
/// `semaphore/exports`.
pub const KEY_PREFIX: &str = "semaphore";

/// Most permits a semaphore may have: all holders live in its one row.
pub const MAX_PERMITS: u32 = 1000;

/// Configures a [`Semaphore`]; start with [`Semaphore::builder`].
#[derive(Debug, Clone)]
pub struct SemaphoreBuilder {
    settings: Settings,
    permits: Option<u32>,
}

crate::queue::handle::builder_setters! { SemaphoreBuilder {
    recipe: "semaphore",
    survives: "a permit",
    waits: "[`Semaphore::acquire`]",
    /// How many permits the semaphore has (required; 1 to [`MAX_PERMITS`]).
    /// Every client of the semaphore must use the same number: the row
    /// keeps the first one, and a handle configured otherwise is refused
    /// with [`ErrorKind::Config`].
    permits(permits: u32) Some;
}}

impl SemaphoreBuilder {
    /// Check the settings and build the semaphore. No store call is made.
    pub fn build(self) -> Result<Semaphore> {
        let permits = match self.permits {
            None => {
                return Err(Error::invalid_input(
                    KEY_PREFIX,
                    "the number of permits is required: .permits(n)",
                ))
            }
            Some(n) if n == 0 || n > MAX_PERMITS => {
                return Err(Error::invalid_input(
                    KEY_PREFIX,
                    format!("permits must be 1 to {MAX_PERMITS}, got {n}"),
                ))
            }
            Some(n) => n,
        };
        let handle = QueueHandle::new(
            Shape::Semaphore,
            Rule::Permits(permits),
            KEY_PREFIX,
            self.settings,
        )?;
        Ok(Semaphore {
            handle: Arc::new(handle),
            permits,
        })
    }
}

/// A fair, leased counting semaphore stored in one row. Cheap to clone;
/// clones (and concurrent `acquire` calls) are separate contenders. See the
/// [module docs](self).
#[derive(Clone)]
pub struct Semaphore {
    handle: Arc<QueueHandle>,
    permits: u32,
}

crate::queue::handle::handle_accessors!(Semaphore, "semaphore", "permits");

impl Semaphore {
    /// Start configuring the semaphore `name` (letters, digits,
    /// `_ - . : @ + =`). Set the number of permits with
    /// [`SemaphoreBuilder::permits`].
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> SemaphoreBuilder {
        SemaphoreBuilder {
            settings: Settings::new(store, name),
            permits: None,
        }
    }

    /// The number of permits this handle is configured with.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Wait until a permit is granted, in FIFO order of request.
    ///
    /// Errors: [`ErrorKind::TimedOut`] after the builder's `acquire_timeout`
    /// (the request is withdrawn from the queue first);
    /// [`ErrorKind::Config`] if the stored semaphore has another number of
    /// permits; [`ErrorKind::Corrupt`] if its row is not a semaphore; store
    /// errors as they come (the request is then withdrawn in the
    /// background, or its grant expires with the lease). Dropping the
    /// future withdraws the request too.
    pub async fn acquire(&self) -> Result<Permit> {
        let name = &self.handle.name;
        let grant = acquire::acquire(&self.handle, self.handle.ask(Mode::Write), |limit| {
            format!("no permit of semaphore {name} granted within {limit:?}")
        })
        .await?;
        Ok(Permit(Hold::start(self.handle.clone(), grant, "permit")))
    }

    /// The soft form: take a permit only if one is free and nobody waits;
    /// otherwise `Ok(None)` at once. Never queues. A holder that this
    /// process's tries saw silent (same heartbeat) for a whole lease on this
    /// machine's clock is evicted when nobody waits, so crashed holders do
    /// not shut out try-only clients forever; behind waiters, they evict it.
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        let grant = acquire::try_acquire(&self.handle, self.handle.ask(Mode::Write)).await?;
        Ok(grant.map(|grant| Permit(Hold::start(self.handle.clone(), grant, "permit"))))
    }

    /// The stored state of semaphore `name` (permits, holders, queue,
    /// last token), or `None` if it was never written. For `bakery
    /// semaphore show`; checks nothing about the number of permits.
    pub async fn inspect(store: &dyn VersionedStore, name: &str) -> Result<Option<SemaphoreState>> {
        let key = Key::with_prefix(KEY_PREFIX, name)?;
        match store.get(&key).await? {
            Some(row) => Ok(Some(row::decode(Shape::Semaphore, &row)?.into())),
            None => Ok(None),
        }
    }
}
