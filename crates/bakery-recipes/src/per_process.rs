//! Values the handles of one process share: a process-wide map from a slot
//! (which store, which row, which settings) to a value held weakly, so the
//! value lives while some handle uses it and the next handle built after
//! that starts afresh.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};

use bakery_core::{Key, VersionedStore};

/// The store's identity: its address. A shared value keeps its store alive,
/// so the address is not reused while the entry lives.
pub(crate) fn store_address(store: &Arc<dyn VersionedStore>) -> usize {
    Arc::as_ptr(store).cast::<()>() as usize
}

/// A process-wide map of values per slot `S`.
pub(crate) struct PerProcess<S, T> {
    map: Mutex<HashMap<S, Weak<T>>>,
}

impl<S: Hash + Eq, T> PerProcess<S, T> {
    pub(crate) fn new() -> Self {
        PerProcess {
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The live value for `slot`, if any.
    pub(crate) fn get(&self, slot: &S) -> Option<Arc<T>> {
        self.locked().get(slot).and_then(Weak::upgrade)
    }

    /// The live value for `slot`, or a new one from `create`.
    pub(crate) fn get_or_create(&self, slot: S, create: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let mut map = self.locked();
        if let Some(value) = map.get(&slot).and_then(Weak::upgrade) {
            return value;
        }
        map.retain(|_, value| value.strong_count() > 0);
        let value = create();
        map.insert(slot, Arc::downgrade(&value));
        value
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<S, Weak<T>>> {
        // The map is consistent after any panic (one insert or retain).
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One row of one store, as a recipe sees it: the store (by address), the
/// key, and whether it listens to the store's notifications (a handle that
/// polls must not share a listener that subscribes).
pub(crate) type Slot = (usize, Key, bool);

/// The slot of `key` in `store`.
pub(crate) fn slot(store: &Arc<dyn VersionedStore>, key: &Key, notifications: bool) -> Slot {
    (store_address(store), key.clone(), notifications)
}

/// One value per process and row.
pub(crate) type PerRow<T> = PerProcess<Slot, T>;
