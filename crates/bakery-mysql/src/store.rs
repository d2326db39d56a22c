//! [`MysqlStore`]: the versioned conditional put as one SQL statement.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::durability::Recheck;
use bakery_core::{
    async_trait, signed_version, within, Bytes, Capabilities, DeleteOutcome, Error, ErrorKind, Key,
    Operation, PutOutcome, Result, Row, Stored, Version, VersionedStore,
};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool, Value};
use tokio::time::Instant;
use tracing::Instrument;

use crate::durability::{self, Settings};
use crate::error::{map_err, timed_out, Phase};
use crate::{MysqlConfig, TableName, BACKEND, CLIENT_GRACE, DEFAULT_TIMEOUT};

/// How often one call re-runs its statement when the write and the row read
/// after it disagree (see [`Statements`]).
const MAX_ATTEMPTS: usize = 5;

/// How long a connection waits in the store's own idle list before it goes
/// back to the pool (whose idle timeouts then apply).
const KEEP_IDLE: Duration = Duration::from_secs(5);

/// A [`VersionedStore`] on one InnoDB table of a MySQL or MariaDB database.
///
/// Each write is ONE statement in its own autocommit transaction, on a
/// pooled connection (mysql_async's pool), prepared once per connection. An
/// update or delete is a conditional `UPDATE … WHERE key = ? AND version = ?`;
/// a create is an `INSERT … ON DUPLICATE KEY UPDATE` whose assignments apply
/// only over a tombstone. On MariaDB the create returns the stored row
/// (`RETURNING`) whether it applied or not: one round trip either way. The
/// SQL, and what MySQL 8 does instead, are in the crate docs.
///
/// ```no_run
/// use bakery_core::{Key, PutOutcome, VersionedStore};
/// use bakery_mysql::MysqlStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = MysqlStore::connect("mysql://app:secret@127.0.0.1:3306/bakery").await?;
/// let key = Key::new("greeting")?;
/// let row = match store.put_if_version(&key, None, "hello".into()).await? {
///     PutOutcome::Applied(row) => row,
///     PutOutcome::Conflict(current) => panic!("already there: {current:?}"),
/// };
/// let next = store.put_if_version(&key, Some(row.version), "hi".into()).await?;
/// assert!(next.is_applied());
/// # Ok(()) }
/// ```
pub struct MysqlStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: MysqlConfig,
    pool: Pool,
    sql: Statements,
    /// MariaDB (10.5+: `INSERT … RETURNING`) or MySQL.
    mariadb: bool,
    /// Creates return their row (MariaDB, unless `returning=false`).
    returning: bool,
    /// The durability check repeated while live (crate docs, "Durability").
    recheck: Arc<Recheck>,
    /// Connections kept between calls, most recently used last: a
    /// connection handed back to mysql_async's pool reaches its idle list
    /// through the pool's recycler task, a task hop and a wake-up
    /// on every call; one kept here is taken again at once.
    idle: Mutex<Vec<(Conn, Instant)>>,
}

impl Inner {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<(Conn, Instant)>> {
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The most recently kept connection, if one was kept within
    /// [`KEEP_IDLE`]; older ones go back to the pool.
    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle();
        let fresh = idle.pop().filter(|(_, kept)| kept.elapsed() < KEEP_IDLE);
        let stale: Vec<(Conn, Instant)> = match fresh {
            // All below it were kept earlier: stale if it is.
            Some(_) => Vec::new(),
            None => std::mem::take(&mut *idle),
        };
        drop(idle);
        drop(stale);
        fresh.map(|(conn, _)| conn)
    }

    /// Keep `conn` (clean: its statement finished) for the next call, up
    /// to the pool's size; beyond that it goes back to the pool.
    fn keep_idle(&self, conn: Conn) {
        let mut idle = self.idle();
        if idle.len() < self.config.pool_size() {
            idle.push((conn, Instant::now()));
        }
    }
}

/// The SQL, with the validated, quoted table name formatted in once.
///
/// Every applied write changes the row's `version` (or, for a delete, its
/// `value` from non-NULL to NULL), so the affected-rows count is 1 whether
/// the server counts changed or matched rows; the create's duplicate branch
/// changes nothing on a conflict, so its count (0) differs from an insert
/// (1) and a re-create (2) only when changed rows are counted, which is why
/// `client_found_rows` is refused in the URI.
#[derive(Debug)]
struct Statements {
    get: String,
    /// MariaDB: one round trip, `(applied, value, version)`.
    create_returning: String,
    /// MySQL: affected rows 1 (inserted at version 1), 2 (re-created over a
    /// tombstone: the new version is `LAST_INSERT_ID()`) or 0 (conflict).
    create: String,
    update: String,
    delete: String,
    create_table: String,
}

impl Statements {
    fn new(table: &TableName) -> Self {
        let t = table.quoted();
        // `version` is assigned first: the `value` assignment after it sees
        // the new version (MySQL assigns left to right) but still the old
        // `value`, and `version > 0` holds before and after `+ 1`, so both
        // test the same old row. A corrupt tombstone (version <= 0) is left
        // alone and reported.
        let over_tombstone = "`value` IS NULL AND `version` > 0";
        Statements {
            get: format!("SELECT `value`, `version` FROM {t} WHERE `key` = ?"),
            // The user variable says which branch ran: set to 1 by the
            // insert's VALUES (evaluated before the duplicate is found),
            // and to the guard by the update branch.
            create_returning: format!(
                "INSERT INTO {t} (`key`, `value`, `version`) VALUES (?, ?, IF(@bakery_applied := 1, 1, 1)) \
                 ON DUPLICATE KEY UPDATE \
                 `version` = IF(@bakery_applied := ({over_tombstone}), `version` + 1, `version`), \
                 `value` = IF(@bakery_applied, VALUES(`value`), `value`) \
                 RETURNING @bakery_applied, `value`, `version`"
            ),
            create: format!(
                "INSERT INTO {t} (`key`, `value`, `version`) VALUES (?, ?, 1) \
                 ON DUPLICATE KEY UPDATE \
                 `version` = IF({over_tombstone}, LAST_INSERT_ID(`version` + 1), `version`), \
                 `value` = IF({over_tombstone}, VALUES(`value`), `value`)"
            ),
            update: format!(
                "UPDATE {t} SET `value` = ?, `version` = `version` + 1 \
                 WHERE `key` = ? AND `version` = ? AND `value` IS NOT NULL"
            ),
            // A delete keeps the row as a tombstone at the same version.
            delete: format!(
                "UPDATE {t} SET `value` = NULL \
                 WHERE `key` = ? AND `version` = ? AND `value` IS NOT NULL"
            ),
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\
                   `key` VARBINARY(512) NOT NULL PRIMARY KEY, \
                   `value` LONGBLOB NULL, \
                   `version` BIGINT NOT NULL) ENGINE = InnoDB"
            ),
        }
    }
}

impl MysqlStore {
    /// Parse `uri` (see [`MysqlConfig::from_uri`]) and open the store.
    ///
    /// ```no_run
    /// use bakery_core::{Capabilities, VersionedStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = bakery_mysql::MysqlStore::connect(
    ///     "mariadb://app:secret@db.internal:3306/bakery?table=rows&pool_size=8",
    /// )
    /// .await?;
    /// assert_eq!(store.backend(), "mysql");
    /// assert!(store.capabilities().contains(Capabilities::SHARED));
    /// # Ok(()) }
    /// ```
    pub async fn connect(uri: &str) -> Result<MysqlStore> {
        let config = MysqlConfig::from_uri(uri).map_err(|e| e.during(Operation::Open))?;
        Self::open(config).await
    }

    /// Open the store `config` describes: connect, check that the server
    /// keeps what it acknowledges and accepts writes, create the table if it
    /// is missing, and check an existing table's columns and engine
    /// ([`ErrorKind::Config`] if not as expected).
    pub async fn open(config: MysqlConfig) -> Result<MysqlStore> {
        Self::open_store(config)
            .await
            .map_err(|e| e.during(Operation::Open))
    }

    async fn open_store(config: MysqlConfig) -> Result<MysqlStore> {
        config.validate()?;
        let span = tracing::debug_span!("mysql.open", backend = BACKEND, config = %config);
        let budget =
            config.connect_timeout() + config.timeout().unwrap_or(DEFAULT_TIMEOUT) + CLIENT_GRACE;
        let recheck = Arc::new(Recheck::new(
            BACKEND,
            config.durability_recheck(),
            config.accept_data_loss(),
        ));
        // A new connection may have reached another server (a failover, a
        // DNS change): the next write re-reads the settings first.
        let on_connect = recheck.clone();
        let opts = mysql_async::OptsBuilder::from_opts(config.driver_opts()).after_connect(
            move |_conn: &mut Conn| {
                on_connect.invalidate();
                Box::pin(async { Ok(()) })
            },
        );
        let pool = Pool::new(opts);
        let sql = Statements::new(config.table());
        let prepared = tokio::time::timeout(budget, prepare(&config, &pool, &sql))
            .instrument(span)
            .await;
        let mariadb = match prepared {
            Ok(Ok(mariadb)) => mariadb,
            Ok(Err(e)) => {
                pool.disconnect().await.ok();
                return Err(e);
            }
            Err(_) => {
                tokio::spawn(pool.disconnect());
                return Err(timed_out(Phase::Connect, Operation::Open, budget));
            }
        };
        let returning = mariadb && config.returning();
        Ok(MysqlStore {
            inner: Arc::new(Inner {
                config,
                pool,
                sql,
                mariadb,
                returning,
                recheck,
                idle: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &MysqlConfig {
        &self.inner.config
    }

    /// Whether the server is MariaDB (creates return their row in the same
    /// round trip) rather than MySQL.
    pub fn is_mariadb(&self) -> bool {
        self.inner.mariadb
    }

    /// The session's isolation level, `max_statement_time` (MariaDB; on
    /// MySQL empty) and `sql_mode`, read on a pooled connection as a call
    /// would get it: for tests and diagnostics.
    #[doc(hidden)]
    pub async fn session_settings(&self) -> Result<(String, String, String)> {
        let op = Operation::Get;
        let mut conn = self.checkout(op, self.deadline()).await?;
        let sql = if self.inner.mariadb {
            "SELECT @@SESSION.tx_isolation, CAST(@@SESSION.max_statement_time AS CHAR), @@SESSION.sql_mode"
        } else {
            "SELECT @@SESSION.transaction_isolation, '', @@SESSION.sql_mode"
        };
        let row: Option<(String, String, String)> = conn
            .query_first(sql)
            .await
            .map_err(|e| map_err(e, Phase::Execute, op))?;
        row.ok_or_else(|| Error::new(ErrorKind::Internal, BACKEND, "no session settings"))
    }

    fn deadline(&self) -> Option<Instant> {
        self.inner
            .config
            .timeout()
            .map(|t| Instant::now() + t + CLIENT_GRACE)
    }

    fn limit(&self) -> Duration {
        self.inner
            .config
            .timeout()
            .map_or(Duration::MAX, |t| t + CLIENT_GRACE)
    }

    /// A kept connection, else a pooled one, within the deadline and the
    /// connect timeout.
    async fn checkout(&self, op: Operation, deadline: Option<Instant>) -> Result<Conn> {
        if let Some(conn) = self.inner.take_idle() {
            return Ok(conn);
        }
        let connect = self.inner.config.connect_timeout();
        let wait = match deadline {
            Some(deadline) => deadline
                .saturating_duration_since(Instant::now())
                .min(connect + self.limit()),
            None => connect,
        };
        if wait.is_zero() {
            return Err(timed_out(Phase::Connect, op, self.limit()));
        }
        match tokio::time::timeout(wait, self.inner.pool.get_conn()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(map_err(e, Phase::Connect, op)),
            Err(_) => Err(timed_out(Phase::Connect, op, wait)),
        }
    }

    /// Run one prepared statement and collect its rows, within `deadline`;
    /// also returns the affected-rows count and `LAST_INSERT_ID`.
    async fn exec(
        &self,
        op: Operation,
        deadline: Option<Instant>,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<(Vec<mysql_async::Row>, u64, Option<u64>)> {
        let mut conn = self.checkout(op, deadline).await?;
        let run = async {
            let mut result = conn.exec_iter(sql, params).await?;
            let rows: Vec<mysql_async::Row> = result.collect().await?;
            let affected = result.affected_rows();
            let last_insert_id = result.last_insert_id();
            drop(result);
            Ok::<_, mysql_async::Error>((rows, affected, last_insert_id))
        };
        let outcome = within(deadline, run).await;
        match outcome {
            Some(Ok(out)) => {
                self.inner.keep_idle(conn);
                Ok(out)
            }
            Some(Err(e)) => Err(map_err(e, Phase::Execute, op)),
            // The connection goes back to the pool, which drains or closes
            // it before anyone else gets it.
            None => Err(timed_out(Phase::Execute, op, self.limit())),
        }
    }

    /// Read the stored row (tombstone included).
    async fn read(
        &self,
        op: Operation,
        key: &Key,
        deadline: Option<Instant>,
    ) -> Result<Option<Stored>> {
        let (rows, _, _) = self
            .exec(op, deadline, &self.inner.sql.get, vec![key_param(key)])
            .await?;
        match rows.first() {
            None => Ok(None),
            Some(row) => decode(op, key, row, 0, 1).map(Some),
        }
    }

    /// Before a write: the durability re-check, one query when it is due.
    async fn rechecked(&self, op: Operation, deadline: Option<Instant>) -> Result<()> {
        let inspect = || async move {
            let mut conn = self.checkout(op, deadline).await?;
            let table = self.inner.config.table();
            match within(deadline, inspect(&mut conn, table)).await {
                Some(Ok(settings)) => Ok(durability::hazards(&settings, &table.to_string())),
                Some(Err(e)) => Err(map_err(e, Phase::Execute, op)),
                None => Err(timed_out(Phase::Execute, op, self.limit())),
            }
        };
        self.inner.recheck.guard(op, inspect).await
    }

    async fn put(&self, key: &Key, expected: Option<Version>, value: Bytes) -> Result<PutOutcome> {
        let op = Operation::Put;
        let deadline = self.deadline();
        self.rechecked(op, deadline).await?;
        let expected_raw = match expected.map(signed_version) {
            None => None,
            Some(Some(raw)) => Some(raw),
            // A version no row can have: a conflict with whatever is there.
            Some(None) => {
                let current = self.read(op, key, deadline).await?;
                return Ok(PutOutcome::Conflict(current.and_then(|s| s.live(key))));
            }
        };
        for attempt in 1..=MAX_ATTEMPTS {
            let params = || vec![key_param(key), Value::Bytes(value.to_vec())];
            let current = match expected_raw {
                None if self.inner.returning => {
                    let (rows, _, _) = self
                        .exec(op, deadline, &self.inner.sql.create_returning, params())
                        .await?;
                    let Some(row) = rows.first() else {
                        return Err(corrupt(op, key, "create returned no row"));
                    };
                    let applied = applied_flag(op, key, row)?;
                    let stored = decode(op, key, row, 1, 2)?;
                    if applied {
                        tracing::debug!(version = stored.version, attempt, "created");
                        return Ok(PutOutcome::Applied(Row::new(key, value, stored.version)));
                    }
                    // The statement locked and read the newest row: a
                    // genuine conflict.
                    return Ok(PutOutcome::Conflict(stored.live(key)));
                }
                None => {
                    let (_, affected, last_insert_id) = self
                        .exec(op, deadline, &self.inner.sql.create, params())
                        .await?;
                    match affected {
                        1 => return Ok(PutOutcome::Applied(Row::new(key, value, 1))),
                        2 => {
                            let version = last_insert_id.filter(|v| *v > 0).ok_or_else(|| {
                                corrupt(op, key, "re-created without a new version")
                            })?;
                            return Ok(PutOutcome::Applied(Row::new(key, value, version)));
                        }
                        _ => self.read(op, key, deadline).await?,
                    }
                }
                Some(raw) => {
                    let params = vec![
                        Value::Bytes(value.to_vec()),
                        key_param(key),
                        Value::Int(raw),
                    ];
                    let (_, affected, _) = self
                        .exec(op, deadline, &self.inner.sql.update, params)
                        .await?;
                    if affected == 1 {
                        let version = raw.unsigned_abs() + 1;
                        tracing::debug!(version, attempt, "updated");
                        return Ok(PutOutcome::Applied(Row::new(key, value, version)));
                    }
                    self.read(op, key, deadline).await?
                }
            };
            // The conflict row is read after the write found no match: if it
            // is what was expected (a create: no live row), the row moved
            // between the two statements; run the write again.
            let live = current.and_then(|s| s.live(key));
            if live.as_ref().map(|row| row.version) == expected {
                tracing::debug!(attempt, "write and read disagree; re-running");
                continue;
            }
            return Ok(PutOutcome::Conflict(live));
        }
        Err(lost_races(op, key))
    }

    async fn delete(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let op = Operation::Delete;
        let deadline = self.deadline();
        self.rechecked(op, deadline).await?;
        let Some(raw) = signed_version(expected) else {
            let current = self.read(op, key, deadline).await?;
            return Ok(DeleteOutcome::Conflict(current.and_then(|s| s.live(key))));
        };
        for attempt in 1..=MAX_ATTEMPTS {
            let (_, affected, _) = self
                .exec(
                    op,
                    deadline,
                    &self.inner.sql.delete,
                    vec![key_param(key), Value::Int(raw)],
                )
                .await?;
            if affected == 1 {
                tracing::debug!(attempt, "deleted");
                return Ok(DeleteOutcome::Deleted);
            }
            let live = self
                .read(op, key, deadline)
                .await?
                .and_then(|s| s.live(key));
            if live.as_ref().map(|row| row.version) == Some(expected) {
                continue;
            }
            return Ok(DeleteOutcome::Conflict(live));
        }
        Err(lost_races(op, key))
    }
}

/// Check the server and the table on one connection; returns whether the
/// server is MariaDB.
async fn prepare(config: &MysqlConfig, pool: &Pool, sql: &Statements) -> Result<bool> {
    let op = Operation::Open;
    let table = config.table();
    let mut conn = pool
        .get_conn()
        .await
        .map_err(|e| map_err(e, Phase::Connect, op))?;
    let settings = inspect(&mut conn, table)
        .await
        .map_err(|e| map_err(e, Phase::Execute, op))?;
    tracing::debug!(?settings, "server settings");
    if let Some(setting) = settings.read_only() {
        return Err(Error::config(
            BACKEND,
            format!(
                "the server is read-only ({setting} = ON; a replica?): bakery writes on every call. Connect to the primary, or SET GLOBAL {setting} = OFF"
            ),
        ));
    }
    let hazards = durability::hazards(&settings, &table.to_string());
    bakery_core::durability::check(BACKEND, &hazards, config.accept_data_loss())?;
    if settings.engine.is_none() {
        conn.query_drop(&sql.create_table)
            .await
            .map_err(|e| map_err(e, Phase::Execute, op))?;
        // The server may have substituted another engine for InnoDB (no
        // NO_ENGINE_SUBSTITUTION in sql_mode): read it again.
        let settings = inspect(&mut conn, table)
            .await
            .map_err(|e| map_err(e, Phase::Execute, op))?;
        let hazards = durability::hazards(&settings, &table.to_string());
        bakery_core::durability::check(BACKEND, &hazards, config.accept_data_loss())?;
    }
    check_schema(&mut conn, table).await?;
    let mariadb = settings.is_mariadb();
    for statement in [
        &sql.get,
        if mariadb && config.returning() {
            &sql.create_returning
        } else {
            &sql.create
        },
        &sql.update,
        &sql.delete,
    ] {
        conn.prep(statement.as_str())
            .await
            .map_err(|e| map_err(e, Phase::Execute, op))?;
    }
    Ok(mariadb)
}

/// Read the [`Settings`] on `conn`, one query.
async fn inspect(conn: &mut Conn, table: &TableName) -> mysql_async::Result<Settings> {
    type Found = (
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let row: Option<Found> = conn
        .exec_first(durability::SETTINGS_QUERY, (table.database(), table.name()))
        .await?;
    let (version, flush, doublewrite, read_only, innodb_read_only, engine) =
        row.unwrap_or_default();
    Ok(Settings {
        version,
        flush_log_at_trx_commit: flush.unwrap_or_default(),
        doublewrite: doublewrite.unwrap_or_else(|| "ON".into()),
        read_only: read_only.unwrap_or_default(),
        innodb_read_only: innodb_read_only.unwrap_or_default(),
        engine,
    })
}

/// An existing table must have exactly our three columns with `key` as its
/// primary key, and columns that keep every key and value as written: a
/// binary key (a `_ci` text collation would make two keys one row, a
/// `BINARY(n)` pads them) at least 512 bytes long, a `LONGBLOB` value (a
/// shorter one truncates) that may be NULL (a tombstone).
async fn check_schema(conn: &mut Conn, table: &TableName) -> Result<()> {
    let op = Operation::Open;
    type Column = (String, String, String, Option<u64>, String);
    let columns: Vec<Column> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_KEY, CHARACTER_MAXIMUM_LENGTH, IS_NULLABLE \
             FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (table.database(), table.name()),
        )
        .await
        .map_err(|e| map_err(e, Phase::Execute, op))?;
    let column = |name: &str| columns.iter().find(|(n, ..)| n == name);
    let is = |t: &str, want: &str| t.eq_ignore_ascii_case(want);
    let key_ok = column("key").is_some_and(|(_, t, k, len, _)| {
        is(t, "varbinary") && len.is_some_and(|len| len >= 512) && is(k, "PRI")
    });
    let value_ok = column("value")
        .is_some_and(|(_, t, _, _, nullable)| is(t, "longblob") && is(nullable, "YES"));
    let version_ok = column("version").is_some_and(|(_, t, ..)| is(t, "bigint"));
    let pri_count = columns.iter().filter(|(_, _, k, ..)| is(k, "PRI")).count();
    if !(columns.len() == 3 && key_ok && value_ok && version_ok && pri_count == 1) {
        let found = columns
            .iter()
            .map(|(n, t, k, len, nullable)| {
                let len = len.map(|l| format!("({l})")).unwrap_or_default();
                let null = if is(nullable, "YES") {
                    " NULL"
                } else {
                    " NOT NULL"
                };
                let key = if k.is_empty() { "" } else { " (key)" };
                format!("{n} {t}{len}{null}{key}")
            })
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Error::config(
            BACKEND,
            format!(
                "table {table} exists with an unexpected schema ({found}); expected `key` VARBINARY(512) PRIMARY KEY, `value` LONGBLOB NULL, `version` BIGINT"
            ),
        ));
    }
    Ok(())
}

fn key_param(key: &Key) -> Value {
    Value::Bytes(key.as_str().as_bytes().to_vec())
}

fn lost_races(op: Operation, key: &Key) -> Error {
    Error::not_sent(
        ErrorKind::Unavailable,
        BACKEND,
        op,
        format_args!("row `{key}` met a concurrent writer {MAX_ATTEMPTS} times in a row; retry"),
    )
}

/// A row of `key` that `op` cannot use: [`ErrorKind::Corrupt`].
fn corrupt(op: Operation, key: &Key, what: impl fmt::Display) -> Error {
    Error::corrupt(BACKEND, format!("row `{key}` {what}")).during(op)
}

/// Column `i` of `row` as an integer (`None`: NULL).
fn int_column(
    op: Operation,
    key: &Key,
    row: &mysql_async::Row,
    i: usize,
    name: &str,
) -> Result<Option<i64>> {
    match row.as_ref(i) {
        None => Err(corrupt(op, key, format_args!("has no column {name}"))),
        Some(Value::NULL) => Ok(None),
        Some(Value::Int(v)) => Ok(Some(*v)),
        Some(Value::UInt(v)) => i64::try_from(*v)
            .map(Some)
            .map_err(|_| corrupt(op, key, format_args!("has {name} {v}; expected a BIGINT"))),
        Some(Value::Bytes(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .map(Some)
            .ok_or_else(|| corrupt(op, key, format_args!("has a {name} that is not an integer"))),
        Some(other) => Err(corrupt(
            op,
            key,
            format_args!("has {name} {other:?}; expected a BIGINT"),
        )),
    }
}

/// The `applied` flag of a create's returned row.
fn applied_flag(op: Operation, key: &Key, row: &mysql_async::Row) -> Result<bool> {
    Ok(int_column(op, key, row, 0, "applied")?.unwrap_or(0) != 0)
}

/// Check a row's `value` and `version` columns; anything unexpected is
/// [`ErrorKind::Corrupt`] naming the key, never a panic.
fn decode(
    op: Operation,
    key: &Key,
    row: &mysql_async::Row,
    value: usize,
    version: usize,
) -> Result<Stored> {
    let version = match int_column(op, key, row, version, "version")? {
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
    let value = match row.as_ref(value) {
        Some(Value::NULL) => None,
        Some(Value::Bytes(b)) => Some(Bytes::from(b.clone())),
        _ => return Err(corrupt(op, key, "has a value that is not a BLOB")),
    };
    Ok(Stored { value, version })
}

#[async_trait]
impl VersionedStore for MysqlStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    /// No `WATCH`: MySQL and MariaDB have no LISTEN/NOTIFY (crate docs).
    fn capabilities(&self) -> Capabilities {
        Capabilities::PERSISTENT | Capabilities::SHARED | Capabilities::LINEARIZABLE_READS
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let stored = self.read(Operation::Get, key, self.deadline()).await?;
        Ok(stored.and_then(|stored| stored.live(key)))
    }

    /// One statement; on a conflict the current row comes back in the same
    /// round trip for a create on MariaDB, and with one more `SELECT`
    /// otherwise (crate docs, "How a write works").
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
}

impl fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlStore")
            .field("config", &format_args!("{}", self.inner.config))
            .finish()
    }
}
