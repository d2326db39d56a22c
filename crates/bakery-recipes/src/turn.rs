//! One process's writes of one row, one at a time, and the row the last of
//! them left: shared by the handles of the semaphore and the rwlock, with
//! the rest of what their rows have in common ([`TurnRow`]).
//!
//! Clients of one process that wrote at once would mostly conflict with
//! each other (a join after every release, a storm of joins when many start
//! together), each conflict a wasted round trip. In turn, each decides on
//! the newest row the process knows, and a write that a write of this
//! process already outdated is refused locally with the newer row, as the
//! store would refuse it.

use std::sync::{Arc, LazyLock};

use bakery_core::{Bytes, Key, PutOutcome, Result, Row, Version, VersionedStore};
use tokio::sync::{Mutex, MutexGuard};
use tokio::time::Instant;

use crate::arrival::{Arrival, Arrivals};
use crate::dispatch;
use crate::per_process::{slot, PerRow};

static TURNS: LazyLock<PerRow<WriteTurn>> = LazyLock::new(PerRow::new);

/// This process's turn to write one row.
#[derive(Default)]
pub(crate) struct WriteTurn {
    newest: Mutex<Option<Row>>,
    /// The acquisitions of this process that have not taken their first
    /// turn yet: they take it in the order they were called.
    arrivals: Arc<Arrivals>,
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
pub(crate) fn outdated(known: Option<&Row>, expected: Option<Version>) -> Option<Row> {
    known
        .filter(|known| Some(known.version) > expected)
        .cloned()
}

/// The result of [`TurnRow::update`].
pub(crate) enum Updated<T> {
    /// The change was written (`row`, by a call sent at `sent`); `granted`
    /// are the waiters it granted.
    Applied { granted: T, row: Row, sent: Instant },
    /// Nothing to change in `row`: the newest row known here, or the
    /// current one the store returned.
    Unchanged { row: Option<Row> },
}

/// One handle's view of a queue recipe's row: the store, the newest row
/// this handle saw, and the process's turn to write it.
pub(crate) struct TurnRow {
    store: Arc<dyn VersionedStore>,
    key: Key,
    /// The store can notify: writes that grant tell the other processes.
    watching: bool,
    /// The newest row this handle saw: where a request starts instead of
    /// reading (a stale row only costs a conflict, which returns the
    /// current one).
    newest: std::sync::Mutex<Option<Row>>,
    turn: Arc<WriteTurn>,
}

impl TurnRow {
    pub(crate) fn new(store: &Arc<dyn VersionedStore>, key: &Key) -> TurnRow {
        TurnRow {
            store: store.clone(),
            key: key.clone(),
            watching: store
                .capabilities()
                .contains(bakery_core::Capabilities::WATCH),
            newest: std::sync::Mutex::new(None),
            turn: WriteTurn::for_row(store, key),
        }
    }

    /// A new acquisition of this process: its first [`Self::update`] takes
    /// the turn after those of the acquisitions called before it.
    pub(crate) fn arrive(&self) -> Arrival {
        self.turn.arrivals.arrive()
    }

    /// The newest row this handle saw (no store call).
    pub(crate) fn newest(&self) -> Option<Row> {
        self.newest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Note a row the store returned; an older one than known is ignored.
    fn remember(&self, row: Option<&Row>) {
        let mut newest = self
            .newest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match row {
            Some(row) if newest.as_ref().is_none_or(|n| n.version < row.version) => {
                *newest = Some(row.clone());
            }
            Some(_) => {}
            None => *newest = None,
        }
    }

    /// Read the row from the store.
    pub(crate) async fn read(&self) -> Result<Option<Row>> {
        let row = self.store.get(&self.key).await?;
        self.remember(row.as_ref());
        Ok(row)
    }

    /// Write `value` if the row is still `current`, in this process's turn.
    pub(crate) async fn put(&self, current: Option<&Row>, value: Bytes) -> Result<PutOutcome> {
        let expected = current.map(|row| row.version);
        let mut last = self.turn.take().await;
        if let Some(known) = outdated(last.as_ref(), expected) {
            // The store would refuse this write; the row it would return is
            // at least as new as this one, returned after our call began.
            drop(last);
            self.remember(Some(&known));
            return Ok(PutOutcome::Conflict(Some(known)));
        }
        let outcome = self
            .store
            .put_if_version(&self.key, expected, value)
            .await?;
        *last = match &outcome {
            PutOutcome::Applied(row) => Some(row.clone()),
            PutOutcome::Conflict(now) => now.clone(),
        };
        drop(last);
        match &outcome {
            PutOutcome::Applied(row) => {
                dispatch::wrote(&self.store, &self.key, row);
                self.remember(Some(row));
            }
            PutOutcome::Conflict(now) => self.remember(now.as_ref()),
        }
        Ok(outcome)
    }

    /// Apply `change` to the row's state in this process's turn, starting
    /// from `current` (a hint) or the row the last write here left,
    /// whichever is newer, and re-applying it to the row a conflict
    /// returns. `change` returns `None` when there is nothing to write.
    /// Deciding in the turn keeps the order of requests: a client whose row
    /// a write of this process outdated does not lose its turn to the next
    /// one (a releaser re-joining would otherwise overtake every waiter
    /// still joining). An acquisition's first update passes its `arrival`:
    /// it takes the turn after the process's earlier acquisitions took
    /// theirs.
    pub(crate) async fn update<S, T>(
        &self,
        current: Option<Row>,
        mut arrival: Option<&mut Arrival>,
        decode: impl Fn(Option<&Row>) -> Result<S>,
        encode: impl Fn(&S) -> Result<Bytes>,
        mut change: impl FnMut(&mut S) -> Result<Option<T>>,
    ) -> Result<Updated<T>> {
        if let Some(arrival) = arrival.as_deref_mut() {
            arrival.earlier_gone().await;
        }
        let mut last = self.turn.take().await;
        let mut current = newer(current, last.as_ref());
        loop {
            let mut state = decode(current.as_ref())?;
            let Some(granted) = change(&mut state)? else {
                // Nothing placed (a waiter that must first listen for its
                // grant): the later acquisitions keep waiting for it.
                return Ok(Updated::Unchanged { row: current });
            };
            // Placed, in the turn: the later acquisitions may queue for
            // the turn behind it.
            if let Some(arrival) = arrival.take() {
                arrival.depart();
            }
            let expected = current.as_ref().map(|row| row.version);
            let sent = Instant::now();
            let outcome = self
                .store
                .put_if_version(&self.key, expected, encode(&state)?)
                .await?;
            match outcome {
                PutOutcome::Applied(row) => {
                    *last = Some(row.clone());
                    dispatch::wrote(&self.store, &self.key, &row);
                    self.remember(Some(&row));
                    return Ok(Updated::Applied { granted, row, sent });
                }
                PutOutcome::Conflict(now) => {
                    last.clone_from(&now);
                    self.remember(now.as_ref());
                    current = now;
                }
            }
        }
    }

    /// Tell the waiters a write (`row`) granted: directly those waiting in
    /// this process, through the store (where it can notify) the others. A
    /// failed notify only costs latency (waiters read at least every
    /// lease/4).
    pub(crate) async fn announce(&self, granted: &[String], row: &Row) {
        if granted.is_empty()
            || dispatch::deliver(
                &self.store,
                &self.key,
                granted.iter().map(String::as_str),
                row,
            )
            || !self.watching
        {
            return;
        }
        if let Err(err) = self.store.notify(&self.key).await {
            tracing::debug!(row = %self.key.as_str(), error = %err, "notify failed; waiters will read");
        }
    }
}
