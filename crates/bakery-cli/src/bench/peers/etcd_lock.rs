//! etcd's own lock (the v3 lock service): what an etcd user already has.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bakery::backends::etcd::etcd_client::{Client, LockOptions};
use bakery::backends::etcd::EtcdConfig;

use super::advisory::CheckGrants;
use crate::bench::error::BenchError;
use crate::bench::lock::GrantLog;
use crate::bench::workload::{BenchClient, CellSpec, OpError, Peer, PreparedCell};
use crate::output::one_line;

/// The lease every client's lock ownership is attached to; longer than any
/// cell, so it never expires mid-run (etcd's lock needs a lease).
const LEASE_TTL_SECONDS: i64 = 600;

/// How long opening one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `Lock(name, lease)` + `Unlock(key)`, one connection and one lease per
/// client: etcd orders waiters by the revision of their key (FIFO) and
/// wakes the next one with a watch. Two round trips per acquisition.
#[derive(Debug, Clone)]
pub struct EtcdLock {
    uri: String,
}

impl EtcdLock {
    /// The peer on the cluster of `uri` (a bakery etcd URI).
    pub fn new(uri: &str) -> Self {
        EtcdLock {
            uri: uri.to_string(),
        }
    }

    fn error(&self, what: &str, err: impl std::fmt::Display) -> BenchError {
        BenchError::Peer {
            peer: format!("etcd {}", self.label()),
            message: one_line(&format!("{what}: {err}")),
        }
    }
}

#[async_trait]
impl Peer for EtcdLock {
    fn workload(&self) -> &'static str {
        "lock"
    }

    fn label(&self) -> String {
        "etcd Lock/Unlock".to_string()
    }

    async fn prepare(
        &self,
        cell: &CellSpec,
        round_trips: Arc<AtomicU64>,
    ) -> Result<PreparedCell, BenchError> {
        let config = EtcdConfig::from_uri(&self.uri).map_err(|e| self.error("bad URI", e))?;
        let name = format!("bakery-bench-lock/{}", cell.tag);
        let grants = Arc::new(GrantLog::default());
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for index in 0..cell.clients {
            let connecting = Client::connect(config.endpoints(), None);
            let mut client = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
                .await
                .map_err(|_| self.error("cannot connect", "timed out"))?
                .map_err(|e| self.error("cannot connect", e))?;
            let lease = client
                .lease_grant(LEASE_TTL_SECONDS, None)
                .await
                .map_err(|e| self.error("cannot grant a lease", e))?
                .id();
            clients.push(Box::new(EtcdLockClient {
                index,
                client,
                lease,
                name: name.clone(),
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

struct EtcdLockClient {
    index: usize,
    client: Client,
    lease: i64,
    name: String,
    grants: Arc<GrantLog>,
    round_trips: Arc<AtomicU64>,
    warmed: bool,
}

#[async_trait]
impl BenchClient for EtcdLockClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let failed = |what: &str, e| OpError(one_line(&format!("{what}: {e}")));
        if !self.warmed {
            self.warmed = true;
            return Ok(());
        }
        self.round_trips.fetch_add(2, Ordering::Relaxed);
        let held = self
            .client
            .lock(
                self.name.as_str(),
                Some(LockOptions::new().with_lease(self.lease)),
            )
            .await
            .map_err(|e| failed("etcd lock", e))?;
        let entered = self.grants.critical_section(self.index);
        self.client
            .unlock(held.key())
            .await
            .map_err(|e| failed("etcd unlock", e))?;
        entered
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
        self.grants.extras(self.index)
    }
}

impl Drop for EtcdLockClient {
    fn drop(&mut self) {
        // Revoke the lease (and with it any lock key left behind) when a
        // runtime is there to do it; otherwise it expires on its own.
        let mut client = self.client.clone();
        let lease = self.lease;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = client.lease_revoke(lease).await;
            });
        }
    }
}
