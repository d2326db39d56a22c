//! [`PostgresStore`]: the versioned conditional put as one SQL statement.

pub(crate) mod tls;

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bakery_core::error::cause_chain;
use bakery_core::{
    async_trait, signed_version, within, Bytes, Capabilities, DeleteOutcome, Error, ErrorKind, Key,
    Operation, PutOutcome, Result, Row, Stored, Version, VersionedStore, Watch,
};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime, Timeouts};
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;
use tracing::Instrument;

use crate::durability::{self, Connector};
use crate::error::{map_err, map_pool_err, timed_out, Phase};
use crate::notify::{channel_name, Listener};
use crate::{PostgresConfig, TableName, BACKEND, CLIENT_GRACE, DEFAULT_TIMEOUT};
use bakery_core::durability::Recheck;

/// How often one call re-runs its statement when the statement's snapshot
/// and the row it waited for disagree (see [`Statements`]). One re-run is
/// enough for updates and deletes; a create can meet a new one only if other
/// clients keep deleting and re-creating the key meanwhile.
const MAX_ATTEMPTS: usize = 5;

/// The first key of the two-key advisory lock taken around `CREATE TABLE`
/// (`"bake"` in ASCII), so it cannot meet an application's one-key locks.
const DDL_LOCK_CLASS: i32 = 0x6261_6b65;

/// A [`VersionedStore`] on one table of a PostgreSQL database.
///
/// Each call is ONE statement in its own implicit transaction, on a pooled
/// connection (deadpool), prepared once per connection. A compare-and-set is
/// a conditional `UPDATE … WHERE key = $1 AND version = $2` (or
/// `INSERT … ON CONFLICT … DO UPDATE … WHERE value IS NULL` for a create);
/// PostgreSQL's row lock and READ COMMITTED re-check of the `WHERE` make it
/// atomic across any number of clients. On a mismatch the same statement
/// returns the current row. The SQL and the argument are in the crate docs.
///
/// `notify` is one `pg_notify` on the table's channel; `watch` listens on a
/// dedicated session, opened on the first watch and shared by all of them
/// (crate docs, "Notifications").
///
/// ```no_run
/// use bakery_core::{Key, PutOutcome, VersionedStore};
/// use bakery_postgres::PostgresStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/bakery").await?;
/// let key = Key::new("greeting")?;
/// let row = match store.put_if_version(&key, None, "hello".into()).await? {
///     PutOutcome::Applied(row) => row,
///     PutOutcome::Conflict(current) => panic!("already there: {current:?}"),
/// };
/// let next = store.put_if_version(&key, Some(row.version), "hi".into()).await?;
/// assert!(next.is_applied());
/// # Ok(()) }
/// ```
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: PostgresConfig,
    pool: Pool,
    /// For cancel requests after a client-side timeout, and the LISTEN session.
    tls: MakeRustlsConnect,
    sql: Statements,
    /// The LISTEN session, opened by the first `watch` (again after it died).
    listener: tokio::sync::Mutex<Option<Listener>>,
    /// Watches still registered, over all sessions.
    watches: Arc<AtomicUsize>,
    /// The durability check repeated while live (crate docs, "Durability").
    recheck: Arc<Recheck>,
}

/// The SQL, with the validated, quoted table name formatted in once.
///
/// Every write returns at most one row `(applied, value, version)`:
/// `applied = true` with the new version when the write took effect, or
/// `applied = false` with the stored row (tombstone included) otherwise.
///
/// Why the conflict row is correct. All parts of one statement share one
/// snapshot, taken when the statement starts (inside the call). The
/// modifying part (`UPDATE`, `INSERT … ON CONFLICT`) works on the NEWEST
/// committed row version, not the snapshot's: at READ COMMITTED an `UPDATE`
/// whose row was changed by a concurrent transaction waits for it, then
/// re-checks its `WHERE` on the new version (EvalPlanQual), and `ON
/// CONFLICT` locks the newest conflicting version. The fallback `SELECT`,
/// used only when nothing was written, reads the snapshot. So the returned
/// row was the current row at the moment the snapshot was taken, a moment
/// within the call. It is a genuine conflict at that moment unless it
/// matches `expected` — which happens only when the write waited for a
/// concurrent writer that changed the row after the snapshot (the snapshot
/// still shows the old, matching row), or, for a create, when a concurrent
/// create committed after the snapshot. Those cases are detected in Rust
/// (the attempt loops of `put` and `delete`) and the statement, which
/// wrote nothing, is run again with a fresh snapshot that includes the
/// concurrent write. No read precedes a write, and no answer is built from
/// two different moments.
#[derive(Debug)]
struct Statements {
    get: String,
    create: String,
    update: String,
    delete: String,
    create_table: String,
    /// The LISTEN/NOTIFY channel (no quoting needed: `[A-Za-z0-9_.]`).
    channel: String,
    notify: String,
    listen: String,
}

/// The most payload bytes a notification may spend on a key and its row
/// (PostgreSQL's limit is 8000, with room for the version).
const NOTIFY_ROW_LIMIT: usize = 7900;

/// The conditional write `write` on table `t` (key `$1`) as one statement:
/// `(true, NULL, version)` when it wrote, else `(false, value, version)` of
/// the row as the snapshot shows it (no row: nothing).
fn conditional(t: &str, write: &str) -> String {
    format!(
        "WITH w AS ({write} RETURNING version) \
         SELECT true, NULL::bytea, version FROM w \
         UNION ALL \
         SELECT false, value, version FROM {t} WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM w)"
    )
}

impl Statements {
    fn new(table: &TableName) -> Self {
        let t = table.quoted();
        let channel = channel_name(table);
        Statements {
            // A wake-up needs no durability: its commit need not wait for
            // the WAL flush (and holds the notify lock for less time).
            // The payload is the key, then the row as it is now (version
            // and hex value, each after a newline) when it fits the 8000
            // bytes of a payload: a waiter learns of its grant unread.
            notify: format!(
                "SELECT pg_notify('{channel}', $1 || coalesce(\
                 (SELECT E'\\n' || version || E'\\n' || encode(value, 'hex') FROM {t} \
                  WHERE key = $1 AND value IS NOT NULL \
                  AND octet_length($1) + 2 * octet_length(value) < {NOTIFY_ROW_LIMIT}), '')), \
                 set_config('synchronous_commit', 'off', true)"
            ),
            listen: format!("LISTEN \"{channel}\""),
            channel,
            get: format!("SELECT value, version FROM {t} WHERE key = $1"),
            // A create over a tombstone continues its version (no ABA); a
            // corrupt tombstone (version <= 0) is left alone and reported.
            create: conditional(
                &t,
                &format!(
                    "INSERT INTO {t} AS cur (key, value, version) VALUES ($1, $2, 1) \
                     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = cur.version + 1 \
                     WHERE cur.value IS NULL AND cur.version > 0"
                ),
            ),
            update: conditional(
                &t,
                &format!(
                    "UPDATE {t} SET value = $3, version = version + 1 \
                     WHERE key = $1 AND version = $2 AND value IS NOT NULL"
                ),
            ),
            // A delete keeps the row as a tombstone at the same version.
            delete: conditional(
                &t,
                &format!(
                    "UPDATE {t} SET value = NULL \
                     WHERE key = $1 AND version = $2 AND value IS NOT NULL"
                ),
            ),
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\
                   key TEXT PRIMARY KEY, \
                   value BYTEA, \
                   version BIGINT NOT NULL CHECK (version > 0))"
            ),
        }
    }
}

impl PostgresStore {
    /// Parse `uri` (see [`PostgresConfig::from_uri`]) and open the store.
    ///
    /// ```no_run
    /// use bakery_core::{Capabilities, VersionedStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = bakery_postgres::PostgresStore::connect(
    ///     "postgresql://app:secret@db.internal:5432/bakery?table=rows&pool_size=8",
    /// )
    /// .await?;
    /// assert_eq!(store.backend(), "postgres");
    /// assert!(store.capabilities().contains(Capabilities::SHARED));
    /// # Ok(()) }
    /// ```
    pub async fn connect(uri: &str) -> Result<PostgresStore> {
        let config = PostgresConfig::from_uri(uri).map_err(|e| e.during(Operation::Open))?;
        Self::open(config).await
    }

    /// Open the store `config` describes: connect, check that the server
    /// keeps what it acknowledges, create the table if it is missing (under
    /// an advisory lock, so that many processes may start at once), and
    /// check that an existing table has the expected columns
    /// ([`ErrorKind::Config`] if not).
    ///
    /// A server with `fsync = off` or `full_page_writes = off` is refused
    /// with [`ErrorKind::Config`] naming each setting, unless the config
    /// says [`accept_data_loss`](PostgresConfig::accept_data_loss). Every
    /// connection the store opens raises `synchronous_commit` from `off` to
    /// `on` for its session (crate docs, "Durability").
    pub async fn open(config: PostgresConfig) -> Result<PostgresStore> {
        Self::open_store(config)
            .await
            .map_err(|e| e.during(Operation::Open))
    }

    async fn open_store(config: PostgresConfig) -> Result<PostgresStore> {
        config.validate()?;
        let span = tracing::debug_span!(
            "postgres.open",
            backend = BACKEND,
            op = "open",
            config = %config,
        );
        let tls = tls::connector(&config)?;
        let recheck = Arc::new(Recheck::new(
            BACKEND,
            config.durability_recheck(),
            config.accept_data_loss(),
        ));
        // Each new connection raises `synchronous_commit` from `off` before
        // the pool hands it out (durability::Connector).
        let manager = Manager::from_connect(
            config.driver_config(),
            Connector {
                tls: tls.clone(),
                recheck: recheck.clone(),
            },
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size())
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    BACKEND,
                    format!("building the connection pool: {e}"),
                )
            })?;
        let sql = Statements::new(config.table());
        let store = PostgresStore {
            inner: Arc::new(Inner {
                config,
                pool,
                tls,
                sql,
                listener: tokio::sync::Mutex::new(None),
                watches: Arc::new(AtomicUsize::new(0)),
                recheck,
            }),
        };
        store.prepare_table().instrument(span).await?;
        Ok(store)
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &PostgresConfig {
        &self.inner.config
    }

    /// The LISTEN/NOTIFY channel of this store's table: `bakery_` and the
    /// table name (`schema.name` when qualified; a name too long for a
    /// channel ends in a hash).
    pub fn channel(&self) -> &str {
        &self.inner.sql.channel
    }

    /// How many [`Watch`]es this store currently feeds. A dropped
    /// [`Watch`] leaves the count once its registration is removed (at
    /// once, by a background task).
    pub fn active_watches(&self) -> usize {
        self.inner.watches.load(Ordering::SeqCst)
    }

    /// The deadline of a call that starts now.
    fn deadline(&self) -> Option<Instant> {
        self.inner
            .config
            .timeout()
            .map(|t| Instant::now() + t + CLIENT_GRACE)
    }

    /// The client-side limit, for messages.
    fn limit(&self) -> std::time::Duration {
        self.inner
            .config
            .timeout()
            .map_or(std::time::Duration::MAX, |t| t + CLIENT_GRACE)
    }

    /// A pooled connection, within the deadline and the connect timeout.
    async fn checkout(&self, op: Operation, deadline: Option<Instant>) -> Result<Object> {
        let left = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(timed_out(Phase::Connect, op, self.limit()));
                }
                Some(left)
            }
            None => None,
        };
        let connect = self.inner.config.connect_timeout();
        let timeouts = Timeouts {
            wait: left,
            create: Some(left.map_or(connect, |left| left.min(connect))),
            recycle: left,
        };
        self.inner
            .pool
            .timeout_get(&timeouts)
            .await
            .map_err(|e| map_pool_err(e, op, self.inner.config.pool_size()))
    }

    /// Run one statement on a pooled connection: prepare (cached per
    /// connection), execute, all within `deadline`. A client-side timeout
    /// abandons the connection (and, for a read, asks the server to cancel).
    async fn query(
        &self,
        op: Operation,
        deadline: Option<Instant>,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        let client = self.checkout(op, deadline).await?;
        let statement = match within(deadline, client.prepare_cached(sql)).await {
            Some(Ok(statement)) => statement,
            Some(Err(e)) => return Err(map_err(e, Phase::Prepare, op)),
            None => {
                self.abandon(client, Statement::of(op));
                return Err(timed_out(Phase::Prepare, op, self.limit()));
            }
        };
        match within(deadline, client.query(&statement, params)).await {
            Some(Ok(rows)) => Ok(rows),
            Some(Err(e)) => Err(map_err(e, Phase::Execute, op)),
            None => {
                self.abandon(client, Statement::of(op));
                Err(timed_out(Phase::Execute, op, self.limit()))
            }
        }
    }

    /// Drop a connection whose statement outlived the client's deadline
    /// (it must not go back to the pool with a reply still in flight) and,
    /// for a read, ask the server, best effort, to cancel that statement.
    ///
    /// A write is never cancelled: past `statement_timeout` (which the
    /// server stops before committing) it can only be waiting for its
    /// synchronous standby, and a cancel there ends the wait and makes the
    /// commit visible on the primary though no standby has it: other
    /// clients would read a write that a failover then loses. Left alone,
    /// it becomes visible only once replicated.
    fn abandon(&self, client: Object, statement: Statement) {
        let token = client.cancel_token();
        drop(Object::take(client));
        if statement == Statement::Write {
            return;
        }
        let tls = self.inner.tls.clone();
        let limit = self.inner.config.connect_timeout();
        tokio::spawn(
            async move {
                match tokio::time::timeout(limit, token.cancel_query(tls)).await {
                    Ok(Ok(())) => tracing::debug!("cancel request sent"),
                    Ok(Err(e)) => tracing::debug!(error = %e, "cancel request failed"),
                    Err(_) => tracing::debug!("cancel request timed out"),
                }
            }
            .in_current_span(),
        );
    }

    /// Read the stored row (tombstone included).
    async fn read(
        &self,
        op: Operation,
        key: &Key,
        deadline: Option<Instant>,
    ) -> Result<Option<Stored>> {
        let rows = self
            .query(op, deadline, &self.inner.sql.get, &[&key.as_str()])
            .await?;
        match rows.first() {
            None => Ok(None),
            Some(row) => decode(op, key, row, 0, 1).map(Some),
        }
    }

    /// Create the table if missing, check its columns, prepare statements.
    async fn prepare_table(&self) -> Result<()> {
        let config = &self.inner.config;
        let budget = config.connect_timeout()
            + config.timeout().map_or(DEFAULT_TIMEOUT, |t| t)
            + CLIENT_GRACE;
        let deadline = Instant::now() + budget;
        match tokio::time::timeout_at(deadline, self.prepare_table_inner(deadline)).await {
            Ok(result) => result,
            Err(_) => Err(timed_out(Phase::Connect, Operation::Open, budget)),
        }
    }

    async fn prepare_table_inner(&self, deadline: Instant) -> Result<()> {
        let op = Operation::Open;
        let table = self.inner.config.table();
        let name = table.quoted();
        let mut client = self.checkout(op, Some(deadline)).await?;
        // Refuse a server that can forget what it acknowledged, before
        // anything is written (crate docs, "Durability").
        let settings = durability::inspect(&client)
            .await
            .map_err(|e| map_err(e, Phase::Execute, op))?;
        tracing::debug!(
            fsync = %settings.fsync,
            full_page_writes = %settings.full_page_writes,
            synchronous_commit = %settings.synchronous_commit,
            "durability settings"
        );
        let hazards = durability::hazards(&settings);
        bakery_core::durability::check(BACKEND, &hazards, self.inner.config.accept_data_loss())?;
        // Read just now: the first write need not read again.
        self.inner.recheck.record(&hazards);
        let exists: bool = client
            .query_one("SELECT to_regclass($1)::oid IS NOT NULL", &[&name])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| map_err(e, Phase::Execute, op))?;
        if !exists {
            // Concurrent `CREATE TABLE IF NOT EXISTS` can fail with a
            // unique violation on pg_type: serialize creators on an
            // advisory lock held until commit.
            let created = async {
                let tx = client.transaction().await?;
                tx.execute(
                    "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                    &[&DDL_LOCK_CLASS, &name],
                )
                .await?;
                tx.batch_execute(&self.inner.sql.create_table).await?;
                tx.commit().await
            }
            .await;
            match created {
                Ok(()) => {
                    tracing::debug!(table = %table, "table created (if it was still missing)")
                }
                // Someone that does not take the lock made it meanwhile.
                Err(e) if matches!(e.code().map(|c| c.code()), Some("23505" | "42P07")) => {
                    tracing::debug!(table = %table, "table created concurrently");
                }
                Err(e) => return Err(map_err(e, Phase::Execute, op)),
            }
        }
        check_schema(&client, table).await?;
        let sql = &self.inner.sql;
        for statement in [&sql.get, &sql.create, &sql.update, &sql.delete, &sql.notify] {
            client
                .prepare_cached(statement)
                .await
                .map_err(|e| map_err(e, Phase::Prepare, op))?;
        }
        Ok(())
    }

    /// The open LISTEN session's watchers; the first call (or the first
    /// after the session died) opens it, and returns once `LISTEN` is done.
    async fn listener(&self) -> Result<Arc<crate::notify::Watchers>> {
        let mut slot = self.inner.listener.lock().await;
        if let Some(watchers) = slot.as_ref().and_then(Listener::live_watchers) {
            return Ok(watchers);
        }
        *slot = None;
        let config = &self.inner.config;
        let budget = config.connect_timeout()
            + config.timeout().map_or(DEFAULT_TIMEOUT, |t| t)
            + CLIENT_GRACE;
        let listen = async {
            let (client, connection) = config
                .driver_config()
                .connect(self.inner.tls.clone())
                .await
                .map_err(|e| map_err(e, Phase::Connect, Operation::Watch))?;
            let listener = Listener::start(client, connection);
            // Like every session bakery opens (it never writes a row, but
            // nothing it runs should commit asynchronously).
            durability::commit_synchronously(listener.client())
                .await
                .map_err(|e| map_err(e, Phase::Connect, Operation::Watch))?;
            listener
                .client()
                .batch_execute(&self.inner.sql.listen)
                .await
                .map_err(|e| map_err(e, Phase::Execute, Operation::Watch))?;
            Ok::<_, Error>(listener)
        };
        let listener = tokio::time::timeout(budget, listen)
            .await
            .map_err(|_| timed_out(Phase::Connect, Operation::Watch, budget))??;
        tracing::debug!(channel = %self.inner.sql.channel, "listening");
        let watchers = listener.live_watchers();
        *slot = Some(listener);
        watchers.ok_or_else(listener_closed)
    }

    /// Before a write: the durability re-check (crate docs, "Durability"),
    /// one query on a pooled connection when it is due.
    async fn rechecked(&self, op: Operation, deadline: Option<Instant>) -> Result<()> {
        let inspect = || async move {
            let client = self.checkout(op, deadline).await?;
            match within(deadline, durability::inspect(&client)).await {
                Some(settings) => Ok(durability::hazards(
                    &settings.map_err(|e| map_err(e, Phase::Execute, op))?,
                )),
                None => {
                    self.abandon(client, Statement::Read);
                    Err(timed_out(Phase::Execute, op, self.limit()))
                }
            }
        };
        self.inner.recheck.guard(op, inspect).await
    }

    async fn put(&self, key: &Key, expected: Option<Version>, value: Bytes) -> Result<PutOutcome> {
        let deadline = self.deadline();
        self.rechecked(Operation::Put, deadline).await?;
        let expected_raw = match expected.map(signed_version) {
            None => None,
            Some(Some(raw)) => Some(raw),
            // A version no row can have (0, or above i64::MAX): a conflict
            // with whatever is there, read on its own.
            Some(None) => {
                let current = self.read(Operation::Put, key, deadline).await?;
                return Ok(PutOutcome::Conflict(current.and_then(|s| s.live(key))));
            }
        };
        let key_param = key.as_str();
        let value_param: &[u8] = &value;
        for attempt in 1..=MAX_ATTEMPTS {
            let rows = match &expected_raw {
                None => {
                    self.query(
                        Operation::Put,
                        deadline,
                        &self.inner.sql.create,
                        &[&key_param, &value_param],
                    )
                    .await?
                }
                Some(raw) => {
                    self.query(
                        Operation::Put,
                        deadline,
                        &self.inner.sql.update,
                        &[&key_param, raw, &value_param],
                    )
                    .await?
                }
            };
            let current = match rows.first() {
                Some(row) if applied(Operation::Put, key, row)? => {
                    let version = decode(Operation::Put, key, row, 1, 2)?.version;
                    tracing::debug!(version, attempt, "applied");
                    return Ok(PutOutcome::Applied(Row::new(key, value, version)));
                }
                Some(row) => decode(Operation::Put, key, row, 1, 2)?.live(key),
                None => None,
            };
            let current_version = current.as_ref().map(|row| row.version);
            if current_version == expected {
                // The snapshot shows a row that matches, yet the write did
                // not apply: it met a concurrent writer (see `Statements`).
                tracing::debug!(attempt, "snapshot and write disagree; re-running");
                continue;
            }
            tracing::debug!(current = ?current_version, "conflict");
            return Ok(PutOutcome::Conflict(current));
        }
        Err(lost_races(Operation::Put, key))
    }

    async fn delete(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let deadline = self.deadline();
        self.rechecked(Operation::Delete, deadline).await?;
        let Some(raw) = signed_version(expected) else {
            let current = self.read(Operation::Delete, key, deadline).await?;
            return Ok(DeleteOutcome::Conflict(current.and_then(|s| s.live(key))));
        };
        let key_param = key.as_str();
        for attempt in 1..=MAX_ATTEMPTS {
            let rows = self
                .query(
                    Operation::Delete,
                    deadline,
                    &self.inner.sql.delete,
                    &[&key_param, &raw],
                )
                .await?;
            let current = match rows.first() {
                Some(row) if applied(Operation::Delete, key, row)? => {
                    tracing::debug!(attempt, "deleted");
                    return Ok(DeleteOutcome::Deleted);
                }
                Some(row) => decode(Operation::Delete, key, row, 1, 2)?.live(key),
                None => None,
            };
            if current.as_ref().map(|row| row.version) == Some(expected) {
                tracing::debug!(attempt, "snapshot and write disagree; re-running");
                continue;
            }
            tracing::debug!(current = ?current.as_ref().map(|row| row.version), "conflict");
            return Ok(DeleteOutcome::Conflict(current));
        }
        Err(lost_races(Operation::Delete, key))
    }
}

fn listener_closed() -> Error {
    Error::not_sent(
        ErrorKind::Unavailable,
        BACKEND,
        Operation::Watch,
        "the LISTEN session closed as it opened; poll instead",
    )
}

fn lost_races(op: Operation, key: &Key) -> Error {
    Error::not_sent(
        ErrorKind::Unavailable,
        BACKEND,
        op,
        format_args!("row `{key}` met a concurrent writer {MAX_ATTEMPTS} times in a row; retry"),
    )
}

#[async_trait]
impl VersionedStore for PostgresStore {
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
        let stored = self.read(Operation::Get, key, self.deadline()).await?;
        Ok(stored.and_then(|stored| stored.live(key)))
    }

    /// One statement: a conditional `UPDATE` (or `INSERT … ON CONFLICT` for a
    /// create) and, on a mismatch, the current row, in one snapshot.
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        self.put(key, expected, value).await
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        self.delete(key, expected).await
    }

    /// Registers on the store's LISTEN session (opened on first use, and
    /// again after it died). Woken by [`notify`](Self::notify) only:
    /// writes themselves send no notification.
    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        // A session can die between the lookup and the registration: then
        // the second round opens a new one.
        for _ in 0..2 {
            let watchers = self.listener().await?;
            if let Some(watch) = watchers.register(key.as_str(), &self.inner.watches) {
                return Ok(Some(watch));
            }
        }
        Err(listener_closed())
    }

    /// One `pg_notify(channel, key)` in its own transaction (committed
    /// without waiting for the WAL flush): one round trip.
    async fn notify(&self, key: &Key) -> Result<()> {
        self.query(
            Operation::Notify,
            self.deadline(),
            &self.inner.sql.notify,
            &[&key.as_str()],
        )
        .await?;
        Ok(())
    }
}

/// A row of `key` that `op` cannot use: [`ErrorKind::Corrupt`].
fn corrupt(op: Operation, key: &Key, what: impl fmt::Display) -> Error {
    Error::corrupt(BACKEND, format!("row `{key}` {what}")).during(op)
}

fn bad_column(op: Operation, key: &Key, column: &str, e: tokio_postgres::Error) -> Error {
    let what = format_args!("column {column} cannot be read: {}", cause_chain(&e));
    corrupt(op, key, what).with_source(e)
}

/// The `applied` flag of a write's result row.
fn applied(op: Operation, key: &Key, row: &tokio_postgres::Row) -> Result<bool> {
    row.try_get::<_, bool>(0)
        .map_err(|e| bad_column(op, key, "applied", e))
}

/// Check a row's `value` and `version` columns; anything unexpected is
/// [`ErrorKind::Corrupt`] naming the key, never a panic.
fn decode(
    op: Operation,
    key: &Key,
    row: &tokio_postgres::Row,
    value: usize,
    version: usize,
) -> Result<Stored> {
    let raw_version: Option<i64> = row
        .try_get(version)
        .map_err(|e| bad_column(op, key, "version", e))?;
    let version = match raw_version {
        Some(v) if v > 0 => v.unsigned_abs(),
        Some(v) => {
            return Err(corrupt(
                op,
                key,
                format_args!("has version {v}; expected a positive BIGINT"),
            ))
        }
        None => {
            return Err(corrupt(
                op,
                key,
                "has a NULL version; expected a positive BIGINT",
            ))
        }
    };
    let value: Option<Vec<u8>> = row
        .try_get(value)
        .map_err(|e| bad_column(op, key, "value", e))?;
    Ok(Stored {
        value: value.map(Bytes::from),
        version,
    })
}

/// An existing table must be a table with exactly our three columns, `key`
/// carrying a unique index `ON CONFLICT (key)` can use, `value` nullable.
async fn check_schema(client: &Object, table: &TableName) -> Result<()> {
    let op = Operation::Open;
    let name = table.quoted();
    let rows = client
        .query(
            "SELECT c.relkind::text, a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull \
             FROM pg_class c \
             LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
             WHERE c.oid = to_regclass($1) \
             ORDER BY a.attnum",
            &[&name],
        )
        .await
        .map_err(|e| map_err(e, Phase::Execute, op))?;
    let read = |e: tokio_postgres::Error| map_err(e, Phase::Execute, op);
    let Some(first) = rows.first() else {
        return Err(Error::config(
            BACKEND,
            format!("table {table} does not exist and could not be created"),
        ));
    };
    let relkind: String = first.try_get(0).map_err(read)?;
    if relkind != "r" && relkind != "p" {
        let what = match relkind.as_str() {
            "v" => "a view",
            "m" => "a materialized view",
            "f" => "a foreign table",
            "S" => "a sequence",
            "i" | "I" => "an index",
            _ => "something other than a table",
        };
        return Err(Error::config(
            BACKEND,
            format!("{table} exists as {what}, not a table"),
        ));
    }
    let mut columns = Vec::new();
    for row in &rows {
        let name: Option<String> = row.try_get(1).map_err(read)?;
        let ty: Option<String> = row.try_get(2).map_err(read)?;
        let not_null: Option<bool> = row.try_get(3).map_err(read)?;
        if let (Some(name), Some(ty)) = (name, ty) {
            columns.push((name, ty, not_null.unwrap_or(false)));
        }
    }
    let has = |name: &str, ty: &str| columns.iter().any(|(n, t, _)| n == name && t == ty);
    let value_nullable = columns
        .iter()
        .any(|(n, _, not_null)| n == "value" && !not_null);
    let shape_ok = columns.len() == 3
        && has("key", "text")
        && has("value", "bytea")
        && has("version", "bigint")
        && value_nullable;
    let unique_key = if shape_ok {
        client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_index i \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
                 WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnatts = 1 \
                 AND i.indpred IS NULL AND i.indexprs IS NULL AND a.attname = 'key')",
                &[&name],
            )
            .await
            .and_then(|row| row.try_get::<_, bool>(0))
            .map_err(read)?
    } else {
        false
    };
    if !(shape_ok && unique_key) {
        let found = columns
            .iter()
            .map(|(n, t, not_null)| format!("{n} {t}{}", if *not_null { " NOT NULL" } else { "" }))
            .collect::<Vec<_>>()
            .join(", ");
        let why = if shape_ok {
            "; `key` has no unique index"
        } else {
            ""
        };
        return Err(Error::config(
            BACKEND,
            format!(
                "table {table} exists with an unexpected schema ({found}){why}; expected key TEXT PRIMARY KEY, value BYTEA (nullable), version BIGINT NOT NULL"
            ),
        ));
    }
    Ok(())
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("config", &format_args!("{}", self.inner.config))
            .finish()
    }
}

/// What an abandoned statement was doing, for [`PostgresStore::abandon`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Statement {
    /// Reads only: safe to cancel.
    Read,
    /// May be committing: never cancelled.
    Write,
}

impl Statement {
    fn of(op: Operation) -> Statement {
        match op {
            Operation::Open | Operation::Get | Operation::Watch => Statement::Read,
            // (and any operation added later: not cancelling is the safe side)
            _ => Statement::Write,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A plain session (not bakery's) on `uri`, in `dbname` if given.
    async fn raw(uri: &str, dbname: Option<&str>) -> tokio_postgres::Client {
        // The driver does not know bakery's options.
        let mut config: tokio_postgres::Config =
            uri.split('?').next().unwrap_or(uri).parse().unwrap();
        if let Some(db) = dbname {
            config.dbname(db);
        }
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    async fn show(client: &tokio_postgres::Client, setting: &str) -> String {
        client
            .query_one(&format!("SHOW {setting}"), &[])
            .await
            .unwrap()
            .get(0)
    }

    /// A scratch database whose default `synchronous_commit` is `off` (then
    /// `local`, `remote_write`, `remote_apply`): every connection the store
    /// opens — the pooled ones and the LISTEN session — runs with `on` for
    /// `off` and keeps the stronger values. Checked on the store's own
    /// connections (the pool's checkout, the listener's client).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_bakery_session_commits_synchronously_on_a_database_that_defaults_to_off() {
        let Some(uri) = bakery_testkit::server_uri("BAKERY_POSTGRES_URI", "synchronous_commit")
        else {
            return;
        };
        let admin = raw(&uri, None).await;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() % 1_000_000_000_000);
        let db = format!("bk_sync_{}_{nanos}", std::process::id());
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .unwrap();
        for (default, expected) in [
            ("off", "on"),
            ("local", "local"),
            ("remote_write", "remote_write"),
            ("remote_apply", "remote_apply"),
        ] {
            admin
                .batch_execute(&format!(
                    "ALTER DATABASE {db} SET synchronous_commit = {default}"
                ))
                .await
                .unwrap();
            // The database default reaches a plain session…
            assert_eq!(
                show(&raw(&uri, Some(&db)).await, "synchronous_commit").await,
                default
            );
            // …and bakery's sessions run with `expected`.
            let store_uri = format!(
                "{uri}{}dbname={db}&pool_size=3",
                if uri.contains('?') { '&' } else { '?' }
            );
            let store = PostgresStore::connect(&store_uri)
                .await
                .unwrap_or_else(|e| panic!("open on synchronous_commit = {default}: {e}"));
            // Three at once: the one open used, and two new ones.
            let mut held = Vec::new();
            let mut pids = Vec::new();
            for _ in 0..3 {
                let client = store
                    .checkout(Operation::Get, None)
                    .await
                    .expect("pooled connection");
                assert_eq!(
                    show(&client, "synchronous_commit").await,
                    expected,
                    "pooled session on a database defaulting to {default}"
                );
                let pid: i32 = client
                    .query_one("SELECT pg_backend_pid()", &[])
                    .await
                    .unwrap()
                    .get(0);
                pids.push(pid);
                held.push(client);
            }
            pids.sort_unstable();
            pids.dedup();
            assert_eq!(pids.len(), 3, "three distinct sessions");
            drop(held);
            // The LISTEN session.
            let k = bakery_core::Key::new("sync/watch").unwrap();
            let _watch = bakery_core::VersionedStore::watch(&store, &k)
                .await
                .unwrap()
                .expect("postgres watches");
            {
                let slot = store.inner.listener.lock().await;
                let listener = slot.as_ref().expect("the LISTEN session is open");
                assert_eq!(
                    show(listener.client(), "synchronous_commit").await,
                    expected,
                    "LISTEN session on a database defaulting to {default}"
                );
            }
            // A write on that database still works.
            let k = bakery_core::Key::new(format!("sync/{default}")).unwrap();
            assert!(
                bakery_core::VersionedStore::put_if_version(&store, &k, None, "x".into())
                    .await
                    .unwrap()
                    .is_applied()
            );
            drop(store);
        }
        // The store's connections close as it drops; FORCE ends any that
        // are still on their way out.
        tokio::time::sleep(Duration::from_millis(50)).await;
        admin
            .batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
            .await
            .unwrap();
    }
}
