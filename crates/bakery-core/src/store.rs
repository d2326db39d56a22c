//! The one primitive: a versioned conditional put.

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{Key, Result};

/// A subscription to the changes of one key, from [`VersionedStore::watch`].
///
/// Wake-ups are coalesced: several changes while nobody waits give one
/// wake-up. A plain wake-up only says "the row may have changed": read it
/// again. A backend that knows the row a change left may hand it over
/// ([`WatchSender::wake_with_row`]); [`Watch::next_change`] then gives it,
/// and a waiter decides without a read.
///
/// ```
/// use bakery_core::Watch;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (sender, mut watch) = Watch::channel();
/// assert!(sender.wake());
/// assert!(sender.wake()); // coalesced with the first
/// assert!(watch.changed().await);
/// drop(sender);
/// assert!(!watch.changed().await); // the backend stopped: poll instead
/// # }
/// ```
#[derive(Debug)]
pub struct Watch {
    wakes: tokio::sync::watch::Receiver<Pending>,
    /// For [`Watch::own_writes`] (weak: the watch never keeps its feed
    /// open).
    sender: std::sync::Weak<tokio::sync::watch::Sender<Pending>>,
}

/// The backend's end of a [`Watch`]: call [`WatchSender::wake`] whenever the
/// watched key may have changed, or [`WatchSender::wake_with_row`] with the
/// row the change left.
#[derive(Debug, Clone)]
pub struct WatchSender {
    wakes: std::sync::Arc<tokio::sync::watch::Sender<Pending>>,
}

/// What a wake-up of a [`Watch`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The row may have changed: read it.
    Read,
    /// The key's row as a change left it (the newest the backend handed
    /// over: rows never go back to an older version).
    Row(Row),
}

/// The latest wake-up not yet taken, and the newest version handed over.
#[derive(Debug)]
struct Pending {
    change: Change,
    newest: Option<Version>,
    /// The value of a write the watcher's process is making and hands over
    /// itself ([`OwnWrites::writing`]).
    own: Option<Bytes>,
}

impl Watch {
    /// A new watch and the sender that wakes it.
    pub fn channel() -> (WatchSender, Watch) {
        let (sender, wakes) = tokio::sync::watch::channel(Pending {
            change: Change::Read,
            newest: None,
            own: None,
        });
        let sender = std::sync::Arc::new(sender);
        let watch = Watch {
            wakes,
            sender: std::sync::Arc::downgrade(&sender),
        };
        (WatchSender { wakes: sender }, watch)
    }

    /// A handle for the watcher's process to mark the writes it makes and
    /// reports itself: see [`OwnWrites::writing`].
    pub fn own_writes(&self) -> OwnWrites {
        OwnWrites {
            sender: self.sender.clone(),
        }
    }

    /// Wait for the next wake-up. `false` means the backend stopped
    /// delivering them (its connection dropped): the caller must poll.
    pub async fn changed(&mut self) -> bool {
        self.next_change().await.is_some()
    }

    /// Wait for the next wake-up and say what it knows: [`Change::Row`]
    /// when the backend handed over the row, else [`Change::Read`]. `None`
    /// means the backend stopped delivering wake-ups: poll instead.
    pub async fn next_change(&mut self) -> Option<Change> {
        self.wakes.changed().await.ok()?;
        let pending = self.wakes.borrow_and_update();
        Some(pending.change.clone())
    }
}

impl WatchSender {
    /// Wake the watcher: the row may have changed. `false` once the
    /// [`Watch`] was dropped, so a backend task feeding it can stop.
    pub fn wake(&self) -> bool {
        self.wakes
            .send_modify(|pending| pending.change = Change::Read);
        !self.wakes.is_closed()
    }

    /// Wake the watcher with the row a change left. A row no newer than
    /// one handed over before is old news and wakes nobody (two writers'
    /// wake-ups may arrive in either order). `false` once the [`Watch`]
    /// was dropped.
    pub fn wake_with_row(&self, row: Row) -> bool {
        self.wakes.send_if_modified(|pending| {
            if pending.newest.is_some_and(|newest| row.version <= newest) {
                return false;
            }
            let own = pending
                .own
                .as_ref()
                .is_some_and(|own| same_buffer(own, &row.value));
            pending.newest = Some(row.version);
            pending.change = Change::Row(row);
            // The watcher's own write, reported by an in-process store
            // before the write even returned: kept (an older row is still
            // no news), but nobody is woken for it.
            !own
        });
        !self.wakes.is_closed()
    }

    /// True once the [`Watch`] was dropped: a backend may forget this
    /// sender without waking it.
    ///
    /// ```
    /// let (sender, watch) = bakery_core::Watch::channel();
    /// assert!(!sender.is_closed());
    /// drop(watch);
    /// assert!(sender.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.wakes.is_closed()
    }

    /// Completes when the [`Watch`] is dropped.
    pub async fn closed(&self) {
        self.wakes.closed().await
    }
}

/// The writes a watcher's own process makes and hands over itself, from
/// [`Watch::own_writes`]: their reports need not wake the watcher.
///
/// An in-process store (such as [`MemoryStore`](crate::MemoryStore)) wakes
/// a key's watchers inside the write itself. A process whose writer tells
/// its own waiters what it wrote would then be woken for news it already
/// has, and on a multi-threaded runtime that wake-up costs more than the
/// write. While the [`OwnWrite`] lives, a report whose row holds that very
/// value (the same buffer, not merely equal bytes) updates the watch
/// without waking it. Any other report, and every report of a store that
/// sends its rows from elsewhere (a server), wakes it as before.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// use std::time::Duration;
/// use bakery_core::{Bytes, Key, MemoryStore, PutOutcome, VersionedStore};
///
/// let store = MemoryStore::new();
/// let key = Key::new("doc/own-writes")?;
/// let mut watch = store.watch(&key).await?.expect("memory watches");
/// let own = watch.own_writes();
/// let value = Bytes::from_static(b"mine");
/// let marked = own.writing(&value);
/// store.put_if_version(&key, None, value).await?;
/// drop(marked);
/// let woken = tokio::time::timeout(Duration::from_millis(20), watch.changed()).await;
/// assert!(woken.is_err(), "its own write woke nobody");
/// store.put_if_version(&key, Some(1), Bytes::from_static(b"theirs")).await?;
/// assert!(watch.changed().await, "another write does");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OwnWrites {
    sender: std::sync::Weak<tokio::sync::watch::Sender<Pending>>,
}

impl OwnWrites {
    /// Mark `value` as a write this process is making and will hand to its
    /// own waiters: until the returned mark is dropped, the store's report
    /// of it wakes nobody. Take it just before the write and drop it when
    /// the write returned.
    pub fn writing(&self, value: &Bytes) -> OwnWrite {
        if let Some(sender) = self.sender.upgrade() {
            sender.send_if_modified(|pending| {
                pending.own = Some(value.clone());
                false
            });
        }
        OwnWrite {
            sender: self.sender.clone(),
            value: value.clone(),
        }
    }
}

/// A write marked by [`OwnWrites::writing`]; the mark ends when this is
/// dropped.
#[derive(Debug)]
#[must_use = "the mark ends when this is dropped"]
pub struct OwnWrite {
    sender: std::sync::Weak<tokio::sync::watch::Sender<Pending>>,
    value: Bytes,
}

impl Drop for OwnWrite {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.upgrade() {
            sender.send_if_modified(|pending| {
                if pending
                    .own
                    .as_ref()
                    .is_some_and(|own| same_buffer(own, &self.value))
                {
                    pending.own = None;
                }
                false
            });
        }
    }
}

/// The same buffer (not merely equal bytes): a report carries the very
/// value handed to an in-process store's write.
fn same_buffer(a: &Bytes, b: &Bytes) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len()
}

/// A row version. Strictly increasing per key on every backend, and never
/// repeated for a key, not even across delete and re-create.
pub type Version = u64;

/// `version` as a backend with signed 64-bit integer columns stores it
/// (positive), or `None` if no stored row can have it (0, or above
/// `i64::MAX`): a write expecting it is a plain conflict.
///
/// ```
/// use bakery_core::signed_version;
/// assert_eq!(signed_version(7), Some(7));
/// assert_eq!(signed_version(0), None);
/// assert_eq!(signed_version(u64::MAX), None);
/// ```
pub fn signed_version(version: Version) -> Option<i64> {
    i64::try_from(version).ok().filter(|v| *v > 0)
}

/// Run `f` until `deadline` (`None`: no limit); `None` if the deadline
/// passed first (and `f` was dropped).
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(bakery_core::within(None, async { 1 }).await, Some(1));
/// let past = Some(Instant::now() - Duration::from_millis(1));
/// assert_eq!(bakery_core::within(past, std::future::pending::<()>()).await, None);
/// # }
/// ```
pub async fn within<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    f: F,
) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, f).await.ok(),
        None => Some(f.await),
    }
}

/// One stored row: a key, an opaque value and its version.
#[derive(Clone, PartialEq, Eq)]
pub struct Row {
    /// The row's key.
    pub key: Key,
    /// The stored bytes; bakery never interprets them at this layer.
    pub value: Bytes,
    /// The version this value was written at.
    pub version: Version,
}

impl Row {
    /// The row `key` holds: `value` at `version`.
    ///
    /// ```
    /// use bakery_core::{Bytes, Key, Row};
    ///
    /// let key = Key::new("k").unwrap();
    /// let row = Row::new(&key, Bytes::from("v"), 3);
    /// assert_eq!((row.key, row.version), (key, 3));
    /// ```
    pub fn new(key: &Key, value: Bytes, version: Version) -> Row {
        Row {
            key: key.clone(),
            value,
            version,
        }
    }

    /// The row a backend's stored slot shows through the API: `None` for a
    /// tombstone (no value), which keeps the key's version so that a
    /// re-create continues above it.
    ///
    /// ```
    /// use bakery_core::{Bytes, Key, Row};
    ///
    /// let key = Key::new("k").unwrap();
    /// assert_eq!(Row::live(&key, None, 3), None);
    /// let row = Row::live(&key, Some(Bytes::from("v")), 3).unwrap();
    /// assert_eq!((row.value.as_ref(), row.version), (&b"v"[..], 3));
    /// ```
    pub fn live(key: &Key, value: Option<Bytes>, version: Version) -> Option<Row> {
        value.map(|value| Row {
            key: key.clone(),
            value,
            version,
        })
    }
}

/// A row as a backend keeps it, decoded and checked: `value: None` is a
/// tombstone, which keeps the key's version so that a re-create continues
/// above it.
///
/// ```
/// use bakery_core::{Bytes, Key, Stored};
///
/// let key = Key::new("k").unwrap();
/// let tombstone = Stored { value: None, version: 3 };
/// assert_eq!(tombstone.live(&key), None);
/// let stored = Stored { value: Some(Bytes::from("v")), version: 4 };
/// assert_eq!(stored.live(&key).map(|row| row.version), Some(4));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The stored bytes, or `None` for a tombstone.
    pub value: Option<Bytes>,
    /// The version this value (or deletion) was written at.
    pub version: Version,
}

impl Stored {
    /// The row as the API shows it: `None` for a tombstone.
    pub fn live(&self, key: &Key) -> Option<Row> {
        Row::live(key, self.value.clone(), self.version)
    }
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Row")
            .field("key", &self.key)
            .field("value", &String::from_utf8_lossy(&self.value))
            .field("version", &self.version)
            .finish()
    }
}

/// The result of [`VersionedStore::put_if_version`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum PutOutcome {
    /// The write applied; this is the row as now stored (with its new version).
    Applied(Row),
    /// The expected version did not match. Carries the CURRENT row (`None`
    /// when the key is absent) so the caller can retry without a second read.
    Conflict(Option<Row>),
}

impl PutOutcome {
    /// The applied row, if the write applied.
    pub fn applied(self) -> Option<Row> {
        match self {
            PutOutcome::Applied(row) => Some(row),
            PutOutcome::Conflict(_) => None,
        }
    }

    /// True if the write applied.
    pub fn is_applied(&self) -> bool {
        matches!(self, PutOutcome::Applied(_))
    }
}

/// The result of [`VersionedStore::delete_if_version`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum DeleteOutcome {
    /// The row was deleted.
    Deleted,
    /// The version did not match; carries the current row (`None`: absent).
    Conflict(Option<Row>),
}

bitflags::bitflags! {
    /// What a backend offers beyond the primitive. Recipes check flags and
    /// fall back to a portable path; they never test which backend they run on.
    ///
    /// ```
    /// use bakery_core::Capabilities;
    /// let caps = Capabilities::PERSISTENT | Capabilities::SHARED;
    /// assert!(caps.contains(Capabilities::SHARED));
    /// assert!(!caps.contains(Capabilities::WATCH));
    /// ```
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Capabilities: u32 {
        /// Rows survive a restart of the process (and of the server).
        const PERSISTENT = 1 << 0;
        /// Several OS processes (or machines) can share the same rows.
        const SHARED = 1 << 1;
        /// The backend can notify a waiter when a row changes (etcd watch,
        /// PostgreSQL LISTEN/NOTIFY, Redis pub/sub), so waiters need not poll.
        const WATCH = 1 << 2;
        /// Reads are linearizable (a read sees every write acknowledged before it).
        const LINEARIZABLE_READS = 1 << 3;
    }
}

/// A key-value store with a versioned conditional put: the one primitive every
/// bakery recipe is built on. It is object safe: recipes take
/// `Arc<dyn VersionedStore>`.
///
/// # Contract (checked by `bakery-testkit` on every backend)
/// - `put_if_version(key, None, v)` writes only if the key is absent;
///   `put_if_version(key, Some(n), v)` only if the current version is `n`.
///   Each applied write gets a version greater than any the key ever had.
/// - A mismatch is not an error: it returns [`PutOutcome::Conflict`] with the
///   current row, read in the same atomic step.
/// - Each call is linearizable per key under the backend's documented settings.
/// - Errors separate "did not apply" ([`ErrorKind::Unavailable`]) from
///   "may have applied" ([`ErrorKind::Unknown`]).
///
/// # Example: a compare-and-set loop
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{Key, MemoryStore, PutOutcome, VersionedStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
/// let key = Key::new("counter")?;
///
/// // Increment a counter; on conflict retry with the row the store returned.
/// let mut current = store.get(&key).await?;
/// loop {
///     let n: u64 = match &current {
///         Some(row) => std::str::from_utf8(&row.value).unwrap().parse().unwrap(),
///         None => 0,
///     };
///     let expected = current.as_ref().map(|row| row.version);
///     match store.put_if_version(&key, expected, (n + 1).to_string().into()).await? {
///         PutOutcome::Applied(row) => { assert_eq!(&row.value[..], b"1"); break; }
///         PutOutcome::Conflict(now) => current = now,
///     }
/// }
/// # Ok(()) }
/// ```
///
/// [`ErrorKind::Unavailable`]: crate::ErrorKind::Unavailable
/// [`ErrorKind::Unknown`]: crate::ErrorKind::Unknown
#[async_trait]
pub trait VersionedStore: Send + Sync + fmt::Debug {
    /// The backend's short name (`"memory"`, `"sqlite"`, …), used in errors.
    fn backend(&self) -> &'static str;

    /// What this backend offers beyond the primitive.
    fn capabilities(&self) -> Capabilities;

    /// Read a row; `None` if the key is absent (never written, or deleted).
    async fn get(&self, key: &Key) -> Result<Option<Row>>;

    /// Write `value` if the key's current version is `expected` (`None`:
    /// only if absent). See the trait docs for the contract.
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome>;

    /// Delete the row if its current version is `expected`. A later create of
    /// the same key gets a version greater than `expected` (no ABA).
    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome>;

    /// Subscribe to changes of `key`. `Ok(None)` when the backend cannot
    /// notify (no [`Capabilities::WATCH`]): the caller polls instead.
    ///
    /// The watch wakes at least once after every write of the key that is
    /// followed by a [`notify`](Self::notify) of it, both made after this
    /// call returned. Backends with a native change feed (etcd) wake on the
    /// write itself; the others (LISTEN/NOTIFY, pub/sub) on the notify.
    /// Subscribe BEFORE reading the row, so a change between the read and
    /// the wait is not missed.
    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        let _ = key;
        Ok(None)
    }

    /// Wake every watcher of `key`; call it after a write that waiters must
    /// see promptly (a lock release tells the next waiter). A no-op on
    /// backends that cannot notify or whose watch already sees every write.
    async fn notify(&self, key: &Key) -> Result<()> {
        let _ = key;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn row(value: &Bytes, version: Version) -> Row {
        Row {
            key: Key::new("own/writes").expect("key"),
            value: value.clone(),
            version,
        }
    }

    async fn woken(watch: &mut Watch) -> bool {
        tokio::time::timeout(Duration::from_millis(20), watch.changed())
            .await
            .is_ok()
    }

    /// Only the marked buffer is held back: equal bytes in another buffer
    /// (another writer's row that happens to match) still wake, and so does
    /// the marked buffer once the mark is gone.
    #[tokio::test]
    async fn only_the_marked_buffer_is_held_back() {
        let (sender, mut watch) = Watch::channel();
        let ours = Bytes::from(b"state".to_vec());
        let mark = watch.own_writes().writing(&ours);
        sender.wake_with_row(row(&ours, 1));
        assert!(!woken(&mut watch).await, "our own write");
        let equal = Bytes::from(b"state".to_vec());
        sender.wake_with_row(row(&equal, 2));
        assert!(woken(&mut watch).await, "another buffer, equal bytes");
        drop(mark);
        sender.wake_with_row(row(&ours, 3));
        assert!(woken(&mut watch).await, "unmarked");
    }

    /// A held-back report still counts as handed over: an older row after
    /// it is no news.
    #[tokio::test]
    async fn a_held_back_row_still_makes_older_ones_old_news() {
        let (sender, mut watch) = Watch::channel();
        let ours = Bytes::from_static(b"ours");
        let _mark = watch.own_writes().writing(&ours);
        sender.wake_with_row(row(&ours, 5));
        sender.wake_with_row(row(&Bytes::from_static(b"older"), 4));
        assert!(!woken(&mut watch).await);
    }
}
