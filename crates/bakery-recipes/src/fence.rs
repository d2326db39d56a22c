//! Fenced writes: a value that only accepts writes carrying a fencing token at
//! least as large as the largest it has seen. With the tokens of a
//! [`Lock`](crate::lock::Lock) this gives mutual exclusion of the *data*,
//! not just of the lease: a paused holder that wakes up after its lease was
//! taken over writes with an old token and is refused.
//!
//! For a read-modify-write, read with [`FencedValue::read_fenced`]: it
//! raises the fence to your token before returning the data, so a holder
//! with an older token can no longer write between your read and your
//! write (a plain `read` + `write` only refuses older tokens after your
//! write has landed).

use std::sync::{Arc, Mutex};

use bakery_core::{Bytes, Error, Key, PutOutcome, Result, Row, VersionedStore};

/// Key prefix of fenced values: `fenced/<name>`.
pub const KEY_PREFIX: &str = "fenced";

/// Row layout: a magic tag, the highest token as 8 big-endian bytes, the
/// data. `bkf0` marks a fence raised by `read_fenced` before any write.
const MAGIC: &[u8; 4] = b"bkf1";
const MAGIC_NO_DATA: &[u8; 4] = b"bkf0";
const HEADER: usize = MAGIC.len() + 8;

/// The outcome of a [`FencedValue::write`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum FencedWrite {
    /// Stored; carries the new content.
    Accepted(Fenced),
    /// Refused: a write with a larger token happened already.
    Rejected {
        /// The largest token the value has accepted.
        highest: u64,
    },
}

impl FencedWrite {
    /// True if the write was stored.
    pub fn is_accepted(&self) -> bool {
        matches!(self, FencedWrite::Accepted(_))
    }
}

/// The outcome of a [`FencedValue::read_fenced`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum FencedRead {
    /// The fence now stands at the reader's token (or was there already);
    /// the current data (`None`: never written).
    Current(Option<Bytes>),
    /// Refused: a newer token has been seen; the reader no longer holds
    /// the lock.
    Rejected {
        /// The largest token the value has seen.
        highest: u64,
    },
}

/// The content of a fenced value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The largest token that wrote it.
    pub token: u64,
    /// The data.
    pub data: Bytes,
}

/// A value in the store guarded by fencing tokens. Each write is one
/// `put_if_version` (plus a read the first time, or after someone else wrote).
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::MemoryStore;
/// use bakery_recipes::fence::FencedValue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let value = FencedValue::new(Arc::new(MemoryStore::new()), "balance")?;
/// assert!(value.write(2, "100".into()).await?.is_accepted());
/// assert!(value.write(2, "150".into()).await?.is_accepted(), "same token: still the holder");
/// assert!(!value.write(1, "999".into()).await?.is_accepted(), "an older holder is refused");
/// assert_eq!(value.read().await?.unwrap().data, "150");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FencedValue {
    store: Arc<dyn VersionedStore>,
    key: Key,
    /// The last row seen, so a write is usually a single CAS.
    last: Mutex<Option<Row>>,
}

impl FencedValue {
    /// The fenced value `name` (letters, digits, `_ - . : @ + =`). No store call.
    pub fn new(store: Arc<dyn VersionedStore>, name: &str) -> Result<Self> {
        Ok(FencedValue {
            store,
            key: Key::with_prefix(KEY_PREFIX, name)?,
            last: Mutex::new(None),
        })
    }

    /// The current content, or `None` if never written.
    pub async fn read(&self) -> Result<Option<Fenced>> {
        let row = self.store.get(&self.key).await?;
        self.remember(row.as_ref());
        Ok(match row.as_ref().map(decode).transpose()? {
            Some(Stored {
                token,
                data: Some(data),
            }) => Some(Fenced { token, data }),
            _ => None,
        })
    }

    /// Read as the holder of `token`: first raise the fence to `token` (one
    /// write, only if it is below), so from now on writes with older tokens
    /// are refused; then return the data. `Rejected` if a newer token was
    /// seen already.
    pub async fn read_fenced(&self, token: u64) -> Result<FencedRead> {
        let mut current = self.store.get(&self.key).await?;
        loop {
            let stored = current.as_ref().map(decode).transpose()?;
            let (highest, data) = match stored {
                Some(stored) => (Some(stored.token), stored.data),
                None => (None, None),
            };
            match highest {
                Some(highest) if highest > token => {
                    self.remember(current.as_ref());
                    return Ok(FencedRead::Rejected { highest });
                }
                Some(highest) if highest == token => {
                    self.remember(current.as_ref());
                    return Ok(FencedRead::Current(data));
                }
                _ => {}
            }
            let expected = current.as_ref().map(|row| row.version);
            match self
                .store
                .put_if_version(&self.key, expected, encode(token, data.as_deref()))
                .await?
            {
                PutOutcome::Applied(row) => {
                    self.remember(Some(&row));
                    return Ok(FencedRead::Current(data));
                }
                PutOutcome::Conflict(now) => current = now,
            }
        }
    }

    /// Store `data` if `token` is at least the largest token seen so far.
    pub async fn write(&self, token: u64, data: Bytes) -> Result<FencedWrite> {
        let mut current = match self.last.lock().ok().and_then(|last| last.clone()) {
            Some(row) => Some(row),
            None => self.store.get(&self.key).await?,
        };
        loop {
            if let Some(row) = &current {
                let stored = decode(row)?;
                if token < stored.token {
                    self.remember(current.as_ref());
                    return Ok(FencedWrite::Rejected {
                        highest: stored.token,
                    });
                }
            }
            let expected = current.as_ref().map(|row| row.version);
            match self
                .store
                .put_if_version(&self.key, expected, encode(token, Some(&data)))
                .await?
            {
                PutOutcome::Applied(row) => {
                    self.remember(Some(&row));
                    return Ok(FencedWrite::Accepted(Fenced { token, data }));
                }
                PutOutcome::Conflict(now) => current = now,
            }
        }
    }

    fn remember(&self, row: Option<&Row>) {
        if let Ok(mut last) = self.last.lock() {
            *last = row.cloned();
        }
    }
}

/// What a row holds: the fence (largest token seen) and the data, if any.
struct Stored {
    token: u64,
    data: Option<Bytes>,
}

fn encode(token: u64, data: Option<&[u8]>) -> Bytes {
    let mut value = Vec::with_capacity(HEADER + data.map_or(0, <[u8]>::len));
    value.extend_from_slice(if data.is_some() { MAGIC } else { MAGIC_NO_DATA });
    value.extend_from_slice(&token.to_be_bytes());
    if let Some(data) = data {
        value.extend_from_slice(data);
    }
    value.into()
}

fn decode(row: &Row) -> Result<Stored> {
    let value = &row.value;
    let has_data = value.starts_with(MAGIC);
    let token = value
        .get(MAGIC.len()..HEADER)
        .filter(|_| has_data || (value.starts_with(MAGIC_NO_DATA) && value.len() == HEADER))
        .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| {
            Error::corrupt(
                "fence",
                format!("row {} is not a bakery fenced value", row.key.as_str()),
            )
        })?;
    Ok(Stored {
        token,
        data: has_data.then(|| value.slice(HEADER..)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bakery_core::{ErrorKind, MemoryStore};

    /// Two clients of the fenced value `name` on one store, each with its
    /// own cache.
    fn two_clients(name: &str) -> [FencedValue; 2] {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        [
            FencedValue::new(store.clone(), name).unwrap(),
            FencedValue::new(store, name).unwrap(),
        ]
    }

    #[tokio::test]
    async fn a_foreign_row_is_corrupt_and_kept() {
        let store = Arc::new(MemoryStore::new());
        let value = FencedValue::new(store.clone(), "x").unwrap();
        let key = Key::with_prefix(KEY_PREFIX, "x").unwrap();
        let _ = store
            .put_if_version(&key, None, "plain".into())
            .await
            .unwrap();
        assert_eq!(value.read().await.unwrap_err().kind(), ErrorKind::Corrupt);
        let err = value.write(9, "v".into()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        assert_eq!(store.get(&key).await.unwrap().unwrap().value, "plain");
    }

    #[tokio::test]
    async fn a_stale_cache_costs_a_conflict_not_a_wrong_answer() {
        let [a, b] = two_clients("y");
        assert!(a.write(1, "a".into()).await.unwrap().is_accepted());
        assert!(b.write(5, "b".into()).await.unwrap().is_accepted());
        // `a` still caches token 1; the conflict returns token 5.
        assert_eq!(
            a.write(3, "late".into()).await.unwrap(),
            FencedWrite::Rejected { highest: 5 }
        );
    }

    #[tokio::test]
    async fn a_fenced_read_shuts_out_an_older_writer_before_the_new_one_writes() {
        let [old, new] = two_clients("z");
        assert!(old.write(4, "10".into()).await.unwrap().is_accepted());
        // The new holder (token 5) reads first; the old one then tries to
        // write its stale result: refused, so no update can be lost.
        assert_eq!(
            new.read_fenced(5).await.unwrap(),
            FencedRead::Current(Some("10".into()))
        );
        assert_eq!(
            old.write(4, "11".into()).await.unwrap(),
            FencedWrite::Rejected { highest: 5 }
        );
        assert_eq!(
            old.read_fenced(4).await.unwrap(),
            FencedRead::Rejected { highest: 5 }
        );
        assert!(new.write(5, "11".into()).await.unwrap().is_accepted());
    }

    #[tokio::test]
    async fn a_fence_raised_before_any_write_reads_as_never_written() {
        let store: Arc<dyn VersionedStore> = Arc::new(MemoryStore::new());
        let value = FencedValue::new(store, "w").unwrap();
        assert_eq!(
            value.read_fenced(3).await.unwrap(),
            FencedRead::Current(None)
        );
        assert_eq!(value.read().await.unwrap(), None);
        assert_eq!(
            value.write(2, "x".into()).await.unwrap(),
            FencedWrite::Rejected { highest: 3 }
        );
    }
}
