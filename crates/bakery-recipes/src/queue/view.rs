//! The recipes' public views of a row ([`LockState`], [`SemaphoreState`],
//! [`RwLockState`]), made from its [`QueueState`]: the view types belong to
//! their recipes, what the queue's state means stays here.

use crate::lock::{self, LockState};
use crate::rwlock::{self, RwLockState};
use crate::semaphore::{self, SemaphoreState};

use super::state::{Ask, Holder, QueueState, Rule};

/// A lock's holder as [`lock::Holder`] shows it (its token is the row's).
pub(crate) fn lock_holder(holder: &Holder) -> lock::Holder {
    let ask = &holder.ask;
    lock::Holder {
        id: ask.id.clone(),
        owner: ask.owner.clone(),
        beat: holder.beat,
        lease_ms: ask.lease_ms,
        data: ask.data.clone(),
    }
}

impl From<QueueState> for LockState {
    fn from(state: QueueState) -> LockState {
        let waiter = |ask: &Ask| lock::Waiter {
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

impl From<QueueState> for SemaphoreState {
    fn from(state: QueueState) -> SemaphoreState {
        let holder = |h: &Holder| semaphore::Holder {
            id: h.ask.id.to_string(),
            owner: h.ask.owner.to_string(),
            token: h.token,
            beat: h.beat,
            lease_ms: h.ask.lease_ms,
        };
        let waiter = |ask: &Ask| semaphore::Waiter {
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

impl From<QueueState> for RwLockState {
    fn from(state: QueueState) -> RwLockState {
        let holder = |h: &Holder| rwlock::Holder {
            id: h.ask.id.to_string(),
            owner: h.ask.owner.to_string(),
            mode: h.ask.mode,
            token: h.token,
            beat: h.beat,
            lease_ms: h.ask.lease_ms,
        };
        let waiter = |ask: &Ask| rwlock::Waiter {
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
