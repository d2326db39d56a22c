//! The semaphore's whole state, in one row: the last fencing token, the
//! number of permits, the holders and the FIFO queue. Every transition is a
//! pure function on this value; the caller writes the result with one
//! `put_if_version`.

use std::collections::VecDeque;

use bakery_core::{Bytes, Error, Result, Row};
use serde::{Deserialize, Serialize};

use crate::turn::compact::{turn_waiter, Compact};
use crate::turn::{turn_holder, turn_parts, TurnState};

/// Name used in this recipe's errors.
pub(crate) const RECIPE: &str = "semaphore";

/// The stored state of one semaphore, as
/// [`Semaphore::inspect`](super::Semaphore::inspect) returns it.
///
/// Invariants kept by every transition (and checked when a row is read):
/// at most `permits` holders; nobody queues while a permit is free (a
/// release or an eviction grants freed permits to the head of the queue in
/// the same write); no request id appears twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SemaphoreState {
    /// The fencing token of the latest grant (0: never granted). It grows by
    /// one with every grant and is never reset, not even by a release.
    pub token: u64,
    /// How many permits the semaphore has: fixed by the first client that
    /// wrote the row; a client configured with another number is refused.
    pub permits: u32,
    /// Who holds a permit now, in the order they were granted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    /// Waiters in the order their enqueue write applied (FIFO). Serialized
    /// whole; in the row, a waiter that repeats the one before it but for
    /// its id is stored as that bare id.
    #[serde(
        default,
        skip_serializing_if = "VecDeque::is_empty",
        deserialize_with = "crate::turn::compact::deserialize"
    )]
    pub queue: VecDeque<Waiter>,
}

/// The holder of one permit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// Unique id of the acquisition (one per `acquire` call).
    pub id: String,
    /// Human-readable owner (`host:pid` unless set by the builder).
    pub owner: String,
    /// The fencing token of this grant: larger than that of every earlier
    /// grant of the semaphore.
    pub token: u64,
    /// Heartbeat counter: 0 when the permit was handed over and not yet
    /// claimed; the holder advances it every lease/3.
    pub beat: u64,
    /// The holder's lease in milliseconds: an observer that sees the same
    /// (holder, beat) for this long on its own clock may evict it.
    pub lease_ms: u64,
}

/// A client waiting in a semaphore's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Waiter {
    /// Unique id of the acquisition.
    pub id: String,
    /// Human-readable owner.
    pub owner: String,
    /// The lease this waiter will hold its permit with.
    pub lease_ms: u64,
}

impl SemaphoreState {
    /// A semaphore with `permits` permits, never granted.
    pub(crate) fn new(permits: u32) -> SemaphoreState {
        SemaphoreState {
            token: 0,
            permits,
            holders: Vec::new(),
            queue: VecDeque::new(),
        }
    }

    /// Decode a stored row; a foreign or damaged value is
    /// [`ErrorKind::Corrupt`], naming the key.
    pub(crate) fn decode(row: &Row) -> Result<SemaphoreState> {
        let key = row.key.as_str();
        let state: SemaphoreState = serde_json::from_slice(&row.value).map_err(|e| {
            Error::corrupt(RECIPE, format!("row {key} is not a bakery semaphore: {e}"))
        })?;
        // None of these can be written by this code: refuse rather than guess.
        let broken = if state.permits == 0 {
            Some("0 permits".to_owned())
        } else if state.holders.len() > state.permits as usize {
            Some(format!(
                "{} holders for {} permits",
                state.holders.len(),
                state.permits
            ))
        } else if !state.queue.is_empty() && state.holders.len() < state.permits as usize {
            Some("waiters while a permit is free".to_owned())
        } else if state.has_duplicate_ids() {
            Some("a request id twice".to_owned())
        } else if state.holders.iter().any(|h| h.token > state.token) {
            Some("a holder's token above the last granted".to_owned())
        } else {
            None
        };
        match broken {
            Some(what) => Err(Error::corrupt(RECIPE, format!("row {key} has {what}"))),
            None => Ok(state),
        }
    }

    /// Check that this state (of `row`) has `permits` permits: a semaphore
    /// configured with another number is refused ([`ErrorKind::Config`]),
    /// not reinterpreted.
    pub(crate) fn check_permits(&self, row: &Row, permits: u32) -> Result<()> {
        if self.permits != permits {
            return Err(Error::config(
                RECIPE,
                format!(
                    "semaphore row {} has {} permits but this handle is configured with {permits}; \
                     every client must use the same number (the stored row is left as is)",
                    row.key.as_str(),
                    self.permits
                ),
            ));
        }
        Ok(())
    }

    /// How many permits nobody holds.
    pub fn available(&self) -> u32 {
        let held = u32::try_from(self.holders.len()).unwrap_or(u32::MAX);
        self.permits.saturating_sub(held)
    }
}

turn_holder!(Holder);

/// The row's form of the state: the derived `Serialize`'s fields, in its
/// order, with the queue [`Compact`].
#[derive(Serialize)]
struct Stored<'a> {
    token: u64,
    permits: u32,
    #[serde(skip_serializing_if = "<[Holder]>::is_empty")]
    holders: &'a [Holder],
    #[serde(skip_serializing_if = "Compact::is_empty")]
    queue: Compact<'a, Waiter>,
}

turn_waiter!(Waiter { owner, lease_ms });

/// A waiter fits while a permit is free; the transitions are the turn
/// recipes' own.
impl TurnState for SemaphoreState {
    type Waiter = Waiter;
    type Holder = Holder;
    const RECIPE: &'static str = RECIPE;

    fn id_of(waiter: &Waiter) -> &str {
        &waiter.id
    }

    fn granted(waiter: Waiter, token: u64, beat: u64) -> Holder {
        Holder {
            id: waiter.id,
            owner: waiter.owner,
            token,
            beat,
            lease_ms: waiter.lease_ms,
        }
    }

    turn_parts!(Holder, Waiter);

    fn encode(&self) -> Result<Bytes> {
        crate::turn::json_bytes(
            RECIPE,
            &Stored {
                token: self.token,
                permits: self.permits,
                holders: &self.holders,
                queue: Compact(&self.queue),
            },
        )
    }

    fn fits(&self, _waiter: &Waiter) -> bool {
        self.available() > 0
    }
}

#[cfg(test)]
mod tests {
    use bakery_core::ErrorKind;

    use super::*;

    fn waiter(id: &str) -> Waiter {
        Waiter {
            id: id.into(),
            owner: "test".into(),
            lease_ms: 1000,
        }
    }

    fn row(value: &str) -> Row {
        Row {
            key: bakery_core::Key::new("semaphore/x").unwrap(),
            value: value.as_bytes().to_vec().into(),
            version: 1,
        }
    }

    #[test]
    fn permits_are_taken_then_queued_then_granted_in_fifo_order() {
        let mut s = SemaphoreState::new(2);
        s.join(&waiter("a")).unwrap();
        s.join(&waiter("b")).unwrap();
        assert_eq!(s.available(), 0);
        s.join(&waiter("c")).unwrap();
        s.join(&waiter("d")).unwrap();
        assert!(!s.can_take(&waiter("new")));
        assert_eq!(s.queue.len(), 2);
        assert_eq!(s.token, 2);

        let granted = s.release("b", 2).unwrap().unwrap();
        assert_eq!(granted, vec!["c".to_owned()]);
        let c = s.holder("c").unwrap();
        assert_eq!((c.token, c.beat), (3, 0), "handed over, unclaimed");
        assert_eq!(s.release("b", 2).unwrap(), None, "released twice");
        assert_eq!(s.evict(&["a".into(), "c".into()]).unwrap(), vec!["d"]);
        assert_eq!(s.holder("d").unwrap().token, 4);
        assert_eq!(s.available(), 1);
        assert!(s.can_take(&waiter("new")));
    }

    #[test]
    fn withdraw_leaves_the_queue_or_passes_a_granted_permit_on() {
        let mut s = SemaphoreState::new(1);
        s.join(&waiter("a")).unwrap();
        s.join(&waiter("b")).unwrap();
        s.join(&waiter("c")).unwrap();
        assert_eq!(s.withdraw("c").unwrap(), Some(vec![]));
        assert_eq!(s.withdraw("c").unwrap(), None);
        s.release("a", 1).unwrap();
        assert_eq!(s.withdraw("b").unwrap(), Some(vec![]));
        assert!(s.holders.is_empty());
        assert_eq!(s.token, 2, "a withdrawal grants nothing when nobody waits");
    }

    #[test]
    fn beat_claims_and_moves_only_its_holder() {
        let mut s = SemaphoreState::new(2);
        s.join(&waiter("a")).unwrap();
        s.join(&waiter("b")).unwrap();
        assert!(s.beat("b"));
        assert!(!s.beat("z"));
        assert_eq!(s.holder("a").unwrap().beat, 1);
        assert_eq!(s.holder("b").unwrap().beat, 2);
    }

    #[test]
    fn rows_this_code_cannot_write_are_corrupt() {
        for bad in [
            "not json",
            r#"{"token":1,"permits":1,"extra":true}"#,
            r#"{"token":0,"permits":0}"#,
            r#"{"token":2,"permits":1,"holders":[
                {"id":"a","owner":"o","token":1,"beat":1,"lease_ms":1},
                {"id":"b","owner":"o","token":2,"beat":1,"lease_ms":1}]}"#,
            r#"{"token":1,"permits":2,"holders":[
                {"id":"a","owner":"o","token":1,"beat":1,"lease_ms":1}],
                "queue":[{"id":"b","owner":"o","lease_ms":1}]}"#,
            r#"{"token":1,"permits":1,"holders":[
                {"id":"a","owner":"o","token":1,"beat":1,"lease_ms":1}],
                "queue":[{"id":"a","owner":"o","lease_ms":1}]}"#,
            r#"{"token":1,"permits":1,"holders":[
                {"id":"a","owner":"o","token":5,"beat":1,"lease_ms":1}]}"#,
        ] {
            let err = SemaphoreState::decode(&row(bad)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{bad}: {err}");
            assert!(err.message().contains("semaphore/x"), "{err}");
        }
    }

    #[test]
    fn waiters_of_one_owner_and_lease_are_stored_as_their_ids() {
        let mut s = SemaphoreState::new(1);
        for id in ["a", "b", "c"] {
            s.join(&waiter(id)).unwrap();
        }
        s.join(&Waiter {
            lease_ms: 5,
            ..waiter("d")
        })
        .unwrap();
        let stored = String::from_utf8(s.encode().unwrap().to_vec()).unwrap();
        assert_eq!(
            stored,
            r#"{"token":1,"permits":1,"holders":[{"id":"a","owner":"test","token":1,"beat":1,"lease_ms":1000}],"queue":[{"id":"b","owner":"test","lease_ms":1000},"c",{"id":"d","owner":"test","lease_ms":5}]}"#
        );
        assert_eq!(SemaphoreState::decode(&row(&stored)).unwrap(), s);
        let whole = stored.replace(r#","c","#, r#",{"id":"c","owner":"test","lease_ms":1000},"#);
        assert_eq!(SemaphoreState::decode(&row(&whole)).unwrap(), s);
        // What `inspect` callers serialize (`bakery semaphore show --json`)
        // keeps every waiter whole.
        assert_eq!(serde_json::to_string(&s).unwrap(), whole);
        // A bare id repeating nobody, or naming a request twice, is refused.
        for bad in [
            stored.replace(r#"[{"id":"b","owner":"test","lease_ms":1000},"#, r#"["b","#),
            stored.replace(r#","c","#, r#","b","#),
        ] {
            let err = SemaphoreState::decode(&row(&bad)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{bad}: {err}");
        }
    }

    #[test]
    fn another_permit_count_is_refused_not_reinterpreted() {
        let mut s = SemaphoreState::new(3);
        s.join(&waiter("a")).unwrap();
        let stored = row(std::str::from_utf8(&s.encode().unwrap()).unwrap());
        let decoded = SemaphoreState::decode(&stored).unwrap();
        assert_eq!(decoded, s);
        decoded.check_permits(&stored, 3).unwrap();
        let err = decoded.check_permits(&stored, 2).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.message().contains("3 permits"), "{err}");
    }

    #[test]
    fn token_overflow_is_exhausted_not_a_wrap() {
        let mut s = SemaphoreState::new(1);
        s.token = u64::MAX;
        assert_eq!(
            s.join(&waiter("a")).unwrap_err().kind(),
            ErrorKind::Exhausted
        );
    }
}
