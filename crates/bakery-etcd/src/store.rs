//! [`EtcdStore`]: the versioned conditional put as one etcd transaction.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bakery_core::{
    async_trait, Bytes, Capabilities, DeleteOutcome, Key, Operation, PutOutcome, Result, Row,
    Version, VersionedStore, Watch, WatchSender,
};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, KvClient, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchClient, WatchStream,
};
use tracing::Instrument;

use crate::error::{map_err, protocol, timed_out, watch_refused, Request};
use crate::{EtcdConfig, BACKEND};

/// The largest reply the client decodes. etcd's own request limit
/// (`--max-request-bytes`, 1.5 MiB by default) keeps values far below it;
/// tonic's default of 4 MiB would fail on a server configured higher.
const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;

/// A [`VersionedStore`] on an etcd v3 cluster.
///
/// - A row is one etcd key, `prefix + key`; its value is the row's bytes as
///   they are, and its version is the key's `mod_revision` (the cluster
///   revision of the key's last write).
/// - `put_if_version` and `delete_if_version` are each ONE etcd transaction
///   that compares `mod_revision` (or `version == 0` for "absent"), writes on
///   success, and reads the current row on failure, so a conflict hands back
///   the current row without a second round trip.
/// - `get` is a linearizable range read (etcd's default; never serializable).
/// - `watch` opens a native etcd watch on the row's key: every write wakes
///   it, so `notify` is a no-op.
///
/// The client is a multiplexed gRPC channel balanced over the endpoints;
/// clones of the store share it.
///
/// ```no_run
/// use bakery_core::{Key, PutOutcome, VersionedStore};
/// use bakery_etcd::EtcdStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = EtcdStore::connect("etcd://127.0.0.1:2379/?prefix=bakery/").await?;
/// let key = Key::new("greeting")?;
/// let row = store.put_if_version(&key, None, "hello".into()).await?.applied().unwrap();
/// // The version is the etcd key's mod_revision.
/// assert_eq!(store.get(&key).await?.unwrap().version, row.version);
///
/// // A stale version is a conflict that carries the current row.
/// let stale = store.put_if_version(&key, None, "hi".into()).await?;
/// assert_eq!(stale, PutOutcome::Conflict(Some(row.clone())));
/// let next = store.put_if_version(&key, Some(row.version), "hi".into()).await?;
/// assert!(next.applied().unwrap().version > row.version);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdStore {
    /// Kept so the balanced channel's endpoint set lives as long as the store.
    _client: Client,
    kv: KvClient,
    watch: WatchClient,
    /// Watches whose forwarding task still runs, shared by the clones.
    watches: Arc<AtomicUsize>,
    config: EtcdConfig,
}

impl EtcdStore {
    /// Parse `uri` (see [`EtcdConfig::from_uri`]) and connect.
    ///
    /// ```no_run
    /// use bakery_core::{Capabilities, VersionedStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = bakery_etcd::EtcdStore::connect("etcd://127.0.0.1:2379").await?;
    /// assert_eq!(store.backend(), "etcd");
    /// assert!(store.capabilities().contains(Capabilities::LINEARIZABLE_READS));
    /// # Ok(()) }
    /// ```
    pub async fn connect(uri: &str) -> Result<EtcdStore> {
        Self::open(EtcdConfig::from_uri(uri)?).await
    }

    /// Connect to the cluster `config` names: authenticate if a user is set,
    /// then make one linearizable read under the prefix, so that an
    /// unreachable cluster, a cluster without quorum or a refused user fails
    /// here ([`ErrorKind::Unavailable`] or [`ErrorKind::Config`]) within the
    /// connect timeout rather than on the first call.
    ///
    /// [`ErrorKind::Unavailable`]: bakery_core::ErrorKind::Unavailable
    /// [`ErrorKind::Config`]: bakery_core::ErrorKind::Config
    pub async fn open(config: EtcdConfig) -> Result<EtcdStore> {
        config.validate().map_err(|e| e.during(Operation::Open))?;
        let span = tracing::debug_span!(
            "etcd.open",
            backend = BACKEND,
            op = "open",
            endpoints = %config.endpoints().join(","),
            prefix = config.prefix(),
        );
        Self::open_validated(config).instrument(span).await
    }

    async fn open_validated(config: EtcdConfig) -> Result<EtcdStore> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout())
            .with_timeout(config.timeout())
            // A member that lost its leader refuses calls at once ("no
            // leader") instead of letting them time out: a clear
            // Unavailable, even for writes.
            .with_require_leader(true);
        if let Some((user, password)) = config.credentials() {
            // Tokens expire; a call refused for an expired token was not
            // applied and is retried once with a fresh one.
            options = options
                .with_user(user, password)
                .with_auto_token_refresh(true);
        }
        let endpoints: Vec<String> = config
            .endpoints()
            .iter()
            .map(|e| format!("http://{e}"))
            .collect();
        let deadline = config.connect_timeout();
        // Connecting is lazy; with a user it also authenticates.
        let client = bounded(
            Request::Read(Operation::Open),
            deadline,
            Client::connect(endpoints, Some(options)),
        )
        .await?;
        let kv = client
            .kv_client()
            .max_decoding_message_size(MAX_REPLY_BYTES);
        let watch = client
            .watch_client()
            .max_decoding_message_size(MAX_REPLY_BYTES);
        // First contact: a count-only, linearizable read of the prefix key.
        let mut probe = kv.clone();
        bounded(
            Request::Read(Operation::Open),
            deadline,
            probe.get(
                config.prefix().as_bytes(),
                Some(GetOptions::new().with_count_only()),
            ),
        )
        .await?;
        tracing::debug!("connected");
        Ok(EtcdStore {
            _client: client,
            kv,
            watch,
            watches: Arc::new(AtomicUsize::new(0)),
            config,
        })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    /// How many [`Watch`]es this store (and its clones) currently feeds:
    /// one etcd watch each. A dropped [`Watch`] leaves this count as soon
    /// as its background task has cancelled the etcd watch.
    pub fn active_watches(&self) -> usize {
        self.watches.load(Ordering::SeqCst)
    }

    /// The etcd key of a bakery key: the prefix, then the key.
    fn etcd_key(&self, key: &Key) -> Vec<u8> {
        let prefix = self.config.prefix().as_bytes();
        let mut out = Vec::with_capacity(prefix.len() + key.as_str().len());
        out.extend_from_slice(prefix);
        out.extend_from_slice(key.as_str().as_bytes());
        out
    }

    /// Run "if `guard` then `write`, else get the key" as one transaction
    /// of `op` (put or delete) under the call deadline: the reply when
    /// `guard` held, else the key's current row (the conflict), from the
    /// same reply.
    async fn write_if(
        &self,
        op: Operation,
        key: &Key,
        etcd_key: &[u8],
        guard: Compare,
        write: TxnOp,
    ) -> Result<std::result::Result<TxnResponse, Option<Row>>> {
        let txn = Txn::new()
            .when([guard])
            .and_then([write])
            .or_else([TxnOp::get(etcd_key, None)]);
        let mut kv = self.kv.clone();
        let reply = bounded(Request::Txn(op), self.config.timeout(), kv.txn(txn)).await?;
        if reply.succeeded() {
            return Ok(Ok(reply));
        }
        let current = Self::current_row(op, key, etcd_key, &reply)?;
        Ok(Err(conflict(current)))
    }

    /// The key's current row, read because no key can hold the version a
    /// write of `op` expects: the conflict that write returns.
    async fn unmatchable(
        &self,
        op: Operation,
        key: &Key,
        etcd_key: Vec<u8>,
    ) -> Result<Option<Row>> {
        Ok(conflict(self.read(op, key, etcd_key).await?))
    }

    /// A linearizable read of one key, made by the store call `op`.
    async fn read(&self, op: Operation, key: &Key, etcd_key: Vec<u8>) -> Result<Option<Row>> {
        let mut kv = self.kv.clone();
        let mut reply = bounded(
            Request::Read(op),
            self.config.timeout(),
            kv.get(etcd_key.clone(), None),
        )
        .await?;
        one_row(op, key, &etcd_key, reply.take_kvs())
    }

    /// Open an etcd watch on one key and wait until etcd confirms it, so
    /// that every write committed after this returns is reported.
    async fn open_watch(&self, etcd_key: Vec<u8>) -> Result<(WatchStream, i64)> {
        let deadline = self.config.timeout();
        let request = Request::Read(Operation::Watch);
        let mut client = self.watch.clone();
        let mut stream = bounded(request, deadline, client.watch(etcd_key, None)).await?;
        match bounded(request, deadline, stream.message()).await? {
            Some(reply) if reply.created() && !reply.canceled() => Ok((stream, reply.watch_id())),
            Some(reply) if reply.canceled() => Err(watch_refused(reply.cancel_reason())),
            Some(_) => Err(protocol(
                Operation::Watch,
                "the first reply to a watch request did not confirm the watch",
            )),
            None => Err(protocol(
                Operation::Watch,
                "the watch stream ended before etcd confirmed the watch",
            )),
        }
    }

    /// The row in the `else` branch's get of a failed transaction of `op`.
    fn current_row(
        op: Operation,
        key: &Key,
        etcd_key: &[u8],
        reply: &TxnResponse,
    ) -> Result<Option<Row>> {
        match reply.op_responses().into_iter().next() {
            Some(TxnOpResponse::Get(mut get)) => one_row(op, key, etcd_key, get.take_kvs()),
            other => Err(protocol(
                op,
                format!(
                    "a failed transaction on `{key}` answered {}, expected the get of its else branch",
                    describe(other.as_ref())
                ),
            )),
        }
    }
}

/// Run `call`, failing after `deadline` with our own timeout error.
async fn bounded<T>(
    request: Request,
    deadline: std::time::Duration,
    call: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
) -> Result<T> {
    match tokio::time::timeout(deadline, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => {
            let err = map_err(e, request);
            tracing::debug!(error = %err, "failed");
            Err(err)
        }
        Err(_) => {
            let err = timed_out(request, deadline);
            tracing::debug!(error = %err, "timed out");
            Err(err)
        }
    }
}

/// Forward the events of one etcd watch to `sender` until the [`Watch`] is
/// dropped (then cancel the etcd watch) or the stream ends (connection
/// lost, watch cancelled by etcd): dropping `sender` then tells the waiter
/// to poll.
async fn forward(
    mut stream: WatchStream,
    watch_id: i64,
    key: Key,
    sender: WatchSender,
    live: Arc<AtomicUsize>,
) {
    loop {
        tokio::select! {
            () = sender.closed() => {
                // Best effort: dropping the stream ends it on the server too.
                if let Err(e) = stream.cancel(watch_id).await {
                    tracing::debug!(error = %e, "cancelling the etcd watch failed");
                }
                tracing::debug!("watch dropped");
                break;
            }
            reply = stream.message() => match reply {
                Ok(Some(reply)) if reply.canceled() => {
                    tracing::debug!(reason = reply.cancel_reason(), "etcd cancelled the watch");
                    break;
                }
                Ok(Some(reply)) => {
                    if !reply.events().iter().all(|event| hand_over(&key, &sender, event.kv())) {
                        break;
                    }
                }
                Ok(None) => {
                    tracing::debug!("watch stream ended");
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %map_err(e, Request::Read(Operation::Watch)), "watch stream failed");
                    break;
                }
            },
        }
    }
    live.fetch_sub(1, Ordering::SeqCst);
}

/// Wake `sender` for one event: with the row a put left (its value and
/// `mod_revision`), or plainly for a delete (its key-value has version 0)
/// or anything unexpected, so the waiter reads. `false` once the watch was
/// dropped.
fn hand_over(key: &Key, sender: &WatchSender, kv: Option<&KeyValue>) -> bool {
    let row = kv.filter(|kv| kv.version() > 0).and_then(|kv| {
        let version = version_of(Operation::Watch, key, kv.mod_revision()).ok()?;
        Some(Row::new(key, Bytes::copy_from_slice(kv.value()), version))
    });
    match row {
        Some(row) => sender.wake_with_row(row),
        None => sender.wake(),
    }
}

/// `current`, the row a write met instead of the version it expected,
/// logged as the conflict it is.
fn conflict(current: Option<Row>) -> Option<Row> {
    tracing::debug!(current = ?current.as_ref().map(|row| row.version), "conflict");
    current
}

/// Names a transaction's first response without printing it (it may hold
/// a large value).
fn describe(response: Option<&TxnOpResponse>) -> String {
    match response {
        None => "nothing".into(),
        Some(TxnOpResponse::Put(_)) => "a put".into(),
        Some(TxnOpResponse::Get(get)) => format!("a get of {} keys", get.kvs().len()),
        Some(TxnOpResponse::Delete(delete)) => format!("a delete of {} keys", delete.deleted()),
        Some(TxnOpResponse::Txn(_)) => "a nested transaction".into(),
    }
}

/// A `mod_revision` as a bakery version: etcd revisions start at 1.
fn version_of(op: Operation, key: &Key, revision: i64) -> Result<Version> {
    u64::try_from(revision)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| protocol(op, format!("key `{key}` has revision {revision}")))
}

/// The row of a single-key range reply (at most one key-value).
fn one_row(op: Operation, key: &Key, etcd_key: &[u8], kvs: Vec<KeyValue>) -> Result<Option<Row>> {
    let mut kvs = kvs.into_iter();
    let Some(kv) = kvs.next() else {
        return Ok(None);
    };
    if kvs.next().is_some() || kv.key() != etcd_key {
        return Err(protocol(
            op,
            format!("a read of the single key `{key}` returned other keys"),
        ));
    }
    let version = version_of(op, key, kv.mod_revision())?;
    let (_, value) = kv.into_key_value();
    Ok(Some(Row::new(key, Bytes::from(value), version)))
}

/// The revision a successful write transaction produced: the header's
/// revision, which is the `mod_revision` of every key the transaction wrote.
fn written_revision(key: &Key, reply: &TxnResponse) -> Result<Version> {
    let revision = reply
        .header()
        .map(|header| header.revision())
        .ok_or_else(|| protocol(Operation::Put, "a transaction reply without a header"))?;
    version_of(Operation::Put, key, revision)
}

#[async_trait]
impl VersionedStore for EtcdStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::PERSISTENT
            | Capabilities::SHARED
            | Capabilities::LINEARIZABLE_READS
            | Capabilities::WATCH
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        self.read(Operation::Get, key, self.etcd_key(key)).await
    }

    /// One transaction: compare the key's `mod_revision` (or absence), then
    /// put; a failed compare returns the current key in the same reply.
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let etcd_key = self.etcd_key(key);
        let guard = match expected {
            // Absent: the key has no live revision (`version` counts the
            // writes since its last creation; 0 means it does not exist).
            None => Compare::version(etcd_key.clone(), CompareOp::Equal, 0),
            Some(expected) => match i64::try_from(expected) {
                // The key exists (an absent key has mod_revision 0, so this
                // also keeps `Some(0)` from creating it) …
                Ok(revision) if revision > 0 => {
                    Compare::mod_revision(etcd_key.clone(), CompareOp::Equal, revision)
                }
                // … and no key ever has revision 0 or above i64::MAX: a plain
                // linearizable read is the whole answer.
                _ => {
                    let current = self.unmatchable(Operation::Put, key, etcd_key).await?;
                    return Ok(PutOutcome::Conflict(current));
                }
            },
        };
        let write = TxnOp::put(etcd_key.clone(), value.to_vec(), None);
        let reply = match self
            .write_if(Operation::Put, key, &etcd_key, guard, write)
            .await?
        {
            Ok(reply) => reply,
            Err(current) => return Ok(PutOutcome::Conflict(current)),
        };
        let version = written_revision(key, &reply)?;
        tracing::debug!(version, "applied");
        Ok(PutOutcome::Applied(Row::new(key, value, version)))
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let etcd_key = self.etcd_key(key);
        let revision = match i64::try_from(expected) {
            Ok(revision) if revision > 0 => revision,
            // No key has such a revision (and an absent key's mod_revision
            // is 0, which must not "match" a delete of nothing).
            _ => {
                let current = self.unmatchable(Operation::Delete, key, etcd_key).await?;
                return Ok(DeleteOutcome::Conflict(current));
            }
        };
        let guard = Compare::mod_revision(etcd_key.clone(), CompareOp::Equal, revision);
        let write = TxnOp::delete(etcd_key.clone(), None);
        let reply = match self
            .write_if(Operation::Delete, key, &etcd_key, guard, write)
            .await?
        {
            Ok(reply) => reply,
            Err(current) => return Ok(DeleteOutcome::Conflict(current)),
        };
        match reply.op_responses().into_iter().next() {
            Some(TxnOpResponse::Delete(delete)) if delete.deleted() == 1 => {
                tracing::debug!("deleted");
                Ok(DeleteOutcome::Deleted)
            }
            other => Err(protocol(
                Operation::Delete,
                format!(
                    "the delete of `{key}` at revision {revision} answered {}",
                    describe(other.as_ref())
                ),
            )),
        }
    }

    /// A native etcd watch on the row's key: every write (put or delete)
    /// wakes it, a put with the row it left (etcd's event carries it).
    /// Returns once etcd has confirmed the watch.
    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        let (stream, watch_id) = self.open_watch(self.etcd_key(key)).await?;
        let (sender, watch) = Watch::channel();
        self.watches.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(
            forward(stream, watch_id, key.clone(), sender, self.watches.clone()).in_current_span(),
        );
        tracing::debug!(watch_id, "watching");
        Ok(Some(watch))
    }

    // `notify` stays the trait's no-op: the watch already sees every write.
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The config's Debug redacts the password.
        f.debug_struct("EtcdStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
