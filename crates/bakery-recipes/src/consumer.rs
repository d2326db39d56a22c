//! Exactly-once processing of at-least-once messages: per partition, ONE row
//! holds the highest key processed (the high-water mark) and the consumer's
//! state, and both change in one `put_if_version`.
//!
//! Messages arrive at least once; when each partition's keys increase (a
//! sequence id, a WAL position, a UUIDv7 — see [`keys`](mod@crate::keys)), a
//! consumer needs to remember one value per partition, not every key it
//! ever saw: a key at or below the mark is a duplicate (or a message that
//! arrived after a later one, which the producer's order rules out). The
//! check and the state change are one conditional write, so a crash between
//! "applied" and "remembered" cannot happen.
//!
//! `process` costs one store round trip when this handle wrote the
//! partition last (it writes against the version it remembers, and a
//! conflict returns the current row for the retry), two the first time.
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use bakery_core::MemoryStore;
//! use bakery_recipes::consumer::{Consumer, Processed};
//!
//! # #[tokio::main]
//! # async fn main() -> bakery_core::Result<()> {
//! let store = Arc::new(MemoryStore::new());
//! let balances = Consumer::builder(store, "balances").build()?;
//!
//! // key 7 deposits 10, then is delivered again.
//! let add = |b: i64| b + 10;
//! assert!(matches!(balances.process("acct-1", 7, add).await?, Processed::Applied(10)));
//! assert!(matches!(balances.process("acct-1", 7, add).await?, Processed::Duplicate { mark: 7 }));
//! assert_eq!(balances.state::<i64>("acct-1").await?, Some((7, 10)));
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{Bytes, Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::keys;

/// Key prefix of consumer rows: partition `p` of consumer `c` is stored
/// under `consumer/c/p`.
pub const KEY_PREFIX: &str = "consumer";

/// What [`Consumer::process`] did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed<S> {
    /// Applied; the partition's new state. The mark is now the message's key.
    Applied(S),
    /// The key is at or below the mark: already processed (or out of
    /// order). Nothing was changed.
    Duplicate {
        /// The partition's mark.
        mark: u128,
    },
    /// A time-ordered key older than the consumer's window
    /// ([`ConsumerBuilder::reject_older_than`]): the sender must issue a new
    /// key. Nothing was changed.
    Expired {
        /// How old the key was.
        age: Duration,
    },
}

impl<S> Processed<S> {
    /// True if this call applied the message.
    pub fn applied(&self) -> bool {
        matches!(self, Processed::Applied(_))
    }
}

/// Configures a [`Consumer`]; start with [`Consumer::builder`].
#[derive(Debug, Clone)]
pub struct ConsumerBuilder {
    store: Arc<dyn VersionedStore>,
    name: String,
    max_age: Option<Duration>,
}

impl ConsumerBuilder {
    /// Treat keys as UUIDv7 ([`keys::uuid7`]) and refuse those older than
    /// `window` by this process's clock with [`Processed::Expired`]: the
    /// sender learns that its key expired instead of being deduplicated
    /// against a mark that may have moved past it.
    pub fn reject_older_than(mut self, window: Duration) -> Self {
        self.max_age = Some(window);
        self
    }

    /// Check the settings and build. No store call is made.
    pub fn build(self) -> Result<Consumer> {
        Key::with_prefix(KEY_PREFIX, &self.name)?;
        Ok(Consumer {
            store: self.store,
            name: self.name,
            max_age: self.max_age,
            last: Mutex::new(HashMap::new()),
        })
    }
}

/// A high-water-mark consumer. Share one handle per process (it remembers
/// each partition's last row to save a read). See the [module docs](self).
pub struct Consumer {
    store: Arc<dyn VersionedStore>,
    name: String,
    max_age: Option<Duration>,
    /// Per partition, the row as this handle last saw it.
    last: Mutex<HashMap<String, Row>>,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("name", &self.name)
            .field("backend", &self.store.backend())
            .finish()
    }
}

/// The row's first line (JSON); the state's bytes follow after a newline.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    /// The high-water mark, in decimal (JSON numbers stop at 2^53).
    mark: String,
    /// Which `process` call wrote it: resolves an unknown outcome.
    by: String,
}

/// A decoded consumer row.
struct Partition {
    mark: u128,
    by: String,
    state: Bytes,
}

impl Partition {
    fn decode(row: &Row) -> Result<Partition> {
        let corrupt = |why: String| {
            Error::corrupt(
                "consumer",
                format!("row {} is not a bakery consumer row: {why}", row.key),
            )
        };
        let split = row
            .value
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| corrupt("no header line".into()))?;
        let header: Header =
            serde_json::from_slice(&row.value[..split]).map_err(|e| corrupt(e.to_string()))?;
        let mark = keys::parse(&header.mark).map_err(|e| corrupt(e.message().to_owned()))?;
        Ok(Partition {
            mark,
            by: header.by,
            state: row.value.slice(split + 1..),
        })
    }

    fn encode(mark: u128, by: &str, state: &[u8]) -> Result<Bytes> {
        let header = serde_json::to_vec(&Header {
            mark: mark.to_string(),
            by: by.to_owned(),
        })
        .map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                "consumer",
                format!("encode header: {e}"),
            )
        })?;
        let mut value = header;
        value.push(b'\n');
        value.extend_from_slice(state);
        Ok(value.into())
    }
}

impl Consumer {
    /// Start configuring consumer `name` (a name: letters, digits and
    /// `_ - . : @ + =`).
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> ConsumerBuilder {
        ConsumerBuilder {
            store,
            name: name.to_owned(),
            max_age: None,
        }
    }

    /// The consumer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The row key of `partition` (validated like a name): the one row
    /// holding its mark and state. No store call.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// use bakery_recipes::consumer::Consumer;
    /// let store = Arc::new(bakery_core::MemoryStore::new());
    /// let consumer = Consumer::builder(store, "orders").build()?;
    /// assert_eq!(consumer.row_key("eu-1")?.as_str(), "consumer/orders/eu-1");
    /// # Ok::<(), bakery_core::Error>(())
    /// ```
    pub fn row_key(&self, partition: &str) -> Result<Key> {
        bakery_core::validate_name(partition)?;
        Key::new(format!("{KEY_PREFIX}/{}/{partition}", self.name))
    }

    /// Apply message `key` of `partition` to its state with `apply`, unless
    /// `key` is at or below the partition's mark. `apply` gets the current
    /// state (`None` for a new partition) and may be called again if
    /// another consumer wrote the partition meanwhile: it must be a pure
    /// function of its input.
    pub async fn process_bytes(
        &self,
        partition: &str,
        key: u128,
        mut apply: impl FnMut(Option<&[u8]>) -> Vec<u8>,
    ) -> Result<Processed<Bytes>> {
        self.process_inner(partition, key, |state| Ok(apply(state)))
            .await
    }

    /// The loop behind both forms: `apply` may refuse (a stored state that
    /// does not decode), and nothing is written then.
    async fn process_inner(
        &self,
        partition: &str,
        key: u128,
        mut apply: impl FnMut(Option<&[u8]>) -> Result<Vec<u8>>,
    ) -> Result<Processed<Bytes>> {
        let row_key = self.row_key(partition)?;
        if let Some(window) = self.max_age {
            let age = keys::uuid7_age(key, std::time::SystemTime::now())?;
            if age > window {
                return Ok(Processed::Expired { age });
            }
        }
        let by = uuid::Uuid::new_v4().simple().to_string();
        let mut current = self.remembered(partition);
        loop {
            let decoded = current.as_ref().map(Partition::decode).transpose()?;
            if let Some(p) = &decoded {
                if key <= p.mark {
                    return Ok(Processed::Duplicate { mark: p.mark });
                }
            }
            let state = apply(decoded.as_ref().map(|p| p.state.as_ref()))?;
            let value = Partition::encode(key, &by, &state)?;
            let expected = current.as_ref().map(|r| r.version);
            match self.store.put_if_version(&row_key, expected, value).await {
                Ok(PutOutcome::Applied(row)) => {
                    self.remember(partition, row);
                    return Ok(Processed::Applied(Bytes::from(state)));
                }
                Ok(PutOutcome::Conflict(now)) => current = now,
                Err(e) if e.outcome_unknown() => {
                    // Read back: applied by this call only if the row says so.
                    current = self.store.get(&row_key).await?;
                    if let Some(row) = &current {
                        let p = Partition::decode(row)?;
                        if p.by == by {
                            self.remember(partition, row.clone());
                            return Ok(Processed::Applied(Bytes::from(state)));
                        }
                    }
                }
                Err(e) => {
                    self.forget(partition);
                    return Err(e);
                }
            }
            match &current {
                Some(row) => self.remember(partition, row.clone()),
                None => self.forget(partition),
            }
        }
    }

    /// [`process_bytes`](Self::process_bytes) with a serde state (JSON);
    /// a new partition starts from `S::default()`.
    pub async fn process<S>(
        &self,
        partition: &str,
        key: u128,
        mut apply: impl FnMut(S) -> S,
    ) -> Result<Processed<S>>
    where
        S: Serialize + DeserializeOwned + Default,
    {
        let mut last = None;
        let outcome = self
            .process_inner(partition, key, |bytes| {
                let state = match bytes {
                    Some(b) => decode_state::<S>(b)?,
                    None => S::default(),
                };
                let next = apply(state);
                let encoded = serde_json::to_vec(&next).map_err(|e| {
                    Error::invalid_input("consumer", format!("encode the state: {e}"))
                })?;
                last = Some(next);
                Ok(encoded)
            })
            .await;
        match outcome? {
            Processed::Applied(_) => last.map(Processed::Applied).ok_or_else(|| {
                Error::new(ErrorKind::Internal, "consumer", "applied without a state")
            }),
            Processed::Duplicate { mark } => Ok(Processed::Duplicate { mark }),
            Processed::Expired { age } => Ok(Processed::Expired { age }),
        }
    }

    /// The partition's mark and state bytes, read from the store.
    pub async fn state_bytes(&self, partition: &str) -> Result<Option<(u128, Bytes)>> {
        let row_key = self.row_key(partition)?;
        match self.store.get(&row_key).await? {
            Some(row) => {
                let p = Partition::decode(&row)?;
                self.remember(partition, row);
                Ok(Some((p.mark, p.state)))
            }
            None => Ok(None),
        }
    }

    /// The partition's mark and serde state, read from the store.
    pub async fn state<S: DeserializeOwned>(&self, partition: &str) -> Result<Option<(u128, S)>> {
        match self.state_bytes(partition).await? {
            Some((mark, bytes)) => Ok(Some((mark, decode_state(&bytes)?))),
            None => Ok(None),
        }
    }

    fn remembered(&self, partition: &str) -> Option<Row> {
        self.last
            .lock()
            .ok()
            .and_then(|m| m.get(partition).cloned())
    }

    fn remember(&self, partition: &str, row: Row) {
        if let Ok(mut m) = self.last.lock() {
            m.insert(partition.to_owned(), row);
        }
    }

    fn forget(&self, partition: &str) {
        if let Ok(mut m) = self.last.lock() {
            m.remove(partition);
        }
    }
}

fn decode_state<S: DeserializeOwned>(bytes: &[u8]) -> Result<S> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::corrupt(
            "consumer",
            format!("stored state is not of the expected type: {e}"),
        )
    })
}
