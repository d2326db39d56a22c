//! The holder's side: the permit (a [`Hold`] of the semaphore).

use std::fmt;
use std::future::Future;

use bakery_core::Result;

use super::Inner;
use crate::grant::LostReason;
use crate::turn::Hold;

/// One permit of a [`Semaphore`](super::Semaphore). A background task
/// renews its lease every lease/3 while the permit lives (started when the
/// first renewal is due).
///
/// Release it with [`release`](Self::release). Dropping the permit releases
/// through the runtime when there is one; otherwise its lease expires.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::MemoryStore;
/// use bakery_recipes::semaphore::Semaphore;
///
/// # #[tokio::main]
/// # async fn main() -> bakery_core::Result<()> {
/// let pool = Semaphore::builder(Arc::new(MemoryStore::new()), "gpu").permits(4).build()?;
/// let permit = pool.acquire().await?;
/// assert!(permit.is_held());
/// tokio::select! {
///     reason = permit.lost() => panic!("lost the permit: {reason}"),
///     () = async { /* the work, fenced with permit.token() */ } => {}
/// }
/// permit.release().await?;
/// # Ok(()) }
/// ```
pub struct Permit(pub(crate) Hold<Inner>);

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("semaphore", &self.0.key())
            .field("token", &self.token())
            .field("held", &self.is_held())
            .finish()
    }
}

impl Permit {
    /// The fencing token of this grant: larger than that of every earlier
    /// grant of the same semaphore (each grant of a permit takes the next
    /// token). Up to N permits are held at once, so their tokens differ:
    /// fence a resource that one permit at a time uses (e.g. one of N
    /// slots) by rejecting tokens lower than the highest it has seen
    /// ([`FencedValue`](crate::fence::FencedValue)).
    pub fn token(&self) -> u64 {
        self.0.token()
    }

    /// True until the permit is released or learns it is lost.
    pub fn is_held(&self) -> bool {
        self.0.is_held()
    }

    /// Completes when the permit learns it is no longer its own: a
    /// heartbeat found it gone (evicted by a waiter after a lease of
    /// silence), or heartbeats failed for a whole lease. Never completes
    /// while the permit is held (nor after `release`). The future is
    /// independent of the permit (`'static`), so it can be raced against
    /// the work done under it.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.0.lost()
    }

    /// Give the permit back; in the same write, the first waiter in the
    /// queue is granted it (with the next token).
    ///
    /// Errors with [`ErrorKind::Lost`](bakery_core::ErrorKind::Lost) if the
    /// permit was no longer this one's (its lease ran out and a waiter
    /// evicted it): whatever was done under it may have overlapped another
    /// holder — fencing tokens tell.
    pub async fn release(self) -> Result<()> {
        self.0.release().await
    }
}
