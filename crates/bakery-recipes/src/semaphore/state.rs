//! The semaphore's stored state as its readers see it (`bakery semaphore
//! show`, [`Semaphore::inspect`](super::Semaphore::inspect)).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::queue::state::{Ask, Holder as QueueHolder, QueueState, Rule};

/// The stored state of one semaphore, as
/// [`Semaphore::inspect`](super::Semaphore::inspect) returns it.
///
/// At most `permits` holders; nobody queues while a permit is free (a
/// release or an eviction grants freed permits to the head of the queue in
/// the same write); no request id appears twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SemaphoreState {
    /// The token of the semaphore's latest grant (0: never granted): each
    /// permit granted takes the one after it, and releases never lower it.
    pub token: u64,
    /// How many permits the semaphore has: fixed by the first client that
    /// wrote the row; a client configured with another number is refused.
    pub permits: u32,
    /// Who holds a permit now, the longest-held first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    /// Who waits for a permit, the next to get one first; serialized whole.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub queue: VecDeque<Waiter>,
}

/// The holder of one permit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// The id of the [`Semaphore::acquire`](super::Semaphore::acquire) call
    /// that got the permit.
    pub id: String,
    /// Who holds the permit, for people: `host:pid` unless set with
    /// [`SemaphoreBuilder::owner`](super::SemaphoreBuilder::owner).
    pub owner: String,
    /// The fencing token of this permit's grant, what [`Permit::token`](super::Permit::token) returns.
    pub token: u64,
    /// Heartbeat counter: 0 when the permit was handed over and not yet
    /// claimed; the holder advances it every lease/3.
    pub beat: u64,
    /// How long the holder may stay silent, in milliseconds: a waiter that
    /// sees the same `beat` for this long on its own clock frees the permit.
    pub lease_ms: u64,
}

/// A client waiting in a semaphore's queue for a permit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Waiter {
    /// The id of the waiting `acquire` call: its permit's [`Holder::id`].
    pub id: String,
    /// Who waits for the permit, for people.
    pub owner: String,
    /// The lease it will hold its permit with.
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
        let holder = |h: &QueueHolder| Holder {
            id: h.ask.id.to_string(),
            owner: h.ask.owner.to_string(),
            token: h.token,
            beat: h.beat,
            lease_ms: h.ask.lease_ms,
        };
        let waiter = |ask: &Ask| Waiter {
            id: ask.id.to_string(),
            owner: ask.owner.to_string(),
            lease_ms: ask.lease_ms,
        };
        SemaphoreState {
            token: state.token,
            permits: match state.rule {
                Rule::Permits(permits) => permits,
                Rule::ReadWrite => 0,
            },
            holders: state.holders.iter().map(holder).collect(),
            queue: state.queue.iter().map(waiter).collect(),
        }
    }
}
