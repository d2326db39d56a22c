//! What the workloads' cells share: the error a failed setup reports,
//! checking what a cell wrote, and removing it.

use std::sync::Arc;

use async_trait::async_trait;
use bakery::{DeleteOutcome, Key, VersionedStore};

use crate::error::BenchError;
use crate::model::{CellStore, Finish};

/// The error of `workload` failing to set up a cell on `store`.
pub(crate) fn prepare_error<'a>(
    workload: &'static str,
    store: &'a CellStore,
) -> impl Fn(bakery::Error) -> BenchError + Copy + 'a {
    move |source| BenchError::Prepare {
        workload,
        target: store.raw.backend().to_string(),
        source,
    }
}

/// Delete `key` if present, retrying a few times if it changes meanwhile.
/// Cleanup is best effort: a row left behind is harmless garbage under the
/// `bench/` prefix, so failures are not reported.
pub(crate) async fn delete_quietly(store: &dyn VersionedStore, key: &Key) {
    for _ in 0..3 {
        let Ok(Some(row)) = store.get(key).await else {
            return;
        };
        match store.delete_if_version(key, row.version).await {
            Ok(DeleteOutcome::Conflict(_)) => continue,
            _ => return,
        }
    }
}

/// The finish of a cell of one recipe row: deletes the row once every
/// client is done, then reports what `problems` finds (the overlapping
/// grants of the cell's log).
pub(crate) struct DeleteRowFinish {
    pub(crate) store: Arc<dyn VersionedStore>,
    pub(crate) key: Key,
    pub(crate) problems: Box<dyn FnOnce() -> Vec<String> + Send>,
}

#[async_trait]
impl Finish for DeleteRowFinish {
    async fn finish(self: Box<Self>, _had_errors: bool) -> Vec<String> {
        delete_quietly(&*self.store, &self.key).await;
        (self.problems)()
    }
}

/// Whether `stored` (what the store holds after a cell) disagrees with
/// `acknowledged` (what its clients were told succeeded). A failed call may
/// still have applied (its outcome is unknown), so after errors the store
/// may hold more than was acknowledged, never less; without errors the two
/// must be equal.
pub(crate) fn counts_disagree(stored: u64, acknowledged: u64, had_errors: bool) -> bool {
    if had_errors {
        stored < acknowledged
    } else {
        stored != acknowledged
    }
}

/// The counters a cell's finish reads back, added up, and why those that
/// could not be read could not.
#[derive(Default)]
pub(crate) struct Tally {
    stored: u64,
    problems: Vec<String>,
}

impl Tally {
    /// Add one counter read back (`None`: absent, nothing to add), or
    /// keep why it could not be read.
    pub(crate) fn add(&mut self, read: Result<Option<u64>, String>) {
        match read {
            Ok(count) => self.stored += count.unwrap_or(0),
            Err(problem) => self.problems.push(problem),
        }
    }

    /// The cell's problems: the failed reads; or, when every counter was
    /// read, the total against the `acknowledged` count if they disagree
    /// ([`counts_disagree`]), said by `disagreement(stored, acknowledged)`.
    pub(crate) fn problems(
        mut self,
        acknowledged: u64,
        had_errors: bool,
        disagreement: impl FnOnce(u64, u64) -> String,
    ) -> Vec<String> {
        if self.problems.is_empty() && counts_disagree(self.stored, acknowledged, had_errors) {
            self.problems.push(disagreement(self.stored, acknowledged));
        }
        self.problems
    }
}

#[cfg(test)]
mod tests {
    use super::counts_disagree;

    #[test]
    fn after_errors_the_store_may_hold_more_never_less() {
        assert!(!counts_disagree(5, 5, false));
        assert!(counts_disagree(6, 5, false));
        assert!(counts_disagree(4, 5, false));
        assert!(!counts_disagree(6, 5, true));
        assert!(counts_disagree(4, 5, true));
    }
}
