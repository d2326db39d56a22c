//! `tokio::sync::Mutex`: the lock a user of the in-process `memory://`
//! store would take instead. Measured beside bakery's lock on that store,
//! it shows what the runtime alone costs: its hand-off is a task wake-up on
//! the same tokio runtime, the floor under any in-process lock's hand-off.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::BenchError;
use crate::model::{CellSpec, OpError, Peer, PreparedCell, RoundTrips};
use crate::workloads::lock::{native_lock_cell, NativeLock};

/// One `tokio::sync::Mutex` per cell, shared by its clients: FIFO waiters,
/// woken one at a time by the guard's drop. No lease, no fencing, no
/// persistence: it lives in this process only.
#[derive(Debug, Clone, Default)]
pub struct TokioMutex;

impl TokioMutex {
    /// The peer (it needs no server).
    pub fn new() -> Self {
        TokioMutex
    }
}

#[async_trait]
impl Peer for TokioMutex {
    fn workload(&self) -> &'static str {
        "lock"
    }

    fn label(&self) -> String {
        "tokio::sync::Mutex".to_string()
    }

    async fn setup(&self, cell: &CellSpec, sent: RoundTrips) -> Result<PreparedCell, BenchError> {
        let mutex = Arc::new(Mutex::new(()));
        let clients = (0..cell.clients)
            .map(|_| SharedMutex(mutex.clone()))
            .collect();
        Ok(native_lock_cell(clients, &sent))
    }
}

struct SharedMutex(Arc<Mutex<()>>);

#[async_trait]
impl NativeLock for SharedMutex {
    type Held = OwnedMutexGuard<()>;

    async fn lock(&mut self) -> Result<OwnedMutexGuard<()>, OpError> {
        Ok(self.0.clone().lock_owned().await)
    }

    async fn unlock(&mut self, held: OwnedMutexGuard<()>) -> Result<(), OpError> {
        drop(held);
        Ok(())
    }
}
