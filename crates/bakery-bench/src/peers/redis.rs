//! Redis through the raw driver: `INCRBY`, the counter a Redis user
//! already has, and a compare-and-set script (the raw counterpart of
//! bakery's `put_if_version`).

use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use bakery::backends::redis::redis::{self, aio::MultiplexedConnection, RedisError};

use super::driver::{connected, next_id, CONNECT_TIMEOUT};
use crate::error::BenchError;
use crate::model::{BenchClient, CellSpec, Finish, OpError, Peer, PreparedCell, RoundTrips};

/// A bakery redis `uri` as the driver takes it: without bakery's options
/// (all of a redis URI's options are bakery's: prefix, cas, timeout_ms,
/// pool_size, ca_file).
pub fn driver_uri(uri: &str) -> &str {
    uri.split_once('?').map_or(uri, |(base, _)| base)
}

/// One multiplexed connection to the server of a bakery redis `uri`.
pub async fn connect(uri: &str) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(driver_uri(uri)).map_err(|e| format!("bad URI: {e}"))?;
    tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// One `INCRBY key 1`: one round trip, atomic on the server; the new value.
pub async fn incrby(connection: &mut MultiplexedConnection, key: &str) -> Result<i64, RedisError> {
    redis::cmd("INCRBY")
        .arg(key)
        .arg(1)
        .query_async(connection)
        .await
}

/// The conditional write a Redis user would script by hand: compare the
/// hash's version field, then write the value and version + 1; `-1` when
/// the version did not match.
const CAS_SCRIPT: &str = r"local v = redis.call('HGET', KEYS[1], 'ver')
          if v == ARGV[1] then
            local n = tonumber(v) + 1
            redis.call('HSET', KEYS[1], 'v', ARGV[2], 'ver', n)
            return n
          end
          return -1";

/// A conditional update through the raw driver: a hash `{v, ver}` under a
/// key of its own, updated by a Lua compare-and-set on `ver` (one round
/// trip, `EVALSHA`). Chained by version: each update expects the version
/// the previous one produced.
#[derive(Debug)]
pub struct RawCas {
    script: redis::Script,
    key: String,
    version: AtomicI64,
}

impl RawCas {
    /// Create the hash `key` at version 1.
    pub async fn create(
        connection: &mut MultiplexedConnection,
        key: &str,
    ) -> Result<RawCas, RedisError> {
        redis::cmd("HSET")
            .arg(key)
            .arg("v")
            .arg("x")
            .arg("ver")
            .arg(1)
            .query_async::<()>(connection)
            .await?;
        Ok(RawCas {
            script: redis::Script::new(CAS_SCRIPT),
            key: key.to_string(),
            version: AtomicI64::new(1),
        })
    }

    /// One conditional update to `value`: `false` if the hash was not at
    /// the expected version (someone else wrote it).
    pub async fn update(
        &self,
        connection: &mut MultiplexedConnection,
        value: &[u8],
    ) -> Result<bool, RedisError> {
        let expected = self.version.load(Ordering::Relaxed);
        let new: i64 = self
            .script
            .key(&self.key)
            .arg(expected)
            .arg(value)
            .invoke_async(connection)
            .await?;
        if new < 0 {
            return Ok(false);
        }
        self.version.store(new, Ordering::Relaxed);
        Ok(true)
    }

    /// Delete the hash.
    pub async fn delete(&self, connection: &mut MultiplexedConnection) -> Result<(), RedisError> {
        redis::cmd("DEL")
            .arg(&self.key)
            .query_async::<()>(connection)
            .await
    }
}

/// `INCRBY key 1` on a key of its own, one connection per client: one
/// round trip per id, atomic on the server.
#[derive(Debug, Clone)]
pub struct Incrby {
    uri: String,
}

impl Incrby {
    /// The peer on the server of `uri`.
    pub fn new(uri: impl Into<String>) -> Self {
        Incrby { uri: uri.into() }
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

    async fn setup(&self, cell: &CellSpec, sent: RoundTrips) -> Result<PreparedCell, BenchError> {
        let key = format!("bakery-bench:{}:incrby", cell.tag);
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for _ in 0..cell.clients {
            clients.push(Box::new(IncrbyClient {
                connection: connected("redis", self, connect(&self.uri)).await?,
                key: key.clone(),
                round_trips: sent.clone(),
                last: 0,
            }));
        }
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(DeleteKey {
                connection: connected("redis", self, connect(&self.uri)).await?,
                key,
            })),
        })
    }
}

struct IncrbyClient {
    connection: MultiplexedConnection,
    key: String,
    round_trips: RoundTrips,
    last: i64,
}

#[async_trait]
impl BenchClient for IncrbyClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let request = incrby(&mut self.connection, &self.key);
        next_id("INCRBY", &self.round_trips, &mut self.last, request).await
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
