//! Handing a sequence over from another id generator and back: a raise-only
//! write that never lowers a sequence (so no id bakery handed out can come
//! again), and closing a sequence so bakery stops reserving from it.

use bakery_core::{Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use serde::Serialize;

use super::row::SequenceRow;
use super::{Sequence, KEY_PREFIX, MAX_CONFLICTS};

/// The node recorded in rows written by [`Sequence::raise`] and
/// [`Sequence::close`].
const HANDOVER_NODE: &str = "handover";

/// What [`Sequence::raise`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Raised {
    /// The sequence did not exist; it now starts at `next`.
    Created {
        /// The first id it will hand out.
        next: u64,
    },
    /// The sequence was below the wanted start and was moved up.
    Raised {
        /// The first unreserved id before.
        from: u64,
        /// The first unreserved id now.
        to: u64,
    },
    /// The sequence was closed ([`Sequence::close`]) and is open again, at
    /// `to` (never lower than it was).
    Reopened {
        /// The first unreserved id before.
        from: u64,
        /// The first unreserved id now.
        to: u64,
    },
    /// The sequence was already at or above the wanted start: nothing was
    /// written.
    AlreadySafe {
        /// Its first unreserved id.
        next: u64,
    },
}

impl Raised {
    /// True if a row was written.
    pub fn changed(&self) -> bool {
        !matches!(self, Raised::AlreadySafe { .. })
    }

    /// The first id the sequence will hand out from now on.
    pub fn next(&self) -> u64 {
        match *self {
            Raised::Created { next } | Raised::AlreadySafe { next } => next,
            Raised::Raised { to, .. } | Raised::Reopened { to, .. } => to,
        }
    }
}

/// What [`Sequence::close`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Closed {
    /// The sequence is closed now; every id bakery reserved is below `next`.
    Closed {
        /// The first id bakery never reserved.
        next: u64,
    },
    /// It was closed already: nothing was written.
    AlreadyClosed {
        /// The first id bakery never reserved.
        next: u64,
    },
    /// No such sequence: bakery never handed out an id of it.
    Missing,
}

impl Sequence {
    /// Make sure sequence `name` hands out nothing below `first`: create it
    /// starting at `first`, or raise it to `first`; never lower it. A closed
    /// sequence is reopened. Conditional writes only, so it is safe while
    /// clients take ids: a concurrent reservation makes the write retry with
    /// the row the store returned, and the result is never below what
    /// anyone reserved.
    ///
    /// This is how ids move over from another generator (`bakery migrate`):
    /// `first` is above everything the old generator can have handed out.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bakery_core::MemoryStore;
    /// use bakery_recipes::sequence::{Raised, Sequence};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = Arc::new(MemoryStore::new());
    /// assert_eq!(Sequence::raise(&*store, "orders", 1_000).await?, Raised::Created { next: 1_000 });
    /// // Never lowered: a second, smaller raise changes nothing.
    /// assert_eq!(Sequence::raise(&*store, "orders", 10).await?, Raised::AlreadySafe { next: 1_000 });
    /// let orders = Sequence::builder(store, "orders").build()?;
    /// assert_eq!(orders.next().await?, 1_000);
    /// # Ok(()) }
    /// ```
    pub async fn raise(store: &dyn VersionedStore, name: &str, first: u64) -> Result<Raised> {
        let key = Key::with_prefix(KEY_PREFIX, name)?;
        let mut current = store.get(&key).await?;
        for _ in 0..MAX_CONFLICTS {
            let (row, expected) = match &current {
                None => (None, None),
                Some(row) => (Some(SequenceRow::decode(row)?), Some(row.version)),
            };
            let (value, raised) = match row {
                None => (
                    SequenceRow {
                        next: first,
                        node: HANDOVER_NODE.into(),
                        block: 0,
                        closed: false,
                    },
                    Raised::Created { next: first },
                ),
                Some(row) if row.next >= first && !row.closed => {
                    return Ok(Raised::AlreadySafe { next: row.next })
                }
                Some(row) => {
                    let to = row.next.max(first);
                    let raised = if row.closed {
                        Raised::Reopened { from: row.next, to }
                    } else {
                        Raised::Raised { from: row.next, to }
                    };
                    (
                        SequenceRow {
                            next: to,
                            node: HANDOVER_NODE.into(),
                            block: 0,
                            closed: false,
                        },
                        raised,
                    )
                }
            };
            match store.put_if_version(&key, expected, value.encode()?).await? {
                PutOutcome::Applied(_) => return Ok(raised),
                // Recreating a row that vanished could repeat the ids it had
                // handed out: refuse, as a reservation does.
                PutOutcome::Conflict(None) if expected.is_some() => {
                    return Err(Error::corrupt(
                        "sequence",
                        format!("sequence row {key} was deleted while being raised; refusing to recreate it"),
                    ))
                }
                PutOutcome::Conflict(now) => current = now,
            }
        }
        Err(gave_up(name))
    }

    /// Stop bakery from reserving ids of sequence `name`: every later
    /// reservation fails with [`ErrorKind::Config`] until [`Sequence::raise`]
    /// reopens it. Returns the first id bakery never reserved, so the old
    /// generator can go on above it (`bakery migrate back`). Clients keep
    /// the ids they reserved before (all below that id).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bakery_core::{ErrorKind, MemoryStore};
    /// use bakery_recipes::sequence::{Closed, Sequence};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let store = Arc::new(MemoryStore::new());
    /// let orders = Sequence::builder(store.clone(), "orders").block_size(1).build()?;
    /// assert_eq!(orders.next().await?, 1);
    /// assert_eq!(Sequence::close(&*store, "orders").await?, Closed::Closed { next: 2 });
    /// let err = orders.next().await.unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Config);
    /// # Ok(()) }
    /// ```
    pub async fn close(store: &dyn VersionedStore, name: &str) -> Result<Closed> {
        let key = Key::with_prefix(KEY_PREFIX, name)?;
        let mut current: Option<Row> = store.get(&key).await?;
        for _ in 0..MAX_CONFLICTS {
            let Some(row) = &current else {
                return Ok(Closed::Missing);
            };
            let mut stored = SequenceRow::decode(row)?;
            if stored.closed {
                return Ok(Closed::AlreadyClosed { next: stored.next });
            }
            let next = stored.next;
            stored.closed = true;
            stored.node = HANDOVER_NODE.into();
            match store
                .put_if_version(&key, Some(row.version), stored.encode()?)
                .await?
            {
                PutOutcome::Applied(_) => return Ok(Closed::Closed { next }),
                PutOutcome::Conflict(now) => current = now,
            }
        }
        Err(gave_up(name))
    }
}

fn gave_up(name: &str) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "sequence",
        format!("sequence {name}: gave up after {MAX_CONFLICTS} conflicting writes"),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bakery_core::MemoryStore;

    use super::*;

    #[tokio::test]
    async fn raise_never_lowers_and_close_reopens() {
        let store = Arc::new(MemoryStore::new());
        let seq = Sequence::builder(store.clone(), "s")
            .block_size(10)
            .build()
            .unwrap();
        assert_eq!(seq.next().await.unwrap(), 1); // reserved 1..11
        assert_eq!(
            Sequence::raise(&*store, "s", 5).await.unwrap(),
            Raised::AlreadySafe { next: 11 }
        );
        assert_eq!(
            Sequence::raise(&*store, "s", 100).await.unwrap(),
            Raised::Raised { from: 11, to: 100 }
        );
        // The block reserved before the raise is still served; the next one
        // starts at the raised value.
        for expected in 2..=10 {
            assert_eq!(seq.next().await.unwrap(), expected);
        }
        assert_eq!(seq.next().await.unwrap(), 100);
        assert_eq!(
            Sequence::close(&*store, "s").await.unwrap(),
            Closed::Closed { next: 110 }
        );
        assert_eq!(
            Sequence::close(&*store, "s").await.unwrap(),
            Closed::AlreadyClosed { next: 110 }
        );
        let state = Sequence::inspect(&*store, "s").await.unwrap().unwrap();
        assert!(state.closed);
        let fresh = Sequence::builder(store.clone(), "s").build().unwrap();
        let err = fresh.next().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(err.message().contains("handed back"), "{err}");
        // Reopening below where it was closed keeps it where it was.
        assert_eq!(
            Sequence::raise(&*store, "s", 50).await.unwrap(),
            Raised::Reopened { from: 110, to: 110 }
        );
        assert_eq!(fresh.next().await.unwrap(), 110);
        assert_eq!(
            Sequence::close(&*store, "nope").await.unwrap(),
            Closed::Missing
        );
    }

    #[tokio::test]
    async fn raise_races_with_reservations_and_loses_no_id() {
        let store = Arc::new(MemoryStore::new());
        let seq = Sequence::builder(store.clone(), "r")
            .block_size(3)
            .prefetch(false)
            .build()
            .unwrap();
        let taker = {
            let seq = seq.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..300 {
                    ids.push(seq.next().await.unwrap());
                }
                ids
            })
        };
        let mut floor = 0;
        for step in 1..=50u64 {
            let raised = Sequence::raise(&*store, "r", step * 20).await.unwrap();
            assert!(raised.next() >= step * 20);
            assert!(raised.next() >= floor, "never lowered");
            floor = raised.next();
            tokio::task::yield_now().await;
        }
        let ids = taker.await.unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "unique and increasing");
    }
}
