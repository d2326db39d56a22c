//! PostgreSQL advisory locks: the lock a PostgreSQL user already has.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bakery::backends::postgres::tokio_postgres::{Client, Statement};

use super::postgres::connect;
use crate::error::{one_line, BenchError};
use crate::model::{BenchClient, CellSpec, OpError, Peer, PreparedCell};
use crate::workloads::lock::{CheckGrants, GrantLog};

/// `pg_advisory_lock(k)` + `pg_advisory_unlock(k)`, one connection per
/// client: the server queues the waiters (no polling), two round trips per
/// acquisition. No lease and no fencing: the lock lives as long as the
/// session.
#[derive(Debug, Clone)]
pub struct AdvisoryLock {
    uri: String,
}

impl AdvisoryLock {
    /// The peer on the server of `uri` (a bakery postgres URI).
    pub fn new(uri: &str) -> Self {
        AdvisoryLock {
            uri: uri.to_string(),
        }
    }

    fn error(&self, what: &str, err: impl std::fmt::Display) -> BenchError {
        BenchError::Peer {
            peer: format!("postgres {}", self.label()),
            message: one_line(&format!("{what}: {err}")),
        }
    }
}

#[async_trait]
impl Peer for AdvisoryLock {
    fn workload(&self) -> &'static str {
        "lock"
    }

    fn label(&self) -> String {
        "pg_advisory_lock()".to_string()
    }

    async fn prepare(
        &self,
        cell: &CellSpec,
        round_trips: Arc<AtomicU64>,
    ) -> Result<PreparedCell, BenchError> {
        // One 64-bit key per cell, from its tag (unique in the run).
        let key = cell
            .tag
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
            }) as i64;
        let grants = Arc::new(GrantLog::default());
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for index in 0..cell.clients {
            let client = connect(&self.uri)
                .await
                .map_err(|e| self.error("cannot connect", e))?;
            let lock = client
                .prepare("SELECT pg_advisory_lock($1)")
                .await
                .map_err(|e| self.error("cannot prepare", e))?;
            let unlock = client
                .prepare("SELECT pg_advisory_unlock($1)")
                .await
                .map_err(|e| self.error("cannot prepare", e))?;
            clients.push(Box::new(AdvisoryClient {
                index,
                client,
                lock,
                unlock,
                key,
                grants: grants.clone(),
                round_trips: round_trips.clone(),
                warmed: false,
            }));
        }
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(CheckGrants(grants))),
        })
    }
}

struct AdvisoryClient {
    index: usize,
    client: Client,
    lock: Statement,
    unlock: Statement,
    key: i64,
    grants: Arc<GrantLog>,
    round_trips: Arc<AtomicU64>,
    warmed: bool,
}

#[async_trait]
impl BenchClient for AdvisoryClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let failed = |what: &str, e| OpError(one_line(&format!("{what}: {e}")));
        if !self.warmed {
            // Like the bakery lock clients: the warm-up opens, never grants.
            self.warmed = true;
            return Ok(());
        }
        self.round_trips.fetch_add(2, Ordering::Relaxed);
        self.client
            .execute(&self.lock, &[&self.key])
            .await
            .map_err(|e| failed("pg_advisory_lock", e))?;
        let entered = self.grants.critical_section(self.index);
        self.client
            .execute(&self.unlock, &[&self.key])
            .await
            .map_err(|e| failed("pg_advisory_unlock", e))?;
        entered
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
        self.grants.extras(self.index)
    }
}
