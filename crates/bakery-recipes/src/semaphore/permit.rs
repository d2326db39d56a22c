//! The holder's side: the permit (a [`Hold`](crate::queue::hold::Hold) of
//! the semaphore).

use crate::queue::hold::guard;

guard!(
    /// One permit of a [`Semaphore`](super::Semaphore), held until released
    /// or lost. A background task renews its lease every lease/3 while it
    /// lives.
    ///
    /// Release it with [`release`](Self::release). Dropping it releases
    /// through the runtime when there is one; otherwise the lease expires.
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
    Permit,
    "permit"
);
