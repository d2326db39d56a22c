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
//! heartbeat: every holder and waiter adds about a hundred bytes to it.
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

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use tokio::time::Instant;

pub use crate::lock::LostReason;
pub use permit::Permit;
pub use state::{Holder, SemaphoreState, Waiter};

use crate::arrival::Arrival;
use crate::beats::Beats;
use crate::dispatch::{Grantees, Registration};
use crate::turn::{Grant, Hold, TurnRecipe, TurnRow, Updated};
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
pub const MIN_LEASE: Duration = Duration::from_millis(30);

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
        let key = Key::with_prefix(KEY_PREFIX, &self.name)?;
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
        if self.lease < MIN_LEASE {
            return Err(Error::invalid_input(
                RECIPE,
                format!("lease must be at least {MIN_LEASE:?}, got {:?}", self.lease),
            ));
        }
        let lease_ms = u64::try_from(self.lease.as_millis())
            .map_err(|_| Error::invalid_input(RECIPE, "lease too long"))?;
        if self.poll_interval.is_zero() {
            return Err(Error::invalid_input(RECIPE, "poll interval must be > 0"));
        }
        let row = TurnRow::new(&self.store, &key);
        Ok(Semaphore {
            inner: Arc::new(Inner {
                store: self.store,
                name: self.name,
                key,
                permits,
                lease: Duration::from_millis(lease_ms),
                lease_ms,
                acquire_timeout: self.acquire_timeout,
                poll_interval: self.poll_interval,
                owner: self.owner.unwrap_or_else(crate::lock::default_owner),
                row,
                tried: Mutex::new(Observations::default()),
                beats: Beats::new(Duration::from_millis(lease_ms) / 3),
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
            .field("name", &self.inner.name)
            .field("permits", &self.inner.permits)
            .field("lease", &self.inner.lease)
            .field("backend", &self.inner.store.backend())
            .finish()
    }
}

pub(crate) struct Inner {
    store: Arc<dyn VersionedStore>,
    name: String,
    key: Key,
    permits: u32,
    lease: Duration,
    lease_ms: u64,
    acquire_timeout: Option<Duration>,
    poll_interval: Duration,
    owner: String,
    /// The row as this handle sees it, written in the process's turn.
    row: TurnRow,
    /// What this handle's `try_acquire` calls saw of the holders.
    tried: Mutex<Observations>,
    /// Its grants' heartbeats, started when due.
    pub(crate) beats: Arc<Beats>,
}

impl TurnRecipe for Inner {
    type State = SemaphoreState;
    const RECIPE: &'static str = RECIPE;
    const METRIC: crate::metrics::Recipe = crate::metrics::Recipe::Semaphore;

    fn name(&self) -> &str {
        &self.name
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn row(&self) -> &TurnRow {
        &self.row
    }

    fn beats(&self) -> &Arc<Beats> {
        &self.beats
    }

    fn decode(&self, row: Option<&Row>) -> Result<Arc<SemaphoreState>> {
        match row {
            Some(row) => {
                let state = self.row.state(row, SemaphoreState::decode)?;
                state.check_permits(row, self.permits)?;
                Ok(state)
            }
            None => Ok(Arc::new(SemaphoreState::new(self.permits))),
        }
    }
}

impl Inner {
    /// The waiters a row grants, for the process's dispatcher: every
    /// holder.
    fn grantees(&self) -> Grantees {
        let permits = self.permits;
        let decoded = self.row.decoded();
        Arc::new(move |row| {
            let state = decoded.state(row, SemaphoreState::decode)?;
            state.check_permits(row, permits)?;
            Ok(state
                .holders
                .iter()
                .map(|h| Arc::from(h.id.as_str()))
                .collect())
        })
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
        &self.inner.name
    }

    /// The number of permits this handle is configured with.
    pub fn permits(&self) -> u32 {
        self.inner.permits
    }

    /// The lease this handle's permits are held with.
    pub fn lease(&self) -> Duration {
        self.inner.lease
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
        // Its place in the process's order is taken when called, before
        // anything can yield.
        let mut ticket = Ticket::new(&self.inner);
        tokio::task::coop::consume_budget().await;
        let grant = match self.inner.acquire_timeout {
            None => self.wait_for_grant(&mut ticket).await?,
            Some(limit) => {
                match tokio::time::timeout(limit, self.wait_for_grant(&mut ticket)).await {
                    Ok(outcome) => outcome?,
                    Err(_) => {
                        ticket.withdraw().await?;
                        return Err(Error::new(
                            ErrorKind::TimedOut,
                            RECIPE,
                            format!(
                                "no permit of semaphore {} granted within {limit:?}; request withdrawn",
                                self.inner.name
                            ),
                        ));
                    }
                }
            }
        };
        ticket.settled = true;
        Ok(Permit(Hold::start(self.inner.clone(), grant, "permit")))
    }

    /// The soft form: take a permit only if one is free and nobody waits;
    /// otherwise `Ok(None)` at once. Never queues. A holder that this
    /// handle's tries saw silent (same heartbeat) for a whole lease on this
    /// machine's clock is evicted when nobody waits, so crashed holders do
    /// not shut out try-only clients forever; behind waiters, they evict it.
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        tokio::task::coop::consume_budget().await;
        let inner = &self.inner;
        let waiter = new_waiter(inner);
        // A cached row may say "free" (a stale one only costs a conflict),
        // but "full" is only believed from a fresh read.
        let (mut current, mut fresh) = match inner.row.newest() {
            Some(row) => (Some(row), false),
            None => (inner.row.read().await?, true),
        };
        loop {
            let mut state = Arc::unwrap_or_clone(inner.decode(current.as_ref())?);
            if !state.can_take() {
                if !fresh {
                    current = inner.row.read().await?;
                    fresh = true;
                    continue;
                }
                let expired = if state.queue.is_empty() {
                    inner
                        .tried
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .update(&state)
                } else {
                    Vec::new()
                };
                if expired.is_empty() {
                    return Ok(None);
                }
                tracing::info!(semaphore = %inner.name, holders = ?expired, "evicting holders whose lease ran out");
                // Nobody queues: the freed permits stay free for us.
                state.evict(&expired)?;
            }
            let token = state.take(&waiter)?;
            let sent = Instant::now();
            match inner.put(current.as_ref(), &state).await? {
                PutOutcome::Applied(row) => {
                    let grant = Grant {
                        id: waiter.id,
                        token,
                        row,
                        lease_from: sent,
                    };
                    return Ok(Some(Permit(Hold::start(inner.clone(), grant, "permit"))));
                }
                PutOutcome::Conflict(now) => {
                    current = now;
                    fresh = true;
                }
            }
        }
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

    /// The acquire loop: every step is one write decided from the row the
    /// last call returned; only waiting re-reads.
    async fn wait_for_grant(&self, ticket: &mut Ticket) -> Result<Grant> {
        let inner = &self.inner;
        let me = ticket.waiter.id.clone();
        // Longest wait between two reads of our own (see `current_sent`).
        let slowest = inner.lease / 4;
        // Send time of the call that returned `current`, and of the last
        // call whose result did NOT show us as a holder. A grant to us
        // committed after the latter, so no observer can have started
        // timing our (unclaimed) permit before it: our lease may safely
        // run from there, and taking a handed-over permit needs no write.
        // (A cached row predates this request, so "now" is safe for it.)
        let mut current_sent = Instant::now();
        let mut not_holder_at = current_sent;
        let mut current = inner.row.newest();
        if current.is_none() {
            current = inner.row.read().await?;
        }
        // Set up on the first wait only: an uncontended acquire is one write.
        let mut registration: Option<Registration> = None;
        let mut observed = Observations::default();
        loop {
            let state = inner.decode(current.as_ref())?;
            if let Some(holder) = state.holder(&me) {
                let token = holder.token;
                let row = current.ok_or_else(|| {
                    Error::new(ErrorKind::Internal, RECIPE, "held permit without row")
                })?;
                return Ok(Grant {
                    id: me,
                    token,
                    row,
                    lease_from: not_holder_at,
                });
            }
            not_holder_at = current_sent;
            if !state.queued(&me) {
                // One write: take a free permit, or join the queue.
                if !state.can_take() && registration.is_none() {
                    // Register BEFORE the enqueue write: a grant written
                    // after it is then heard, and waiting needs no read first.
                    registration = Some(
                        Registration::join(
                            &inner.store,
                            &inner.key,
                            true,
                            inner.poll_interval,
                            &me,
                            || inner.grantees(),
                        )
                        .await,
                    );
                }
                // Decided in the process's turn, on its newest row: a
                // waiter that has not registered only takes a free permit.
                let waiter = &ticket.waiter;
                let may_queue = registration.is_some();
                ticket.written = true;
                let updated = inner
                    .update(current.take(), Some(&mut ticket.arrival), |state| {
                        let settled =
                            state.holder(&waiter.id).is_some() || state.queued(&waiter.id);
                        if settled || !(may_queue || state.can_take()) {
                            return Ok(None);
                        }
                        state.join(waiter).map(Some)
                    })
                    .await?;
                match updated {
                    // Taken by this very write: the lease counts from its
                    // send time.
                    Updated::Applied {
                        granted: Some(token),
                        row,
                        sent,
                    } => {
                        return Ok(Grant {
                            id: me,
                            token,
                            row,
                            lease_from: sent,
                        })
                    }
                    Updated::Applied {
                        granted: None,
                        row,
                        sent,
                    } => {
                        current = Some(row);
                        current_sent = sent;
                    }
                    // Nothing written: `current_sent` stays (an earlier
                    // time only makes a lease count from earlier).
                    Updated::Unchanged { row } => current = row,
                }
                continue;
            }
            // Queued: evict the holders that stayed silent for a whole lease
            // of theirs on our clock, else wait.
            let expired = observed.update(&state);
            if !expired.is_empty() {
                tracing::info!(semaphore = %inner.name, holders = ?expired, "evicting holders whose lease ran out");
                let mut state = Arc::unwrap_or_clone(state);
                let mut granted = state.evict(&expired)?;
                let mine = granted.contains(&me);
                if mine {
                    state.beat(&me); // evict and claim in one write
                }
                let sent = Instant::now();
                match inner.put(current.as_ref(), &state).await? {
                    PutOutcome::Applied(row) => {
                        granted.retain(|id| *id != me);
                        inner.row.announce(&granted, &row).await;
                        if let (true, Some(holder)) = (mine, state.holder(&me)) {
                            return Ok(Grant {
                                id: me,
                                token: holder.token,
                                row,
                                lease_from: sent,
                            });
                        }
                        current = Some(row);
                    }
                    PutOutcome::Conflict(now) => current = now,
                }
                current_sent = sent;
                continue;
            }
            // Our grant arrives from the dispatcher; we still read at least
            // every lease/4, so the lease of a grant we learn of never
            // counts from further back, and we see the holders' heartbeats.
            let registration = registration.as_mut().ok_or_else(|| {
                Error::new(ErrorKind::Internal, RECIPE, "queued without a registration")
            })?;
            let mut wake_at = current_sent + slowest;
            if let Some(deadline) = observed.deadline() {
                wake_at = wake_at.min(deadline);
            }
            let seen = current.as_ref().map(|row| row.version);
            if let Some(row) = registration.wait(wake_at, seen).await {
                // It grants us; our lease still counts from our last
                // request (`current_sent`).
                current = Some(row);
                continue;
            }
            current_sent = Instant::now();
            current = inner.row.read().await?;
        }
    }
}

/// What a client saw of each holder's heartbeat, and since when (on its own
/// clock).
#[derive(Debug, Default)]
struct Observations {
    seen: HashMap<String, Observation>,
}

#[derive(Debug)]
struct Observation {
    beat: u64,
    since: Instant,
    lease: Duration,
}

impl Observations {
    /// Note the holders of `state` (keeping the start time of those whose
    /// heartbeat did not move) and return those silent for a whole lease.
    fn update(&mut self, state: &SemaphoreState) -> Vec<String> {
        let now = Instant::now();
        self.seen.retain(|id, _| state.holder(id).is_some());
        let mut expired = Vec::new();
        for holder in &state.holders {
            let seen = self
                .seen
                .entry(holder.id.clone())
                .or_insert_with(|| Observation {
                    beat: holder.beat,
                    since: now,
                    lease: Duration::from_millis(holder.lease_ms),
                });
            if seen.beat != holder.beat {
                *seen = Observation {
                    beat: holder.beat,
                    since: now,
                    lease: Duration::from_millis(holder.lease_ms),
                };
            }
            if now >= seen.since + seen.lease {
                expired.push(holder.id.clone());
            }
        }
        expired
    }

    /// When the first observed holder's lease runs out, if nothing moves.
    fn deadline(&self) -> Option<Instant> {
        self.seen.values().map(|seen| seen.since + seen.lease).min()
    }
}

fn new_waiter(inner: &Inner) -> Waiter {
    Waiter {
        id: uuid::Uuid::new_v4().simple().to_string()[..16].to_owned(),
        owner: inner.owner.clone(),
        lease_ms: inner.lease_ms,
    }
}

/// One acquisition request. If dropped before it settles (the acquire
/// future was cancelled, or failed) after a write that may have put it in
/// the row, it withdraws itself in the background, so it does not block
/// the waiters behind it.
struct Ticket {
    inner: Arc<Inner>,
    waiter: Waiter,
    /// Its place among the process's acquisitions, until its first write.
    arrival: Arrival,
    written: bool,
    settled: bool,
}

impl Ticket {
    fn new(inner: &Arc<Inner>) -> Ticket {
        Ticket {
            inner: inner.clone(),
            waiter: new_waiter(inner),
            arrival: inner.row.arrive(),
            written: false,
            settled: false,
        }
    }

    async fn withdraw(&mut self) -> Result<()> {
        self.settled = true;
        withdraw(&self.inner, &self.waiter.id).await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.settled || !self.written {
            return;
        }
        let inner = self.inner.clone();
        let id = self.waiter.id.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(err) = withdraw(&inner, &id).await {
                        tracing::warn!(semaphore = %inner.name, error = %err, "could not withdraw a cancelled request; it expires with its lease");
                    }
                });
            }
            Err(_) => tracing::warn!(
                semaphore = %inner.name,
                "no runtime to withdraw a cancelled request; it expires with its lease"
            ),
        }
    }
}

/// Remove request `id` from the queue, or give on the permit it was granted
/// meanwhile. Decided on a fresh read, never a cached row.
async fn withdraw(inner: &Inner, id: &str) -> Result<()> {
    let current = inner.row.read().await?;
    let updated = inner
        .update(current, None, |state| state.withdraw(id))
        .await?;
    if let Updated::Applied { granted, row, .. } = updated {
        inner.row.announce(&granted, &row).await;
    }
    Ok(())
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
}
