//! [`SqliteStore`]: the versioned conditional put on a SQLite table.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bakery_core::{
    async_trait, Bytes, Capabilities, DeleteOutcome, Error, ErrorKind, Key, Operation, PutOutcome,
    Result, Row, Version, VersionedStore, Watch,
};
use rusqlite::{Connection, OptionalExtension, Params, TransactionBehavior};
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::error::{join_error, map_err, Phase};
use crate::notify::Feed;
use crate::rows::{open_connection, read, Stored};
use crate::{Location, SqliteConfig, BACKEND};

/// A [`VersionedStore`] on one table of a SQLite database.
///
/// Every write runs in a `BEGIN IMMEDIATE` transaction, so the read, the
/// version check and the write of a compare-and-set are one atomic step even
/// when several processes share the file. All SQLite calls run on tokio's
/// blocking pool, never on the async worker threads, over a small pool of
/// connections ([`SqliteConfig::with_pool_size`]).
///
/// A call whose future is dropped (a caller-side timeout) still runs to the
/// end on the blocking pool: its write may apply.
///
/// ```
/// use bakery_core::{Key, PutOutcome, VersionedStore};
/// use bakery_sqlite::{SqliteConfig, SqliteStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("data").join("bakery.db"); // `data/` is created
/// let store = SqliteStore::open(SqliteConfig::new(&path)).await?;
///
/// let key = Key::new("greeting")?;
/// let row = store.put_if_version(&key, None, "hello".into()).await?.applied().unwrap();
/// assert_eq!(row.version, 1);
///
/// // A second store (say, another process) sees the row and must present its version.
/// let other = SqliteStore::open(SqliteConfig::new(&path)).await?;
/// let stale = other.put_if_version(&key, None, "hi".into()).await?;
/// assert_eq!(stale, PutOutcome::Conflict(Some(row.clone())));
/// let next = other.put_if_version(&key, Some(row.version), "hi".into()).await?;
/// assert_eq!(next.applied().unwrap().version, 2);
/// # Ok(()) }
/// ```
pub struct SqliteStore {
    inner: Arc<Inner>,
}

/// The SQL, with the validated table name formatted in once.
#[derive(Debug)]
struct Statements {
    create: String,
    select: String,
    /// The version and liveness only, for the change feed.
    probe: String,
    insert: String,
    update: String,
    tombstone: String,
}

impl Statements {
    /// `table` must have passed `validate_table` (it is quoted as well, so a
    /// keyword such as `order` works).
    fn new(table: &str) -> Self {
        let t = format!("\"{table}\"");
        Statements {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (key TEXT PRIMARY KEY NOT NULL, value BLOB, version INTEGER NOT NULL) WITHOUT ROWID"
            ),
            select: format!("SELECT value, version FROM {t} WHERE key = ?1"),
            probe: format!("SELECT version, value IS NOT NULL FROM {t} WHERE key = ?1"),
            insert: format!("INSERT INTO {t} (key, value, version) VALUES (?1, ?2, ?3)"),
            update: format!(
                "UPDATE {t} SET value = ?2, version = ?3 WHERE key = ?1 AND version = ?4"
            ),
            tombstone: format!("UPDATE {t} SET value = NULL WHERE key = ?1 AND version = ?2"),
        }
    }
}

struct Inner {
    config: SqliteConfig,
    sql: Statements,
    /// One permit per connection the pool may hold: bounds both connections
    /// and blocking threads in use. Waiting for a permit is async.
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Connection>>,
    /// One write at a time from this process: SQLite lets one writer in
    /// at once, and a second connection of ours asking would wait in
    /// SQLite's busy handler, which sleeps milliseconds between tries.
    /// Queued here instead, the next write starts the moment the last
    /// ends (other processes still meet the busy handler).
    writes: Semaphore,
    /// The watches of a file database and the thread that feeds them.
    feed: Arc<Feed>,
}

impl Inner {
    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        // The vector is valid whatever a panicking holder was doing.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle connection, or a new one, for the call `op`. Blocking: call
    /// on the blocking pool.
    fn checkout(&self, op: Operation) -> Result<Connection> {
        if let Some(conn) = self.idle().pop() {
            return Ok(conn);
        }
        if self.config.is_memory() {
            // A second `:memory:` connection would be an empty database.
            return Err(Error::new(
                ErrorKind::Internal,
                BACKEND,
                "the in-memory database's only connection was lost (a panic in an earlier call); its rows are gone",
            ));
        }
        open_connection(&self.config, op)
    }

    /// Return a connection to the pool, unless it is stuck in a transaction.
    fn checkin(&self, conn: Connection) {
        if !conn.is_autocommit() {
            // A transaction outlived its call (its rollback failed).
            if let Err(e) = conn.execute_batch("ROLLBACK") {
                tracing::debug!(error = %e, "rollback of a leftover transaction failed");
            }
            // An in-memory database lives in its one connection: keep it.
            if !conn.is_autocommit() && !self.config.is_memory() {
                tracing::debug!("dropping a connection stuck in a transaction");
                return;
            }
        }
        let mut idle = self.idle();
        if idle.len() < self.config.pool_size() {
            idle.push(conn);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.feed.close();
        let conns = std::mem::take(self.idle.get_mut().unwrap_or_else(PoisonError::into_inner));
        if conns.is_empty() {
            return;
        }
        // Closing the last connection checkpoints the WAL (file I/O): keep it
        // off the async threads when a runtime is around.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            drop(handle.spawn_blocking(move || drop(conns)));
        }
    }
}

impl SqliteStore {
    /// Parse `uri` (see [`SqliteConfig::from_uri`]) and open the store.
    ///
    /// ```
    /// use bakery_core::{Capabilities, VersionedStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = bakery_sqlite::SqliteStore::connect("sqlite::memory:?table=rows").await?;
    /// assert_eq!(store.backend(), "sqlite");
    /// assert!(!store.capabilities().contains(Capabilities::PERSISTENT));
    /// # Ok(()) }
    /// ```
    pub async fn connect(uri: &str) -> Result<SqliteStore> {
        let config = SqliteConfig::from_uri(uri).map_err(|e| e.during(Operation::Open))?;
        Self::open(config).await
    }

    /// Open the database `config` names: create the file, its parent
    /// directory and the table as needed, switch the file to WAL, and check
    /// that an existing table has the expected columns
    /// ([`ErrorKind::Config`] if not).
    pub async fn open(config: SqliteConfig) -> Result<SqliteStore> {
        Self::open_store(config)
            .await
            .map_err(|e| e.during(Operation::Open))
    }

    async fn open_store(config: SqliteConfig) -> Result<SqliteStore> {
        config.validate()?;
        let span = tracing::debug_span!(
            "sqlite.open",
            backend = BACKEND,
            location = %config.location(),
            table = config.table()
        );
        let sql = Statements::new(config.table());
        let first = {
            let config = config.clone();
            let create = sql.create.clone();
            let blocking_span = span.clone();
            tokio::task::spawn_blocking(move || {
                let _entered = blocking_span.enter();
                open_first(&config, &create)
            })
            .instrument(span)
            .await
            .map_err(join_error)??
        };
        let permits = Arc::new(Semaphore::new(config.pool_size()));
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                config,
                sql,
                permits,
                idle: Mutex::new(vec![first]),
                writes: Semaphore::new(1),
                feed: Arc::default(),
            }),
        })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &SqliteConfig {
        &self.inner.config
    }

    /// This process's turn to write, in arrival order; held for the call.
    async fn write_turn(&self, op: Operation) -> Result<tokio::sync::SemaphorePermit<'_>> {
        self.inner
            .writes
            .acquire()
            .await
            .map_err(|_| Error::new(ErrorKind::Internal, BACKEND, "write queue closed").during(op))
    }

    /// Run `f`, the body of the call `op`, with a pooled connection on the
    /// blocking pool, inside the caller's span. Every error it returns
    /// names `op`.
    async fn run<T, F>(&self, op: Operation, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Statements) -> Result<T> + Send + 'static,
    {
        let Ok(permit) = Arc::clone(&self.inner.permits).acquire_owned().await else {
            return Err(
                Error::new(ErrorKind::Internal, BACKEND, "connection pool closed").during(op),
            );
        };
        let inner = Arc::clone(&self.inner);
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let mut conn = inner.checkout(op)?;
            let result = f(&mut conn, &inner.sql);
            inner.checkin(conn);
            // The permit goes back only once the connection is idle again.
            drop(permit);
            result
        })
        .await
        .map_err(join_error)
        .and_then(|result| result)
        .map_err(|e| e.during(op))
    }
}

#[async_trait]
impl VersionedStore for SqliteStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        match self.inner.config.location() {
            Location::File(_) => {
                Capabilities::PERSISTENT
                    | Capabilities::SHARED
                    | Capabilities::LINEARIZABLE_READS
                    | Capabilities::WATCH
            }
            Location::Memory => Capabilities::LINEARIZABLE_READS,
        }
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let key = key.clone();
        self.run(Operation::Get, move |conn, sql| {
            let stored = read(conn, &sql.select, &key, Operation::Get)?;
            Ok(stored.and_then(|stored| stored.live(&key)))
        })
        .await
    }

    /// Reads and writes in one `BEGIN IMMEDIATE` transaction.
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let key = key.clone();
        let _writing = self.write_turn(Operation::Put).await?;
        let feed = Arc::clone(&self.inner.feed);
        self.run(Operation::Put, move |conn, sql| {
            put(conn, sql, &feed, key, expected, value)
        })
        .await
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let key = key.clone();
        let _writing = self.write_turn(Operation::Delete).await?;
        let feed = Arc::clone(&self.inner.feed);
        self.run(Operation::Delete, move |conn, sql| {
            delete(conn, sql, &feed, &key, expected)
        })
        .await
    }

    /// A file database: fed by the store's change-feed thread (see the
    /// crate docs, "Capabilities"). `:memory:` has no other connection to
    /// hear from: `None`.
    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        if self.inner.config.is_memory() {
            return Ok(None);
        }
        let key = key.clone();
        let feed = Arc::clone(&self.inner.feed);
        let config = self.inner.config.clone();
        self.run(Operation::Watch, move |conn, sql| {
            let seen = read(conn, &sql.select, &key, Operation::Watch)?.map(|s| s.seen());
            feed.watch(&config, &sql.select, &sql.probe, &key, seen)
                .map(Some)
        })
        .await
    }

    /// Asks the change feed to look now and wake this process's watches of
    /// `key` (whatever it finds: a notify always wakes, as elsewhere);
    /// other processes' feeds see the write at their next check.
    async fn notify(&self, key: &Key) -> Result<()> {
        self.inner.feed.kick(key);
        Ok(())
    }
}

/// Run one write statement of the call `op` that must change exactly one row.
fn write_one(
    conn: &Connection,
    op: Operation,
    sql: &str,
    key: &Key,
    params: impl Params,
) -> Result<()> {
    let changed = conn
        .prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute(params))
        .map_err(|e| map_err(e, op, Phase::Write))?;
    if changed != 1 {
        return Err(Error::new(
            ErrorKind::Internal,
            BACKEND,
            format!(
                "a write to row `{key}` changed {changed} rows under BEGIN IMMEDIATE; expected 1"
            ),
        ));
    }
    Ok(())
}

fn begin(conn: &mut Connection, op: Operation) -> Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| map_err(e, op, Phase::Begin))
}

fn commit(tx: rusqlite::Transaction<'_>, op: Operation) -> Result<()> {
    tx.commit().map_err(|e| map_err(e, op, Phase::Commit))
}

/// End a transaction that wrote nothing.
fn end_read_only(tx: rusqlite::Transaction<'_>) {
    if let Err(e) = tx.rollback() {
        // Nothing was written; `checkin` deals with a connection left in a
        // transaction.
        tracing::debug!(error = %e, "rollback after a conflict failed");
    }
}

fn put(
    conn: &mut Connection,
    sql: &Statements,
    feed: &Feed,
    key: Key,
    expected: Option<Version>,
    value: Bytes,
) -> Result<PutOutcome> {
    let op = Operation::Put;
    let tx = begin(conn, op)?;
    let stored = read(&tx, &sql.select, &key, op)?;
    let current = stored.as_ref().and_then(|stored| stored.live(&key));
    if current.as_ref().map(|row| row.version) != expected {
        end_read_only(tx);
        tracing::debug!(current = ?current.as_ref().map(|row| row.version), "conflict");
        return Ok(PutOutcome::Conflict(current));
    }
    let version = match &stored {
        None => {
            write_one(
                &tx,
                op,
                &sql.insert,
                &key,
                (key.as_str(), &value[..], 1_i64),
            )?;
            1
        }
        Some(stored) => {
            // A live row or a tombstone: continue above its version.
            let next = stored.raw_version.checked_add(1).ok_or_else(|| {
                Error::new(
                    ErrorKind::Exhausted,
                    BACKEND,
                    format!(
                        "row `{key}` is at version {}, the largest SQLite INTEGER",
                        stored.version
                    ),
                )
            })?;
            write_one(
                &tx,
                op,
                &sql.update,
                &key,
                (key.as_str(), &value[..], next, stored.raw_version),
            )?;
            next.unsigned_abs()
        }
    };
    // Marked before the commit, so the feed cannot take it for another's.
    let committing = feed.committing(&key, (version, true));
    commit(tx, op)?;
    committing.wrote(stored.as_ref().map(Stored::seen));
    tracing::debug!(version, "applied");
    Ok(PutOutcome::Applied(Row {
        key,
        value,
        version,
    }))
}

fn delete(
    conn: &mut Connection,
    sql: &Statements,
    feed: &Feed,
    key: &Key,
    expected: Version,
) -> Result<DeleteOutcome> {
    let op = Operation::Delete;
    let tx = begin(conn, op)?;
    let stored = read(&tx, &sql.select, key, op)?;
    let current = stored.as_ref().and_then(|stored| stored.live(key));
    let raw_version = match (&stored, &current) {
        (Some(stored), Some(row)) if row.version == expected => stored.raw_version,
        _ => {
            end_read_only(tx);
            tracing::debug!(current = ?current.as_ref().map(|row| row.version), "conflict");
            return Ok(DeleteOutcome::Conflict(current));
        }
    };
    // Keep the row as a tombstone: a re-create continues above its version.
    write_one(&tx, op, &sql.tombstone, key, (key.as_str(), raw_version))?;
    let committing = feed.committing(key, (expected, false));
    commit(tx, op)?;
    committing.wrote(Some((expected, true)));
    tracing::debug!("deleted");
    Ok(DeleteOutcome::Deleted)
}

/// A driver error while opening the store.
fn opening(e: rusqlite::Error) -> Error {
    map_err(e, Operation::Open, Phase::Open)
}

/// The first connection also prepares the database: directory, WAL, table.
fn open_first(config: &SqliteConfig, create_table: &str) -> Result<Connection> {
    if let Location::File(path) = config.location() {
        if config.create_if_missing() {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    Error::config(
                        BACKEND,
                        format!("cannot create directory {}: {e}", parent.display()),
                    )
                    .with_source(e)
                })?;
            }
        } else if !path.try_exists().unwrap_or(false) {
            return Err(Error::config(
                BACKEND,
                format!(
                    "database file {} does not exist (and create=false)",
                    path.display()
                ),
            ));
        }
    }
    let conn = open_connection(config, Operation::Open)?;
    if let Location::File(path) = config.location() {
        // WAL is a property of the file: readers never block the writer, and
        // every process sees each commit as soon as it is done.
        let mode: String = retry_busy(config, || {
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        })
        .map_err(opening)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::config(
                BACKEND,
                format!(
                    "{} could not be switched to WAL journal mode (it is in `{mode}` mode)",
                    path.display()
                ),
            ));
        }
    }
    retry_busy(config, || conn.execute_batch(create_table)).map_err(opening)?;
    check_schema(&conn, config.table())?;
    Ok(conn)
}

/// Retry `step` while the file is busy, for up to the busy timeout.
///
/// Switching a new file to WAL (and the recovery another process may be
/// running on it) can answer SQLITE_BUSY at once, without going through the
/// busy handler, when several processes open the same new file together.
/// Runs on a blocking thread, so sleeping between tries is fine.
fn retry_busy<T>(
    config: &SqliteConfig,
    mut step: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + config.busy_timeout();
    let mut pause = std::time::Duration::from_millis(2);
    loop {
        match step() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// An existing table must have our three columns, `key` the primary key.
fn check_schema(conn: &Connection, table: &str) -> Result<()> {
    let kind: Option<String> = conn
        .query_row(
            "SELECT type FROM sqlite_master WHERE name = ?1 COLLATE NOCASE",
            [table],
            |row| row.get(0),
        )
        .optional()
        .map_err(opening)?;
    if let Some(kind) = kind.filter(|kind| kind != "table") {
        return Err(Error::config(
            BACKEND,
            format!("`{table}` exists as a {kind}, not a table"),
        ));
    }
    let mut stmt = conn
        .prepare("SELECT name, type, pk FROM pragma_table_info(?1)")
        .map_err(opening)?;
    let columns = stmt
        .query_map([table], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)? != 0,
            ))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(opening)?;
    let expected = [
        ("key", "TEXT", true),
        ("value", "BLOB", false),
        ("version", "INTEGER", false),
    ];
    let matches = columns.len() == expected.len()
        && expected.iter().all(|(name, ty, pk)| {
            columns.iter().any(|(n, t, p)| {
                n.eq_ignore_ascii_case(name) && t.eq_ignore_ascii_case(ty) && p == pk
            })
        });
    if !matches {
        let found = columns
            .iter()
            .map(|(n, t, pk)| format!("{n} {t}{}", if *pk { " PRIMARY KEY" } else { "" }))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Error::config(
            BACKEND,
            format!(
                "table {table} exists with an unexpected schema ({found}); expected key TEXT PRIMARY KEY, value BLOB, version INTEGER"
            ),
        ));
    }
    Ok(())
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", self.inner.config.location())
            .field("table", &self.inner.config.table())
            .field("pool_size", &self.inner.config.pool_size())
            .finish()
    }
}
