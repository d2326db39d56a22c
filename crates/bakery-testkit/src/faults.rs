//! Fault injection around a real store: manufactured lost replies and
//! refusals, to prove recipes stay correct under unknown outcomes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{
    async_trait, Bytes, DeleteOutcome, Error, ErrorKind, Key, PutOutcome, Result, Row, StoreLayer,
    Version, VersionedStore, Watch,
};

/// What happens to one `put_if_version` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward the write to the real store, then report
    /// [`ErrorKind::Unknown`]: the write applied but the reply was "lost".
    LoseReply,
    /// Do not forward, report [`ErrorKind::Unknown`]: the request was "lost"
    /// on the way, so it did not apply — the caller cannot tell which.
    LoseRequest,
    /// Do not forward, report [`ErrorKind::Unavailable`].
    Refuse,
}

/// Wraps a real store and applies scripted faults to its next puts.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{ErrorKind, Key, MemoryStore, VersionedStore};
/// use bakery_testkit::faults::{Fault, FaultStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = FaultStore::new(Arc::new(MemoryStore::new()));
/// store.script([Fault::LoseReply]);
/// let key = Key::new("k").unwrap();
/// let err = store.put_if_version(&key, None, "v".into()).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Unknown);
/// assert!(store.get(&key).await.unwrap().is_some(), "the write applied");
/// # }
/// ```
#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn VersionedStore>,
    script: Mutex<VecDeque<Fault>>,
    paused: tokio::sync::watch::Sender<bool>,
}

impl FaultStore {
    /// No faults until [`script`](Self::script) is called.
    pub fn new(inner: Arc<dyn VersionedStore>) -> Self {
        FaultStore {
            inner,
            script: Mutex::new(VecDeque::new()),
            paused: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Hold every call (not yet sent) until [`resume`](Self::resume): from
    /// the store's side, the client is frozen like a `kill -STOP`ped process.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Let held and new calls through again.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    async fn gate(&self) {
        let mut paused = self.paused.subscribe();
        // Only errs if the sender is gone, which `self` prevents.
        let _ = paused.wait_for(|paused| !*paused).await;
    }

    /// Queue faults for the next puts, in order.
    pub fn script(&self, faults: impl IntoIterator<Item = Fault>) {
        self.lock().extend(faults);
    }

    /// Faults queued but not yet used.
    pub fn remaining(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Fault>> {
        self.script
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl StoreLayer for FaultStore {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        self.gate().await;
        self.inner.get(key).await
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        self.gate().await;
        let fault = self.lock().pop_front();
        let backend = self.inner.backend();
        match fault {
            None => self.inner.put_if_version(key, expected, value).await,
            Some(Fault::LoseReply) => {
                let applied = self.inner.put_if_version(key, expected, value).await?;
                Err(Error::new(
                    ErrorKind::Unknown,
                    backend,
                    format!(
                        "injected fault: reply lost (the write {})",
                        if applied.is_applied() {
                            "applied"
                        } else {
                            "conflicted"
                        }
                    ),
                ))
            }
            Some(Fault::LoseRequest) => Err(Error::new(
                ErrorKind::Unknown,
                backend,
                "injected fault: request lost",
            )),
            Some(Fault::Refuse) => Err(Error::new(
                ErrorKind::Unavailable,
                backend,
                "injected fault: refused",
            )),
        }
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        self.gate().await;
        self.inner.delete_if_version(key, expected).await
    }

    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        self.gate().await;
        self.inner.watch(key).await
    }

    async fn notify(&self, key: &Key) -> Result<()> {
        self.gate().await;
        self.inner.notify(key).await
    }
}

/// The password [`unreachable_uri`] puts in the URI; no error may show it.
pub const UNREACHABLE_PASSWORD: &str = "hunter2secret";

/// `uri` with its hosts replaced by `127.0.0.1:1`, where nothing listens
/// (every connection is refused), and a user and [`UNREACHABLE_PASSWORD`]
/// as credentials; path and options are kept.
///
/// ```
/// use bakery_testkit::faults::unreachable_uri;
/// assert_eq!(
///     unreachable_uri("postgres://u@db1:5432,db2/app?sslmode=disable"),
///     "postgres://bakery:hunter2secret@127.0.0.1:1/app?sslmode=disable"
/// );
/// assert_eq!(unreachable_uri("etcd://h:2379"), "etcd://bakery:hunter2secret@127.0.0.1:1");
/// assert_eq!(
///     unreachable_uri("dynamodb://k:s@us-east-1/t?endpoint=http://127.0.0.1:18000"),
///     "dynamodb://bakery:hunter2secret@us-east-1/t?endpoint=http://127.0.0.1:1"
/// );
/// ```
pub fn unreachable_uri(uri: &str) -> String {
    // A URI naming its server in `endpoint=` (dynamodb://REGION?endpoint=…)
    // keeps its host part (the region) and has the endpoint replaced.
    if let Some((start, end)) = crate::proxy::endpoint_span(uri) {
        let (scheme, rest) = uri.split_once("://").unwrap_or(("", uri));
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let region = rest[..authority_end].rsplit('@').next().unwrap_or("");
        let head = scheme.len() + 3 + authority_end;
        return format!(
            "{scheme}://bakery:{UNREACHABLE_PASSWORD}@{region}{}127.0.0.1:1{}",
            &uri[head..start],
            &uri[end..]
        );
    }
    let (scheme, rest) = uri.split_once("://").unwrap_or(("", uri));
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    format!(
        "{scheme}://bakery:{UNREACHABLE_PASSWORD}@127.0.0.1:1{}",
        &rest[end..]
    )
}

/// A server nobody answers for: opening a store on `uri` (from
/// [`unreachable_uri`]) with `open` must fail [`ErrorKind::Unavailable`] —
/// the connection was refused, so nothing can have applied and a retry is
/// safe — and never show the password. A backend that opens lazily may
/// succeed at open; then a `get` and a `put_if_version` must each fail
/// `Unavailable` (a put never `Unknown`: nothing was sent). Each call is
/// bounded by `limit` (a hang guard, not a speed check).
pub async fn unreachable_server_is_unavailable<F, Fut>(uri: &str, limit: Duration, open: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<Arc<dyn VersionedStore>>>,
{
    let refused = |what: &str, err: Error| {
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{what}: {err}");
        let shown = format!("{err} {err:?}");
        assert!(
            !shown.contains(UNREACHABLE_PASSWORD),
            "{what}: the error shows the password: {shown}"
        );
    };
    let store = match within(limit, "open", open(uri.to_string())).await {
        Err(err) => return refused("open", err),
        Ok(store) => store,
    };
    let key = crate::unique_key("unreachable");
    match within(limit, "get", store.get(&key)).await {
        Ok(row) => panic!("get on an unreachable server answered {row:?}"),
        Err(err) => refused("get", err),
    }
    match within(
        limit,
        "put_if_version",
        store.put_if_version(&key, None, "v".into()),
    )
    .await
    {
        Ok(outcome) => panic!("put on an unreachable server answered {outcome:?}"),
        Err(err) => refused("put_if_version", err),
    }
}

async fn within<T>(limit: Duration, what: &str, call: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(limit, call).await {
        Ok(done) => done,
        Err(_) => panic!("{what} on an unreachable server hung for {limit:?}"),
    }
}
