//! Notifications: `PUBLISH` wakes, one pub/sub connection per store
//! watches (see the crate docs, "Notifications").

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use bakery_core::watchers::{registration, Watchers};
use bakery_core::{Key, Operation, Result, Watch};
use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::error::{map_err, Phase};
use crate::store::scripts::notified_row;

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
                channels: Some(Watchers::default()),
            }),
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
                Some(message) => {
                    let row = notified_row(message.get_payload_bytes());
                    sub.wake(message.get_channel_name(), row).await;
                }
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

struct State {
    sink: PubSubSink,
    /// The subscribed channels and their watches; `None` once the
    /// connection ended (every sender was dropped with it).
    channels: Option<Watchers>,
}

/// The watches fed by one pub/sub connection. (Un)subscribing happens
/// under the state lock, so a channel's `UNSUBSCRIBE` and a new watch's
/// `SUBSCRIBE` reach the server in the order the map changed.
pub(crate) struct Subscriber {
    state: tokio::sync::Mutex<State>,
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
        if !channels.contains(channel) {
            sink.subscribe(channel)
                .await
                .map_err(|e| map_err(e.into(), Operation::Watch, Phase::Read, Some(key)))?;
        }
        let (watch, id, sender) = channels.add(channel);
        drop(state);
        let subscriber = self.clone();
        let channel = channel.to_string();
        // Until the watch is dropped, or the connection ends and drops every
        // registration.
        let forget = async move { subscriber.forget(&channel, id).await };
        let ended = self.ended.subscribe();
        tokio::spawn(registration(sender, ended, live, forget).in_current_span());
        Ok(Some(watch))
    }

    /// Remove a dropped watch; the last one of a channel unsubscribes it.
    async fn forget(&self, channel: &str, id: u64) {
        let mut state = self.state.lock().await;
        let State { sink, channels } = &mut *state;
        let Some(channels) = channels.as_mut() else {
            return;
        };
        if channels.forget(channel, id) {
            // A failure leaves an idle subscription: extra messages only.
            match tokio::time::timeout(self.timeout, sink.unsubscribe(channel)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "UNSUBSCRIBE failed"),
                Err(_) => tracing::debug!("UNSUBSCRIBE timed out"),
            }
        }
    }

    /// Wake the watches of `channel`, with the row the message carried if
    /// it carried one.
    async fn wake(&self, channel: &str, row: Option<bakery_core::Row>) {
        let state = self.state.lock().await;
        if let Some(channels) = state.channels.as_ref() {
            match row {
                Some(row) => channels.wake_with_row(channel, &row),
                None => channels.wake(channel),
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
