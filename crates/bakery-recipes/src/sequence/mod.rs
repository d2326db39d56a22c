//! A persistent, unique, monotonic sequence: a counter row moved by
//! conditional writes, one block of ids per write (the segment mode of
//! Meituan's Leaf; the `putIfVersion` sequence of Oracle NoSQL).
//!
//! The row `seq/NAME` holds the first id nobody has reserved yet and the node
//! that last moved it. A client reserves a block of ids with one
//! `put_if_version` (on conflict it retries with the row the store handed
//! back — no second read) and serves the block from memory through a
//! lock-free fast path. Before the block runs out, the next one is reserved
//! in the background (double buffer), so `next()` does not wait on the store
//! in steady state.
//!
//! # Guarantees
//! - **Unique, always.** A range is handed out only after the CAS that
//!   reserved it was acknowledged. A reservation whose outcome is unknown is
//!   never reused: the gap is accepted, a duplicate never.
//! - **Monotonic per client** (per [`Sequence`] value and its clones): every
//!   id it returns is greater than every id it returned before.
//! - **Globally monotonic** (real-time order across clients) only with block
//!   size 1, where prefetch is off and each id is its own CAS.
//! - **Gaps**: a client that stops loses the rest of its block and of the
//!   prefetched one.
//!
//! # One client per process
//! Handles built in one process for the same store, name, node id and
//! settings are one client, as clones are: they serve the same blocks, so
//! a thousand handles (one per request, say) cost no more round trips and
//! leave no more gaps than one. The default node id is the process's own;
//! give each handle its own [`node_id`](SequenceBuilder::node_id) to make
//! them separate clients in one process (as tests of contention do).
//!
//! # Block size
//! By default the block adapts between 1,000 and 1,000,000 ids (Leaf's
//! dynamic step, with Leaf's largest step): it doubles while a block lasts
//! less than 30 s and halves when one lasts more than 2 minutes
//! ([`target_block_duration`](SequenceBuilder::target_block_duration),
//! 60 s). A slow client keeps blocks of 1,000, so a crash loses at most
//! 2,000 ids, as with a fixed block; a busy one grows its block until the
//! background prefetch outruns it, so it never waits on the store, and a
//! crash loses at most two blocks: about two minutes of its ids, never more
//! than 2,000,000. [`block_size`](SequenceBuilder::block_size) fixes the
//! size instead.
//!
//! ```
//! use std::sync::Arc;
//! use bakery_core::MemoryStore;
//! use bakery_recipes::sequence::Sequence;
//!
//! # #[tokio::main]
//! # async fn main() -> bakery_core::Result<()> {
//! let store = Arc::new(MemoryStore::new());
//! let orders = Sequence::builder(store.clone(), "orders").block_size(100).build()?;
//! let a = orders.next().await?;
//! let b = orders.next().await?;
//! assert!(b > a);
//! let batch = orders.next_batch(10).await?;
//! assert_eq!(batch.len(), 10);
//! assert!(batch.iter().all(|id| id > b));
//! # Ok(()) }
//! ```

mod handover;
mod row;
mod segment;

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use bakery_core::{Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use crate::id_batch::IdBatch;
pub use handover::{Closed, Raised};
use row::SequenceRow;
use segment::{Claim, Segments, MAX_SEGMENT};

use crate::per_process::{store_address, PerProcess};

/// The key prefix of sequence rows: sequence `orders` lives at `seq/orders`.
pub const KEY_PREFIX: &str = "seq";

/// The smallest block of the default adaptive size: what a slow client
/// reserves, so its crash loses no more than with the old fixed block.
pub const DEFAULT_MIN_BLOCK: u64 = 1_000;

/// The largest block of the default adaptive size (Leaf's `MAX_STEP`).
pub const DEFAULT_MAX_BLOCK: u64 = 1_000_000;

/// Conflicts tolerated in one reservation before giving up with
/// [`ErrorKind::Unavailable`]: a bound so contention can never spin forever.
const MAX_CONFLICTS: u32 = 100_000;

/// How a [`Sequence`] sizes the blocks it reserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockSize {
    /// Always reserve this many ids.
    Fixed(u64),
    /// Start at `min`; double when a block lasts less than half the target
    /// duration, halve when it lasts more than twice it (Leaf's dynamic step).
    Adaptive {
        /// Smallest block.
        min: u64,
        /// Largest block.
        max: u64,
    },
}

/// Configures and builds a [`Sequence`]; from [`Sequence::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct SequenceBuilder {
    store: Arc<dyn VersionedStore>,
    name: String,
    block: BlockSize,
    prefetch: bool,
    prefetch_at: f64,
    start: u64,
    node_id: Option<String>,
    target_block_duration: Duration,
}

bakery_core::setters! { SequenceBuilder {
    /// The time one block should last with adaptive sizing (default 60 s).
    target_block_duration(target_block_duration: Duration);
    /// Reserve the next block in the background (default on; always off at
    /// block size 1). Turn it off for short-lived processes, which would
    /// only waste the prefetched block.
    prefetch(prefetch: bool);
    /// Start the prefetch when this fraction of a block is used
    /// (default 0.2). [`build`](Self::build) refuses a value outside
    /// `0.0..=1.0` (or NaN) with [`ErrorKind::InvalidInput`].
    prefetch_at(prefetch_at: f64);
    /// The first id of a sequence this client creates (default 1). Ignored
    /// when the sequence exists already.
    start(start: u64);
    /// The node id recorded in the row with each reservation (default:
    /// `hostname:pid:random`, one per process). Handles of one process with
    /// different node ids are different clients; with the same node id and
    /// settings, they are one (see the [module docs](self)).
    node_id(node_id: impl Into<String>) Some;
}}

impl SequenceBuilder {
    /// Reserve `n` ids per round trip, always (default: adaptive, from
    /// [`DEFAULT_MIN_BLOCK`] to [`DEFAULT_MAX_BLOCK`]). `1` makes every id
    /// its own CAS: strictly increasing across all clients, and no prefetch.
    pub fn block_size(mut self, n: u64) -> Self {
        self.block = BlockSize::Fixed(n);
        self
    }

    /// Adapt the block size between `min` and `max` so that a block lasts
    /// about [`target_block_duration`](Self::target_block_duration).
    pub fn adaptive(mut self, min: u64, max: u64) -> Self {
        self.block = BlockSize::Adaptive { min, max };
        self
    }

    /// Validate the settings and build the sequence. No store call is made
    /// until the first id is asked for. A live handle of this process with
    /// the same store, name, node id and settings is joined instead of
    /// starting a second client (see the [module docs](self)).
    pub fn build(self) -> Result<Sequence> {
        let key = Key::with_prefix(KEY_PREFIX, &self.name)?;
        let (first, min, max) = match self.block {
            BlockSize::Fixed(n) => (n, n, n),
            BlockSize::Adaptive { min, max } => (min, min, max),
        };
        if min == 0 || min > max || max > MAX_SEGMENT {
            return Err(Error::invalid_input(
                "sequence",
                format!("block size must be within 1..={MAX_SEGMENT} (and min <= max); got {min}..={max}"),
            ));
        }
        if self.start == 0 {
            return Err(Error::invalid_input("sequence", "start must be >= 1"));
        }
        if !(0.0..=1.0).contains(&self.prefetch_at) {
            return Err(Error::invalid_input(
                "sequence",
                format!("prefetch_at must be within 0..=1; got {}", self.prefetch_at),
            ));
        }
        let node = match self.node_id {
            Some(node) => node,
            None => PROCESS_NODE_ID.clone(),
        };
        let slot = ClientSlot {
            store: store_address(&self.store),
            key: key.clone(),
            node: node.clone(),
            block: self.block,
            prefetch: self.prefetch,
            prefetch_at: self.prefetch_at.to_bits(),
            start: self.start,
            target: self.target_block_duration,
        };
        let handles = CLIENTS.get_or_create(slot, || {
            Arc::new(LastHandle(Arc::new(Inner {
                store: self.store,
                key,
                name: self.name,
                node,
                start: self.start,
                prefetch: self.prefetch && max > 1,
                prefetch_at: self.prefetch_at,
                bounds: (min, max),
                target: self.target_block_duration,
                segments: Segments::new(),
                refill: tokio::sync::Mutex::new(()),
                shared: Mutex::new(Shared {
                    pending: None,
                    block: first,
                    installed_at: None,
                    served_to: 0,
                    reserving_inline: false,
                    row: None,
                }),
                stats: Counters::default(),
            })))
        });
        Ok(Sequence {
            inner: handles.0.clone(),
            _handles: handles,
        })
    }
}

/// This process's node id: `hostname:pid:random` (the random part tells
/// apart two processes that reuse a pid).
static PROCESS_NODE_ID: LazyLock<String> = LazyLock::new(|| {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &random[..8])
});

/// Which client a handle belongs to: everything that makes two handles
/// behave differently.
#[derive(PartialEq, Eq, Hash)]
struct ClientSlot {
    store: usize,
    key: Key,
    node: String,
    block: BlockSize,
    prefetch: bool,
    /// `f64` bits (the builder refuses NaN).
    prefetch_at: u64,
    start: u64,
    target: Duration,
}

/// The live clients of this process, held by their handles.
static CLIENTS: LazyLock<PerProcess<ClientSlot, LastHandle>> = LazyLock::new(PerProcess::new);

/// A unique, monotonic id generator backed by one row in a
/// [`VersionedStore`]. Cheap to clone: clones share the blocks, so they are
/// one client (as are handles built alike in one process). See the
/// [module docs](self) for the guarantees.
#[derive(Clone)]
pub struct Sequence {
    inner: Arc<Inner>,
    /// Shared by the handles only (not by background tasks): when the last
    /// handle goes, the in-flight prefetch is aborted instead of outliving it.
    _handles: Arc<LastHandle>,
}

/// Aborts the background reservation when the last [`Sequence`] handle is
/// dropped. An aborted reservation is an unknown outcome: its ids, if they
/// were reserved, become a gap — never handed out.
struct LastHandle(Arc<Inner>);

impl Drop for LastHandle {
    fn drop(&mut self) {
        if let Ok(mut shared) = self.0.lock_shared() {
            if let Some(Pending::InFlight(handle)) = shared.pending.take() {
                handle.abort();
            }
        }
    }
}

impl fmt::Debug for Sequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sequence")
            .field("name", &self.inner.name)
            .field("node", &self.inner.node)
            .field("store", &self.inner.store.backend())
            .finish_non_exhaustive()
    }
}

struct Inner {
    store: Arc<dyn VersionedStore>,
    key: Key,
    name: String,
    node: String,
    start: u64,
    prefetch: bool,
    prefetch_at: f64,
    bounds: (u64, u64),
    target: Duration,
    segments: Segments,
    /// Serializes block switches (held across the store call that refills).
    refill: tokio::sync::Mutex<()>,
    /// Short critical sections only; never held across an await.
    shared: Mutex<Shared>,
    stats: Counters,
}

/// The next block, reserved in the background.
enum Pending {
    InFlight(JoinHandle<Result<Range<u64>>>),
    Ready(Result<Range<u64>>),
}

struct Shared {
    /// The reservation of the next block, started in the background.
    pending: Option<Pending>,
    /// Current block size (moves within `bounds` when adaptive).
    block: u64,
    installed_at: Option<Instant>,
    /// The end of the last installed block: no block below it is ever
    /// installed, so a prefetch that lost a race to a newer reservation
    /// (its trigger claimer was descheduled until the refill had begun)
    /// is dropped as a gap instead of served after higher ids.
    served_to: u64,
    /// A refill is reserving the next block itself (no prefetch was
    /// parked): no prefetch starts beside it.
    reserving_inline: bool,
    /// The last row seen, so a reservation starts with a CAS, not a read.
    row: Option<Row>,
}

#[derive(Default)]
struct Counters {
    reservations: AtomicU64,
    conflicts: AtomicU64,
    waits: AtomicU64,
    prefetches: AtomicU64,
    abandoned: AtomicU64,
}

/// What a [`Sequence`] has done so far (slow-path events only; the fast
/// path counts nothing so it stays fast).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SequenceStats {
    /// Blocks reserved (successful CAS operations).
    pub reservations: u64,
    /// Reservation attempts that met a conflict and retried.
    pub conflicts: u64,
    /// Times a caller had to wait for the store (no block was ready).
    pub waits: u64,
    /// Background reservations started.
    pub prefetches: u64,
    /// Reservations abandoned after an error (their ids, if reserved, are a gap).
    pub abandoned: u64,
}

/// The stored state of a sequence, from [`Sequence::inspect`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SequenceState {
    /// The sequence name.
    pub name: String,
    /// The first id that nobody has reserved yet.
    pub next: u64,
    /// The node that made the last reservation.
    pub node: String,
    /// The size of the last reservation.
    pub block_size: u64,
    /// The row version.
    pub version: u64,
    /// True when the sequence was handed back to the generator it was
    /// migrated from ([`Sequence::close`]): reservations fail until
    /// [`Sequence::raise`] reopens it.
    pub closed: bool,
}

impl Sequence {
    /// Start configuring the sequence `name` stored in `store`. Names follow
    /// the key rules of [`bakery_core::Key`] and contain no `/`.
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> SequenceBuilder {
        SequenceBuilder {
            store,
            name: name.to_string(),
            block: BlockSize::Adaptive {
                min: DEFAULT_MIN_BLOCK,
                max: DEFAULT_MAX_BLOCK,
            },
            prefetch: true,
            prefetch_at: 0.2,
            start: 1,
            node_id: None,
            target_block_duration: Duration::from_secs(60),
        }
    }

    /// The sequence name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The node id recorded with this client's reservations.
    pub fn node_id(&self) -> &str {
        &self.inner.node
    }

    /// The next id. Inside a block this is one atomic increment; otherwise it
    /// waits for the prefetched block or reserves one.
    #[inline]
    pub async fn next(&self) -> Result<u64> {
        loop {
            match self.inner.take(self.inner.segments.claim_one()) {
                Ok(range) => return Ok(range.start),
                // Boxed: the rare refill must not bloat the future of every
                // `next()` call (the fast path is a few nanoseconds).
                Err(generation) => Box::pin(self.inner.refill(generation, 1)).await?,
            }
        }
    }

    /// `n` ids at once, increasing; fewer round trips than `n` calls of
    /// [`next`](Self::next) when `n` exceeds what is left in the block (the
    /// refill then reserves at least what is still wanted).
    pub async fn next_batch(&self, n: u64) -> Result<IdBatch> {
        let mut batch = IdBatch::default();
        let mut wanted = n;
        while wanted > 0 {
            match self.inner.take(self.inner.segments.claim_many(wanted)) {
                Ok(range) => {
                    wanted -= range.end - range.start;
                    batch.push(range);
                }
                Err(generation) => Box::pin(self.inner.refill(generation, wanted)).await?,
            }
        }
        Ok(batch)
    }

    /// Reserve `size` consecutive ids straight from the store, for a caller
    /// that hands them out itself (a thin client of a service, as Tinyid's
    /// segments): one conditional write, not this handle's cached block. The
    /// range is above every id reserved before it, by anyone; the ids
    /// [`next`](Self::next) serves from a block reserved earlier may be lower.
    ///
    /// `size` must be at least 1. An error reserves nothing usable: when the
    /// outcome of the write is unknown, the range it may have taken is never
    /// handed out again, by this call or any other.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use bakery_core::MemoryStore;
    /// # use bakery_recipes::sequence::Sequence;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = Arc::new(MemoryStore::new());
    /// let orders = Sequence::builder(store, "orders").prefetch(false).build()?;
    /// let block = orders.reserve_block(1_000).await?;
    /// assert_eq!(block.end - block.start, 1_000);
    /// let next = orders.reserve_block(10).await?;
    /// assert_eq!(next.start, block.end);
    /// # Ok(()) }
    /// ```
    pub async fn reserve_block(&self, size: u64) -> Result<Range<u64>> {
        if size == 0 {
            return Err(Error::invalid_input(
                "sequence",
                format!("sequence {}: a block of 0 ids", self.inner.name),
            ));
        }
        self.inner.reserve(size).await
    }

    /// Counters of the slow path so far.
    pub fn stats(&self) -> SequenceStats {
        let c = &self.inner.stats;
        SequenceStats {
            reservations: c.reservations.load(Ordering::Relaxed),
            conflicts: c.conflicts.load(Ordering::Relaxed),
            waits: c.waits.load(Ordering::Relaxed),
            prefetches: c.prefetches.load(Ordering::Relaxed),
            abandoned: c.abandoned.load(Ordering::Relaxed),
        }
    }

    /// Wait until a background reservation in flight (if any) has finished.
    /// Useful before a burst, and in tests.
    pub async fn prefetched(&self) {
        let _switching = self.inner.refill.lock().await;
        let pending = self
            .inner
            .lock_shared()
            .ok()
            .and_then(|mut s| s.pending.take());
        if let Some(pending) = pending {
            let ready = Pending::Ready(pending.wait().await);
            if let Ok(mut shared) = self.inner.lock_shared() {
                shared.pending = Some(ready);
            }
        }
    }

    /// Read the stored state of sequence `name` (`None` if it was never used).
    pub async fn inspect(store: &dyn VersionedStore, name: &str) -> Result<Option<SequenceState>> {
        let key = Key::with_prefix(KEY_PREFIX, name)?;
        let Some(row) = store.get(&key).await? else {
            return Ok(None);
        };
        let stored = SequenceRow::decode(&row)?;
        Ok(Some(SequenceState {
            name: name.to_string(),
            next: stored.next,
            node: stored.node,
            block_size: stored.block,
            version: row.version,
            closed: stored.closed,
        }))
    }
}

/// Ends a refill's inline reservation however the refill ends (returned,
/// failed or cancelled), so prefetches start again.
struct InlineReservation<'a>(&'a Inner);

impl Drop for InlineReservation<'_> {
    fn drop(&mut self) {
        if let Ok(mut shared) = self.0.lock_shared() {
            shared.reserving_inline = false;
        }
    }
}

impl Pending {
    fn is_finished(&self) -> bool {
        match self {
            Pending::InFlight(handle) => handle.is_finished(),
            Pending::Ready(_) => true,
        }
    }

    async fn wait(self) -> Result<Range<u64>> {
        match self {
            Pending::Ready(result) => result,
            Pending::InFlight(handle) => handle.await.unwrap_or_else(|e| {
                Err(Error::new(
                    ErrorKind::Internal,
                    "sequence",
                    format!("prefetch task died: {e}"),
                ))
            }),
        }
    }
}

impl Inner {
    fn lock_shared(&self) -> Result<MutexGuard<'_, Shared>> {
        self.shared
            .lock()
            .map_err(|_| Error::new(ErrorKind::Internal, "sequence", "state mutex poisoned"))
    }

    /// Offset in a block of `len` at which to start the next prefetch.
    fn trigger_for(&self, len: u64) -> u64 {
        if self.prefetch {
            ((len as f64 * self.prefetch_at) as u64).min(len.saturating_sub(1))
        } else {
            u64::MAX
        }
    }

    /// The ids of `claim` (starting the prefetch if it crossed the
    /// trigger), or the generation whose block is used up.
    #[inline]
    fn take(self: &Arc<Self>, claim: Claim) -> std::result::Result<Range<u64>, u64> {
        match claim {
            Claim::Ids {
                range,
                crossed_trigger,
            } => {
                if crossed_trigger {
                    self.start_prefetch();
                }
                Ok(range)
            }
            Claim::Exhausted { generation } => Err(generation),
        }
    }

    /// Reserve the next block in the background, unless one is in flight.
    fn start_prefetch(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return; // no runtime to run it on: the refill will reserve inline
        };
        let Ok(mut shared) = self.lock_shared() else {
            return;
        };
        // A refill reserving inline gets the next block itself: a prefetch
        // beside it (its trigger claimer descheduled until the block ran
        // out) would race it for the row.
        if shared.pending.is_some() || shared.reserving_inline {
            return;
        }
        let size = shared.block;
        let inner = Arc::clone(self);
        self.stats.prefetches.fetch_add(1, Ordering::Relaxed);
        shared.pending = Some(Pending::InFlight(
            handle.spawn(async move { inner.reserve(size).await }),
        ));
    }

    /// Install a new block once the block of `seen` is used up.
    async fn refill(self: &Arc<Self>, seen: u64, wanted: u64) -> Result<()> {
        let _switching = self.refill.lock().await;
        if self.segments.generation() != seen {
            return Ok(()); // another caller installed a block meanwhile
        }
        self.adapt_block_size()?;
        let (pending, size) = {
            let mut shared = self.lock_shared()?;
            let pending = shared.pending.take();
            // Set with the take, under one lock: a prefetch that did not
            // start by now does not start until this refill is done.
            shared.reserving_inline = pending.is_none();
            (pending, shared.block.max(wanted.min(MAX_SEGMENT)))
        };
        let _inline = InlineReservation(self);
        let ids = match pending {
            Some(pending) => {
                if !pending.is_finished() {
                    self.stats.waits.fetch_add(1, Ordering::Relaxed);
                    crate::metrics::sequence_waited(&self.name);
                }
                match pending.wait().await {
                    Ok(ids) => ids,
                    // The background reservation failed: try once more here,
                    // so the caller sees the error only if the store is down.
                    Err(e) => {
                        tracing::debug!(sequence = %self.name, error = %e, "prefetch failed");
                        self.lock_shared()?.reserving_inline = true;
                        self.reserve(size).await?
                    }
                }
            }
            None => {
                self.stats.waits.fetch_add(1, Ordering::Relaxed);
                crate::metrics::sequence_waited(&self.name);
                self.reserve(size).await?
            }
        };
        let served_to = self.lock_shared()?.served_to;
        let ids = if ids.start < served_to {
            tracing::debug!(
                sequence = %self.name,
                stale = ?ids,
                served_to,
                "prefetched block is older than the one served: dropped as a gap"
            );
            self.lock_shared()?.reserving_inline = true;
            self.reserve(size).await?
        } else {
            ids
        };
        if ids.start < served_to {
            // A fresh reservation starts at the stored `next`, which only
            // grows: below what this client served, the row went backwards.
            return Err(Error::corrupt(
                "sequence",
                format!(
                    "sequence {} reserved {ids:?} below ids it already handed out \
                     (up to {served_to}): its row was lowered",
                    self.name
                ),
            ));
        }
        let trigger = self.trigger_for(ids.end - ids.start);
        {
            let mut shared = self.lock_shared()?;
            shared.installed_at = Some(Instant::now());
            shared.served_to = ids.end;
            // Before the install: the claim that crosses the new block's
            // trigger may come at once, from another thread.
            shared.reserving_inline = false;
        }
        self.segments.install(ids, trigger);
        Ok(())
    }

    /// Adaptive sizing: compare how long the block just used up lasted
    /// with the target, before sizing the next reservation.
    fn adapt_block_size(&self) -> Result<()> {
        let (min, max) = self.bounds;
        let mut shared = self.lock_shared()?;
        if let Some(then) = shared.installed_at {
            let lasted = then.elapsed();
            if lasted < self.target / 2 {
                shared.block = shared.block.saturating_mul(2).min(max);
            } else if lasted > self.target * 2 {
                shared.block = (shared.block / 2).max(min);
            }
        }
        Ok(())
    }

    /// Reserve `size` ids with one CAS (more on conflict, each retry using
    /// the row the conflict returned). Returns the reserved range.
    async fn reserve(&self, size: u64) -> Result<Range<u64>> {
        let mut current = self.lock_shared()?.row.clone();
        let mut conflicts = 0u32;
        loop {
            let (first, expected) = match &current {
                Some(row) => (
                    SequenceRow::decode(row)?.open(&self.name)?.next,
                    Some(row.version),
                ),
                None => (self.start, None),
            };
            let end = first.checked_add(size).ok_or_else(|| {
                Error::new(
                    ErrorKind::Exhausted,
                    "sequence",
                    format!(
                        "sequence {} cannot reserve {size} more ids past {first}",
                        self.name
                    ),
                )
            })?;
            let value = SequenceRow {
                next: end,
                node: self.node.clone(),
                block: size,
                closed: false,
            }
            .encode()?;
            match self.store.put_if_version(&self.key, expected, value).await {
                Ok(PutOutcome::Applied(row)) => {
                    self.stats.reservations.fetch_add(1, Ordering::Relaxed);
                    crate::metrics::sequence_reserved(&self.name, size);
                    self.lock_shared()?.row = Some(row);
                    return Ok(first..end);
                }
                Ok(PutOutcome::Conflict(None)) if expected.is_some() => {
                    // Starting over at `start` could repeat ids handed out
                    // before the row vanished: refuse loudly instead.
                    return Err(Error::corrupt(
                        "sequence",
                        format!(
                            "sequence row {} was deleted while in use (it was at {first}); \
                             refusing to restart it",
                            self.key
                        ),
                    ));
                }
                Ok(PutOutcome::Conflict(now)) => {
                    self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                    conflicts += 1;
                    if conflicts >= MAX_CONFLICTS {
                        return Err(Error::new(
                            ErrorKind::Unavailable,
                            "sequence",
                            format!(
                                "sequence {}: gave up after {conflicts} conflicting reservations",
                                self.name
                            ),
                        ));
                    }
                    current = now;
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    // Never hand out a range whose reservation may or may not
                    // have applied. The cached row stays as it was: a retry
                    // CASes at the same version, so at most one of the two
                    // writes can ever apply and the ids stay unique.
                    self.stats.abandoned.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bakery_core::MemoryStore;

    fn sequence(name: &str) -> Sequence {
        Sequence::builder(Arc::new(MemoryStore::new()), name)
            .block_size(3)
            .prefetch(false) // prefetches are started by hand below
            .build()
            .expect("valid")
    }

    /// The prefetch's trigger claimer can be descheduled until its block
    /// has run out and a refill is reserving the next one: a prefetch
    /// started then would race that refill for the row. It is not started.
    #[tokio::test]
    async fn a_prefetch_does_not_start_beside_a_refill() {
        let seq = sequence("no-prefetch-beside-refill");
        assert_eq!(seq.next().await.expect("id"), 1);
        {
            let _refilling = InlineReservation(&seq.inner);
            seq.inner.lock_shared().expect("state").reserving_inline = true;
            seq.inner.start_prefetch();
            assert_eq!(seq.stats().prefetches, 0);
            assert!(seq.inner.lock_shared().expect("state").pending.is_none());
        }
        seq.inner.start_prefetch();
        assert_eq!(seq.stats().prefetches, 1);
        seq.prefetched().await;
        assert_eq!(
            [seq.next().await, seq.next().await, seq.next().await].map(|id| id.expect("id")),
            [2, 3, 4],
            "the prefetched block follows the installed one"
        );
    }

    /// A block reserved before the one being served (a prefetch that lost
    /// the race above, parked in `pending`) is dropped as a gap: the client
    /// never hands out an id below one it handed out before.
    #[tokio::test]
    async fn an_older_parked_block_is_never_served_after_newer_ids() {
        let seq = sequence("older-block-dropped");
        for want in 1..=3 {
            assert_eq!(seq.next().await.expect("id"), want);
        }
        let stale = seq.inner.reserve(3).await.expect("reserve");
        assert_eq!(stale, 4..7);
        // The refill, not seeing the stale block, reserves its own.
        assert_eq!(seq.next().await.expect("id"), 7);
        seq.inner.lock_shared().expect("state").pending = Some(Pending::Ready(Ok(stale)));
        let mut ids = vec![7];
        for _ in 0..4 {
            ids.push(seq.next().await.expect("id"));
        }
        assert_eq!(ids, [7, 8, 9, 10, 11], "4..7 must not come after 9");
        assert_eq!(seq.stats().reservations, 4, "1..4, 4..7, 7..10, 10..13");
    }
}
