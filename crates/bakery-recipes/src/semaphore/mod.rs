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
//! Rows written by earlier versions (every waiter whole) read as before;
//! versions before the bare id refuse a row that has one with
//! [`ErrorKind::Corrupt`] and leave it as it is, so every process sharing
//! a semaphore must run a version with it.
//! The clients of one process write it in turn, each deciding on the row
//! the last of them left, so they never conflict with each other; clients
//! in different processes contend on it. Permits are capped at
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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use bakery_core::ErrorKind;
use bakery_core::{Error, Key, Result, Row, VersionedStore};

pub use crate::grant::LostReason;
pub use permit::Permit;
pub use state::{Holder, SemaphoreState, Waiter};

use crate::turn::{self, Hold, TurnHandle, TurnRecipe, TurnSettings};
use state::RECIPE;

/// Key prefix of semaphore rows: the semaphore `exports` is stored under
/// `semaphore/exports`.
pub const KEY_PREFIX: &str = "semaphore";

/// Default lease: long enough for a heartbeat to survive a few slow round
/// trips, short enough that a crashed holder's permit comes back quickly.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// Default longest delay between two polls of a waiter (without
/// notifications).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Shortest lease accepted: the heartbeat runs every lease/3.
pub const MIN_LEASE: Duration = turn::MIN_LEASE;

/// Most permits a semaphore may have: all holders live in its one row.
pub const MAX_PERMITS: u32 = 1000;

/// Configures a [`Semaphore`]; start with [`Semaphore::builder`].
#[derive(Debug, Clone)]
pub struct SemaphoreBuilder {
    store: Arc<dyn VersionedStore>,
    name: String,
    permits: Option<u32>,
    lease: Duration,
    acquire_timeout: Option<Duration>,
    poll_interval: Duration,
    owner: Option<String>,
}

bakery_core::setters! { SemaphoreBuilder {
    /// How many permits the semaphore has (required; 1 to [`MAX_PERMITS`]).
    /// Every client of the semaphore must use the same number: the row
    /// keeps the first one, and a handle configured otherwise is refused
    /// with [`ErrorKind::Config`].
    permits(permits: u32) Some;
    /// How long a permit survives its holder's silence (default 10 s). The
    /// holder heartbeats every lease/3. At least 30 ms.
    lease(lease: Duration);
    /// Give up [`Semaphore::acquire`] after this long with
    /// [`ErrorKind::TimedOut`] (leaving the queue first). Default: wait
    /// forever.
    acquire_timeout(acquire_timeout: Duration) Some;
    /// Longest delay between two polls while waiting (default 25 ms). Polls
    /// start at 1 ms and double while nothing changes. With store
    /// notifications this is only the fallback.
    poll_interval(poll_interval: Duration);
    /// The owner stored with each holder and waiter (default `host:pid`).
    owner(owner: impl Into<String>) Some;
}}

impl SemaphoreBuilder {
    /// Check the settings and build the semaphore. No store call is made.
    pub fn build(self) -> Result<Semaphore> {
        let permits = match self.permits {
            None => {
                return Err(Error::invalid_input(
                    RECIPE,
                    "the number of permits is required: .permits(n)",
                ))
            }
            Some(n) if n == 0 || n > MAX_PERMITS => {
                return Err(Error::invalid_input(
                    RECIPE,
                    format!("permits must be 1 to {MAX_PERMITS}, got {n}"),
                ))
            }
            Some(n) => n,
        };
        let settings = TurnSettings {
            store: self.store,
            name: self.name,
            lease: self.lease,
            acquire_timeout: self.acquire_timeout,
            poll_interval: self.poll_interval,
            owner: self.owner,
        };
        Ok(Semaphore {
            inner: Arc::new(Inner {
                handle: TurnHandle::new(RECIPE, KEY_PREFIX, settings)?,
                permits,
            }),
        })
    }
}

/// A fair, leased counting semaphore stored in one row. Cheap to clone;
/// clones (and concurrent `acquire` calls) are separate contenders. See the
/// [module docs](self).
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.inner.handle.name)
            .field("permits", &self.inner.permits)
            .field("lease", &self.inner.handle.lease)
            .field("backend", &self.inner.handle.store.backend())
            .finish()
    }
}

pub(crate) struct Inner {
    handle: TurnHandle,
    permits: u32,
}

impl TurnRecipe for Inner {
    type State = SemaphoreState;
    const RECIPE: &'static str = RECIPE;
    const METRIC: crate::metrics::Recipe = crate::metrics::Recipe::Semaphore;

    fn handle(&self) -> &TurnHandle {
        &self.handle
    }

    fn decode(&self, row: Option<&Row>) -> Result<Arc<SemaphoreState>> {
        match row {
            Some(row) => {
                let state = self.handle.row.state(row, SemaphoreState::decode)?;
                state.check_permits(row, self.permits)?;
                Ok(state)
            }
            None => Ok(Arc::new(SemaphoreState::new(self.permits))),
        }
    }

    fn parse(row: &Row) -> Result<SemaphoreState> {
        SemaphoreState::decode(row)
    }
}

impl Semaphore {
    /// Start configuring the semaphore `name` (letters, digits,
    /// `_ - . : @ + =`). Set the number of permits with
    /// [`SemaphoreBuilder::permits`].
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> SemaphoreBuilder {
        SemaphoreBuilder {
            store,
            name: name.to_owned(),
            permits: None,
            lease: DEFAULT_LEASE,
            acquire_timeout: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            owner: None,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.inner.handle.name
    }

    /// The number of permits this handle is configured with.
    pub fn permits(&self) -> u32 {
        self.inner.permits
    }

    /// The lease this handle's permits are held with.
    pub fn lease(&self) -> Duration {
        self.inner.handle.lease
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
        let name = &self.inner.handle.name;
        let grant = turn::acquire(&self.inner, self.waiter(), |limit| {
            format!("no permit of semaphore {name} granted within {limit:?}")
        })
        .await?;
        Ok(Permit(Hold::start(self.inner.clone(), grant, "permit")))
    }

    /// The soft form: take a permit only if one is free and nobody waits;
    /// otherwise `Ok(None)` at once. Never queues. A holder that this
    /// handle's tries saw silent (same heartbeat) for a whole lease on this
    /// machine's clock is evicted when nobody waits, so crashed holders do
    /// not shut out try-only clients forever; behind waiters, they evict it.
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        let grant = turn::try_acquire(&self.inner, self.waiter()).await?;
        Ok(grant.map(|grant| Permit(Hold::start(self.inner.clone(), grant, "permit"))))
    }

    /// The stored state of semaphore `name` (permits, holders, queue,
    /// last token), or `None` if it was never written. For `bakery
    /// semaphore show`; checks nothing about the number of permits.
    pub async fn inspect(store: &dyn VersionedStore, name: &str) -> Result<Option<SemaphoreState>> {
        let key = Key::with_prefix(KEY_PREFIX, name)?;
        match store.get(&key).await? {
            Some(row) => SemaphoreState::decode(&row).map(Some),
            None => Ok(None),
        }
    }

    /// A new request of this handle.
    fn waiter(&self) -> Waiter {
        let handle = &self.inner.handle;
        Waiter {
            id: crate::grant::acquisition_id(),
            owner: handle.owner.clone(),
            lease_ms: handle.lease_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use bakery_core::MemoryStore;

    use super::*;
    use crate::arrival::order;

    #[tokio::test]
    async fn a_client_that_asked_first_is_served_first_though_not_polled_since() {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        let client = || {
            Semaphore::builder(store.clone(), "order")
                .permits(1)
                .build()
                .expect("semaphore")
        };
        let (a, b) = (client(), client());
        order::asked_first_is_served_first(
            || a.acquire(),
            || b.acquire(),
            Permit::token,
            Permit::release,
            true,
        )
        .await;
    }

    async fn one_permit_clients_take_turns() {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        let clients = (0..4)
            .map(|_| {
                Semaphore::builder(store.clone(), "turns")
                    .permits(1)
                    .build()
                    .expect("semaphore")
            })
            .collect();
        order::clients_in_a_closed_loop_take_turns(
            clients,
            |semaphore: Semaphore| async move { semaphore.acquire().await },
            Permit::release,
        )
        .await;
    }

    #[tokio::test]
    async fn one_permit_clients_in_a_closed_loop_take_turns() {
        one_permit_clients_take_turns().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_permit_clients_in_a_closed_loop_take_turns_on_two_threads() {
        one_permit_clients_take_turns().await;
    }
}
