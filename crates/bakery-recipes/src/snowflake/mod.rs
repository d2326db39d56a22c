//! Time-ordered 64-bit ids (Snowflake) whose worker ids are leased from the
//! store, so no two live processes share one, and whose timestamps never go
//! back for a worker id, across restarts and takeovers.
//!
//! An id is `timestamp | worker | sequence` ([`Layout`], Twitter's 41/10/12
//! by default): roughly ordered by time across machines, strictly
//! increasing for one process, issued without a store call.
//!
//! # How it works
//! - **Worker ids are leases.** Worker id `w` of snowflake `NAME` is the
//!   fair [lock](crate::lock) `snowflake.NAME.w<w>`. A process takes the
//!   lowest slot whose lock it gets at once and whose mark (below) is not
//!   more than [`SnowflakeBuilder::max_clock_wait`] ahead of its clock;
//!   when every slot is held (or held or passed over for its mark) it
//!   waits (at most [`SnowflakeBuilder::acquire_timeout`]) for a held one,
//!   and a waiter evicts a holder that was silent for a whole lease, so a
//!   crashed process's worker id comes back, but only after its lease.
//! - **Stop before the lease could end.** The lock's lease counts, for
//!   everyone else, from the send time of the holder's last renewal; a
//!   process issues ids only until a tenth of a lease before that ends on
//!   its own monotonic clock, then leases a worker id again (the same or
//!   another). A process paused past its lease (SIGSTOP, a long GC) thus
//!   issues nothing after it resumes until it holds a worker id again.
//! - **Timestamps ahead of use.** The slot's lock row keeps a mark: the
//!   last tick its holders may use. Each renewal of the lease (every
//!   lease/3) raises it to a lease past the clock in the same write, and
//!   no id of a tick above the stored mark is issued (the first id after a
//!   lease renews at once). Only the current grant's beats move it, and it
//!   stays in the row through evictions: a new holder starts above the
//!   mark it was granted with. A release sets it to the last tick used, so
//!   the next holder starts at once.
//! - **Clocks.** Within a tick the sequence counts up; when it runs out,
//!   `next` waits for the next tick. A clock behind the last tick used (it
//!   went back, or this machine is behind the previous holder's) is waited
//!   for up to [`SnowflakeBuilder::max_clock_wait`], then refused with
//!   [`ErrorKind::TimedOut`]; a timestamp is never reused.
//! - **Marks too far ahead are passed over.** A free worker id whose mark
//!   is more than `max_clock_wait` ahead of this process's clock (a
//!   process with a clock ahead used it, or this machine's clock is
//!   behind) is given back with its mark kept, logged with `tracing::warn!` (the
//!   worker id and how far ahead its mark is: the sign of a wrong clock),
//!   and the next free one is tried; so one process whose clock ran an
//!   hour ahead costs its worker id for that hour, not the service. Only
//!   when every worker id is held or marked that far ahead does a process
//!   refuse ([`ErrorKind::TimedOut`], counting both; when some are held,
//!   after waiting for them as above). A process whose *own* clock is
//!   behind thus passes over the worker ids used recently and takes a
//!   fresh one, issuing ids with older timestamps than theirs: still
//!   unique (another worker id, started above its own mark), but out of
//!   time order with the ids issued just before; watch for the warning.
//!
//! - **Batches.** [`Snowflake::next_batch`] issues a tick's run of ids
//!   with one clock read and one lease check: they are consecutive
//!   integers (the sequence is the id's lowest bits).
//!
//! # Limits
//! Finding the lowest free slot tries the slots in turn: a process started
//! beside `n` live ones makes `n + 1` store calls before its first id,
//! plus a release for each slot passed over for its mark. A
//! held slot is not taken over while a free one exists, so slots of
//! crashed processes are reclaimed when the table is full. Every worker id
//! costs its lock's renewal, one write every lease/3, which carries the
//! mark too.
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use bakery_core::MemoryStore;
//! use bakery_recipes::snowflake::{Layout, Snowflake};
//!
//! # #[tokio::main]
//! # async fn main() -> bakery_core::Result<()> {
//! let store = Arc::new(MemoryStore::new());
//! let ids = Snowflake::builder(store, "orders").build()?;
//! let first = ids.next().await?;
//! let second = ids.next().await?;
//! assert!(second > first);
//!
//! let parts = Layout::default().decode(second);
//! assert_eq!(Some(parts.worker), ids.worker(), "the lowest free worker id: 0");
//! ids.release().await?;
//! # Ok(()) }
//! ```

mod layout;
mod worker;

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{validate_name, Error, ErrorKind, Result, VersionedStore};

pub use crate::id_batch::IdBatch;
pub use layout::{
    format_unix_ms, Decoded, Layout, DEFAULT_EPOCH_MS, ID_BITS, MAX_WORKER_BITS, MIN_YEARS,
};
pub use worker::WAITED_AT_ONCE;

use crate::queue::handle::{DEFAULT_LEASE, MIN_LEASE};
use worker::{Slot, SlotSettings};

/// Key prefix of a snowflake's layout row `snowflake/NAME`; worker id `w`
/// is the lock `snowflake.NAME.w<w>`, whose row keeps its mark.
pub const KEY_PREFIX: &str = "snowflake";

/// Default of [`SnowflakeBuilder::max_clock_wait`].
pub const DEFAULT_MAX_CLOCK_WAIT: Duration = Duration::from_secs(1);

/// Waits this short are spent yielding to other tasks, not on a timer.
const SPIN_WAIT: Duration = Duration::from_millis(1);

/// Default of [`SnowflakeBuilder::acquire_timeout`].
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// The wall clock timestamps come from: [`SystemClock`] unless the builder
/// is given another (tests move a manual one).
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn unix_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_ms(&self) -> u64 {
        layout::unix_ms_now()
    }
}

/// Configures a [`Snowflake`]; start with [`Snowflake::builder`].
pub struct SnowflakeBuilder {
    store: Arc<dyn VersionedStore>,
    name: String,
    layout: Layout,
    slot: SlotSettings,
    max_clock_wait: Duration,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SnowflakeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnowflakeBuilder")
            .field("name", &self.name)
            .field("layout", &self.layout)
            .field("slot", &self.slot)
            .field("max_clock_wait", &self.max_clock_wait)
            .finish_non_exhaustive()
    }
}

bakery_core::setters! { SnowflakeBuilder {
    /// The id layout ([`Layout::default`] unless set); checked by
    /// [`build`](Self::build). Every client of the snowflake needs the same.
    layout(layout: Layout);
    /// How long a worker id survives its holder's silence (default 10 s;
    /// at least 30 ms). The holder renews it every lease/3 and stops issuing
    /// a tenth of a lease before it could end.
    [slot] lease(lease: Duration);
    /// How long to wait for a worker id when every one is held (default
    /// [`DEFAULT_ACQUIRE_TIMEOUT`]), then fail with
    /// [`ErrorKind::TimedOut`] naming the layout's capacity.
    [slot] acquire_timeout(acquire_timeout: Duration) Some;
    /// The owner stored with the worker id's lock (default `host:pid`).
    [slot] owner(owner: impl Into<String>) Some;
    /// How long `next` waits for a clock that is behind the last tick used
    /// (default [`DEFAULT_MAX_CLOCK_WAIT`]); beyond it, or when the clock
    /// is further behind than that, [`ErrorKind::TimedOut`].
    ///
    /// Also the bound for choosing a worker id: a free one whose mark (the
    /// last tick its holders may have used) is further ahead of this clock
    /// than this is passed over with a `tracing::warn!`, and the next free
    /// one taken, rather than refused; so a process whose own clock is
    /// behind takes a fresh worker id and issues ids with older timestamps
    /// than those issued before it (unique all the same). Only when every
    /// worker id is held or marked that far ahead is it
    /// [`ErrorKind::TimedOut`]. See the [module docs](self).
    max_clock_wait(max_clock_wait: Duration);
    /// Where timestamps come from (default [`SystemClock`]).
    clock(clock: Arc<dyn Clock>);
}}

impl SnowflakeBuilder {
    /// Check the settings (the name, the lease, and the layout with
    /// [`Layout::check`]: it must last [`MIN_YEARS`] from now) and build
    /// the generator. No store call is made.
    pub fn build(self) -> Result<Snowflake> {
        validate_name(&self.name)?;
        // The slots' lock keys must be valid too: the largest worker id's.
        worker::lock_key(&self.name, self.layout.workers().saturating_sub(1))?;
        self.layout.check_at(self.clock.unix_ms())?;
        if self.slot.lease < MIN_LEASE {
            return Err(Error::invalid_input(
                KEY_PREFIX,
                format!(
                    "lease must be at least {MIN_LEASE:?}, got {:?}",
                    self.slot.lease
                ),
            ));
        }
        Ok(Snowflake {
            inner: Arc::new(Inner {
                config: self,
                issuer: Mutex::new(Issuer::default()),
                slow: tokio::sync::Mutex::new(()),
            }),
        })
    }
}

/// A generator of snowflake ids on one leased worker id. Cheap to clone:
/// clones share the worker id. See the [module docs](self).
#[derive(Clone)]
pub struct Snowflake {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Snowflake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snowflake")
            .field("name", &self.inner.config.name)
            .field("layout", &self.inner.config.layout)
            .field("worker", &self.worker())
            .finish()
    }
}

struct Inner {
    /// The settings it was built with.
    config: SnowflakeBuilder,
    issuer: Mutex<Issuer>,
    /// Serializes the calls to the store: leasing and reserving.
    slow: tokio::sync::Mutex<()>,
}

/// What the issuing path holds.
#[derive(Default)]
struct Issuer {
    slot: Option<Arc<Slot>>,
    /// The tick and sequence of the last id issued on this slot.
    last: Option<(u64, u64)>,
    /// The least tick of the next id: above every tick this process used
    /// on earlier slots, so its ids keep increasing.
    min_next: u64,
    /// The layout row was read or written.
    layout_settled: bool,
}

/// What the issuing path found.
enum Step {
    /// Consecutive ids of one tick (at least one).
    Ids(Range<u64>),
    /// No usable worker id: lease one.
    Lease,
    /// `tick` is not reserved yet.
    Reserve(u64),
    /// The next id's tick is `tick`; the clock says `now_ms`.
    Wait { tick: u64, now_ms: u64 },
}

impl Snowflake {
    /// Start configuring the snowflake `name` (letters, digits,
    /// `_ - . : @ + =`) on `store`.
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> SnowflakeBuilder {
        SnowflakeBuilder {
            store,
            name: name.to_owned(),
            layout: Layout::default(),
            slot: SlotSettings {
                lease: DEFAULT_LEASE,
                acquire_timeout: Some(DEFAULT_ACQUIRE_TIMEOUT),
                owner: None,
            },
            max_clock_wait: DEFAULT_MAX_CLOCK_WAIT,
            clock: Arc::new(SystemClock),
        }
    }

    /// The layout stored for snowflake `name` by its first client; `None`
    /// if no client has issued an id yet.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use bakery_core::MemoryStore;
    /// # use bakery_recipes::snowflake::{Layout, Snowflake};
    /// # #[tokio::main]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = Arc::new(MemoryStore::new());
    /// assert_eq!(Snowflake::stored_layout(&*store, "orders").await?, None);
    /// let ids = Snowflake::builder(store.clone(), "orders").build()?;
    /// ids.next().await?;
    /// assert_eq!(Snowflake::stored_layout(&*store, "orders").await?, Some(Layout::default()));
    /// # Ok(()) }
    /// ```
    pub async fn stored_layout(store: &dyn VersionedStore, name: &str) -> Result<Option<Layout>> {
        let key = worker::layout_key(name)?;
        match store.get(&key).await? {
            Some(row) => worker::parse_layout(&key, &row).map(Some),
            None => Ok(None),
        }
    }

    /// The snowflake's name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// The layout ids are issued in.
    pub fn layout(&self) -> Layout {
        self.inner.config.layout
    }

    /// The worker id this generator holds, if it holds one now.
    pub fn worker(&self) -> Option<u32> {
        self.inner
            .lock_issuer()
            .slot
            .as_ref()
            .filter(|slot| slot.usable())
            .map(|slot| slot.worker)
    }

    /// The next id: larger than every id this generator issued before, and
    /// unique among all generators of the snowflake. The first call leases
    /// a worker id (waiting, at most the builder's `acquire_timeout`, when
    /// every one is held); later calls make no store call, except one to
    /// renew the worker id at once when the clock passed its stored mark
    /// (a clock that jumped ahead).
    ///
    /// Errors: [`ErrorKind::TimedOut`] when no worker id is free in time,
    /// or every one is held or marked more than `max_clock_wait` ahead of
    /// the clock, or the clock is behind the last tick used by more than
    /// `max_clock_wait`; [`ErrorKind::Exhausted`] when the layout's
    /// timestamp has run out; [`ErrorKind::Config`] when the snowflake was
    /// created with another layout; store errors as they come (nothing was
    /// issued).
    pub async fn next(&self) -> Result<u64> {
        loop {
            match self.inner.step(1)? {
                Step::Ids(ids) => return Ok(ids.start),
                step => self.inner.prepare(step).await?,
            }
        }
    }

    /// `n` ids at once, as [`next`](Self::next) would issue them one by
    /// one: each run of ids of one tick takes one clock read and one lease
    /// check, not one per id, and its ids are consecutive integers (one
    /// range of the [`IdBatch`]). A batch larger than a tick's sequence
    /// waits for the next ticks, as `next` would.
    ///
    /// Errors: those of [`next`](Self::next). The ids of a batch that fails
    /// midway are never issued again, by anyone.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bakery_core::MemoryStore;
    /// use bakery_recipes::snowflake::Snowflake;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let ids = Snowflake::builder(Arc::new(MemoryStore::new()), "orders").build()?;
    /// let batch = ids.next_batch(1_000).await?;
    /// assert_eq!(batch.len(), 1_000);
    /// let after = ids.next().await?;
    /// assert!(batch.iter().all(|id| id < after));
    /// ids.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn next_batch(&self, n: u64) -> Result<IdBatch> {
        let mut batch = IdBatch::default();
        let mut wanted = n;
        while wanted > 0 {
            match self.inner.step(wanted)? {
                Step::Ids(ids) => {
                    wanted -= ids.end - ids.start;
                    batch.push(ids);
                }
                step => self.inner.prepare(step).await?,
            }
        }
        Ok(batch)
    }

    /// Give the worker id back now (the mark shrunk to the last tick used,
    /// so its next holder need not wait), rather than when the last clone
    /// is dropped (a release through the runtime) or its lease expires. A
    /// later [`next`](Self::next) leases one again. A worker id already
    /// lost (this process was paused past its lease) is nothing to give
    /// back: `Ok`, as every id was issued within the lease. Errors: the
    /// store's, when the release could not be written (the lease then
    /// expires).
    pub async fn release(&self) -> Result<()> {
        let _slow = self.inner.slow.lock().await;
        let (slot, last) = {
            let mut issuer = self.inner.lock_issuer();
            let last = issuer.last.take().map(|(tick, _)| tick);
            if let Some(tick) = last {
                issuer.min_next = issuer.min_next.max(tick.saturating_add(1));
            }
            (issuer.slot.take(), last)
        };
        match slot.map(Arc::try_unwrap) {
            Some(Ok(slot)) => slot.release(last).await,
            // A step holds the other reference for a moment: the slot is
            // released when it drops it.
            Some(Err(_)) | None => Ok(()),
        }
    }
}

impl Inner {
    fn lock_issuer(&self) -> std::sync::MutexGuard<'_, Issuer> {
        self.issuer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What must happen before the next ids: a lease, a reservation, a
    /// wait for the clock.
    async fn prepare(self: &Arc<Self>, step: Step) -> Result<()> {
        match step {
            Step::Ids(_) => Ok(()),
            Step::Lease => self.lease().await,
            Step::Reserve(tick) => self.reserve(tick).await,
            Step::Wait { tick, now_ms } => self.wait_for(tick, now_ms).await,
        }
    }

    /// The issuing path: up to `most` (at least 1) consecutive ids of one
    /// tick, or what must happen first.
    fn step(&self, most: u64) -> Result<Step> {
        let mut issuer = self.lock_issuer();
        let Some(slot) = issuer.slot.clone().filter(|slot| slot.usable()) else {
            return Ok(Step::Lease);
        };
        let now_ms = self.config.clock.unix_ms();
        let Some(now) = self.config.layout.tick_of(now_ms) else {
            return Err(Error::new(
                ErrorKind::Unavailable,
                KEY_PREFIX,
                format!(
                    "the clock ({}) is before the layout's epoch",
                    format_unix_ms(now_ms)
                ),
            ));
        };
        let (tick, first) = match issuer.last {
            Some((last, sequence)) if now <= last => {
                if sequence + 1 < self.config.layout.ids_per_tick() {
                    (last, sequence + 1)
                } else {
                    return Ok(Step::Wait {
                        tick: last + 1,
                        now_ms,
                    });
                }
            }
            Some(_) => (now, 0),
            None => {
                let start = slot.floor().max(issuer.min_next);
                if now < start {
                    return Ok(Step::Wait {
                        tick: start,
                        now_ms,
                    });
                }
                (now, 0)
            }
        };
        if tick > self.config.layout.max_tick() {
            return Err(Error::new(
                ErrorKind::Exhausted,
                KEY_PREFIX,
                format!(
                    "the timestamp of layout {} ran out on {}",
                    self.config.layout,
                    format_unix_ms(self.config.layout.ends_ms())
                ),
            ));
        }
        if slot.until().is_none_or(|until| tick > until) {
            return Ok(Step::Reserve(tick));
        }
        let count = most.clamp(1, self.config.layout.ids_per_tick() - first);
        let last = first + count - 1;
        let id = self
            .config
            .layout
            .encode(tick, slot.worker, first)
            .ok_or_else(|| Error::new(ErrorKind::Internal, KEY_PREFIX, "id parts out of range"))?;
        issuer.last = Some((tick, last));
        // The sequence is the id's lowest bits: one tick's ids are
        // consecutive integers.
        Ok(Step::Ids(id..id + count))
    }

    /// Lease a worker id (after checking the layout row once), replacing a
    /// slot that is no longer usable.
    async fn lease(self: &Arc<Self>) -> Result<()> {
        let _slow = self.slow.lock().await;
        if self
            .lock_issuer()
            .slot
            .as_ref()
            .is_some_and(|slot| slot.usable())
        {
            return Ok(()); // another caller leased one meanwhile
        }
        if !self.lock_issuer().layout_settled {
            let key = worker::layout_key(&self.config.name)?;
            worker::settle_layout(&*self.config.store, &key, self.config.layout).await?;
            self.lock_issuer().layout_settled = true;
        }
        self.drop_slot();
        let slot = Arc::new(
            worker::lease(
                &self.config.store,
                &self.config.name,
                self.config.layout,
                &self.config.slot,
                self.config.max_clock_wait,
                &self.config.clock,
            )
            .await?,
        );
        tracing::debug!(snowflake = %self.config.name, worker = slot.worker, token = slot.token(), "worker id leased");
        self.lock_issuer().slot = Some(slot);
        Ok(())
    }

    /// Forget the current slot (its guard releases when the last
    /// reference goes; a lost one has nothing to release). The next ids
    /// stay above the ones it issued.
    fn drop_slot(&self) {
        let mut issuer = self.lock_issuer();
        if let Some((tick, _)) = issuer.last.take() {
            issuer.min_next = issuer.min_next.max(tick.saturating_add(1));
        }
        issuer.slot = None;
    }

    /// Store a mark covering `tick` in the slot's row (a beat, which
    /// renews its lease too). A slot lost meanwhile is dropped, to be
    /// leased again.
    async fn reserve(&self, tick: u64) -> Result<()> {
        let _slow = self.slow.lock().await;
        let Some(slot) = self.lock_issuer().slot.clone() else {
            return Ok(());
        };
        if slot.until().is_some_and(|current| current >= tick) || !slot.usable() {
            return Ok(());
        }
        match slot.reserve(tick).await {
            Err(err) if err.kind() == ErrorKind::Lost => {
                tracing::warn!(snowflake = %self.config.name, worker = slot.worker, error = %err, "worker id taken over");
                self.drop_slot();
                Ok(())
            }
            other => other,
        }
    }

    /// Wait until `tick` starts, if that is within `max_clock_wait`.
    async fn wait_for(&self, tick: u64, now_ms: u64) -> Result<()> {
        let wait =
            Duration::from_millis(self.config.layout.unix_ms_of(tick).saturating_sub(now_ms));
        if wait > self.config.max_clock_wait {
            let worker = self.lock_issuer().slot.as_ref().map(|slot| slot.worker);
            return Err(Error::new(
                ErrorKind::TimedOut,
                KEY_PREFIX,
                format!(
                    "the clock ({}) is {wait:?} behind the next tick worker id {} of {} may use \
                     ({}), more than max_clock_wait ({:?}): a clock went back, or this machine's \
                     is behind the previous holder's",
                    format_unix_ms(now_ms),
                    worker.map_or_else(|| "?".to_string(), |w| w.to_string()),
                    self.config.name,
                    format_unix_ms(self.config.layout.unix_ms_of(tick)),
                    self.config.max_clock_wait
                ),
            ));
        }
        if wait <= SPIN_WAIT {
            // A timer would sleep a whole timer tick (1 ms) or more: the
            // next tick of a full sequence is nearer than that.
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
