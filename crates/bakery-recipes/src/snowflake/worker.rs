//! Worker ids as leased slots: slot `w` of snowflake `NAME` is the lock
//! `snowflake.NAME.w<w>` (the fair lock: a lease renewed in the
//! background, eviction after a lease of silence, a fencing token per
//! grant); the lock's row also keeps the slot's mark, the last tick its
//! holders may use, raised by the holder's heartbeat before use.

use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Bytes, Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use tokio::time::Instant;

use super::layout::Layout;
use super::{Clock, KEY_PREFIX};
use crate::lock::{Lock, LockGuard};

/// The settings a slot is leased with (from the snowflake's builder).
#[derive(Debug, Clone)]
pub(crate) struct SlotSettings {
    pub(crate) lease: Duration,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) owner: Option<String>,
}

/// The name of slot `worker`'s lock.
pub(crate) fn lock_name(name: &str, worker: u32) -> String {
    format!("{KEY_PREFIX}.{name}.w{worker}")
}

/// The key of slot `worker`'s lock row.
pub(crate) fn lock_key(name: &str, worker: u32) -> Result<Key> {
    Key::with_prefix(crate::lock::KEY_PREFIX, &lock_name(name, worker))
}

/// The key of the row holding the snowflake's layout.
pub(crate) fn layout_key(name: &str) -> Result<Key> {
    Key::with_prefix(KEY_PREFIX, name)
}

/// Store `layout` as the snowflake's, or check it against the stored one:
/// two layouts on one name would issue the same ids.
pub(crate) async fn settle_layout(
    store: &dyn VersionedStore,
    key: &Key,
    layout: Layout,
) -> Result<()> {
    let mut row = store.get(key).await?;
    loop {
        if let Some(row) = &row {
            let stored = parse_layout(key, row)?;
            if stored != layout {
                return Err(Error::config(
                    KEY_PREFIX,
                    format!(
                        "{key} was created with another layout ({stored}); this client has {layout}: \
                         every client of one snowflake needs the same layout"
                    ),
                ));
            }
            return Ok(());
        }
        let value = serde_json::to_vec(&layout)
            .map_err(|e| Error::new(ErrorKind::Internal, KEY_PREFIX, e.to_string()))?;
        match store.put_if_version(key, None, Bytes::from(value)).await {
            Ok(PutOutcome::Applied(_)) => return Ok(()),
            Ok(PutOutcome::Conflict(current)) => row = current,
            // Creating it again is harmless: the read says if it applied.
            Err(err) if err.kind() == ErrorKind::Unknown => row = store.get(key).await?,
            Err(err) => return Err(err),
        }
    }
}

/// The layout stored in `row`.
pub(crate) fn parse_layout(key: &Key, row: &Row) -> Result<Layout> {
    serde_json::from_slice(&row.value)
        .map_err(|e| Error::corrupt(KEY_PREFIX, format!("{key} is not a snowflake layout: {e}")))
}

/// A leased worker id. Its lock's row keeps the slot's mark (the lock's
/// `QueueState::mark`): the last tick its holders may use, raised by each
/// heartbeat ahead of use, set to the last tick used at release, and kept
/// through evictions, so the next holder starts above it.
pub(crate) struct Slot {
    pub(crate) worker: u32,
    guard: LockGuard,
    /// Margin kept before the lease's end.
    margin: Duration,
}

impl Slot {
    /// The first tick this holder may use: above every tick the slot's
    /// earlier holders may have used.
    pub(crate) fn floor(&self) -> u64 {
        self.guard
            .0
            .granted_mark()
            .map_or(0, |until| until.saturating_add(1))
    }

    /// The last tick stored for this holder; `None` before its first
    /// beat with a mark.
    pub(crate) fn until(&self) -> Option<u64> {
        self.guard.0.stored_mark()
    }

    /// Still this process's, with a margin before its lease could end as
    /// anyone else sees it.
    pub(crate) fn usable(&self) -> bool {
        self.guard.is_held() && Instant::now() + self.margin < self.guard.0.lease_ends()
    }

    /// The fencing token of the slot's grant.
    pub(crate) fn token(&self) -> u64 {
        self.guard.token()
    }

    /// Beat now, storing a mark of at least `tick` (the beat's mark is a
    /// lease past the clock). [`ErrorKind::Lost`] when the slot was lost.
    pub(crate) async fn reserve(&self, tick: u64) -> Result<()> {
        self.guard.0.store_mark(tick).await
    }

    /// Give the slot back, its mark set to `last_used` (the last tick this
    /// holder used) in the release's write, so the next holder need not
    /// wait for its clock to pass a mark set ahead.
    pub(crate) async fn release(self, last_used: Option<u64>) -> Result<()> {
        let released = if self.until().is_some() {
            // Its beats raised the mark: set it back to what was used (0,
            // "nothing", when no holder ever issued an id on the slot).
            let used = last_used.or(self.guard.0.granted_mark()).unwrap_or(0);
            self.guard.0.release_with_mark(used).await
        } else {
            self.guard.release().await
        };
        match released {
            // Lost already (its lease ran out, a waiter took it over): the
            // ids were all issued within the lease, and nothing is held.
            Err(err) if err.kind() == ErrorKind::Lost => Ok(()),
            other => other,
        }
    }
}

/// Lease the lowest usable worker id of snowflake `name`: try each slot's
/// lock in turn without waiting, passing over (released again, its mark
/// kept) a free slot whose mark is more than `max_clock_wait` ahead of
/// `clock`, which could issue nothing for that long; when every slot is
/// held, or held or passed over, wait (at most `acquire_timeout`) for
/// whichever of up to [`WAITED_AT_ONCE`] held ones is granted first (a
/// waiter evicts a holder silent for a whole lease). When none is held,
/// every slot was passed over: [`ErrorKind::TimedOut`] at once.
pub(crate) async fn lease(
    store: &Arc<dyn VersionedStore>,
    name: &str,
    layout: Layout,
    settings: &SlotSettings,
    max_clock_wait: Duration,
    clock: &Arc<dyn Clock>,
) -> Result<Slot> {
    let lock = |worker: u32| -> Result<Lock> {
        let builder = Lock::builder(store.clone(), &lock_name(name, worker)).lease(settings.lease);
        match &settings.owner {
            Some(owner) => builder.owner(owner.clone()),
            None => builder,
        }
        .build()
    };
    let usable = |worker: u32, guard: LockGuard| async move {
        let ahead = mark_ahead(&guard, layout, &**clock);
        if ahead <= max_clock_wait {
            return Ok(Some(guard));
        }
        // Some clock is wrong: this machine's is behind, or that of a
        // process that used the slot was ahead.
        tracing::warn!(
            snowflake = %name, worker, ahead = ?ahead, ?max_clock_wait,
            "worker id passed over: its mark is further ahead of this clock than max_clock_wait \
             (this clock is behind, or one that used it was ahead)"
        );
        // A release without a mark keeps the row's.
        guard.release().await?;
        Ok::<_, Error>(None)
    };
    let workers = layout.workers();
    let mut held = Vec::new();
    let mut ahead = 0;
    for worker in 0..workers {
        match lock(worker)?.try_acquire().await? {
            Some(guard) => match usable(worker, guard).await? {
                Some(guard) => return Ok(claim(worker, guard, settings, layout, clock)),
                None => ahead += 1,
            },
            None => held.push(worker),
        }
    }
    let unusable = |held: usize, ahead: u32, waited: Option<Duration>| {
        let waited = waited.map_or_else(String::new, |limit| {
            format!(", and none held was freed within {limit:?}")
        });
        Error::new(
            ErrorKind::TimedOut,
            KEY_PREFIX,
            format!(
                "no worker id of snowflake {name} is usable: of its {workers}, {held} held and \
                 {ahead} free but marked more than max_clock_wait ({max_clock_wait:?}) ahead of \
                 this clock{waited}: some clock is wrong (this machine's is behind, or that of a \
                 process that used them was ahead); fix it, or wait for this clock to pass the \
                 marks"
            ),
        )
    };
    if held.is_empty() {
        return Err(unusable(0, ahead, None));
    }
    // Every slot is held or passed over: wait on some of those held, from
    // a random one on, so that waiting processes spread over the slots.
    let start = rand::random::<u32>() as usize % held.len();
    let mut waits = tokio::task::JoinSet::new();
    for i in 0..held.len().min(WAITED_AT_ONCE as usize) {
        let worker = held[(start + i) % held.len()];
        let lock = lock(worker)?;
        waits.spawn(async move { (worker, lock.acquire().await) });
    }
    let first_grant = async {
        let mut last_error = None;
        while let Some(joined) = waits.join_next().await {
            match joined {
                Ok((worker, Ok(guard))) => return Ok((worker, guard)),
                Ok((_, Err(err))) => last_error = Some(err),
                Err(join) => {
                    last_error = Some(Error::new(
                        ErrorKind::Internal,
                        KEY_PREFIX,
                        join.to_string(),
                    ))
                }
            }
        }
        Err(last_error
            .unwrap_or_else(|| Error::new(ErrorKind::Internal, KEY_PREFIX, "no slot to wait on")))
    };
    let granted = match settings.acquire_timeout {
        Some(limit) => tokio::time::timeout(limit, first_grant).await.map_err(|_| {
            if ahead > 0 {
                return unusable(held.len(), ahead, Some(limit));
            }
            Error::new(
                ErrorKind::TimedOut,
                KEY_PREFIX,
                format!(
                    "all {workers} worker ids of snowflake {name} are leased ({} worker bits) and none \
                     was freed within {limit:?}: stop a worker, or give the layout more worker bits",
                    layout.bits().1
                ),
            )
        })?,
        None => first_grant.await,
    };
    // The other waits are withdrawn as their tasks are dropped here.
    waits.abort_all();
    let (worker, guard) = granted?;
    match usable(worker, guard).await? {
        Some(guard) => Ok(claim(worker, guard, settings, layout, clock)),
        None => Err(unusable(held.len() - 1, ahead + 1, None)),
    }
}

/// How far the first tick `guard`'s holder may use (above the mark it was
/// granted with) is ahead of `clock`: what it would wait for.
fn mark_ahead(guard: &LockGuard, layout: Layout, clock: &dyn Clock) -> Duration {
    let Some(mark) = guard.0.granted_mark() else {
        return Duration::ZERO;
    };
    let first_ms = layout.unix_ms_of(mark.saturating_add(1));
    Duration::from_millis(first_ms.saturating_sub(clock.unix_ms()))
}

/// Most slots waited on at once when all are held.
pub const WAITED_AT_ONCE: u32 = 64;

/// Slot `worker` under its new `guard`: its beats carry a mark a lease
/// past the clock.
fn claim(
    worker: u32,
    guard: LockGuard,
    settings: &SlotSettings,
    layout: Layout,
    clock: &Arc<dyn Clock>,
) -> Slot {
    let ahead = layout.ticks_in(settings.lease);
    let clock = clock.clone();
    guard.0.mark_with(move || {
        let now = layout.tick_of(clock.unix_ms()).unwrap_or(0);
        now.saturating_add(ahead).min(layout.max_tick())
    });
    Slot {
        worker,
        guard,
        margin: settings.lease / 10,
    }
}
