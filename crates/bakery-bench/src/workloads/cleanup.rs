//! Removing what a cell wrote.

use bakery::{DeleteOutcome, Key, VersionedStore};

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
