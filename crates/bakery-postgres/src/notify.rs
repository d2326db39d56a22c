//! Notifications: `pg_notify` wakes, one `LISTEN` connection per store
//! watches (see the crate docs, "Notifications").

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bakery_core::watchers::{registration, Watchers as ByKey};
use bakery_core::{Key, Row, Version, Watch};
use tokio_postgres::AsyncMessage;
use tracing::Instrument;

use crate::TableName;

/// PostgreSQL's longest channel name (`NAMEDATALEN - 1` bytes).
const MAX_CHANNEL_LEN: usize = 63;

/// The notification channel of `table`: `bakery_` and the table's name as
/// written (`schema.name`). Names too long for a channel keep their first
/// bytes and end in a stable hash of the whole name, so every process
/// derives the same channel.
pub(crate) fn channel_name(table: &TableName) -> String {
    let full = format!("bakery_{table}");
    if full.len() <= MAX_CHANNEL_LEN {
        return full;
    }
    // FNV-1a: stable across processes, platforms and releases.
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    // The name is ASCII (TableName allows [A-Za-z0-9_.] only).
    let keep = MAX_CHANNEL_LEN - 17;
    format!("{}_{hash:016x}", &full[..keep])
}

/// The LISTEN session of one store. Dropping it (with the store) drops
/// the client, which closes the connection and ends its task.
pub(crate) struct Listener {
    client: tokio_postgres::Client,
    watchers: Arc<Watchers>,
}

impl Listener {
    /// Take over a connected session whose `connection` still needs a
    /// driver: spawn the task that drives it and fans its notifications out.
    pub(crate) fn start<S, T>(
        client: tokio_postgres::Client,
        mut connection: tokio_postgres::Connection<S, T>,
    ) -> Listener
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let watchers = Arc::new(Watchers::new());
        let feed = watchers.clone();
        tokio::spawn(
            async move {
                loop {
                    match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                        // The session listens on one channel: the payload
                        // is the key, and maybe its row.
                        Some(Ok(AsyncMessage::Notification(n))) => feed.wake(n.payload()),
                        // Notices (and future message kinds) wake nobody.
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            tracing::debug!(error = %bakery_core::error::cause_chain(&e), "listener connection failed");
                            break;
                        }
                        None => break,
                    }
                }
                tracing::debug!("listener connection closed; its watchers poll");
                feed.end();
            }
            .in_current_span(),
        );
        Listener { client, watchers }
    }

    /// The session's client (to send `LISTEN`).
    pub(crate) fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }

    /// The watchers fed by this session, if it is still open.
    pub(crate) fn live_watchers(&self) -> Option<Arc<Watchers>> {
        (!self.watchers.ended()).then(|| self.watchers.clone())
    }
}

/// The key a notification's payload names, and the row it carries if it
/// carries one that parses.
fn parse_payload(payload: &str) -> (&str, Option<Row>) {
    let mut lines = payload.splitn(3, '\n');
    let key = lines.next().unwrap_or_default();
    let row = (|| {
        let version = lines.next()?.parse::<Version>().ok()?;
        let value = hex::decode(lines.next()?).ok()?;
        let key = Key::new(key).ok()?;
        Some(Row::new(&key, value.into(), version))
    })();
    (key, row)
}

/// The watches fed by one LISTEN session, by key.
pub(crate) struct Watchers {
    /// `None` once the session ended: every sender was dropped with it.
    by_key: Mutex<Option<ByKey>>,
    /// Raised when the session ends, so registrations stop waiting.
    ended: tokio::sync::watch::Sender<bool>,
}

impl Watchers {
    fn new() -> Self {
        Watchers {
            by_key: Mutex::new(Some(ByKey::default())),
            ended: tokio::sync::watch::Sender::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<ByKey>> {
        // The map stays consistent whatever a panicking holder was doing.
        self.by_key.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// A new watch of `key`, or `None` if the session has ended. A task
    /// forgets the registration once the [`Watch`] is dropped; `live`
    /// counts those tasks.
    pub(crate) fn register(self: &Arc<Self>, key: &str, live: &Arc<AtomicUsize>) -> Option<Watch> {
        let (watch, id, sender) = self.lock().as_mut()?.add(key);
        let watchers = self.clone();
        let key = key.to_string();
        // Until the watch is dropped, or the session ends and drops every
        // registration.
        let forget = async move { watchers.forget(&key, id) };
        tokio::spawn(registration(sender, self.ended.subscribe(), live, forget).in_current_span());
        Some(watch)
    }

    fn forget(&self, key: &str, id: u64) {
        if let Some(by_key) = self.lock().as_mut() {
            by_key.forget(key, id);
        }
    }

    /// Wake the watches a notification names: `payload` is a key, or a
    /// key, version and hex value on three lines (then the watches get
    /// the row). A payload that does not parse wakes its key plainly.
    fn wake(&self, payload: &str) {
        let (key, row) = parse_payload(payload);
        if let Some(by_key) = self.lock().as_ref() {
            match row {
                Some(row) => by_key.wake_with_row(key, &row),
                None => by_key.wake(key),
            }
        }
    }

    /// The session ended: drop every sender (their watches return `false`
    /// and the waiters poll) and release the registration tasks.
    fn end(&self) {
        self.lock().take();
        self.ended.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_fit_postgres_limit_and_are_stable() {
        let short = TableName::parse("bakery.rows").unwrap();
        assert_eq!(channel_name(&short), "bakery_bakery.rows");
        let long = TableName::parse(&format!("{}.{}", "s".repeat(63), "t".repeat(63))).unwrap();
        let other = TableName::parse(&format!("{}.{}u", "s".repeat(63), "t".repeat(62))).unwrap();
        let channel = channel_name(&long);
        assert_eq!(channel.len(), MAX_CHANNEL_LEN);
        assert!(channel.starts_with("bakery_sss"), "{channel}");
        assert_eq!(channel, channel_name(&long), "deterministic");
        assert_ne!(channel, channel_name(&other), "the hash tells them apart");
    }

    /// A payload with a row gives the row; a bare key, a bad version or
    /// bad hex give the key alone (a plain wake-up).
    #[test]
    fn payloads_parse_into_a_key_and_maybe_its_row() {
        let (key, row) = parse_payload("lock/a\n7\n7b7d");
        assert_eq!(key, "lock/a");
        let row = row.expect("a row");
        assert_eq!((row.key.as_str(), row.version), ("lock/a", 7));
        assert_eq!(&row.value[..], b"{}");
        for plain in ["lock/a", "lock/a\nx\n7b7d", "lock/a\n7\nzz", "lock/a\n7"] {
            let (key, row) = parse_payload(plain);
            assert_eq!(key, "lock/a", "{plain:?}");
            assert!(row.is_none(), "{plain:?}");
        }
    }

    #[tokio::test]
    async fn registrations_wake_by_key_and_end_with_the_session() {
        let watchers = Arc::new(Watchers::new());
        let live = Arc::new(AtomicUsize::new(0));
        let mut a = watchers.register("a", &live).unwrap();
        let mut b = watchers.register("b", &live).unwrap();
        watchers.wake("a");
        assert!(a.changed().await);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), b.changed())
                .await
                .is_err()
        );
        watchers.end();
        assert!(!a.changed().await, "an ended session drops its senders");
        assert!(!b.changed().await);
        assert!(watchers.register("a", &live).is_none());
    }
}
