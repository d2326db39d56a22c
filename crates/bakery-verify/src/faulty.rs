//! Deliberately broken stores: negative controls that prove the checkers
//! can fail. A checker that passes these has proved nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bakery_core::{
    Bytes, DeleteOutcome, Error, Key, Operation, PutOutcome, Result, Row, StoreLayer, Version,
    VersionedStore,
};

/// How a [`FaultyStore`] breaks (or, for [`Fault::UnknownOutcomes`],
/// stresses) the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `get` returns what the previous `get` of that key returned: a
    /// lagging replica.
    StaleReads,
    /// A put that conflicts is applied anyway at the current version: a
    /// read-then-write without atomicity, the classic lost update.
    LostConflicts,
    /// Conflicts do not carry the current row.
    ConflictWithoutRow,
    /// Not a bug: every third write returns
    /// [`ErrorKind::Unknown`](bakery_core::ErrorKind::Unknown),
    /// alternately after applying it and without applying it. A correct
    /// checker must still accept the history.
    UnknownOutcomes,
}

/// Wraps a store and injects one [`Fault`].
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{Key, MemoryStore, PutOutcome, VersionedStore};
/// use bakery_verify::faulty::{Fault, FaultyStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = FaultyStore::new(Arc::new(MemoryStore::new()), Fault::LostConflicts);
/// let key = Key::new("k")?;
/// let _ = store.put_if_version(&key, None, "a".into()).await?;
/// // A stale expected version "applies": an update is lost.
/// assert!(store.put_if_version(&key, None, "b".into()).await?.is_applied());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn VersionedStore>,
    fault: Fault,
    last_reads: Mutex<HashMap<Key, Option<Row>>>,
    writes: AtomicU64,
}

impl FaultyStore {
    /// `inner`, broken by `fault`.
    pub fn new(inner: Arc<dyn VersionedStore>, fault: Fault) -> Self {
        FaultyStore {
            inner,
            fault,
            last_reads: Mutex::new(HashMap::new()),
            writes: AtomicU64::new(0),
        }
    }

    /// For [`Fault::UnknownOutcomes`]: `Some(applies)` when this write's
    /// reply is to be lost.
    fn lose_reply(&self) -> Option<bool> {
        if self.fault != Fault::UnknownOutcomes {
            return None;
        }
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        (n % 3 == 2).then_some(n.is_multiple_of(2))
    }
}

fn lost(op: Operation) -> Error {
    Error::in_doubt("faulty", op, "reply dropped on purpose")
}

#[async_trait]
impl StoreLayer for FaultyStore {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let now = self.inner.get(key).await?;
        if self.fault != Fault::StaleReads {
            return Ok(now);
        }
        let mut reads = self.last_reads.lock().unwrap_or_else(|p| p.into_inner());
        Ok(reads.insert(key.clone(), now.clone()).unwrap_or(now))
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        if let Some(applies) = self.lose_reply() {
            if applies {
                let _ = self.inner.put_if_version(key, expected, value).await?;
            }
            return Err(lost(Operation::Put));
        }
        let mut outcome = self
            .inner
            .put_if_version(key, expected, value.clone())
            .await?;
        match (self.fault, &outcome) {
            (Fault::ConflictWithoutRow, PutOutcome::Conflict(_)) => {
                outcome = PutOutcome::Conflict(None);
            }
            (Fault::LostConflicts, _) => {
                // Blindly write over whatever is there (bounded retries).
                for _ in 0..10 {
                    let PutOutcome::Conflict(current) = outcome else {
                        break;
                    };
                    let now = current.map(|row| row.version);
                    outcome = self.inner.put_if_version(key, now, value.clone()).await?;
                }
            }
            _ => {}
        }
        Ok(outcome)
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        if let Some(applies) = self.lose_reply() {
            if applies {
                let _ = self.inner.delete_if_version(key, expected).await?;
            }
            return Err(lost(Operation::Delete));
        }
        match self.inner.delete_if_version(key, expected).await? {
            DeleteOutcome::Conflict(_) if self.fault == Fault::ConflictWithoutRow => {
                Ok(DeleteOutcome::Conflict(None))
            }
            outcome => Ok(outcome),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linearizability::{check_operations, Verdict};
    use crate::workload::{run_cas, Config};
    use bakery_core::MemoryStore;

    fn config(seed: u64) -> Config {
        Config {
            clients: 4,
            keys: 2,
            cas_ops: 150,
            seed,
            ..Config::default()
        }
    }

    async fn verdict(store: Arc<dyn VersionedStore>, seed: u64) -> (Verdict, String, usize) {
        let run = run_cas(store, &config(seed)).await.unwrap();
        let report = check_operations(&run.history.operations(), 1_000_000);
        (report.verdict(), report.to_string(), report.unknown())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_correct_store_is_linearizable() {
        for seed in 1..=3 {
            let (verdict, report, _) = verdict(Arc::new(MemoryStore::new()), seed).await;
            assert_eq!(verdict, Verdict::Linearizable, "{report}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lost_replies_are_not_mistaken_for_bugs() {
        let inner = Arc::new(MemoryStore::new());
        let store = Arc::new(FaultyStore::new(inner, Fault::UnknownOutcomes));
        let (verdict, report, unknown) = verdict(store, 7).await;
        assert_eq!(verdict, Verdict::Linearizable, "{report}");
        assert!(unknown > 0, "{report}");
    }

    /// Each broken store is rejected within a few seeded runs.
    #[tokio::test]
    async fn every_broken_store_is_rejected() {
        for fault in [
            Fault::StaleReads,
            Fault::LostConflicts,
            Fault::ConflictWithoutRow,
        ] {
            let mut verdicts = Vec::new();
            for seed in 1..=5 {
                let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new()), fault));
                let (verdict, report, _) = verdict(store, seed).await;
                verdicts.push(verdict);
                if verdict == Verdict::NotLinearizable {
                    assert!(report.contains("register state there") || report.contains("saw"));
                    break;
                }
            }
            assert_eq!(
                verdicts.last(),
                Some(&Verdict::NotLinearizable),
                "{fault:?}: {verdicts:?}"
            );
        }
    }
}
