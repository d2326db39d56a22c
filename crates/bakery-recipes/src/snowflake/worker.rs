//! Worker ids as leased slots: slot `w` of snowflake `NAME` is the lock
//! `snowflake.NAME.w<w>` (the fair lock: a lease renewed in the
//! background, eviction after a lease of silence, a fencing token per
//! grant), beside the slot's mark row `snowflake/NAME.w<w>`: the last tick
//! its holders may use, written with the holder's token before use.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{Bytes, Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::layout::Layout;
use super::KEY_PREFIX;
use crate::lock::{Lock, LockGuard};

/// The settings a slot is leased with (from the snowflake's builder).
#[derive(Debug, Clone)]
pub(crate) struct SlotSettings {
    pub(crate) lease: Duration,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) owner: Option<String>,
}

/// The mark row's value.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Mark {
    /// The token of the grant that wrote it.
    token: u64,
    /// The last tick the slot's holders may have used (inclusive).
    until: u64,
}

/// The name of slot `worker`'s lock.
pub(crate) fn lock_name(name: &str, worker: u32) -> String {
    format!("{KEY_PREFIX}.{name}.w{worker}")
}

/// The key of slot `worker`'s mark row.
pub(crate) fn mark_key(name: &str, worker: u32) -> Result<Key> {
    Key::with_prefix(KEY_PREFIX, &format!("{name}.w{worker}"))
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
        match store.put_if_version(key, None, Bytes::from(value)).await? {
            PutOutcome::Applied(_) => return Ok(()),
            PutOutcome::Conflict(current) => row = current,
        }
    }
}

/// The layout stored in `row`.
pub(crate) fn parse_layout(key: &Key, row: &Row) -> Result<Layout> {
    serde_json::from_slice(&row.value)
        .map_err(|e| Error::corrupt(KEY_PREFIX, format!("{key} is not a snowflake layout: {e}")))
}

/// A leased worker id and its mark.
pub(crate) struct Slot {
    pub(crate) worker: u32,
    guard: LockGuard,
    key: Key,
    store: Arc<dyn VersionedStore>,
    /// The last tick the slot's earlier holders may have used, read when
    /// it was leased.
    inherited: Option<u64>,
    /// The mark row as last written or read.
    mark: Mutex<MarkRow>,
    /// Margin kept before the lease's end.
    margin: Duration,
    /// An id was issued since the keeper's last write.
    pub(crate) used: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct MarkRow {
    version: Option<bakery_core::Version>,
    /// The last tick reserved for this holder: `None` until its first
    /// reservation applied.
    ours: Option<u64>,
}

impl Slot {
    /// The first tick this holder may use: above every tick the slot's
    /// earlier holders may have used.
    pub(crate) fn floor(&self) -> u64 {
        self.inherited.map_or(0, |until| until.saturating_add(1))
    }

    /// The last tick reserved for this holder; `None` before its first
    /// reservation.
    pub(crate) fn until(&self) -> Option<u64> {
        self.mark_row().ours
    }

    fn mark_row(&self) -> MarkRow {
        *self
            .mark
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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

    /// Store `until` as the last tick this holder may use: conditioned on
    /// the mark row it last saw, with its token. [`ErrorKind::Lost`] when
    /// a later holder of the slot wrote it.
    pub(crate) async fn reserve(&self, until: u64) -> Result<()> {
        let token = self.token();
        let value = serde_json::to_vec(&Mark { token, until })
            .map_err(|e| Error::new(ErrorKind::Internal, KEY_PREFIX, e.to_string()))?;
        let value = Bytes::from(value);
        loop {
            let seen = self.mark_row();
            match self
                .store
                .put_if_version(&self.key, seen.version, value.clone())
                .await?
            {
                PutOutcome::Applied(row) => {
                    self.keep(MarkRow {
                        version: Some(row.version),
                        ours: Some(until),
                    });
                    return Ok(());
                }
                PutOutcome::Conflict(row) => {
                    let current = match &row {
                        Some(row) => Some(parse_mark(&self.key, row)?),
                        None => None,
                    };
                    // Our own earlier write whose answer was lost, or a row
                    // deleted under us: go on from the row as it is.
                    if let Some(mark) = current {
                        if mark.token > token {
                            return Err(Error::new(
                                ErrorKind::Lost,
                                KEY_PREFIX,
                                format!(
                                    "worker id {} of {} was taken over (token {} > ours, {token})",
                                    self.worker, self.key, mark.token
                                ),
                            ));
                        }
                    }
                    self.keep(MarkRow {
                        version: row.as_ref().map(|row| row.version),
                        ours: current
                            .filter(|mark| mark.token == token)
                            .map(|mark| mark.until)
                            .or(seen.ours),
                    });
                }
            }
        }
    }

    fn keep(&self, row: MarkRow) {
        *self
            .mark
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = row;
    }

    /// Give the slot back: first shrink the mark to `last_used` (the last
    /// tick this holder used, if any), so the next holder need not wait
    /// for its clock to pass the reservation; then release the lock.
    pub(crate) async fn release(self, last_used: Option<u64>) -> Result<()> {
        if let (Some(last), Some(_)) = (last_used, self.until()) {
            if self.usable() {
                // A failure only leaves the longer reservation in place.
                if let Err(err) = self.reserve(last).await {
                    tracing::debug!(slot = %self.key, error = %err, "mark not shrunk at release");
                }
            }
        }
        match self.guard.release().await {
            // Lost already (its lease ran out, a waiter took it over): the
            // ids were all issued within the lease, and nothing is held.
            Err(err) if err.kind() == ErrorKind::Lost => Ok(()),
            other => other,
        }
    }
}

/// The mark stored in `row`.
fn parse_mark(key: &Key, row: &Row) -> Result<Mark> {
    serde_json::from_slice(&row.value)
        .map_err(|e| Error::corrupt(KEY_PREFIX, format!("{key} is not a snowflake mark: {e}")))
}

/// Lease the lowest free worker id of snowflake `name`: try each slot's
/// lock in turn without waiting; when every slot is held, wait (at most
/// `acquire_timeout`) for whichever of up to [`WAITED_AT_ONCE`] of them is
/// granted first (a waiter evicts a holder silent for a whole lease).
pub(crate) async fn lease(
    store: &Arc<dyn VersionedStore>,
    name: &str,
    layout: Layout,
    settings: &SlotSettings,
) -> Result<Slot> {
    let lock = |worker: u32| -> Result<Lock> {
        let builder = Lock::builder(store.clone(), &lock_name(name, worker)).lease(settings.lease);
        match &settings.owner {
            Some(owner) => builder.owner(owner.clone()),
            None => builder,
        }
        .build()
    };
    for worker in 0..layout.workers() {
        if let Some(guard) = lock(worker)?.try_acquire().await? {
            return claim(store, name, worker, guard, settings.lease).await;
        }
    }
    // Every slot is held: wait on some of them, from a random one on, so
    // that waiting processes spread over the slots.
    let workers = layout.workers();
    let start = rand::random::<u32>() % workers;
    let mut waits = tokio::task::JoinSet::new();
    for i in 0..workers.min(WAITED_AT_ONCE) {
        let worker = (start + i) % workers;
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
    claim(store, name, worker, guard, settings.lease).await
}

/// Most slots waited on at once when all are held.
pub const WAITED_AT_ONCE: u32 = 64;

/// Read slot `worker`'s mark under its new `guard`.
async fn claim(
    store: &Arc<dyn VersionedStore>,
    name: &str,
    worker: u32,
    guard: LockGuard,
    lease: Duration,
) -> Result<Slot> {
    let key = mark_key(name, worker)?;
    let row = store.get(&key).await?;
    let inherited = match &row {
        Some(row) => {
            let mark = parse_mark(&key, row)?;
            if mark.token >= guard.token() {
                return Err(Error::corrupt(
                    KEY_PREFIX,
                    format!(
                        "{key} was written with token {}, not below the new grant's {}",
                        mark.token,
                        guard.token()
                    ),
                ));
            }
            Some(mark.until)
        }
        None => None,
    };
    Ok(Slot {
        worker,
        guard,
        key,
        store: store.clone(),
        inherited,
        mark: Mutex::new(MarkRow {
            version: row.map(|row| row.version),
            ours: None,
        }),
        margin: lease / 10,
        used: AtomicBool::new(false),
    })
}
