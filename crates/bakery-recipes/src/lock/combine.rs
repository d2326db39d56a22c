//! One writer per process and lock row: the process's enqueues, takes and
//! releases of a lock are combined into one conditional write.
//!
//! Every acquisition changes the lock's row twice (its enqueue and its
//! release), and with many clients those writes are in flight together:
//! each write that applies makes every other one in flight conflict, and a
//! conflict costs a round trip. Here a request joins a batch; one write at a
//! time applies the whole batch to the newest row this process knows (in
//! order, so FIFO holds), and on a conflict re-applies it to the row the
//! store returned. Clients in one process then never conflict with each
//! other, and a release often carries the next enqueues in the same write.
//! A request that finds no write under way writes at once from its own task
//! (an uncontended acquire stays one write); later requests are written by
//! a spawned task, so a cancelled caller never abandons someone else's
//! request. An enqueue behind a holder first yields once: the holder is
//! often a client of this process, just woken and about to release, and
//! its release then shares the enqueue's write (in a closed loop of
//! acquire and release, one write per acquisition instead of two).

use std::sync::{Arc, LazyLock, Mutex};

use bakery_core::{
    Bytes, Capabilities, Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::state::{Fragments, Head, LockState, Waiter};
use crate::arrival::{Arrival, Arrivals};
use crate::dispatch::{self, Wakes};
use crate::per_process::{slot, PerRow};
use crate::silence::Silence;

static WRITERS: LazyLock<PerRow<Writer>> = LazyLock::new(PerRow::new);

/// The token and holder stored in `row` of lock `key`: from this process's
/// writer's cache when it has that value, else decoded without the queue.
fn head(
    store: &Arc<dyn VersionedStore>,
    key: &Key,
    notifications: bool,
    row: &Row,
) -> Result<Head> {
    match WRITERS.get(&slot(store, key, notifications)) {
        Some(writer) => writer.head(row),
        None => LockState::decode_head(row),
    }
}

/// The waiter a lock row grants, for the process's dispatcher: its holder,
/// read through the process's writer (which knows the rows it wrote).
pub(crate) fn grantees(
    store: &Arc<dyn VersionedStore>,
    key: &Key,
    notifications: bool,
) -> dispatch::Grantees {
    let (store, key) = (store.clone(), key.clone());
    Arc::new(move |row| {
        let head = head(&store, &key, notifications, row)?;
        Ok(head.holder.iter().map(|holder| holder.id.clone()).collect())
    })
}

/// A change a client asks for.
#[derive(Debug, Clone)]
pub(crate) enum Request {
    /// Take the lock if it is free; otherwise change nothing.
    Take(Waiter),
    /// Take the lock if it is free, else join the queue (nothing if
    /// already holding or queued). `sent_before`: false for the first
    /// request of an acquisition, which cannot be queued yet (ids are
    /// unique per acquire), so a long queue is not searched for it.
    Join { waiter: Waiter, sent_before: bool },
    /// Hand the lock on, if `id` still holds it with `token`.
    Release { id: Arc<str>, token: u64 },
    /// Take request `id` out of the queue, or pass the lock on if it was
    /// handed to it. Written after any request of the same id still
    /// waiting here, so a cancelled enqueue cannot land after its withdrawal.
    Withdraw(Arc<str>),
}

impl Request {
    /// Apply to `state`; `Ok(true)` if it changed it.
    fn apply(&self, state: &mut LockState) -> Result<bool> {
        match self {
            Request::Take(waiter) => {
                if !state.is_free() {
                    return Ok(false);
                }
                state.take(waiter)?;
            }
            Request::Join {
                waiter,
                sent_before,
            } => {
                if state.held_by(&waiter.id) || (*sent_before && state.queued(&waiter.id)) {
                    return Ok(false);
                }
                if state.is_free() {
                    state.take(waiter)?;
                } else {
                    state.queue.push_back(waiter.clone());
                }
            }
            Request::Release { id, token } => {
                if !state.held_by(id) || state.token != *token {
                    return Ok(false);
                }
                state.hand_off()?;
            }
            Request::Withdraw(id) => {
                if !state.held_by(id) && !state.queued(id) {
                    return Ok(false);
                }
                state.withdraw(id)?;
            }
        }
        Ok(true)
    }
}

/// The row a request's write left (or, if it changed nothing, the current
/// row, freshly read or returned by the store).
#[derive(Debug)]
pub(crate) struct Written {
    /// `None`: the row does not exist.
    pub(crate) row: Option<Row>,
    /// The token and holder of `row` (not its queue: a client that kept
    /// the whole state would make the next write copy it).
    pub(crate) head: Head,
    /// Send time of the call that returned `row`.
    pub(crate) sent: Instant,
    /// Whether this request changed the state (false: nothing to do, or
    /// refused — decided on a row the store returned, never a cached one).
    pub(crate) applied: bool,
    /// The write passed the lock on to a new holder that does not wait in
    /// this process: the caller whose release or withdrawal did it tells
    /// the other processes ([`Writer::notify_others`]). A holder waiting
    /// here was handed the row directly, and nobody else needs the news
    /// (the others go on waiting), so no notification is sent.
    pub(crate) tell_others: bool,
}

type Reply = oneshot::Sender<Result<Written>>;

/// What a write leaves to do, in this order (fields drop in declaration
/// order): wake the new holder waiting in this process, then drop the state
/// the write replaced (with a long queue the drop costs as much as the rest
/// of the write).
#[derive(Default)]
struct Handover {
    wakes: Wakes,
    replaced: Option<(Bytes, Arc<LockState>)>,
}

/// This process's writer for one lock row.
pub(crate) struct Writer {
    store: Arc<dyn VersionedStore>,
    key: Key,
    notifications: bool,
    queue: Mutex<Queue>,
    /// The last row value decoded or written here, with its state: the
    /// same row is read by the writer, the woken holder, the next acquire
    /// and the listener, and decoding a long queue costs more than a copy.
    decoded: Mutex<Option<(Bytes, Arc<LockState>)>>,
    /// The last release here that handed the lock on: to whom, and when
    /// it was sent (a hand-off's time is measured only within a process:
    /// across processes it would need synchronized clocks).
    handed: Mutex<Option<(String, Instant)>>,
    /// The queued waiters' JSON: only the entries that changed are encoded
    /// (one write at a time, so this lock is never contended).
    fragments: Mutex<Fragments>,
    /// The acquisitions of this process that have not sent their first
    /// request yet.
    arrivals: Arc<Arrivals>,
    /// What this process's waiters and tries saw of the holder's heartbeat.
    pub(crate) silence: Silence,
}

#[derive(Default)]
struct Queue {
    requests: Vec<(Request, Reply)>,
    writing: bool,
    /// The newest row known here: the next write expects its version.
    newest: Option<Row>,
}

impl Writer {
    /// The writer for this row, shared by every lock handle of the process.
    pub(crate) fn for_row(
        store: &Arc<dyn VersionedStore>,
        key: &Key,
        notifications: bool,
    ) -> Arc<Writer> {
        WRITERS.get_or_create(slot(store, key, notifications), || {
            Arc::new(Writer {
                store: store.clone(),
                key: key.clone(),
                notifications,
                queue: Mutex::new(Queue::default()),
                decoded: Mutex::new(None),
                handed: Mutex::new(None),
                fragments: Mutex::new(Fragments::default()),
                arrivals: Arc::default(),
                silence: Silence::default(),
            })
        })
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new acquisition of this process: its place in the process's order.
    pub(crate) fn arrive(&self) -> Arrival {
        self.arrivals.arrive()
    }

    /// Apply `request` in the next write; `known` is the newest row the
    /// caller has seen (a hint: a stale one only costs a conflict). The
    /// first request of an acquisition passes its `arrival`: it is sent
    /// after those of the process's earlier acquisitions.
    pub(crate) async fn submit(
        self: &Arc<Self>,
        request: Request,
        known: Option<&Row>,
        arrival: Option<&mut Arrival>,
    ) -> Result<Written> {
        let (reply, answer) = oneshot::channel();
        let mut reply = Some(reply);
        let joins = matches!(request, Request::Join { .. });
        let mut arrival = arrival;
        if let Some(arrival) = arrival.as_deref_mut() {
            arrival.earlier_gone().await;
        }
        let alone = {
            let mut queue = self.queue();
            if let Some(known) = known {
                if queue
                    .newest
                    .as_ref()
                    .is_none_or(|n| n.version < known.version)
                {
                    queue.newest = Some(known.clone());
                }
            }
            if !queue.writing && queue.requests.is_empty() {
                queue.writing = true;
                Some(queue.newest.clone())
            } else {
                if let Some(reply) = reply.take() {
                    queue.requests.push((request.clone(), reply));
                }
                if !queue.writing {
                    queue.writing = true;
                    tokio::spawn(self.clone().drain());
                }
                None
            }
        };
        // Placed: the process's later acquisitions may send theirs.
        if let Some(arrival) = arrival {
            arrival.depart();
        }
        if let Some(mut newest) = alone {
            // Nobody else is writing: write from this task. Dropped midway,
            // the turn still passes on (only this request was in it).
            let turn = Turn(self.clone());
            if let (true, Some(reply)) = (joins, reply) {
                // An enqueue behind a holder. The holder may be a client of
                // this process that the last write just woke, about to
                // release: let it run first, so its release and this
                // enqueue share one write instead of taking two in turn.
                tokio::task::yield_now().await;
                let joined = {
                    let mut queue = self.queue();
                    if queue.requests.is_empty() {
                        newest = queue.newest.clone();
                        false
                    } else {
                        // One write for all, ours first (it came first),
                        // by a spawned writer that our turn passes to.
                        queue.requests.insert(0, (request.clone(), reply));
                        true
                    }
                };
                if joined {
                    drop(turn);
                    return answer.await.unwrap_or_else(|_| Err(abandoned()));
                }
            }
            let (mut replies, handover) = self.write(vec![request], newest).await;
            drop(turn);
            // Wakes the new holder: it runs next on this thread once this
            // task yields.
            drop(handover);
            return replies.pop().unwrap_or_else(|| Err(abandoned()));
        }
        answer.await.unwrap_or_else(|_| Err(abandoned()))
    }

    /// Write batches until no request waits.
    async fn drain(self: Arc<Self>) {
        let _turn = Turn(self.clone());
        loop {
            let (batch, newest) = {
                let mut queue = self.queue();
                if queue.requests.is_empty() {
                    return;
                }
                (std::mem::take(&mut queue.requests), queue.newest.clone())
            };
            let (requests, replies): (Vec<Request>, Vec<Reply>) = batch.into_iter().unzip();
            let (results, Handover { wakes, replaced }) = self.write(requests, newest).await;
            if !wakes.is_empty() {
                // The new holder waits in this process: let it run before
                // the batch's callers are answered. Its release then
                // reaches the queue while this turn lasts, and shares the
                // next write with the enqueues of the clients answered
                // now. Answered first, they would often write alone, before
                // the release.
                drop(wakes);
                tokio::task::yield_now().await;
            }
            for (reply, result) in replies.into_iter().zip(results) {
                // A caller that gave up is not waiting for its answer.
                let _ = reply.send(result);
            }
            drop(replaced);
            // Let the clients just answered (and the holder the write
            // woke) run before the next batch is taken: a releaser asks
            // again at once, and the next holder releases; taken now, the
            // batch would often hold only one of the two, and the other
            // would need a write of its own (on etcd, whose watch may wake
            // the next holder before this write returned, most of all).
            tokio::task::yield_now().await;
        }
    }

    /// Apply `requests` in order to the newest row and write them in one
    /// conditional write, re-applying on conflict. One result per request.
    async fn write(
        &self,
        requests: Vec<Request>,
        newest: Option<Row>,
    ) -> (Vec<Result<Written>>, Handover) {
        let failed = |err: &Error| {
            let results = requests.iter().map(|_| Err(copy(err))).collect();
            (results, Handover::default())
        };
        let mut current = newest;
        // Send time of the call that returned `current`; `None`: cached.
        let mut returned_at: Option<Instant> = None;
        loop {
            let mut state = match &current {
                Some(row) => match self.decode(row) {
                    Ok(state) => state,
                    Err(err) => return failed(&err),
                },
                None => LockState::default(),
            };
            let mut outcomes = Vec::with_capacity(requests.len());
            let mut changed = false;
            let mut handed_on = false;
            for request in &requests {
                let holder = state.holder.as_ref().map(|h| h.id.clone());
                let outcome = request.apply(&mut state);
                if let Ok(true) = outcome {
                    changed = true;
                    // A release or withdrawal that passed the lock on.
                    handed_on |= matches!(request, Request::Release { .. } | Request::Withdraw(_))
                        && state.holder.is_some()
                        && state.holder.as_ref().map(|h| &h.id) != holder.as_ref();
                }
                outcomes.push(outcome);
            }
            let sent = Instant::now();
            if !changed {
                if let Some(at) = returned_at {
                    let results = finish(outcomes, &current, state.head(), at, false);
                    return (results, Handover::default());
                }
                // Nothing to do, as the cache says: believe it only from
                // the store.
                current = match self.store.get(&self.key).await {
                    Ok(row) => row,
                    Err(err) => return failed(&err),
                };
                returned_at = Some(sent);
                self.remember(current.as_ref());
                continue;
            }
            let encoded = match self.fragments.lock() {
                Ok(mut fragments) => state.encode_with(&mut fragments),
                Err(_) => state.encode(),
            };
            let value = match encoded {
                Ok(value) => value,
                Err(err) => return failed(&err),
            };
            let expected = current.as_ref().map(|row| row.version);
            let own = if self.notifications {
                dispatch::writing(&self.store, &self.key, &value)
            } else {
                None
            };
            let outcome = self.store.put_if_version(&self.key, expected, value).await;
            drop(own);
            match outcome {
                Ok(PutOutcome::Applied(row)) => {
                    let head = state.head();
                    let state = Arc::new(state);
                    let replaced = self.keep_decoded(&row.value, &state);
                    dispatch::wrote(&self.store, &self.key, &row);
                    let current = Some(row);
                    self.remember(current.as_ref());
                    let (delivered, wakes) = self.deliver_later(current.as_ref(), &state);
                    let tell_others = handed_on && !delivered;
                    let results = finish(outcomes, &current, head, sent, tell_others);
                    return (results, Handover { wakes, replaced });
                }
                Ok(PutOutcome::Conflict(now)) => {
                    current = now;
                    returned_at = Some(sent);
                    self.remember(current.as_ref());
                }
                Err(err) => return failed(&err),
            }
        }
    }

    /// The state stored in `row`; decoded once per distinct value.
    pub(crate) fn decoded(&self, row: &Row) -> Result<Arc<LockState>> {
        if let Some(state) = self.cached(row) {
            return Ok(state);
        }
        let state = Arc::new(LockState::decode(row)?);
        self.keep_decoded(&row.value, &state);
        Ok(state)
    }

    /// The token and holder stored in `row`: from the cache when it has
    /// that value, else without decoding the queue (the row a woken holder
    /// was handed is often older than the cache by then).
    pub(crate) fn head(&self, row: &Row) -> Result<Head> {
        match self.cached(row) {
            Some(state) => Ok(state.head()),
            None => LockState::decode_head(row),
        }
    }

    /// The cached state, if it is `row`'s.
    fn cached(&self, row: &Row) -> Option<Arc<LockState>> {
        let decoded = self.decoded.lock().ok()?;
        let (value, state) = decoded.as_ref()?;
        same_bytes(value, &row.value).then(|| state.clone())
    }

    /// The state stored in `row`, to change. Taken out of the cache when
    /// the cache holds the only reference (the usual case: a holder gives
    /// its copy up before it releases, a waiter before it waits), so a long
    /// queue is changed in place, not copied and then dropped.
    fn decode(&self, row: &Row) -> Result<LockState> {
        if let Ok(mut decoded) = self.decoded.lock() {
            if let Some((value, state)) = decoded.take() {
                if same_bytes(&value, &row.value) && Arc::strong_count(&state) == 1 {
                    // Nobody else can take a reference: they all come
                    // from this cache, under this mutex.
                    return Ok(Arc::try_unwrap(state).unwrap_or_else(|state| (*state).clone()));
                }
                *decoded = Some((value, state));
            }
        }
        self.decoded(row).map(|state| (*state).clone())
    }

    /// Cache `state` as the decoding of `value`; returns the entry it
    /// replaced, for the caller to drop when it suits.
    fn keep_decoded(
        &self,
        value: &Bytes,
        state: &Arc<LockState>,
    ) -> Option<(Bytes, Arc<LockState>)> {
        let mut decoded = self.decoded.lock().ok()?;
        decoded.replace((value.clone(), state.clone()))
    }

    /// A release sent at `sent` handed the lock to request `to`.
    pub(crate) fn handed_on(&self, to: &str, sent: Instant) {
        if let Ok(mut handed) = self.handed.lock() {
            *handed = Some((to.to_owned(), sent));
        }
    }

    /// How long ago a release of this process handed the lock to `id`.
    pub(crate) fn handed_to(&self, id: &str) -> Option<std::time::Duration> {
        let mut handed = self.handed.lock().ok()?;
        match handed.as_ref() {
            Some((to, sent)) if to == id => {
                let elapsed = sent.elapsed();
                *handed = None;
                Some(elapsed)
            }
            _ => None,
        }
    }

    /// The newest row this process knows (a hint: it may be stale).
    pub(crate) fn newest(&self) -> Option<Row> {
        self.queue().newest.clone()
    }

    /// Is the lock free in the newest row this process knows (or is no row
    /// known)? A hint, like [`Self::newest`].
    pub(crate) fn seems_free(&self) -> bool {
        match self.newest() {
            Some(row) => self.decoded(&row).map_or(true, |state| state.is_free()),
            None => true,
        }
    }

    /// Note a row the store returned; an older one than known is ignored.
    pub(crate) fn remember(&self, row: Option<&Row>) {
        let mut queue = self.queue();
        match row {
            Some(row)
                if queue
                    .newest
                    .as_ref()
                    .is_none_or(|n| n.version < row.version) =>
            {
                queue.newest = Some(row.clone());
            }
            Some(_) => {}
            None => queue.newest = None,
        }
    }

    /// Hand the new row to the new holder if it waits in this process;
    /// true if it does.
    fn deliver(&self, row: Option<&Row>, state: &LockState) -> bool {
        self.deliver_later(row, state).0
    }

    /// [`Self::deliver`], the wake-up sent when the returned [`Wakes`] is
    /// dropped.
    fn deliver_later(&self, row: Option<&Row>, state: &LockState) -> (bool, Wakes) {
        if !self.notifications {
            return (false, Wakes::default());
        }
        match (row, &state.holder) {
            (Some(row), Some(holder)) => {
                dispatch::deliver_later(&self.store, &self.key, [&*holder.id], row)
            }
            _ => (false, Wakes::default()),
        }
    }

    /// Tell the new holder of a hand-off written outside the writer (an
    /// eviction): directly if it waits here, else through the store.
    pub(crate) async fn announce(&self, row: &Row, state: &LockState) {
        if !self.deliver(Some(row), state) {
            self.notify_others().await;
        }
    }

    /// Wake the other processes' waiters after a hand-off. Awaited by the
    /// caller that handed on (a process may exit right after its release);
    /// skipped where the store cannot notify (they poll). A failed notify
    /// only costs latency (waiters read at least every lease/4).
    pub(crate) async fn notify_others(&self) {
        if !self.notifications || !self.store.capabilities().contains(Capabilities::WATCH) {
            return;
        }
        if let Err(err) = self.store.notify(&self.key).await {
            tracing::debug!(lock = %self.key.as_str(), error = %err, "notify failed; waiters will read");
        }
    }
}

/// The writing turn of one task; passed on when it ends, however it ends.
struct Turn(Arc<Writer>);

impl Drop for Turn {
    fn drop(&mut self) {
        let mut queue = self.0.queue();
        if queue.requests.is_empty() {
            queue.writing = false;
        } else if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.0.clone().drain());
        } else {
            // No runtime to write them: fail them rather than hang.
            for (_, reply) in queue.requests.drain(..) {
                let _ = reply.send(Err(abandoned()));
            }
            queue.writing = false;
        }
    }
}

fn finish(
    outcomes: Vec<Result<bool>>,
    row: &Option<Row>,
    head: Head,
    sent: Instant,
    tell_others: bool,
) -> Vec<Result<Written>> {
    outcomes
        .into_iter()
        .map(|outcome| {
            outcome.map(|applied| Written {
                row: row.clone(),
                head: head.clone(),
                sent,
                applied,
                tell_others,
            })
        })
        .collect()
}

/// Are `a` and `b` the same bytes? Clones of one row share their buffer, so
/// this rarely compares a long queue byte by byte.
fn same_bytes(a: &Bytes, b: &Bytes) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

/// The same error for every request of a failed batch.
fn copy(err: &Error) -> Error {
    let copy = Error::new(err.kind(), err.backend(), err.message());
    match err.operation() {
        Some(op) => copy.during(op),
        None => copy,
    }
}

fn abandoned() -> Error {
    Error::new(
        ErrorKind::Unknown,
        "lock",
        "the write carrying this request stopped midway; its outcome is unknown",
    )
}
