//! PostgreSQL `nextval()`: the sequence a PostgreSQL user already has.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bakery::backends::postgres::tokio_postgres::{self, Client, NoTls, Statement};

use crate::bench::error::BenchError;
use crate::bench::workload::{BenchClient, CellSpec, Finish, OpError, Peer, PreparedCell};
use crate::output::one_line;

/// Options of bakery's postgres URIs that the driver does not take.
/// TLS options are dropped too: the peers connect without TLS (see
/// [`Nextval`]).
const BAKERY_OPTIONS: &[&str] = &["table", "pool_size", "timeout_ms", "sslmode", "sslrootcert"];

/// How long opening one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `SELECT nextval(…)` on a sequence of its own, one connection per
/// client: without CACHE every id is a round trip to the sequence; with
/// `CACHE n` each connection takes `n` values at a time (PostgreSQL's
/// per-session cache, the native counterpart of bakery's blocks).
///
/// The connections are plain TCP (`NoTls`): a server that insists on TLS
/// makes the peer fail with a clear error instead of silently measuring
/// something else.
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

    fn error(&self, what: &str, err: impl std::fmt::Display) -> BenchError {
        BenchError::Peer {
            peer: format!("postgres {}", self.label()),
            message: one_line(&format!("{what}: {err}")),
        }
    }

    async fn connect(&self) -> Result<Client, BenchError> {
        connect(&self.uri)
            .await
            .map_err(|e| self.error("cannot connect", e))
    }
}

/// One plain connection to the server of a bakery postgres `uri` (bakery's
/// own options removed), its I/O driven by a task of its own.
pub(super) async fn connect(uri: &str) -> Result<Client, String> {
    let driver_uri = super::without_options(uri, BAKERY_OPTIONS);
    let connecting = tokio_postgres::connect(&driver_uri, NoTls);
    let (client, connection) = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())?;
    // The connection's I/O runs on its own task until the client is
    // dropped; its errors reach the client's calls.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
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

    async fn prepare(
        &self,
        cell: &CellSpec,
        round_trips: Arc<AtomicU64>,
    ) -> Result<PreparedCell, BenchError> {
        let admin = self.connect().await?;
        // The name is ours (lowercase letters, digits, `_`), so it can be
        // spliced into the DDL; the statement itself takes it as a parameter.
        let sequence = format!("bakery_bench_{}", cell.tag.replace('-', "_"));
        let cache = self.cache.unwrap_or(1);
        admin
            .batch_execute(&format!("CREATE SEQUENCE {sequence} CACHE {cache}"))
            .await
            .map_err(|e| self.error("cannot create the sequence", e))?;
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for _ in 0..cell.clients {
            let client = self.connect().await?;
            let statement = client
                .prepare("SELECT nextval($1::text::regclass)")
                .await
                .map_err(|e| self.error("cannot prepare nextval()", e))?;
            clients.push(Box::new(NextvalClient {
                client,
                statement,
                sequence: sequence.clone(),
                round_trips: round_trips.clone(),
                last: 0,
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
    sequence: String,
    round_trips: Arc<AtomicU64>,
    last: i64,
}

#[async_trait]
impl BenchClient for NextvalClient {
    async fn op(&mut self) -> Result<(), OpError> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let row = self
            .client
            .query_one(&self.statement, &[&self.sequence])
            .await
            .map_err(|e| OpError(one_line(&format!("nextval(): {e}"))))?;
        let id: i64 = row
            .try_get(0)
            .map_err(|e| OpError(one_line(&format!("nextval() reply: {e}"))))?;
        if id <= self.last {
            return Err(OpError(format!("nextval() gave {id} after {}", self.last)));
        }
        self.last = id;
        Ok(())
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
        let _ = self
            .admin
            .batch_execute(&format!("DROP SEQUENCE IF EXISTS {}", self.sequence))
            .await;
        Vec::new()
    }
}
