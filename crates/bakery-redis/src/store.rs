//! [`RedisStore`]: the versioned conditional put on Redis hashes.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bakery_core::durability::Recheck;
use bakery_core::{
    async_trait, Bytes, Capabilities, DeleteOutcome, Error, ErrorKind, Key, Operation, PutOutcome,
    Result, Row, Version, VersionedStore, Watch,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use tracing::Instrument;

use crate::durability;
use crate::error::{map_err, unexpected, Failure, Phase};
use crate::notify::{Listener, Subscriber};
use crate::{CasStrategy, RedisConfig, BACKEND};
use pool::{Lease, Pool};
use scripts::{
    decode, exhausted, expected_arg, next_version, parse_version, script_reply, ScriptReply,
    Scripts, Stored, FIELD_VALUE, FIELD_VERSION,
};

mod pool;
pub(crate) mod scripts;

/// How often the watch strategy retries a transaction whose `EXEC` aborted
/// although the re-read row still matched (a foreign write that did not
/// touch `v` or `ver`), before giving up with `Unavailable`.
const MAX_WATCH_ROUNDS: usize = 16;

/// The largest value a notification carries (a lock's row is far smaller):
/// bigger ones wake plainly, and the waiter reads.
const NOTIFY_ROW_LIMIT: usize = 64 * 1024;

/// A [`VersionedStore`] on a Redis server: one hash per key, compare-and-set
/// by a Lua script or by `WATCH`/`MULTI`/`EXEC` ([`CasStrategy`]).
///
/// Reads (`HMGET`) and the script strategy share one multiplexed connection
/// that reconnects by itself after a failure; the watch strategy checks a
/// dedicated connection out of a pool for every transaction. Every call is
/// bounded by the configured timeout. `notify` publishes on the key's
/// channel; `watch` subscribes to it on one pub/sub connection per store,
/// opened by the first watch (crate docs, "Notifications").
///
/// ```no_run
/// use bakery_core::{Key, PutOutcome, VersionedStore};
/// use bakery_redis::RedisStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/0?prefix=myapp:").await?;
/// let key = Key::new("greeting")?;
/// let row = store.put_if_version(&key, None, "hello".into()).await?.applied().unwrap();
///
/// // A stale expectation is a conflict carrying the current row.
/// let stale = store.put_if_version(&key, None, "hi".into()).await?;
/// assert_eq!(stale, PutOutcome::Conflict(Some(row.clone())));
/// let next = store.put_if_version(&key, Some(row.version), "hi".into()).await?;
/// assert_eq!(next.applied().unwrap().version, row.version + 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: RedisConfig,
    /// Reads and the script strategy: one multiplexed, self-reconnecting
    /// connection. Never used for `WATCH`.
    shared: ConnectionManager,
    scripts: Scripts,
    /// The watch strategy's dedicated connections (`None` for `script`).
    pool: Option<Pool>,
    /// Opens the pub/sub connection.
    client: Client,
    /// The pub/sub connection, opened by the first `watch` (again after it
    /// died).
    pubsub: tokio::sync::Mutex<Option<Listener>>,
    /// Watches still registered, over all pub/sub connections.
    watches: Arc<AtomicUsize>,
    /// The server passed the durability check without the opt-in: it fsyncs
    /// every acknowledged write, so rows survive its restart
    /// ([`Capabilities::PERSISTENT`]).
    durable: bool,
    /// Replicas every call `WAIT`s for (0: none; crate docs, "Replicas").
    wait_replicas: usize,
    /// The durability check repeated while live (crate docs, "Durability").
    recheck: Recheck,
}

impl RedisStore {
    /// Parse `uri` (see [`RedisConfig::from_uri`]) and connect.
    ///
    /// ```no_run
    /// use bakery_core::{Capabilities, VersionedStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = bakery_redis::RedisStore::connect("redis://127.0.0.1:6379/0?cas=watch").await?;
    /// assert_eq!(store.backend(), "redis");
    /// assert!(store.capabilities().contains(Capabilities::SHARED));
    /// # Ok(()) }
    /// ```
    pub async fn connect(uri: &str) -> Result<RedisStore> {
        Self::open(RedisConfig::from_uri(uri)?).await
    }

    /// Connect as `config` says: open the shared connection (authenticating
    /// and selecting the database), check the server's durability settings,
    /// load the scripts (`script`) or open the first pooled connection
    /// (`watch`). A server that cannot be reached is
    /// [`ErrorKind::Unavailable`]; bad credentials are [`ErrorKind::Config`],
    /// and so is a server that can lose acknowledged writes (`appendonly
    /// no`, `appendfsync everysec`, an evicting `maxmemory-policy`, a
    /// replica, a primary with more replicas than `wait_replicas`, …)
    /// unless `accept_data_loss` is set (crate docs, "Durability"). A
    /// primary's replicas connected now are those every later call waits
    /// for (crate docs, "Replicas").
    pub async fn open(config: RedisConfig) -> Result<RedisStore> {
        const OP: Operation = Operation::Open;
        config.validate().map_err(|e| e.during(OP))?;
        let span = tracing::debug_span!(
            "redis.open",
            backend = BACKEND,
            server = %config,
            strategy = %config.cas()
        );
        let timeout = config.timeout();
        let open = async {
            let client = client(&config).await?;
            let pubsub_client = client.clone();
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                // Our own timeout bounds every call; the driver's default
                // (500 ms) would turn a slow reply into an I/O error.
                .set_response_timeout(None)
                // Reconnect once per failure, without backoff loops: a call
                // during an outage fails fast with `Unavailable`.
                .set_number_of_retries(0);
            let shared = client
                .get_connection_manager_with_config(manager_config)
                .await
                .map_err(|e| map_err(e.into(), OP, Phase::Connect, None))?;
            // Refuse a server that can forget what it acknowledged, before
            // anything is written (crate docs, "Durability").
            let settings = durability::inspect(&mut shared.clone(), OP).await?;
            let wait_replicas = durability::replicas_to_wait(&settings, config.wait_replicas());
            let hazards = durability::hazards(&settings, wait_replicas);
            bakery_core::durability::check(BACKEND, &hazards, config.accept_data_loss())?;
            let durable = hazards.is_empty();
            let scripts = Scripts::new();
            let pool = match config.cas() {
                CasStrategy::Script => {
                    let mut conn = shared.clone();
                    for script in [&scripts.put, &scripts.delete] {
                        script
                            .prepare_invoke()
                            .load_async(&mut conn)
                            .await
                            .map_err(|e| map_err(e.into(), OP, Phase::Connect, None))?;
                    }
                    None
                }
                CasStrategy::Watch => {
                    let conn_config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(None);
                    let pool = Pool::new(client, conn_config, config.pool_size());
                    let first = pool
                        .connect()
                        .await
                        .map_err(|e| map_err(e.into(), OP, Phase::Connect, None))?;
                    pool.put_idle(first);
                    Some(pool)
                }
            };
            Ok::<_, Error>((shared, scripts, pool, pubsub_client, durable, wait_replicas))
        };
        let (shared, scripts, pool, client, durable, wait_replicas) =
            tokio::time::timeout(timeout, open)
                .instrument(span.clone())
                .await
                .map_err(|_| map_err(Failure::Timeout(timeout), OP, Phase::Connect, None))?
                .map_err(|e| e.during(OP))?;
        tracing::debug!(parent: &span, wait_replicas, "connected");
        Ok(RedisStore {
            inner: Arc::new(Inner {
                shared,
                scripts,
                pool,
                client,
                pubsub: tokio::sync::Mutex::new(None),
                watches: Arc::new(AtomicUsize::new(0)),
                durable,
                wait_replicas,
                recheck: Recheck::new(
                    BACKEND,
                    config.durability_recheck(),
                    config.accept_data_loss(),
                ),
                config,
            }),
        })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// The compare-and-set strategy in use.
    pub fn strategy(&self) -> CasStrategy {
        self.inner.config.cas()
    }

    /// The Redis key holding `key`'s hash: the prefix, then the key.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = bakery_redis::RedisStore::connect("redis://127.0.0.1/0?prefix=app:").await?;
    /// assert_eq!(store.redis_key(&bakery_core::Key::new("seq/a")?), "app:seq/a");
    /// # Ok(()) }
    /// ```
    pub fn redis_key(&self, key: &Key) -> String {
        format!("{}{}", self.inner.config.prefix(), key)
    }

    /// How many [`Watch`]es this store (and its clones) currently feeds. A
    /// dropped [`Watch`] leaves the count once its registration is removed
    /// (at once, by a background task, which also unsubscribes a channel
    /// nobody watches any more).
    pub fn active_watches(&self) -> usize {
        self.inner.watches.load(Ordering::SeqCst)
    }

    /// The open pub/sub connection's subscriber; the first call (or the
    /// first after the connection died) opens it.
    async fn subscriber(&self) -> Result<Arc<Subscriber>> {
        let mut slot = self.inner.pubsub.lock().await;
        if let Some(subscriber) = slot.as_ref().and_then(Listener::live) {
            return Ok(subscriber);
        }
        *slot = None;
        let pubsub = self
            .inner
            .client
            .get_async_pubsub()
            .await
            .map_err(|e| map_err(e.into(), Operation::Watch, Phase::Connect, None))?;
        let listener = Listener::start(pubsub, self.inner.config.timeout());
        let subscriber = listener.live();
        *slot = Some(listener);
        subscriber.ok_or_else(pubsub_closed)
    }

    /// Run `call`, the store call `op`, under the configured timeout; every
    /// error it returns names `op`. `sent` is raised by `call` once a write
    /// may be on the wire: a timeout after that is `Unknown`, before it
    /// `Unavailable`.
    async fn bounded<T>(
        &self,
        op: Operation,
        key: &Key,
        sent: &AtomicBool,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let timeout = self.inner.config.timeout();
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result.map_err(|e| e.during(op)),
            Err(_) => {
                let phase = if sent.load(Ordering::SeqCst) {
                    Phase::Write
                } else {
                    Phase::Read
                };
                Err(map_err(Failure::Timeout(timeout), op, phase, Some(key)))
            }
        }
    }

    /// Run `call` on the shared connection. A refused connection means
    /// nothing was sent, so it is retried once at once: the shared
    /// connection starts reconnecting on the failure, and the retry waits
    /// for that attempt instead of failing on the stale error right after
    /// the server came back.
    ///
    /// A lost connection is replaced by a new one, maybe to another server:
    /// the next write re-checks its durability first.
    async fn on_shared<T, F, Fut>(&self, call: F) -> redis::RedisResult<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let reply = match call(self.inner.shared.clone()).await {
            Err(e) if e.is_connection_refusal() => {
                self.inner.recheck.invalidate();
                tracing::debug!(error = %e, "connection refused; retrying once on a new connection");
                call(self.inner.shared.clone()).await
            }
            other => other,
        };
        if let Err(e) = &reply {
            if e.is_connection_refusal() || e.is_io_error() || e.is_connection_dropped() {
                self.inner.recheck.invalidate();
            }
        }
        reply
    }

    /// Before a write: the durability re-check (crate docs, "Durability"),
    /// on the shared connection when it is due.
    async fn rechecked(&self, op: Operation) -> Result<()> {
        let wait = self.inner.wait_replicas;
        self.inner
            .recheck
            .guard(op, || async move {
                durability::read_hazards(&mut self.inner.shared.clone(), wait, op).await
            })
            .await
    }

    /// The replicas every call waits for: `wait_replicas`, or those the
    /// primary had connected at open (crate docs, "Replicas").
    pub fn wait_replicas(&self) -> usize {
        self.inner.wait_replicas
    }

    /// The replication barrier after a call that returned (crate docs,
    /// "Replicas"): one `PUBLISH` to the prefix's own channel (no key's),
    /// which the primary ships to its replicas after everything the call
    /// wrote or read, then `WAIT` for `wait_replicas` of them to
    /// acknowledge it, within half the call's timeout. Both on the shared
    /// connection, in one pipeline: `WAIT` counts the replication offset of
    /// its own connection's last write, the `PUBLISH`.
    ///
    /// Too few acknowledgements or a failure: a call that `applied` a
    /// write is `Unknown` (it is on the primary and may be lost in a
    /// failover); any other failed without effect (`Unavailable`).
    async fn replicated(&self, op: Operation, key: &Key, applied: bool) -> Result<()> {
        let wanted = self.inner.wait_replicas;
        if wanted == 0 {
            return Ok(());
        }
        let wait_ms = u64::try_from(self.inner.config.timeout().as_millis() / 2)
            .unwrap_or(u64::MAX)
            .max(1);
        let mut barrier = redis::pipe();
        barrier
            .cmd("PUBLISH")
            .arg(self.inner.config.prefix())
            .arg("")
            .ignore()
            .cmd("WAIT")
            .arg(wanted)
            .arg(wait_ms);
        let barrier = &barrier;
        let reply: redis::RedisResult<(i64,)> = self
            .on_shared(|mut conn| async move { barrier.query_async(&mut conn).await })
            .await;
        let short = match reply {
            Ok((acked,)) if usize::try_from(acked).is_ok_and(|acked| acked >= wanted) => {
                return Ok(())
            }
            Ok((acked,)) => format!(
                "key `{key}`: only {acked} of {wanted} replicas acknowledged within {wait_ms} ms"
            ),
            Err(e) if !applied => return Err(map_err(e.into(), op, Phase::Read, Some(key))),
            Err(e) => {
                let detail = format!("key `{key}`: applied on the primary, but waiting for {wanted} replicas failed: {e}");
                return Err(Error::in_doubt(BACKEND, op, detail).with_source(e));
            }
        };
        tracing::debug!(wanted, "{short}");
        Err(if applied {
            Error::in_doubt(
                BACKEND,
                op,
                format!("{short}: applied on the primary, a failover may lose it"),
            )
        } else {
            Error::not_sent(ErrorKind::Unavailable, BACKEND, op, short)
        })
    }

    fn pool(&self) -> Result<&Pool> {
        self.inner.pool.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                BACKEND,
                "the watch strategy has no connection pool",
            )
        })
    }

    // --- script strategy -------------------------------------------------

    /// Run a conditional-write script on the shared connection (`sent`
    /// from here on: it may apply) and read its reply.
    async fn run_script(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        op: Operation,
        key: &Key,
        sent: &AtomicBool,
    ) -> Result<ScriptReply> {
        sent.store(true, Ordering::SeqCst);
        let reply: redis::Value = self
            .on_shared(|mut conn| async move { invocation.invoke_async(&mut conn).await })
            .await
            .map_err(|e| map_err(e.into(), op, Phase::Write, Some(key)))?;
        script_reply(reply)
    }

    async fn script_put(
        &self,
        key: &Key,
        full: &str,
        expected: Option<Version>,
        value: Bytes,
        sent: &AtomicBool,
    ) -> Result<PutOutcome> {
        let mut invocation = self.inner.scripts.put.key(full);
        invocation.arg(expected_arg(expected)).arg(&value[..]);
        match self
            .run_script(&invocation, Operation::Put, key, sent)
            .await?
        {
            ScriptReply::Applied(old) => {
                let old = old.map(|raw| parse_version(key, full, &raw)).transpose()?;
                let version = next_version(key, old)?;
                tracing::debug!(version, "applied");
                Ok(PutOutcome::Applied(Row::new(key, value, version)))
            }
            ScriptReply::Conflict(v, ver) => Ok(PutOutcome::Conflict(conflict(key, full, v, ver)?)),
            ScriptReply::Corrupt(v, ver) => Err(corrupt_reply(key, full, v, ver)),
            ScriptReply::Exhausted => Err(exhausted(key)),
        }
    }

    async fn script_delete(
        &self,
        key: &Key,
        full: &str,
        expected: Version,
        sent: &AtomicBool,
    ) -> Result<DeleteOutcome> {
        let mut invocation = self.inner.scripts.delete.key(full);
        invocation.arg(expected_arg(Some(expected)));
        match self
            .run_script(&invocation, Operation::Delete, key, sent)
            .await?
        {
            ScriptReply::Applied(_) => {
                tracing::debug!("deleted");
                Ok(DeleteOutcome::Deleted)
            }
            ScriptReply::Conflict(v, ver) => {
                Ok(DeleteOutcome::Conflict(conflict(key, full, v, ver)?))
            }
            ScriptReply::Corrupt(v, ver) => Err(corrupt_reply(key, full, v, ver)),
            ScriptReply::Exhausted => Err(unexpected("delete script", "exhausted")),
        }
    }

    // --- watch strategy --------------------------------------------------

    /// `UNWATCH` (a conflict may have left a watch on a pooled connection),
    /// `WATCH key`, `HMGET key v ver`: one round trip, nothing written. A
    /// pooled connection that died while idle is replaced once.
    async fn watch_read(
        &self,
        lease: &mut Lease<'_>,
        key: &Key,
        full: &str,
        op: Operation,
    ) -> Result<Option<Stored>> {
        let mut pipe = redis::pipe();
        pipe.cmd("UNWATCH")
            .ignore()
            .cmd("WATCH")
            .arg(full)
            .ignore()
            .cmd("HMGET")
            .arg(full)
            .arg(FIELD_VALUE)
            .arg(FIELD_VERSION);
        type Fields = ((Option<Vec<u8>>, Option<Vec<u8>>),);
        let first: Result<Fields, redis::RedisError> = pipe
            .query_async(lease.conn().map_err(|e| internal(op, e))?)
            .await;
        let ((v, ver),) = match first {
            Ok(fields) => fields,
            Err(e) if lease.reused() && (e.is_io_error() || e.is_connection_dropped()) => {
                tracing::debug!(error = %e, "pooled connection was dead; reconnecting");
                self.inner.recheck.invalidate();
                lease
                    .reconnect()
                    .await
                    .map_err(|e| map_err(e.into(), op, Phase::Read, Some(key)))?;
                pipe.query_async(lease.conn().map_err(|e| internal(op, e))?)
                    .await
                    .map_err(|e| map_err(e.into(), op, Phase::Read, Some(key)))?
            }
            Err(e) => return Err(map_err(e.into(), op, Phase::Read, Some(key))),
        };
        decode(key, full, v, ver)
    }

    async fn watch_put(
        &self,
        key: &Key,
        full: &str,
        expected: Option<Version>,
        value: Bytes,
        sent: &AtomicBool,
    ) -> Result<PutOutcome> {
        let mut version = 0;
        let write = |stored: Option<Stored>| {
            version = next_version(key, stored.map(|s| s.version))?;
            let mut tx = redis::pipe();
            tx.atomic()
                .cmd("HSET")
                .arg(full)
                .arg(FIELD_VALUE)
                .arg(&value[..])
                .cmd("HINCRBY")
                .arg(full)
                .arg(FIELD_VERSION)
                .arg(1);
            Ok(tx)
        };
        let (_, new): (i64, i64) = match self
            .watch_write(key, full, Operation::Put, expected, sent, write)
            .await?
        {
            Watched::Executed(reply) => reply,
            Watched::Conflict(current) => return Ok(PutOutcome::Conflict(current)),
        };
        if u64::try_from(new).ok() != Some(version) {
            return Err(Error::new(
                ErrorKind::Internal,
                BACKEND,
                format!("row `{key}`: HINCRBY under WATCH gave version {new}, expected {version}"),
            ));
        }
        tracing::debug!(version, "applied");
        Ok(PutOutcome::Applied(Row::new(key, value, version)))
    }

    async fn watch_delete(
        &self,
        key: &Key,
        full: &str,
        expected: Version,
        sent: &AtomicBool,
    ) -> Result<DeleteOutcome> {
        let write = |_: Option<Stored>| {
            let mut tx = redis::pipe();
            tx.atomic().cmd("HDEL").arg(full).arg(FIELD_VALUE);
            Ok(tx)
        };
        let op = Operation::Delete;
        match self
            .watch_write::<(i64,)>(key, full, op, Some(expected), sent, write)
            .await?
        {
            Watched::Executed(_) => {
                tracing::debug!("deleted");
                Ok(DeleteOutcome::Deleted)
            }
            Watched::Conflict(current) => Ok(DeleteOutcome::Conflict(current)),
        }
    }

    /// The watch strategy's optimistic loop on one pooled connection: read
    /// the row under `WATCH`; unless its live version is `expected`, that
    /// row is the conflict; otherwise run the `MULTI`/`EXEC` that `write`
    /// builds from the stored row, again while `EXEC` aborts (a concurrent
    /// write touched the key and nothing of ours applied).
    async fn watch_write<T: redis::FromRedisValue>(
        &self,
        key: &Key,
        full: &str,
        op: Operation,
        expected: Option<Version>,
        sent: &AtomicBool,
        mut write: impl FnMut(Option<Stored>) -> Result<redis::Pipeline>,
    ) -> Result<Watched<T>> {
        let mut lease = self
            .pool()?
            .checkout()
            .await
            .map_err(|e| map_err(e.into(), op, Phase::Read, Some(key)))?;
        for round in 1..=MAX_WATCH_ROUNDS {
            let stored = self.watch_read(&mut lease, key, full, op).await?;
            let current = stored.as_ref().and_then(|s| s.live(key));
            if current.as_ref().map(|row| row.version) != expected {
                tracing::debug!(current = ?current.as_ref().map(|r| r.version), round, "conflict");
                // The watch left behind is cleared by the next UNWATCH.
                lease.release_clean();
                return Ok(Watched::Conflict(current));
            }
            let tx = write(stored)?;
            sent.store(true, Ordering::SeqCst);
            let exec: Option<T> = tx
                .query_async(lease.conn().map_err(|e| internal(op, e))?)
                .await
                .map_err(|e| map_err(e.into(), op, Phase::Write, Some(key)))?;
            if let Some(reply) = exec {
                lease.release_clean();
                tracing::debug!(round, "EXEC applied");
                return Ok(Watched::Executed(reply));
            }
            // Nothing applied: re-read under a new WATCH; if the row moved,
            // that is the conflict to report.
            sent.store(false, Ordering::SeqCst);
            tracing::debug!(round, "EXEC aborted by a concurrent write; re-reading");
        }
        lease.release_clean();
        Err(gave_up(key, op))
    }
}

/// How the watch strategy's loop ended.
enum Watched<T> {
    /// `EXEC` ran; its reply.
    Executed(T),
    /// The row is not at the expected version: the current row.
    Conflict(Option<Row>),
}

/// The current row a script's conflict reply holds.
fn conflict(
    key: &Key,
    full: &str,
    v: Option<Vec<u8>>,
    ver: Option<Vec<u8>>,
) -> Result<Option<Row>> {
    let current = decode(key, full, v, ver)?.and_then(|s| s.live(key));
    tracing::debug!(current = ?current.as_ref().map(|r| r.version), "conflict");
    Ok(current)
}

/// A script found fields it cannot decode: report what `decode` says.
fn corrupt_reply(key: &Key, full: &str, v: Option<Vec<u8>>, ver: Option<Vec<u8>>) -> Error {
    match decode(key, full, v, ver) {
        Err(e) => e,
        Ok(_) => Error::new(
            ErrorKind::Internal,
            BACKEND,
            format!("row `{key}`: the script called the row corrupt, but it decodes"),
        ),
    }
}

fn pubsub_closed() -> Error {
    Error::not_sent(
        ErrorKind::Unavailable,
        BACKEND,
        Operation::Watch,
        "the pub/sub connection closed as it opened; poll instead",
    )
}

fn gave_up(key: &Key, op: Operation) -> Error {
    Error::not_sent(
        ErrorKind::Unavailable,
        BACKEND,
        op,
        format!(
            "key `{key}`: EXEC aborted {MAX_WATCH_ROUNDS} times although the row did not change (foreign writes to the hash?)"
        ),
    )
}

fn internal(op: Operation, e: redis::RedisError) -> Error {
    Error::new(ErrorKind::Internal, BACKEND, format!("{op} failed: {e}"))
        .during(op)
        .with_source(e)
}

/// The driver client for `config`: plain TCP or TLS (with an optional CA).
async fn client(config: &RedisConfig) -> Result<Client> {
    let addr = if config.tls() {
        ConnectionAddr::TcpTls {
            host: config.host().to_string(),
            port: config.port(),
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(config.host().to_string(), config.port())
    };
    let mut settings = redis::RedisConnectionInfo::default().set_db(config.db());
    if let Some(user) = config.username() {
        settings = settings.set_username(user);
    }
    if let Some(password) = config.password() {
        settings = settings.set_password(password);
    }
    let info: ConnectionInfo = addr
        .into_connection_info()
        .map_err(|e| Error::config(BACKEND, format!("redis connection settings: {e}")))?
        .set_redis_settings(settings);
    tls_client(config, info).await
}

#[cfg(feature = "tls")]
async fn tls_client(config: &RedisConfig, info: ConnectionInfo) -> Result<Client> {
    if config.tls() {
        // rustls needs a process-wide crypto provider; install ring unless
        // the application already chose one (then this is a no-op error).
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let client = match config.ca_file() {
        Some(path) => {
            let pem = tokio::fs::read(path).await.map_err(|e| {
                Error::config(
                    BACKEND,
                    format!("cannot read redis option `ca_file` {}: {e}", path.display()),
                )
                .with_source(e)
            })?;
            let certs = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            };
            Client::build_with_tls(info, certs)
        }
        None => Client::open(info),
    };
    client.map_err(|e| Error::config(BACKEND, format!("redis client: {e}")).with_source(e))
}

#[cfg(not(feature = "tls"))]
async fn tls_client(_config: &RedisConfig, info: ConnectionInfo) -> Result<Client> {
    Client::open(info)
        .map_err(|e| Error::config(BACKEND, format!("redis client: {e}")).with_source(e))
}

#[async_trait]
impl VersionedStore for RedisStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    /// `SHARED | LINEARIZABLE_READS | WATCH`, and `PERSISTENT` when the
    /// server passed the durability check without `accept_data_loss=true`.
    fn capabilities(&self) -> Capabilities {
        let mut caps =
            Capabilities::SHARED | Capabilities::LINEARIZABLE_READS | Capabilities::WATCH;
        if self.inner.durable {
            caps |= Capabilities::PERSISTENT;
        }
        caps
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let full = self.redis_key(key);
        let sent = AtomicBool::new(false);
        self.bounded(Operation::Get, key, &sent, async {
            let mut hmget = redis::cmd("HMGET");
            hmget.arg(&full).arg(FIELD_VALUE).arg(FIELD_VERSION);
            let hmget = &hmget;
            let (v, ver): (Option<Vec<u8>>, Option<Vec<u8>>) = self
                .on_shared(|mut conn| async move { hmget.query_async(&mut conn).await })
                .await
                .map_err(|e| map_err(e.into(), Operation::Get, Phase::Read, Some(key)))?;
            let row = decode(key, &full, v, ver)?.and_then(|s| s.live(key));
            self.replicated(Operation::Get, key, false).await?;
            Ok(row)
        })
        .await
    }

    /// Compares and writes the hash atomically: one Lua script (`cas=script`)
    /// or WATCH/MULTI/EXEC (`cas=watch`).
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let full = self.redis_key(key);
        let sent = AtomicBool::new(false);
        let call = async {
            self.rechecked(Operation::Put).await?;
            let outcome = match self.strategy() {
                CasStrategy::Script => self.script_put(key, &full, expected, value, &sent).await,
                CasStrategy::Watch => self.watch_put(key, &full, expected, value, &sent).await,
            }?;
            let applied = matches!(outcome, PutOutcome::Applied(_));
            self.replicated(Operation::Put, key, applied).await?;
            Ok(outcome)
        };
        self.bounded(Operation::Put, key, &sent, call).await
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let full = self.redis_key(key);
        let sent = AtomicBool::new(false);
        let call = async {
            self.rechecked(Operation::Delete).await?;
            let outcome = match self.strategy() {
                CasStrategy::Script => self.script_delete(key, &full, expected, &sent).await,
                CasStrategy::Watch => self.watch_delete(key, &full, expected, &sent).await,
            }?;
            let applied = matches!(outcome, DeleteOutcome::Deleted);
            self.replicated(Operation::Delete, key, applied).await?;
            Ok(outcome)
        };
        self.bounded(Operation::Delete, key, &sent, call).await
    }

    /// Subscribes to the key's channel on the store's pub/sub connection
    /// (opened on first use, and again after it died); returns once the
    /// server confirmed the subscription. Woken by [`notify`](Self::notify)
    /// only: writes themselves publish nothing.
    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        let channel = self.redis_key(key);
        let sent = AtomicBool::new(false);
        self.bounded(Operation::Watch, key, &sent, async {
            // A connection can die between the lookup and the
            // registration: then the second round opens a new one.
            for _ in 0..2 {
                let subscriber = self.subscriber().await?;
                let registered = subscriber
                    .register(key, &channel, &self.inner.watches)
                    .await?;
                if let Some(watch) = registered {
                    return Ok(Some(watch));
                }
            }
            Err(pubsub_closed())
        })
        .await
    }

    /// One `PUBLISH` on the key's channel, with the row as it is now when it
    /// has one of at most 64 KiB (a script reads and
    /// publishes it), on the shared connection: one round trip.
    async fn notify(&self, key: &Key) -> Result<()> {
        let channel = self.redis_key(key);
        let sent = AtomicBool::new(false);
        self.bounded(Operation::Notify, key, &sent, async {
            let mut publish = self.inner.scripts.notify.key(&channel);
            publish.arg(key.as_str()).arg(NOTIFY_ROW_LIMIT);
            let publish = &publish;
            let send =
                || self.on_shared(|mut conn| async move { publish.invoke_async(&mut conn).await });
            let receivers: i64 = match send().await {
                // A second PUBLISH is harmless (one more wake-up), a lost
                // one costs a waiter its poll interval: retry once on the
                // reconnected shared connection.
                Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                    tracing::debug!(error = %e, "shared connection lost; publishing again");
                    send().await
                }
                other => other,
            }
            .map_err(|e| map_err(e.into(), Operation::Notify, Phase::Read, Some(key)))?;
            tracing::debug!(receivers, "published");
            Ok(())
        })
        .await
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("RedisStore");
        s.field("server", &self.inner.config.to_string())
            .field("strategy", &self.inner.config.cas());
        if let Some(pool) = &self.inner.pool {
            s.field("idle_connections", &pool.idle_count());
        }
        s.finish()
    }
}
