//! The bookkeeping behind a backend's notification feed (PostgreSQL's
//! `LISTEN` session, Redis pub/sub): the open [`Watch`]es by key, and the
//! task that keeps one registered until its watch is dropped or the feed
//! dies.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;

use crate::{Watch, WatchSender};

/// The open watches of one notification feed, by key (or channel): what
/// its listener wakes when a notification arrives.
///
/// ```
/// use bakery_core::watchers::Watchers;
///
/// let mut watchers = Watchers::default();
/// let (_watch, id, _sender) = watchers.add("k");
/// assert!(watchers.contains("k"));
/// watchers.wake("k");
/// assert!(watchers.forget("k", id), "the last watch of `k`");
/// assert!(!watchers.contains("k"));
/// ```
#[derive(Debug, Default)]
pub struct Watchers {
    by_key: HashMap<String, Vec<(u64, WatchSender)>>,
    next_id: u64,
}

impl Watchers {
    /// True when `key` has at least one watch.
    pub fn contains(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    /// A new watch of `key`, its id (for [`Watchers::forget`]) and the
    /// sender that wakes it (for [`registration`]).
    pub fn add(&mut self, key: &str) -> (Watch, u64, WatchSender) {
        let (sender, watch) = Watch::channel();
        let id = self.next_id;
        self.next_id += 1;
        self.by_key
            .entry(key.to_string())
            .or_default()
            .push((id, sender.clone()));
        (watch, id, sender)
    }

    /// Forget the watch `id` of `key`; true when it was the key's last one
    /// (the feed may stop listening to the key).
    pub fn forget(&mut self, key: &str, id: u64) -> bool {
        let Some(senders) = self.by_key.get_mut(key) else {
            return false;
        };
        senders.retain(|(other, _)| *other != id);
        if !senders.is_empty() {
            return false;
        }
        self.by_key.remove(key);
        true
    }

    /// Wake every watch of `key`.
    pub fn wake(&self, key: &str) {
        for (_, sender) in self.by_key.get(key).into_iter().flatten() {
            sender.wake();
        }
    }

    /// Wake every watch of `key` (or channel) with `row`, the row it has
    /// now (see [`WatchSender::wake_with_row`]).
    pub fn wake_with_row(&self, key: &str, row: &crate::Row) {
        for (_, sender) in self.by_key.get(key).into_iter().flatten() {
            sender.wake_with_row(row.clone());
        }
    }
}

/// The task that keeps one watch registered, for the backend to spawn: it
/// waits until the [`Watch`] is dropped, then runs `forget`, or until
/// `ended` turns `true` (the feed died and dropped every registration).
/// It counts itself in `live` from this call until it finishes.
pub fn registration(
    sender: WatchSender,
    mut ended: tokio::sync::watch::Receiver<bool>,
    live: &Arc<AtomicUsize>,
    forget: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    live.fetch_add(1, Ordering::SeqCst);
    let live = live.clone();
    async move {
        let dropped = {
            let mut closed = pin!(sender.closed());
            // (The guard `wait_for` returns is not `Send`: drop it here.)
            let mut ended = pin!(async move { ended.wait_for(|ended| *ended).await.is_ok() });
            poll_fn(|cx| {
                if closed.as_mut().poll(cx).is_ready() {
                    Poll::Ready(true)
                } else if ended.as_mut().poll(cx).is_ready() {
                    Poll::Ready(false)
                } else {
                    Poll::Pending
                }
            })
            .await
        };
        if dropped {
            forget.await;
        }
        live.fetch_sub(1, Ordering::SeqCst);
    }
}
