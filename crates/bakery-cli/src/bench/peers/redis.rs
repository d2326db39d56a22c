//! Redis `INCRBY`: the counter a Redis user already has.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bakery::backends::redis::redis::{self, aio::MultiplexedConnection};

use crate::bench::error::BenchError;
use crate::bench::workload::{BenchClient, CellSpec, Finish, OpError, Peer, PreparedCell};
use crate::output::one_line;

/// How long opening one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `INCRBY key 1` on a key of its own, one connection per client: one
/// round trip per id, atomic on the server.
#[derive(Debug, Clone)]
pub struct Incrby {
    /// The URI without bakery's options (all of a redis URI's options are
    /// bakery's: prefix, cas, timeout_ms, pool_size, ca_file).
    driver_uri: String,
}

impl Incrby {
    /// The peer on the server of `uri`.
    pub fn new(uri: &str) -> Self {
        Incrby {
            driver_uri: uri
                .split_once('?')
                .map_or(uri, |(base, _)| base)
                .to_string(),
        }
    }

    fn error(&self, what: &str, err: impl std::fmt::Display) -> BenchError {
        BenchError::Peer {
            peer: format!("redis {}", self.label()),
            message: one_line(&format!("{what}: {err}")),
        }
    }

    async fn connect(&self) -> Result<MultiplexedConnection, BenchError> {
        let client =
            redis::Client::open(self.driver_uri.as_str()).map_err(|e| self.error("bad URI", e))?;
        tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
            .await
            .map_err(|_| self.error("cannot connect", "timed out"))?
            .map_err(|e| self.error("cannot connect", e))
    }
}

#[async_trait]
impl Peer for Incrby {
    fn workload(&self) -> &'static str {
        "sequence"
    }

    fn label(&self) -> String {
        "INCRBY".to_string()
    }

    async fn prepare(
        &self,
        cell: &CellSpec,
        round_trips: Arc<AtomicU64>,
    ) -> Result<PreparedCell, BenchError> {
        let key = format!("bakery-bench:{}:incrby", cell.tag);
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for _ in 0..cell.clients {
            clients.push(Box::new(IncrbyClient {
                connection: self.connect().await?,
                key: key.clone(),
                round_trips: round_trips.clone(),
                last: 0,
            }));
        }
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(DeleteKey {
                connection: self.connect().await?,
                key,
            })),
        })
    }
}

struct IncrbyClient {
    connection: MultiplexedConnection,
    key: String,
    round_trips: Arc<AtomicU64>,
    last: i64,
}

#[async_trait]
impl BenchClient for IncrbyClient {
    async fn op(&mut self) -> Result<(), OpError> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let id: i64 = redis::cmd("INCRBY")
            .arg(&self.key)
            .arg(1)
            .query_async(&mut self.connection)
            .await
            .map_err(|e| OpError(one_line(&format!("INCRBY: {e}"))))?;
        if id <= self.last {
            return Err(OpError(format!("INCRBY gave {id} after {}", self.last)));
        }
        self.last = id;
        Ok(())
    }
}

/// Deletes the cell's counter (best effort).
struct DeleteKey {
    connection: MultiplexedConnection,
    key: String,
}

#[async_trait]
impl Finish for DeleteKey {
    async fn finish(mut self: Box<Self>, _had_errors: bool) -> Vec<String> {
        let _: Result<i64, _> = redis::cmd("DEL")
            .arg(&self.key)
            .query_async(&mut self.connection)
            .await;
        Vec::new()
    }
}
