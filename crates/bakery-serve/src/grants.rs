//! The lock family as the service holds it for its sessions: which recipe
//! a request names, how the grant is taken, and the held grant itself.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bakery::{
    Election, ErrorKind, Lock, LockGuard, LockState, Permit, ReadGuard, RwLock, Semaphore,
    VersionedStore, WriteGuard,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;

/// The recipes a session can hold grants of (the path's `{family}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Fair locks: one holder.
    Locks,
    /// Semaphores: up to `permits` holders.
    Semaphores,
    /// RW locks: one writer or many readers.
    Rwlocks,
    /// Leader elections: the holder is the leader.
    Elections,
}

impl Family {
    /// As the path names it.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Family::Locks => "locks",
            Family::Semaphores => "semaphores",
            Family::Rwlocks => "rwlocks",
            Family::Elections => "elections",
        }
    }

    /// The singular, for messages.
    pub(crate) fn one(self) -> &'static str {
        match self {
            Family::Locks => "lock",
            Family::Semaphores => "semaphore",
            Family::Rwlocks => "RW lock",
            Family::Elections => "election",
        }
    }
}

/// An RW lock's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

/// How to take a grant: what the request asked for, checked.
pub(crate) struct Ask {
    pub(crate) family: Family,
    pub(crate) name: String,
    pub(crate) lease: Duration,
    pub(crate) owner: String,
    pub(crate) data: Option<String>,
    pub(crate) permits: Option<u32>,
    pub(crate) mode: Option<Mode>,
}

/// A grant the service holds for a session. Its recipe guard renews the
/// store-side lease until it is released or dropped.
#[derive(Debug)]
pub(crate) enum Held {
    Lock(LockGuard),
    Permit(Permit),
    Read(ReadGuard),
    Write(WriteGuard),
}

/// Each guard type has the same three calls; this picks the variant's.
macro_rules! on_guard {
    ($held:expr, $guard:ident => $body:expr) => {
        match $held {
            Held::Lock($guard) => $body,
            Held::Permit($guard) => $body,
            Held::Read($guard) => $body,
            Held::Write($guard) => $body,
        }
    };
}

impl Held {
    pub(crate) fn token(&self) -> u64 {
        on_guard!(self, guard => guard.token())
    }

    /// False once the guard learned the grant is no longer its own.
    pub(crate) fn is_held(&self) -> bool {
        on_guard!(self, guard => guard.is_held())
    }

    pub(crate) async fn release(self) -> bakery::Result<()> {
        on_guard!(self, guard => guard.release().await)
    }
}

/// A recipe handle made for a session's requests. Kept between them (see
/// [`Ask::key`]): a handle remembers the row it last saw, so the next
/// acquire is one conditional write instead of a read and a write.
#[derive(Clone)]
pub(crate) enum Handle {
    Lock(Lock),
    Semaphore(Semaphore),
    RwLock(RwLock),
    Election(Election),
}

/// What makes two asks share a handle: everything a handle is built with.
pub(crate) type HandleKey = (Family, String, Option<u32>, Option<String>, Option<u64>);

impl Ask {
    /// The handle key of this ask waiting `wait`.
    pub(crate) fn key(&self, wait: Option<Duration>) -> HandleKey {
        let wait_ms = wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX));
        (
            self.family,
            self.name.clone(),
            self.permits,
            self.data.clone(),
            wait_ms,
        )
    }

    /// Build the recipe handle: a wait `wait` (none: try only) is its
    /// acquire timeout.
    pub(crate) fn handle(
        &self,
        store: Arc<dyn VersionedStore>,
        wait: Option<Duration>,
    ) -> Result<Handle, ApiError> {
        let name = self.name.as_str();
        // Every recipe's builder has these setters.
        macro_rules! configure {
            ($builder:expr) => {{
                let builder = $builder.lease(self.lease).owner(self.owner.clone());
                match wait {
                    Some(limit) => builder.acquire_timeout(limit),
                    None => builder,
                }
            }};
        }
        Ok(match self.family {
            Family::Locks => {
                let mut builder = configure!(Lock::builder(store, name));
                if let Some(data) = &self.data {
                    builder = builder.data(data.clone());
                }
                Handle::Lock(builder.build()?)
            }
            Family::Semaphores => {
                let permits = self.permits.ok_or_else(|| {
                    ApiError::invalid_input("a semaphore needs `permits`: how many may hold it")
                })?;
                Handle::Semaphore(
                    configure!(Semaphore::builder(store, name))
                        .permits(permits)
                        .build()?,
                )
            }
            Family::Rwlocks => {
                if self.mode.is_none() {
                    return Err(ApiError::invalid_input(
                        "an RW lock needs `mode`: \"read\" or \"write\"",
                    ));
                }
                Handle::RwLock(configure!(RwLock::builder(store, name)).build()?)
            }
            Family::Elections => {
                let mut builder = Election::builder(store, name)
                    .lease(self.lease)
                    .owner(self.owner.clone());
                if let Some(limit) = wait {
                    builder = builder.campaign_timeout(limit);
                }
                if let Some(value) = &self.data {
                    builder = builder.value(value.clone());
                }
                Handle::Election(builder.build()?)
            }
        })
    }
}

impl Handle {
    /// Wait for the grant (`wait`: the handle's timeout), or with `wait`
    /// false take it only if free now. `Ok(None)`: not granted (busy, or
    /// the wait ran out).
    pub(crate) async fn take(
        &self,
        mode: Option<Mode>,
        wait: bool,
    ) -> Result<Option<Held>, ApiError> {
        let taken = match self {
            Handle::Lock(lock) => {
                granted(wait, lock.acquire(), lock.try_acquire(), Held::Lock).await
            }
            Handle::Semaphore(semaphore) => {
                granted(
                    wait,
                    semaphore.acquire(),
                    semaphore.try_acquire(),
                    Held::Permit,
                )
                .await
            }
            Handle::RwLock(rwlock) => match mode {
                Some(Mode::Read) => {
                    granted(wait, rwlock.read(), rwlock.try_read(), Held::Read).await
                }
                _ => granted(wait, rwlock.write(), rwlock.try_write(), Held::Write).await,
            },
            Handle::Election(election) => {
                let lead =
                    |leadership: bakery::Leadership| Held::Lock(leadership.into_lock_guard());
                granted(wait, election.campaign(), election.try_campaign(), lead).await
            }
        };
        taken.map_err(asked_otherwise)
    }
}

/// Run the waiting or the trying call (only the one chosen is polled), a
/// timeout of the waiting one being "not granted".
async fn granted<G>(
    wait: bool,
    acquire: impl Future<Output = bakery::Result<G>>,
    try_acquire: impl Future<Output = bakery::Result<Option<G>>>,
    hold: impl FnOnce(G) -> Held,
) -> bakery::Result<Option<Held>> {
    let guard = if wait {
        match acquire.await {
            Ok(guard) => Some(guard),
            Err(err) if err.kind() == ErrorKind::TimedOut => None,
            Err(err) => return Err(err),
        }
    } else {
        try_acquire.await?
    };
    Ok(guard.map(hold))
}

/// A recipe's `Config` error while taking a grant: the stored member was
/// made otherwise (a semaphore with another number of permits), a conflict
/// with what the caller asked, not the server's fault.
fn asked_otherwise(err: bakery::Error) -> ApiError {
    if err.kind() == ErrorKind::Config {
        ApiError::new(crate::error::Kind::Conflict, err.to_string())
    } else {
        err.into()
    }
}

/// A holder or waiter as the state routes show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Party {
    /// Who: the owner recorded with the grant (`session ID` for the
    /// service's sessions).
    pub owner: String,
    /// The grant's fencing token (holders only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// The holder's heartbeat counter (holders only): it advances every
    /// third of a lease while the holder is alive; one that stays the same
    /// for a whole lease, as a waiter sees it, ends the grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beat: Option<u64>,
    /// Read or write (RW locks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// The value stored with the grant (a lock's data, a leader's value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The lease the holder renews, in milliseconds.
    pub lease_ms: u64,
}

/// The stored state of one member of the lock family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueView {
    /// Which recipe.
    pub family: Family,
    /// Its name.
    pub name: String,
    /// The largest fencing token handed out so far.
    pub token: u64,
    /// A semaphore's number of permits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// Who holds it now (for an election: the leader).
    pub holders: Vec<Party>,
    /// Who waits, first served first.
    pub queue: Vec<Party>,
}

impl Party {
    fn waiter(owner: impl ToString, lease_ms: u64) -> Party {
        Party {
            owner: owner.to_string(),
            token: None,
            beat: None,
            mode: None,
            data: None,
            lease_ms,
        }
    }

    fn holder(owner: impl ToString, token: u64, beat: u64, lease_ms: u64) -> Party {
        Party {
            owner: owner.to_string(),
            token: Some(token),
            beat: Some(beat),
            mode: None,
            data: None,
            lease_ms,
        }
    }

    fn with_data(mut self, data: Option<&str>) -> Party {
        self.data = data.map(str::to_owned);
        self
    }

    fn with_mode(mut self, mode: bakery::rwlock::Mode) -> Party {
        self.mode = Some(match mode {
            bakery::rwlock::Mode::Read => Mode::Read,
            bakery::rwlock::Mode::Write => Mode::Write,
        });
        self
    }
}

impl QueueView {
    /// Read `name`'s state from the store; `None` if it was never taken.
    pub(crate) async fn read(
        store: &dyn VersionedStore,
        family: Family,
        name: &str,
    ) -> Result<Option<QueueView>, ApiError> {
        let view = |token, permits, holders, queue| QueueView {
            family,
            name: name.to_owned(),
            token,
            permits,
            holders,
            queue,
        };
        let lock = |state: LockState| {
            let holders = state.holder.iter().map(|h| {
                Party::holder(&h.owner, state.token, h.beat, h.lease_ms)
                    .with_data(h.data.as_deref())
            });
            let queue = (state.queue.iter())
                .map(|w| Party::waiter(&w.owner, w.lease_ms).with_data(w.data.as_deref()));
            view(state.token, None, holders.collect(), queue.collect())
        };
        Ok(match family {
            Family::Locks => Lock::inspect(store, name).await?.map(lock),
            Family::Elections => {
                Lock::inspect(store, &format!("{}{name}", bakery::election::LOCK_PREFIX))
                    .await?
                    .map(lock)
            }
            Family::Semaphores => Semaphore::inspect(store, name).await?.map(|state| {
                let holders = (state.holders.iter())
                    .map(|h| Party::holder(&h.owner, h.token, h.beat, h.lease_ms));
                let queue = (state.queue.iter()).map(|w| Party::waiter(&w.owner, w.lease_ms));
                view(
                    state.token,
                    Some(state.permits),
                    holders.collect(),
                    queue.collect(),
                )
            }),
            Family::Rwlocks => RwLock::inspect(store, name).await?.map(|state| {
                let holders = (state.holders.iter()).map(|h| {
                    Party::holder(&h.owner, h.token, h.beat, h.lease_ms).with_mode(h.mode)
                });
                let queue = (state.queue.iter())
                    .map(|w| Party::waiter(&w.owner, w.lease_ms).with_mode(w.mode));
                view(state.token, None, holders.collect(), queue.collect())
            }),
        })
    }
}
