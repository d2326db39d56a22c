//! What the workloads' cells share: the error a failed setup reports, and
//! removing what a cell wrote.

use bakery::{DeleteOutcome, Key, VersionedStore};

use crate::error::BenchError;
use crate::model::CellStore;

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
