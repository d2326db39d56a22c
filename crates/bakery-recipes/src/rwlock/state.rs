//! The read-write lock's stored state as its readers see it (`bakery rwlock
//! show`, [`RwLock::inspect`](super::RwLock::inspect)).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

pub use crate::queue::state::Mode;
use crate::queue::state::QueueState;

/// What a grant in `mode` is, for messages.
pub(crate) fn held(mode: Mode) -> &'static str {
    match mode {
        Mode::Read => "read hold",
        Mode::Write => "write hold",
    }
}

/// The stored state of one read-write lock, as
/// [`RwLock::inspect`](super::RwLock::inspect) returns it.
///
/// Never a writer together with anyone else; nobody queues while the head
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
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
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
    /// Does a writer hold the lock?
    pub fn has_writer(&self) -> bool {
        self.holders.iter().any(|h| h.mode == Mode::Write)
    }

    /// How many readers hold the lock.
    pub fn readers(&self) -> usize {
        self.holders.iter().filter(|h| h.mode == Mode::Read).count()
    }
}

impl From<QueueState> for RwLockState {
    fn from(state: QueueState) -> RwLockState {
        RwLockState {
            token: state.token,
            holders: state
                .holders
                .iter()
                .map(|h| Holder {
                    id: h.ask.id.to_string(),
                    owner: h.ask.owner.to_string(),
                    mode: h.ask.mode,
                    token: h.token,
                    beat: h.beat,
                    lease_ms: h.ask.lease_ms,
                })
                .collect(),
            queue: state
                .queue
                .iter()
                .map(|w| Waiter {
                    id: w.id.to_string(),
                    owner: w.owner.to_string(),
                    mode: w.mode,
                    lease_ms: w.lease_ms,
                })
                .collect(),
        }
    }
}
