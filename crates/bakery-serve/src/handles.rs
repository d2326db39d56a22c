//! One sequence handle per name, kept between requests: a handle holds the
//! block it reserved, so dropping it after each request would waste a block
//! per request.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bakery::{Sequence, VersionedStore};

use crate::error::{ApiError, Kind};

/// Handles by name, at most `max` of them (oldest dropped first).
pub(crate) struct Sequences {
    store: Arc<dyn VersionedStore>,
    max: usize,
    handles: Mutex<Handles>,
}

#[derive(Default)]
struct Handles {
    by_name: HashMap<String, Sequence>,
    created: VecDeque<String>,
}

impl Sequences {
    pub(crate) fn new(store: Arc<dyn VersionedStore>, max: usize) -> Sequences {
        Sequences {
            store,
            max,
            handles: Mutex::new(Handles::default()),
        }
    }

    pub(crate) fn store(&self) -> &Arc<dyn VersionedStore> {
        &self.store
    }

    /// The names of the sequences this instance serves now, oldest first.
    pub(crate) fn names(&self) -> Vec<String> {
        self.handles
            .lock()
            .map(|handles| handles.created.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The handle of `name`, made on first use; an invalid name (checked by
    /// the builder, so only on a miss) is a 400 naming the rule it breaks.
    pub(crate) fn get(&self, name: &str) -> Result<Sequence, ApiError> {
        let mut handles = self
            .handles
            .lock()
            .map_err(|_| ApiError::new(Kind::Internal, "the sequence table was poisoned"))?;
        if let Some(sequence) = handles.by_name.get(name) {
            return Ok(sequence.clone());
        }
        let sequence = Sequence::builder(self.store.clone(), name).build()?;
        while handles.by_name.len() >= self.max {
            let Some(oldest) = handles.created.pop_front() else {
                break;
            };
            handles.by_name.remove(&oldest);
        }
        handles.by_name.insert(name.to_owned(), sequence.clone());
        handles.created.push_back(name.to_owned());
        Ok(sequence)
    }
}
