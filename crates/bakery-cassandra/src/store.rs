//! [`CassandraStore`]: the versioned conditional put as a lightweight
//! transaction (Paxos) per call.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bakery_core::durability::{Hazard, Recheck};
use bakery_core::{
    async_trait, Bytes, Capabilities, DeleteOutcome, Error, ErrorKind, Key, Operation, PutOutcome,
    Result, Row, Version, VersionedStore,
};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::{DbError, ExecutionError, RequestAttemptError};
use scylla::response::query_result::QueryRowsResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency as Cl, SerialConsistency, Statement};
use scylla::value::{CqlValue, Row as CqlRow};
use tokio::time::Instant;
use tracing::Instrument;

use crate::durability::{check_serial, hazards, placement};
use crate::error::{corrupt, deadline_passed, map_err, reply, timed_out, Request, OPEN};
use crate::retry::NextOnUnavailable;
use crate::{CassandraConfig, Consistency, Serial, BACKEND, DEFAULT_TIMEOUT};

/// How many conditional writes one call may make before it gives up
/// ([`ErrorKind::Unavailable`], nothing applied). More than one is needed
/// only when a create meets a tombstone (a second LWT re-creates above it)
/// or when other clients keep deleting and re-creating the key meanwhile.
const MAX_ROUNDS: usize = 8;

/// The largest version a row can hold (`bigint`).
const MAX_VERSION: Version = i64::MAX as Version;

/// A [`VersionedStore`] on Apache Cassandra (4.0+, tested on 5.0) or
/// ScyllaDB, built on lightweight transactions.
///
/// - One table `"key" text PRIMARY KEY, "value" blob, "version" bigint`; a
///   row whose `value` is null is a tombstone that keeps its version, so a
///   re-created key continues above it.
/// - `put_if_version` and `delete_if_version` are conditional `INSERT …
///   IF NOT EXISTS` / `UPDATE … IF "version" = ? AND "value" …` statements
///   run as Paxos rounds at serial consistency `SERIAL` (or
///   `LOCAL_SERIAL`); the conditions name both `version` and `value`, so a
///   failed one returns the current row in the same reply.
/// - `get` is a `SELECT` at consistency `SERIAL`: it completes any Paxos
///   round in progress on the key, so it sees every acknowledged write.
///
/// The driver session (connection pools to every node, token-aware routing)
/// is shared by clones of the store.
///
/// ```no_run
/// use bakery_core::{Key, PutOutcome, VersionedStore};
/// use bakery_cassandra::CassandraStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = CassandraStore::connect("cassandra://127.0.0.1:9042/bakery").await?;
/// let key = Key::new("greeting")?;
/// let row = store.put_if_version(&key, None, "hello".into()).await?.applied().unwrap();
/// assert_eq!(row.version, 1);
///
/// // A stale version is a conflict that carries the current row.
/// let stale = store.put_if_version(&key, None, "hi".into()).await?;
/// assert_eq!(stale, PutOutcome::Conflict(Some(row.clone())));
/// let next = store.put_if_version(&key, Some(row.version), "hi".into()).await?;
/// assert_eq!(next.applied().unwrap().version, 2);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CassandraStore {
    inner: Arc<Inner>,
}

struct Inner {
    session: Session,
    config: CassandraConfig,
    scylla: bool,
    statements: Statements,
    recheck: Recheck,
}

/// The statements of every call, prepared once at open.
struct Statements {
    /// `SELECT "value", "version" … WHERE "key" = ?` at SERIAL.
    get: PreparedStatement,
    /// `INSERT … VALUES (?, ?, 1) IF NOT EXISTS`.
    insert: PreparedStatement,
    /// `UPDATE … SET value, version … IF "version" = ? AND "value" = null`.
    recreate: PreparedStatement,
    /// `UPDATE … SET value, version … IF "version" = ? AND "value" != null`.
    update: PreparedStatement,
    /// `UPDATE … SET "value" = null … IF "version" = ? AND "value" != null`.
    delete: PreparedStatement,
}

/// A stored row as it is, tombstones included (`value` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    value: Option<Bytes>,
    version: Version,
}

/// What a conditional write did.
enum Lwt {
    Applied,
    /// Not applied; the row at that moment (`None`: no row at all).
    NotApplied(Option<Slot>),
}

/// How a conditional write at an expected version ended.
enum AtVersion {
    Applied,
    /// The row is at another version (`None`: no live row).
    Conflict(Option<Row>),
}

/// What the reply of a failed conditional write says about the row.
enum Seen {
    Known(Option<Slot>),
    /// The reply does not say (Cassandra returns only the columns of the
    /// condition, and nothing at all for a missing row): read it.
    Unclear,
}

fn live(key: &Key, slot: Option<Slot>) -> Option<Row> {
    let slot = slot?;
    Row::live(key, slot.value, slot.version)
}

fn cl(consistency: Consistency) -> Cl {
    match consistency {
        Consistency::Any => Cl::Any,
        Consistency::One => Cl::One,
        Consistency::Two => Cl::Two,
        Consistency::Three => Cl::Three,
        Consistency::Quorum => Cl::Quorum,
        Consistency::All => Cl::All,
        Consistency::LocalQuorum => Cl::LocalQuorum,
        Consistency::EachQuorum => Cl::EachQuorum,
        Consistency::LocalOne => Cl::LocalOne,
    }
}

fn serial(serial: Serial) -> SerialConsistency {
    match serial {
        Serial::Serial => SerialConsistency::Serial,
        Serial::LocalSerial => SerialConsistency::LocalSerial,
    }
}

fn serial_cl(s: Serial) -> Cl {
    match s {
        Serial::Serial => Cl::Serial,
        Serial::LocalSerial => Cl::LocalSerial,
    }
}

/// How long opening may take: the call timeout, at least 10 s (creating a
/// table and waiting for schema agreement can take seconds).
fn open_limit(config: &CassandraConfig) -> Duration {
    config.timeout().max(DEFAULT_TIMEOUT)
}

/// An unprepared statement for the catalog and DDL at open, at `ONE` (the
/// `system_schema` tables are node-local), bounded by the open limit
/// rather than the per-call timeout.
fn catalog(text: impl Into<String>, config: &CassandraConfig) -> Statement {
    let mut statement = Statement::new(text.into());
    statement.set_consistency(Cl::One);
    statement.set_request_timeout(Some(open_limit(config)));
    statement
}

impl CassandraStore {
    /// Parse `uri` (see [`CassandraConfig::from_uri`]) and open the store.
    ///
    /// ```no_run
    /// use bakery_core::{Capabilities, VersionedStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = bakery_cassandra::CassandraStore::connect("cassandra://127.0.0.1:9042/bakery").await?;
    /// assert_eq!(store.backend(), "cassandra");
    /// assert!(store.capabilities().contains(Capabilities::LINEARIZABLE_READS));
    /// # Ok(()) }
    /// ```
    pub async fn connect(uri: &str) -> Result<CassandraStore> {
        Self::open(CassandraConfig::from_uri(uri)?).await
    }

    /// Connect to the cluster `config` names, create the keyspace and the
    /// table if they are missing (then wait for schema agreement), check
    /// the table's columns and prepare the statements. Bounded by the
    /// configured timeout, at least 10 s (creating a table and waiting for
    /// schema agreement can take seconds).
    ///
    /// Fails with [`ErrorKind::Unavailable`] when no contact point answers
    /// and with [`ErrorKind::Config`] for refused credentials, a table of
    /// another shape, a keyspace that cannot be created, `serial=local_serial`
    /// on a keyspace replicated to several data centers, or a commit log
    /// that can forget acknowledged writes on a keyspace with fewer than 3
    /// replicas (unless `accept_data_loss=true`; crate docs, "Durability").
    pub async fn open(config: CassandraConfig) -> Result<CassandraStore> {
        config.validate().map_err(|e| e.during(Operation::Open))?;
        let span = tracing::debug_span!(
            "cassandra.open",
            backend = BACKEND,
            op = "open",
            hosts = %config.hosts().join(","),
            keyspace = config.keyspace(),
            table = config.table(),
        );
        let limit = open_limit(&config);
        match tokio::time::timeout(limit, Self::open_validated(config).instrument(span)).await {
            Ok(result) => result.map_err(|e| e.during(Operation::Open)),
            Err(_) => Err(timed_out(OPEN, limit)),
        }
    }

    async fn open_validated(config: CassandraConfig) -> Result<CassandraStore> {
        let profile = ExecutionProfile::builder()
            .consistency(cl(config.consistency()))
            .serial_consistency(Some(serial(config.serial())))
            .request_timeout(Some(config.timeout()))
            .build();
        let mut builder = SessionBuilder::new()
            .known_nodes(config.hosts())
            .connection_timeout(config.timeout().min(Duration::from_secs(5)))
            .default_execution_profile_handle(profile.into_handle())
            .keyspaces_to_fetch([config.keyspace().to_string()]);
        if let Some((user, password)) = config.credentials() {
            builder = builder.user(user, password);
        }
        let session = builder.build().await.map_err(|e| map_err(e, OPEN))?;
        tracing::debug!("connected");

        let (scylla, tablets) = server_kind(&session, &config).await?;
        let replication = ensure_keyspace(&session, &config, tablets).await?;
        check_cluster(&session, &config, scylla, &replication).await?;
        settle(|| ensure_table(&session, &config)).await?;

        let statements = settle(|| prepare_all(&session, &config)).await?;
        tracing::debug!(scylla, "opened");
        let recheck = Recheck::new(
            BACKEND,
            config.durability_recheck(),
            config.accept_data_loss(),
        );
        Ok(CassandraStore {
            inner: Arc::new(Inner {
                session,
                config,
                scylla,
                statements,
                recheck,
            }),
        })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &CassandraConfig {
        &self.inner.config
    }

    /// True when the server is ScyllaDB (detected on open), false for
    /// Apache Cassandra.
    pub fn is_scylla(&self) -> bool {
        self.inner.scylla
    }

    /// The driver session, for raw statements (tests, administration).
    /// Writing bakery's rows with anything but its own conditional
    /// statements breaks linearizability: see the crate docs.
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.inner.config.timeout()
    }

    /// Before a write: the durability re-check (crate docs, "Durability").
    /// When it is due, the node that answers tells its commit log mode and
    /// the keyspace's replication is read again: a node restarted with
    /// another `commitlog_sync`, or a keyspace altered to fewer replicas,
    /// stops the store's writes. A read that fails or outlasts `deadline`
    /// fails the write, unsent.
    async fn rechecked(&self, op: Operation, deadline: Instant) -> Result<()> {
        let inner = &self.inner;
        let inspect = || async move {
            let read = read_hazards(&inner.session, &inner.config, inner.scylla);
            let unsent = |why: String| {
                Error::not_sent(
                    ErrorKind::Unavailable,
                    BACKEND,
                    op,
                    format!("durability re-check: {why}"),
                )
            };
            match tokio::time::timeout_at(deadline, read).await {
                Ok(Ok(hazards)) => Ok(hazards),
                Ok(Err(e)) => Err(unsent(e.message().to_string())),
                Err(_) => Err(unsent(format!(
                    "no reply within the call's {:?}",
                    inner.config.timeout()
                ))),
            }
        };
        inner.recheck.guard(op, inspect).await
    }

    /// Run one prepared statement before `deadline`.
    async fn execute(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        request: Request,
        deadline: Instant,
    ) -> Result<QueryRowsResult> {
        let limit = self.inner.config.timeout();
        if Instant::now() >= deadline {
            return Err(match request {
                Request::Write(op) => deadline_passed(op, limit),
                Request::Read(_) => timed_out(request, limit),
            });
        }
        let call = self.inner.session.execute_unpaged(statement, values);
        let result = match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => {
                let err = map_err(e, request);
                tracing::debug!(error = %err, "failed");
                return Err(err);
            }
            Err(_) => {
                let err = timed_out(request, limit);
                tracing::debug!(error = %err, "timed out");
                return Err(err);
            }
        };
        result.into_rows_result().map_err(|e| map_err(e, request))
    }

    /// The stored row (tombstones included), read at SERIAL consistency
    /// for the store call `op`.
    async fn read_slot(&self, op: Operation, key: &Key, deadline: Instant) -> Result<Option<Slot>> {
        let request = Request::Read(op);
        let rows = self
            .execute(
                &self.inner.statements.get,
                (key.as_str(),),
                request,
                deadline,
            )
            .await?;
        let mut iter = rows.rows::<CqlRow>().map_err(|e| map_err(e, request))?;
        let Some(row) = iter.next() else {
            return Ok(None);
        };
        let row = row.map_err(|e| map_err(e, request))?;
        if iter.next().is_some() {
            return Err(reply(request, format!("two rows for the key `{key}`")));
        }
        let mut columns = row.columns.into_iter();
        let (Some(value), Some(version)) = (columns.next(), columns.next()) else {
            return Err(reply(request, "fewer columns than selected"));
        };
        slot(op, key, version, value).map(Some)
    }

    /// Run one conditional write of the store call `op`; on failure, the
    /// current row (from the reply, or from a SERIAL read when the reply
    /// does not carry it).
    async fn cas(
        &self,
        op: Operation,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        key: &Key,
        deadline: Instant,
    ) -> Result<Lwt> {
        let rows = self
            .execute(statement, values, Request::Write(op), deadline)
            .await?;
        match lwt_reply(op, key, &rows)? {
            None => Ok(Lwt::Applied),
            Some(Seen::Known(now)) => Ok(Lwt::NotApplied(now)),
            Some(Seen::Unclear) => {
                // Not applied, and nothing of ours can apply later: a read
                // failure here is a read failure (Unavailable), not Unknown.
                tracing::debug!("conditional write not applied; reading the row at SERIAL");
                Ok(Lwt::NotApplied(self.read_slot(op, key, deadline).await?))
            }
        }
    }

    async fn create(&self, key: &Key, value: Bytes, deadline: Instant) -> Result<PutOutcome> {
        let inner = &self.inner;
        // What the last round saw: `None` = nothing yet.
        let mut seen: Option<Option<Slot>> = None;
        let mut rounds = 0;
        loop {
            if let Some(Some(slot)) = &seen {
                if slot.value.is_some() {
                    let current = live(key, seen.take().flatten());
                    tracing::debug!(current = ?current.as_ref().map(|r| r.version), "conflict");
                    return Ok(PutOutcome::Conflict(current));
                }
            }
            if rounds == MAX_ROUNDS {
                return Err(gave_up(Operation::Put, key, rounds));
            }
            rounds += 1;
            match seen.take() {
                // A tombstone: re-create above its version, if it is still
                // the same tombstone.
                Some(Some(tombstone)) => {
                    let next = tombstone
                        .version
                        .checked_add(1)
                        .filter(|v| *v <= MAX_VERSION)
                        .ok_or_else(|| exhausted(key))?;
                    let values = (&value, next as i64, key.as_str(), tombstone.version as i64);
                    match self
                        .cas(
                            Operation::Put,
                            &inner.statements.recreate,
                            values,
                            key,
                            deadline,
                        )
                        .await?
                    {
                        Lwt::Applied => return Ok(applied(key, value, next)),
                        Lwt::NotApplied(now) => seen = Some(now),
                    }
                }
                // Nothing known, or no row at all: insert at version 1.
                _ => {
                    let values = (key.as_str(), &value);
                    match self
                        .cas(
                            Operation::Put,
                            &inner.statements.insert,
                            values,
                            key,
                            deadline,
                        )
                        .await?
                    {
                        Lwt::Applied => return Ok(applied(key, value, 1)),
                        Lwt::NotApplied(now) => {
                            if now.is_none() {
                                // IF NOT EXISTS failed, yet no row: it was
                                // removed (outside bakery) in between.
                                tracing::debug!("row vanished; inserting again");
                            }
                            seen = Some(now);
                        }
                    }
                }
            }
        }
    }

    async fn update(
        &self,
        key: &Key,
        expected: Version,
        value: Bytes,
        deadline: Instant,
    ) -> Result<PutOutcome> {
        if expected == 0 || expected >= MAX_VERSION {
            // No row can be at 0 or above i64::MAX; a row at i64::MAX cannot
            // be updated (its next version does not fit).
            let current = live(key, self.read_slot(Operation::Put, key, deadline).await?);
            if expected == MAX_VERSION && current.as_ref().map(|r| r.version) == Some(expected) {
                return Err(exhausted(key));
            }
            return Ok(PutOutcome::Conflict(current));
        }
        let next = expected + 1;
        let values = (&value, next as i64, key.as_str(), expected as i64);
        let statement = &self.inner.statements.update;
        let outcome = self
            .cas_at(Operation::Put, statement, values, key, expected, deadline)
            .await?;
        Ok(match outcome {
            AtVersion::Applied => applied(key, value, next),
            AtVersion::Conflict(current) => PutOutcome::Conflict(current),
        })
    }

    /// Run the conditional write `statement`, whose condition is a live row
    /// at `expected`, until it applies or the row is at another version.
    async fn cas_at(
        &self,
        op: Operation,
        statement: &PreparedStatement,
        values: impl SerializeRow + Copy,
        key: &Key,
        expected: Version,
        deadline: Instant,
    ) -> Result<AtVersion> {
        for _ in 0..MAX_ROUNDS {
            match self.cas(op, statement, values, key, deadline).await? {
                Lwt::Applied => return Ok(AtVersion::Applied),
                Lwt::NotApplied(now) => {
                    let current = live(key, now);
                    let at = current.as_ref().map(|r| r.version);
                    if at == Some(expected) {
                        // Only a read after the failed write can see this
                        // (the row was created at `expected` in between):
                        // the write did not apply, so run it again.
                        tracing::debug!("row reached the expected version meanwhile; retrying");
                        continue;
                    }
                    tracing::debug!(current = ?at, "conflict");
                    return Ok(AtVersion::Conflict(current));
                }
            }
        }
        Err(gave_up(op, key, MAX_ROUNDS))
    }
}

fn applied(key: &Key, value: Bytes, version: Version) -> PutOutcome {
    tracing::debug!(version, "applied");
    PutOutcome::Applied(Row::new(key, value, version))
}

/// Only a put can run out of versions.
fn exhausted(key: &Key) -> Error {
    Error::new(
        ErrorKind::Exhausted,
        BACKEND,
        format!("row `{key}` is at version {MAX_VERSION}, the largest a bigint holds"),
    )
    .during(Operation::Put)
}

fn gave_up(op: Operation, key: &Key, rounds: usize) -> Error {
    Error::not_sent(
        ErrorKind::Unavailable,
        BACKEND,
        op,
        format!(
            "gave up on `{key}` after {rounds} conditional writes raced with concurrent deletes and re-creates"
        ),
    )
}

/// A stored row from its `version` and `value` cells, read by the store
/// call `op`.
fn slot(
    op: Operation,
    key: &Key,
    version: Option<CqlValue>,
    value: Option<CqlValue>,
) -> Result<Slot> {
    let version = match version {
        Some(CqlValue::BigInt(v)) if v > 0 => v as Version,
        Some(CqlValue::BigInt(v)) => return Err(corrupt(op, key, format!("its version is {v}"))),
        None | Some(CqlValue::Empty) => return Err(corrupt(op, key, "its version is null")),
        Some(other) => return Err(changed(op, format!("version is {other:?}"))),
    };
    let value = match value {
        None => None,
        Some(CqlValue::Blob(bytes)) => Some(Bytes::from(bytes)),
        Some(CqlValue::Empty) => Some(Bytes::new()),
        Some(_) => return Err(changed(op, "value is not a blob")),
    };
    Ok(Slot { value, version })
}

/// The table's columns changed type under a running store.
fn changed(op: Operation, what: impl fmt::Display) -> Error {
    Error::not_sent(
        ErrorKind::Config,
        BACKEND,
        op,
        format!("the table changed under the store ({what}); reopen it"),
    )
}

/// Read the reply of a conditional write: `None` if it applied, else what
/// it says about the current row.
///
/// On success Cassandra returns only `[applied] = true` (ScyllaDB adds the
/// old row). On failure Cassandra returns `[applied] = false` and the
/// columns of the condition (`version`, `value`) — or the whole row for
/// `IF NOT EXISTS` — and nothing but `[applied]` when there is no row
/// (checked on Cassandra 5.0). ScyllaDB returns the whole old row, all null
/// (`key` too) when there is none. The columns are found by name, every
/// time.
fn lwt_reply(op: Operation, key: &Key, rows: &QueryRowsResult) -> Result<Option<Seen>> {
    let request = Request::Write(op);
    let specs = rows.column_specs();
    let index = |name: &str| specs.get_by_name(name).map(|(i, _)| i);
    let (applied_at, key_at, version_at, value_at) = (
        index("[applied]"),
        index("key"),
        index("version"),
        index("value"),
    );
    let Some(applied_at) = applied_at else {
        return Err(reply(request, "no `[applied]` column"));
    };
    let mut iter = rows.rows::<CqlRow>().map_err(|e| map_err(e, request))?;
    let Some(row) = iter.next() else {
        return Err(reply(request, "no row"));
    };
    let mut row = row.map_err(|e| map_err(e, request))?;
    match row.columns.get(applied_at) {
        Some(Some(CqlValue::Boolean(true))) => return Ok(None),
        Some(Some(CqlValue::Boolean(false))) => {}
        _ => return Err(reply(request, "`[applied]` is not a boolean")),
    }
    let mut take = |at: Option<usize>| at.and_then(|i| row.columns.get_mut(i).map(Option::take));
    let (key_cell, version_cell, value_cell) = (take(key_at), take(version_at), take(value_at));
    Ok(Some(match (key_cell, version_cell, value_cell) {
        // Cassandra: no column but `[applied]` means there is no row.
        _ if specs.len() == 1 => Seen::Known(None),
        // The whole row, and it does not exist.
        (Some(None), _, _) => Seen::Known(None),
        // The whole row (IF NOT EXISTS, or ScyllaDB), or the condition's
        // columns of a row that exists (its version is set).
        (Some(Some(_)), Some(version), Some(value))
        | (None, Some(version @ Some(_)), Some(value)) => {
            Seen::Known(Some(slot(op, key, version, value)?))
        }
        // A null version without the key (Cassandra: a corrupt row;
        // elsewhere: who knows), or a reply we do not know: ask.
        _ => Seen::Unclear,
    }))
}

/// Run a step of opening again while it fails only because a keyspace or
/// table that another client just created is not yet known to the
/// coordinator: `system_schema` shows a new table a moment before the
/// node's in-memory schema does, and schema agreement between nodes says
/// nothing about that moment. Bounded by the open deadline.
async fn settle<T, F, Fut>(mut step: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut pause = Duration::from_millis(20);
    loop {
        match step().await {
            Err(e) if not_yet_visible(&e) => {
                tracing::debug!(error = %e, "schema not yet visible; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// "table … does not exist", "Keyspace … does not exist", "unconfigured
/// table", and Cassandra's "Unknown CF <id>" (an internal error: the
/// table's metadata is there, its store not yet).
fn not_yet_visible(e: &Error) -> bool {
    let text = e.message().to_ascii_lowercase();
    [
        "does not exist",
        "doesn't exist",
        "unconfigured table",
        "unknown cf ",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// Prepare the statements of every call, then read the table once (a
/// plain read at `ONE` of a key bakery never writes) so that a table
/// another client has just created is fully usable on this coordinator
/// before the first conditional write.
async fn prepare_all(session: &Session, config: &CassandraConfig) -> Result<Statements> {
    let table = config.qualified_table();
    // A coordinator that sees too few live replicas for SERIAL refuses
    // before proposing anything: the statement moves on to another node
    // (once per node). Nothing else is re-sent: a second attempt of a
    // conditional write after a lost reply could report our own write as
    // a conflict (see `NextOnUnavailable`).
    let moves = session
        .get_cluster_state()
        .get_nodes_info()
        .len()
        .saturating_sub(1);
    let retry = Arc::new(NextOnUnavailable::new(moves));
    let prepare = |text: String, write: bool| {
        let retry = retry.clone();
        async move {
            let mut statement = session.prepare(text).await.map_err(|e| map_err(e, OPEN))?;
            statement.set_retry_policy(Some(retry));
            if write {
                statement.set_consistency(cl(config.consistency()));
                statement.set_serial_consistency(Some(serial(config.serial())));
                statement.set_is_idempotent(false);
            } else {
                statement.set_consistency(serial_cl(config.serial()));
                statement.set_is_idempotent(true);
            }
            // The columns of an LWT reply differ between success and failure:
            // always decode with the metadata in the reply.
            statement.set_use_cached_result_metadata(false);
            Ok::<_, Error>(statement)
        }
    };
    let statements = Statements {
        get: prepare(
            format!(r#"SELECT "value", "version" FROM {table} WHERE "key" = ?"#),
            false,
        )
        .await?,
        insert: prepare(
            format!(
                r#"INSERT INTO {table} ("key", "value", "version") VALUES (?, ?, 1) IF NOT EXISTS"#
            ),
            true,
        )
        .await?,
        recreate: prepare(
            format!(
                r#"UPDATE {table} SET "value" = ?, "version" = ? WHERE "key" = ? IF "version" = ? AND "value" = null"#
            ),
            true,
        )
        .await?,
        update: prepare(
            format!(
                r#"UPDATE {table} SET "value" = ?, "version" = ? WHERE "key" = ? IF "version" = ? AND "value" != null"#
            ),
            true,
        )
        .await?,
        delete: prepare(
            format!(
                r#"UPDATE {table} SET "value" = null WHERE "key" = ? IF "version" = ? AND "value" != null"#
            ),
            true,
        )
        .await?,
    };
    session
        .query_unpaged(
            catalog(
                format!(r#"SELECT "version" FROM {table} WHERE "key" = '/bakery-open-probe'"#),
                config,
            ),
            (),
        )
        .await
        .map_err(|e| map_err(e, OPEN))?;
    Ok(statements)
}

/// Is this ScyllaDB, and does it know tablets? (`system_schema.scylla_keyspaces`
/// exists only on ScyllaDB; its `initial_tablets` column only where tablets
/// exist.)
async fn server_kind(session: &Session, config: &CassandraConfig) -> Result<(bool, bool)> {
    let rows = session
        .query_unpaged(
            catalog(
                "SELECT column_name FROM system_schema.columns WHERE keyspace_name = 'system_schema' AND table_name = 'scylla_keyspaces'",
                config,
            ),
            (),
        )
        .await
        .map_err(|e| map_err(e, OPEN))?
        .into_rows_result()
        .map_err(|e| map_err(e, OPEN))?;
    let mut scylla = false;
    let mut tablets = false;
    for row in rows.rows::<(String,)>().map_err(|e| map_err(e, OPEN))? {
        let (column,) = row.map_err(|e| map_err(e, OPEN))?;
        scylla = true;
        tablets |= column == "initial_tablets";
    }
    Ok((scylla, tablets))
}

/// Create the keyspace unless it exists, and return its `replication` map
/// (read once: the durability check needs it). An existing keyspace is never
/// altered.
async fn ensure_keyspace(
    session: &Session,
    config: &CassandraConfig,
    tablets: bool,
) -> Result<BTreeMap<String, String>> {
    if let Some(replication) = keyspace_replication(session, config).await? {
        return Ok(replication);
    }
    let mut ddl = format!(
        "CREATE KEYSPACE IF NOT EXISTS \"{}\" WITH replication = {}",
        config.keyspace(),
        config.replication().cql()
    );
    if tablets {
        // ScyllaDB 6+: LWT needs vnode-based replication.
        ddl.push_str(" AND tablets = {'enabled': false}");
    }
    tracing::debug!(%ddl, "creating the keyspace");
    run_ddl(session, catalog(ddl, config)).await?;
    // Just created: not yet listed on every coordinator; `settle` retries.
    settle(|| async {
        keyspace_replication(session, config).await?.ok_or_else(|| {
            Error::config(
                BACKEND,
                format!("keyspace `{}` does not exist", config.keyspace()),
            )
        })
    })
    .await
}

/// Refuse, before anything is created in the keyspace, a deployment
/// where bakery's guarantees do not hold: `serial=local_serial` on
/// replicas in several data centers (not linearizable; no opt-in), and a
/// commit log that can forget acknowledged writes on a keyspace with fewer
/// than 3 replicas (unless `accept_data_loss=true`). Crate docs,
/// "Durability".
async fn check_cluster(
    session: &Session,
    config: &CassandraConfig,
    scylla: bool,
    replication: &BTreeMap<String, String>,
) -> Result<()> {
    let placement = placement(replication);
    let mut cluster_dcs: Vec<String> = session
        .get_cluster_state()
        .get_nodes_info()
        .iter()
        .filter_map(|node| node.datacenter.clone())
        .collect();
    cluster_dcs.sort();
    cluster_dcs.dedup();
    check_serial(config.serial(), config.keyspace(), &placement, &cluster_dcs)?;
    let found = judge(session, config, scylla, &placement).await?;
    bakery_core::durability::check(BACKEND, &found, config.accept_data_loss())
}

/// The hazards of the keyspace as it is now: its replication read again,
/// and the commit log mode of the node that answers (the re-check of a
/// live store).
async fn read_hazards(
    session: &Session,
    config: &CassandraConfig,
    scylla: bool,
) -> Result<Vec<Hazard>> {
    let replication = keyspace_replication(session, config)
        .await?
        .ok_or_else(|| {
            Error::config(
                BACKEND,
                format!("keyspace `{}` no longer exists", config.keyspace()),
            )
        })?;
    judge(session, config, scylla, &placement(&replication)).await
}

/// The hazards of `placement` with the commit log mode of the node that
/// answers (a node that will not tell: said in each hazard; one that could
/// not be reached: the error).
async fn judge(
    session: &Session,
    config: &CassandraConfig,
    scylla: bool,
    placement: &crate::durability::Placement,
) -> Result<Vec<Hazard>> {
    let sync = commitlog_sync(session, config, scylla).await?;
    let mut found = hazards(sync.as_ref().ok().map(String::as_str), placement.replicas);
    if let Err(why) = &sync {
        for hazard in &mut found {
            hazard.loses.push_str(&format!(" ({why})"));
        }
    }
    tracing::debug!(
        commitlog_sync = ?sync,
        replication = %placement.class,
        replicas = placement.replicas,
        hazards = found.len(),
        "durability"
    );
    Ok(found)
}

/// The keyspace's `replication` map from `system_schema.keyspaces`, or
/// `None` when the keyspace is not listed (absent, or just created and not
/// yet visible on this coordinator).
async fn keyspace_replication(
    session: &Session,
    config: &CassandraConfig,
) -> Result<Option<BTreeMap<String, String>>> {
    let rows = session
        .query_unpaged(
            catalog(
                "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?",
                config,
            ),
            (config.keyspace(),),
        )
        .await
        .map_err(|e| map_err(e, OPEN))?
        .into_rows_result()
        .map_err(|e| map_err(e, OPEN))?;
    match first_row::<(Option<BTreeMap<String, String>>,)>(&rows)? {
        Some((replication,)) => Ok(Some(replication.unwrap_or_default())),
        None => Ok(None),
    }
}

/// The `commitlog_sync` of the node that answers: from
/// `system_views.settings` (Cassandra 4.0+), else `system.config`
/// (ScyllaDB; asked first there). The inner `Err` says why neither told;
/// the outer one is a node that could not be reached (the connection
/// broke, no reply in time): no verdict either way.
async fn commitlog_sync(
    session: &Session,
    config: &CassandraConfig,
    scylla: bool,
) -> Result<std::result::Result<String, String>> {
    let cassandra = "system_views.settings";
    let scylladb = "system.config";
    let tables = if scylla {
        [scylladb, cassandra]
    } else {
        [cassandra, scylladb]
    };
    let mut why = Vec::new();
    for table in tables {
        let cql = format!("SELECT value FROM {table} WHERE name = 'commitlog_sync'");
        let rows = match session.query_unpaged(catalog(cql, config), ()).await {
            Ok(result) => result.into_rows_result().map_err(|e| map_err(e, OPEN)),
            Err(e) => Err(map_err(e, OPEN)),
        };
        let value = rows.and_then(|rows| first_row::<(Option<String>,)>(&rows));
        match value {
            Ok(Some((Some(value),))) => return Ok(Ok(value)),
            Ok(_) => why.push(format!("{table} has no commitlog_sync")),
            Err(e) if e.is_temporary() || e.kind() == ErrorKind::TimedOut => return Err(e),
            Err(e) => {
                tracing::debug!(table, error = %e, "cannot read commitlog_sync");
                why.push(format!("{table}: {}", e.message()));
            }
        }
    }
    Ok(Err(why.join("; ")))
}

/// The first row of a catalog reply, if any.
fn first_row<T>(rows: &QueryRowsResult) -> Result<Option<T>>
where
    T: for<'frame, 'metadata> scylla::deserialize::row::DeserializeRow<'frame, 'metadata>,
{
    let mut iter = rows.rows::<T>().map_err(|e| map_err(e, OPEN))?;
    iter.next().transpose().map_err(|e| map_err(e, OPEN))
}

/// Run a `CREATE … IF NOT EXISTS`; the driver then waits for schema
/// agreement. `AlreadyExists` (a concurrent creator) is success.
async fn run_ddl(session: &Session, ddl: Statement) -> Result<()> {
    match session.query_unpaged(ddl, ()).await {
        Ok(_) => Ok(()),
        Err(ExecutionError::LastAttemptError(RequestAttemptError::DbError(
            DbError::AlreadyExists { .. },
            _,
        ))) => Ok(()),
        Err(e) => Err(map_err(e, OPEN)),
    }
}

/// The table's columns as `(name, kind, type)`.
async fn columns(
    session: &Session,
    config: &CassandraConfig,
) -> Result<Vec<(String, String, String)>> {
    let rows = session
        .query_unpaged(
            catalog(
                "SELECT column_name, kind, type FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?",
                config,
            ),
            (config.keyspace(), config.table()),
        )
        .await
        .map_err(|e| map_err(e, OPEN))?
        .into_rows_result()
        .map_err(|e| map_err(e, OPEN))?;
    let mut out = Vec::new();
    for row in rows
        .rows::<(String, String, String)>()
        .map_err(|e| map_err(e, OPEN))?
    {
        out.push(row.map_err(|e| map_err(e, OPEN))?);
    }
    out.sort();
    Ok(out)
}

/// Create the table unless it exists, wait for schema agreement, and check
/// that it has exactly bakery's columns.
async fn ensure_table(session: &Session, config: &CassandraConfig) -> Result<()> {
    let mut found = columns(session, config).await?;
    if found.is_empty() {
        let ddl = format!(
            r#"CREATE TABLE IF NOT EXISTS {} ("key" text PRIMARY KEY, "value" blob, "version" bigint)"#,
            config.qualified_table()
        );
        tracing::debug!(%ddl, "creating the table");
        run_ddl(session, catalog(ddl, config)).await?;
        found = columns(session, config).await?;
    }
    // Another client may have created it a moment ago through another
    // coordinator: every node must know the table before we prepare.
    session
        .await_schema_agreement()
        .await
        .map_err(|e| map_err(e, OPEN))?;
    let expected = [
        ("key", "partition_key", "text"),
        ("value", "regular", "blob"),
        ("version", "regular", "bigint"),
    ];
    let matches = found.len() == expected.len()
        && found
            .iter()
            .zip(expected)
            .all(|((name, kind, typ), (n, k, t))| name == n && kind == k && typ == t);
    if matches {
        return Ok(());
    }
    let table = format!("{}.{}", config.keyspace(), config.table());
    if found.is_empty() {
        return Err(Error::config(
            BACKEND,
            format!("table {table} is missing and could not be created"),
        ));
    }
    let shown: Vec<String> = found
        .iter()
        .map(|(name, kind, typ)| format!("{name} {typ} ({kind})"))
        .collect();
    Err(Error::config(
        BACKEND,
        format!(
            "table {table} has an unexpected schema: found {}; expected exactly \"key\" text PRIMARY KEY, \"value\" blob, \"version\" bigint",
            shown.join(", ")
        ),
    ))
}

#[async_trait]
impl VersionedStore for CassandraStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::PERSISTENT | Capabilities::SHARED | Capabilities::LINEARIZABLE_READS
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let slot = self.read_slot(Operation::Get, key, self.deadline()).await?;
        Ok(live(key, slot))
    }

    /// A lightweight transaction: `INSERT … IF NOT EXISTS` or
    /// `UPDATE … IF version = ?`.
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let deadline = self.deadline();
        self.rechecked(Operation::Put, deadline).await?;
        match expected {
            None => self.create(key, value, deadline).await,
            Some(expected) => self.update(key, expected, value, deadline).await,
        }
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let deadline = self.deadline();
        self.rechecked(Operation::Delete, deadline).await?;
        if expected == 0 || expected > MAX_VERSION {
            // No row has such a version.
            let current = live(key, self.read_slot(Operation::Delete, key, deadline).await?);
            return Ok(DeleteOutcome::Conflict(current));
        }
        let values = (key.as_str(), expected as i64);
        let statement = &self.inner.statements.delete;
        let outcome = self
            .cas_at(
                Operation::Delete,
                statement,
                values,
                key,
                expected,
                deadline,
            )
            .await?;
        Ok(match outcome {
            AtVersion::Applied => {
                tracing::debug!("deleted");
                DeleteOutcome::Deleted
            }
            AtVersion::Conflict(current) => DeleteOutcome::Conflict(current),
        })
    }
}

impl fmt::Debug for CassandraStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The config's Debug redacts the password.
        f.debug_struct("CassandraStore")
            .field("config", &self.inner.config)
            .field("scylla", &self.inner.scylla)
            .finish_non_exhaustive()
    }
}
