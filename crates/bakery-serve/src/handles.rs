//! One recipe handle per name, kept between requests: a sequence handle
//! holds the block it reserved, a snowflake handle its leased worker id, so
//! making one per request would waste a block or a lease per request.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bakery::{Sequence, Snowflake, VersionedStore};

use crate::error::{ApiError, Kind};

/// Handles by name, at most `max` of them (oldest dropped first), made by
/// `build` on first use.
pub(crate) struct Handles<T> {
    store: Arc<dyn VersionedStore>,
    max: usize,
    build: fn(Arc<dyn VersionedStore>, &str) -> bakery::Result<T>,
    table: Mutex<Table<T>>,
}

struct Table<T> {
    by_name: HashMap<String, T>,
    created: VecDeque<String>,
}

/// The sequences an instance serves.
pub(crate) type Sequences = Handles<Sequence>;

/// The snowflakes an instance serves, each on a worker id of its own.
pub(crate) type Snowflakes = Handles<Snowflake>;

impl Sequences {
    pub(crate) fn sequences(store: Arc<dyn VersionedStore>, max: usize) -> Sequences {
        Handles::new(store, max, |store, name| {
            Sequence::builder(store, name).build()
        })
    }
}

impl Snowflakes {
    pub(crate) fn snowflakes(store: Arc<dyn VersionedStore>, max: usize) -> Snowflakes {
        Handles::new(store, max, |store, name| {
            Snowflake::builder(store, name).build()
        })
    }
}

impl<T: Clone> Handles<T> {
    fn new(
        store: Arc<dyn VersionedStore>,
        max: usize,
        build: fn(Arc<dyn VersionedStore>, &str) -> bakery::Result<T>,
    ) -> Handles<T> {
        Handles {
            store,
            max,
            build,
            table: Mutex::new(Table {
                by_name: HashMap::new(),
                created: VecDeque::new(),
            }),
        }
    }

    pub(crate) fn store(&self) -> &Arc<dyn VersionedStore> {
        &self.store
    }

    /// The names this instance serves now, oldest first.
    pub(crate) fn names(&self) -> Vec<String> {
        self.table
            .lock()
            .map(|table| table.created.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The handle of `name`, made on first use; an invalid name (checked by
    /// the builder, so only on a miss) is a 400 naming the rule it breaks.
    pub(crate) fn get(&self, name: &str) -> Result<T, ApiError> {
        let mut table = self
            .table
            .lock()
            .map_err(|_| ApiError::new(Kind::Internal, "the handle table was poisoned"))?;
        if let Some(handle) = table.by_name.get(name) {
            return Ok(handle.clone());
        }
        let handle = (self.build)(self.store.clone(), name)?;
        while table.by_name.len() >= self.max {
            let Some(oldest) = table.created.pop_front() else {
                break;
            };
            table.by_name.remove(&oldest);
        }
        table.by_name.insert(name.to_owned(), handle.clone());
        table.created.push_back(name.to_owned());
        Ok(handle)
    }
}
