//! PostgreSQL advisory locks: the lock a PostgreSQL user already has.

use async_trait::async_trait;
use bakery::backends::postgres::tokio_postgres::{Client, Statement};

use super::driver::{lock_connections, op_error, peer_error, server_peer, tag_hash};
use super::postgres::session;
use crate::error::BenchError;
use crate::model::{CellSpec, OpError, PreparedCell, RoundTrips};
use crate::workloads::lock::NativeLock;

server_peer! {
    /// `pg_advisory_lock(k)` + `pg_advisory_unlock(k)`, one connection per
    /// client: the server queues the waiters (no polling), two round trips
    /// per acquisition. No lease and no fencing: the lock lives as long as
    /// the session.
    pub struct AdvisoryLock;
    /// The peer on the server of `uri` (a bakery postgres URI).
    fn new;
    workload: "lock",
    label: "pg_advisory_lock()",
}

impl AdvisoryLock {
    /// A cell's sessions, each with its two statements prepared.
    async fn open_cell(
        &self,
        cell: &CellSpec,
        sent: RoundTrips,
    ) -> Result<PreparedCell, BenchError> {
        // One 64-bit key per cell, from its tag (unique in the run).
        let key = tag_hash(&cell.tag) as i64;
        lock_connections(cell, &sent, || async {
            let client = session(self, &self.uri).await?;
            let prepare = async |sql: &str| {
                let prepared = client.prepare(sql).await;
                prepared.map_err(|e| peer_error("postgres", self, "cannot prepare", e))
            };
            let lock = prepare("SELECT pg_advisory_lock($1)").await?;
            let unlock = prepare("SELECT pg_advisory_unlock($1)").await?;
            Ok(AdvisoryConnection {
                client,
                lock,
                unlock,
                key,
            })
        })
        .await
    }
}

struct AdvisoryConnection {
    client: Client,
    lock: Statement,
    unlock: Statement,
    key: i64,
}

#[async_trait]
impl NativeLock for AdvisoryConnection {
    type Held = ();

    async fn lock(&mut self) -> Result<(), OpError> {
        self.client
            .execute(&self.lock, &[&self.key])
            .await
            .map_err(|e| op_error("pg_advisory_lock", e))?;
        Ok(())
    }

    async fn unlock(&mut self, (): ()) -> Result<(), OpError> {
        self.client
            .execute(&self.unlock, &[&self.key])
            .await
            .map_err(|e| op_error("pg_advisory_unlock", e))?;
        Ok(())
    }
}
