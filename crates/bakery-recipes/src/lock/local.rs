//! What this process shares per lock row: one dispatcher of wake-ups and
//! one writer, found by (store, row, notifications on).

use std::sync::Arc;

use bakery_core::{Key, VersionedStore};

use crate::per_process::{store_address, PerProcess};

/// Which row: the store, the key, and whether notifications are on (a
/// polling-only lock gets its own).
pub(crate) type Slot = (usize, Key, bool);

pub(crate) fn slot(store: &Arc<dyn VersionedStore>, key: &Key, notifications: bool) -> Slot {
    (store_address(store), key.clone(), notifications)
}

/// A process-wide map of values per lock row.
pub(crate) type PerRow<T> = PerProcess<Slot, T>;
