//! The semaphore's stored state as its readers see it (`bakery semaphore
//! show`, [`Semaphore::inspect`](super::Semaphore::inspect)).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::queue::state::{QueueState, Rule};

/// The stored state of one semaphore, as
/// [`Semaphore::inspect`](super::Semaphore::inspect) returns it.
///
/// At most `permits` holders; nobody queues while a permit is free (a
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
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
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
    /// How many permits nobody holds.
    pub fn available(&self) -> u32 {
        let held = u32::try_from(self.holders.len()).unwrap_or(u32::MAX);
        self.permits.saturating_sub(held)
    }
}

impl From<QueueState> for SemaphoreState {
    fn from(state: QueueState) -> SemaphoreState {
        SemaphoreState {
            token: state.token,
            permits: match state.rule {
                Rule::Permits(permits) => permits,
                Rule::ReadWrite => 0,
            },
            holders: state
                .holders
                .iter()
                .map(|h| Holder {
                    id: h.ask.id.to_string(),
                    owner: h.ask.owner.to_string(),
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
                    lease_ms: w.lease_ms,
                })
                .collect(),
        }
    }
}
