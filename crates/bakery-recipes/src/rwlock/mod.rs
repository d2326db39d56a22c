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
//!   monotonic clock* evicts it with a write conditioned on exactly that
//!   row version (a handed-over grant not claimed within its lease too).
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
//! heartbeat: every holder and waiter adds about a hundred bytes to it.
//! The clients of one process write it in turn, each deciding on the row
//! the last of them left, so they never conflict with each other; clients
//! in different processes contend on it (many readers heartbeating in
//! different processes make many conflicts). The queue is not capped. Not reentrant: a second `read()` or
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

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use tokio::time::Instant;

pub use crate::lock::LostReason;
pub use guard::{ReadGuard, WriteGuard};
pub use state::{Holder, Mode, RwLockState, Waiter};

use crate::arrival::Arrival;
use crate::beats::Beats;
use crate::dispatch::{Grantees, Registration};
use crate::turn::{Grant, Hold, TurnRecipe, TurnRow, Updated};
use state::RECIPE;

/// Key prefix of read-write lock rows: the lock `config` is stored under
/// `rwlock/config`.
pub const KEY_PREFIX: &str = "rwlock";

/// Default lease: long enough for a heartbeat to survive a few slow round
/// trips, short enough that a crashed holder's lock comes back quickly.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// Default longest delay between two polls of a waiter (without
/// notifications).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Shortest lease accepted: the heartbeat runs every lease/3.
pub const MIN_LEASE: Duration = Duration::from_millis(30);

/// Configures a [`RwLock`]; start with [`RwLock::builder`].
#[derive(Debug, Clone)]
pub struct RwLockBuilder {
    store: Arc<dyn VersionedStore>,
    name: String,
    lease: Duration,
    acquire_timeout: Option<Duration>,
    poll_interval: Duration,
    owner: Option<String>,
}

bakery_core::setters! { RwLockBuilder {
    /// How long a hold survives its holder's silence (default 10 s). The
    /// holder heartbeats every lease/3. At least 30 ms.
    lease(lease: Duration);
    /// Give up [`RwLock::read`] and [`RwLock::write`] after this long with
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

impl RwLockBuilder {
    /// Check the settings and build the lock. No store call is made.
    pub fn build(self) -> Result<RwLock> {
        let key = Key::with_prefix(KEY_PREFIX, &self.name)?;
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
        Ok(RwLock {
            inner: Arc::new(Inner {
                store: self.store,
                name: self.name,
                key,
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

/// A fair, leased read-write lock stored in one row. Cheap to clone; clones
/// (and concurrent `read`/`write` calls) are separate contenders. See the
/// [module docs](self).
#[derive(Clone)]
pub struct RwLock {
    inner: Arc<Inner>,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("backend", &self.inner.store.backend())
            .finish()
    }
}

pub(crate) struct Inner {
    store: Arc<dyn VersionedStore>,
    name: String,
    key: Key,
    lease: Duration,
    lease_ms: u64,
    acquire_timeout: Option<Duration>,
    poll_interval: Duration,
    owner: String,
    /// The row as this handle sees it, written in the process's turn.
    row: TurnRow,
    /// What this handle's `try_*` calls saw of the holders.
    tried: Mutex<Observations>,
    /// Its grants' heartbeats, started when due.
    pub(crate) beats: Arc<Beats>,
}

impl TurnRecipe for Inner {
    type State = RwLockState;
    const RECIPE: &'static str = RECIPE;
    const METRIC: crate::metrics::Recipe = crate::metrics::Recipe::RwLock;

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

    fn decode(&self, row: Option<&Row>) -> Result<Arc<RwLockState>> {
        match row {
            Some(row) => self.row.state(row, RwLockState::decode),
            None => Ok(Arc::new(RwLockState::new())),
        }
    }
}

impl Inner {
    /// The waiters a row grants, for the process's dispatcher: every
    /// holder.
    fn grantees(&self) -> Grantees {
        let decoded = self.row.decoded();
        Arc::new(move |row| {
            let state = decoded.state(row, RwLockState::decode)?;
            Ok(state
                .holders
                .iter()
                .map(|h| Arc::from(h.id.as_str()))
                .collect())
        })
    }
}

impl RwLock {
    /// Start configuring the read-write lock `name` (letters, digits,
    /// `_ - . : @ + =`).
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> RwLockBuilder {
        RwLockBuilder {
            store,
            name: name.to_owned(),
            lease: DEFAULT_LEASE,
            acquire_timeout: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            owner: None,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The lease this handle's holds are taken with.
    pub fn lease(&self) -> Duration {
        self.inner.lease
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
    /// Never queues. A holder that this handle's tries saw silent (same
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
            Some(row) => RwLockState::decode(&row).map(Some),
            None => Ok(None),
        }
    }

    async fn acquire(&self, mode: Mode) -> Result<Hold<Inner>> {
        // Its place in the process's order is taken when called, before
        // anything can yield.
        let mut ticket = Ticket::new(&self.inner, mode);
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
                                "rwlock {} not granted for {mode} within {limit:?}; request withdrawn",
                                self.inner.name
                            ),
                        ));
                    }
                }
            }
        };
        ticket.settled = true;
        Ok(Hold::start(self.inner.clone(), grant, mode.held()))
    }

    async fn try_acquire(&self, mode: Mode) -> Result<Option<Hold<Inner>>> {
        tokio::task::coop::consume_budget().await;
        let inner = &self.inner;
        let waiter = new_waiter(inner, mode);
        // A cached row may say "free" (a stale one only costs a conflict),
        // but "busy" is only believed from a fresh read.
        let (mut current, mut fresh) = match inner.row.newest() {
            Some(row) => (Some(row), false),
            None => (inner.row.read().await?, true),
        };
        loop {
            let mut state = Arc::unwrap_or_clone(inner.decode(current.as_ref())?);
            if !state.can_take(mode) {
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
                tracing::info!(rwlock = %inner.name, holders = ?expired, "evicting holders whose lease ran out");
                // Nobody queues: eviction grants nobody else.
                state.evict(&expired)?;
                if !state.can_take(mode) {
                    // Live holders remain that we must not join.
                    return Ok(None);
                }
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
                    return Ok(Some(Hold::start(inner.clone(), grant, mode.held())));
                }
                PutOutcome::Conflict(now) => {
                    current = now;
                    fresh = true;
                }
            }
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
        // timing our (unclaimed) grant before it: our lease may safely
        // run from there, and taking a handed-over grant needs no write.
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
                    Error::new(ErrorKind::Internal, RECIPE, "held lock without row")
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
                // One write: take the lock, or join the queue.
                if !state.can_take(ticket.waiter.mode) && registration.is_none() {
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
                // waiter that has not registered only takes the lock.
                let waiter = &ticket.waiter;
                let may_queue = registration.is_some();
                ticket.written = true;
                let updated = inner
                    .update(current.take(), Some(&mut ticket.arrival), |state| {
                        let settled =
                            state.holder(&waiter.id).is_some() || state.queued(&waiter.id);
                        if settled || !(may_queue || state.can_take(waiter.mode)) {
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
                tracing::info!(rwlock = %inner.name, holders = ?expired, "evicting holders whose lease ran out");
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
    fn update(&mut self, state: &RwLockState) -> Vec<String> {
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

fn new_waiter(inner: &Inner, mode: Mode) -> Waiter {
    Waiter {
        id: uuid::Uuid::new_v4().simple().to_string()[..16].to_owned(),
        owner: inner.owner.clone(),
        mode,
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
    fn new(inner: &Arc<Inner>, mode: Mode) -> Ticket {
        Ticket {
            inner: inner.clone(),
            waiter: new_waiter(inner, mode),
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
                        tracing::warn!(rwlock = %inner.name, error = %err, "could not withdraw a cancelled request; it expires with its lease");
                    }
                });
            }
            Err(_) => tracing::warn!(
                rwlock = %inner.name,
                "no runtime to withdraw a cancelled request; it expires with its lease"
            ),
        }
    }
}

/// Remove request `id` from the queue, or give on the grant it was given
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
    async fn a_writer_that_asked_first_is_served_first_though_not_polled_since() {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        let client = || {
            RwLock::builder(store.clone(), "order")
                .build()
                .expect("rwlock")
        };
        let (a, b) = (client(), client());
        order::asked_first_is_served_first(
            || a.write(),
            || b.write(),
            WriteGuard::token,
            WriteGuard::release,
            true,
        )
        .await;
    }
}
