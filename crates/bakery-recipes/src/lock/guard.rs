//! The holder's side: the guard, its heartbeat and the lost-lock signal.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bakery_core::{Error, ErrorKind, PutOutcome, Result, Row};
use tokio::sync::watch;

use crate::beats::{Due, Heartbeat};
use crate::held::{renew_lease, HeldRow, Renew, Status};
use tokio::time::Instant;

use crate::grant::LostReason;

use super::combine::Request;
use super::state::LockState;
use super::{put_state, LockInner};

/// A grant as the acquire loop hands it over.
pub(crate) struct Grant {
    id: Arc<str>,
    token: u64,
    row: Row,
    /// Send time of the write that granted or claimed the lock: the lease
    /// is counted from here, never from the reply.
    beat_sent: Instant,
}

impl Grant {
    /// `token` is `row`'s (a guard holding the decoded state would make
    /// the writer copy it to release).
    pub(crate) fn new(id: Arc<str>, row: &Row, token: u64, beat_sent: Instant) -> Grant {
        Grant {
            id,
            token,
            row: row.clone(),
            beat_sent,
        }
    }
}

struct Shared {
    lock: Arc<LockInner>,
    id: Arc<str>,
    token: u64,
    /// The newest row of the lock this grant was seen in.
    held: HeldRow,
    status: watch::Sender<Status>,
    /// When the grant was written (sent): `lock_at_least_for` counts from
    /// here.
    granted: Instant,
    /// When the hold must end (`lock_at_most_for`, moved by `extend`).
    limit: watch::Sender<Option<Instant>>,
    /// Guards sharing this grant (more than one only for a reentrant lock):
    /// the last to go releases.
    holds: AtomicUsize,
    /// The heartbeat: scheduled, running, or stopped by whoever releases.
    heartbeat: Heartbeat,
}

impl Due for Shared {
    fn start(self: Arc<Self>) {
        self.start_heartbeat();
    }
}

impl Renew for Shared {
    type State = LockState;

    fn lease(&self) -> Duration {
        self.lock.lease
    }

    fn key(&self) -> &str {
        self.lock.key.as_str()
    }

    fn held(&self) -> &HeldRow {
        &self.held
    }

    fn ours(&self, row: &Row) -> Result<Option<LockState>> {
        // Through the writer's cache: the row is often one it wrote.
        let state = self.lock.writer.decoded(row)?;
        Ok(
            (state.held_by(&self.id) && state.token == self.token)
                .then(|| LockState::clone(&state)),
        )
    }

    async fn renew(&self, row: &Row, mut state: LockState) -> Result<PutOutcome> {
        state.beat();
        put_state(&self.lock, Some(row), &state).await
    }

    /// Sleep until `at`, unless the hold limit (which `extend` may move)
    /// comes first: then release at the limit and stop beating.
    async fn wait(&self, at: Instant) -> bool {
        let mut limit = self.limit.subscribe();
        loop {
            let until = *limit.borrow_and_update();
            tokio::select! {
                () = tokio::time::sleep_until(at) => return true,
                () = sleep_until_some(until) => {
                    hold_limit(self).await;
                    return false;
                }
                // `extend` moved the limit: sleep again with the new one.
                Ok(()) = limit.changed() => {}
            }
        }
    }

    fn lose(&self, reason: LostReason) {
        self.status.send_if_modified(|status| {
            if *status == Status::Held {
                tracing::warn!(lock = %self.lock.key.as_str(), token = self.token, %reason, "lock lost");
                crate::metrics::lock_lost(&self.lock.name, reason);
                *status = Status::Lost(reason);
                true
            } else {
                false
            }
        });
    }
}

impl Shared {
    /// Start the heartbeat now if it has not started (nor stopped).
    fn start_heartbeat(self: &Arc<Self>) {
        self.heartbeat
            .start(|| tokio::spawn(renew_lease(self.clone(), self.granted)));
    }

    /// Stop the heartbeat for good (the grant is being given back).
    fn stop_heartbeat(&self) {
        if let Some(task) = self.heartbeat.stop() {
            task.abort();
        }
    }
}

/// Proof of holding a [`Lock`](super::Lock). A background task renews the
/// lease every lease/3 while the guard lives.
///
/// Release it with [`release`](Self::release). Dropping the guard releases
/// through the runtime when there is one; otherwise the lease expires.
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
pub struct LockGuard {
    shared: Arc<Shared>,
    /// This guard's hold was given back (released or dropped).
    done: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.shared.lock.key.as_str())
            .field("token", &self.shared.token)
            .field("held", &self.is_held())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn start(lock: Arc<LockInner>, grant: Grant) -> LockGuard {
        let (status, _) = watch::channel(Status::Held);
        let limit = lock.at_most.map(|at_most| grant.beat_sent + at_most);
        let heartbeat = Heartbeat::new(lock.beats.clone());
        let shared = Arc::new(Shared {
            lock,
            id: grant.id,
            token: grant.token,
            held: HeldRow::new(grant.row),
            status,
            granted: grant.beat_sent,
            limit: watch::Sender::new(limit),
            holds: AtomicUsize::new(1),
            heartbeat,
        });
        // The first beat, or the hold limit if that comes first.
        let first = grant.beat_sent + shared.lock.lease / 3;
        let due = limit.map_or(first, |limit| limit.min(first));
        let entry: Weak<Shared> = Arc::downgrade(&shared);
        shared.heartbeat.schedule(entry, due);
        shared.lock.task_holds.record(&shared);
        LockGuard {
            shared,
            done: false,
        }
    }

    /// Give this guard's hold back: `true` if it was the last one (the
    /// caller then releases the grant).
    fn give_back(&mut self) -> bool {
        if std::mem::replace(&mut self.done, true) {
            return false;
        }
        self.shared.holds.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// The fencing token of this grant: larger than every earlier grant's of
    /// the same lock. Pass it to whatever you write under the lock and have
    /// the writer reject smaller ones ([`FencedValue`](crate::fence::FencedValue)).
    pub fn token(&self) -> u64 {
        self.shared.token
    }

    /// True until the guard is released or learns the lock is lost.
    pub fn is_held(&self) -> bool {
        *self.shared.status.borrow() == Status::Held
    }

    /// Completes when the guard learns the lock is no longer its own: a
    /// heartbeat found another holder, or heartbeats failed for a whole
    /// lease. Never completes while the lock is held (nor after `release`).
    /// The future is independent of the guard (`'static`), so it can be
    /// raced against the critical section.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        crate::held::lost(&self.shared.status)
    }

    /// Hold the grant at most `at_most` from now (a job lock's manual
    /// extend): replaces the limit set by
    /// [`LockBuilder::lock_at_most_for`](super::LockBuilder::lock_at_most_for),
    /// or sets one. The lease keeps being renewed until then.
    ///
    /// Errors with [`ErrorKind::Lost`] if the guard no longer holds the lock.
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
        if !self.is_held() {
            return Err(lost_error(&self.shared));
        }
        self.shared
            .limit
            .send_replace(Some(Instant::now() + at_most));
        // The running heartbeat follows the limit; one not started yet
        // might start too late for it.
        self.shared.start_heartbeat();
        Ok(())
    }

    /// Release the lock, handing it to the first waiter in the same write.
    /// With [`lock_at_least_for`](super::LockBuilder::lock_at_least_for), a
    /// release earlier than that after the grant first waits out the rest
    /// (still renewing the lease).
    ///
    /// Errors with [`ErrorKind::Lost`] if the lock was no longer this
    /// guard's (its lease ran out and it was evicted, or its
    /// `lock_at_most_for` passed): whatever was done under it may have
    /// overlapped another holder — fencing tokens tell.
    ///
    /// A guard of a [reentrant](super::LockBuilder::reentrant) lock that
    /// shares its grant with others releases only its own hold; the last
    /// one releases the lock.
    pub async fn release(mut self) -> Result<()> {
        if !self.give_back() {
            return if self.is_held() {
                Ok(())
            } else {
                Err(lost_error(&self.shared))
            };
        }
        finish(&self.shared).await
    }
}

/// The grants that tasks of this process hold through one lock handle (and
/// its clones), by task: what a reentrant acquire shares.
#[derive(Default)]
pub(crate) struct TaskHolds {
    by_task: Mutex<HashMap<Caller, Weak<Shared>>>,
}

/// Who is asking: a tokio task, or the future a runtime's `block_on` runs
/// on the calling thread (which has no task id and never moves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Caller {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Caller {
    fn current() -> Caller {
        match tokio::task::try_id() {
            Some(task) => Caller::Task(task),
            None => Caller::Thread(std::thread::current().id()),
        }
    }
}

impl TaskHolds {
    fn record(&self, shared: &Arc<Shared>) {
        let task = Caller::current();
        let Ok(mut by_task) = self.by_task.lock() else {
            return;
        };
        by_task.retain(|_, held| held.upgrade().is_some_and(|held| held.is_held()));
        by_task.insert(task, Arc::downgrade(shared));
    }

    /// The grant the current task holds, if any.
    fn current(&self) -> Option<Arc<Shared>> {
        let task = Caller::current();
        let by_task = self.by_task.lock().ok()?;
        by_task
            .get(&task)
            .and_then(Weak::upgrade)
            .filter(|held| held.is_held() && held.holds.load(Ordering::SeqCst) > 0)
    }

    /// For a reentrant lock: another guard on the grant the current task
    /// holds. Otherwise `None`, with a warning if the task holds one (its
    /// acquire will wait for itself, unless that guard moved to another
    /// task that releases it).
    pub(crate) fn reenter(&self, reentrant: bool, name: &str) -> Option<LockGuard> {
        let held = self.current()?;
        if !reentrant {
            tracing::warn!(lock = %name, token = held.token, "this task already holds the lock: acquiring again waits for its own release (build the lock with .reentrant(true) to share the grant)");
            return None;
        }
        held.holds.fetch_add(1, Ordering::SeqCst);
        Some(LockGuard {
            shared: held,
            done: false,
        })
    }
}

impl Shared {
    fn is_held(&self) -> bool {
        *self.status.borrow() == Status::Held
    }
}

/// Keep the grant until `lock_at_least_for` has passed (or it is lost),
/// then stop the heartbeat and release.
async fn finish(shared: &Arc<Shared>) -> Result<()> {
    let keep_until = shared.granted + shared.lock.at_least;
    if Instant::now() < keep_until && *shared.status.borrow() == Status::Held {
        let mut status = shared.status.subscribe();
        let lost = status.wait_for(|status| *status != Status::Held);
        let _ = tokio::time::timeout_at(keep_until, lost).await;
    }
    shared.stop_heartbeat();
    let again = shared.clone();
    crate::give_back::release("lock", &shared.lock.name, move || {
        let shared = again.clone();
        async move { release(&shared).await }
    })
    .await
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.give_back() {
            return; // released already, or other guards share the grant
        }
        let shared = self.shared.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(err) = finish(&shared).await {
                        tracing::debug!(error = %err, "release on drop failed; the lease will expire");
                    }
                });
            }
            Err(_) => {
                shared.stop_heartbeat();
                tracing::warn!(
                    lock = %shared.lock.key.as_str(),
                    "guard dropped outside a runtime; the lock frees when its lease expires"
                );
            }
        }
    }
}

async fn release(shared: &Shared) -> Result<()> {
    let row = shared.held.get();
    let request = Request::Release {
        id: shared.id.clone(),
        token: shared.token,
    };
    // Through the process's writer: the release shares a write with the
    // enqueues of this process's other clients instead of conflicting with
    // them; it hands the lock on and tells the next holder.
    let sent = Instant::now();
    let written = match shared.lock.writer.submit(request, Some(&row), None).await {
        Ok(written) => written,
        Err(err) => {
            if err.kind() == ErrorKind::Corrupt {
                shared.lose(LostReason::RowGone);
            }
            return Err(err);
        }
    };
    if written.applied {
        shared.status.send_replace(Status::Released);
        if let Some(next) = &written.head.holder {
            shared.lock.writer.handed_on(&next.id, sent);
        }
        crate::metrics::lock_released(
            &shared.lock.name,
            shared.granted.elapsed(),
            written.head.holder.is_some(),
        );
        if written.tell_others {
            shared.lock.writer.notify_others().await;
        }
        return Ok(());
    }
    // Refused on a row the store returned: no longer ours.
    shared.lose(match written.row {
        Some(_) => LostReason::Evicted,
        None => LostReason::RowGone,
    });
    Err(lost_error(shared))
}

fn lost_error(shared: &Shared) -> Error {
    Error::new(
        ErrorKind::Lost,
        "lock",
        format!(
            "lock {} (token {}) was no longer held by this guard",
            shared.lock.key.as_str(),
            shared.token
        ),
    )
}

/// Sleep until `at`, or forever if `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The grant reached its `lock_at_most_for`: release it (handing it on),
/// then report the loss to the job.
async fn hold_limit(shared: &Shared) {
    tracing::warn!(lock = %shared.lock.key.as_str(), token = shared.token, "lock_at_most_for reached; releasing");
    match release(shared).await {
        Ok(()) => {
            shared
                .status
                .send_replace(Status::Lost(LostReason::HoldLimit));
            crate::metrics::lock_lost(&shared.lock.name, LostReason::HoldLimit);
        }
        // Lost already (`release` said why), or the write failed: renewals
        // have stopped either way, so the lease ends the hold.
        Err(err) => {
            tracing::debug!(error = %err, "release at the hold limit failed");
            shared.lose(LostReason::HoldLimit);
        }
    }
}
