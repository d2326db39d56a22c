//! The holder's side: the read and write guards (each a
//! [`Hold`](crate::queue::hold::Hold) of the rwlock).

use crate::queue::hold::guard;

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
