//! The lock's stored state as its readers see it (`bakery lock show`,
//! [`Lock::inspect`](super::Lock::inspect), [`Lock::holder`](super::Lock::holder)).

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::queue::state::{Ask, Holder as QueueHolder, QueueState};

/// The stored state of one lock, as `bakery lock show` prints it.
///
/// When nobody holds the lock the queue is empty (a release hands the lock
/// to the head of the queue in the same write). Serialized, every waiter
/// is whole, whatever the row leaves out of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockState {
    /// The token of the lock's latest grant, the one its holder fences
    /// with (0: never granted). A release keeps it; the next grant takes
    /// the one after it.
    pub token: u64,
    /// Who holds the lock now, if anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// Who waits for the lock, the next holder first.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub queue: VecDeque<Waiter>,
}

/// The holder of a lock (and, as [`Worker`](crate::once::Worker), the
/// worker of an idempotency key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// Unique id of the acquisition (one per `acquire` call; the guards of
    /// a reentrant lock share it).
    pub id: Arc<str>,
    /// Who holds the lock, for people: `host:pid` unless set with
    /// [`LockBuilder::owner`](super::LockBuilder::owner).
    pub owner: Arc<str>,
    /// Heartbeat counter: 0 when the lock was handed over and not yet
    /// claimed; the holder advances it every lease/3.
    pub beat: u64,
    /// The holder's lease in milliseconds: a waiter that sees the same
    /// (holder, beat) for this long on its own clock may take the lock.
    pub lease_ms: u64,
    /// The holder's data, set by [`LockBuilder::data`](super::LockBuilder::data)
    /// (e.g. the address of the node that runs the job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Arc<str>>,
}

/// A client waiting in a lock's queue: what it will hold the lock with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Waiter {
    /// The acquisition's id, its [`Holder::id`] once granted.
    pub id: Arc<str>,
    /// Its [`Holder::owner`] once granted.
    pub owner: Arc<str>,
    /// Its [`Holder::lease_ms`] once granted.
    pub lease_ms: u64,
    /// Its [`Holder::data`] once granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Arc<str>>,
}

/// A lock's holder as [`Holder`] shows it (its token is the row's).
pub(crate) fn lock_holder(holder: &QueueHolder) -> Holder {
    let ask = &holder.ask;
    Holder {
        id: ask.id.clone(),
        owner: ask.owner.clone(),
        beat: holder.beat,
        lease_ms: ask.lease_ms,
        data: ask.data.clone(),
    }
}

impl From<QueueState> for LockState {
    fn from(state: QueueState) -> LockState {
        let waiter = |ask: &Ask| Waiter {
            id: ask.id.clone(),
            owner: ask.owner.clone(),
            lease_ms: ask.lease_ms,
            data: ask.data.clone(),
        };
        LockState {
            token: state.token,
            holder: state.holders.first().map(lock_holder),
            queue: state.queue.iter().map(waiter).collect(),
        }
    }
}
