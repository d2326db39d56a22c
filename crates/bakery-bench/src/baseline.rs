//! The baseline lock the benchmarks compare the fair lock with: the
//! try-and-back-off lock that queue-based fair locks replace.
//!
//! [`OldLock`] tries to take the lock with one conditional write; if
//! another client holds it, it sleeps a random back-off (up to 1 s) and
//! tries again; if another client won the same race, it sleeps a random
//! back-off that grows with each attempt (up to 50 ms × attempt). There is
//! no queue and no lease: whoever happens to try right after a release
//! wins, so throughput falls as clients are added and one client often
//! re-takes the lock many times in a row. It exists to be measured against
//! (the `lock` workload's `old` variant, and a conformance case that checks
//! it still excludes); use [`bakery::Lock`] for anything real.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bakery::{Bytes, Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
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

/// The result of one try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TryResult {
    /// The lock is ours.
    Success,
    /// Another client holds the lock.
    Held,
    /// Another client wrote the lock row between our read and our write.
    Raced,
}

/// The try-and-back-off lock (baseline only): try, and sleep a random
/// back-off while it is held; no queue, no lease.
///
/// ```
/// use std::sync::Arc;
/// use bakery::MemoryStore;
/// use bakery_bench::baseline::OldLock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery::Result<()> {
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
    /// The baseline lock `name`, with its usual back-off (a random 0..1000 ms
    /// while the lock is held, 0..50·attempt ms after a lost race).
    pub fn new(store: Arc<dyn VersionedStore>, name: &str) -> Result<Self> {
        Ok(OldLock {
            store,
            key: Key::with_prefix(KEY_PREFIX, name)?,
            owner_backoff: Duration::from_millis(1000),
            race_backoff: Duration::from_millis(50),
        })
    }

    /// Change the back-off: at most `owner` while another client holds the
    /// lock, at most `race`·attempt after a lost race.
    pub fn with_backoff(mut self, owner: Duration, race: Duration) -> Self {
        self.owner_backoff = owner;
        self.race_backoff = race;
        self
    }

    /// Take the lock: try until a try succeeds, sleeping a random back-off
    /// between tries.
    pub async fn acquire(&self) -> Result<OldLockGuard> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut attempt: u32 = 1;
        loop {
            let (outcome, token) = self.try_once(&id).await?;
            let delay = match outcome {
                TryResult::Success => return Ok(OldLockGuard { id, token }),
                TryResult::Held => random_up_to(self.owner_backoff),
                TryResult::Raced => {
                    let delay = random_up_to(self.race_backoff.saturating_mul(attempt));
                    attempt = attempt.saturating_add(1);
                    delay
                }
            };
            tokio::time::sleep(delay).await;
        }
    }

    /// One try: `None` if the lock is held or another client won the race.
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
            return Ok((TryResult::Held, 0));
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
            PutOutcome::Conflict(_) => Ok((TryResult::Raced, 0)),
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

fn encode(state: &OldLockRow) -> Result<Bytes> {
    serde_json::to_vec(state)
        .map(Into::into)
        .map_err(|e| Error::new(ErrorKind::Internal, "old-lock", format!("encode: {e}")))
}
