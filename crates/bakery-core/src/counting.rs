//! A wrapper that counts store round trips, for tests and benchmarks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    DeleteOutcome, Key, PutOutcome, Result, Row, StoreLayer, Version, VersionedStore, Watch,
};

/// Round trips seen by a [`CountingStore`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Calls to `get`.
    pub gets: u64,
    /// Calls to `put_if_version`.
    pub puts: u64,
    /// Calls to `delete_if_version`.
    pub deletes: u64,
    /// Puts and deletes that returned a conflict.
    pub conflicts: u64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Calls to `notify`.
    pub notifies: u64,
    /// Calls to `watch` (subscriptions, not the wake-ups they deliver).
    pub watches: u64,
}

impl OpCounts {
    /// All round trips: reads, writes and notifications.
    pub fn total(&self) -> u64 {
        self.gets + self.puts + self.deletes + self.notifies + self.watches
    }
}

/// Wraps any store and counts its calls, so tests can prove an algorithm's
/// round-trip budget (e.g. "a conflict is retried without a second read")
/// and benchmarks can report store operations per recipe operation.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{CountingStore, Key, MemoryStore, VersionedStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = CountingStore::new(Arc::new(MemoryStore::new()));
/// store.get(&Key::new("k")?).await?;
/// assert_eq!(store.counts().gets, 1);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn VersionedStore>,
    gets: AtomicU64,
    puts: AtomicU64,
    deletes: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    notifies: AtomicU64,
    watches: AtomicU64,
}

impl CountingStore {
    /// Count the calls made to `inner`.
    pub fn new(inner: Arc<dyn VersionedStore>) -> Self {
        CountingStore {
            inner,
            gets: AtomicU64::new(0),
            puts: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            notifies: AtomicU64::new(0),
            watches: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> OpCounts {
        OpCounts {
            gets: self.gets.load(Ordering::Relaxed),
            puts: self.puts.load(Ordering::Relaxed),
            deletes: self.deletes.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            notifies: self.notifies.load(Ordering::Relaxed),
            watches: self.watches.load(Ordering::Relaxed),
        }
    }

    /// Counts `result` as a conflict or an error, and passes it on.
    fn noted<T>(&self, result: Result<T>, conflict: impl FnOnce(&T) -> bool) -> Result<T> {
        match &result {
            Ok(v) if conflict(v) => {
                self.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }
}

#[async_trait]
impl StoreLayer for CountingStore {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.noted(self.inner.get(key).await, |_| false)
    }

    /// Counts the call, and a conflict if it returns one.
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.noted(self.inner.put_if_version(key, expected, value).await, |o| {
            matches!(o, PutOutcome::Conflict(_))
        })
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        self.deletes.fetch_add(1, Ordering::Relaxed);
        self.noted(self.inner.delete_if_version(key, expected).await, |o| {
            matches!(o, DeleteOutcome::Conflict(_))
        })
    }

    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        self.watches.fetch_add(1, Ordering::Relaxed);
        self.noted(self.inner.watch(key).await, |_| false)
    }

    async fn notify(&self, key: &Key) -> Result<()> {
        self.notifies.fetch_add(1, Ordering::Relaxed);
        self.noted(self.inner.notify(key).await, |_| false)
    }
}
