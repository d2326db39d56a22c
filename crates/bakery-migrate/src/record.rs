//! The migration record: one row per migrated sequence beside the sequence
//! itself (`migrate/NAME`), keeping what `back` needs to undo the fence —
//! the source's `MAXVALUE` before bakery fenced it.

use bakery_core::{Bytes, Error, Key, PutOutcome, Result, VersionedStore};
use serde::{Deserialize, Serialize};

use crate::BACKEND;

/// The key prefix of migration records.
const KEY_PREFIX: &str = "migrate";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Record {
    /// The generator's qualified source name.
    pub source: String,
    /// Its maximum before the fence (a string: it may not fit i64).
    pub original_max: String,
}

impl Record {
    pub(crate) fn original_max(&self) -> Result<i128> {
        self.original_max.parse().map_err(|_| {
            Error::corrupt(
                BACKEND,
                format!(
                    "migration record of {}: original_max {:?} is not a number",
                    self.source, self.original_max
                ),
            )
        })
    }
}

fn key(target: &str) -> Result<Key> {
    Key::with_prefix(KEY_PREFIX, target)
}

/// The record of `target`, if any.
pub(crate) async fn read(store: &dyn VersionedStore, target: &str) -> Result<Option<Record>> {
    let Some(row) = store.get(&key(target)?).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&row.value).map(Some).map_err(|e| {
        Error::corrupt(
            BACKEND,
            format!("row {} is not a migration record: {e}", row.key),
        )
    })
}

/// Write `record` for `target` unless one exists (the first one holds the
/// source's own maximum; later runs see the fence instead). Returns the
/// record in the store.
pub(crate) async fn keep_first(
    store: &dyn VersionedStore,
    target: &str,
    record: Record,
) -> Result<Record> {
    let value = serde_json::to_vec(&record)
        .map_err(|e| Error::new(bakery_core::ErrorKind::Internal, BACKEND, e.to_string()))?;
    match store
        .put_if_version(&key(target)?, None, Bytes::from(value))
        .await?
    {
        PutOutcome::Applied(_) => Ok(record),
        PutOutcome::Conflict(_) => read(store, target).await?.ok_or_else(|| {
            Error::new(
                bakery_core::ErrorKind::Unavailable,
                BACKEND,
                format!("migration record of {target} vanished while being written; run again"),
            )
        }),
    }
}

/// Remove the record of `target` (after the source took over again).
pub(crate) async fn remove(store: &dyn VersionedStore, target: &str) -> Result<()> {
    let key = key(target)?;
    if let Some(row) = store.get(&key).await? {
        // Gone already (another run removed it) is as good as removed.
        let _ = store.delete_if_version(&key, row.version).await?;
    }
    Ok(())
}
