//! PostgreSQL through the raw driver: `nextval()`, the sequence a
//! PostgreSQL user already has, and a conditional update of a row of its
//! own (the raw counterpart of bakery's `put_if_version`).

use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use bakery::backends::postgres::tokio_postgres::{self, Client, NoTls, Statement};

use super::driver::{connected, peer_error, within_connect_timeout, without_options, NextIds};
use crate::error::BenchError;
use crate::model::{BenchClient, CellSpec, Finish, OpError, Peer, PreparedCell, RoundTrips};

pub use tokio_postgres::Error;

/// Options of bakery's postgres URIs that the driver does not take.
/// TLS options are dropped too: the peers connect without TLS (see
/// [`connect`]).
const BAKERY_OPTIONS: &[&str] = &["table", "pool_size", "timeout_ms", "sslmode", "sslrootcert"];

/// The driver's URL of a bakery postgres `uri`: bakery's own options (and
/// TLS, see [`connect`]) removed.
pub fn driver_uri(uri: &str) -> String {
    without_options(uri, BAKERY_OPTIONS)
}

/// A session of `peer` on `uri` (see [`connect`]); a failure to connect is
/// the peer's [`BenchError`].
pub(crate) async fn session(peer: &dyn Peer, uri: &str) -> Result<Client, BenchError> {
    connected("postgres", peer, connect(uri)).await
}

/// `n` sessions of `peer` on `uri`, one per client of a cell.
pub(crate) async fn sessions(
    peer: &dyn Peer,
    uri: &str,
    n: usize,
) -> Result<Vec<Client>, BenchError> {
    let mut sessions = Vec::with_capacity(n);
    for _ in 0..n {
        sessions.push(session(peer, uri).await?);
    }
    Ok(sessions)
}

/// One plain connection to the server of a bakery postgres `uri` (bakery's
/// own options removed), its I/O driven by a task of its own.
///
/// The connection is plain TCP (`NoTls`): a server that insists on TLS
/// makes the peer fail with a clear error instead of silently measuring
/// something else.
pub async fn connect(uri: &str) -> Result<Client, String> {
    let driver_uri = driver_uri(uri);
    let connecting = tokio_postgres::connect(&driver_uri, NoTls);
    let (client, connection) = within_connect_timeout(connecting).await?;
    // The connection's I/O runs on its own task until the client is
    // dropped; its errors reach the client's calls.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Create the sequence `name` with `CACHE cache` (1: no cache, every id a
/// round trip). `name` must be a plain identifier (letters, digits, `_`):
/// it is spliced into the SQL.
pub async fn create_sequence(client: &Client, name: &str, cache: u64) -> Result<(), Error> {
    client
        .batch_execute(&format!(
            "CREATE SEQUENCE IF NOT EXISTS {name} CACHE {cache}"
        ))
        .await
}

/// Drop the sequence `name` if it exists.
pub async fn drop_sequence(client: &Client, name: &str) -> Result<(), Error> {
    client
        .batch_execute(&format!("DROP SEQUENCE IF EXISTS {name}"))
        .await
}

/// Prepare `SELECT nextval('<name>')` on `client`.
pub async fn prepare_nextval(client: &Client, name: &str) -> Result<Statement, Error> {
    client.prepare(&format!("SELECT nextval('{name}')")).await
}

/// Create the sequence `name` (CACHE `cache`) and prepare its `nextval()`
/// on `client`.
pub async fn sequence_with_nextval(
    client: &Client,
    name: &str,
    cache: u64,
) -> Result<Statement, Error> {
    create_sequence(client, name, cache).await?;
    prepare_nextval(client, name).await
}

/// One `nextval()`: one round trip, the next id of the sequence.
pub async fn nextval(client: &Client, statement: &Statement) -> Result<i64, Error> {
    client.query_one(statement, &[]).await?.try_get(0)
}

/// A conditional update through the raw driver: one row `(key, value,
/// version)` in a table of its own, updated with `UPDATE … WHERE key = $1
/// AND version = $3 RETURNING version` — the conditional write bakery's
/// store makes, without bakery. Chained by version: each update expects
/// the version the previous one produced.
#[derive(Debug)]
pub struct RawCas {
    table: String,
    update: Statement,
    version: AtomicI64,
}

impl RawCas {
    /// Create the table `table` (a plain identifier: it is spliced into the
    /// SQL) with its one row at version 1.
    pub async fn create(client: &Client, table: &str) -> Result<RawCas, Error> {
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (key TEXT PRIMARY KEY, value BYTEA, version BIGINT NOT NULL);
                 INSERT INTO {table} VALUES ('k', 'v', 1);"
            ))
            .await?;
        let update = client
            .prepare(&format!(
                "UPDATE {table} SET value = $2, version = version + 1 \
                 WHERE key = $1 AND version = $3 RETURNING version"
            ))
            .await?;
        Ok(RawCas {
            table: table.to_string(),
            update,
            version: AtomicI64::new(1),
        })
    }

    /// One conditional update to `value`: `false` if the row was not at the
    /// expected version (someone else wrote it).
    pub async fn update(&self, client: &Client, value: &[u8]) -> Result<bool, Error> {
        let expected = self.version.load(Ordering::Relaxed);
        let row = client
            .query_opt(&self.update, &[&"k", &value, &expected])
            .await?;
        let Some(row) = row else {
            return Ok(false);
        };
        self.version.store(row.try_get(0)?, Ordering::Relaxed);
        Ok(true)
    }

    /// Drop the table.
    pub async fn drop_table(&self, client: &Client) -> Result<(), Error> {
        client
            .batch_execute(&format!("DROP TABLE IF EXISTS {}", self.table))
            .await
    }
}

/// `SELECT nextval(…)` on a sequence of its own, one connection per
/// client: without CACHE every id is a round trip to the sequence; with
/// `CACHE n` each connection takes `n` values at a time (PostgreSQL's
/// per-session cache, the native counterpart of bakery's blocks).
#[derive(Debug, Clone)]
pub struct Nextval {
    uri: String,
    cache: Option<u64>,
}

impl Nextval {
    /// The peer on the server of `uri`; `cache` is the sequence's CACHE.
    pub fn new(uri: &str, cache: Option<u64>) -> Self {
        Nextval {
            uri: uri.to_string(),
            cache,
        }
    }
}

#[async_trait]
impl Peer for Nextval {
    fn workload(&self) -> &'static str {
        "sequence"
    }

    fn label(&self) -> String {
        match self.cache {
            None => "nextval()".to_string(),
            Some(cache) => format!("nextval() CACHE {cache}"),
        }
    }

    async fn setup(&self, cell: &CellSpec, sent: RoundTrips) -> Result<PreparedCell, BenchError> {
        let admin = session(self, &self.uri).await?;
        // The name is ours (lowercase letters, digits, `_`), so it can be
        // spliced into the SQL.
        let sequence = cell.sql_name();
        create_sequence(&admin, &sequence, self.cache.unwrap_or(1))
            .await
            .map_err(|e| peer_error("postgres", self, "cannot create the sequence", e))?;
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for client in sessions(self, &self.uri, cell.clients).await? {
            let statement = prepare_nextval(&client, &sequence)
                .await
                .map_err(|e| peer_error("postgres", self, "cannot prepare nextval()", e))?;
            clients.push(Box::new(NextvalClient {
                client,
                statement,
                ids: NextIds::new(cell, &sent),
            }));
        }
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(DropSequence { admin, sequence })),
        })
    }
}

struct NextvalClient {
    client: Client,
    statement: Statement,
    ids: NextIds,
}

#[async_trait]
impl BenchClient for NextvalClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let request = nextval(&self.client, &self.statement);
        self.ids.next("nextval()", request).await
    }
}

/// Drops the cell's sequence (best effort: a leftover is harmless).
struct DropSequence {
    admin: Client,
    sequence: String,
}

#[async_trait]
impl Finish for DropSequence {
    async fn finish(self: Box<Self>, _had_errors: bool) -> Vec<String> {
        let _ = drop_sequence(&self.admin, &self.sequence).await;
        Vec::new()
    }
}
