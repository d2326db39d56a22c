//! One process's writes of one row, one at a time, and the row the last of
//! them left: shared by the handles of the semaphore and the rwlock, with
//! the rest of what their rows have in common ([`TurnRow`]).
//!
//! Clients of one process that wrote at once would mostly conflict with
//! each other (a join after every release, a storm of joins when many start
//! together), each conflict a wasted round trip. In turn, each decides on
//! the newest row the process knows, and a write that a write of this
//! process already outdated is refused locally with the newer row, as the
//! store would refuse it.
//!
//! The process also keeps the state it last decoded or wrote for the row
//! ([`Decoded`]): with a long queue, parsing the row costs more than the
//! write itself on a fast store, and every client of the process would
//! parse the same row.

pub(crate) mod compact;
mod hold;
mod wait;

use std::any::Any;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bakery_core::{Bytes, Key, PutOutcome, Result, Row, Version, VersionedStore};
use serde::Serialize;
use tokio::sync::{Mutex, MutexGuard};
use tokio::time::Instant;

use crate::arrival::{Arrival, Arrivals};
use crate::beats::Beats;
use crate::dispatch;
use crate::per_process::{slot, PerRow};
use crate::silence::Silence;

pub(crate) use hold::{Grant, Hold};

/// `value` as JSON bytes, for a row of `recipe`.
pub(crate) fn json_bytes(recipe: &'static str, value: &impl Serialize) -> Result<Bytes> {
    serde_json::to_vec(value).map(Into::into).map_err(|e| {
        bakery_core::Error::new(
            bakery_core::ErrorKind::Internal,
            recipe,
            format!("encode state: {e}"),
        )
    })
}
pub(crate) use crate::silence::Beating;
pub(crate) use wait::{acquire, try_acquire};

static TURNS: LazyLock<PerRow<WriteTurn>> = LazyLock::new(PerRow::new);

/// This process's turn to write one row.
#[derive(Default)]
pub(crate) struct WriteTurn {
    newest: Mutex<Option<Row>>,
    /// The acquisitions of this process that have not taken their first
    /// turn yet: they take it in the order they were called.
    arrivals: Arc<Arrivals>,
    /// The states of the row this process last decoded or wrote.
    decoded: Arc<Decoded>,
    /// What this process's waiters and tries saw of the holders' heartbeats.
    silence: Silence,
}

impl WriteTurn {
    /// The turn of `key` in `store`, shared by every handle of the process.
    pub(crate) fn for_row(store: &Arc<dyn VersionedStore>, key: &Key) -> Arc<WriteTurn> {
        TURNS.get_or_create(slot(store, key, true), Arc::default)
    }

    /// Wait for the turn (first come, first served). The guard holds the
    /// row the last write here left; the caller stores the row its own
    /// write left (or the store returned on a conflict) before releasing.
    pub(crate) async fn take(&self) -> MutexGuard<'_, Option<Row>> {
        self.newest.lock().await
    }
}

/// How many of a row's newest states [`Decoded`] keeps: a grantee decodes
/// the row that granted it after its releaser may have written the next.
const DECODED_KEPT: usize = 4;

/// The states of one row that this process last decoded or wrote, with the
/// bytes each came from: a row with those bytes is not parsed again. A
/// semaphore row with 64 waiters is 3.3 KB of JSON; the memory store wrote
/// it in less time than one parse, and each acquisition parsed it about
/// five times (its decisions, its wait, the process's dispatcher).
#[derive(Default)]
pub(crate) struct Decoded {
    /// At most [`DECODED_KEPT`], the newest versions, in no order.
    kept: std::sync::Mutex<Vec<DecodedRow>>,
}

struct DecodedRow {
    version: Version,
    value: Bytes,
    state: Arc<dyn Any + Send + Sync>,
}

impl Decoded {
    /// The state of `row`: kept from an earlier decode or write of the same
    /// bytes, else `decode(row)` (then kept too). The bytes are compared,
    /// not only the version, so a store that reused a version (wiped and
    /// refilled) is never misread.
    pub(crate) fn state<S: Any + Send + Sync>(
        &self,
        row: &Row,
        decode: impl FnOnce(&Row) -> Result<S>,
    ) -> Result<Arc<S>> {
        if let Some(state) = self.kept(row) {
            return Ok(state);
        }
        let state = Arc::new(decode(row)?);
        self.keep(row, state.clone());
        Ok(state)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<DecodedRow>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn kept<S: Any + Send + Sync>(&self, row: &Row) -> Option<Arc<S>> {
        let kept = self.lock();
        let found = kept
            .iter()
            .find(|kept| kept.version == row.version && kept.value == row.value)?;
        found.state.clone().downcast::<S>().ok()
    }

    /// Keep `state` as that of `row` (a row this process wrote or decoded)
    /// in place of the oldest kept, unless every kept row is newer.
    fn keep<S: Any + Send + Sync>(&self, row: &Row, state: Arc<S>) {
        let mut kept = self.lock();
        kept.retain(|kept| kept.version != row.version);
        if kept.len() == DECODED_KEPT {
            if kept.iter().all(|kept| kept.version > row.version) {
                return;
            }
            let oldest = (0..kept.len()).min_by_key(|&at| kept[at].version);
            if let Some(oldest) = oldest {
                kept.swap_remove(oldest);
            }
        }
        kept.push(DecodedRow {
            version: row.version,
            value: row.value.clone(),
            state,
        });
    }
}

/// The newer of `hint` and `known` (versions only grow: a deleted row keeps
/// its last one).
pub(crate) fn newer(hint: Option<Row>, known: Option<&Row>) -> Option<Row> {
    match (hint, known) {
        (Some(hint), Some(known)) if known.version > hint.version => Some(known.clone()),
        (None, Some(known)) => Some(known.clone()),
        (hint, _) => hint,
    }
}

/// The newer row the turn knows, if it outdates `expected`: a write
/// expecting `expected` would be refused by the store.
pub(crate) fn outdated(known: Option<&Row>, expected: Option<Version>) -> Option<Row> {
    known
        .filter(|known| Some(known.version) > expected)
        .cloned()
}

/// A holder in a turn recipe's row, as the transitions they share see it.
pub(crate) trait TurnHolder: Send + Sync + 'static {
    /// Its request id, heartbeat counter and lease, as observers see them.
    fn beating(&self) -> Beating<'_>;
    /// The fencing token of its grant.
    fn token(&self) -> u64;
    /// Advance its heartbeat counter (also claims a handed-over grant).
    fn beat(&mut self);
}

/// The parts of a turn recipe's row that its transitions change.
pub(crate) struct Parts<'a, H, W> {
    /// The fencing token of the latest grant.
    pub(crate) token: &'a mut u64,
    /// The holders, in the order they were granted.
    pub(crate) holders: &'a mut Vec<H>,
    /// The waiters, in the order they joined (FIFO).
    pub(crate) queue: &'a mut VecDeque<W>,
}

/// Implements [`TurnHolder`] for a holder type with `id`, `token`, `beat`
/// and `lease_ms` fields: the holder every turn recipe's row stores.
macro_rules! turn_holder {
    ($holder:ty) => {
        impl $crate::turn::TurnHolder for $holder {
            fn beating(&self) -> $crate::turn::Beating<'_> {
                $crate::turn::Beating {
                    id: &self.id,
                    beat: self.beat,
                    lease_ms: self.lease_ms,
                }
            }

            fn token(&self) -> u64 {
                self.token
            }

            fn beat(&mut self) {
                self.beat = self.beat.saturating_add(1);
            }
        }
    };
}
pub(crate) use turn_holder;

/// The accessors of [`TurnState`] (`holder_list`, `waiting`, `parts`) for a
/// state with `token`, `holders` and `queue` fields, inside its
/// `impl TurnState`: the row every turn recipe stores.
macro_rules! turn_parts {
    ($holder:ty, $waiter:ty) => {
        fn holder_list(&self) -> &[$holder] {
            &self.holders
        }

        fn waiting(&self) -> &std::collections::VecDeque<$waiter> {
            &self.queue
        }

        fn parts(&mut self) -> $crate::turn::Parts<'_, $holder, $waiter> {
            $crate::turn::Parts {
                token: &mut self.token,
                holders: &mut self.holders,
                queue: &mut self.queue,
            }
        }
    };
}
pub(crate) use turn_parts;

/// The stored state of a turn recipe: holders with leases and heartbeats,
/// and a FIFO queue of waiters. A recipe says what its rows hold and which
/// waiter fits beside the holders ([`TurnState::fits`]); every transition
/// (take, join, release, evict, withdraw, beat) is the same for all, and
/// grants the head of the queue while it fits.
pub(crate) trait TurnState: Clone + Send + Sync + Serialize + 'static {
    /// A request as it waits in the queue.
    type Waiter: Clone + Send + Sync + 'static;
    /// A request holding a grant.
    type Holder: TurnHolder;
    /// The recipe's name in errors.
    const RECIPE: &'static str;

    /// The request id of `waiter`.
    fn id_of(waiter: &Self::Waiter) -> &str;
    /// The holder `waiter` becomes when granted `token`, its heartbeat
    /// counter at `beat` (0: handed over, unclaimed; 1: taken, claimed).
    fn granted(waiter: Self::Waiter, token: u64, beat: u64) -> Self::Holder;
    /// The holders, in the order they were granted.
    fn holder_list(&self) -> &[Self::Holder];
    /// The waiters, in FIFO order.
    fn waiting(&self) -> &VecDeque<Self::Waiter>;
    /// The token, the holders and the queue, to change them.
    fn parts(&mut self) -> Parts<'_, Self::Holder, Self::Waiter>;
    /// Could `waiter` be granted beside the current holders (whoever
    /// queues before it aside)?
    fn fits(&self, waiter: &Self::Waiter) -> bool;

    /// The row's bytes (the queue in its [`compact`] form).
    fn encode(&self) -> Result<Bytes>;
    /// Some request id appears twice (never in a row this code wrote).
    fn has_duplicate_ids(&self) -> bool {
        let mut ids: Vec<&str> = self
            .holder_list()
            .iter()
            .map(|h| h.beating().id)
            .chain(self.waiting().iter().map(Self::id_of))
            .collect();
        let all = ids.len();
        ids.sort_unstable();
        ids.dedup();
        ids.len() != all
    }
    /// The holders, as an observer of their heartbeats sees them.
    fn holders(&self) -> impl Iterator<Item = Beating<'_>> {
        self.holder_list().iter().map(TurnHolder::beating)
    }
    /// The holder with request id `id`, if it holds a grant.
    fn holder(&self, id: &str) -> Option<&Self::Holder> {
        self.holder_list().iter().find(|h| h.beating().id == id)
    }
    /// The token of the grant `id` holds, if it holds one.
    fn token_of(&self, id: &str) -> Option<u64> {
        self.holder(id).map(TurnHolder::token)
    }
    /// `id` holds a grant with `token`.
    fn holds(&self, id: &str, token: u64) -> bool {
        self.token_of(id) == Some(token)
    }
    /// Is `id` waiting in the queue?
    fn queued(&self, id: &str) -> bool {
        self.waiting().iter().any(|w| Self::id_of(w) == id)
    }
    /// Nobody waits in the queue.
    fn nobody_queues(&self) -> bool {
        self.waiting().is_empty()
    }
    /// Can `waiter` be granted at once: it fits, and nobody queued before
    /// it (so a reader does not pass a queued writer)?
    fn can_take(&self, waiter: &Self::Waiter) -> bool {
        self.nobody_queues() && self.fits(waiter)
    }
    /// Grant `waiter` directly, already claimed; its token. The caller
    /// checked [`Self::can_take`].
    fn take(&mut self, waiter: &Self::Waiter) -> Result<u64> {
        let parts = self.parts();
        let token = next_token(*parts.token, Self::RECIPE)?;
        *parts.token = token;
        parts.holders.push(Self::granted(waiter.clone(), token, 1));
        Ok(token)
    }
    /// Take a grant if `waiter` can (its token), else join the queue
    /// (`None`).
    fn join(&mut self, waiter: &Self::Waiter) -> Result<Option<u64>> {
        if self.can_take(waiter) {
            return self.take(waiter).map(Some);
        }
        self.parts().queue.push_back(waiter.clone());
        Ok(None)
    }
    /// Grant the head of the queue while it fits (unclaimed, beat 0), each
    /// with a new token; the ids granted.
    fn fill(&mut self) -> Result<Vec<String>> {
        let mut granted = Vec::new();
        while self.waiting().front().is_some_and(|head| self.fits(head)) {
            let parts = self.parts();
            let Some(next) = parts.queue.pop_front() else {
                break;
            };
            let token = next_token(*parts.token, Self::RECIPE)?;
            *parts.token = token;
            granted.push(Self::id_of(&next).to_owned());
            parts.holders.push(Self::granted(next, token, 0));
        }
        Ok(granted)
    }
    /// Advance the heartbeat of holder `id` (also claims a handed-over
    /// grant); false if it holds nothing.
    fn beat(&mut self, id: &str) -> bool {
        let parts = self.parts();
        match parts.holders.iter_mut().find(|h| h.beating().id == id) {
            Some(holder) => {
                holder.beat();
                true
            }
            None => false,
        }
    }
    /// Give up the grant `id` holds with `token`, granting the waiters it
    /// frees (their ids); `None` if `id` does not hold it (evicted).
    fn release(&mut self, id: &str, token: u64) -> Result<Option<Vec<String>>> {
        if !self.holds(id, token) {
            return Ok(None);
        }
        self.parts().holders.retain(|h| h.beating().id != id);
        self.fill().map(Some)
    }
    /// Remove the holders `ids` (their leases ran out) and grant the
    /// waiters that frees (their ids).
    fn evict(&mut self, ids: &[String]) -> Result<Vec<String>> {
        self.parts()
            .holders
            .retain(|h| !ids.iter().any(|id| id == h.beating().id));
        self.fill()
    }
    /// Remove request `id` wherever it is: out of the queue (which may let
    /// the waiters behind it fit, as readers behind a withdrawn writer), or,
    /// if it was granted meanwhile, give that on. `None` if it is nowhere
    /// (nothing to write), else the ids granted.
    fn withdraw(&mut self, id: &str) -> Result<Option<Vec<String>>> {
        if self.queued(id) {
            self.parts().queue.retain(|w| Self::id_of(w) != id);
            return self.fill().map(Some);
        }
        match self.token_of(id) {
            Some(token) => self.release(id, token),
            None => Ok(None),
        }
    }
}

/// The token after `token`; its overflow is [`ErrorKind::Exhausted`], never
/// a wrap (fencing tokens only grow).
///
/// [`ErrorKind::Exhausted`]: bakery_core::ErrorKind::Exhausted
fn next_token(token: u64, recipe: &'static str) -> Result<u64> {
    token.checked_add(1).ok_or_else(|| {
        bakery_core::Error::new(
            bakery_core::ErrorKind::Exhausted,
            recipe,
            "fencing token overflow",
        )
    })
}

/// The settings a turn recipe's builder collected, checked by
/// [`TurnHandle::new`].
pub(crate) struct TurnSettings {
    pub(crate) store: Arc<dyn VersionedStore>,
    pub(crate) name: String,
    pub(crate) lease: Duration,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) poll_interval: Duration,
    pub(crate) owner: Option<String>,
}

/// Shortest lease a turn recipe accepts: the heartbeat runs every lease/3.
pub(crate) const MIN_LEASE: Duration = Duration::from_millis(30);

/// What every turn recipe's handle has: its settings, its view of the row,
/// what its tries saw of the holders, and its grants' heartbeat timer.
pub(crate) struct TurnHandle {
    pub(crate) store: Arc<dyn VersionedStore>,
    pub(crate) name: String,
    pub(crate) key: Key,
    pub(crate) lease: Duration,
    pub(crate) lease_ms: u64,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) poll_interval: Duration,
    pub(crate) owner: String,
    /// The row as this handle sees it, written in the process's turn.
    pub(crate) row: TurnRow,
    /// Its grants' heartbeats, started when due.
    pub(crate) beats: Arc<Beats>,
}

impl TurnHandle {
    /// Check `settings` of recipe `recipe`, whose rows are under `prefix`;
    /// invalid ones are [`bakery_core::ErrorKind::InvalidInput`]. No store
    /// call is made.
    pub(crate) fn new(
        recipe: &'static str,
        prefix: &str,
        settings: TurnSettings,
    ) -> Result<TurnHandle> {
        use bakery_core::Error;
        let key = Key::with_prefix(prefix, &settings.name)?;
        if settings.lease < MIN_LEASE {
            return Err(Error::invalid_input(
                recipe,
                format!(
                    "lease must be at least {MIN_LEASE:?}, got {:?}",
                    settings.lease
                ),
            ));
        }
        let lease_ms = u64::try_from(settings.lease.as_millis())
            .map_err(|_| Error::invalid_input(recipe, "lease too long"))?;
        if settings.poll_interval.is_zero() {
            return Err(Error::invalid_input(recipe, "poll interval must be > 0"));
        }
        let lease = Duration::from_millis(lease_ms);
        Ok(TurnHandle {
            row: TurnRow::new(&settings.store, &key),
            store: settings.store,
            name: settings.name,
            key,
            lease,
            lease_ms,
            acquire_timeout: settings.acquire_timeout,
            poll_interval: settings.poll_interval,
            owner: settings.owner.unwrap_or_else(crate::grant::default_owner),
            beats: Beats::new(lease / 3),
        })
    }
}

/// A handle of a turn recipe (the semaphore, the rwlock): what its writes,
/// its waits ([`acquire`]) and its holds ([`Hold`]) need of it.
pub(crate) trait TurnRecipe: Send + Sync + Sized + 'static {
    /// The row's state.
    type State: TurnState;
    /// The recipe's name in errors.
    const RECIPE: &'static str;
    /// The recipe in the metrics.
    const METRIC: crate::metrics::Recipe;

    /// What every turn recipe's handle has.
    fn handle(&self) -> &TurnHandle;
    /// The state of `row` (`None`: never written), parsed at most once per
    /// process ([`TurnRow::state`]) and checked against this handle's
    /// settings.
    fn decode(&self, row: Option<&Row>) -> Result<Arc<Self::State>>;
    /// The state of `row` as any handle reads it, unchecked: for the
    /// process's dispatcher, which serves every handle of the row.
    fn parse(row: &Row) -> Result<Self::State>;

    /// The name the handle was built with.
    fn name(&self) -> &str {
        &self.handle().name
    }
    /// The lease its grants are held with.
    fn lease(&self) -> Duration {
        self.handle().lease
    }
    /// The row, as this handle sees it.
    fn row(&self) -> &TurnRow {
        &self.handle().row
    }
    /// The timer of its grants' heartbeats.
    fn beats(&self) -> &Arc<Beats> {
        &self.handle().beats
    }

    /// The waiters a row grants, for the process's dispatcher: every
    /// holder.
    fn grantees(&self) -> dispatch::Grantees {
        let decoded = self.row().decoded();
        Arc::new(move |row| {
            let state = decoded.state(row, Self::parse)?;
            Ok(state.holders().map(|h| Arc::from(h.id)).collect())
        })
    }

    /// Write `state` if the row is still `current`, in this process's turn.
    fn put(
        &self,
        current: Option<&Row>,
        state: &Self::State,
    ) -> impl Future<Output = Result<PutOutcome>> + Send {
        async move { self.row().put(current, state.encode()?).await }
    }

    /// Apply `change` to the row's state in this process's turn
    /// ([`TurnRow::update`]).
    fn update<T: Send>(
        &self,
        current: Option<Row>,
        arrival: Option<&mut Arrival>,
        change: impl FnMut(&mut Self::State) -> Result<Option<T>> + Send,
    ) -> impl Future<Output = Result<Updated<T>>> + Send {
        async move {
            self.row()
                .update(
                    current,
                    arrival,
                    |row| self.decode(row),
                    Self::State::encode,
                    change,
                )
                .await
        }
    }
}

/// The result of [`TurnRow::update`].
pub(crate) enum Updated<T> {
    /// The change was written (`row`, by a call sent at `sent`); `granted`
    /// are the waiters it granted.
    Applied { granted: T, row: Row, sent: Instant },
    /// Nothing to change in `row`: the newest row known here, or the
    /// current one the store returned.
    Unchanged { row: Option<Row> },
}

/// One handle's view of a queue recipe's row: the store, the newest row
/// this handle saw, and the process's turn to write it.
pub(crate) struct TurnRow {
    store: Arc<dyn VersionedStore>,
    key: Key,
    /// The store can notify: writes that grant tell the other processes.
    watching: bool,
    /// The newest row this handle saw: where a request starts instead of
    /// reading (a stale row only costs a conflict, which returns the
    /// current one).
    newest: std::sync::Mutex<Option<Row>>,
    turn: Arc<WriteTurn>,
}

impl TurnRow {
    pub(crate) fn new(store: &Arc<dyn VersionedStore>, key: &Key) -> TurnRow {
        TurnRow {
            store: store.clone(),
            key: key.clone(),
            watching: store
                .capabilities()
                .contains(bakery_core::Capabilities::WATCH),
            newest: std::sync::Mutex::new(None),
            turn: WriteTurn::for_row(store, key),
        }
    }

    /// A new acquisition of this process: its first [`Self::update`] takes
    /// the turn after those of the acquisitions called before it.
    pub(crate) fn arrive(&self) -> Arrival {
        self.turn.arrivals.arrive()
    }

    /// The row's key.
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    /// What this process saw of the row's holders' heartbeats.
    pub(crate) fn silence(&self) -> &Silence {
        &self.turn.silence
    }

    /// The process's decoded states of this row, for the dispatcher's
    /// [`Grantees`](crate::dispatch::Grantees).
    pub(crate) fn decoded(&self) -> Arc<Decoded> {
        self.turn.decoded.clone()
    }

    /// The state of `row`, parsed at most once per process and row
    /// ([`Decoded::state`]).
    pub(crate) fn state<S: Any + Send + Sync>(
        &self,
        row: &Row,
        decode: impl FnOnce(&Row) -> Result<S>,
    ) -> Result<Arc<S>> {
        self.turn.decoded.state(row, decode)
    }

    /// The newest row this handle saw (no store call).
    pub(crate) fn newest(&self) -> Option<Row> {
        self.newest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Note a row the store returned; an older one than known is ignored.
    fn remember(&self, row: Option<&Row>) {
        let mut newest = self
            .newest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match row {
            Some(row) if newest.as_ref().is_none_or(|n| n.version < row.version) => {
                *newest = Some(row.clone());
            }
            Some(_) => {}
            None => *newest = None,
        }
    }

    /// Read the row from the store.
    pub(crate) async fn read(&self) -> Result<Option<Row>> {
        let row = self.store.get(&self.key).await?;
        self.remember(row.as_ref());
        Ok(row)
    }

    /// Write `value` if the row is still `current`, in this process's turn.
    pub(crate) async fn put(&self, current: Option<&Row>, value: Bytes) -> Result<PutOutcome> {
        let expected = current.map(|row| row.version);
        let mut last = self.turn.take().await;
        if let Some(known) = outdated(last.as_ref(), expected) {
            // The store would refuse this write; the row it would return is
            // at least as new as this one, returned after our call began.
            drop(last);
            self.remember(Some(&known));
            return Ok(PutOutcome::Conflict(Some(known)));
        }
        let outcome = self
            .store
            .put_if_version(&self.key, expected, value)
            .await?;
        *last = match &outcome {
            PutOutcome::Applied(row) => Some(row.clone()),
            PutOutcome::Conflict(now) => now.clone(),
        };
        drop(last);
        match &outcome {
            PutOutcome::Applied(row) => {
                dispatch::wrote(&self.store, &self.key, row);
                self.remember(Some(row));
            }
            PutOutcome::Conflict(now) => self.remember(now.as_ref()),
        }
        Ok(outcome)
    }

    /// Apply `change` to the row's state in this process's turn, starting
    /// from `current` (a hint) or the row the last write here left,
    /// whichever is newer, and re-applying it to the row a conflict
    /// returns. `change` returns `None` when there is nothing to write.
    /// Deciding in the turn keeps the order of requests: a client whose row
    /// a write of this process outdated does not lose its turn to the next
    /// one (a releaser re-joining would otherwise overtake every waiter
    /// still joining). An acquisition's first update passes its `arrival`:
    /// it takes the turn after the process's earlier acquisitions took
    /// theirs.
    pub(crate) async fn update<S: Clone + Send + Sync + 'static, T>(
        &self,
        current: Option<Row>,
        mut arrival: Option<&mut Arrival>,
        decode: impl Fn(Option<&Row>) -> Result<Arc<S>>,
        encode: impl Fn(&S) -> Result<Bytes>,
        mut change: impl FnMut(&mut S) -> Result<Option<T>>,
    ) -> Result<Updated<T>> {
        if let Some(arrival) = arrival.as_deref_mut() {
            arrival.earlier_gone().await;
        }
        let mut last = self.turn.take().await;
        let mut current = newer(current, last.as_ref());
        loop {
            let mut state = Arc::unwrap_or_clone(decode(current.as_ref())?);
            let Some(granted) = change(&mut state)? else {
                // Nothing placed (a waiter that must first listen for its
                // grant): the later acquisitions keep waiting for it.
                return Ok(Updated::Unchanged { row: current });
            };
            // Placed, in the turn: the later acquisitions may queue for
            // the turn behind it.
            if let Some(arrival) = arrival.take() {
                arrival.depart();
            }
            let expected = current.as_ref().map(|row| row.version);
            let sent = Instant::now();
            let outcome = self
                .store
                .put_if_version(&self.key, expected, encode(&state)?)
                .await?;
            match outcome {
                PutOutcome::Applied(row) => {
                    // Before anyone hears of the row: they find it decoded.
                    self.turn.decoded.keep(&row, Arc::new(state));
                    *last = Some(row.clone());
                    dispatch::wrote(&self.store, &self.key, &row);
                    self.remember(Some(&row));
                    return Ok(Updated::Applied { granted, row, sent });
                }
                PutOutcome::Conflict(now) => {
                    last.clone_from(&now);
                    self.remember(now.as_ref());
                    current = now;
                }
            }
        }
    }

    /// Tell the waiters a write (`row`) granted: directly those waiting in
    /// this process, through the store (where it can notify) the others. A
    /// failed notify only costs latency (waiters read at least every
    /// lease/4).
    pub(crate) async fn announce(&self, granted: &[String], row: &Row) {
        if granted.is_empty()
            || dispatch::deliver(
                &self.store,
                &self.key,
                granted.iter().map(String::as_str),
                row,
            )
            || !self.watching
        {
            return;
        }
        if let Err(err) = self.store.notify(&self.key).await {
            tracing::debug!(row = %self.key.as_str(), error = %err, "notify failed; waiters will read");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn row(value: &'static str, version: Version) -> Row {
        Row::new(&Key::new("turn/x").unwrap(), Bytes::from(value), version)
    }

    /// Decode `row` through `decoded`, counting the parses in `parses`.
    fn state(decoded: &Decoded, row: &Row, parses: &Cell<u32>) -> Arc<String> {
        decoded
            .state(row, |row| {
                parses.set(parses.get() + 1);
                Ok(String::from_utf8_lossy(&row.value).into_owned())
            })
            .unwrap()
    }

    #[test]
    fn a_row_is_parsed_once_and_a_written_one_never() {
        let (decoded, parses) = (Decoded::default(), Cell::new(0));
        let first = row("a", 1);
        assert_eq!(*state(&decoded, &first, &parses), "a");
        assert_eq!(*state(&decoded, &first, &parses), "a");
        assert_eq!(parses.get(), 1);
        let written = row("b", 2);
        decoded.keep(&written, Arc::new(String::from("b")));
        assert_eq!(*state(&decoded, &written, &parses), "b");
        // The older row is still kept: a grantee reads the row that
        // granted it after the next write.
        assert_eq!(*state(&decoded, &first, &parses), "a");
        assert_eq!(parses.get(), 1);
    }

    #[test]
    fn same_version_other_bytes_is_parsed_again() {
        let (decoded, parses) = (Decoded::default(), Cell::new(0));
        assert_eq!(
            *state(&decoded, &row("before a wipe", 7), &parses),
            "before a wipe"
        );
        assert_eq!(
            *state(&decoded, &row("after a wipe", 7), &parses),
            "after a wipe"
        );
        assert_eq!(parses.get(), 2);
        // And the newer bytes replaced the older ones at that version.
        assert_eq!(
            *state(&decoded, &row("after a wipe", 7), &parses),
            "after a wipe"
        );
        assert_eq!(parses.get(), 2);
    }

    #[test]
    fn another_type_at_the_same_row_is_parsed_not_cast() {
        let decoded = Decoded::default();
        let stored = row("5", 1);
        decoded.keep(&stored, Arc::new(String::from("5")));
        let number = decoded
            .state(&stored, |row| {
                String::from_utf8_lossy(&row.value)
                    .parse::<u64>()
                    .map_err(|e| bakery_core::Error::corrupt("test", e.to_string()))
            })
            .unwrap();
        assert_eq!(*number, 5);
    }

    #[test]
    fn only_the_newest_rows_are_kept() {
        let (decoded, parses) = (Decoded::default(), Cell::new(0));
        let rows: Vec<Row> = (1..=DECODED_KEPT as u64 + 1)
            .map(|version| row("v", version))
            .collect();
        for row in &rows {
            state(&decoded, row, &parses);
        }
        assert_eq!(decoded.lock().len(), DECODED_KEPT);
        let parsed = parses.get();
        state(&decoded, &rows[rows.len() - 1], &parses);
        assert_eq!(parses.get(), parsed, "the newest is kept");
        state(&decoded, &rows[0], &parses);
        assert_eq!(parses.get(), parsed + 1, "the oldest was dropped");
        // An older row than every kept one does not push a newer one out.
        state(&decoded, &rows[1], &parses);
        state(&decoded, &rows[0], &parses);
        assert_eq!(parses.get(), parsed + 2, "row 1 was still kept");
    }
}
