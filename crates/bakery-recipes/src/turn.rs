//! One process's writes of one row, one at a time, and the row the last of
//! them left: shared by the handles of the semaphore and the rwlock.
//!
//! Clients of one process that wrote at once would mostly conflict with
//! each other (a join after every release, a storm of joins when many start
//! together), each conflict a wasted round trip. In turn, each decides on
//! the newest row the process knows, and a write that a write of this
//! process already outdated is refused locally with the newer row, as the
//! store would refuse it.

use std::sync::{Arc, LazyLock};

use bakery_core::{Key, Row, VersionedStore};
use tokio::sync::{Mutex, MutexGuard};

use crate::per_process::{slot, PerRow};

static TURNS: LazyLock<PerRow<WriteTurn>> = LazyLock::new(PerRow::new);

/// This process's turn to write one row.
#[derive(Default)]
pub(crate) struct WriteTurn {
    newest: Mutex<Option<Row>>,
}

impl WriteTurn {
    /// The turn of `key` in `store`, shared by every handle of the process.
    pub(crate) fn for_row(store: &Arc<dyn VersionedStore>, key: &Key) -> Arc<WriteTurn> {
        TURNS.get_or_create(slot(store, key, true), Arc::default)
    }

    /// Wait for the turn (first come, first served). The guard holds the
    /// row the last write here left; the caller stores the row its own
    /// write left (or the store returned on a conflict) before releasing.
    pub(crate) async fn take(&self) -> MutexGuard<'_, Option<Row>> {
        self.newest.lock().await
    }
}

/// The newer of `hint` and `known` (versions only grow: a deleted row keeps
/// its last one).
pub(crate) fn newer(hint: Option<Row>, known: Option<&Row>) -> Option<Row> {
    match (hint, known) {
        (Some(hint), Some(known)) if known.version > hint.version => Some(known.clone()),
        (None, Some(known)) => Some(known.clone()),
        (hint, _) => hint,
    }
}

/// The newer row the turn knows, if it outdates `expected`: a write
/// expecting `expected` would be refused by the store.
pub(crate) fn outdated(known: Option<&Row>, expected: Option<bakery_core::Version>) -> Option<Row> {
    known
        .filter(|known| Some(known.version) > expected)
        .cloned()
}
