//! What this process shares per lock row: one dispatcher of wake-ups and
//! one writer, found by (store, row, notifications on) in a process-wide
//! map that holds them weakly (they live while someone uses them).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use bakery_core::{Key, VersionedStore};

/// Which row: the store (by address: the shared value keeps the store
/// alive, so the address is not reused while the entry lives), the key,
/// and whether notifications are on (a polling-only lock gets its own).
pub(crate) type Slot = (usize, Key, bool);

pub(crate) fn slot(store: &Arc<dyn VersionedStore>, key: &Key, notifications: bool) -> Slot {
    let address = Arc::as_ptr(store).cast::<()>() as usize;
    (address, key.clone(), notifications)
}

/// A process-wide map of values per lock row.
pub(crate) struct PerRow<T> {
    map: Mutex<HashMap<Slot, Weak<T>>>,
}

impl<T> PerRow<T> {
    pub(crate) fn new() -> Self {
        PerRow {
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The live value for `slot`, if any.
    pub(crate) fn get(&self, slot: &Slot) -> Option<Arc<T>> {
        let map = self
            .map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.get(slot).and_then(Weak::upgrade)
    }

    /// The live value for `slot`, or a new one from `create`.
    pub(crate) fn get_or_create(&self, slot: Slot, create: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(value) = map.get(&slot).and_then(Weak::upgrade) {
            return value;
        }
        map.retain(|_, value| value.strong_count() > 0);
        let value = create();
        map.insert(slot, Arc::downgrade(&value));
        value
    }
}
