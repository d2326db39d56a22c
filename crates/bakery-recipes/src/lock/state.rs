//! The lock's whole state, in one row: the last fencing token, the holder and
//! the FIFO queue. Every transition is a pure function on this value; the
//! caller writes the result with one `put_if_version`.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use bakery_core::{Error, ErrorKind, Result, Row};
use serde::{Deserialize, Serialize};

/// The stored state of one lock, as `bakery lock show` prints it.
///
/// Invariant kept by every transition: when nobody holds the lock the queue
/// is empty (a release hands the lock to the head of the queue in the same
/// write).
///
/// Serialized, every waiter is whole. In the row, a queued waiter whose
/// owner and lease are those of the entry before it (the holder, for the
/// first) leaves both out: waiters of one process repeat them, and in a
/// long queue they would be most of the row every write carries. Such a waiter is
/// stored as its bare id (`"…"`), or as `{"id":"…","data":"…"}` if it has
/// data. Deserializing accepts every form, including the `{"id":"…"}` of
/// rows written before the bare id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredState")]
pub struct LockState {
    /// The fencing token of the latest grant (0: never granted). It grows by
    /// one with every grant and is never reset, not even by a release.
    pub token: u64,
    /// Who holds the lock now, if anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// Waiters in the order their enqueue write applied (FIFO).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub queue: VecDeque<Waiter>,
}

/// The holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// Unique id of the acquisition (one per `acquire` call).
    pub id: Arc<str>,
    /// Human-readable owner (`host:pid` unless set by the builder).
    pub owner: Arc<str>,
    /// Heartbeat counter: 0 when the lock was handed over and not yet
    /// claimed; the holder advances it every lease/3.
    pub beat: u64,
    /// The holder's lease in milliseconds: an observer that sees the same
    /// (holder, beat) for this long on its own clock may evict it.
    pub lease_ms: u64,
    /// The holder's data, set by [`LockBuilder::data`](super::LockBuilder::data)
    /// (e.g. the address of the node that runs the job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Arc<str>>,
}

/// A client waiting in a lock's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Waiter {
    /// Unique id of the acquisition.
    pub id: Arc<str>,
    /// Human-readable owner.
    pub owner: Arc<str>,
    /// The lease this waiter will hold the lock with.
    pub lease_ms: u64,
    /// The data this waiter will hold the lock with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Arc<str>>,
}

/// What most readers of a lock row need: the fencing token and the holder.
/// Unlike a [`LockState`] it holds no queue, so keeping or dropping one
/// costs the same at any queue length (a waiter that held on to the whole
/// state made the writer copy it for its next write, and then dropped the
/// old copy itself).
#[derive(Debug, Clone, Default)]
pub(crate) struct Head {
    pub(crate) token: u64,
    pub(crate) holder: Option<Holder>,
}

impl Head {
    /// Is `id` the holder?
    pub(crate) fn held_by(&self, id: &str) -> bool {
        self.holder.as_ref().is_some_and(|h| &*h.id == id)
    }

    /// Nobody holds the lock.
    pub(crate) fn is_free(&self) -> bool {
        self.holder.is_none()
    }
}

/// A lock row as stored (see [`LockState`]): a queued waiter may leave out
/// the owner and lease it shares with the entry before it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredState {
    token: u64,
    #[serde(default)]
    holder: Option<Holder>,
    #[serde(default)]
    queue: VecDeque<Entry<Arc<str>, StoredWaiter>>,
}

/// A queue entry as stored: a bare id (a waiter that repeats the owner and
/// lease before it and has no data) or an object.
enum Entry<I, W> {
    Id(I),
    Whole(W),
}

impl<'de, I: Deserialize<'de>, W: Deserialize<'de>> Deserialize<'de> for Entry<I, W> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::value::{BorrowedStrDeserializer, MapAccessDeserializer, StrDeserializer};

        struct EntryVisitor<I, W>(std::marker::PhantomData<(I, W)>);

        impl<'de, I: Deserialize<'de>, W: Deserialize<'de>> serde::de::Visitor<'de> for EntryVisitor<I, W> {
            type Value = Entry<I, W>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a waiter's id or object")
            }

            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                id: &'de str,
            ) -> std::result::Result<Self::Value, E> {
                I::deserialize(BorrowedStrDeserializer::new(id)).map(Entry::Id)
            }

            fn visit_str<E: serde::de::Error>(
                self,
                id: &str,
            ) -> std::result::Result<Self::Value, E> {
                I::deserialize(StrDeserializer::new(id)).map(Entry::Id)
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                W::deserialize(MapAccessDeserializer::new(map)).map(Entry::Whole)
            }
        }

        d.deserialize_any(EntryVisitor(std::marker::PhantomData))
    }
}

/// A queued [`Waiter`] as stored: owner and lease both, or neither.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredWaiter {
    id: Arc<str>,
    #[serde(default)]
    owner: Option<Arc<str>>,
    #[serde(default)]
    lease_ms: Option<u64>,
    #[serde(default)]
    data: Option<Arc<str>>,
}

impl TryFrom<StoredState> for LockState {
    type Error = String;

    fn try_from(stored: StoredState) -> std::result::Result<LockState, String> {
        let mut before = stored
            .holder
            .as_ref()
            .map(|holder| (holder.owner.clone(), holder.lease_ms));
        let mut queue = VecDeque::with_capacity(stored.queue.len());
        for entry in stored.queue {
            let waiter = match entry {
                Entry::Id(id) => StoredWaiter {
                    id,
                    owner: None,
                    lease_ms: None,
                    data: None,
                },
                Entry::Whole(waiter) => waiter,
            };
            let (owner, lease_ms) = match (waiter.owner, waiter.lease_ms) {
                (Some(owner), Some(lease_ms)) => (owner, lease_ms),
                (None, None) => before.clone().ok_or_else(|| {
                    format!("waiter {} repeats an entry that is not there", waiter.id)
                })?,
                _ => {
                    return Err(format!(
                        "waiter {} has only one of owner and lease_ms",
                        waiter.id
                    ))
                }
            };
            before = Some((owner.clone(), lease_ms));
            queue.push_back(Waiter {
                id: waiter.id,
                owner,
                lease_ms,
                data: waiter.data,
            });
        }
        Ok(LockState {
            token: stored.token,
            holder: stored.holder,
            queue,
        })
    }
}

/// The stored form of a [`Head`]. The queue is checked as the full decode
/// checks it (a row [`LockState::decode`] refuses must not grant anyone the
/// lock) but not built: its strings are borrowed from the row.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredHead<'a> {
    token: u64,
    #[serde(default)]
    holder: Option<Holder>,
    #[serde(default, borrow)]
    queue: Vec<Entry<serde::de::IgnoredAny, CheckedWaiter<'a>>>,
}

/// A [`Waiter`] as stored, read only to check it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Its fields are only type-checked.
struct CheckedWaiter<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(default, borrow)]
    owner: Option<Cow<'a, str>>,
    #[serde(default)]
    lease_ms: Option<u64>,
    #[serde(default, borrow)]
    data: Option<Cow<'a, str>>,
}

impl Holder {
    /// The holder a grant to `waiter` makes, with heartbeat `beat`.
    fn granted(waiter: Waiter, beat: u64) -> Holder {
        Holder {
            id: waiter.id,
            owner: waiter.owner,
            beat,
            lease_ms: waiter.lease_ms,
            data: waiter.data,
        }
    }
}

impl LockState {
    /// Decode a stored row; a foreign or damaged value is [`ErrorKind::Corrupt`].
    pub(crate) fn decode(row: &Row) -> Result<LockState> {
        let state: LockState = parse(row)?;
        if state.holder.is_none() && !state.queue.is_empty() {
            // Cannot be written by this code; refuse rather than guess.
            return Err(waiters_without_holder(row));
        }
        Ok(state)
    }

    /// The head of a stored row (token and holder), without building its
    /// queue: a woken waiter only needs to know whether the row names it
    /// the holder, and at 64 waiters decoding (and later dropping) the
    /// queue cost it more than the rest of its grant. A row the full
    /// decode refuses is [`ErrorKind::Corrupt`] here too.
    pub(crate) fn decode_head(row: &Row) -> Result<Head> {
        let head: StoredHead = parse(row)?;
        if head.holder.is_none() && !head.queue.is_empty() {
            return Err(waiters_without_holder(row));
        }
        if let Some(half) = head.queue.iter().find_map(|entry| match entry {
            Entry::Whole(w) if w.owner.is_some() != w.lease_ms.is_some() => Some(w),
            _ => None,
        }) {
            return Err(Error::corrupt(
                "lock",
                format!(
                    "row {} is not a bakery lock: waiter {} has only one of owner and lease_ms",
                    row.key.as_str(),
                    half.id
                ),
            ));
        }
        Ok(Head {
            token: head.token,
            holder: head.holder,
        })
    }

    /// Its token and holder.
    pub(crate) fn head(&self) -> Head {
        Head {
            token: self.token,
            holder: self.holder.clone(),
        }
    }

    /// The row's bytes: the serialized state, with the repeated owners and
    /// leases of the queue left out (see [`LockState`]).
    pub(crate) fn encode(&self) -> Result<bakery_core::Bytes> {
        self.encode_with(&mut Fragments::default())
    }

    /// The same bytes as [`Self::encode`], with the queue's JSON taken
    /// from `fragments` (and kept there): a waiter's entry never changes
    /// while it queues, and a queue usually only loses its head and gains
    /// entries at its end, so the queue's JSON is one slice of the cached
    /// buffer plus the new entries. Re-encoding (or even re-assembling) a
    /// long queue on every write costs more than the rest of the write on a
    /// fast store.
    pub(crate) fn encode_with(&self, fragments: &mut Fragments) -> Result<bakery_core::Bytes> {
        // The field order and skips of the derived `Serialize` above.
        let mut out = Vec::with_capacity(fragments.last_len);
        out.extend_from_slice(b"{\"token\":");
        out.extend_from_slice(self.token.to_string().as_bytes());
        if let Some(holder) = &self.holder {
            out.extend_from_slice(b",\"holder\":");
            serde_json::to_writer(&mut out, holder).map_err(encode_error)?;
        }
        if !self.queue.is_empty() {
            fragments.follow(self.holder.as_ref(), &self.queue)?;
            out.extend_from_slice(b",\"queue\":[");
            // Every entry is stored with a leading comma.
            out.extend_from_slice(&fragments.json[fragments.start + 1..]);
            out.push(b']');
        } else {
            fragments.clear();
        }
        out.push(b'}');
        fragments.last_len = out.len();
        Ok(out.into())
    }

    /// Is `id` the holder?
    pub(crate) fn held_by(&self, id: &str) -> bool {
        self.holder.as_ref().is_some_and(|h| &*h.id == id)
    }

    /// Is `id` waiting in the queue?
    pub(crate) fn queued(&self, id: &str) -> bool {
        self.queue.iter().any(|w| &*w.id == id)
    }

    /// Nobody holds the lock (so nobody waits either).
    pub(crate) fn is_free(&self) -> bool {
        self.holder.is_none()
    }

    /// Grant the lock to `waiter` directly, already claimed (beat 1).
    pub(crate) fn take(&mut self, waiter: &Waiter) -> Result<()> {
        self.token = next_token(self.token)?;
        self.holder = Some(Holder::granted(waiter.clone(), 1));
        Ok(())
    }

    /// Hand the lock to the head of the queue (unclaimed, beat 0), or free it.
    pub(crate) fn hand_off(&mut self) -> Result<()> {
        self.holder = match self.queue.pop_front() {
            Some(next) => {
                self.token = next_token(self.token)?;
                Some(Holder::granted(next, 0))
            }
            None => None,
        };
        Ok(())
    }

    /// Advance the holder's heartbeat (also claims a handed-off lock).
    pub(crate) fn beat(&mut self) {
        if let Some(holder) = self.holder.as_mut() {
            holder.beat = holder.beat.saturating_add(1);
        }
    }

    /// Remove `id` wherever it is: out of the queue, or, if it was handed the
    /// lock, pass the lock on. Returns whether the holder changed.
    pub(crate) fn withdraw(&mut self, id: &str) -> Result<bool> {
        self.queue.retain(|w| &*w.id != id);
        if self.held_by(id) {
            self.hand_off()?;
            return Ok(true);
        }
        Ok(false)
    }
}

/// The JSON of the waiters in the queue a writer encoded last, in queue
/// order, as one buffer: `json[start..]` is the queue's entries, each with
/// a leading comma, and `entries` says which waiter ends where.
#[derive(Debug, Default)]
pub(crate) struct Fragments {
    /// The waiters whose JSON `json` holds, with the end of each entry.
    /// Moved here from the queue that was encoded, not cloned (a clone
    /// costs an atomic increment per string, on cache lines shared between
    /// threads), and compared by pointer.
    entries: VecDeque<Fragment>,
    json: Vec<u8>,
    /// Where the first entry of `entries` starts in `json`.
    start: usize,
    /// Length of the last encoded state: the next one's capacity.
    last_len: usize,
}

/// One cached entry of [`Fragments`].
#[derive(Debug)]
struct Fragment {
    waiter: Waiter,
    /// Where its JSON ends in the buffer.
    end: usize,
    /// Stored without owner and lease (they repeat the entry before it):
    /// valid only behind an entry with the same.
    short: bool,
}

impl Fragment {
    /// Its JSON is right behind `before`.
    fn fits(&self, before: Option<Before<'_>>) -> bool {
        self.short == repeats(&self.waiter, before)
    }
}

/// The owner and lease of the entry before a queued waiter.
#[derive(Clone, Copy)]
struct Before<'a> {
    owner: &'a Arc<str>,
    lease_ms: u64,
}

impl<'a> From<&'a Holder> for Before<'a> {
    fn from(holder: &'a Holder) -> Self {
        Before {
            owner: &holder.owner,
            lease_ms: holder.lease_ms,
        }
    }
}

impl<'a> From<&'a Waiter> for Before<'a> {
    fn from(waiter: &'a Waiter) -> Self {
        Before {
            owner: &waiter.owner,
            lease_ms: waiter.lease_ms,
        }
    }
}

/// Does `waiter` repeat the owner and lease of the entry before it?
fn repeats(waiter: &Waiter, before: Option<Before<'_>>) -> bool {
    before.is_some_and(|before| {
        before.lease_ms == waiter.lease_ms
            && (Arc::ptr_eq(before.owner, &waiter.owner) || before.owner == &waiter.owner)
    })
}

/// Append `waiter`'s stored entry, with a leading comma; `true` if it left
/// out the owner and lease it repeats (then, without data, it is the bare
/// id). The field order is the derived `Serialize`'s.
fn write_entry(out: &mut Vec<u8>, waiter: &Waiter, before: Option<Before<'_>>) -> Result<bool> {
    let short = repeats(waiter, before);
    if short && waiter.data.is_none() {
        out.push(b',');
        serde_json::to_writer(&mut *out, &waiter.id).map_err(encode_error)?;
        return Ok(true);
    }
    out.extend_from_slice(b",{\"id\":");
    serde_json::to_writer(&mut *out, &waiter.id).map_err(encode_error)?;
    if !short {
        out.extend_from_slice(b",\"owner\":");
        serde_json::to_writer(&mut *out, &waiter.owner).map_err(encode_error)?;
        out.extend_from_slice(b",\"lease_ms\":");
        out.extend_from_slice(waiter.lease_ms.to_string().as_bytes());
    }
    if let Some(data) = &waiter.data {
        out.extend_from_slice(b",\"data\":");
        serde_json::to_writer(&mut *out, data).map_err(encode_error)?;
    }
    out.push(b'}');
    Ok(short)
}

impl Fragments {
    fn clear(&mut self) {
        self.entries.clear();
        self.json.clear();
        self.start = 0;
    }

    /// Make `json[start..]` the entries of `queue`. The cached entries
    /// before `queue`'s head left the queue (a hand-off): they are dropped.
    /// When the rest is `queue`'s beginning, only the new waiters at its
    /// end are encoded; anything else (a waiter withdrawn from the middle,
    /// a queue decoded from another process's write) is re-assembled from
    /// the entries that match, in one pass, since a queue keeps its order.
    ///
    /// An entry's JSON depends on the entry before it (`holder` for the
    /// first): the kept entries keep theirs, and a hand-off makes the old
    /// head the holder, so only the new head's fit is checked.
    fn follow(&mut self, holder: Option<&Holder>, queue: &VecDeque<Waiter>) -> Result<()> {
        if let Some(head) = queue.front() {
            while let Some(cached) = self.entries.front() {
                if same_entry(&cached.waiter, head) {
                    break;
                }
                self.start = cached.end;
                self.entries.pop_front();
            }
        }
        let kept = self
            .entries
            .iter()
            .zip(queue)
            .take_while(|(cached, waiter)| same_entry(&cached.waiter, waiter))
            .count();
        let head_fits = self
            .entries
            .front()
            .is_none_or(|head| head.fits(holder.map(Before::from)));
        if kept < self.entries.len() || !head_fits {
            return self.rebuild(holder, queue);
        }
        for (at, waiter) in queue.iter().enumerate().skip(kept) {
            let short = write_entry(&mut self.json, waiter, before(holder, queue, at))?;
            self.entries.push_back(Fragment {
                waiter: waiter.clone(),
                end: self.json.len(),
                short,
            });
        }
        // Keep the buffer from growing without bound as heads leave.
        if self.start > 4096 && self.start > self.json.len() / 2 {
            self.json.drain(..self.start);
            for cached in &mut self.entries {
                cached.end -= self.start;
            }
            self.start = 0;
        }
        Ok(())
    }

    /// Encode `queue` afresh, reusing the cached JSON of the entries that
    /// match in order.
    fn rebuild(&mut self, holder: Option<&Holder>, queue: &VecDeque<Waiter>) -> Result<()> {
        let old = std::mem::take(self);
        let mut cached = old.entries.into_iter().scan(old.start, |start, cached| {
            let range = *start..cached.end;
            *start = cached.end;
            Some((cached, range))
        });
        for (at, waiter) in queue.iter().enumerate() {
            let before = before(holder, queue, at);
            let found = cached
                .by_ref()
                .find(|(seen, _)| same_entry(&seen.waiter, waiter));
            match found {
                Some((seen, range)) if seen.fits(before) => {
                    self.json.extend_from_slice(&old.json[range]);
                    self.entries.push_back(Fragment {
                        end: self.json.len(),
                        ..seen
                    });
                }
                _ => {
                    let short = write_entry(&mut self.json, waiter, before)?;
                    self.entries.push_back(Fragment {
                        waiter: waiter.clone(),
                        end: self.json.len(),
                        short,
                    });
                }
            }
        }
        self.last_len = old.last_len;
        Ok(())
    }
}

/// The entry before `queue[at]`: the one ahead of it, or the holder.
fn before<'a>(
    holder: Option<&'a Holder>,
    queue: &'a VecDeque<Waiter>,
    at: usize,
) -> Option<Before<'a>> {
    match at.checked_sub(1) {
        Some(ahead) => queue.get(ahead).map(Before::from),
        None => holder.map(Before::from),
    }
}

/// Is `a` the entry `b`? Clones of one entry share their strings, so this
/// rarely compares bytes (`Arc<str>`'s `==` has no pointer shortcut).
fn same_entry(a: &Waiter, b: &Waiter) -> bool {
    let shared = Arc::ptr_eq(&a.id, &b.id)
        && Arc::ptr_eq(&a.owner, &b.owner)
        && match (&a.data, &b.data) {
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            (None, None) => true,
            _ => false,
        };
    (shared && a.lease_ms == b.lease_ms) || a == b
}

/// `row`'s JSON as `T`; anything else is [`ErrorKind::Corrupt`].
fn parse<'a, T: Deserialize<'a>>(row: &'a Row) -> Result<T> {
    serde_json::from_slice(&row.value).map_err(|e| {
        Error::corrupt(
            "lock",
            format!("row {} is not a bakery lock: {e}", row.key.as_str()),
        )
    })
}

fn waiters_without_holder(row: &Row) -> Error {
    Error::corrupt(
        "lock",
        format!("row {} has waiters but no holder", row.key.as_str()),
    )
}

fn encode_error(e: serde_json::Error) -> Error {
    Error::new(ErrorKind::Internal, "lock", format!("encode state: {e}"))
}

fn next_token(token: u64) -> Result<u64> {
    token
        .checked_add(1)
        .ok_or_else(|| Error::new(ErrorKind::Exhausted, "lock", "fencing token overflow"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(id: &str) -> Waiter {
        Waiter {
            id: id.into(),
            owner: "test".into(),
            lease_ms: 1000,
            data: None,
        }
    }

    #[test]
    fn release_hands_off_in_fifo_order_and_tokens_grow() {
        let mut s = LockState::default();
        s.take(&waiter("a")).unwrap();
        s.queue.push_back(waiter("b"));
        s.queue.push_back(waiter("c"));
        assert_eq!(s.token, 1);
        s.hand_off().unwrap();
        assert!(s.held_by("b"));
        assert_eq!(s.holder.as_ref().unwrap().beat, 0, "handed off, unclaimed");
        assert_eq!(s.token, 2);
        s.hand_off().unwrap();
        assert!(s.held_by("c"));
        s.hand_off().unwrap();
        assert!(s.is_free());
        assert_eq!(s.token, 3, "a release with nobody waiting grants nothing");
    }

    #[test]
    fn withdraw_of_an_unclaimed_holder_passes_the_lock_on() {
        let mut s = LockState::default();
        s.take(&waiter("a")).unwrap();
        s.queue.push_back(waiter("b"));
        s.queue.push_back(waiter("c"));
        assert!(!s.withdraw("c").unwrap());
        assert_eq!(s.queue.len(), 1);
        s.hand_off().unwrap();
        assert!(s.withdraw("b").unwrap());
        assert!(s.is_free());
    }

    #[test]
    fn waiters_without_holder_are_corrupt() {
        let key = bakery_core::Key::new("lock/x").unwrap();
        let row = Row {
            key,
            value: br#"{"token":3,"queue":[{"id":"a","owner":"o","lease_ms":1}]}"#[..].into(),
            version: 1,
        };
        assert_eq!(
            LockState::decode(&row).unwrap_err().kind(),
            ErrorKind::Corrupt
        );
        let foreign = Row {
            value: b"not json"[..].into(),
            ..row
        };
        assert_eq!(
            LockState::decode(&foreign).unwrap_err().kind(),
            ErrorKind::Corrupt
        );
    }

    #[test]
    fn a_row_s_head_is_its_token_and_holder_without_the_queue() {
        let mut s = LockState::default();
        s.take(&waiter("a")).unwrap();
        s.hand_off().unwrap();
        s.take(&waiter("b")).unwrap();
        s.queue.push_back(waiter("c"));
        s.queue.push_back(waiter("d"));
        let row = Row {
            key: bakery_core::Key::new("lock/x").unwrap(),
            value: s.encode().unwrap(),
            version: 7,
        };
        let head = LockState::decode_head(&row).unwrap();
        assert_eq!(head.token, 2);
        assert_eq!(head.holder, s.holder);
        assert!(head.held_by("b") && !head.held_by("c") && !head.is_free());
        let free = Row {
            value: LockState::default().encode().unwrap(),
            ..row.clone()
        };
        assert!(LockState::decode_head(&free).unwrap().is_free());
    }

    #[test]
    fn the_head_decode_refuses_what_the_full_decode_refuses() {
        let holder = r#""holder":{"id":"a","owner":"o","beat":1,"lease_ms":1}"#;
        let waiter = r#"{"id":"b","owner":"o","lease_ms":1}"#;
        let rows = [
            format!(r#"{{"token":1,{holder},"queue":[{waiter},{waiter}]}}"#),
            format!(
                r#"{{"token":1,{holder},"queue":[{{"id":"b\"q","owner":"o","lease_ms":1,"data":"d"}}]}}"#
            ),
            format!(r#"{{"token":1,{holder}}}"#),
            r#"{"token":1}"#.to_string(),
            "not json".to_string(),
            format!(r#"{{"token":1,{holder},"queue":[{{"id":"#),
            r#"{"token":1,"stranger":2}"#.to_string(),
            format!(r#"{{"token":1,{holder},"queue":null}}"#),
            format!(r#"{{"token":1,{holder},"queue":5}}"#),
            format!(r#"{{"token":1,{holder},"queue":[42]}}"#),
            format!(r#"{{"token":1,{holder},"queue":[{{"id":"b","owner":"o"}}]}}"#),
            format!(
                r#"{{"token":1,{holder},"queue":[{{"id":"b","owner":"o","lease_ms":1,"new":0}}]}}"#
            ),
            format!(r#"{{"token":1,{holder},"queue":[{{"id":7,"owner":"o","lease_ms":1}}]}}"#),
            format!(r#"{{"token":1,"queue":[{waiter}]}}"#),
            // The stored short form: owner and lease as the entry before.
            format!(r#"{{"token":1,{holder},"queue":[{{"id":"b"}},{{"id":"c","data":"d"}}]}}"#),
            format!(r#"{{"token":1,{holder},"queue":[{{"id":"b","lease_ms":1}}]}}"#),
            r#"{"token":1,"queue":[{"id":"b"}]}"#.to_string(),
            // The bare id of today's rows.
            format!(r#"{{"token":1,{holder},"queue":["b","c\"q",{{"id":"d","data":"x"}}]}}"#),
            r#"{"token":1,"queue":["b"]}"#.to_string(),
            format!(r#"{{"token":1,{holder},"queue":[["b"]]}}"#),
            format!(r#"{{"token":1,{holder},"queue":[null]}}"#),
        ];
        let mut refused = 0;
        for value in rows {
            let row = Row {
                key: bakery_core::Key::new("lock/x").unwrap(),
                value: value.clone().into_bytes().into(),
                version: 1,
            };
            let full = LockState::decode(&row);
            let head = LockState::decode_head(&row);
            assert_eq!(head.is_ok(), full.is_ok(), "{value}");
            match (full, head) {
                (Ok(full), Ok(head)) => {
                    assert_eq!((head.token, head.holder), (full.token, full.holder))
                }
                (Err(_), Err(head)) => {
                    refused += 1;
                    assert_eq!(head.kind(), ErrorKind::Corrupt, "{value}");
                }
                _ => unreachable!(),
            }
        }
        assert_eq!(refused, 15, "the table's damaged rows");
    }

    #[test]
    fn encoding_with_cached_fragments_gives_the_same_bytes() {
        let mut fragments = Fragments::default();
        let mut s = LockState::default();
        assert_eq!(s.encode_with(&mut fragments).unwrap(), s.encode().unwrap());
        s.take(&waiter("a")).unwrap();
        let mut shorts = 0;
        for round in 0..200 {
            let mut w = waiter(&format!("w{round}"));
            // Escapes, unicode and data, so the hand-made framing is tested
            // against serde's own; runs of one owner and lease, so entries
            // are stored short, behind entries that come and go.
            w.owner = format!("h\"ost\\{}:é\n", round / 4).into();
            w.lease_ms = 1000 + round / 10;
            w.data = (round % 3 == 0).then(|| format!("d{round}\u{1}").into());
            s.queue.push_back(w);
            if round % 2 == 1 {
                s.hand_off().unwrap();
            }
            if round % 7 == 0 {
                s.withdraw(&format!("w{}", round / 2)).unwrap();
            }
            let encoded = s.encode_with(&mut fragments).unwrap();
            assert_eq!(encoded, s.encode().unwrap(), "round {round}");
            let row = Row {
                key: bakery_core::Key::new("lock/x").unwrap(),
                value: encoded,
                version: 1,
            };
            assert_eq!(LockState::decode(&row).unwrap(), s);
            shorts += fragments.entries.iter().filter(|e| e.short).count();
        }
        assert_eq!(fragments.entries.len(), s.queue.len());
        assert!(shorts > 100, "entries stored short: {shorts}");
    }

    /// Waiters of one process are stored with their id only; rows written
    /// whole (every entry with its owner and lease) still decode.
    #[test]
    fn repeated_owners_and_leases_are_stored_once() {
        let mut s = LockState::default();
        s.take(&waiter("a")).unwrap();
        for id in ["b", "c", "d"] {
            s.queue.push_back(waiter(id));
        }
        let mut other = waiter("e");
        other.owner = "elsewhere".into();
        s.queue.push_back(other);
        s.queue.push_back(waiter("f"));
        let stored = s.encode().unwrap();
        let text = std::str::from_utf8(&stored).unwrap();
        assert_eq!(
            text,
            r#"{"token":1,"holder":{"id":"a","owner":"test","beat":1,"lease_ms":1000},"queue":["b","c","d",{"id":"e","owner":"elsewhere","lease_ms":1000},{"id":"f","owner":"test","lease_ms":1000}]}"#
        );
        let whole = serde_json::to_vec(&s).unwrap();
        assert!(stored.len() < whole.len());
        // As written before the bare id: `{"id":"…"}`.
        let objects = text.replace(r#""b","c","d""#, r#"{"id":"b"},{"id":"c"},{"id":"d"}"#);
        for value in [stored.clone(), whole.into(), objects.into_bytes().into()] {
            let row = Row {
                key: bakery_core::Key::new("lock/x").unwrap(),
                value,
                version: 1,
            };
            assert_eq!(LockState::decode(&row).unwrap(), s);
        }
    }

    #[test]
    fn the_cached_queue_json_stays_bounded_as_heads_leave() {
        let mut fragments = Fragments::default();
        let mut s = LockState::default();
        s.take(&waiter("holder")).unwrap();
        for round in 0..2000 {
            s.queue.push_back(waiter(&format!("w{round}")));
            if s.queue.len() > 3 {
                s.hand_off().unwrap();
            }
            assert_eq!(
                s.encode_with(&mut fragments).unwrap(),
                s.encode().unwrap(),
                "round {round}"
            );
        }
        // 2000 entries of ~50 bytes went through; the buffer is compacted.
        assert!(fragments.json.len() < 3 * 4096, "{}", fragments.json.len());
        assert_eq!(fragments.entries.len(), 3);
    }

    #[test]
    fn token_overflow_is_exhausted_not_a_wrap() {
        let mut s = LockState {
            token: u64::MAX,
            ..LockState::default()
        };
        assert_eq!(
            s.take(&waiter("a")).unwrap_err().kind(),
            ErrorKind::Exhausted
        );
    }
}
