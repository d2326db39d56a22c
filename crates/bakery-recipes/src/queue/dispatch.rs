//! How a queued waiter learns of its grant: one listener per process and
//! row hands each row to the waiters it grants, and nobody else. Shared by
//! the queue recipes (the lock, the semaphore and the rwlock); each says
//! which waiters a row grants ([`Grantees`]).
//!
//! Every waiter listening to the store itself would wake the whole queue on
//! every change (n wake-ups, n decodes, and on a store that cannot hand over
//! rows n reads per hand-off). Instead the process keeps one [`Dispatcher`]
//! per (store, row) while it has waiters there. It subscribes to the
//! store's notifications once (or, without them, polls the row once for the
//! whole process) and forwards a row only to the registered waiters it
//! grants. A write made in this process hands the new row to the
//! dispatcher directly ([`deliver_later`]): the waiters it grants learn of it
//! without a store round trip, and waiters in other processes through the
//! store's notification.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use std::time::Duration;

use bakery_core::{
    Bytes, Capabilities, Change, Key, OwnWrite, OwnWrites, Result, Row, Version, VersionedStore,
    Watch, WatchSender,
};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::per_process::{slot, PerRow};

/// Which waiters a row grants (the lock: its holder; the semaphore and the
/// rwlock: every holder). Asked once per row heard from the store, by the
/// process's one dispatcher of that row.
pub(crate) type Grantees = Arc<dyn Fn(&Row) -> Result<Vec<Arc<str>>> + Send + Sync>;

/// First poll delay of a dispatcher without notifications, after the row
/// changed; doubled up to the poll interval while it does not. Never below
/// the store's own round trip (one poll in flight at a time), nor below the
/// runtime's timer tick (1 ms): after a change made in another process the
/// next poll is at the next tick, not a millisecond later.
const FIRST_POLL: Duration = Duration::from_micros(100);

static DISPATCHERS: LazyLock<PerRow<Dispatcher>> = LazyLock::new(PerRow::new);

/// How many of the last waiters woken a dispatcher remembers (see
/// [`Dispatcher::woken`]): a grantee leaves within a few writes of its wake.
const WOKEN_KEPT: usize = 16;

/// The process's listener on one row; alive while a waiter holds a
/// [`Registration`].
pub(crate) struct Dispatcher {
    waiters: Mutex<HashMap<String, WatchSender>>,
    /// The newest version forwarded: an older row is not news to anyone.
    newest: Mutex<Option<Version>>,
    /// The last waiters woken here with a row that grants them. On a store
    /// whose watch reports every write (etcd), a grantee may hear of its
    /// grant from the store, and leave, before the process's own write
    /// hands the row over ([`deliver_later`]); it still waited here, so nobody
    /// else needs telling. Ids are unique per request, so an id found here
    /// is a waiter of this process.
    woken: Mutex<VecDeque<String>>,
    /// The newest version this process wrote ([`wrote`]).
    written: Mutex<Option<Version>>,
    /// Marks this process's writes on the store subscription ([`writing`]).
    own_writes: Mutex<Option<OwnWrites>>,
    /// Set once the store subscription is live (or known to be absent).
    ready: watch::Receiver<bool>,
    /// Signalled when a waiter registers: a dispatcher without a
    /// subscription polls only while someone waits.
    registered: Arc<tokio::sync::Notify>,
    /// Dropped with the dispatcher: stops its task.
    _stop: oneshot::Sender<()>,
}

/// A waiter's place at its process's dispatcher; dropping it leaves.
pub(crate) struct Registration {
    dispatcher: Arc<Dispatcher>,
    id: String,
    rows: Watch,
}

impl Registration {
    /// Register waiter `id` for rows of `key`, and return once the
    /// dispatcher hears every change made from now on: call it BEFORE the
    /// write that puts `id` in the queue. `grantees` is called only if this
    /// process has no dispatcher for the row yet.
    pub(crate) async fn join(
        store: &Arc<dyn VersionedStore>,
        key: &Key,
        notifications: bool,
        poll_interval: Duration,
        id: &str,
        grantees: impl FnOnce() -> Grantees,
    ) -> Registration {
        let dispatcher = Dispatcher::for_row(store, key, notifications, poll_interval, grantees);
        let (sender, rows) = Watch::channel();
        if let Ok(mut waiters) = dispatcher.waiters.lock() {
            waiters.insert(id.to_owned(), sender);
        }
        dispatcher.registered.notify_one();
        let mut ready = dispatcher.ready.clone();
        // An error means the task ended: the waiter then reads on its own.
        let _ = ready.wait_for(|ready| *ready).await;
        Registration {
            dispatcher,
            id: id.to_owned(),
            rows,
        }
    }

    /// The process's dispatcher this waiter is registered with.
    pub(crate) fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// Wait for a row newer than `seen` that grants this waiter,
    /// until `until`. `None` at `until` (or if the dispatcher stopped): the
    /// caller reads the row itself.
    pub(crate) async fn wait(&mut self, until: Instant, seen: Option<Version>) -> Option<Row> {
        let sleep = tokio::time::sleep_until(until);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                change = self.rows.next_change() => match change {
                    Some(Change::Row(row)) if seen < Some(row.version) => return Some(row),
                    Some(_) => {}
                    None => {
                        sleep.as_mut().await;
                        return None;
                    }
                },
                () = &mut sleep => return None,
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut waiters) = self.dispatcher.waiters.lock() {
            waiters.remove(&self.id);
        }
    }
}

/// Hand `row` (just written by this process; it grants `granted`) to
/// those of them that wait in this process, when the returned [`Wakes`] is
/// dropped: the writer chooses when the new holder runs (see
/// `Writer::drain`). Their grant then costs them no round trip. True if
/// every one of them waits here (nobody else needs to be told). The row is
/// marked delivered at once, so the dispatcher does not forward it
/// meanwhile.
pub(crate) fn deliver_later<'a>(
    store: &Arc<dyn VersionedStore>,
    key: &Key,
    granted: impl IntoIterator<Item = &'a str>,
    row: &Row,
) -> (bool, Wakes) {
    match DISPATCHERS.get(&slot(store, key, true)) {
        Some(dispatcher) => dispatcher.forward(granted, row),
        None => (granted.into_iter().next().is_none(), Wakes::default()),
    }
}

/// Rows to hand to waiters, handed over when this is dropped (however the
/// holder ends: a wake-up is never lost).
#[derive(Default)]
#[must_use = "the waiters are woken when this is dropped"]
pub(crate) struct Wakes {
    to: Vec<(WatchSender, Row)>,
}

impl Wakes {
    /// Nobody to wake.
    pub(crate) fn is_empty(&self) -> bool {
        self.to.is_empty()
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        for (waiter, row) in self.to.drain(..) {
            waiter.wake_with_row(row);
        }
    }
}

/// Note that this process wrote `row` (its writer tells the waiters it
/// grants here). A poll that finds it is no sign of another process at
/// work, so the polls keep backing off.
pub(crate) fn wrote(store: &Arc<dyn VersionedStore>, key: &Key, row: &Row) {
    if let Some(dispatcher) = DISPATCHERS.get(&slot(store, key, true)) {
        if let Ok(mut written) = dispatcher.written.lock() {
            if written.is_none_or(|written| written < row.version) {
                *written = Some(row.version);
            }
        }
    }
}

/// Mark `value`, which this process's writer is about to write to `key`
/// and will hand to its waiters itself ([`deliver_later`]): an in-process
/// store's report of that write then does not wake the dispatcher (on two
/// worker threads that wake-up, for news the writer delivers anyway, made
/// the idle worker steal the new holder). Hold the mark until the write
/// returns.
pub(crate) fn writing(
    store: &Arc<dyn VersionedStore>,
    key: &Key,
    value: &Bytes,
) -> Option<OwnWrite> {
    let dispatcher = DISPATCHERS.get(&slot(store, key, true))?;
    let own_writes = dispatcher.own_writes.lock().ok()?.clone()?;
    Some(own_writes.writing(value))
}

impl Dispatcher {
    /// This process's dispatcher for the row, started if there is none.
    fn for_row(
        store: &Arc<dyn VersionedStore>,
        key: &Key,
        notifications: bool,
        poll_interval: Duration,
        grantees: impl FnOnce() -> Grantees,
    ) -> Arc<Dispatcher> {
        DISPATCHERS.get_or_create(slot(store, key, notifications), || {
            let (stop, stopped) = oneshot::channel();
            // Only a subscription is worth waiting for: a polling
            // dispatcher is ready at once (its first read is after any
            // write a waiter makes next).
            let subscribes = notifications && store.capabilities().contains(Capabilities::WATCH);
            let (set_ready, ready) = watch::channel(!subscribes);
            let registered = Arc::new(tokio::sync::Notify::new());
            let dispatcher = Arc::new(Dispatcher {
                waiters: Mutex::new(HashMap::new()),
                newest: Mutex::new(None),
                woken: Mutex::new(VecDeque::with_capacity(WOKEN_KEPT)),
                written: Mutex::new(None),
                own_writes: Mutex::new(None),
                ready,
                registered: registered.clone(),
                _stop: stop,
            });
            let source = Source {
                store: store.clone(),
                key: key.clone(),
                notifications,
                poll_interval,
                grantees: grantees(),
                registered,
            };
            tokio::spawn(source.run(Arc::downgrade(&dispatcher), set_ready, stopped));
            dispatcher
        })
    }

    /// Forward `row` to those of `granted` that wait here, if the row is
    /// news. True if every one of them is ours (the row reached them, now or
    /// with an earlier forward of the same or a newer row).
    fn forward<'a>(&self, granted: impl IntoIterator<Item = &'a str>, row: &Row) -> (bool, Wakes) {
        let mut wakes = Wakes::default();
        let news = match self.newest.lock() {
            Ok(mut newest) => {
                let news = newest.is_none_or(|newest| row.version > newest);
                if news {
                    *newest = Some(row.version);
                }
                news
            }
            Err(_) => true,
        };
        let Ok(waiters) = self.waiters.lock() else {
            return (false, wakes);
        };
        let Ok(mut woken) = self.woken.lock() else {
            return (false, wakes);
        };
        let mut all_ours = true;
        for id in granted {
            match waiters.get(id) {
                Some(waiter) if news => {
                    wakes.to.push((waiter.clone(), row.clone()));
                    if woken.len() == WOKEN_KEPT {
                        woken.pop_front();
                    }
                    woken.push_back(id.to_owned());
                }
                Some(_) => {}
                // Gone, but woken here (by the store's report of this very
                // write, say): ours.
                None if woken.iter().any(|w| w == id) => {}
                None => all_ours = false,
            }
        }
        (all_ours, wakes)
    }

    /// Nobody waits here.
    fn idle(&self) -> bool {
        self.waiters.lock().is_ok_and(|waiters| waiters.is_empty())
    }

    /// Listens to the store itself (not by polling).
    pub(crate) fn subscribed(&self) -> bool {
        self.own_writes.lock().is_ok_and(|own| own.is_some())
    }

    /// Is `row` no newer than this process's newest write (see [`wrote`])?
    /// Then that write was made on it or on a later row, and handed the
    /// lock's news to its waiters here: a poll that finds it, though
    /// this process wrote again while the poll was under way, is no
    /// sign of another process at work.
    fn wrote(&self, row: &Row) -> bool {
        self.written
            .lock()
            .is_ok_and(|written| written.is_some_and(|written| row.version <= written))
    }

    /// Forward a row heard from the store to the waiters it grants (asked
    /// of the recipe once for the whole process).
    fn forward_heard(&self, row: &Row, grantees: &Grantees) {
        if self
            .newest
            .lock()
            .is_ok_and(|newest| newest.is_some_and(|newest| row.version <= newest))
        {
            return;
        }
        match grantees(row) {
            Ok(granted) => {
                // Woken here and now: the listener answers nobody.
                drop(self.forward(granted.iter().map(|id| &**id), row));
            }
            // The waiters' own reads report it.
            Err(err) => tracing::debug!(error = %err, "dispatcher: undecodable row"),
        }
    }
}

/// What a dispatcher heard.
enum Heard {
    /// A notification with the row the change left.
    Row(Row),
    /// A notification without the row: read it.
    Read,
    /// Time for the next poll (no notifications).
    Polled,
}

/// Where a dispatcher hears of changes.
struct Source {
    store: Arc<dyn VersionedStore>,
    key: Key,
    notifications: bool,
    poll_interval: Duration,
    grantees: Grantees,
    registered: Arc<tokio::sync::Notify>,
}

impl Source {
    async fn run(
        self,
        dispatcher: Weak<Dispatcher>,
        set_ready: watch::Sender<bool>,
        mut stopped: oneshot::Receiver<()>,
    ) {
        let mut watch = if self.notifications {
            match self.store.watch(&self.key).await {
                Ok(watch) => watch,
                Err(err) => {
                    tracing::debug!(row = %self.key.as_str(), error = %err, "watch failed; polling");
                    None
                }
            }
        } else {
            None
        };
        if let (Some(watch), Some(dispatcher)) = (&watch, dispatcher.upgrade()) {
            if let Ok(mut own_writes) = dispatcher.own_writes.lock() {
                *own_writes = Some(watch.own_writes());
            }
        }
        set_ready.send_replace(true);
        let mut next_poll = FIRST_POLL.min(self.poll_interval);
        let mut last_polled: Option<Version> = None;
        loop {
            // Without a subscription, poll only while someone waits (a
            // dispatcher may be kept by its row's writer between waits).
            if watch.is_none() && dispatcher.upgrade().is_some_and(|d| d.idle()) {
                tokio::select! {
                    () = self.registered.notified() => {}
                    _ = &mut stopped => return,
                }
                next_poll = FIRST_POLL.min(self.poll_interval);
            }
            let heard = tokio::select! {
                heard = self.hear(&mut watch, next_poll) => heard,
                _ = &mut stopped => return,
            };
            let Some(dispatcher) = dispatcher.upgrade() else {
                return;
            };
            if watch.is_none() {
                // The subscription stopped (or never was): no longer kept
                // by the writer between waits.
                if let Ok(mut own_writes) = dispatcher.own_writes.lock() {
                    *own_writes = None;
                }
            }
            let row = match heard {
                Heard::Row(row) => row,
                Heard::Read => match self.read().await {
                    Some(row) => row,
                    None => continue,
                },
                Heard::Polled => {
                    let sent = Instant::now();
                    let read = self.read().await;
                    // Never poll faster than the store answers: a slow
                    // store is not loaded further by its own listeners.
                    let floor = FIRST_POLL.max(sent.elapsed()).min(self.poll_interval);
                    let Some(row) = read else {
                        next_poll = (next_poll * 2).clamp(floor, self.poll_interval);
                        continue;
                    };
                    let moved = last_polled != Some(row.version);
                    last_polled = Some(row.version);
                    // Only a change made in another process keeps the
                    // polls fast: a row this process wrote was handed to
                    // its waiters by the write, so a process whose own
                    // writes pass the lock on does not load the store.
                    next_poll = if moved && !dispatcher.wrote(&row) {
                        floor
                    } else {
                        (next_poll * 2).clamp(floor, self.poll_interval)
                    };
                    if !moved {
                        continue;
                    }
                    row
                }
            };
            dispatcher.forward_heard(&row, &self.grantees);
        }
    }

    /// Wait for the next notification, or (without one) the next poll.
    async fn hear(&self, watch: &mut Option<Watch>, next_poll: Duration) -> Heard {
        let Some(feed) = watch.as_mut() else {
            tokio::time::sleep(next_poll).await;
            return Heard::Polled;
        };
        match feed.next_change().await {
            Some(Change::Row(row)) => Heard::Row(row),
            Some(Change::Read) => Heard::Read,
            None => {
                tracing::debug!(row = %self.key.as_str(), "store notifications stopped; polling");
                *watch = None;
                Heard::Polled
            }
        }
    }

    async fn read(&self) -> Option<Row> {
        match self.store.get(&self.key).await {
            Ok(row) => row,
            Err(err) => {
                tracing::debug!(row = %self.key.as_str(), error = %err, "dispatcher read failed");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bakery_core::{Bytes, MemoryStore, PutOutcome};

    use super::*;

    /// A grantee that heard of its grant from the store's own report of a
    /// write and left before the writing process handed the row over is
    /// still known to be of this process: no other process needs telling.
    /// A grantee never seen here is not.
    #[tokio::test]
    async fn a_grantee_woken_here_and_gone_still_counts_as_ours() {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        let key = Key::new("dispatch/woken").expect("key");
        let grants_a: Grantees = Arc::new(|_| Ok(vec![Arc::from("a")]));
        let join = |id: &'static str| {
            let grantees = grants_a.clone();
            Registration::join(&store, &key, true, Duration::from_secs(1), id, move || {
                grantees
            })
        };
        // "z" keeps the dispatcher alive, as the rest of a queue would.
        let _z = join("z").await;
        let mut a = join("a").await;
        let row = match store
            .put_if_version(&key, None, Bytes::from_static(b"a holds it"))
            .await
            .expect("put")
        {
            PutOutcome::Applied(row) => row,
            PutOutcome::Conflict(_) => panic!("a fresh key"),
        };
        // The store's report reaches "a" first; it takes its grant and goes.
        let heard = a
            .wait(Instant::now() + Duration::from_secs(5), None)
            .await
            .expect("the store's report of the write");
        assert_eq!(heard.version, row.version);
        drop(a);
        assert!(
            deliver_later(&store, &key, ["a"], &row).0,
            "woken here: ours"
        );
        assert!(
            !deliver_later(&store, &key, ["b"], &row).0,
            "never here: another process's"
        );
    }

    /// A delivery held back reaches its waiter when the writer lets it go,
    /// not before, and the dispatcher does not forward the row meanwhile.
    #[tokio::test]
    async fn a_held_back_delivery_wakes_its_waiter_when_dropped() {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        let key = Key::new("dispatch/later").expect("key");
        let grants_a: Grantees = Arc::new(|_| Ok(vec![Arc::from("a")]));
        let mut a = Registration::join(&store, &key, true, Duration::from_secs(60), "a", || {
            grants_a
        })
        .await;
        let row = Row {
            key: key.clone(),
            value: Bytes::from_static(b"a holds it"),
            version: 7,
        };
        let (ours, wakes) = deliver_later(&store, &key, ["a"], &row);
        assert!(ours, "a waits here");
        assert!(!wakes.is_empty());
        let soon = || Instant::now() + Duration::from_millis(50);
        assert!(a.wait(soon(), None).await.is_none(), "held back");
        drop(wakes);
        let heard = a.wait(soon(), None).await.expect("woken once dropped");
        assert_eq!(heard.version, 7);
        let (_, again) = deliver_later(&store, &key, ["a"], &row);
        assert!(again.is_empty(), "the same row is not news twice");
    }
}
