//! One writer per process and row: the process's requests of a queue
//! recipe (enqueues, takes, releases, withdrawals, evictions, heartbeats)
//! are combined into one conditional write.
//!
//! Every acquisition changes the row at least twice (its enqueue and its
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
//! its release then shares the enqueue's write.
//!
//! A request is decided on the row it is applied to, never on the caller's
//! view: an eviction names the heartbeat it saw stand still, and evicts
//! only if the row still shows it.

use std::sync::{Arc, LazyLock, Mutex};

use bakery_core::{
    Bytes, Capabilities, Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::arrival::{Arrival, Arrivals};
use super::dispatch::{self, Dispatcher, Registration, Wakes};
use super::row::{self, Fragments, Shape};
use super::silence::Silence;
use super::state::{Ask, Head, QueueState, Rule, Silent};
use crate::per_process::{slot, PerRow};

static WRITERS: LazyLock<PerRow<Writer>> = LazyLock::new(PerRow::new);

/// A change a client asks for.
#[derive(Debug, Clone)]
pub(crate) enum Request {
    /// Take a grant if nobody queues and `ask` fits once the holders of
    /// `evict` that still stand silent are gone (a try of a busy row whose
    /// holders this process saw silent); otherwise change nothing.
    Take {
        ask: Ask,
        rule: Rule,
        evict: Vec<Silent>,
    },
    /// Take a grant if `ask` can, else join the queue (nothing if already
    /// holding or queued). `sent_before`: false for the first request of an
    /// acquisition, which cannot be queued yet (ids are unique per acquire),
    /// so a long queue is not searched for it.
    Join {
        ask: Ask,
        rule: Rule,
        sent_before: bool,
    },
    /// Give up the grant `id` holds with `token`, if it still does, and
    /// set the row's mark (`QueueState::release`).
    Release {
        id: Arc<str>,
        token: u64,
        mark: Option<u64>,
    },
    /// Take request `id` out of the queue, or pass its grant on. Written
    /// after any request of the same id still waiting here, so a cancelled
    /// enqueue cannot land after its withdrawal.
    Withdraw(Arc<str>),
    /// Evict the holders of `silent` still standing silent; `claim` (the
    /// evicting waiter) claims its grant in the same write if it gets one.
    Evict {
        silent: Vec<Silent>,
        claim: Arc<str>,
    },
    /// Advance the heartbeat of the grant `id` holds with `token`, and
    /// raise the row's mark to `mark`.
    Beat {
        id: Arc<str>,
        token: u64,
        mark: Option<u64>,
    },
}

impl Request {
    /// Apply to `state`; `Ok(true)` if it changed it.
    fn apply(&self, state: &mut QueueState, shape: Shape, key: &Key) -> Result<bool> {
        match self {
            Request::Take { ask, rule, evict } => {
                check_rule(state.rule, *rule, shape, key)?;
                if !state.queue.is_empty() || state.holder(&ask.id).is_some() {
                    return Ok(false);
                }
                let mut after = state.clone();
                after
                    .holders
                    .retain(|h| !evict.iter().any(|s| s.id == h.ask.id && s.beat == h.beat));
                if !after.can_take(ask) {
                    return Ok(false);
                }
                after.take(ask)?;
                *state = after;
            }
            Request::Join {
                ask,
                rule,
                sent_before,
            } => {
                check_rule(state.rule, *rule, shape, key)?;
                if state.holder(&ask.id).is_some() || (*sent_before && state.queued(&ask.id)) {
                    return Ok(false);
                }
                if state.can_take(ask) {
                    state.take(ask)?;
                } else {
                    state.queue.push_back(ask.clone());
                }
            }
            Request::Release { id, token, mark } => return state.release(id, *token, *mark),
            Request::Withdraw(id) => return state.withdraw(id),
            Request::Evict { silent, claim } => {
                if !state.evict(silent)? {
                    return Ok(false);
                }
                if let Some(token) = state.holder(claim).map(|h| h.token) {
                    state.beat(claim, token, None);
                }
            }
            Request::Beat { id, token, mark } => return Ok(state.beat(id, *token, *mark)),
        }
        Ok(true)
    }
}

/// A semaphore row keeps the number of permits its first writer gave: a
/// handle configured otherwise is refused, not reinterpreted.
pub(crate) fn check_rule(stored: Rule, rule: Rule, shape: Shape, key: &Key) -> Result<()> {
    match (stored, rule) {
        (Rule::Permits(stored), Rule::Permits(mine)) if stored != mine => Err(Error::config(
            shape.recipe(),
            format!(
                "{} row {} has {stored} permits but this handle is configured with {mine}; \
                 every client must use the same number (the stored row is left as is)",
                shape.recipe(),
                key.as_str()
            ),
        )),
        _ => Ok(()),
    }
}

/// The row a request's write left (or, if it changed nothing, the current
/// row, freshly read or returned by the store).
#[derive(Debug)]
pub(crate) struct Written {
    /// `None`: the row does not exist.
    pub(crate) row: Option<Row>,
    /// The token, rule and holders of `row` (not its queue: a client that
    /// kept the whole state would make the next write copy it).
    pub(crate) head: Head,
    /// Send time of the call that returned `row`.
    pub(crate) sent: Instant,
    /// Whether this request changed the state (false: nothing to do, or
    /// refused — decided on a row the store returned, never a cached one).
    pub(crate) applied: bool,
    /// The write granted waiters that do not wait in this process: the
    /// caller whose request did it tells the other processes
    /// ([`Writer::notify_others`]). Those waiting here were handed the row
    /// directly.
    pub(crate) tell_others: bool,
}

type Reply = oneshot::Sender<Result<Written>>;

/// What a write leaves to do, in this order (fields drop in declaration
/// order): wake the new holders waiting in this process, then drop the
/// state the write replaced (with a long queue the drop costs as much as
/// the rest of the write).
#[derive(Default)]
struct Handover {
    wakes: Wakes,
    replaced: Option<(Bytes, Arc<QueueState>)>,
}

/// This process's writer for one row.
pub(crate) struct Writer {
    store: Arc<dyn VersionedStore>,
    key: Key,
    shape: Shape,
    notifications: bool,
    queue: Mutex<Queue>,
    /// The last row value decoded or written here, with its state: the
    /// same row is read by the writer, the woken holder, the next acquire
    /// and the listener, and decoding a long queue costs more than a copy.
    decoded: Mutex<Option<(Bytes, Arc<QueueState>)>>,
    /// The last release here that handed a grant on: to whom, and when it
    /// was sent (a hand-off's time is measured only within a process:
    /// across processes it would need synchronized clocks).
    handed: Mutex<Option<(Arc<str>, Instant)>>,
    /// The queued waiters' JSON: only the entries that changed are encoded
    /// (one write at a time, so this lock is never contended).
    fragments: Mutex<Fragments>,
    /// The acquisitions of this process that have not sent their first
    /// request yet.
    arrivals: Arc<Arrivals>,
    /// What this process's waiters and tries saw of the holders' heartbeats.
    pub(crate) silence: Silence,
    /// The process's listener on the row, kept between waits while it is
    /// subscribed to the store: a waiter then needs no new subscription
    /// (on etcd a watch stream, on Redis a SUBSCRIBE), and every row it
    /// hears keeps [`Self::newest`] fresh, so this process's next write
    /// (a release, an enqueue) more often expects the current version.
    listener: Mutex<Option<Arc<Dispatcher>>>,
}

#[derive(Default)]
struct Queue {
    requests: Vec<(Request, Reply)>,
    writing: bool,
    /// The newest row known here: the next write expects its version.
    newest: Option<Row>,
}

impl Writer {
    /// The writer for this row, shared by every handle of the process.
    pub(crate) fn for_row(
        store: &Arc<dyn VersionedStore>,
        key: &Key,
        shape: Shape,
        notifications: bool,
    ) -> Arc<Writer> {
        WRITERS.get_or_create(slot(store, key, notifications), || {
            Arc::new(Writer {
                store: store.clone(),
                key: key.clone(),
                shape,
                notifications,
                queue: Mutex::new(Queue::default()),
                decoded: Mutex::new(None),
                handed: Mutex::new(None),
                fragments: Mutex::new(Fragments::default()),
                arrivals: Arc::default(),
                silence: Silence::default(),
                listener: Mutex::new(None),
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
                    tokio::spawn(self.clone().drain(false));
                }
                None
            }
        };
        // Placed: the process's later acquisitions may send theirs.
        if let Some(arrival) = arrival {
            arrival.depart();
        }
        if let Some(newest) = alone {
            // Nobody else is writing: this task has the turn. Dropped
            // midway, the turn still passes on (only this request was in it).
            let turn = Turn::new(self);
            if let (true, Some(reply)) = (joins, reply) {
                // An enqueue behind a holder. The holder may be a client of
                // this process that the last write just woke, about to
                // release: a writer task lets it run first, so its release
                // and this enqueue share one write instead of taking two in
                // turn. Not this task: a caller that is not polled again
                // would hold every other request of the process back.
                self.queue().requests.push((request, reply));
                turn.hand_over(true);
                return answer.await.unwrap_or_else(|_| Err(abandoned(self.shape)));
            }
            let (mut replies, handover) = self.write(vec![request], newest).await;
            drop(turn);
            // Wakes the new holders: they run next on this thread once this
            // task yields.
            drop(handover);
            return replies.pop().unwrap_or_else(|| Err(abandoned(self.shape)));
        }
        answer.await.unwrap_or_else(|_| Err(abandoned(self.shape)))
    }

    /// Write batches until no request waits; `yield_first`: let the other
    /// ready tasks run before the first batch is taken.
    async fn drain(self: Arc<Self>, yield_first: bool) {
        let _turn = Turn::new(&self);
        if yield_first {
            tokio::task::yield_now().await;
        }
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
                // now.
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
            // batch would often hold only one of the two.
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
                None => QueueState::new(first_rule(&requests, self.shape)),
            };
            let holders_before: Vec<Arc<str>> =
                state.holders.iter().map(|h| h.ask.id.clone()).collect();
            let mut outcomes = Vec::with_capacity(requests.len());
            let mut changed = false;
            for request in &requests {
                let outcome = request.apply(&mut state, self.shape, &self.key);
                changed |= matches!(outcome, Ok(true));
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
                Ok(mut fragments) => row::encode_with(self.shape, &state, &mut fragments),
                Err(_) => row::encode(self.shape, &state),
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
                    // Handed over by this write, unclaimed: to be told.
                    let handed: Vec<Arc<str>> = state
                        .holders
                        .iter()
                        .filter(|h| h.beat == 0 && !holders_before.contains(&h.ask.id))
                        .map(|h| h.ask.id.clone())
                        .collect();
                    // Noted before anyone is woken: the woken waiter
                    // may run before the release's caller does.
                    let released = requests
                        .iter()
                        .any(|r| matches!(r, Request::Release { .. }));
                    if let (true, Some(to)) = (released, handed.first()) {
                        self.handed_on(to, sent);
                    }
                    let state = Arc::new(state);
                    let replaced = self.keep_decoded(&row.value, &state);
                    dispatch::wrote(&self.store, &self.key, &row);
                    let current = Some(row);
                    self.remember(current.as_ref());
                    let (delivered, wakes) = self.deliver_later(current.as_ref(), &handed);
                    let tell_others = !handed.is_empty() && !delivered;
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
    pub(crate) fn decoded(&self, row: &Row) -> Result<Arc<QueueState>> {
        if let Some(state) = self.cached(row) {
            return Ok(state);
        }
        let state = Arc::new(row::decode(self.shape, row)?);
        self.keep_decoded(&row.value, &state);
        Ok(state)
    }

    /// The token, rule and holders stored in `row`: from the cache when it
    /// has that value, else without decoding the queue (the row a woken
    /// holder was handed is often older than the cache by then).
    pub(crate) fn head(&self, row: &Row) -> Result<Head> {
        match self.cached(row) {
            Some(state) => Ok(state.head()),
            None => row::decode_head(self.shape, row),
        }
    }

    /// The row's mark (`QueueState::mark`), without its holders or queue.
    pub(crate) fn mark(&self, row: &Row) -> Result<Option<u64>> {
        match self.cached(row) {
            Some(state) => Ok(state.mark),
            None => row::decode_head(self.shape, row).map(|head| head.mark),
        }
    }

    /// The cached state, if it is `row`'s.
    fn cached(&self, row: &Row) -> Option<Arc<QueueState>> {
        let decoded = self.decoded.lock().ok()?;
        let (value, state) = decoded.as_ref()?;
        same_bytes(value, &row.value).then(|| state.clone())
    }

    /// The state stored in `row`, to change. Taken out of the cache when
    /// the cache holds the only reference (the usual case), so a long queue
    /// is changed in place, not copied and then dropped.
    fn decode(&self, row: &Row) -> Result<QueueState> {
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
        state: &Arc<QueueState>,
    ) -> Option<(Bytes, Arc<QueueState>)> {
        let mut decoded = self.decoded.lock().ok()?;
        decoded.replace((value.clone(), state.clone()))
    }

    /// A release sent at `sent` handed a grant to request `to`.
    fn handed_on(&self, to: &Arc<str>, sent: Instant) {
        if let Ok(mut handed) = self.handed.lock() {
            *handed = Some((to.clone(), sent));
        }
    }

    /// How long ago a release of this process handed a grant to `id`.
    pub(crate) fn handed_to(&self, id: &str) -> Option<std::time::Duration> {
        let mut handed = self.handed.lock().ok()?;
        match handed.as_ref() {
            Some((to, sent)) if &**to == id => {
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

    /// Could `ask` take a grant in the newest row this process knows (or
    /// is no row known)? A hint, like [`Self::newest`].
    pub(crate) fn seems_free(&self, ask: &Ask) -> bool {
        match self.newest() {
            Some(row) => self.head(&row).map_or(true, |head| head.can_take(ask)),
            None => true,
        }
    }

    /// Note a row the store returned; an older one than known is ignored,
    /// and so is a missing one (a read that began before the row was
    /// written must not make the next write expect no row).
    pub(crate) fn remember(&self, row: Option<&Row>) {
        let Some(row) = row else {
            return;
        };
        let mut queue = self.queue();
        if queue
            .newest
            .as_ref()
            .is_none_or(|n| n.version < row.version)
        {
            queue.newest = Some(row.clone());
        }
    }

    /// Hand the new row to the grantees `handed` that wait in this process
    /// (when the returned [`Wakes`] is dropped); true if every one does.
    fn deliver_later(&self, row: Option<&Row>, handed: &[Arc<str>]) -> (bool, Wakes) {
        if !self.notifications || handed.is_empty() {
            return (handed.is_empty(), Wakes::default());
        }
        match row {
            Some(row) => {
                dispatch::deliver_later(&self.store, &self.key, handed.iter().map(|id| &**id), row)
            }
            None => (false, Wakes::default()),
        }
    }

    /// Keep `registration`'s dispatcher between waits if it listens to the
    /// store (a polling one lives only while someone waits).
    pub(crate) fn keep_listening(&self, registration: &Registration) {
        let dispatcher = registration.dispatcher();
        if let Ok(mut listener) = self.listener.lock() {
            let kept = listener
                .as_ref()
                .is_some_and(|kept| Arc::ptr_eq(kept, dispatcher));
            if dispatcher.subscribed() {
                if !kept {
                    *listener = Some(dispatcher.clone());
                }
            } else {
                *listener = None;
            }
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
            tracing::debug!(row = %self.key.as_str(), error = %err, "notify failed; waiters will read");
        }
    }
}

/// The waiters a row grants, for the process's dispatcher: its holders,
/// read through the process's writer (which knows the rows it wrote).
pub(crate) fn grantees(
    store: &Arc<dyn VersionedStore>,
    key: &Key,
    shape: Shape,
    notifications: bool,
) -> dispatch::Grantees {
    let (store, key) = (store.clone(), key.clone());
    Arc::new(move |row| {
        let head = match WRITERS.get(&slot(&store, &key, notifications)) {
            Some(writer) => {
                writer.remember(Some(row));
                writer.head(row)?
            }
            None => row::decode_head(shape, row)?,
        };
        Ok(head.holders.into_iter().map(|h| h.ask.id).collect())
    })
}

/// The rule a row never written starts with: its first writer's.
fn first_rule(requests: &[Request], shape: Shape) -> Rule {
    requests
        .iter()
        .find_map(|request| match request {
            Request::Take { rule, .. } | Request::Join { rule, .. } => Some(*rule),
            _ => None,
        })
        .unwrap_or(match shape {
            Shape::RwLock => Rule::ReadWrite,
            Shape::Lock | Shape::Semaphore => Rule::Permits(1),
        })
}

/// The writing turn of one task; passed on when it ends, however it ends.
struct Turn {
    writer: Arc<Writer>,
    /// The writer task it passes to yields before its first batch.
    yield_first: bool,
}

impl Turn {
    fn new(writer: &Arc<Writer>) -> Turn {
        Turn {
            writer: writer.clone(),
            yield_first: false,
        }
    }

    /// Pass the turn to a writer task for the requests waiting now (one
    /// that yields first if `yield_first`).
    fn hand_over(mut self, yield_first: bool) {
        self.yield_first = yield_first;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.writer.pass_turn(self.yield_first);
    }
}

impl Writer {
    /// The turn ends: the requests that came meanwhile go to a writer task.
    fn pass_turn(self: &Arc<Self>, yield_first: bool) {
        let mut queue = self.queue();
        if queue.requests.is_empty() {
            queue.writing = false;
        } else if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.clone().drain(yield_first));
        } else {
            // No runtime to write them: fail them rather than hang.
            for (_, reply) in queue.requests.drain(..) {
                let _ = reply.send(Err(abandoned(self.shape)));
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

fn abandoned(shape: Shape) -> Error {
    Error::new(
        ErrorKind::Unknown,
        shape.recipe(),
        "the write carrying this request stopped midway; its outcome is unknown",
    )
}
