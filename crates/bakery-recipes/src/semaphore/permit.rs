//! The holder's side: the permit, its heartbeat and the lost-permit signal.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bakery_core::{Error, ErrorKind, PutOutcome, Result, Row};
use tokio::sync::watch;

use crate::beats::{Due, Heartbeat};
use crate::held::Status;
use tokio::time::Instant;

use super::state::{SemaphoreState, RECIPE};
use super::{Inner, Updated};
use crate::lock::LostReason;

/// A grant as the acquire loop hands it over.
pub(crate) struct Grant {
    pub(crate) id: String,
    pub(crate) token: u64,
    /// A row in which `id` holds the permit.
    pub(crate) row: Row,
    /// Where the lease counts from: the send time of the write that took
    /// the permit, or of the last request whose reply did not show it
    /// granted (a hand-off committed after that).
    pub(crate) lease_from: Instant,
}

struct Shared {
    sem: Arc<Inner>,
    id: String,
    token: u64,
    /// The newest row this permit's writes saw: where the next heartbeat
    /// or the release starts (a stale one costs a conflict).
    row: Mutex<Row>,
    status: watch::Sender<Status>,
    /// When the grant was handed over here (for the hold-time metric).
    started: Instant,
    /// Where the lease counts from until the first heartbeat.
    lease_from: Instant,
    /// Scheduled, running, or stopped by whoever gives the permit back.
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
                tracing::warn!(semaphore = %self.sem.key.as_str(), token = self.token, %reason, "permit lost");
                *status = Status::Lost(reason);
                crate::metrics::lost(crate::metrics::Recipe::Semaphore, &self.sem.name, reason);
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
pub struct Permit {
    shared: Arc<Shared>,
    /// Given back already (released).
    done: bool,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("semaphore", &self.shared.sem.key.as_str())
            .field("token", &self.shared.token)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Permit {
    pub(crate) fn start(sem: Arc<Inner>, grant: Grant) -> Permit {
        let (status, _) = watch::channel(Status::Held);
        let heartbeat = Heartbeat::new(sem.beats.clone());
        let shared = Arc::new(Shared {
            sem,
            id: grant.id,
            token: grant.token,
            row: Mutex::new(grant.row),
            status,
            started: Instant::now(),
            lease_from: grant.lease_from,
            heartbeat,
        });
        crate::metrics::acquired(crate::metrics::Recipe::Semaphore, &shared.sem.name);
        let first_beat = grant.lease_from + shared.sem.lease / 3;
        let entry: Weak<Shared> = Arc::downgrade(&shared);
        shared.heartbeat.schedule(entry, first_beat);
        Permit {
            shared,
            done: false,
        }
    }

    /// The fencing token of this grant: larger than that of every earlier
    /// grant of the same semaphore (each grant of a permit takes the next
    /// token). Up to N permits are held at once, so their tokens differ:
    /// fence a resource that one permit at a time uses (e.g. one of N
    /// slots) by rejecting tokens lower than the highest it has seen
    /// ([`FencedValue`](crate::fence::FencedValue)).
    pub fn token(&self) -> u64 {
        self.shared.token
    }

    /// True until the permit is released or learns it is lost.
    pub fn is_held(&self) -> bool {
        *self.shared.status.borrow() == Status::Held
    }

    /// Completes when the permit learns it is no longer its own: a
    /// heartbeat found it gone (evicted by a waiter after a lease of
    /// silence), or heartbeats failed for a whole lease. Never completes
    /// while the permit is held (nor after `release`). The future is
    /// independent of the permit (`'static`), so it can be raced against
    /// the work done under it.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        crate::held::lost(&self.shared.status)
    }

    /// Give the permit back; in the same write, the first waiter in the
    /// queue is granted it (with the next token).
    ///
    /// Errors with [`ErrorKind::Lost`] if the permit was no longer this
    /// one's (its lease ran out and a waiter evicted it): whatever was done
    /// under it may have overlapped another holder — fencing tokens tell.
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        stop_heartbeat(&self.shared).await;
        release(&self.shared).await
    }
}

impl Drop for Permit {
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
                    semaphore = %shared.sem.key.as_str(),
                    "permit dropped outside a runtime; it frees when its lease expires"
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
        // Cancelled (or finished, if it had found the permit lost): either
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
                crate::metrics::Recipe::Semaphore,
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
            "permit of semaphore {} (token {}) was no longer held",
            shared.sem.key.as_str(),
            shared.token
        ),
    )
}

/// Renew the lease every lease/3 until the permit goes or is lost. The
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
        let mut state = match SemaphoreState::decode(&row) {
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
            Ok(PutOutcome::Conflict(Some(row))) => match SemaphoreState::decode(&row) {
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
                tracing::debug!(error = %err, "permit heartbeat failed; retrying");
                // Keep trying until the lease is really over.
                next = (Instant::now() + retry).min(deadline);
            }
        }
    }
}
