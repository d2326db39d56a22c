//! etcd through the raw driver: its own lock (the v3 lock service), what
//! an etcd user already has, and a transaction on a key's mod revision (the
//! raw counterpart of bakery's `put_if_version`).

use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use bakery::backends::etcd::etcd_client::{
    Client, Compare, CompareOp, Error, LockOptions, LockResponse, Txn, TxnOp,
};
use bakery::backends::etcd::EtcdConfig;

use super::driver::{
    connected, lock_connections, op_error, peer_error, server_peer, within_connect_timeout,
};
use crate::error::BenchError;
use crate::model::{CellSpec, OpError, PreparedCell, RoundTrips};
use crate::workloads::lock::NativeLock;

/// The lease every client's lock ownership is attached to; longer than any
/// cell, so it never expires mid-run (etcd's lock needs a lease).
const LEASE_TTL_SECONDS: i64 = 600;

/// One client of the cluster of a bakery etcd `uri` (its endpoints; bakery's
/// options are not the driver's).
pub async fn connect(uri: &str) -> Result<Client, String> {
    let config = EtcdConfig::from_uri(uri).map_err(|e| format!("bad URI: {e}"))?;
    within_connect_timeout(Client::connect(config.endpoints(), None)).await
}

/// A conditional update through the raw driver: one key of its own,
/// written by a transaction that compares the key's mod revision (the
/// compare bakery's store makes, without bakery). Chained by revision:
/// each update expects the revision the previous one produced.
#[derive(Debug)]
pub struct RawCas {
    key: String,
    revision: AtomicI64,
}

impl RawCas {
    /// Create the key `key`.
    pub async fn create(client: &Client, key: &str) -> Result<RawCas, Error> {
        let first = client.kv_client().put(key, "v", None).await?;
        Ok(RawCas {
            key: key.to_string(),
            revision: AtomicI64::new(first.header().map_or(0, |h| h.revision())),
        })
    }

    /// One conditional update to `value`: `false` if the key was not at the
    /// expected revision (someone else wrote it).
    pub async fn update(&self, client: &Client, value: &[u8]) -> Result<bool, Error> {
        let expected = self.revision.load(Ordering::Relaxed);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                self.key.as_str(),
                CompareOp::Equal,
                expected,
            )])
            .and_then([TxnOp::put(self.key.as_str(), value, None)])
            .or_else([TxnOp::get(self.key.as_str(), None)]);
        let response = client.kv_client().txn(txn).await?;
        if !response.succeeded() {
            return Ok(false);
        }
        let revision = response.header().map_or(0, |h| h.revision());
        self.revision.store(revision, Ordering::Relaxed);
        Ok(true)
    }

    /// Delete the key.
    pub async fn delete(&self, client: &Client) -> Result<(), Error> {
        client
            .kv_client()
            .delete(self.key.as_str(), None)
            .await
            .map(|_| ())
    }
}

server_peer! {
    /// `Lock(name, lease)` + `Unlock(key)`, one connection and one lease per
    /// client: etcd orders waiters by the revision of their key (FIFO) and
    /// wakes the next one with a watch. Two round trips per acquisition.
    pub struct EtcdLock;
    /// The peer on the cluster of `uri` (a bakery etcd URI).
    fn new;
    workload: "lock",
    label: "etcd Lock/Unlock",
}

impl EtcdLock {
    /// A cell's connections, each with a lease of its own.
    async fn open_cell(
        &self,
        cell: &CellSpec,
        sent: RoundTrips,
    ) -> Result<PreparedCell, BenchError> {
        let name = format!("bakery-bench-lock/{}", cell.tag);
        lock_connections(cell, &sent, || async {
            let mut client = connected("etcd", self, connect(&self.uri)).await?;
            let lease = client
                .lease_grant(LEASE_TTL_SECONDS, None)
                .await
                .map_err(|e| peer_error("etcd", self, "cannot grant a lease", e))?
                .id();
            Ok(EtcdLockConnection {
                client,
                lease,
                name: name.clone(),
            })
        })
        .await
    }
}

struct EtcdLockConnection {
    client: Client,
    lease: i64,
    name: String,
}

#[async_trait]
impl NativeLock for EtcdLockConnection {
    type Held = LockResponse;

    async fn lock(&mut self) -> Result<LockResponse, OpError> {
        self.client
            .lock(
                self.name.as_str(),
                Some(LockOptions::new().with_lease(self.lease)),
            )
            .await
            .map_err(|e| op_error("etcd lock", e))
    }

    async fn unlock(&mut self, held: LockResponse) -> Result<(), OpError> {
        self.client
            .unlock(held.key())
            .await
            .map_err(|e| op_error("etcd unlock", e))?;
        Ok(())
    }
}

impl Drop for EtcdLockConnection {
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
