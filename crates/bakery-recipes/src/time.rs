//! A time service: a global time that never goes backwards,
//! kept as a raise-only register. Each replica publishes
//! `max(its clock, stored)`; readers get the stored value. Skewed clocks can
//! only push it forward, never back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bakery_core::{Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use tokio::task::JoinHandle;

/// Key prefix of time registers: `time/<name>`.
pub const KEY_PREFIX: &str = "time";

/// A non-decreasing global time in microseconds since the Unix epoch, shared
/// by every client of the same store.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::MemoryStore;
/// use bakery_recipes::time::TimeService;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = Arc::new(MemoryStore::new());
/// let fast = TimeService::new(store.clone(), "global")?;
/// let slow = TimeService::new(store, "global")?;
/// assert_eq!(fast.advance_to(2_000).await?, 2_000);
/// // A replica whose clock is behind cannot move the time back.
/// assert_eq!(slow.advance_to(1_000).await?, 2_000);
/// assert_eq!(slow.read().await?, Some(2_000));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TimeService {
    store: Arc<dyn VersionedStore>,
    key: Key,
    /// The largest value this client returned, so its own readings never
    /// go back even on a backend with stale reads.
    last: AtomicU64,
}

impl TimeService {
    /// The time register `name`. No store call.
    pub fn new(store: Arc<dyn VersionedStore>, name: &str) -> Result<Self> {
        Ok(TimeService {
            store,
            key: Key::with_prefix(KEY_PREFIX, name)?,
            last: AtomicU64::new(0),
        })
    }

    /// Raise the global time to `micros` if it is behind (the seed's
    /// `TryUpdateGlobalTime`); returns the global time afterwards, which is
    /// `>= micros` and never less than an earlier result of this client.
    pub async fn advance_to(&self, micros: u64) -> Result<u64> {
        let mut current = self.store.get(&self.key).await?;
        loop {
            let stored = current.as_ref().map(decode).transpose()?;
            if let Some(stored) = stored.filter(|stored| *stored >= micros) {
                return Ok(self.observe(stored));
            }
            let expected = current.as_ref().map(|row| row.version);
            match self
                .store
                .put_if_version(&self.key, expected, micros.to_string().into())
                .await?
            {
                PutOutcome::Applied(_) => return Ok(self.observe(micros)),
                PutOutcome::Conflict(now) => current = now,
            }
        }
    }

    /// Publish this machine's clock and return the global time: a time
    /// that never decreases, whatever the skew between replicas.
    pub async fn now(&self) -> Result<u64> {
        self.advance_to(system_micros()?).await
    }

    /// The stored global time, `None` if nobody published yet.
    pub async fn read(&self) -> Result<Option<u64>> {
        match self.store.get(&self.key).await? {
            Some(row) => Ok(Some(self.observe(decode(&row)?))),
            None => Ok(None),
        }
    }

    /// Publish this machine's clock every `period` in the background (the
    /// seed's replicas do it every 500 ms). Errors are logged and retried
    /// at the next tick. Abort the handle to stop.
    pub fn spawn_publisher(self: &Arc<Self>, period: Duration) -> JoinHandle<()> {
        let service = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(err) = service.now().await {
                    tracing::warn!(error = %err, "time service: publish failed");
                }
            }
        })
    }

    fn observe(&self, micros: u64) -> u64 {
        self.last.fetch_max(micros, Ordering::AcqRel).max(micros)
    }
}

fn system_micros() -> Result<u64> {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::new(ErrorKind::Internal, "time", "system clock before 1970"))?;
    u64::try_from(since_epoch.as_micros())
        .map_err(|_| Error::new(ErrorKind::Internal, "time", "system clock out of range"))
}

fn decode(row: &Row) -> Result<u64> {
    std::str::from_utf8(&row.value)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| {
            Error::corrupt(
                "time",
                format!("row {} is not a bakery time register", row.key.as_str()),
            )
        })
}
