//! The holder's side: the lock's guard (a
//! [`Hold`](crate::queue::hold::Hold) of the lock).

use std::time::Duration;

use bakery_core::Result;

use crate::queue::hold::guard;

guard!(
    /// Proof of holding a [`Lock`](super::Lock). A background task renews
    /// the lease every lease/3 while the guard lives.
    ///
    /// Release it with [`release`](Self::release). Dropping the guard
    /// releases through the runtime when there is one; otherwise the lease
    /// expires.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bakery_core::MemoryStore;
    /// use bakery_recipes::lock::Lock;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let lock = Lock::builder(Arc::new(MemoryStore::new()), "db-migration").build()?;
    /// let guard = lock.acquire().await?;
    /// assert!(guard.is_held());
    /// tokio::select! {
    ///     reason = guard.lost() => panic!("lost the lock: {reason}"),
    ///     () = async { /* the critical section, fenced with guard.token() */ } => {}
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    LockGuard,
    "lock"
);

impl LockGuard {
    /// Hold the grant at most `at_most` from now (a job lock's manual
    /// extend): replaces the limit set by
    /// [`LockBuilder::lock_at_most_for`](super::LockBuilder::lock_at_most_for),
    /// or sets one. The lease keeps being renewed until then.
    ///
    /// Errors with [`ErrorKind::Lost`](bakery_core::ErrorKind::Lost) if the
    /// guard no longer holds the lock.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use bakery_core::MemoryStore;
    /// # use bakery_recipes::lock::Lock;
    /// # #[tokio::main]
    /// # async fn main() -> bakery_core::Result<()> {
    /// let lock = Lock::builder(Arc::new(MemoryStore::new()), "nightly")
    ///     .lock_at_most_for(Duration::from_secs(60))
    ///     .build()?;
    /// let guard = lock.acquire().await?;
    /// // The job needs longer than planned: ten more minutes from now.
    /// guard.extend(Duration::from_secs(600))?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn extend(&self, at_most: Duration) -> Result<()> {
        self.0.extend(at_most)
    }
}
