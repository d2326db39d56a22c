//! The read-write lock's whole state, in one row: the last fencing token,
//! the holders (readers, or one writer) and the FIFO queue. Every
//! transition is a pure function on this value; the caller writes the
//! result with one `put_if_version`.

use std::collections::VecDeque;
use std::fmt;

use bakery_core::{Bytes, Error, Result, Row};
use serde::{Deserialize, Serialize};

use crate::turn::compact::{turn_waiter, Compact};
use crate::turn::{turn_holder, turn_parts, TurnState};

/// Name used in this recipe's errors.
pub(crate) const RECIPE: &str = "rwlock";

/// How a request holds (or wants) the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Shared: any number of readers hold the lock together.
    Read,
    /// Exclusive: one writer, nobody else.
    Write,
}

impl Mode {
    /// What a grant in this mode is, for messages.
    pub(crate) fn held(self) -> &'static str {
        match self {
            Mode::Read => "read hold",
            Mode::Write => "write hold",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Read => "read",
            Mode::Write => "write",
        })
    }
}

/// The stored state of one read-write lock, as
/// [`RwLock::inspect`](super::RwLock::inspect) returns it.
///
/// Invariants kept by every transition (and checked when a row is read):
/// never a writer together with anyone else; nobody queues while the head
/// of the queue could be granted (a release, eviction or withdrawal grants
/// the head, and the readers right behind a reader head, in the same
/// write); no request id appears twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RwLockState {
    /// The fencing token of the latest grant (0: never granted). It grows by
    /// one with every grant, read or write, and is never reset.
    pub token: u64,
    /// Who holds the lock now, in the order they were granted: readers, or
    /// exactly one writer.
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

/// One holder of the lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// Unique id of the acquisition (one per `read`/`write` call).
    pub id: String,
    /// Human-readable owner (`host:pid` unless set by the builder).
    pub owner: String,
    /// Read or write.
    pub mode: Mode,
    /// The fencing token of this grant: larger than that of every earlier
    /// grant of the lock.
    pub token: u64,
    /// Heartbeat counter: 0 when the lock was handed over and not yet
    /// claimed; the holder advances it every lease/3.
    pub beat: u64,
    /// The holder's lease in milliseconds: an observer that sees the same
    /// (holder, beat) for this long on its own clock may evict it.
    pub lease_ms: u64,
}

/// A client waiting in the lock's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Waiter {
    /// Unique id of the acquisition.
    pub id: String,
    /// Human-readable owner.
    pub owner: String,
    /// Read or write.
    pub mode: Mode,
    /// The lease this waiter will hold the lock with.
    pub lease_ms: u64,
}

impl RwLockState {
    /// A lock never granted.
    pub(crate) fn new() -> RwLockState {
        RwLockState {
            token: 0,
            holders: Vec::new(),
            queue: VecDeque::new(),
        }
    }

    /// Decode a stored row; a foreign or damaged value is
    /// [`ErrorKind::Corrupt`], naming the key.
    pub(crate) fn decode(row: &Row) -> Result<RwLockState> {
        let key = row.key.as_str();
        let state: RwLockState = serde_json::from_slice(&row.value).map_err(|e| {
            Error::corrupt(RECIPE, format!("row {key} is not a bakery rwlock: {e}"))
        })?;
        // None of these can be written by this code: refuse rather than guess.
        let broken = if state.has_writer() && state.holders.len() > 1 {
            Some("a writer together with other holders".to_owned())
        } else if state.head_grantable() {
            Some("waiters while the head of the queue could be granted".to_owned())
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

    /// Does a writer hold the lock?
    pub fn has_writer(&self) -> bool {
        self.holders.iter().any(|h| h.mode == Mode::Write)
    }

    /// How many readers hold the lock.
    pub fn readers(&self) -> usize {
        self.holders.iter().filter(|h| h.mode == Mode::Read).count()
    }

    /// Could a request in `mode` be granted next to the current holders?
    fn compatible(&self, mode: Mode) -> bool {
        match mode {
            Mode::Read => !self.has_writer(),
            Mode::Write => self.holders.is_empty(),
        }
    }

    /// Could the head of the queue be granted now (never true in a row
    /// this code wrote)?
    fn head_grantable(&self) -> bool {
        self.queue.front().is_some_and(|w| self.compatible(w.mode))
    }
}

turn_holder!(Holder);

/// The row's form of the state: the derived `Serialize`'s fields, in its
/// order, with the queue [`Compact`].
#[derive(Serialize)]
struct Stored<'a> {
    token: u64,
    #[serde(skip_serializing_if = "<[Holder]>::is_empty")]
    holders: &'a [Holder],
    #[serde(skip_serializing_if = "Compact::is_empty")]
    queue: Compact<'a, Waiter>,
}

turn_waiter!(Waiter {
    owner,
    mode,
    lease_ms
});

/// A waiter fits when its mode is compatible with the holders (a reader
/// beside readers, a writer alone); the transitions are the turn recipes'
/// own.
impl TurnState for RwLockState {
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
            mode: waiter.mode,
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
                holders: &self.holders,
                queue: Compact(&self.queue),
            },
        )
    }

    fn fits(&self, waiter: &Waiter) -> bool {
        self.compatible(waiter.mode)
    }
}

#[cfg(test)]
mod tests {
    use bakery_core::ErrorKind;

    use super::*;

    fn waiter(id: &str, mode: Mode) -> Waiter {
        Waiter {
            id: id.into(),
            owner: "test".into(),
            mode,
            lease_ms: 1000,
        }
    }

    fn row(value: &str) -> Row {
        Row {
            key: bakery_core::Key::new("rwlock/x").unwrap(),
            value: value.as_bytes().to_vec().into(),
            version: 1,
        }
    }

    #[test]
    fn readers_share_a_queued_writer_blocks_new_readers() {
        let mut s = RwLockState::new();
        s.join(&waiter("r1", Mode::Read)).unwrap();
        s.join(&waiter("r2", Mode::Read)).unwrap();
        assert_eq!(s.readers(), 2);
        s.join(&waiter("w", Mode::Write)).unwrap();
        assert!(s.queued("w"));
        assert!(!s.can_take(&waiter("new", Mode::Read)), "writer preference");
        s.join(&waiter("r3", Mode::Read)).unwrap();
        s.join(&waiter("r4", Mode::Read)).unwrap();
        s.join(&waiter("w2", Mode::Write)).unwrap();
        s.join(&waiter("r5", Mode::Read)).unwrap();
        assert_eq!(s.release("r1", 1).unwrap().unwrap(), Vec::<String>::new());
        assert_eq!(s.release("r2", 2).unwrap().unwrap(), vec!["w"]);
        assert_eq!(s.holder("w").unwrap().token, 3);
        assert_eq!(s.release("w", 3).unwrap().unwrap(), vec!["r3", "r4"]);
        assert_eq!(s.readers(), 2);
        assert!(!s.has_writer());
        assert_eq!(s.evict(&["r3".into(), "r4".into()]).unwrap(), vec!["w2"]);
        assert_eq!(s.release("w2", 6).unwrap().unwrap(), vec!["r5"]);
        assert_eq!(s.token, 7);
        assert!(s.can_take(&waiter("new", Mode::Read)));
        assert!(!s.can_take(&waiter("new", Mode::Write)));
    }

    #[test]
    fn withdrawing_a_queued_writer_lets_the_readers_behind_it_in() {
        let mut s = RwLockState::new();
        s.join(&waiter("r1", Mode::Read)).unwrap();
        s.join(&waiter("w", Mode::Write)).unwrap();
        s.join(&waiter("r2", Mode::Read)).unwrap();
        assert_eq!(s.withdraw("w").unwrap(), Some(vec!["r2".to_owned()]));
        assert_eq!(s.readers(), 2);
        assert!(s.queue.is_empty());
        assert_eq!(s.withdraw("w").unwrap(), None);
        assert_eq!(s.withdraw("r2").unwrap(), Some(vec![]));
    }

    #[test]
    fn a_waiter_is_its_bare_id_only_when_its_mode_repeats_too() {
        let mut s = RwLockState::new();
        s.join(&waiter("w", Mode::Write)).unwrap();
        for (id, mode) in [("r1", Mode::Read), ("r2", Mode::Read), ("w2", Mode::Write)] {
            s.join(&waiter(id, mode)).unwrap();
        }
        let stored = String::from_utf8(s.encode().unwrap().to_vec()).unwrap();
        assert!(
            stored.ends_with(
                r#""queue":[{"id":"r1","owner":"test","mode":"read","lease_ms":1000},"r2",{"id":"w2","owner":"test","mode":"write","lease_ms":1000}]}"#
            ),
            "{stored}"
        );
        assert_eq!(RwLockState::decode(&row(&stored)).unwrap(), s);
    }

    #[test]
    fn rows_this_code_cannot_write_are_corrupt() {
        for bad in [
            "not json",
            r#"{"token":1,"extra":true}"#,
            r#"{"token":2,"holders":[
                {"id":"a","owner":"o","mode":"write","token":1,"beat":1,"lease_ms":1},
                {"id":"b","owner":"o","mode":"read","token":2,"beat":1,"lease_ms":1}]}"#,
            r#"{"token":1,"holders":[
                {"id":"a","owner":"o","mode":"read","token":1,"beat":1,"lease_ms":1}],
                "queue":[{"id":"b","owner":"o","mode":"read","lease_ms":1}]}"#,
            r#"{"token":0,"queue":[{"id":"b","owner":"o","mode":"write","lease_ms":1}]}"#,
            r#"{"token":1,"holders":[
                {"id":"a","owner":"o","mode":"write","token":1,"beat":1,"lease_ms":1}],
                "queue":[{"id":"a","owner":"o","mode":"read","lease_ms":1}]}"#,
            r#"{"token":1,"holders":[
                {"id":"a","owner":"o","mode":"read","token":5,"beat":1,"lease_ms":1}]}"#,
            r#"{"token":1,"holders":[
                {"id":"a","owner":"o","mode":"admin","token":1,"beat":1,"lease_ms":1}]}"#,
            r#"{"token":1,"holders":[
                {"id":"a","owner":"o","mode":"write","token":1,"beat":1,"lease_ms":1}],
                "queue":["b"]}"#,
        ] {
            let err = RwLockState::decode(&row(bad)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{bad}: {err}");
            assert!(err.message().contains("rwlock/x"), "{err}");
        }
        let mut s = RwLockState::new();
        s.join(&waiter("r", Mode::Read)).unwrap();
        s.join(&waiter("w", Mode::Write)).unwrap();
        s.join(&waiter("r2", Mode::Read)).unwrap();
        let stored = row(std::str::from_utf8(&s.encode().unwrap()).unwrap());
        assert_eq!(RwLockState::decode(&stored).unwrap(), s);
    }

    #[test]
    fn token_overflow_is_exhausted_not_a_wrap() {
        let mut s = RwLockState::new();
        s.token = u64::MAX;
        assert_eq!(
            s.join(&waiter("a", Mode::Read)).unwrap_err().kind(),
            ErrorKind::Exhausted
        );
    }
}
