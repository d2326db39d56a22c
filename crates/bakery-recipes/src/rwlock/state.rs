//! The read-write lock's stored state as its readers see it (`bakery rwlock
//! show`, [`RwLock::inspect`](super::RwLock::inspect)).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::queue::state::{Ask, Holder as QueueHolder, QueueState};

pub use crate::queue::state::Mode;

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
    /// The token of the lock's latest grant, read or write (0: never
    /// granted); never reset.
    pub token: u64,
    /// Who holds the lock now, the earliest grant first: readers, or
    /// exactly one writer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    /// Who waits, readers and writers in one line (a reader behind a
    /// writer waits for it); serialized whole.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub queue: VecDeque<Waiter>,
}

/// One holder of the lock, a reader or the writer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// Unique id of the acquisition (one per `read`/`write` call).
    pub id: String,
    /// Who holds, for people: `host:pid` unless set with
    /// [`RwLockBuilder::owner`](super::RwLockBuilder::owner).
    pub owner: String,
    /// Read or write.
    pub mode: Mode,
    /// The fencing token of this hold: larger than that of every earlier
    /// grant of the lock, a reader's too.
    pub token: u64,
    /// Heartbeat counter: 0 when the hold was handed over and not yet
    /// claimed; the holder advances it every lease/3.
    pub beat: u64,
    /// The holder's lease in milliseconds: a waiter that sees the same
    /// `beat` for this long on its own clock ends the hold.
    pub lease_ms: u64,
}

/// A reader or writer waiting in the lock's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Waiter {
    /// The id of the waiting `read` or `write` call, kept as the
    /// [`Holder::id`] of its hold.
    pub id: String,
    /// Who waits, for people.
    pub owner: String,
    /// Whether it waits to read or to write.
    pub mode: Mode,
    /// The lease it will hold the lock with.
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
        let holder = |h: &QueueHolder| Holder {
            id: h.ask.id.to_string(),
            owner: h.ask.owner.to_string(),
            mode: h.ask.mode,
            token: h.token,
            beat: h.beat,
            lease_ms: h.ask.lease_ms,
        };
        let waiter = |ask: &Ask| Waiter {
            id: ask.id.to_string(),
            owner: ask.owner.to_string(),
            mode: ask.mode,
            lease_ms: ask.lease_ms,
        };
        RwLockState {
            token: state.token,
            holders: state.holders.iter().map(holder).collect(),
            queue: state.queue.iter().map(waiter).collect(),
        }
    }
}
