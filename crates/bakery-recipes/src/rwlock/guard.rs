//! The holder's side: the read and write guards (each a [`Hold`] of the
//! rwlock).

use std::future::Future;

use bakery_core::Result;

use super::Inner;
use crate::grant::LostReason;
use crate::turn::Hold;

macro_rules! guard {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(pub(crate) Hold<Inner>);

        impl $name {
            #[doc = concat!("The fencing token of this ", $what, " grant: larger than that of every")]
            /// earlier grant of the same lock, read or write. Readers that
            /// hold together have different tokens; fence a resource by
            /// rejecting writes with a token lower than the highest it has
            /// seen ([`FencedValue`](crate::fence::FencedValue)).
            pub fn token(&self) -> u64 {
                self.0.token()
            }

            /// True until the guard is released or learns it is lost.
            pub fn is_held(&self) -> bool {
                self.0.is_held()
            }

            /// Completes when the guard learns the lock is no longer its
            /// own: a heartbeat found it gone (evicted by a waiter after a
            /// lease of silence), or heartbeats failed for a whole lease.
            /// Never completes while the lock is held (nor after
            /// `release`). The future is independent of the guard
            /// (`'static`), so it can be raced against the work done under
            /// it.
            pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
                self.0.lost()
            }

            /// Give the lock back; in the same write, the head of the queue
            /// is granted (with the readers right behind a reader head),
            /// each with the next token, if the remaining holders allow.
            ///
            /// Errors with [`ErrorKind::Lost`](bakery_core::ErrorKind::Lost)
            /// if the hold was no longer this guard's (its lease ran out
            /// and a waiter evicted it): whatever was done under it may
            /// have overlapped a writer — fencing tokens tell.
            pub async fn release(self) -> Result<()> {
                self.0.release().await
            }
        }
    };
}

guard!(
    /// Shared hold of a [`RwLock`](super::RwLock): other readers may hold it
    /// too, no writer does. A background task renews its lease every
    /// lease/3 while the guard lives.
    ///
    /// Release it with [`release`](Self::release). Dropping the guard
    /// releases through the runtime when there is one; otherwise its lease
    /// expires.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bakery_core::MemoryStore;
    /// use bakery_recipes::rwlock::RwLock;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let lock = RwLock::builder(Arc::new(MemoryStore::new()), "catalog").build()?;
    /// let guard = lock.read().await?;
    /// tokio::select! {
    ///     reason = guard.lost() => panic!("lost the read lock: {reason}"),
    ///     () = async { /* read, fenced with guard.token() */ } => {}
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ReadGuard,
    "read"
);

guard!(
    /// Exclusive hold of a [`RwLock`](super::RwLock): nobody else holds it.
    /// A background task renews its lease every lease/3 while the guard
    /// lives.
    ///
    /// Release it with [`release`](Self::release). Dropping the guard
    /// releases through the runtime when there is one; otherwise its lease
    /// expires.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bakery_core::MemoryStore;
    /// use bakery_recipes::rwlock::RwLock;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let lock = RwLock::builder(Arc::new(MemoryStore::new()), "catalog").build()?;
    /// let guard = lock.write().await?;
    /// assert!(guard.is_held());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    WriteGuard,
    "write"
);
