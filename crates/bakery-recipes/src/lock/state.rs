//! The lock's stored state as its readers see it (`bakery lock show`,
//! [`Lock::inspect`](super::Lock::inspect), [`Lock::holder`](super::Lock::holder)).

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::queue::state::{Ask, QueueState};

/// The stored state of one lock, as `bakery lock show` prints it.
///
/// When nobody holds the lock the queue is empty (a release hands the lock
/// to the head of the queue in the same write). Serialized, every waiter
/// is whole; in the row, a waiter that repeats the owner and lease of the
/// entry before it is stored as its bare id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockState {
    /// The fencing token of the latest grant (0: never granted). It grows by
    /// one with every grant and is never reset, not even by a release.
    pub token: u64,
    /// Who holds the lock now, if anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// Waiters in the order their enqueue write applied (FIFO).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub queue: VecDeque<Waiter>,
}

/// The holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// Unique id of the acquisition (one per `acquire` call).
    pub id: Arc<str>,
    /// Human-readable owner (`host:pid` unless set by the builder).
    pub owner: Arc<str>,
    /// Heartbeat counter: 0 when the lock was handed over and not yet
    /// claimed; the holder advances it every lease/3.
    pub beat: u64,
    /// The holder's lease in milliseconds: an observer that sees the same
    /// (holder, beat) for this long on its own clock may evict it.
    pub lease_ms: u64,
    /// The holder's data, set by [`LockBuilder::data`](super::LockBuilder::data)
    /// (e.g. the address of the node that runs the job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Arc<str>>,
}

/// A client waiting in a lock's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Waiter {
    /// Unique id of the acquisition.
    pub id: Arc<str>,
    /// Human-readable owner.
    pub owner: Arc<str>,
    /// The lease this waiter will hold the lock with.
    pub lease_ms: u64,
    /// The data this waiter will hold the lock with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Arc<str>>,
}

impl From<&Ask> for Waiter {
    fn from(ask: &Ask) -> Waiter {
        Waiter {
            id: ask.id.clone(),
            owner: ask.owner.clone(),
            lease_ms: ask.lease_ms,
            data: ask.data.clone(),
        }
    }
}

impl From<QueueState> for LockState {
    fn from(state: QueueState) -> LockState {
        LockState {
            token: state.token,
            holder: state.holders.first().map(|holder| Holder {
                id: holder.ask.id.clone(),
                owner: holder.ask.owner.clone(),
                beat: holder.beat,
                lease_ms: holder.ask.lease_ms,
                data: holder.ask.data.clone(),
            }),
            queue: state.queue.iter().map(Waiter::from).collect(),
        }
    }
}
