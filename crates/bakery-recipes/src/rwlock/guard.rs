//! The holder's side: the read and write guards, their heartbeat and the
//! lost-lock signal.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bakery_core::{Error, ErrorKind, PutOutcome, Result, Row};
use tokio::sync::watch;

use crate::beats::{Due, Heartbeat};
use crate::held::Status;
use tokio::time::Instant;

use super::state::{Mode, RwLockState, RECIPE};
use super::{Inner, Updated};
use crate::lock::LostReason;

/// A grant as the acquire loop hands it over.
pub(crate) struct Grant {
    pub(crate) id: String,
    pub(crate) mode: Mode,
    pub(crate) token: u64,
    /// A row in which `id` holds the lock.
    pub(crate) row: Row,
    /// Where the lease counts from: the send time of the write that took
    /// the lock, or of the last request whose reply did not show it
    /// granted (a hand-off committed after that).
    pub(crate) lease_from: Instant,
}

struct Shared {
    sem: Arc<Inner>,
    id: String,
    mode: Mode,
    token: u64,
    /// The newest row this guard's writes saw: where the next heartbeat
    /// or the release starts (a stale one costs a conflict).
    row: Mutex<Row>,
    status: watch::Sender<Status>,
    /// When the grant was handed over here (for the hold-time metric).
    started: Instant,
    /// Where the lease counts from until the first heartbeat.
    lease_from: Instant,
    /// Scheduled, running, or stopped by whoever gives the hold back.
    heartbeat: Heartbeat,
}

impl Due for Shared {
    fn start(self: Arc<Self>) {
        self.heartbeat
            .start(|| tokio::spawn(heartbeat(self.clone(), self.lease_from)));
    }
}

impl Shared {
    fn lose(&self, reason: LostReason) {
        self.status.send_if_modified(|status| {
            if *status == Status::Held {
                tracing::warn!(rwlock = %self.sem.key.as_str(), token = self.token, %reason, "rwlock hold lost");
                *status = Status::Lost(reason);
                crate::metrics::lost(crate::metrics::Recipe::RwLock, &self.sem.name, reason);
                true
            } else {
                false
            }
        });
    }

    fn row(&self) -> Row {
        self.row
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn keep(&self, row: Row) {
        let mut held = self
            .row
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if row.version > held.version {
            *held = row;
        }
    }
}

/// The common part of both guards.
pub(crate) struct Guard {
    shared: Arc<Shared>,
    /// Given back already (released).
    done: bool,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("rwlock", &self.shared.sem.key.as_str())
            .field("mode", &self.shared.mode)
            .field("token", &self.shared.token)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Guard {
    pub(crate) fn start(sem: Arc<Inner>, grant: Grant) -> Guard {
        let (status, _) = watch::channel(Status::Held);
        let heartbeat = Heartbeat::new(sem.beats.clone());
        let shared = Arc::new(Shared {
            sem,
            id: grant.id,
            mode: grant.mode,
            token: grant.token,
            row: Mutex::new(grant.row),
            status,
            started: Instant::now(),
            lease_from: grant.lease_from,
            heartbeat,
        });
        crate::metrics::acquired(crate::metrics::Recipe::RwLock, &shared.sem.name);
        let first_beat = grant.lease_from + shared.sem.lease / 3;
        let entry: Weak<Shared> = Arc::downgrade(&shared);
        shared.heartbeat.schedule(entry, first_beat);
        Guard {
            shared,
            done: false,
        }
    }

    pub(crate) fn token(&self) -> u64 {
        self.shared.token
    }

    pub(crate) fn is_held(&self) -> bool {
        *self.shared.status.borrow() == Status::Held
    }

    pub(crate) fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        crate::held::lost(&self.shared.status)
    }

    pub(crate) async fn release(mut self) -> Result<()> {
        self.done = true;
        stop_heartbeat(&self.shared).await;
        release(&self.shared).await
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return; // released already
        }
        let shared = self.shared.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    stop_heartbeat(&shared).await;
                    if let Err(err) = release(&shared).await {
                        tracing::debug!(error = %err, "release on drop failed; the lease will expire");
                    }
                });
            }
            Err(_) => {
                if let Some(task) = shared.heartbeat.stop() {
                    task.abort();
                }
                tracing::warn!(
                    rwlock = %shared.sem.key.as_str(),
                    "guard dropped outside a runtime; it frees when its lease expires"
                );
            }
        }
    }
}

/// Stop the heartbeat and wait until it is gone: no heartbeat write is in
/// flight once this returns (the release then starts from the newest row).
async fn stop_heartbeat(shared: &Shared) {
    if let Some(task) = shared.heartbeat.stop() {
        task.abort();
        // Cancelled (or finished, if it had found the hold lost): either
        // way it is over.
        let _ = task.await;
    }
}

async fn release(shared: &Shared) -> Result<()> {
    let (id, token) = (shared.id.as_str(), shared.token);
    let updated = shared
        .sem
        .update(Some(shared.row()), None, |state| state.release(id, token))
        .await;
    match updated {
        Ok(Updated::Applied { granted, row, .. }) => {
            shared.status.send_replace(Status::Released);
            crate::metrics::released(
                crate::metrics::Recipe::RwLock,
                &shared.sem.name,
                shared.started.elapsed(),
            );
            shared.sem.row.announce(&granted, &row).await;
            Ok(())
        }
        Ok(Updated::Unchanged { row }) => {
            shared.lose(match row {
                Some(_) => LostReason::Evicted,
                None => LostReason::RowGone,
            });
            Err(lost_error(shared))
        }
        Err(err) => {
            if matches!(err.kind(), ErrorKind::Corrupt | ErrorKind::Config) {
                shared.lose(LostReason::RowGone);
            }
            Err(err)
        }
    }
}

fn lost_error(shared: &Shared) -> Error {
    Error::new(
        ErrorKind::Lost,
        RECIPE,
        format!(
            "{} hold of {} (token {}) was no longer held",
            shared.mode,
            shared.sem.key.as_str(),
            shared.token
        ),
    )
}

/// Renew the lease every lease/3 until the guard goes or is lost. The
/// lease is counted from the send time of the last applied heartbeat,
/// which is never later than when any observer started counting.
async fn heartbeat(shared: Arc<Shared>, mut last_sent: Instant) {
    let lease = shared.sem.lease;
    let period = lease / 3;
    let retry = (lease / 10).max(Duration::from_millis(5));
    let mut next = last_sent + period;
    loop {
        tokio::time::sleep_until(next).await;
        let deadline = last_sent + lease;
        if Instant::now() >= deadline {
            shared.lose(LostReason::LeaseExpired);
            return;
        }
        let row = shared.row();
        let mut state = match RwLockState::decode(&row) {
            Ok(state) => state,
            Err(_) => {
                shared.lose(LostReason::RowGone);
                return;
            }
        };
        if !state.holds(&shared.id, shared.token) {
            shared.lose(LostReason::Evicted);
            return;
        }
        state.beat(&shared.id);
        let sent = Instant::now();
        let write = shared.sem.put(Some(&row), &state);
        let outcome = tokio::select! {
            outcome = write => outcome,
            () = tokio::time::sleep_until(deadline) => {
                shared.lose(LostReason::LeaseExpired);
                return;
            }
        };
        match outcome {
            Ok(PutOutcome::Applied(row)) => {
                last_sent = sent;
                next = sent + period;
                shared.keep(row);
            }
            Ok(PutOutcome::Conflict(Some(row))) => match RwLockState::decode(&row) {
                Ok(now) if now.holds(&shared.id, shared.token) => {
                    // Another client changed the row: beat again on it now.
                    shared.keep(row);
                    next = Instant::now();
                }
                Ok(_) => {
                    shared.lose(LostReason::Evicted);
                    return;
                }
                Err(_) => {
                    shared.lose(LostReason::RowGone);
                    return;
                }
            },
            Ok(PutOutcome::Conflict(None)) => {
                shared.lose(LostReason::RowGone);
                return;
            }
            Err(err) => {
                tracing::debug!(error = %err, "rwlock heartbeat failed; retrying");
                // Keep trying until the lease is really over.
                next = (Instant::now() + retry).min(deadline);
            }
        }
    }
}

macro_rules! guard {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(pub(crate) Guard);

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
            /// Errors with [`ErrorKind::Lost`] if the hold was no longer
            /// this guard's (its lease ran out and a waiter evicted it):
            /// whatever was done under it may have overlapped a writer —
            /// fencing tokens tell.
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
