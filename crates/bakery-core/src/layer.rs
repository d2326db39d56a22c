//! Stores that wrap another store: implement [`StoreLayer`] and override only
//! the calls the wrapper changes; every other call goes to the inner store.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tracing::Instrument;

use crate::{
    Capabilities, DeleteOutcome, Key, PutOutcome, Result, Row, Version, VersionedStore, Watch,
};

/// A wrapper around another [`VersionedStore`] (counting calls, recording a
/// history, injecting faults). Every method defaults to the inner store's,
/// and every `StoreLayer` is a `VersionedStore`, so a wrapper writes only
/// what it changes — the way OpenDAL's layers wrap a service.
///
/// Call the methods through [`VersionedStore`] (import only that trait, or
/// use `Arc<dyn VersionedStore>`); with both traits in scope a call on the
/// concrete type is ambiguous.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use bakery_core::{async_trait, Key, MemoryStore, Result, Row, StoreLayer, VersionedStore};
///
/// /// Counts reads; writes, watches and notifications pass through untouched.
/// #[derive(Debug)]
/// struct ReadCounter {
///     inner: Arc<dyn VersionedStore>,
///     reads: AtomicU64,
/// }
///
/// #[async_trait]
/// impl StoreLayer for ReadCounter {
///     fn inner(&self) -> &dyn VersionedStore {
///         self.inner.as_ref()
///     }
///
///     async fn get(&self, key: &Key) -> Result<Option<Row>> {
///         self.reads.fetch_add(1, Ordering::Relaxed);
///         self.inner.get(key).await
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store: Arc<dyn VersionedStore> = Arc::new(ReadCounter {
///     inner: Arc::new(MemoryStore::new()),
///     reads: AtomicU64::new(0),
/// });
/// let key = Key::new("k")?;
/// store.put_if_version(&key, None, "v".into()).await?;
/// assert_eq!(store.get(&key).await?.map(|row| row.version), Some(1));
/// assert_eq!(store.backend(), "memory");
/// # Ok(()) }
/// ```
#[async_trait]
pub trait StoreLayer: Send + Sync + fmt::Debug {
    /// The wrapped store.
    fn inner(&self) -> &dyn VersionedStore;

    /// See [`VersionedStore::backend`].
    fn backend(&self) -> &'static str {
        self.inner().backend()
    }

    /// See [`VersionedStore::capabilities`].
    fn capabilities(&self) -> Capabilities {
        self.inner().capabilities()
    }

    /// See [`VersionedStore::get`].
    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        self.inner().get(key).await
    }

    /// See [`VersionedStore::put_if_version`].
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        self.inner().put_if_version(key, expected, value).await
    }

    /// See [`VersionedStore::delete_if_version`].
    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        self.inner().delete_if_version(key, expected).await
    }

    /// See [`VersionedStore::watch`].
    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        self.inner().watch(key).await
    }

    /// See [`VersionedStore::notify`].
    async fn notify(&self, key: &Key) -> Result<()> {
        self.inner().notify(key).await
    }
}

#[async_trait]
impl<L: StoreLayer> VersionedStore for L {
    fn backend(&self) -> &'static str {
        StoreLayer::backend(self)
    }

    fn capabilities(&self) -> Capabilities {
        StoreLayer::capabilities(self)
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        StoreLayer::get(self, key).await
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        StoreLayer::put_if_version(self, key, expected, value).await
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        StoreLayer::delete_if_version(self, key, expected).await
    }

    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        StoreLayer::watch(self, key).await
    }

    async fn notify(&self, key: &Key) -> Result<()> {
        StoreLayer::notify(self, key).await
    }
}

/// Wraps a store in one `tracing` span per call, at debug level: `bakery.get`,
/// `bakery.put_if_version`, `bakery.delete_if_version`, `bakery.watch` and
/// `bakery.notify`, with the fields `backend`, `key` and, for writes,
/// `expected` and `len`. `bakery::connect` wraps every store it opens, so
/// each backend traces the same way without instrumenting its own code.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{Key, MemoryStore, TracedStore, VersionedStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store: Arc<dyn VersionedStore> = Arc::new(TracedStore::new(Arc::new(MemoryStore::new())));
/// let key = Key::new("k")?;
/// store.put_if_version(&key, None, "v".into()).await?;
/// assert_eq!(store.backend(), "memory");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TracedStore {
    inner: Arc<dyn VersionedStore>,
}

impl TracedStore {
    /// Trace the calls made to `inner`.
    pub fn new(inner: Arc<dyn VersionedStore>) -> Self {
        TracedStore { inner }
    }
}

#[async_trait]
impl StoreLayer for TracedStore {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let backend = self.inner.backend();
        let span = tracing::debug_span!("bakery.get", backend, key = %key);
        self.inner.get(key).instrument(span).await
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let (backend, len) = (self.inner.backend(), value.len());
        let span =
            tracing::debug_span!("bakery.put_if_version", backend, key = %key, ?expected, len);
        self.inner
            .put_if_version(key, expected, value)
            .instrument(span)
            .await
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let backend = self.inner.backend();
        let span = tracing::debug_span!("bakery.delete_if_version", backend, key = %key, expected);
        self.inner
            .delete_if_version(key, expected)
            .instrument(span)
            .await
    }

    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        let backend = self.inner.backend();
        let span = tracing::debug_span!("bakery.watch", backend, key = %key);
        self.inner.watch(key).instrument(span).await
    }

    async fn notify(&self, key: &Key) -> Result<()> {
        let backend = self.inner.backend();
        let span = tracing::debug_span!("bakery.notify", backend, key = %key);
        self.inner.notify(key).instrument(span).await
    }
}
