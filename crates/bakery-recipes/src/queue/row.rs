//! A queue recipe's state as its row stores it (JSON), one form per recipe
//! ([`Shape`]), read and written by the same code:
//!
//! ```text
//! lock       {"token":T[,"mark":M],"holder":{id,owner,beat,lease_ms[,data]},"queue":[…]}
//! semaphore  {"token":T,"permits":P,"holders":[{id,owner,token,beat,lease_ms}],"queue":[…]}
//! rwlock     {"token":T,"holders":[{id,owner,mode,token,beat,lease_ms}],"queue":[…]}
//! ```
//!
//! `mark` (any form, written only once a holder set one) is
//! [`QueueState::mark`].
//!
//! A queued waiter that repeats the entry before it is stored as its bare
//! id: in the lock's queue, one with the owner and lease of the entry
//! before it (the holder, for the first), `{"id":…,"data":…}` if it has
//! data; in the others', one with the owner, lease (and mode) of the waiter
//! before it. Waiters of one process repeat each other, and in a long queue
//! they would be most of the row every write carries. Rows with every
//! waiter whole (written before the bare id) read as before; these are the
//! forms every earlier release reads, so processes of both can share a row.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use bakery_core::{Bytes, Error, ErrorKind, Result, Row};
use serde::{Deserialize, Serialize};

use super::state::{broken_ids, Ask, Head, Holder, Mode, QueueState, Rule};

/// Which recipe's form a row has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Shape {
    Lock,
    Semaphore,
    RwLock,
}

impl Shape {
    /// The recipe's name, in errors and metrics.
    pub(crate) fn recipe(self) -> &'static str {
        match self {
            Shape::Lock => "lock",
            Shape::Semaphore => "semaphore",
            Shape::RwLock => "rwlock",
        }
    }

    /// Does `ask` repeat `before` (the entry before it in the row), so that
    /// only its id (and data) is stored?
    fn repeats(self, ask: &Ask, before: Option<&Ask>) -> bool {
        before.is_some_and(|before| {
            before.lease_ms == ask.lease_ms
                && (Arc::ptr_eq(&before.owner, &ask.owner) || before.owner == ask.owner)
                && (self != Shape::RwLock || before.mode == ask.mode)
        })
    }

    /// The entry a queue's first waiter may repeat: the lock's holder.
    fn leading(self, holders: &[Holder]) -> Option<&Ask> {
        match self {
            Shape::Lock => holders.first().map(|h| &h.ask),
            Shape::Semaphore | Shape::RwLock => None,
        }
    }
}

/// A holder as stored; the field order is the row's.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredHolder<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    owner: Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<u64>,
    beat: u64,
    lease_ms: u64,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    data: Option<Cow<'a, str>>,
}

/// A queued waiter as stored in object form (owner, lease and mode may be
/// left out when they repeat the entry before it).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredWaiter<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    owner: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_ms: Option<u64>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    data: Option<Cow<'a, str>>,
}

/// A queue entry as stored: a bare id or an object.
enum Entry<'a> {
    Id(Cow<'a, str>),
    Whole(StoredWaiter<'a>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Entry<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct EntryVisitor;

        impl<'de> serde::de::Visitor<'de> for EntryVisitor {
            type Value = Entry<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a waiter's id or object")
            }

            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                id: &'de str,
            ) -> std::result::Result<Self::Value, E> {
                Ok(Entry::Id(Cow::Borrowed(id)))
            }

            fn visit_str<E: serde::de::Error>(
                self,
                id: &str,
            ) -> std::result::Result<Self::Value, E> {
                Ok(Entry::Id(Cow::Owned(id.to_owned())))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                StoredWaiter::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(Entry::Whole)
            }
        }

        d.deserialize_any(EntryVisitor)
    }
}

/// A row as stored: the union of the three forms, told apart by
/// [`Shape`] once parsed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredRow<'a> {
    token: u64,
    #[serde(default)]
    mark: Option<u64>,
    #[serde(default)]
    permits: Option<u32>,
    #[serde(default, borrow)]
    holder: Option<StoredHolder<'a>>,
    #[serde(default, borrow)]
    holders: Option<Vec<StoredHolder<'a>>>,
    #[serde(default, borrow)]
    queue: Vec<Entry<'a>>,
}

/// A queued waiter with what it repeats filled in, its strings still
/// borrowed from the row.
struct Waiting<'a> {
    id: Cow<'a, str>,
    owner: Cow<'a, str>,
    lease_ms: u64,
    mode: Mode,
    data: Option<Cow<'a, str>>,
}

/// A parsed row, checked against its shape, strings still borrowed.
struct Parsed<'a> {
    token: u64,
    mark: Option<u64>,
    rule: Rule,
    holders: Vec<StoredHolder<'a>>,
    queue: Vec<Waiting<'a>>,
}

fn corrupt(shape: Shape, row: &Row, what: impl std::fmt::Display) -> Error {
    Error::corrupt(
        shape.recipe(),
        format!(
            "row {} is not a bakery {}: {what}",
            row.key.as_str(),
            shape.recipe()
        ),
    )
}

/// Parse `row` as `shape`'s form; anything else is [`ErrorKind::Corrupt`].
fn parse(shape: Shape, row: &Row) -> Result<Parsed<'_>> {
    let stored: StoredRow =
        serde_json::from_slice(&row.value).map_err(|e| corrupt(shape, row, e))?;
    let bad = |what: &str| Err(corrupt(shape, row, what));
    let (rule, holders) = match shape {
        Shape::Lock => {
            if stored.permits.is_some() || stored.holders.is_some() {
                return bad("it has the fields of another recipe");
            }
            (Rule::Permits(1), stored.holder.into_iter().collect())
        }
        Shape::Semaphore => match (stored.permits, stored.holder) {
            (Some(permits), None) if permits > 0 => {
                (Rule::Permits(permits), stored.holders.unwrap_or_default())
            }
            (Some(0), None) => return bad("0 permits"),
            _ => return bad("it has no permits, or a lock's holder"),
        },
        Shape::RwLock => {
            if stored.permits.is_some() || stored.holder.is_some() {
                return bad("it has the fields of another recipe");
            }
            (Rule::ReadWrite, stored.holders.unwrap_or_default())
        }
    };
    // Which fields a holder has: a lock's token is the row's, and only a
    // read-write lock's holders have modes.
    for holder in &holders {
        let fields = match shape {
            Shape::Lock => holder.token.is_none() && holder.mode.is_none(),
            Shape::Semaphore => {
                holder.token.is_some() && holder.mode.is_none() && holder.data.is_none()
            }
            Shape::RwLock => {
                holder.token.is_some() && holder.mode.is_some() && holder.data.is_none()
            }
        };
        if !fields {
            return bad(&format!(
                "holder {} has the fields of another recipe",
                holder.id
            ));
        }
    }
    let mut queue: Vec<Waiting> = Vec::with_capacity(stored.queue.len());
    for entry in stored.queue {
        let before = match queue.last() {
            Some(w) => Some((w.owner.clone(), w.lease_ms, w.mode)),
            None if shape == Shape::Lock => holders
                .first()
                .map(|h| (h.owner.clone(), h.lease_ms, Mode::Write)),
            None => None,
        };
        let waiting = match entry {
            Entry::Id(id) => match before {
                Some((owner, lease_ms, mode)) => Waiting {
                    id,
                    owner,
                    lease_ms,
                    mode,
                    data: None,
                },
                None => return bad(&format!("waiter {id} repeats an entry that is not there")),
            },
            Entry::Whole(w) => {
                let mode = match (shape, w.mode) {
                    (Shape::RwLock, Some(mode)) => mode,
                    (Shape::Lock | Shape::Semaphore, None) => Mode::Write,
                    _ => return bad(&format!("waiter {} has the fields of another recipe", w.id)),
                };
                if shape != Shape::Lock && w.data.is_some() {
                    return bad(&format!("waiter {} has data", w.id));
                }
                match (w.owner, w.lease_ms, before) {
                    (Some(owner), Some(lease_ms), _) => Waiting {
                        id: w.id,
                        owner,
                        lease_ms,
                        mode,
                        data: w.data,
                    },
                    // Only the lock stores `{"id","data"}` for a waiter that
                    // repeats the entry before it.
                    (None, None, Some((owner, lease_ms, _))) if shape == Shape::Lock => Waiting {
                        id: w.id,
                        owner,
                        lease_ms,
                        mode,
                        data: w.data,
                    },
                    _ => {
                        return bad(&format!(
                            "waiter {} has only some of owner and lease_ms",
                            w.id
                        ))
                    }
                }
            }
        };
        queue.push(waiting);
    }
    Ok(Parsed {
        token: stored.token,
        mark: stored.mark,
        rule,
        holders,
        queue,
    })
}

impl Parsed<'_> {
    fn holders(&self, shape: Shape, arcs: &mut Strings) -> Vec<Holder> {
        self.holders
            .iter()
            .map(|h| Holder {
                ask: Ask {
                    id: arcs.get(&h.id),
                    owner: arcs.get(&h.owner),
                    lease_ms: h.lease_ms,
                    mode: h.mode.unwrap_or(Mode::Write),
                    data: h.data.as_deref().map(Arc::from),
                },
                token: match shape {
                    Shape::Lock => self.token,
                    Shape::Semaphore | Shape::RwLock => h.token.unwrap_or_default(),
                },
                beat: h.beat,
            })
            .collect()
    }
}

/// Shares one `Arc<str>` among the equal strings of a decode (a queue of
/// one process's waiters repeats its owner).
#[derive(Default)]
struct Strings {
    last: Option<Arc<str>>,
}

impl Strings {
    fn get(&mut self, s: &str) -> Arc<str> {
        match &self.last {
            Some(last) if &**last == s => last.clone(),
            _ => {
                let new: Arc<str> = Arc::from(s);
                self.last = Some(new.clone());
                new
            }
        }
    }
}

/// Decode `row` as `shape`'s state; a foreign or damaged value, or one no
/// transition makes, is [`ErrorKind::Corrupt`].
pub(crate) fn decode(shape: Shape, row: &Row) -> Result<QueueState> {
    let parsed = parse(shape, row)?;
    let mut ids = Strings::default();
    let mut owners = Strings::default();
    let holders = parsed.holders(shape, &mut owners);
    let queue: VecDeque<Ask> = parsed
        .queue
        .iter()
        .map(|w| Ask {
            id: ids.get(&w.id),
            owner: owners.get(&w.owner),
            lease_ms: w.lease_ms,
            mode: w.mode,
            data: w.data.as_deref().map(Arc::from),
        })
        .collect();
    let state = QueueState {
        token: parsed.token,
        rule: parsed.rule,
        holders,
        queue,
        mark: parsed.mark,
    };
    match state.broken() {
        Some(what) => Err(broken(shape, row, what)),
        None => Ok(state),
    }
}

fn broken(shape: Shape, row: &Row, what: String) -> Error {
    Error::corrupt(
        shape.recipe(),
        format!("row {} has {what}", row.key.as_str()),
    )
}

/// The head of `row` (rule, holders) without building its queue: a
/// woken waiter only needs to know whether the row grants it, and at 64
/// waiters building (and later dropping) the queue costs more than the
/// rest of its grant. A row [`decode`] refuses is refused here too.
pub(crate) fn decode_head(shape: Shape, row: &Row) -> Result<Head> {
    let parsed = parse(shape, row)?;
    let holders = parsed.holders(shape, &mut Strings::default());
    // The checks of `QueueState::broken`, on the borrowed queue.
    let probe = QueueState {
        token: parsed.token,
        rule: parsed.rule,
        holders,
        queue: parsed
            .queue
            .first()
            .map(|w| Ask {
                id: Arc::from(""),
                owner: Arc::from(""),
                lease_ms: 0,
                mode: w.mode,
                data: None,
            })
            .into_iter()
            .collect(),
        mark: parsed.mark,
    };
    let queued = parsed.queue.iter().map(|w| &*w.id);
    if let Some(what) = probe
        .broken_apart_from_ids()
        .or_else(|| broken_ids(&probe.holders, queued))
    {
        return Err(broken(shape, row, what));
    }
    let QueueState {
        rule,
        holders,
        mark,
        ..
    } = probe;
    Ok(Head {
        rule,
        holders,
        queued: parsed.queue.len(),
        mark,
    })
}

/// The row's bytes for `state` in `shape`'s form.
pub(crate) fn encode(shape: Shape, state: &QueueState) -> Result<Bytes> {
    encode_with(shape, state, &mut Fragments::default())
}

/// The same bytes as [`encode`], with the queue's JSON taken from
/// `fragments` (and kept there): a waiter's entry never changes while it
/// queues, and a queue usually only loses its head and gains entries at its
/// end, so the queue's JSON is one slice of the cached buffer plus the new
/// entries. Re-encoding a long queue on every write costs more than the
/// rest of the write on a fast store.
pub(crate) fn encode_with(
    shape: Shape,
    state: &QueueState,
    fragments: &mut Fragments,
) -> Result<Bytes> {
    let mut out = Vec::with_capacity(fragments.last_len);
    out.extend_from_slice(b"{\"token\":");
    out.extend_from_slice(state.token.to_string().as_bytes());
    if let Some(mark) = state.mark {
        out.extend_from_slice(b",\"mark\":");
        out.extend_from_slice(mark.to_string().as_bytes());
    }
    if let (Shape::Semaphore, Rule::Permits(permits)) = (shape, state.rule) {
        out.extend_from_slice(b",\"permits\":");
        out.extend_from_slice(permits.to_string().as_bytes());
    }
    match shape {
        Shape::Lock => {
            if let Some(holder) = state.holders.first() {
                out.extend_from_slice(b",\"holder\":");
                write_holder(&mut out, shape, holder)?;
            }
        }
        Shape::Semaphore | Shape::RwLock => {
            if !state.holders.is_empty() {
                out.extend_from_slice(b",\"holders\":[");
                for (at, holder) in state.holders.iter().enumerate() {
                    if at > 0 {
                        out.push(b',');
                    }
                    write_holder(&mut out, shape, holder)?;
                }
                out.push(b']');
            }
        }
    }
    if state.queue.is_empty() {
        fragments.clear();
    } else {
        fragments.follow(shape, shape.leading(&state.holders), &state.queue)?;
        out.extend_from_slice(b",\"queue\":[");
        // Every entry is stored with a leading comma.
        out.extend_from_slice(&fragments.json[fragments.start + 1..]);
        out.push(b']');
    }
    out.push(b'}');
    fragments.last_len = out.len();
    Ok(out.into())
}

fn write_holder(out: &mut Vec<u8>, shape: Shape, holder: &Holder) -> Result<()> {
    let ask = &holder.ask;
    let stored = StoredHolder {
        id: Cow::Borrowed(&ask.id),
        owner: Cow::Borrowed(&ask.owner),
        mode: (shape == Shape::RwLock).then_some(ask.mode),
        token: (shape != Shape::Lock).then_some(holder.token),
        beat: holder.beat,
        lease_ms: ask.lease_ms,
        data: ask.data.as_deref().map(Cow::Borrowed),
    };
    serde_json::to_writer(out, &stored).map_err(encode_error)
}

/// Append `ask`'s stored entry, with a leading comma; `true` if it left out
/// what it repeats of `before` (then, without data, it is the bare id).
fn write_entry(out: &mut Vec<u8>, shape: Shape, ask: &Ask, before: Option<&Ask>) -> Result<bool> {
    let short = shape.repeats(ask, before);
    out.push(b',');
    let written = if short && ask.data.is_none() {
        serde_json::to_writer(&mut *out, &*ask.id)
    } else {
        let stored = StoredWaiter {
            id: Cow::Borrowed(&ask.id),
            owner: (!short).then_some(Cow::Borrowed(&*ask.owner)),
            mode: (!short && shape == Shape::RwLock).then_some(ask.mode),
            lease_ms: (!short).then_some(ask.lease_ms),
            data: ask.data.as_deref().map(Cow::Borrowed),
        };
        serde_json::to_writer(&mut *out, &stored)
    };
    written.map_err(encode_error)?;
    Ok(short)
}

fn encode_error(e: serde_json::Error) -> Error {
    Error::new(ErrorKind::Internal, "queue", format!("encode state: {e}"))
}

/// The JSON of the waiters in the queue a writer encoded last, in queue
/// order, as one buffer: `json[start..]` is the queue's entries, each with
/// a leading comma.
#[derive(Debug, Default)]
pub(crate) struct Fragments {
    /// The waiters whose JSON `json` holds, with the end of each entry.
    /// Moved here from the queue that was encoded, and compared by pointer.
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
    ask: Ask,
    /// Where its JSON ends in the buffer.
    end: usize,
    /// Stored short (repeating the entry before it): valid only behind an
    /// entry it repeats.
    short: bool,
}

/// Is `a` the entry `b`? Clones of one entry share their strings, so this
/// rarely compares bytes.
fn same_entry(a: &Ask, b: &Ask) -> bool {
    let shared = Arc::ptr_eq(&a.id, &b.id)
        && Arc::ptr_eq(&a.owner, &b.owner)
        && match (&a.data, &b.data) {
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            (None, None) => true,
            _ => false,
        };
    (shared && a.lease_ms == b.lease_ms && a.mode == b.mode) || a == b
}

/// The entry before `queue[at]`: the one ahead of it, or `leading`.
fn before<'a>(leading: Option<&'a Ask>, queue: &'a VecDeque<Ask>, at: usize) -> Option<&'a Ask> {
    match at.checked_sub(1) {
        Some(ahead) => queue.get(ahead),
        None => leading,
    }
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
    fn follow(&mut self, shape: Shape, leading: Option<&Ask>, queue: &VecDeque<Ask>) -> Result<()> {
        if let Some(head) = queue.front() {
            while let Some(cached) = self.entries.front() {
                if same_entry(&cached.ask, head) {
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
            .take_while(|(cached, ask)| same_entry(&cached.ask, ask))
            .count();
        // An entry's JSON depends on the entry before it: the kept ones
        // keep theirs, and only the head's (behind `leading`) may change.
        let head_fits = self
            .entries
            .front()
            .is_none_or(|head| head.short == shape.repeats(&head.ask, leading));
        if kept < self.entries.len() || !head_fits {
            return self.rebuild(shape, leading, queue);
        }
        for (at, ask) in queue.iter().enumerate().skip(kept) {
            let short = write_entry(&mut self.json, shape, ask, before(leading, queue, at))?;
            self.entries.push_back(Fragment {
                ask: ask.clone(),
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
    fn rebuild(
        &mut self,
        shape: Shape,
        leading: Option<&Ask>,
        queue: &VecDeque<Ask>,
    ) -> Result<()> {
        let old = std::mem::take(self);
        let mut cached = old.entries.into_iter().scan(old.start, |start, cached| {
            let range = *start..cached.end;
            *start = cached.end;
            Some((cached, range))
        });
        for (at, ask) in queue.iter().enumerate() {
            let before = before(leading, queue, at);
            let found = cached.by_ref().find(|(seen, _)| same_entry(&seen.ask, ask));
            match found {
                Some((seen, range)) if seen.short == shape.repeats(ask, before) => {
                    self.json.extend_from_slice(&old.json[range]);
                    self.entries.push_back(Fragment {
                        end: self.json.len(),
                        ..seen
                    });
                }
                _ => {
                    let short = write_entry(&mut self.json, shape, ask, before)?;
                    self.entries.push_back(Fragment {
                        ask: ask.clone(),
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

#[cfg(test)]
mod tests {
    use super::super::state::test_support::ask;
    use super::*;

    fn row(value: &str) -> Row {
        Row {
            key: bakery_core::Key::new("x/y").unwrap(),
            value: value.as_bytes().to_vec().into(),
            version: 1,
        }
    }

    fn text(shape: Shape, state: &QueueState) -> String {
        String::from_utf8(encode(shape, state).unwrap().to_vec()).unwrap()
    }

    /// Write request `id` (what the lock and the semaphore ask).
    fn writer(id: &str) -> Ask {
        ask(id, Mode::Write)
    }

    /// Write request `id` of an owner other than the others'.
    fn elsewhere(id: &str) -> Ask {
        Ask {
            owner: "elsewhere".into(),
            ..writer(id)
        }
    }

    fn joined(rule: Rule, asks: &[Ask]) -> QueueState {
        let mut s = QueueState::new(rule);
        for ask in asks {
            s.join(ask.clone());
        }
        s
    }

    #[test]
    fn each_recipe_has_its_own_form_and_reads_it_back() {
        let w = writer;
        let lock = joined(
            Rule::Permits(1),
            &[w("a"), w("b"), w("c"), elsewhere("d"), w("e")],
        );
        assert_eq!(
            text(Shape::Lock, &lock),
            r#"{"token":1,"holder":{"id":"a","owner":"test","beat":1,"lease_ms":1000},"queue":["b","c",{"id":"d","owner":"elsewhere","lease_ms":1000},{"id":"e","owner":"test","lease_ms":1000}]}"#
        );
        let semaphore = joined(Rule::Permits(1), &[w("a"), w("b"), w("c"), elsewhere("d")]);
        assert_eq!(
            text(Shape::Semaphore, &semaphore),
            r#"{"token":1,"permits":1,"holders":[{"id":"a","owner":"test","token":1,"beat":1,"lease_ms":1000}],"queue":[{"id":"b","owner":"test","lease_ms":1000},"c",{"id":"d","owner":"elsewhere","lease_ms":1000}]}"#
        );
        let rw = joined(
            Rule::ReadWrite,
            &[
                ask("r", Mode::Read),
                w("w"),
                ask("s", Mode::Read),
                ask("t", Mode::Read),
            ],
        );
        assert_eq!(
            text(Shape::RwLock, &rw),
            r#"{"token":1,"holders":[{"id":"r","owner":"test","mode":"read","token":1,"beat":1,"lease_ms":1000}],"queue":[{"id":"w","owner":"test","mode":"write","lease_ms":1000},{"id":"s","owner":"test","mode":"read","lease_ms":1000},"t"]}"#
        );
        for (shape, state) in [
            (Shape::Lock, lock),
            (Shape::Semaphore, semaphore),
            (Shape::RwLock, rw),
        ] {
            let stored = row(&text(shape, &state));
            assert_eq!(decode(shape, &stored).unwrap(), state, "{shape:?}");
            let head = decode_head(shape, &stored).unwrap();
            assert_eq!(
                (head.rule, head.holders, head.queued, head.mark),
                (state.rule, state.holders, state.queue.len(), None)
            );
        }
    }

    /// The rows the release before the queue core wrote for these states,
    /// byte for byte (its own tests' expected rows): it reads the rows of
    /// this one and this one its, so processes of both can share a lock or
    /// a semaphore.
    #[test]
    fn the_release_before_the_core_writes_and_reads_the_same_rows() {
        let w = writer;
        let lock = joined(
            Rule::Permits(1),
            &[w("a"), w("b"), w("c"), w("d"), elsewhere("e"), w("f")],
        );
        let before = r#"{"token":1,"holder":{"id":"a","owner":"test","beat":1,"lease_ms":1000},"queue":["b","c","d",{"id":"e","owner":"elsewhere","lease_ms":1000},{"id":"f","owner":"test","lease_ms":1000}]}"#;
        assert_eq!(text(Shape::Lock, &lock), before);
        assert_eq!(decode(Shape::Lock, &row(before)).unwrap(), lock);
        let d = Ask {
            lease_ms: 5,
            ..w("d")
        };
        let semaphore = joined(Rule::Permits(1), &[w("a"), w("b"), w("c"), d]);
        let before = r#"{"token":1,"permits":1,"holders":[{"id":"a","owner":"test","token":1,"beat":1,"lease_ms":1000}],"queue":[{"id":"b","owner":"test","lease_ms":1000},"c",{"id":"d","owner":"test","lease_ms":5}]}"#;
        assert_eq!(text(Shape::Semaphore, &semaphore), before);
        assert_eq!(decode(Shape::Semaphore, &row(before)).unwrap(), semaphore);
    }

    #[test]
    fn a_mark_is_written_after_the_token_and_read_back() {
        let mut lock = joined(Rule::Permits(1), &[writer("a")]);
        lock.mark = Some(1_234);
        let stored = text(Shape::Lock, &lock);
        assert_eq!(
            stored,
            r#"{"token":1,"mark":1234,"holder":{"id":"a","owner":"test","beat":1,"lease_ms":1000}}"#
        );
        assert_eq!(decode(Shape::Lock, &row(&stored)).unwrap(), lock);
        assert_eq!(
            decode_head(Shape::Lock, &row(&stored)).unwrap().mark,
            Some(1_234)
        );
        let unmarked = joined(Rule::Permits(1), &[writer("a")]);
        assert_eq!(
            decode_head(Shape::Lock, &row(&text(Shape::Lock, &unmarked)))
                .unwrap()
                .mark,
            None
        );
        let bad =
            r#"{"token":1,"mark":-1,"holder":{"id":"a","owner":"test","beat":1,"lease_ms":1000}}"#;
        assert_eq!(
            decode(Shape::Lock, &row(bad)).unwrap_err().kind(),
            ErrorKind::Corrupt
        );
    }

    #[test]
    fn a_lock_waiter_with_data_keeps_its_data_when_short() {
        let mut a = ask("a", Mode::Write);
        a.data = Some("node-1".into());
        let mut b = ask("b", Mode::Write);
        b.data = Some("node-2".into());
        let lock = joined(Rule::Permits(1), &[a, b]);
        let stored = text(Shape::Lock, &lock);
        assert!(
            stored.ends_with(r#""queue":[{"id":"b","data":"node-2"}]}"#),
            "{stored}"
        );
        assert_eq!(decode(Shape::Lock, &row(&stored)).unwrap(), lock);
    }

    /// Rows written whole, as releases before the bare id wrote them, read
    /// the same.
    #[test]
    fn rows_with_every_waiter_whole_read_as_before() {
        let lock = r#"{"token":1,"holder":{"id":"a","owner":"o","beat":1,"lease_ms":1},"queue":[{"id":"b","owner":"o","lease_ms":1},{"id":"c"},"d"]}"#;
        let state = decode(Shape::Lock, &row(lock)).unwrap();
        assert_eq!(state.queue.len(), 3);
        assert!(state
            .queue
            .iter()
            .all(|w| &*w.owner == "o" && w.lease_ms == 1));
        let semaphore = r#"{"token":1,"permits":1,"holders":[{"id":"a","owner":"o","token":1,"beat":1,"lease_ms":1}],"queue":[{"id":"b","owner":"o","lease_ms":1},{"id":"c","owner":"o","lease_ms":1}]}"#;
        assert_eq!(
            decode(Shape::Semaphore, &row(semaphore))
                .unwrap()
                .queue
                .len(),
            2
        );
    }

    #[test]
    fn the_head_decode_refuses_what_the_full_decode_refuses() {
        let holder = r#""holder":{"id":"a","owner":"o","beat":1,"lease_ms":1}"#;
        let waiter = r#"{"id":"b","owner":"o","lease_ms":1}"#;
        let sem_holder = r#"{"id":"a","owner":"o","token":1,"beat":1,"lease_ms":1}"#;
        let rows = [
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[{waiter},{waiter}]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[{{"id":"b\"q","owner":"o","lease_ms":1,"data":"d"}}]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder}}}"#)),
            (Shape::Lock, r#"{"token":1}"#.to_string()),
            (Shape::Lock, "not json".to_string()),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[{{"id":"#)),
            (Shape::Lock, r#"{"token":1,"stranger":2}"#.to_string()),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":null}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":5}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[42]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[{{"id":"b","owner":"o"}}]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[{{"id":"b","owner":"o","lease_ms":1,"new":0}}]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[{{"id":7,"owner":"o","lease_ms":1}}]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,"queue":[{waiter}]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[{{"id":"b"}},{{"id":"c","data":"d"}}]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[{{"id":"b","lease_ms":1}}]}}"#)),
            (Shape::Lock, r#"{"token":1,"queue":[{"id":"b"}]}"#.to_string()),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":["b","c\"q",{{"id":"d","data":"x"}}]}}"#)),
            (Shape::Lock, r#"{"token":1,"queue":["b"]}"#.to_string()),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[["b"]]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,{holder},"queue":[null]}}"#)),
            (Shape::Lock, format!(r#"{{"token":1,"permits":1,{holder}}}"#)),
            (Shape::Semaphore, r#"{"token":1,"permits":1,"extra":true}"#.to_string()),
            (Shape::Semaphore, r#"{"token":0,"permits":0}"#.to_string()),
            (Shape::Semaphore, r#"{"token":0}"#.to_string()),
            (Shape::Semaphore, format!(r#"{{"token":2,"permits":1,"holders":[{sem_holder},{}]}}"#, sem_holder.replace("\"a\"", "\"b\""))),
            (Shape::Semaphore, format!(r#"{{"token":1,"permits":2,"holders":[{sem_holder}],"queue":[{waiter}]}}"#)),
            (Shape::Semaphore, format!(r#"{{"token":1,"permits":1,"holders":[{sem_holder}],"queue":[{{"id":"a","owner":"o","lease_ms":1}}]}}"#)),
            (Shape::Semaphore, r#"{"token":1,"permits":1,"holders":[{"id":"a","owner":"o","token":5,"beat":1,"lease_ms":1}]}"#.to_string()),
            (Shape::Semaphore, format!(r#"{{"token":1,"permits":1,"holders":[{sem_holder}],"queue":["b"]}}"#)),
            (Shape::Semaphore, format!(r#"{{"token":1,"permits":1,"holders":[{sem_holder}],"queue":[{waiter},"b"]}}"#)),
            (Shape::Semaphore, format!(r#"{{"token":1,"permits":1,"holders":[{sem_holder}],"queue":[{waiter},"c"]}}"#)),
            (Shape::RwLock, r#"{"token":2,"holders":[{"id":"a","owner":"o","mode":"write","token":1,"beat":1,"lease_ms":1},{"id":"b","owner":"o","mode":"read","token":2,"beat":1,"lease_ms":1}]}"#.to_string()),
            (Shape::RwLock, r#"{"token":1,"holders":[{"id":"a","owner":"o","mode":"read","token":1,"beat":1,"lease_ms":1}],"queue":[{"id":"b","owner":"o","mode":"read","lease_ms":1}]}"#.to_string()),
            (Shape::RwLock, r#"{"token":1,"holders":[{"id":"a","owner":"o","token":1,"beat":1,"lease_ms":1}]}"#.to_string()),
            (Shape::RwLock, r#"{"token":1,"holders":[{"id":"a","owner":"o","mode":"write","token":1,"beat":1,"lease_ms":1}],"queue":[{"id":"b","owner":"o","mode":"read","lease_ms":1},"c"]}"#.to_string()),
        ];
        let mut refused = 0;
        for (shape, value) in rows {
            let stored = row(&value);
            let full = decode(shape, &stored);
            let head = decode_head(shape, &stored);
            assert_eq!(head.is_ok(), full.is_ok(), "{shape:?} {value}");
            match (full, head) {
                (Ok(full), Ok(head)) => {
                    assert_eq!((head.rule, head.holders), (full.rule, full.holders));
                }
                (Err(full), Err(head)) => {
                    refused += 1;
                    assert_eq!(head.kind(), ErrorKind::Corrupt, "{value}");
                    assert_eq!(full.kind(), ErrorKind::Corrupt, "{value}");
                    assert!(full.message().contains("x/y"), "{full}");
                }
                _ => unreachable!(),
            }
        }
        assert_eq!(refused, 29, "the table's damaged rows");
    }

    #[test]
    fn encoding_with_cached_fragments_gives_the_same_bytes() {
        for shape in [Shape::Lock, Shape::Semaphore, Shape::RwLock] {
            let rule = match shape {
                Shape::RwLock => Rule::ReadWrite,
                _ => Rule::Permits(1),
            };
            let mut fragments = Fragments::default();
            let mut s = QueueState::new(rule);
            assert_eq!(
                encode_with(shape, &s, &mut fragments).unwrap(),
                encode(shape, &s).unwrap()
            );
            s.take(&ask("a", Mode::Write)).unwrap();
            let mut shorts = 0;
            for round in 0..200u64 {
                // Escapes, unicode and data, so the hand-made framing is
                // tested against serde's own; runs of one owner and lease,
                // so entries are stored short, behind entries that come
                // and go.
                let mut w = ask(&format!("w{round}"), Mode::Write);
                w.owner = format!("h\"ost\\{}:é\n", round / 4).into();
                w.lease_ms = 1000 + round / 10;
                if shape == Shape::Lock {
                    w.data = (round % 3 == 0).then(|| format!("d{round}\u{1}").into());
                }
                if shape == Shape::RwLock && round % 5 == 0 {
                    w.mode = Mode::Read;
                }
                s.queue.push_back(w);
                if round % 2 == 1 {
                    let holder = s.holders[0].clone();
                    s.release(&holder.ask.id, holder.token, None).unwrap();
                }
                if round % 7 == 0 {
                    s.withdraw(&format!("w{}", round / 2)).unwrap();
                }
                let encoded = encode_with(shape, &s, &mut fragments).unwrap();
                assert_eq!(
                    encoded,
                    encode(shape, &s).unwrap(),
                    "{shape:?} round {round}"
                );
                let stored = Row {
                    value: encoded,
                    ..row("")
                };
                assert_eq!(
                    decode(shape, &stored).unwrap(),
                    s,
                    "{shape:?} round {round}"
                );
                shorts += fragments.entries.iter().filter(|e| e.short).count();
            }
            assert_eq!(fragments.entries.len(), s.queue.len());
            assert!(shorts > 100, "{shape:?}: entries stored short: {shorts}");
        }
    }

    #[test]
    fn the_cached_queue_json_stays_bounded_as_heads_leave() {
        let mut fragments = Fragments::default();
        let mut s = QueueState::new(Rule::Permits(1));
        s.take(&ask("holder", Mode::Write)).unwrap();
        for round in 0..2000 {
            s.queue.push_back(ask(&format!("w{round}"), Mode::Write));
            if s.queue.len() > 3 {
                let holder = s.holders[0].clone();
                s.release(&holder.ask.id, holder.token, None).unwrap();
            }
            assert_eq!(
                encode_with(Shape::Lock, &s, &mut fragments).unwrap(),
                encode(Shape::Lock, &s).unwrap(),
                "round {round}"
            );
        }
        // 2000 entries of ~15 bytes went through; the buffer is compacted.
        assert!(fragments.json.len() < 3 * 4096, "{}", fragments.json.len());
        assert_eq!(fragments.entries.len(), 3);
    }
}
