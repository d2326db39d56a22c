//! Notifications: `PUBLISH` wakes, one pub/sub connection per store
//! watches (see the crate docs, "Notifications").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Key, Operation, Result, Watch, WatchSender};
use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::error::{map_err, Phase};

/// The pub/sub connection of one store. Dropping it (with the store) ends
/// its task and closes the connection.
pub(crate) struct Listener {
    subscriber: Arc<Subscriber>,
    /// Dropped with the store: tells the task to stop.
    _stop: oneshot::Sender<()>,
}

impl Listener {
    /// Take over a connected pub/sub connection: spawn the task that wakes
    /// the watches of each message's channel. `timeout` bounds the
    /// `UNSUBSCRIBE` sent when a channel's last watch is dropped.
    pub(crate) fn start(pubsub: redis::aio::PubSub, timeout: Duration) -> Listener {
        let (sink, stream) = pubsub.split();
        let subscriber = Arc::new(Subscriber {
            state: tokio::sync::Mutex::new(State {
                sink,
                channels: Some(HashMap::new()),
            }),
            next_id: AtomicU64::new(0),
            ended: tokio::sync::watch::Sender::new(false),
            timeout,
        });
        let (stop, stopped) = oneshot::channel();
        tokio::spawn(feed(stream, stopped, subscriber.clone()).in_current_span());
        Listener {
            subscriber,
            _stop: stop,
        }
    }

    /// The subscriber, if its connection is still open.
    pub(crate) fn live(&self) -> Option<Arc<Subscriber>> {
        (!self.subscriber.ended()).then(|| self.subscriber.clone())
    }
}

/// Wake the watches of each message's channel until the connection ends
/// or the store is dropped; then drop every sender (the waiters poll).
async fn feed(mut stream: PubSubStream, mut stopped: oneshot::Receiver<()>, sub: Arc<Subscriber>) {
    loop {
        tokio::select! {
            message = stream.next() => match message {
                Some(message) => sub.wake(message.get_channel_name()).await,
                None => {
                    tracing::debug!("pub/sub connection closed; its watchers poll");
                    break;
                }
            },
            _ = &mut stopped => break,
        }
    }
    sub.end().await;
}

type Senders = HashMap<String, Vec<(u64, WatchSender)>>;

struct State {
    sink: PubSubSink,
    /// The subscribed channels and their watches; `None` once the
    /// connection ended (every sender was dropped with it).
    channels: Option<Senders>,
}

/// The watches fed by one pub/sub connection. (Un)subscribing happens
/// under the state lock, so a channel's `UNSUBSCRIBE` and a new watch's
/// `SUBSCRIBE` reach the server in the order the map changed.
pub(crate) struct Subscriber {
    state: tokio::sync::Mutex<State>,
    next_id: AtomicU64,
    /// Raised when the connection ends, so registrations stop waiting.
    ended: tokio::sync::watch::Sender<bool>,
    timeout: Duration,
}

impl Subscriber {
    fn ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// A new watch of `key` on `channel`, subscribed (confirmed by the
    /// server) before this returns; `None` if the connection has ended. A
    /// task forgets the registration once the [`Watch`] is dropped; `live`
    /// counts those tasks.
    pub(crate) async fn register(
        self: &Arc<Self>,
        key: &Key,
        channel: &str,
        live: &Arc<AtomicUsize>,
    ) -> Result<Option<Watch>> {
        let mut state = self.state.lock().await;
        let State { sink, channels } = &mut *state;
        let Some(channels) = channels.as_mut() else {
            return Ok(None);
        };
        if !channels.contains_key(channel) {
            sink.subscribe(channel)
                .await
                .map_err(|e| map_err(e.into(), Operation::Watch, Phase::Read, Some(key)))?;
        }
        let (sender, watch) = Watch::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        channels
            .entry(channel.to_string())
            .or_default()
            .push((id, sender.clone()));
        drop(state);
        live.fetch_add(1, Ordering::SeqCst);
        let subscriber = self.clone();
        let channel = channel.to_string();
        let live = live.clone();
        tokio::spawn(
            async move {
                let mut ended = subscriber.ended.subscribe();
                // (The guard `wait_for` returns is not `Send`: drop it here.)
                let ended = async move { ended.wait_for(|ended| *ended).await.is_ok() };
                tokio::select! {
                    () = sender.closed() => subscriber.forget(&channel, id).await,
                    // The connection ended and dropped every registration.
                    _ = ended => {}
                }
                live.fetch_sub(1, Ordering::SeqCst);
            }
            .in_current_span(),
        );
        Ok(Some(watch))
    }

    /// Remove a dropped watch; the last one of a channel unsubscribes it.
    async fn forget(&self, channel: &str, id: u64) {
        let mut state = self.state.lock().await;
        let State { sink, channels } = &mut *state;
        let Some(channels) = channels.as_mut() else {
            return;
        };
        let Some(senders) = channels.get_mut(channel) else {
            return;
        };
        senders.retain(|(other, _)| *other != id);
        if senders.is_empty() {
            channels.remove(channel);
            // A failure leaves an idle subscription: extra messages only.
            match tokio::time::timeout(self.timeout, sink.unsubscribe(channel)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "UNSUBSCRIBE failed"),
                Err(_) => tracing::debug!("UNSUBSCRIBE timed out"),
            }
        }
    }

    async fn wake(&self, channel: &str) {
        let state = self.state.lock().await;
        if let Some(senders) = state.channels.as_ref().and_then(|c| c.get(channel)) {
            for (_, sender) in senders {
                sender.wake();
            }
        }
    }

    /// The connection ended: drop every sender (their watches return
    /// `false` and the waiters poll) and release the registration tasks.
    async fn end(&self) {
        self.state.lock().await.channels = None;
        self.ended.send_replace(true);
    }
}
