//! The old try-and-back-off lock that queue-based fair locks replaced (as
//! in Cassandra lock services built on a shadow row), kept only as the
//! baseline the benchmarks beat:
//! try to take the lock; if someone else holds it sleep a random 0..1000 ms,
//! if another client raced us sleep a random 0..50·attempt ms; no queue, no
//! lease. Its authors measured what this costs: throughput falls as clients
//! are added, and one client re-takes the lock many times in a row. Use
//! [`Lock`](crate::lock::Lock) for anything real.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Key prefix of baseline lock rows: `oldlock/<name>`.
pub const KEY_PREFIX: &str = "oldlock";

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OldLockRow {
    token: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    holder: Option<String>,
}

/// The result of one try, as the seed names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TryResult {
    Success,
    AnotherThreadIsOwner,
    ConcurrentAttempt,
}

/// The seed's try-and-back-off lock (baseline only).
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::MemoryStore;
/// use bakery_recipes::old_lock::OldLock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let lock = OldLock::new(Arc::new(MemoryStore::new()), "jobs")?;
/// let guard = lock.acquire().await?;
/// assert_eq!(guard.token(), 1);
/// lock.release(guard).await?;
/// # Ok(()) }
/// ```
pub struct OldLock {
    store: Arc<dyn VersionedStore>,
    key: Key,
    owner_backoff: Duration,
    race_backoff: Duration,
}

impl fmt::Debug for OldLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OldLock").field("key", &self.key).finish()
    }
}

/// A grant of the [`OldLock`]; give it back with [`OldLock::release`].
#[derive(Debug)]
#[must_use = "release the lock with OldLock::release"]
pub struct OldLockGuard {
    id: String,
    token: u64,
}

impl OldLockGuard {
    /// The grant's fencing token (grows with every grant).
    pub fn token(&self) -> u64 {
        self.token
    }
}

impl OldLock {
    /// The baseline lock `name`, with the seed's delays (0..1000 ms when the
    /// lock is held, 0..50·attempt ms after a race).
    pub fn new(store: Arc<dyn VersionedStore>, name: &str) -> Result<Self> {
        Ok(OldLock {
            store,
            key: Key::with_prefix(KEY_PREFIX, name)?,
            owner_backoff: Duration::from_millis(1000),
            race_backoff: Duration::from_millis(50),
        })
    }

    /// Scale the seed's delays: at most `owner` while another client holds
    /// the lock, at most `race`·attempt after a concurrent attempt.
    pub fn with_backoff(mut self, owner: Duration, race: Duration) -> Self {
        self.owner_backoff = owner;
        self.race_backoff = race;
        self
    }

    /// The seed's `GetLock`: try until it succeeds, sleeping randomly between tries.
    pub async fn acquire(&self) -> Result<OldLockGuard> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut attempt: u32 = 1;
        loop {
            let (outcome, token) = self.try_once(&id).await?;
            let delay = match outcome {
                TryResult::Success => return Ok(OldLockGuard { id, token }),
                TryResult::AnotherThreadIsOwner => random_up_to(self.owner_backoff),
                TryResult::ConcurrentAttempt => {
                    let delay = random_up_to(self.race_backoff.saturating_mul(attempt));
                    attempt = attempt.saturating_add(1);
                    delay
                }
            };
            tokio::time::sleep(delay).await;
        }
    }

    /// The seed's `TryGetLock`: one try, `None` if it did not succeed.
    pub async fn try_acquire(&self) -> Result<Option<OldLockGuard>> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        match self.try_once(&id).await? {
            (TryResult::Success, token) => Ok(Some(OldLockGuard { id, token })),
            _ => Ok(None),
        }
    }

    /// Free the lock (no hand-off: whoever tries next wins).
    pub async fn release(&self, guard: OldLockGuard) -> Result<()> {
        let mut current = self.store.get(&self.key).await?;
        loop {
            let Some(row) = &current else {
                return Err(lost(&guard));
            };
            let mut state = decode(row)?;
            if state.holder.as_deref() != Some(guard.id.as_str()) {
                return Err(lost(&guard));
            }
            state.holder = None;
            match self
                .store
                .put_if_version(&self.key, Some(row.version), encode(&state)?)
                .await?
            {
                PutOutcome::Applied(_) => return Ok(()),
                PutOutcome::Conflict(now) => current = now,
            }
        }
    }

    async fn try_once(&self, id: &str) -> Result<(TryResult, u64)> {
        let current = self.store.get(&self.key).await?;
        let mut state = match &current {
            Some(row) => decode(row)?,
            None => OldLockRow::default(),
        };
        if state.holder.is_some() {
            return Ok((TryResult::AnotherThreadIsOwner, 0));
        }
        state.token = state
            .token
            .checked_add(1)
            .ok_or_else(|| Error::new(ErrorKind::Exhausted, "old-lock", "token overflow"))?;
        state.holder = Some(id.to_owned());
        let expected = current.as_ref().map(|row| row.version);
        match self
            .store
            .put_if_version(&self.key, expected, encode(&state)?)
            .await?
        {
            PutOutcome::Applied(_) => Ok((TryResult::Success, state.token)),
            PutOutcome::Conflict(_) => Ok((TryResult::ConcurrentAttempt, 0)),
        }
    }
}

fn random_up_to(max: Duration) -> Duration {
    let max = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(rand::rng().random_range(0..=max))
}

fn lost(guard: &OldLockGuard) -> Error {
    Error::new(
        ErrorKind::Lost,
        "old-lock",
        format!("token {} no longer holds the lock", guard.token),
    )
}

fn decode(row: &Row) -> Result<OldLockRow> {
    serde_json::from_slice(&row.value).map_err(|e| {
        Error::corrupt(
            "old-lock",
            format!("row {} is not a baseline lock: {e}", row.key.as_str()),
        )
    })
}

fn encode(state: &OldLockRow) -> Result<bakery_core::Bytes> {
    serde_json::to_vec(state)
        .map(Into::into)
        .map_err(|e| Error::new(ErrorKind::Internal, "old-lock", format!("encode: {e}")))
}
