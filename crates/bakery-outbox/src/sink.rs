//! Where the relay delivers: any [`Sink`]; two are provided.

use std::io::Write;

use async_trait::async_trait;
use bakery_core::{Error, ErrorKind, Result};
use bakery_recipes::consumer::{Consumer, Processed};
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::{Message, BACKEND};

/// Receives the relay's messages in delivery order. `deliver` returning
/// `Ok` acknowledges nothing yet; the relay confirms a batch after
/// [`flush`](Sink::flush) returned `Ok`, so a sink must have made every
/// delivered message durable by then.
#[async_trait]
pub trait Sink: Send {
    /// Take one message.
    async fn deliver(&mut self, message: &Message) -> Result<()>;

    /// Make everything delivered so far durable.
    async fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Writes one JSON object per message (`key`, `commit_lsn`, `lsn`, `xid`,
/// `prefix`, `payload` in base64) — at-least-once: a relay restarted
/// before it confirmed writes the batch again.
pub struct JsonLines<W: Write + Send> {
    out: W,
}

impl<W: Write + Send> JsonLines<W> {
    /// Write lines to `out`.
    pub fn new(out: W) -> Self {
        JsonLines { out }
    }
}

#[async_trait]
impl<W: Write + Send> Sink for JsonLines<W> {
    async fn deliver(&mut self, m: &Message) -> Result<()> {
        let line = serde_json::json!({
            "key": m.key.to_string(),
            "commit_lsn": crate::decode::format_lsn(m.commit_lsn),
            "lsn": crate::decode::format_lsn(m.lsn),
            "xid": m.xid,
            "prefix": m.prefix,
            "payload": base64::engine::general_purpose::STANDARD.encode(&m.payload),
        });
        serde_json::to_writer(&mut self.out, &line)
            .map_err(|e| Error::new(ErrorKind::Unavailable, BACKEND, format!("writing: {e}")))?;
        self.out
            .write_all(b"\n")
            .map_err(|e| Error::new(ErrorKind::Unavailable, BACKEND, format!("writing: {e}")))
    }

    async fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .map_err(|e| Error::new(ErrorKind::Unavailable, BACKEND, format!("flushing: {e}")))
    }
}

/// The state [`ConsumerSink::digest`] keeps per partition: how many
/// messages were applied and a SHA-256 chained over them in order
/// (`sha256(previous ‖ key as 16 bytes big-endian ‖ payload)`), so two runs
/// can be compared without storing every message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// Messages applied.
    pub count: u64,
    /// The chained hash, hex (empty before the first message).
    pub sha256: String,
}

impl Digest {
    /// The digest after applying `key`/`payload`.
    pub fn apply(&self, key: u128, payload: &[u8]) -> Digest {
        let mut h = Sha256::new();
        h.update(self.sha256.as_bytes());
        h.update(key.to_be_bytes());
        h.update(payload);
        Digest {
            count: self.count + 1,
            sha256: h.finalize().iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// Exactly-once delivery into a bakery [`Consumer`] on any backend: each
/// message is applied to its partition's state with the mark advanced in
/// the same conditional write; re-delivered messages are dropped as
/// duplicates.
pub struct ConsumerSink<S, F> {
    consumer: Consumer,
    partition: Option<String>,
    apply: F,
    /// Messages applied / dropped as duplicates by this sink.
    pub applied: u64,
    /// See [`applied`](Self::applied).
    pub duplicates: u64,
    _state: std::marker::PhantomData<fn() -> S>,
}

impl<S, F> ConsumerSink<S, F>
where
    S: Serialize + serde::de::DeserializeOwned + Default + Send,
    F: FnMut(S, &Message) -> S + Send,
{
    /// Apply messages to `consumer`'s state with `apply`. The partition is
    /// the message's prefix unless [`partition`](Self::partition) fixes one.
    pub fn new(consumer: Consumer, apply: F) -> Self {
        ConsumerSink {
            consumer,
            partition: None,
            apply,
            applied: 0,
            duplicates: 0,
            _state: std::marker::PhantomData,
        }
    }

    /// Put every message in one partition.
    pub fn partition(mut self, partition: &str) -> Result<Self> {
        bakery_core::validate_name(partition)?;
        self.partition = Some(partition.to_owned());
        Ok(self)
    }
}

impl ConsumerSink<Digest, fn(Digest, &Message) -> Digest> {
    /// A sink whose state is a [`Digest`] of the messages applied.
    pub fn digest(consumer: Consumer) -> Self {
        ConsumerSink::new(consumer, |d: Digest, m: &Message| {
            d.apply(m.key, &m.payload)
        })
    }
}

#[async_trait]
impl<S, F> Sink for ConsumerSink<S, F>
where
    S: Serialize + serde::de::DeserializeOwned + Default + Send,
    F: FnMut(S, &Message) -> S + Send,
{
    async fn deliver(&mut self, m: &Message) -> Result<()> {
        let partition = self.partition.clone().unwrap_or_else(|| m.prefix.clone());
        let apply = &mut self.apply;
        match self
            .consumer
            .process(&partition, m.key, |s| apply(s, m))
            .await?
        {
            Processed::Applied(_) => self.applied += 1,
            Processed::Duplicate { .. } => self.duplicates += 1,
            Processed::Expired { .. } => return Err(Error::invalid_input(
                BACKEND,
                "the consumer refuses old keys; an outbox consumer must not set reject_older_than",
            )),
        }
        Ok(())
    }
}
