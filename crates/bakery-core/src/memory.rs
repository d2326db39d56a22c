//! MemoryStore: the in-process reference implementation of the contract.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    Capabilities, DeleteOutcome, Error, ErrorKind, Key, PutOutcome, Result, Row, Version,
    VersionedStore, Watch, WatchSender,
};

/// A deleted row keeps its last version (a tombstone) so that a re-created
/// row continues above it: versions never repeat for a key.
#[derive(Debug)]
struct Slot {
    value: Option<Bytes>,
    version: Version,
}

/// The reference [`VersionedStore`]: a map behind a mutex, in this process
/// only. It defines the behaviour every backend must match, and runs the
/// conformance suite in a plain `cargo test`. URI: `memory://`.
///
/// ```
/// use bakery_core::{Key, MemoryStore, PutOutcome, VersionedStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = MemoryStore::new();
/// let key = Key::new("k")?;
/// let row = store.put_if_version(&key, None, "a".into()).await?.applied().unwrap();
/// // A stale version conflicts and hands back the current row.
/// let outcome = store.put_if_version(&key, None, "b".into()).await?;
/// assert_eq!(outcome, PutOutcome::Conflict(Some(row)));
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Arc<State>,
}

/// The rows and watches, shared by every [`MemoryStore::handle`].
#[derive(Debug, Default)]
struct State {
    rows: Mutex<HashMap<Key, Slot>>,
    watchers: Mutex<HashMap<Key, Vec<WatchSender>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Another handle on the same rows and watches: one store, but to the
    /// recipes a separate client (a recipe shares its per-process writer
    /// and listener only between handles of one store object), as a second
    /// connection to a server would be.
    ///
    /// ```
    /// use bakery_core::{Key, MemoryStore, VersionedStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let first = MemoryStore::new();
    /// let second = first.handle();
    /// let key = Key::new("k")?;
    /// first.put_if_version(&key, None, "a".into()).await?;
    /// assert_eq!(second.get(&key).await?.map(|row| row.version), Some(1));
    /// # Ok(()) }
    /// ```
    pub fn handle(&self) -> MemoryStore {
        MemoryStore {
            state: Arc::clone(&self.state),
        }
    }

    fn rows(&self) -> Result<MutexGuard<'_, HashMap<Key, Slot>>> {
        // A poisoned lock means a panic mid-update elsewhere; report it
        // rather than propagate the panic.
        self.state
            .rows
            .lock()
            .map_err(|_| Error::new(ErrorKind::Internal, "memory", "store mutex poisoned"))
    }

    /// Wake the watchers of `key` with the row it has now (`None`: it has
    /// none, read it), forgetting the watchers that were dropped.
    fn wake(&self, key: &Key, row: Option<&Row>) -> Result<()> {
        let mut watchers = self
            .state
            .watchers
            .lock()
            .map_err(|_| Error::new(ErrorKind::Internal, "memory", "watch mutex poisoned"))?;
        if let Some(senders) = watchers.get_mut(key) {
            senders.retain(|sender| match row {
                Some(row) => sender.wake_with_row(row.clone()),
                None => sender.wake(),
            });
            if senders.is_empty() {
                watchers.remove(key);
            }
        }
        Ok(())
    }
}

fn live(key: &Key, slot: Option<&Slot>) -> Option<Row> {
    let slot = slot?;
    Row::live(key, slot.value.clone(), slot.version)
}

#[async_trait]
impl VersionedStore for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::LINEARIZABLE_READS | Capabilities::WATCH
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        Ok(live(key, self.rows()?.get(key)))
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let mut rows = self.rows()?;
        let current = live(key, rows.get(key));
        if current.as_ref().map(|row| row.version) != expected {
            return Ok(PutOutcome::Conflict(current));
        }
        let version = match rows.get(key) {
            Some(slot) => slot.version.checked_add(1).ok_or_else(|| {
                Error::new(ErrorKind::Exhausted, "memory", "row version overflow")
            })?,
            None => 1,
        };
        rows.insert(
            key.clone(),
            Slot {
                value: Some(value.clone()),
                version,
            },
        );
        drop(rows);
        let row = Row {
            key: key.clone(),
            value,
            version,
        };
        // Like etcd's watch, every write wakes the key's watchers, here
        // with the row it left.
        self.wake(key, Some(&row))?;
        Ok(PutOutcome::Applied(row))
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let mut rows = self.rows()?;
        let current = live(key, rows.get(key));
        match (current, rows.get_mut(key)) {
            (Some(row), Some(slot)) if row.version == expected => {
                slot.value = None;
                drop(rows);
                self.wake(key, None)?;
                Ok(DeleteOutcome::Deleted)
            }
            (current, _) => Ok(DeleteOutcome::Conflict(current)),
        }
    }

    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        let (sender, watch) = Watch::channel();
        self.state
            .watchers
            .lock()
            .map_err(|_| Error::new(ErrorKind::Internal, "memory", "watch mutex poisoned"))?
            .entry(key.clone())
            .or_default()
            .push(sender);
        Ok(Some(watch))
    }

    async fn notify(&self, key: &Key) -> Result<()> {
        let row = live(key, self.rows()?.get(key));
        self.wake(key, row.as_ref())
    }
}
