//! A fair distributed lock: FIFO acquire, soft try-lock, leases kept alive by
//! a heartbeat, a lost-lock signal and fencing tokens — on one row, written
//! only with `put_if_version`.
//!
//! # How it works
//! The row holds `{token, holder, queue}` ([`LockState`]); a queued waiter
//! that repeats the owner and lease of the entry before it is stored as its
//! bare id (11 characters), so a queue of one process's clients costs 14
//! bytes a waiter. Rows written by earlier versions (every waiter an
//! object) read as before. Versions before the bare id refuse a row that
//! has one with [`ErrorKind::Corrupt`] (the row is left as it is): while
//! processes of both versions share a lock, the older ones fail on a row
//! where a waiter follows an entry of its own process.
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

mod combine;
mod guard;
mod state;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use tokio::time::Instant;

pub use crate::grant::LostReason;
use crate::grant::{acquisition_id, default_owner};
pub use guard::LockGuard;
use state::Head;
pub use state::{Holder, LockState, Waiter};

use crate::arrival::Arrival;
use crate::beats::Beats;
use crate::dispatch::Registration;
use crate::silence::Beating;
use combine::{Request, Writer};
use guard::{Grant, TaskHolds};

/// Key prefix of lock rows: the lock `jobs` is stored under `lock/jobs`.
pub const KEY_PREFIX: &str = "lock";

/// Default lease: long enough for a heartbeat to survive a few slow round
/// trips, short enough that a crashed holder is replaced quickly.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// Default longest delay between two polls of a waiter (without notifications).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Shortest lease accepted: the heartbeat runs every lease/3.
pub const MIN_LEASE: Duration = Duration::from_millis(30);

/// Longest [`LockBuilder::data`] accepted, in bytes: it is copied into the
/// lock's row with every waiter.
pub const MAX_DATA_LEN: usize = 1024;

/// Configures a [`Lock`]; start with [`Lock::builder`].
#[derive(Debug, Clone)]
pub struct LockBuilder {
    store: Arc<dyn VersionedStore>,
    name: String,
    lease: Duration,
    acquire_timeout: Option<Duration>,
    poll_interval: Duration,
    owner: Option<String>,
    notifications: bool,
    data: Option<String>,
    at_most: Option<Duration>,
    at_least: Option<Duration>,
    reentrant: bool,
}

bakery_core::setters! { LockBuilder {
    /// How long the lock survives its holder's silence (default 10 s). The
    /// holder heartbeats every lease/3. At least 30 ms.
    lease(lease: Duration);
    /// Give up [`Lock::acquire`] after this long with [`ErrorKind::TimedOut`]
    /// (leaving the queue). Default: wait forever.
    acquire_timeout(acquire_timeout: Duration) Some;
    /// Longest delay between two polls while waiting (default 25 ms). Polls
    /// start at 1 ms and double. With store notifications this is only the
    /// fallback.
    poll_interval(poll_interval: Duration);
    /// Use the store's notifications when it has
    /// [`Capabilities::WATCH`](bakery_core::Capabilities::WATCH) (default
    /// `true`): waiters wake when the lock changes hands instead of polling,
    /// and releases notify. `false` polls only (to compare the two).
    notifications(notifications: bool);
    /// The owner shown by `bakery lock show` (default `host:pid`).
    owner(owner: impl Into<String>) Some;
    /// A small value stored with every grant of this handle (at most
    /// [`MAX_DATA_LEN`] bytes), readable by everyone: [`Lock::holder`],
    /// [`Lock::inspect`], `bakery lock show`. E.g. the address of the node
    /// running the job, or the leader's endpoint.
    data(data: impl Into<String>) Some;
    /// Hold a grant at most this long (a job lock's `lockAtMostFor`): then
    /// the guard stops renewing its lease, releases the lock and reports
    /// [`LostReason::HoldLimit`] through [`LockGuard::lost`]. The job should
    /// race its work against `lost()` and fence its writes; extend the
    /// limit with [`LockGuard::extend`]. Default: no limit.
    lock_at_most_for(at_most: Duration) Some;
    /// Keep a grant at least this long (a job lock's `lockAtLeastFor`): a
    /// release earlier than this after the grant keeps renewing the lease
    /// and hands the lock on only when the time is up, so a job that ends
    /// fast does not run again on a node whose scheduler fires a little
    /// later. Held by this process: if it exits first, the lease ends the
    /// hold. Default: zero.
    lock_at_least_for(at_least: Duration) Some;
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
        let key = Key::with_prefix(KEY_PREFIX, &self.name)?;
        if self.lease < MIN_LEASE {
            return Err(Error::invalid_input(
                "lock",
                format!("lease must be at least {MIN_LEASE:?}, got {:?}", self.lease),
            ));
        }
        let lease_ms = u64::try_from(self.lease.as_millis())
            .map_err(|_| Error::invalid_input("lock", "lease too long"))?;
        if self.poll_interval.is_zero() {
            return Err(Error::invalid_input("lock", "poll interval must be > 0"));
        }
        if let Some(data) = &self.data {
            if data.len() > MAX_DATA_LEN {
                return Err(Error::invalid_input(
                    "lock",
                    format!(
                        "lock data is {} bytes, at most {MAX_DATA_LEN} allowed",
                        data.len()
                    ),
                ));
            }
        }
        if let (Some(at_most), Some(at_least)) = (self.at_most, self.at_least) {
            if at_least > at_most {
                return Err(Error::invalid_input(
                    "lock",
                    format!(
                        "lock_at_least_for ({at_least:?}) exceeds lock_at_most_for ({at_most:?})"
                    ),
                ));
            }
        }
        let owner = self.owner.unwrap_or_else(default_owner);
        let writer = Writer::for_row(&self.store, &key, self.notifications);
        Ok(Lock {
            inner: Arc::new(LockInner {
                store: self.store,
                name: self.name,
                key,
                lease: Duration::from_millis(lease_ms),
                lease_ms,
                acquire_timeout: self.acquire_timeout,
                poll_interval: self.poll_interval,
                owner: owner.into(),
                notifications: self.notifications,
                writer,
                data: self.data.map(Into::into),
                at_most: self.at_most,
                at_least: self.at_least.unwrap_or_default(),
                reentrant: self.reentrant,
                task_holds: TaskHolds::default(),
                beats: Beats::new(Duration::from_millis(lease_ms) / 3),
            }),
        })
    }
}

/// A fair, lease-based distributed lock stored in one row. Cheap to clone;
/// clones (and concurrent `acquire` calls) are separate contenders. See the
/// [module docs](self).
#[derive(Clone)]
pub struct Lock {
    inner: Arc<LockInner>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("backend", &self.inner.store.backend())
            .finish()
    }
}

pub(crate) struct LockInner {
    pub(crate) store: Arc<dyn VersionedStore>,
    pub(crate) name: String,
    pub(crate) key: Key,
    pub(crate) lease: Duration,
    lease_ms: u64,
    acquire_timeout: Option<Duration>,
    poll_interval: Duration,
    owner: Arc<str>,
    notifications: bool,
    /// This process's writer for the row (shared with its other handles).
    /// The newest row it knows is where an `acquire` starts instead of
    /// reading (a stale row only costs a conflict, which returns the
    /// current row).
    pub(crate) writer: Arc<Writer>,
    data: Option<Arc<str>>,
    pub(crate) at_most: Option<Duration>,
    pub(crate) at_least: Duration,
    reentrant: bool,
    /// The grants this handle's tasks hold (what a reentrant acquire shares).
    pub(crate) task_holds: TaskHolds,
    /// Its grants' heartbeats, started when due.
    pub(crate) beats: Arc<Beats>,
}

impl Lock {
    /// Start configuring the lock `name` (letters, digits, `_ - . : @ + =`).
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> LockBuilder {
        LockBuilder {
            store,
            name: name.to_owned(),
            lease: DEFAULT_LEASE,
            acquire_timeout: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            owner: None,
            notifications: true,
            data: None,
            at_most: None,
            at_least: None,
            reentrant: false,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The lease this handle's grants are held with.
    pub fn lease(&self) -> Duration {
        self.inner.lease
    }

    /// Wait until the lock is granted, in FIFO order of request.
    ///
    /// Errors: [`ErrorKind::TimedOut`] after the builder's `acquire_timeout`
    /// (the request is withdrawn from the queue first, or in the background
    /// if the store refuses that); store errors as they come (the request is
    /// withdrawn in the background until the store answers, or expires with
    /// the lease). Dropping the future withdraws the request too.
    pub async fn acquire(&self) -> Result<LockGuard> {
        if let Some(guard) = self.reenter() {
            return Ok(guard);
        }
        let asked = Instant::now();
        // Our place among this process's acquisitions: our first request
        // goes to the writer after those of the clients that asked before.
        let mut arrival = self.inner.writer.arrive();
        // A lock free as far as this process knows goes to whoever asks
        // first: let the other ready tasks of this thread ask before us, or
        // a client that releases and at once asks again takes it back before
        // a waiter of this process that is ready but not yet queued (on a
        // store that never makes us wait, MemoryStore, for a whole scheduler
        // budget of 128 grants). A busy lock queues us in order anyway, and
        // our enqueue may share the write of a local release in flight.
        if self.inner.writer.seems_free() {
            tokio::task::yield_now().await;
        } else {
            tokio::task::coop::consume_budget().await;
        }
        let mut ticket = Ticket::new(&self.inner);
        let outcome = match self.inner.acquire_timeout {
            None => self.wait_for_grant(&mut ticket, &mut arrival).await,
            Some(limit) => {
                match tokio::time::timeout(limit, self.wait_for_grant(&mut ticket, &mut arrival))
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        let withdrawn = crate::give_back::withdrawn(ticket.withdraw().await);
                        return Err(Error::new(
                            ErrorKind::TimedOut,
                            "lock",
                            format!(
                                "lock {} not granted within {limit:?}; {withdrawn}",
                                self.inner.name
                            ),
                        ));
                    }
                }
            }
        };
        match outcome {
            Ok(grant) => {
                ticket.settled = true;
                crate::metrics::lock_acquired(&self.inner.name, asked.elapsed());
                if let Some(handoff) = self.inner.writer.handed_to(&ticket.waiter.id) {
                    crate::metrics::lock_handed_over(&self.inner.name, handoff);
                }
                Ok(LockGuard::start(self.inner.clone(), grant))
            }
            Err(err) => Err(err),
        }
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
        tokio::task::coop::consume_budget().await;
        let ticket = Ticket::new(&self.inner);
        // A cached row may say "free" (a stale one only costs a conflict),
        // but "busy" is only believed from a fresh read.
        let (mut current, mut fresh) = match self.inner.writer.newest() {
            Some(row) => (Some(row), false),
            None => (self.inner.store.get(&self.inner.key).await?, true),
        };
        loop {
            // Read shared; copied only below, to change it (a busy lock's
            // queue is not copied just to say no).
            let seen = match &current {
                Some(row) => self.inner.writer.decoded(row)?,
                None => Arc::new(LockState::default()),
            };
            let mut state = if seen.is_free() {
                LockState::clone(&seen)
            } else {
                if !fresh {
                    current = self.inner.store.get(&self.inner.key).await?;
                    fresh = true;
                    continue;
                }
                self.inner.writer.remember(current.as_ref());
                if !self.holder_expired(current.as_ref(), &seen) {
                    return Ok(None);
                }
                // Silent for a whole lease across our tries (a crashed job
                // holder, with only try-lockers around): evict and take in
                // one write.
                tracing::info!(lock = %self.inner.name, "evicting a holder whose lease ran out");
                crate::metrics::lock_evicted(&self.inner.name);
                let mut state = LockState::clone(&seen);
                state.hand_off()?;
                state
            };
            state.take(&ticket.waiter)?;
            let sent = Instant::now();
            match self.put(current.as_ref(), &state).await? {
                PutOutcome::Applied(row) => {
                    crate::metrics::lock_acquired(&self.inner.name, Duration::ZERO);
                    let grant = Grant::new(ticket.waiter.id.clone(), &row, state.token, sent);
                    return Ok(Some(LockGuard::start(self.inner.clone(), grant)));
                }
                PutOutcome::Conflict(now) => {
                    current = now;
                    fresh = true;
                }
            }
        }
    }

    /// Another guard on the grant the current task holds (reentrant locks).
    fn reenter(&self) -> Option<LockGuard> {
        self.inner
            .task_holds
            .reenter(self.inner.reentrant, &self.inner.name)
    }

    /// Has the holder of `state` (stored in `row`, nobody waiting behind
    /// it) kept the same heartbeat for a whole lease, as this process saw
    /// it? Waiters evict holders themselves.
    fn holder_expired(&self, row: Option<&Row>, state: &LockState) -> bool {
        let Some(holder) = state.holder.as_ref() else {
            return false;
        };
        holder_silent(&self.inner, row, holder) && state.queue.is_empty()
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
        let row = self.inner.store.get(&self.inner.key).await?;
        self.inner.writer.remember(row.as_ref());
        match &row {
            Some(row) => Ok(self.inner.writer.decoded(row)?.holder.clone()),
            None => Ok(None),
        }
    }

    /// The stored state of lock `name` (holder, token, queue), or `None` if
    /// it was never taken.
    pub async fn inspect(store: &dyn VersionedStore, name: &str) -> Result<Option<LockState>> {
        let key = Key::with_prefix(KEY_PREFIX, name)?;
        match store.get(&key).await? {
            Some(row) => LockState::decode(&row).map(Some),
            None => Ok(None),
        }
    }

    async fn put(&self, current: Option<&Row>, state: &LockState) -> Result<PutOutcome> {
        put_state(&self.inner, current, state).await
    }

    /// The acquire loop: every step is one write decided from the row the
    /// last call returned; only waiting re-reads.
    async fn wait_for_grant(&self, ticket: &mut Ticket, arrival: &mut Arrival) -> Result<Grant> {
        let inner = &self.inner;
        let me = ticket.waiter.id.clone();
        // Set up on the first wait only: an uncontended acquire is one write.
        let mut registration: Option<Registration> = None;
        // Longest wait between two reads of our own (see `current_sent`).
        let slowest = (inner.lease / 4).max(inner.poll_interval);
        // Send time of the call that returned `current`, and of the last
        // call whose result did NOT show us as the holder. A hand-off to us
        // committed after the latter, so no observer can have started
        // timing our (unclaimed) grant before it: our lease may safely run
        // from there, and taking a handed-off lock needs no write. (A cached
        // row predates this request, so "now" is safe for it.)
        let mut current_sent = Instant::now();
        let mut not_holder_at = current_sent;
        // Nothing cached (this process's first acquire of the row): no
        // read, the first write asks as if the lock were free and a
        // conflict returns the row. Many tasks starting at once then
        // share one write through the writer instead of each reading.
        let mut current = inner.writer.newest();
        // The head of `current` when the call that returned it had it
        // already.
        let mut current_head: Option<Head> = None;
        // `current` is the row our own applied enqueue left (and it does
        // not name us the holder), so we are in its queue: no need to scan
        // a long queue for our id.
        let mut joined_current = false;
        loop {
            // Only the head: the queue is read (through the writer's
            // cache) by the rare paths that need it, so a waiter never
            // holds on to a long queue the writer would then have to copy.
            let head = match (current_head.take(), &current) {
                (Some(head), _) => head,
                (None, Some(row)) => inner.writer.head(row)?,
                (None, None) => Head::default(),
            };
            if head.held_by(&me) {
                let row = current.ok_or_else(|| {
                    Error::new(ErrorKind::Internal, "lock", "held lock without row")
                })?;
                inner.writer.remember(Some(&row));
                return Ok(Grant::new(me, &row, head.token, not_holder_at));
            }
            not_holder_at = current_sent;
            let was_enqueued = ticket.enqueued;
            let request = if head.is_free() {
                Request::Take(ticket.waiter.clone())
            } else if !std::mem::take(&mut joined_current)
                // Ids are unique per acquire: never sent, never queued.
                && (!ticket.enqueued || !inner.writer.decoded(held_row(&current)?)?.queued(&me))
            {
                // Register BEFORE the enqueue write: every change after it
                // is then heard, and waiting needs no read first.
                if registration.is_none() {
                    registration = Some(
                        Registration::join(
                            &inner.store,
                            &inner.key,
                            inner.notifications,
                            inner.poll_interval,
                            &me,
                            || combine::grantees(&inner.store, &inner.key, inner.notifications),
                        )
                        .await,
                    );
                }
                Request::Join {
                    waiter: ticket.waiter.clone(),
                    sent_before: std::mem::replace(&mut ticket.enqueued, true),
                }
            } else {
                // Waiting behind a holder: evict it if it stayed silent for a
                // whole lease of ours to observe, else wait.
                // Set up before our enqueue write, the only way into the
                // queue (request ids are unique per acquire).
                let registration = registration.as_mut().ok_or_else(|| {
                    Error::new(ErrorKind::Internal, "lock", "queued without a registration")
                })?;
                let holder = head.holder.clone().ok_or_else(|| {
                    Error::new(ErrorKind::Internal, "lock", "queued lock without holder")
                })?;
                if holder_silent(inner, current.as_ref(), &holder) {
                    let sent = Instant::now();
                    tracing::info!(lock = %inner.name, holder = %holder.owner, "evicting a holder whose lease ran out");
                    crate::metrics::lock_evicted(&inner.name);
                    let mut state = LockState::clone(&*inner.writer.decoded(held_row(&current)?)?);
                    state.hand_off()?;
                    let mine = state.held_by(&me);
                    if mine {
                        state.beat(); // evict and take in one write
                    }
                    let state = Arc::new(state);
                    let outcome = self.put(current.as_ref(), &state).await?;
                    if let PutOutcome::Applied(row) = &outcome {
                        inner.writer.remember(Some(row));
                        if mine {
                            return Ok(Grant::new(me, row, state.token, sent));
                        }
                        inner.writer.announce(row, &state).await;
                    }
                    current = match outcome {
                        PutOutcome::Applied(row) => Some(row),
                        PutOutcome::Conflict(now) => now,
                    };
                    current_sent = sent;
                    continue;
                }
                let deadline = inner
                    .writer
                    .silence
                    .deadline()
                    .unwrap_or(current_sent + slowest);
                // Our grant arrives from the dispatcher; we still read at
                // least every `slowest`, so the lease of a grant we learn
                // of never counts from further back (and we see the
                // holder's heartbeat).
                let wake_at = (current_sent + slowest).min(deadline);
                let seen = current.as_ref().map(|row| row.version);
                if let Some(row) = registration.wait(wake_at, seen).await {
                    // It names us the holder; our lease still counts from
                    // our last request (`current_sent`).
                    current = Some(row);
                    continue;
                }
                current_sent = Instant::now();
                current = inner.store.get(&inner.key).await?;
                continue;
            };
            // Through this process's writer: its other clients' requests
            // share the write instead of conflicting with it.
            let joining = matches!(request, Request::Join { .. });
            let written = match inner
                .writer
                .submit(request, current.as_ref(), Some(&mut *arrival))
                .await
            {
                Ok(written) => written,
                Err(err) => {
                    // A request that may have reached the row is withdrawn
                    // when the ticket drops; one refused unsent did not.
                    ticket.enqueued = was_enqueued || err.kind() != ErrorKind::Unavailable;
                    return Err(err);
                }
            };
            if written.applied && written.head.held_by(&me) {
                // Taken (or queued and handed over) by this very write: the
                // lease counts from its send time.
                let row = written.row.ok_or_else(|| {
                    Error::new(ErrorKind::Internal, "lock", "granted lock without row")
                })?;
                return Ok(Grant::new(me, &row, written.head.token, written.sent));
            }
            joined_current = joining && written.applied;
            current = written.row;
            current_head = Some(written.head);
            current_sent = written.sent;
        }
    }
}

/// The row of a lock that has a holder (a row without one decodes free).
fn held_row(current: &Option<Row>) -> Result<&Row> {
    current
        .as_ref()
        .ok_or_else(|| Error::new(ErrorKind::Internal, "lock", "held lock without row"))
}

pub(crate) async fn put_state(
    inner: &LockInner,
    current: Option<&Row>,
    state: &LockState,
) -> Result<PutOutcome> {
    let expected = current.map(|row| row.version);
    inner
        .store
        .put_if_version(&inner.key, expected, state.encode()?)
        .await
}

/// Has `holder` (of `row`) kept the same heartbeat for a whole lease of
/// its own, as this process saw it ([`crate::silence`])?
fn holder_silent(inner: &LockInner, row: Option<&Row>, holder: &Holder) -> bool {
    let beating = Beating {
        id: &holder.id,
        beat: holder.beat,
        lease_ms: holder.lease_ms,
    };
    !inner.writer.silence.update(row, [beating]).is_empty()
}

/// One acquisition request. If dropped before it settles (the acquire future
/// was cancelled, or failed) after a write that may have put it in the row,
/// it withdraws itself in the background ([`crate::give_back`]), so it does
/// not block the waiters behind it.
struct Ticket {
    inner: Arc<LockInner>,
    waiter: Waiter,
    /// A request of this ticket may be in the row (sent, not refused unsent).
    enqueued: bool,
    settled: bool,
}

impl Ticket {
    fn new(inner: &Arc<LockInner>) -> Ticket {
        Ticket {
            inner: inner.clone(),
            waiter: Waiter {
                id: acquisition_id().into(),
                owner: inner.owner.clone(),
                lease_ms: inner.lease_ms,
                data: inner.data.clone(),
            },
            enqueued: false,
            settled: false,
        }
    }

    /// Withdraw now; if that fails, dropping the ticket goes on trying.
    async fn withdraw(&mut self) -> Result<()> {
        withdraw(&self.inner, &self.waiter.id).await?;
        self.settled = true;
        Ok(())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.settled || !self.enqueued {
            return;
        }
        let inner = self.inner.clone();
        let id = self.waiter.id.clone();
        let name = inner.name.clone();
        crate::give_back::in_background("lock", &name, "a request given up", move || {
            let (inner, id) = (inner.clone(), id.clone());
            async move { withdraw(&inner, &id).await }
        });
    }
}

/// Remove request `id` from the queue, or pass the lock on if it was handed
/// to it meanwhile. Through the process's writer, so it is written after
/// this request's enqueue if that is still waiting there.
async fn withdraw(inner: &LockInner, id: &Arc<str>) -> Result<()> {
    let written = inner
        .writer
        .submit(Request::Withdraw(id.clone()), None, None)
        .await?;
    if written.applied && written.tell_others {
        inner.writer.notify_others().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use bakery_core::MemoryStore;

    use super::*;
    use crate::arrival::order::{self, poll_once};

    fn two_clients() -> (Lock, Lock) {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        let lock = |_| Lock::builder(store.clone(), "order").build().expect("lock");
        (lock(0), lock(1))
    }

    async fn clients_take_turns() {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        let clients = (0..4)
            .map(|_| Lock::builder(store.clone(), "turns").build().expect("lock"))
            .collect();
        order::clients_in_a_closed_loop_take_turns(
            clients,
            |lock: Lock| async move { lock.acquire().await },
            LockGuard::release,
        )
        .await;
    }

    #[tokio::test]
    async fn clients_in_a_closed_loop_take_turns() {
        clients_take_turns().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_in_a_closed_loop_take_turns_on_two_threads() {
        clients_take_turns().await;
    }

    #[tokio::test]
    async fn a_client_that_asked_first_is_served_first_though_not_polled_since() {
        for b_begins_while_held in [false, true] {
            let (a, b) = two_clients();
            order::asked_first_is_served_first(
                || a.acquire(),
                || b.acquire(),
                LockGuard::token,
                LockGuard::release,
                b_begins_while_held,
            )
            .await;
        }
    }

    /// An acquire future that is kept but never polled again holds the
    /// others back for `ARRIVAL_PATIENCE` at most, once.
    #[tokio::test(start_paused = true)]
    async fn an_abandoned_acquire_holds_the_others_back_only_briefly() {
        let (a, b) = two_clients();
        let mut b_acquire = pin!(b.acquire());
        assert!(poll_once(b_acquire.as_mut()).await.is_pending());
        let started = Instant::now();
        a.acquire().await.unwrap().release().await.unwrap();
        let waited = started.elapsed();
        assert!(
            waited >= crate::arrival::ARRIVAL_PATIENCE,
            "waited {waited:?}"
        );
        let again = Instant::now();
        a.acquire().await.unwrap().release().await.unwrap();
        assert!(
            again.elapsed() < crate::arrival::ARRIVAL_PATIENCE,
            "waited again"
        );
        // B kept its request: it is still served, after A.
        let b_guard = b_acquire.await.unwrap();
        assert_eq!(b_guard.token(), 3);
        b_guard.release().await.unwrap();
    }
}
