//! Redis through the raw driver: `INCRBY`, the counter a Redis user
//! already has, the lock a Redis user writes (`SET key token NX PX ttl`,
//! released by a compare-and-delete script), and a compare-and-set script
//! (the raw counterpart of bakery's `put_if_version`).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bakery::backends::redis::redis::{self, aio::MultiplexedConnection, RedisError};
use rand::Rng;

use super::driver::{
    connected, lock_connections, op_error, peer_error, server_peer, within_connect_timeout, NextIds,
};
use crate::error::BenchError;
use crate::model::{BenchClient, CellSpec, Finish, OpError, PreparedCell, RoundTrips};
use crate::workloads::lock::NativeLock;

/// A bakery redis `uri` as the driver takes it: without bakery's options
/// (all of a redis URI's options are bakery's: prefix, cas, timeout_ms,
/// pool_size, ca_file).
pub fn driver_uri(uri: &str) -> &str {
    uri.split_once('?').map_or(uri, |(base, _)| base)
}

/// One multiplexed connection to the server of a bakery redis `uri`.
pub async fn connect(uri: &str) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(driver_uri(uri)).map_err(|e| format!("bad URI: {e}"))?;
    within_connect_timeout(client.get_multiplexed_async_connection()).await
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

server_peer! {
    /// `INCRBY key 1` on a key of its own, one connection per client: one
    /// round trip per id, atomic on the server.
    pub struct Incrby;
    /// The peer on the server of `uri`.
    fn new;
    workload: "sequence",
    label: "INCRBY",
}

impl Incrby {
    /// A cell's connections on one counter, and one more to delete it.
    async fn open_cell(
        &self,
        cell: &CellSpec,
        sent: RoundTrips,
    ) -> Result<PreparedCell, BenchError> {
        let key = format!("bakery-bench:{}:incrby", cell.tag);
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for _ in 0..cell.clients {
            clients.push(Box::new(IncrbyClient {
                connection: connected("redis", self, connect(&self.uri)).await?,
                key: key.clone(),
                ids: NextIds::new(cell, &sent),
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
    ids: NextIds,
}

#[async_trait]
impl BenchClient for IncrbyClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let request = incrby(&mut self.connection, &self.key);
        self.ids.next("INCRBY", request).await
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

/// The lock key's expiry: how long a crashed holder keeps the lock (every
/// grant is released long before).
pub const LOCK_TTL_MS: u64 = 10_000;

/// The first back-off after a failed try, doubled after each failed try up
/// to [`MAX_BACKOFF`]; each sleep is a random half to all of it (jitter).
pub const FIRST_BACKOFF: Duration = Duration::from_millis(1);
/// The longest back-off between two tries.
pub const MAX_BACKOFF: Duration = Duration::from_millis(16);

/// The release: delete the key only if it still holds this holder's token
/// (a holder whose key expired must not delete its successor's).
const UNLOCK_SCRIPT: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

server_peer! {
    /// The lock a Redis user writes by hand, as the common Redis lock libraries
    /// do: acquire = `SET key <random token> NX PX <ttl>`, tried again after a
    /// short jittered back-off (1 ms doubling to 16 ms) until it succeeds;
    /// release = a Lua compare-and-delete on the token (`EVALSHA`, the script
    /// loaded once per connection). One multiplexed connection per client. No
    /// queue (whoever tries right after a release wins), no fencing token;
    /// one round trip per try, one per release.
    pub struct SetNxLock;
    /// The peer on the server of `uri` (a bakery redis URI).
    fn new;
    workload: "lock",
    label: "SET NX PX + Lua release",
}

impl SetNxLock {
    /// A cell's connections, each with the release script loaded.
    async fn open_cell(
        &self,
        cell: &CellSpec,
        sent: RoundTrips,
    ) -> Result<PreparedCell, BenchError> {
        let key = format!("bakery-bench:{}:lock", cell.tag);
        let script = redis::Script::new(UNLOCK_SCRIPT);
        lock_connections(cell, &sent, || async {
            let mut connection = connected("redis", self, connect(&self.uri)).await?;
            script
                .prepare_invoke()
                .load_async(&mut connection)
                .await
                .map_err(|e| peer_error("redis", self, "cannot load the release script", e))?;
            Ok(SetNxConnection {
                connection,
                key: key.clone(),
                script: script.clone(),
                retries: sent.clone(),
            })
        })
        .await
    }
}

struct SetNxConnection {
    connection: MultiplexedConnection,
    key: String,
    script: redis::Script,
    /// Where the tries past the first are counted (the cell's round trips:
    /// the native lock client counts one try and the release).
    retries: RoundTrips,
}

/// A random half to all of `backoff`.
fn jittered(backoff: Duration) -> Duration {
    let max = u64::try_from(backoff.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(rand::rng().random_range(max / 2..=max))
}

#[async_trait]
impl NativeLock for SetNxConnection {
    /// The token the key holds.
    type Held = String;

    async fn lock(&mut self) -> Result<String, OpError> {
        let token = format!("{:032x}", rand::rng().random::<u128>());
        let mut backoff = FIRST_BACKOFF;
        let mut first = true;
        loop {
            if !first {
                self.retries.fetch_add(1, Ordering::Relaxed);
            }
            first = false;
            let set: Option<String> = redis::cmd("SET")
                .arg(&self.key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(LOCK_TTL_MS)
                .query_async(&mut self.connection)
                .await
                .map_err(|e| op_error("SET NX PX", e))?;
            if set.is_some() {
                return Ok(token);
            }
            tokio::time::sleep(jittered(backoff)).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn unlock(&mut self, token: String) -> Result<(), OpError> {
        let deleted: i64 = self
            .script
            .key(&self.key)
            .arg(&token)
            .invoke_async(&mut self.connection)
            .await
            .map_err(|e| op_error("release script", e))?;
        if deleted != 1 {
            return Err(OpError(
                "the lock key no longer held this holder's token at release (expired?)".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_back_off_is_jittered_within_its_half() {
        for _ in 0..100 {
            let slept = jittered(MAX_BACKOFF);
            assert!(
                slept >= MAX_BACKOFF / 2 && slept <= MAX_BACKOFF,
                "{slept:?}"
            );
        }
    }
}
