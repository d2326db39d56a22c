//! The holder's side: a grant held under a lease ([`Hold`]), its heartbeat,
//! its release, its hold limits (`lock_at_most_for`, `lock_at_least_for`)
//! and the lost signal; and the grants a task holds, for a reentrant lock
//! ([`TaskHolds`]). The public guards (`LockGuard`, `Permit`, `ReadGuard`,
//! `WriteGuard`) wrap a [`Hold`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bakery_core::{Error, ErrorKind, PutOutcome, Result, Row};
use tokio::sync::watch;
use tokio::time::Instant;

use super::acquire::Grant;
use super::handle::QueueHandle;
use super::lease::{renew_lease, HeldRow, Renew, Status};
use super::writer::Request;
use crate::beats::{Due, Heartbeat};
use crate::grant::LostReason;

/// A public guard type wrapping a [`Hold`]: `$name` holds a `$what` grant
/// (for the docs), with `token`, `is_held`, `lost` and `release`. The
/// recipe adds what only it has (the lock's `extend`).
macro_rules! guard {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        pub struct $name(pub(crate) $crate::queue::hold::Hold);

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("row", &self.0.key())
                    .field("token", &self.token())
                    .field("held", &self.is_held())
                    .finish()
            }
        }

        impl $name {
            #[doc = concat!("The fencing token of this ", $what, " grant: larger than that of every")]
            /// earlier grant of the same row. Holders that hold together (a
            /// semaphore's permits, readers) have different tokens; fence a
            /// resource by rejecting writes with a token lower than the
            /// highest it has seen ([`FencedValue`](crate::fence::FencedValue)).
            pub fn token(&self) -> u64 {
                self.0.token()
            }

            /// True until the guard is released or learns it is lost.
            pub fn is_held(&self) -> bool {
                self.0.is_held()
            }

            /// Completes when the guard learns the grant is no longer its
            /// own: a heartbeat found it gone (evicted by a waiter after a
            /// lease of silence), or heartbeats failed for a whole lease.
            /// Never completes while it is held (nor after `release`). The
            /// future is independent of the guard (`'static`), so it can
            /// be raced against the work done under it.
            pub fn lost(
                &self,
            ) -> impl std::future::Future<Output = $crate::grant::LostReason> + Send + 'static {
                self.0.lost()
            }

            /// Give the grant back; in the same write, the head of the
            /// queue is granted (with the readers right behind a reader
            /// head), each with the next token, if the remaining holders
            /// allow. A lock's `lock_at_least_for` first waits out its
            /// rest; a reentrant lock's guard that shares its grant
            /// releases only itself, the last one the grant.
            ///
            /// Errors with [`ErrorKind::Lost`](bakery_core::ErrorKind::Lost)
            /// if the grant was no longer this guard's (its lease ran out
            /// and a waiter evicted it, or its `lock_at_most_for` passed):
            /// whatever was done under it may have overlapped another
            /// holder — fencing tokens tell.
            pub async fn release(self) -> bakery_core::Result<()> {
                self.0.release().await
            }
        }
    };
}
pub(crate) use guard;

struct Shared {
    handle: Arc<QueueHandle>,
    /// What is held, for messages: "lock", "permit", "read hold", "write
    /// hold".
    what: &'static str,
    id: Arc<str>,
    token: u64,
    /// The newest row this grant was seen in.
    held: HeldRow,
    status: watch::Sender<Status>,
    /// Where the lease counts from until the first heartbeat (the send
    /// time of the write that granted it); `lock_at_least_for` counts from
    /// here too.
    granted: Instant,
    /// Where the lease counts from now: the send time of the last applied
    /// beat (first `granted`). No observer starts counting earlier.
    lease_from: Mutex<Instant>,
    /// When the hold must end (`lock_at_most_for`, moved by `extend`).
    limit: watch::Sender<Option<Instant>>,
    /// Holds sharing this grant (more than one only for a reentrant lock):
    /// the last to go releases.
    holds: AtomicUsize,
    /// Scheduled, running, or stopped by whoever gives the hold back.
    heartbeat: Heartbeat,
    /// The row's mark (`QueueState::mark`) this hold's beats carry, and
    /// what they stored.
    mark: Marks,
}

/// What computes the mark each beat carries.
type MarkSource = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A hold's side of its row's mark.
struct Marks {
    /// The row's mark in the row that granted the hold.
    granted: Option<u64>,
    source: Mutex<Option<MarkSource>>,
    /// The mark of the beat in flight.
    sending: Mutex<Option<u64>>,
    /// The highest mark a beat of this hold stored.
    stored: watch::Sender<Option<u64>>,
    /// Asks the heartbeat to beat at once.
    beat_now: tokio::sync::Notify,
    /// The mark the release sets.
    at_release: Mutex<Option<u64>>,
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Due for Shared {
    fn start(self: Arc<Self>) {
        self.start_heartbeat();
    }
}

impl Renew for Shared {
    fn lease(&self) -> Duration {
        self.handle.lease
    }

    fn key(&self) -> &str {
        self.handle.key.as_str()
    }

    fn held(&self) -> &HeldRow {
        &self.held
    }

    fn ours(&self, row: &Row) -> Result<bool> {
        // Through the writer's cache: the row is often one it wrote.
        let head = self.handle.writer.head(row)?;
        Ok(head.token_of(&self.id) == Some(self.token))
    }

    /// Through the process's writer: the beat shares a write with the
    /// process's other requests instead of conflicting with them.
    async fn renew(&self, row: &Row) -> Result<PutOutcome> {
        let mark = locked(&self.mark.source).as_ref().map(|source| source());
        *locked(&self.mark.sending) = mark;
        let request = Request::Beat {
            id: self.id.clone(),
            token: self.token,
            mark,
        };
        let written = self.handle.writer.submit(request, Some(row), None).await?;
        Ok(match (written.applied, written.row) {
            (true, Some(row)) => PutOutcome::Applied(row),
            (_, row) => PutOutcome::Conflict(row),
        })
    }

    /// Sleep until `at`, unless the hold limit (which `extend` may move)
    /// comes first: then release at the limit and stop beating.
    async fn wait(&self, at: Instant) -> bool {
        let mut limit = self.limit.subscribe();
        loop {
            let until = *limit.borrow_and_update();
            tokio::select! {
                () = tokio::time::sleep_until(at) => return true,
                () = self.mark.beat_now.notified() => return true,
                () = sleep_until_some(until) => {
                    hold_limit(self).await;
                    return false;
                }
                // `extend` moved the limit: sleep again with the new one.
                Ok(()) = limit.changed() => {}
            }
        }
    }

    fn renewed(&self, sent: Instant) {
        let mut from = locked(&self.lease_from);
        *from = (*from).max(sent);
        drop(from);
        let sent_mark = *locked(&self.mark.sending);
        if sent_mark.is_some() {
            self.mark.stored.send_if_modified(|stored| {
                let raised = (*stored).max(sent_mark);
                std::mem::replace(stored, raised) != raised
            });
        }
    }

    fn lose(&self, reason: LostReason) {
        self.status.send_if_modified(|status| {
            if *status == Status::Held {
                tracing::warn!(row = %self.key(), what = self.what, token = self.token, %reason, "grant lost");
                crate::metrics::lost(self.handle.recipe(), &self.handle.name, reason);
                *status = Status::Lost(reason);
                true
            } else {
                false
            }
        });
    }
}

impl Shared {
    /// When the lease could end as anyone else sees it ([`Hold::lease_ends`]).
    fn lease_ends(&self) -> Instant {
        *locked(&self.lease_from) + self.handle.lease
    }

    /// Start the heartbeat now if it has not started (nor stopped).
    fn start_heartbeat(self: &Arc<Self>) {
        self.heartbeat
            .start(|| tokio::spawn(renew_lease(self.clone(), self.granted)));
    }

    fn is_held(&self) -> bool {
        *self.status.borrow() == Status::Held
    }
}

/// A grant held until released or lost.
pub(crate) struct Hold {
    shared: Arc<Shared>,
    /// This hold was given back (released or dropped).
    done: bool,
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(self.shared.what)
            .field("row", &self.shared.handle.key.as_str())
            .field("token", &self.shared.token)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Hold {
    /// Hold `grant` of `handle` (a `what`, for messages) and schedule its
    /// first heartbeat a third of a lease after the lease began (or its
    /// hold limit, if that comes first).
    pub(crate) fn start(handle: Arc<QueueHandle>, grant: Grant, what: &'static str) -> Hold {
        let (status, _) = watch::channel(Status::Held);
        let limit = handle.at_most.map(|at_most| grant.lease_from + at_most);
        let heartbeat = Heartbeat::new(handle.beats.clone());
        let first = grant.lease_from + handle.lease / 3;
        // (a row that granted was decoded already: the writer's cache)
        let granted_mark = handle.writer.mark(&grant.row).ok().flatten();
        let shared = Arc::new(Shared {
            handle,
            what,
            id: grant.id,
            token: grant.token,
            held: HeldRow::new(grant.row),
            status,
            granted: grant.lease_from,
            lease_from: Mutex::new(grant.lease_from),
            limit: watch::Sender::new(limit),
            holds: AtomicUsize::new(1),
            heartbeat,
            mark: Marks {
                granted: granted_mark,
                source: Mutex::new(None),
                sending: Mutex::new(None),
                stored: watch::Sender::new(None),
                beat_now: tokio::sync::Notify::new(),
                at_release: Mutex::new(None),
            },
        });
        let due = limit.map_or(first, |limit| limit.min(first));
        let entry: Weak<Shared> = Arc::downgrade(&shared);
        shared.heartbeat.schedule(entry, due);
        Hold {
            shared,
            done: false,
        }
    }

    /// The grant's fencing token.
    pub(crate) fn token(&self) -> u64 {
        self.shared.token
    }

    /// The key of the held row.
    pub(crate) fn key(&self) -> &str {
        self.shared.handle.key.as_str()
    }

    /// True until released or lost.
    pub(crate) fn is_held(&self) -> bool {
        self.shared.is_held()
    }

    /// When the lease could end as anyone else sees it: a lease after the
    /// send time of the last applied beat (or of the grant). A waiter
    /// counts a whole lease from a row it read after that beat applied.
    pub(crate) fn lease_ends(&self) -> Instant {
        self.shared.lease_ends()
    }

    /// The row's mark (`QueueState::mark`) in the row that granted this
    /// hold: what earlier holders left for it.
    pub(crate) fn granted_mark(&self) -> Option<u64> {
        self.shared.mark.granted
    }

    /// From now on each beat raises the row's mark to what `source` says
    /// when it is sent.
    pub(crate) fn mark_with(&self, source: impl Fn() -> u64 + Send + Sync + 'static) {
        *locked(&self.shared.mark.source) = Some(Arc::new(source));
    }

    /// The highest mark a beat of this hold stored.
    pub(crate) fn stored_mark(&self) -> Option<u64> {
        *self.shared.mark.stored.borrow()
    }

    /// Beat now (the beat renews the lease too, and the next one is due a
    /// third of a lease later) until a beat stored a mark of at least
    /// `at_least`. [`ErrorKind::Lost`] if the hold is lost first; a
    /// [`mark_with`](Self::mark_with) source that stays below it is
    /// [`ErrorKind::Internal`] after a few beats.
    pub(crate) async fn store_mark(&self, at_least: u64) -> Result<()> {
        const BEATS: usize = 3;
        let shared = &self.shared;
        let mut stored = shared.mark.stored.subscribe();
        let mut status = shared.status.subscribe();
        for _ in 0..BEATS {
            if stored.borrow_and_update().is_some_and(|m| m >= at_least) {
                return Ok(());
            }
            if !self.is_held() {
                return Err(lost_error(shared));
            }
            shared.start_heartbeat();
            shared.mark.beat_now.notify_one();
            tokio::select! {
                changed = stored.changed() => {
                    if changed.is_err() {
                        return Err(lost_error(shared));
                    }
                }
                _ = status.wait_for(|status| *status != Status::Held) => {
                    return Err(lost_error(shared));
                }
            }
        }
        if stored.borrow().is_some_and(|m| m >= at_least) {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Internal,
            shared.handle.recipe(),
            format!(
                "{BEATS} beats of {} stored no mark of at least {at_least}",
                shared.handle.key.as_str()
            ),
        ))
    }

    /// [`release`](Self::release), setting the row's mark to `mark` in
    /// the same write.
    pub(crate) async fn release_with_mark(self, mark: u64) -> Result<()> {
        *locked(&self.shared.mark.at_release) = Some(mark);
        self.release().await
    }

    /// Completes with the reason once the hold learns it is lost.
    pub(crate) fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        super::lease::lost(&self.shared.status)
    }

    /// Hold the grant at most `at_most` from now; the lease keeps being
    /// renewed until then. [`ErrorKind::Lost`] if it is no longer held.
    pub(crate) fn extend(&self, at_most: Duration) -> Result<()> {
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

    /// Give this hold back: `true` if it was the last one on its grant (the
    /// caller then releases the grant).
    fn give_back(&mut self) -> bool {
        if std::mem::replace(&mut self.done, true) {
            return false;
        }
        self.shared.holds.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// Give the grant back: the same write grants the waiters it frees.
    /// With `lock_at_least_for`, a release earlier than that after the
    /// grant first waits out the rest (still renewing the lease). A hold
    /// that shares its grant with others (a reentrant lock) releases only
    /// itself; the last one releases the grant.
    pub(crate) async fn release(mut self) -> Result<()> {
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

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.give_back() {
            return; // released already, or other holds share the grant
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
                if let Some(task) = shared.heartbeat.stop() {
                    task.abort();
                }
                tracing::warn!(
                    row = %shared.handle.key.as_str(),
                    what = shared.what,
                    "dropped outside a runtime; it frees when its lease expires"
                );
            }
        }
    }
}

/// Keep the grant until `lock_at_least_for` has passed (or it is lost),
/// then stop the heartbeat and release, tried again in the background on a
/// temporary error ([`super::give_back::release`]).
async fn finish(shared: &Arc<Shared>) -> Result<()> {
    let keep_until = shared.granted + shared.handle.at_least;
    if Instant::now() < keep_until && shared.is_held() {
        let mut status = shared.status.subscribe();
        let lost = status.wait_for(|status| *status != Status::Held);
        let _ = tokio::time::timeout_at(keep_until, lost).await;
    }
    if let Some(task) = shared.heartbeat.stop() {
        task.abort();
        // Cancelled (or finished, if it had found the hold lost): either
        // way no beat of it is under way once this returns.
        let _ = task.await;
    }
    let again = shared.clone();
    // Sent before the lease could end as anyone else sees it: nobody could
    // evict the grant before this first try arrived, so a later try that
    // finds it gone knows an earlier one gave it back.
    let in_lease = Instant::now() < shared.lease_ends();
    let mut tries = 0u32;
    super::give_back::release(shared.handle.recipe(), &shared.handle.name, move || {
        let shared = again.clone();
        tries += 1;
        let gone_is_released = tries > 1 && in_lease;
        async move { release(&shared, gone_is_released).await }
    })
    .await
}

/// One try of the release. `gone_is_released`: a grant found no longer
/// held (the row still there) was given back by an earlier try of this
/// release whose outcome was unknown, not lost.
async fn release(shared: &Shared, gone_is_released: bool) -> Result<()> {
    let handle = &shared.handle;
    let request = Request::Release {
        id: shared.id.clone(),
        token: shared.token,
        mark: *locked(&shared.mark.at_release),
    };
    // Through the process's writer: the release shares a write with the
    // enqueues of this process's other clients instead of conflicting with
    // them; it grants the next waiters and tells them.
    let written = match handle
        .writer
        .submit(request, Some(&shared.held.get()), None)
        .await
    {
        Ok(written) => written,
        Err(err) => {
            if matches!(err.kind(), ErrorKind::Corrupt | ErrorKind::Config) {
                shared.lose(LostReason::RowGone);
            }
            return Err(err);
        }
    };
    if written.applied {
        shared.status.send_replace(Status::Released);
        // Handed over by this write: unclaimed, with a later token.
        let handed = written
            .head
            .holders
            .iter()
            .find(|h| h.beat == 0 && h.token > shared.token);
        crate::metrics::released(
            handle.recipe(),
            &handle.name,
            shared.granted.elapsed(),
            handed.is_some(),
        );
        if written.tell_others {
            handle.writer.notify_others().await;
        }
        return Ok(());
    }
    if gone_is_released && written.row.is_some() {
        shared.status.send_replace(Status::Released);
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
        shared.handle.recipe(),
        format!(
            "{} of {} (token {}) was no longer held",
            shared.what,
            shared.handle.key.as_str(),
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
/// then report the loss to the holder.
async fn hold_limit(shared: &Shared) {
    tracing::warn!(row = %shared.handle.key.as_str(), token = shared.token, "lock_at_most_for reached; releasing");
    match release(shared, false).await {
        Ok(()) => {
            shared
                .status
                .send_replace(Status::Lost(LostReason::HoldLimit));
            crate::metrics::lost(
                shared.handle.recipe(),
                &shared.handle.name,
                LostReason::HoldLimit,
            );
        }
        // Lost already (`release` said why), or the write failed: renewals
        // have stopped either way, so the lease ends the hold.
        Err(err) => {
            tracing::debug!(error = %err, "release at the hold limit failed");
            shared.lose(LostReason::HoldLimit);
        }
    }
}

/// The grants that tasks of this process hold through one handle (and its
/// clones), by task: what a reentrant acquire shares.
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
    /// The current task holds `hold` now.
    pub(crate) fn record(&self, hold: &Hold) {
        let task = Caller::current();
        let Ok(mut by_task) = self.by_task.lock() else {
            return;
        };
        by_task.retain(|_, held| held.upgrade().is_some_and(|held| held.is_held()));
        by_task.insert(task, Arc::downgrade(&hold.shared));
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

    /// For a reentrant handle: another hold on the grant the current task
    /// holds. Otherwise `None`, with a warning if the task holds one (its
    /// acquire will wait for itself, unless that hold moved to another task
    /// that releases it).
    pub(crate) fn reenter(&self, reentrant: bool, name: &str) -> Option<Hold> {
        let held = self.current()?;
        if !reentrant {
            tracing::warn!(lock = %name, token = held.token, "this task already holds the lock: acquiring again waits for its own release (build the lock with .reentrant(true) to share the grant)");
            return None;
        }
        held.holds.fetch_add(1, Ordering::SeqCst);
        Some(Hold {
            shared: held,
            done: false,
        })
    }
}
