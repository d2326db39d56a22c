//! What every grant of the lock family shares, whichever recipe hands it
//! out: why it was lost, who asks for it by default, and an acquisition's id.

use std::fmt;

/// Why a guard (of a lock, a semaphore permit, an RW lock or a leadership)
/// stopped holding its grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// A heartbeat found another holder (or no holder): the lease ran out
    /// and a waiter evicted this guard.
    Evicted,
    /// Heartbeats failed for a whole lease, so a waiter may have evicted
    /// this guard by now; it can no longer count on holding the lock.
    LeaseExpired,
    /// The lock's row was deleted or became unreadable.
    RowGone,
    /// The grant was held for its `lock_at_most_for` limit (see
    /// [`LockBuilder::lock_at_most_for`](crate::lock::LockBuilder::lock_at_most_for)):
    /// the guard released it.
    HoldLimit,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Evicted => "evicted by another client after the lease ran out",
            LostReason::LeaseExpired => "heartbeats failed for a whole lease",
            LostReason::RowGone => "the lock's row was deleted or damaged",
            LostReason::HoldLimit => "held for its lock_at_most_for limit and released",
        })
    }
}

/// The owner name of a contender that gives none: `host:pid`.
pub(crate) fn default_owner() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    format!("{host}:{}", std::process::id())
}

/// A new acquisition's id: 64 random bits in 11 characters (base64url).
/// Every queued waiter carries one in the row, so its length is most of a
/// long queue's bytes.
pub(crate) fn acquisition_id() -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<u64>().to_le_bytes())
}
