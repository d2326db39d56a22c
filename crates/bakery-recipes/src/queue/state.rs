//! The state every queue recipe keeps in its one row: the last fencing
//! token, the grant rule, the holders and the FIFO queue. Every transition
//! is a pure function on this value; the row's writer applies it and
//! writes the result with one `put_if_version`.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use bakery_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};

use super::silence::Beating;

/// How a request holds (or wants) a read-write lock. The lock and the
/// semaphore ask for [`Mode::Write`]: one holder per permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Shared: any number of readers hold the lock together.
    Read,
    /// Exclusive: one writer, nobody else.
    Write,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Read => "read",
            Mode::Write => "write",
        })
    }
}

/// Who may hold grants together: the whole difference between the lock,
/// the semaphore and the read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// At most this many holders (the lock: 1).
    Permits(u32),
    /// Readers together, or one writer alone.
    ReadWrite,
}

/// One acquisition's request, as it waits in the queue and as its grant is
/// held. Clones share their strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ask {
    /// Unique per acquisition.
    pub(crate) id: Arc<str>,
    /// Human-readable owner (`host:pid` unless set by the builder).
    pub(crate) owner: Arc<str>,
    /// The lease its grant is held with, in milliseconds.
    pub(crate) lease_ms: u64,
    pub(crate) mode: Mode,
    /// A small value stored with the grant (the lock's `data`).
    pub(crate) data: Option<Arc<str>>,
}

/// A granted request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) ask: Ask,
    /// The fencing token of its grant.
    pub(crate) token: u64,
    /// Heartbeat counter: 0 when handed over and not yet claimed; the
    /// holder advances it every lease/3.
    pub(crate) beat: u64,
}

impl Holder {
    /// What an observer of its heartbeat sees.
    pub(crate) fn beating(&self) -> Beating<'_> {
        Beating {
            id: &self.ask.id,
            beat: self.beat,
            lease_ms: self.ask.lease_ms,
        }
    }
}

/// A holder that stayed silent for a whole lease, as its observer saw it:
/// evicted only if its heartbeat still stands there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Silent {
    pub(crate) id: Arc<str>,
    pub(crate) beat: u64,
}

/// The whole state of one queue recipe's row.
///
/// Invariants kept by every transition (and checked when a row is read):
/// nobody queues while the head of the queue could be granted (a release,
/// eviction or withdrawal grants it in the same write); the holders fit
/// the rule; no request id appears twice; no holder's token is above the
/// last granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueState {
    /// The fencing token of the latest grant (0: never granted). It grows by
    /// one with every grant and is never reset.
    pub(crate) token: u64,
    pub(crate) rule: Rule,
    /// In the order they were granted.
    pub(crate) holders: Vec<Holder>,
    /// In the order their enqueue writes applied (FIFO).
    pub(crate) queue: VecDeque<Ask>,
    /// A number the holders keep in the row for their successors (a
    /// snowflake worker id's last tick): raised by a holder's beat, set by
    /// its release, kept through evictions and grants.
    pub(crate) mark: Option<u64>,
}

/// What most readers of a row need: the rule and the holders (with their
/// tokens), without the queue (keeping one costs the same at any queue
/// length).
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) rule: Rule,
    pub(crate) holders: Vec<Holder>,
    /// How many wait in the queue.
    pub(crate) queued: usize,
    /// The row's [`QueueState::mark`].
    pub(crate) mark: Option<u64>,
}

/// Could `ask` hold beside `holders` under `rule`?
fn fits(rule: Rule, holders: &[Holder], ask: &Ask) -> bool {
    match rule {
        Rule::Permits(permits) => holders.len() < permits as usize,
        Rule::ReadWrite => match ask.mode {
            Mode::Read => holders.iter().all(|h| h.ask.mode == Mode::Read),
            Mode::Write => holders.is_empty(),
        },
    }
}

impl Head {
    /// The state of a row that does not exist.
    pub(crate) fn empty(rule: Rule) -> Head {
        Head {
            rule,
            holders: Vec::new(),
            queued: 0,
            mark: None,
        }
    }

    /// The token of the grant `id` holds, if it holds one.
    pub(crate) fn token_of(&self, id: &str) -> Option<u64> {
        self.holders
            .iter()
            .find(|h| &*h.ask.id == id)
            .map(|h| h.token)
    }

    /// Can `ask` be granted at once: nobody queues, and it fits?
    pub(crate) fn can_take(&self, ask: &Ask) -> bool {
        self.queued == 0 && fits(self.rule, &self.holders, ask)
    }
}

impl QueueState {
    /// A row never written.
    pub(crate) fn new(rule: Rule) -> QueueState {
        QueueState {
            token: 0,
            rule,
            holders: Vec::new(),
            queue: VecDeque::new(),
            mark: None,
        }
    }

    /// Its rule and holders.
    pub(crate) fn head(&self) -> Head {
        Head {
            rule: self.rule,
            holders: self.holders.clone(),
            queued: self.queue.len(),
            mark: self.mark,
        }
    }

    /// The holder with request id `id`.
    pub(crate) fn holder(&self, id: &str) -> Option<&Holder> {
        self.holders.iter().find(|h| &*h.ask.id == id)
    }

    /// `id` holds a grant with `token`.
    pub(crate) fn holds(&self, id: &str, token: u64) -> bool {
        self.holder(id).is_some_and(|h| h.token == token)
    }

    /// Is `id` waiting in the queue?
    pub(crate) fn queued(&self, id: &str) -> bool {
        self.queue.iter().any(|w| &*w.id == id)
    }

    /// Can `ask` be granted at once: nobody queues (so a reader does not
    /// pass a queued writer), and it fits?
    pub(crate) fn can_take(&self, ask: &Ask) -> bool {
        self.queue.is_empty() && fits(self.rule, &self.holders, ask)
    }

    /// Could the head of the queue be granted now (never true in a row
    /// this code wrote)?
    pub(crate) fn head_grantable(&self) -> bool {
        self.queue
            .front()
            .is_some_and(|head| fits(self.rule, &self.holders, head))
    }

    /// Grant `ask` directly, already claimed (beat 1); its token. The
    /// caller checked [`Self::can_take`].
    pub(crate) fn take(&mut self, ask: &Ask) -> Result<u64> {
        let token = next_token(self.token)?;
        self.token = token;
        self.holders.push(Holder {
            ask: ask.clone(),
            token,
            beat: 1,
        });
        Ok(token)
    }

    /// Grant the head of the queue while it fits (unclaimed, beat 0), each
    /// with a new token; how many were granted.
    pub(crate) fn fill(&mut self) -> Result<usize> {
        let mut granted = 0;
        while self.head_grantable() {
            let Some(next) = self.queue.pop_front() else {
                break;
            };
            let token = next_token(self.token)?;
            self.token = token;
            self.holders.push(Holder {
                ask: next,
                token,
                beat: 0,
            });
            granted += 1;
        }
        Ok(granted)
    }

    /// Advance the heartbeat of the grant `id` holds with `token` (also
    /// claims a handed-over grant), raising the row's mark to `mark` if
    /// given (never lowering it); false if it holds none.
    pub(crate) fn beat(&mut self, id: &str, token: u64, mark: Option<u64>) -> bool {
        match self
            .holders
            .iter_mut()
            .find(|h| &*h.ask.id == id && h.token == token)
        {
            Some(holder) => {
                holder.beat = holder.beat.saturating_add(1);
                if mark.is_some() {
                    self.mark = self.mark.max(mark);
                }
                true
            }
            None => false,
        }
    }

    /// Give up the grant `id` holds with `token`, granting the waiters it
    /// frees; false if `id` does not hold it (evicted).
    ///
    /// With a `mark`, the row's mark becomes it: a sole holder knows what
    /// it used and may lower it; beside other holders it only raises it.
    pub(crate) fn release(&mut self, id: &str, token: u64, mark: Option<u64>) -> Result<bool> {
        if !self.holds(id, token) {
            return Ok(false);
        }
        self.holders.retain(|h| &*h.ask.id != id);
        if mark.is_some() {
            self.mark = if self.holders.is_empty() {
                mark
            } else {
                self.mark.max(mark)
            };
        }
        self.fill()?;
        Ok(true)
    }

    /// Remove the holders of `silent` whose heartbeat still stands where
    /// their observer saw it for a whole lease, granting the waiters that
    /// frees; false if none does.
    pub(crate) fn evict(&mut self, silent: &[Silent]) -> Result<bool> {
        let before = self.holders.len();
        self.holders
            .retain(|h| !silent.iter().any(|s| s.id == h.ask.id && s.beat == h.beat));
        if self.holders.len() == before {
            return Ok(false);
        }
        self.fill()?;
        Ok(true)
    }

    /// Remove request `id` wherever it is: out of the queue (which may let
    /// the waiters behind it fit, as readers behind a withdrawn writer), or,
    /// if it was granted meanwhile, give that on. False if it is nowhere.
    pub(crate) fn withdraw(&mut self, id: &str) -> Result<bool> {
        if self.queued(id) {
            self.queue.retain(|w| &*w.id != id);
            self.fill()?;
            return Ok(true);
        }
        match self.holder(id).map(|h| h.token) {
            Some(token) => self.release(id, token, None),
            None => Ok(false),
        }
    }

    /// What a row this code cannot have written breaks, if anything.
    pub(crate) fn broken(&self) -> Option<String> {
        self.broken_apart_from_ids()
            .or_else(|| broken_ids(&self.holders, self.queue.iter().map(|w| &*w.id)))
    }

    /// [`Self::broken`] but for repeated request ids: what the holders and
    /// the head of the queue alone show.
    pub(crate) fn broken_apart_from_ids(&self) -> Option<String> {
        if let Rule::Permits(permits) = self.rule {
            if self.holders.len() > permits as usize {
                return Some(format!(
                    "{} holders for {permits} permits",
                    self.holders.len()
                ));
            }
        }
        if self.rule == Rule::ReadWrite
            && self.holders.len() > 1
            && self.holders.iter().any(|h| h.ask.mode == Mode::Write)
        {
            return Some("a writer together with other holders".to_owned());
        }
        if self.head_grantable() {
            return Some("waiters while the head of the queue could be granted".to_owned());
        }
        if self.holders.iter().any(|h| h.token > self.token) {
            return Some("a holder's token above the last granted".to_owned());
        }
        None
    }
}

/// What the request ids of `holders` and of the waiters `queued` break, if
/// anything: no id may appear twice. Apart from [`QueueState::broken`] for a
/// reader that has the waiters' ids but not their requests.
pub(crate) fn broken_ids<'a>(
    holders: &'a [Holder],
    queued: impl Iterator<Item = &'a str>,
) -> Option<String> {
    let mut ids: Vec<&str> = holders.iter().map(|h| &*h.ask.id).chain(queued).collect();
    let all = ids.len();
    ids.sort_unstable();
    ids.dedup();
    (ids.len() != all).then(|| "a request id twice".to_owned())
}

/// The token after `token`; its overflow is [`ErrorKind::Exhausted`], never
/// a wrap (fencing tokens only grow).
fn next_token(token: u64) -> Result<u64> {
    token
        .checked_add(1)
        .ok_or_else(|| Error::new(ErrorKind::Exhausted, "queue", "fencing token overflow"))
}

/// Requests and rows for the tests of the queue's state and of its stored
/// forms.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// Request `id` of owner `test` with a lease of 1 s.
    pub(crate) fn ask(id: &str, mode: Mode) -> Ask {
        Ask {
            id: id.into(),
            owner: "test".into(),
            lease_ms: 1000,
            mode,
            data: None,
        }
    }

    impl QueueState {
        /// Take `ask` at once if it can be, as an acquire does, or queue
        /// it; the token it was granted with.
        pub(crate) fn join(&mut self, ask: Ask) -> Option<u64> {
            if self.can_take(&ask) {
                return Some(self.take(&ask).unwrap());
            }
            self.queue.push_back(ask);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::ask;
    use super::*;

    fn join(s: &mut QueueState, id: &str, mode: Mode) -> Option<u64> {
        s.join(ask(id, mode))
    }

    fn ids(s: &QueueState) -> Vec<&str> {
        s.holders.iter().map(|h| &*h.ask.id).collect()
    }

    #[test]
    fn one_permit_hands_over_in_fifo_order_and_tokens_grow() {
        let mut s = QueueState::new(Rule::Permits(1));
        assert_eq!(join(&mut s, "a", Mode::Write), Some(1));
        assert_eq!(join(&mut s, "b", Mode::Write), None);
        assert_eq!(join(&mut s, "c", Mode::Write), None);
        assert!(s.release("a", 1, None).unwrap());
        assert_eq!(ids(&s), ["b"]);
        assert_eq!((s.holders[0].token, s.holders[0].beat), (2, 0));
        assert!(!s.release("a", 1, None).unwrap(), "released twice");
        assert!(s.release("b", 2, None).unwrap());
        assert!(s.release("c", 3, None).unwrap());
        assert!(s.holders.is_empty());
        assert_eq!(s.token, 3, "a release with nobody waiting grants nothing");
    }

    #[test]
    fn permits_are_taken_then_queued_then_granted_as_they_free() {
        let mut s = QueueState::new(Rule::Permits(2));
        join(&mut s, "a", Mode::Write);
        join(&mut s, "b", Mode::Write);
        join(&mut s, "c", Mode::Write);
        join(&mut s, "d", Mode::Write);
        assert_eq!(s.queue.len(), 2);
        assert!(s.release("b", 2, None).unwrap());
        assert_eq!(ids(&s), ["a", "c"]);
        let silent = [
            Silent {
                id: "a".into(),
                beat: 1,
            },
            Silent {
                id: "c".into(),
                beat: 7,
            },
        ];
        assert!(s.evict(&silent).unwrap(), "a is still silent");
        assert_eq!(ids(&s), ["c", "d"], "c beat since: kept");
        assert_eq!(s.holder("d").unwrap().token, 4);
    }

    #[test]
    fn readers_share_and_a_queued_writer_holds_back_new_readers() {
        let mut s = QueueState::new(Rule::ReadWrite);
        assert_eq!(join(&mut s, "r1", Mode::Read), Some(1));
        assert_eq!(join(&mut s, "r2", Mode::Read), Some(2));
        assert_eq!(join(&mut s, "w", Mode::Write), None);
        assert_eq!(join(&mut s, "r3", Mode::Read), None, "behind the writer");
        assert!(s.release("r1", 1, None).unwrap());
        assert!(s.release("r2", 2, None).unwrap());
        assert_eq!(ids(&s), ["w"]);
        assert!(s.release("w", 3, None).unwrap());
        assert_eq!(ids(&s), ["r3"]);
    }

    #[test]
    fn withdrawing_a_queued_writer_lets_the_readers_behind_it_in() {
        let mut s = QueueState::new(Rule::ReadWrite);
        join(&mut s, "r1", Mode::Read);
        join(&mut s, "w", Mode::Write);
        join(&mut s, "r2", Mode::Read);
        join(&mut s, "r3", Mode::Read);
        assert!(s.withdraw("w").unwrap());
        assert_eq!(ids(&s), ["r1", "r2", "r3"]);
        assert!(!s.withdraw("w").unwrap(), "nowhere now");
        assert!(
            s.withdraw("r2").unwrap(),
            "a granted request gives its grant up"
        );
        assert_eq!(ids(&s), ["r1", "r3"]);
    }

    #[test]
    fn a_beat_claims_and_moves_only_its_own_grant() {
        let mut s = QueueState::new(Rule::Permits(2));
        join(&mut s, "a", Mode::Write);
        join(&mut s, "b", Mode::Write);
        assert!(s.beat("b", 2, None));
        assert!(!s.beat("b", 1, None), "another grant's token");
        assert!(!s.beat("z", 1, None));
        assert_eq!((s.holders[0].beat, s.holders[1].beat), (1, 2));
    }

    #[test]
    fn the_mark_moves_only_with_the_holders_beats_and_release_and_survives_eviction() {
        let mut s = QueueState::new(Rule::Permits(1));
        join(&mut s, "a", Mode::Write);
        join(&mut s, "b", Mode::Write);
        assert!(s.beat("a", 1, Some(10)));
        assert!(s.beat("a", 1, Some(7)), "a beat still applies");
        assert_eq!(s.mark, Some(10), "but never lowers the mark");
        assert!(!s.beat("b", 2, Some(99)), "b waits: no grant to beat");
        assert_eq!(s.mark, Some(10), "a waiter's beat leaves it");
        assert!(s.release("a", 1, Some(4)).unwrap());
        assert_eq!(s.mark, Some(4), "a sole holder's release sets it");
        let beat = s.holders[0].beat;
        assert!(s
            .evict(&[Silent {
                id: "b".into(),
                beat
            }])
            .unwrap());
        assert_eq!(s.mark, Some(4), "an eviction keeps it");
        assert!(!s.release("b", 2, Some(1)).unwrap(), "evicted");
        assert_eq!(s.mark, Some(4));

        let mut shared = QueueState::new(Rule::Permits(2));
        join(&mut shared, "a", Mode::Write);
        join(&mut shared, "b", Mode::Write);
        assert!(shared.beat("b", 2, Some(10)));
        assert!(shared.release("a", 1, Some(3)).unwrap());
        assert_eq!(shared.mark, Some(10), "beside another holder, only raised");
    }

    #[test]
    fn rows_no_transition_makes_are_named() {
        let mut s = QueueState::new(Rule::Permits(1));
        join(&mut s, "a", Mode::Write);
        assert_eq!(s.broken(), None);
        let mut twice = s.clone();
        twice.queue.push_back(ask("a", Mode::Write));
        assert_eq!(twice.broken().as_deref(), Some("a request id twice"));
        let mut free = QueueState::new(Rule::Permits(1));
        free.queue.push_back(ask("b", Mode::Write));
        assert!(free.broken().unwrap().contains("could be granted"));
        let mut over = s.clone();
        over.holders.push(Holder {
            ask: ask("b", Mode::Write),
            token: 1,
            beat: 1,
        });
        assert!(over.broken().unwrap().contains("holders for 1 permits"));
        let mut ahead = s.clone();
        ahead.holders[0].token = 9;
        assert!(ahead.broken().unwrap().contains("above the last granted"));
        let mut mixed = QueueState::new(Rule::ReadWrite);
        join(&mut mixed, "r", Mode::Read);
        mixed.holders.push(Holder {
            ask: ask("w", Mode::Write),
            token: 1,
            beat: 1,
        });
        assert!(mixed.broken().unwrap().contains("writer together"));
    }

    #[test]
    fn token_overflow_is_exhausted_not_a_wrap() {
        let mut s = QueueState::new(Rule::Permits(1));
        s.token = u64::MAX;
        let err = s.take(&ask("a", Mode::Write)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Exhausted);
    }
}
