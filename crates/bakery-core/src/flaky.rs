//! A store layer for the core's own tests that fails the calls it is told
//! to fail before they reach the MemoryStore inside, and the key, retry
//! policy and writes those tests share.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use crate::{
    Bytes, DeleteOutcome, Error, ErrorKind, Key, MemoryStore, Operation, PutOutcome, Result,
    RetryPolicy, Row, StoreLayer, Version, VersionedStore, Watch,
};

/// The key the tests write.
pub(crate) fn key() -> Key {
    Key::new("k").expect("a valid key")
}

/// Tiny delays: the tests never wait long on a real clock.
pub(crate) fn fast(attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .max_attempts(attempts)
        .min_delay(Duration::from_millis(1))
        .max_delay(Duration::from_millis(2))
}

/// Create [`key`] on `store`: its first row.
pub(crate) async fn create(store: &dyn VersionedStore) -> Row {
    store
        .put_if_version(&key(), None, "v".into())
        .await
        .expect("create")
        .applied()
        .expect("applied")
}

/// Create [`key`] on `store`, then make the three writes that must
/// conflict with that row, in four calls: a create over it, and a put and a
/// delete at a stale version. Each conflict carries the row; it is returned.
pub(crate) async fn create_then_conflict(store: &dyn VersionedStore) -> Row {
    let row = create(store).await;
    for (expected, value) in [(None, "again"), (Some(7), "stale")] {
        let put = store.put_if_version(&key(), expected, value.into()).await;
        let put = put.expect("a conflict is not an error");
        assert_eq!(put, PutOutcome::Conflict(Some(row.clone())), "{value}");
    }
    let delete = store.delete_if_version(&key(), 7).await.expect("delete");
    assert_eq!(delete, DeleteOutcome::Conflict(Some(row.clone())));
    row
}

/// Fails its next `fail` calls (of any kind) with `kind`, each attempt's
/// number in its message (`refused #3`, `reset #1`) so a test can tell
/// which one came back; counts every call.
#[derive(Debug)]
pub(crate) struct Flaky {
    inner: MemoryStore,
    kind: Mutex<ErrorKind>,
    fail: AtomicU32,
    calls: AtomicU32,
}

impl Flaky {
    pub(crate) fn new(kind: ErrorKind, fail: u32) -> Arc<Flaky> {
        Arc::new(Flaky {
            inner: MemoryStore::new(),
            kind: Mutex::new(kind),
            fail: AtomicU32::new(fail),
            calls: AtomicU32::new(0),
        })
    }

    /// Fail the next `n` calls with `kind`.
    pub(crate) fn fail_next(&self, n: u32, kind: ErrorKind) {
        *self.kind.lock().unwrap_or_else(PoisonError::into_inner) = kind;
        self.fail.store(n, Ordering::SeqCst);
    }

    pub(crate) fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    fn fails(&self, op: Operation) -> Result<()> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let left = self.fail.load(Ordering::SeqCst);
        if left == 0 {
            return Ok(());
        }
        self.fail.store(left - 1, Ordering::SeqCst);
        let kind = *self.kind.lock().unwrap_or_else(PoisonError::into_inner);
        Err(match kind {
            ErrorKind::Unknown => Error::in_doubt("flaky", op, format!("reset #{call}")),
            kind => Error::not_sent(kind, "flaky", op, format!("refused #{call}")),
        })
    }
}

#[async_trait]
impl StoreLayer for Flaky {
    fn inner(&self) -> &dyn VersionedStore {
        &self.inner
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        self.fails(Operation::Get)?;
        self.inner.get(key).await
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        self.fails(Operation::Put)?;
        self.inner.put_if_version(key, expected, value).await
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        self.fails(Operation::Delete)?;
        self.inner.delete_if_version(key, expected).await
    }

    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        self.fails(Operation::Watch)?;
        self.inner.watch(key).await
    }

    async fn notify(&self, key: &Key) -> Result<()> {
        self.fails(Operation::Notify)?;
        self.inner.notify(key).await
    }
}
