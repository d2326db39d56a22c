//! The change feed of a database file. SQLite has no LISTEN: instead one
//! thread per store, while it has watches, asks its own connection for
//! `PRAGMA data_version`, which changes when any other connection (another
//! process's, or one of this store's pool) committed. Only then does it read
//! the watched rows, and it wakes the watches whose row changed version.
//!
//! The check costs microseconds and no tokio timer, so the thread can ask
//! every [`FAST`] after a change, backing off to [`SLOW`] while nothing
//! changes: a waiter in another process learns of a hand-off within about
//! a tenth of a millisecond under load, instead of at a poller's next
//! millisecond tick (or later, when it has backed off). A `notify` from
//! this store asks at once.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bakery_core::{Key, Operation, Result, Watch, WatchSender};
use rusqlite::Connection;

use crate::rows::Seen;
use crate::SqliteConfig;

/// The check interval right after a change.
pub(crate) const FAST: Duration = Duration::from_micros(100);

/// The longest check interval, reached by doubling while nothing changes.
pub(crate) const SLOW: Duration = Duration::from_millis(2);

/// The watches of one store, and its feed thread's state.
#[derive(Default)]
pub(crate) struct Feed {
    state: Mutex<FeedState>,
    /// Wakes the thread: a `notify`, a new watch, or the store closing.
    kick: Condvar,
}

#[derive(Default)]
struct FeedState {
    /// Open watches by key, with the version their row had when last seen
    /// (`None`: no row).
    watches: HashMap<String, Watched>,
    /// Whether the thread runs.
    running: bool,
    /// Check now (a `notify`), without waiting for the interval.
    kicked: bool,
    /// The store is gone: the thread ends.
    closed: bool,
    /// Writes of this store that are committing, by key, with the row
    /// each leaves: a check that finds that row may have caught the write
    /// committed but not yet recorded as own, so it is judged later.
    committing: HashMap<String, Vec<Seen>>,
}

struct Watched {
    /// The row as the feed last saw it: `(version, live)`; `None`: no row.
    seen: Option<Seen>,
    /// This store's own writes of the key since then, as one span: from the
    /// row it replaced to the row it left. A check that finds exactly that
    /// change wakes nobody: the writer told its process's waiters itself.
    own: Option<(Option<Seen>, Seen)>,
    /// A `notify` of the key came since the last check: its watches wake
    /// at the next check whatever the row, like a NOTIFY elsewhere (the
    /// thread may have seen this store's write before the notify, and
    /// kept quiet about it as an own write).
    notified: bool,
    senders: Vec<WatchSender>,
}

impl FeedState {
    /// Forget one committing write of `key` that leaves `to`.
    fn no_longer_committing(&mut self, key: &Key, to: Seen) {
        if let Some(rows) = self.committing.get_mut(key.as_str()) {
            if let Some(at) = rows.iter().position(|&row| row == to) {
                rows.swap_remove(at);
            }
            if rows.is_empty() {
                self.committing.remove(key.as_str());
            }
        }
    }
}

impl Feed {
    fn state(&self) -> MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A watch of `key`, whose row has version `seen` now; starts the
    /// thread if it does not run. Blocking (it may open a connection): call
    /// on the blocking pool.
    pub(crate) fn watch(
        self: &Arc<Self>,
        config: &SqliteConfig,
        select: &str,
        probe: &str,
        key: &Key,
        seen: Option<Seen>,
    ) -> Result<Watch> {
        let (sender, watch) = Watch::channel();
        let start = {
            let mut state = self.state();
            let watched = state
                .watches
                .entry(key.as_str().to_owned())
                .or_insert(Watched {
                    seen,
                    own: None,
                    notified: false,
                    senders: Vec::new(),
                });
            watched.senders.push(sender);
            self.kick.notify_one();
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            if let Err(err) = self.start(config, select, probe) {
                // Not fed: the watches of `key` end (their watchers poll).
                let mut state = self.state();
                state.running = false;
                state.watches.remove(key.as_str());
                return Err(err);
            }
        }
        Ok(watch)
    }

    /// Start the thread, with its own connection: `data_version` counts
    /// the commits of every other one, this store's pool included.
    fn start(self: &Arc<Self>, config: &SqliteConfig, select: &str, probe: &str) -> Result<()> {
        let conn = crate::rows::open_connection(config, Operation::Watch)?;
        let feed = Arc::clone(self);
        let (select, probe) = (select.to_owned(), probe.to_owned());
        std::thread::Builder::new()
            .name("bakery-sqlite-feed".into())
            .spawn(move || feed.run(conn, &select, &probe))
            .map(drop)
            .map_err(|e| {
                bakery_core::Error::new(
                    bakery_core::ErrorKind::Unavailable,
                    crate::BACKEND,
                    format!("cannot start the change feed thread: {e}"),
                )
                .during(Operation::Watch)
            })
    }

    /// Wake the watches of `key` at a check made now: a write this
    /// process made should reach its watchers without waiting for the
    /// interval.
    pub(crate) fn kick(&self, key: &Key) {
        let mut state = self.state();
        if !state.running {
            return;
        }
        if let Some(watched) = state.watches.get_mut(key.as_str()) {
            watched.notified = true;
            state.kicked = true;
            self.kick.notify_one();
        }
    }

    /// This store is about to commit a write that leaves `key`'s row at
    /// `to`: until the returned mark says how it ended, the thread does not
    /// judge a change of the key to `to` (it could be this write, committed
    /// but not yet recorded as own).
    pub(crate) fn committing<'a>(&'a self, key: &'a Key, to: Seen) -> Committing<'a> {
        self.state()
            .committing
            .entry(key.as_str().to_owned())
            .or_default()
            .push(to);
        Committing {
            feed: self,
            key,
            to,
            ended: false,
        }
    }

    /// A write of `key` committed, changing its row from `from` to `to`:
    /// record that as this store's own (it tells its own waiters itself).
    fn committed(&self, key: &Key, from: Option<Seen>, to: Seen) {
        let mut state = self.state();
        state.no_longer_committing(key, to);
        if let Some(watched) = state.watches.get_mut(key.as_str()) {
            watched.own = match watched.own {
                // Consecutive writes of ours: one span.
                Some((start, end)) if Some(end) == from => Some((start, to)),
                _ => Some((from, to)),
            };
        }
    }

    /// The store is gone: end the thread.
    pub(crate) fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        self.kick.notify_one();
    }

    fn run(&self, conn: Connection, select: &str, probe: &str) {
        // Unknown at first: the first check reads the watched rows, so a
        // commit between a watch's baseline read and this thread's start
        // is not missed.
        let mut last: Option<i64> = None;
        let mut interval = FAST;
        // A change was put off while the write that made it was being
        // recorded: check again at the next interval even if nothing else
        // commits.
        let mut put_off = false;
        loop {
            let keys: Vec<String> = {
                let mut state = self.state();
                // Forget the watches that were dropped.
                state.watches.retain(|_, watched| {
                    watched.senders.retain(|sender| !sender.is_closed());
                    !watched.senders.is_empty()
                });
                if state.watches.is_empty() && !state.closed {
                    // Nothing to feed: sleep until a watch (or the end)
                    // comes, keeping the thread and its connection for it.
                    state = self
                        .kick
                        .wait_while(state, |state| state.watches.is_empty() && !state.closed)
                        .unwrap_or_else(PoisonError::into_inner);
                    // `last` stays: a commit while it slept is a change, and
                    // each key's baseline says whether it is news.
                    interval = FAST;
                } else if !state.kicked && !state.closed {
                    state = self
                        .kick
                        .wait_timeout(state, interval)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                if state.closed {
                    state.running = false;
                    return;
                }
                let kicked = std::mem::take(&mut state.kicked);
                let now = Some(data_version(&conn));
                if now == last && !kicked && !std::mem::take(&mut put_off) {
                    interval = (interval * 2).min(SLOW);
                    continue;
                }
                last = now;
                state.watches.keys().cloned().collect()
            };
            // Fast again only after news: this store's own writes (the
            // usual change under a one-process load) let it back off.
            let mut news = false;
            // Read outside the lock: `watch` and `kick` never wait on a read.
            for name in keys {
                let Ok(key) = Key::new(name.as_str()) else {
                    continue;
                };
                // The version first (no value): most changes are another
                // key's, or this store's own.
                let now = match probe_row(&conn, probe, &key) {
                    Ok(now) => now,
                    Err(err) => {
                        tracing::debug!(error = %err, key = %key, "change feed: read failed");
                        // The waiters' own reads report it; wake them so they do.
                        self.wake(&name, None);
                        continue;
                    }
                };
                match self.judge(&name, now) {
                    Change::Quiet => continue,
                    Change::PutOff => {
                        put_off = true;
                        continue;
                    }
                    Change::News => news = true,
                }
                match crate::rows::read(&conn, select, &key, Operation::Watch) {
                    Ok(stored) => {
                        let row = stored.and_then(|stored| stored.live(&key));
                        self.wake(&name, row);
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, key = %key, "change feed: read failed");
                        self.wake(&name, None);
                    }
                }
            }
            interval = if news || put_off {
                FAST
            } else {
                (interval * 2).min(SLOW)
            };
        }
    }

    /// Note that `name`'s row is `now`, and whether its watches must hear
    /// of it: a `notify` of the key asked for it, or the row changed, and
    /// not just by this store's own writes. Put off when the row is what a
    /// write of this store that is committing leaves: that write may have
    /// committed and not yet been recorded as own.
    fn judge(&self, name: &str, now: Option<Seen>) -> Change {
        let mut state = self.state();
        let committing = state.committing.get(name);
        if now.is_some_and(|now| committing.is_some_and(|rows| rows.contains(&now))) {
            return Change::PutOff;
        }
        let Some(watched) = state.watches.get_mut(name) else {
            return Change::Quiet;
        };
        let notified = std::mem::take(&mut watched.notified);
        if watched.seen == now {
            return if notified {
                Change::News
            } else {
                Change::Quiet
            };
        }
        let before = std::mem::replace(&mut watched.seen, now);
        let own = watched.own.take();
        if notified || !matches!(own, Some((from, to)) if from == before && Some(to) == now) {
            Change::News
        } else {
            Change::Quiet
        }
    }

    /// Wake the watches of `name`, with the row it has now if known.
    fn wake(&self, name: &str, row: Option<bakery_core::Row>) {
        let state = self.state();
        let Some(watched) = state.watches.get(name) else {
            return;
        };
        for sender in &watched.senders {
            match &row {
                Some(row) => {
                    sender.wake_with_row(row.clone());
                }
                None => {
                    sender.wake();
                }
            }
        }
    }
}

/// What a check found of one watched key.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    /// Nothing its watches must hear of.
    Quiet,
    /// A change, or a `notify`: wake its watches.
    News,
    /// The row a write of this store leaves, before the write is recorded:
    /// judge it at the next check.
    PutOff,
}

/// A write about to commit (from [`Feed::committing`]). Say how it ended
/// with [`Committing::wrote`]; dropped without that (the commit failed),
/// it records nothing, so whatever the row became is news.
pub(crate) struct Committing<'a> {
    feed: &'a Feed,
    key: &'a Key,
    to: Seen,
    ended: bool,
}

impl Committing<'_> {
    /// The write committed, changing the row from `from` (`None`: no
    /// row) to the row given to [`Feed::committing`].
    pub(crate) fn wrote(mut self, from: Option<Seen>) {
        self.ended = true;
        self.feed.committed(self.key, from, self.to);
    }
}

impl Drop for Committing<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.feed.state().no_longer_committing(self.key, self.to);
        }
    }
}

/// The version of `key`'s row and whether it is live, without its value.
fn probe_row(conn: &Connection, probe: &str, key: &Key) -> rusqlite::Result<Option<Seen>> {
    use rusqlite::OptionalExtension;
    let mut stmt = conn.prepare_cached(probe)?;
    stmt.query_row([key.as_str()], |row| {
        let version: i64 = row.get(0)?;
        let live: bool = row.get(1)?;
        Ok((version.unsigned_abs(), live))
    })
    .optional()
}

/// The connection's `data_version`; 0 when it cannot be read (the next
/// good read then counts as a change: a spare check, never a missed one).
fn data_version(conn: &Connection) -> i64 {
    conn.query_row("PRAGMA data_version", [], |row| row.get(0))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A feed (no thread) watching `key`, whose row it last saw as `seen`.
    fn watching(key: &Key, seen: Option<Seen>) -> Feed {
        let feed = Feed::default();
        feed.state().watches.insert(
            key.as_str().to_owned(),
            Watched {
                seen,
                own: None,
                notified: false,
                senders: Vec::new(),
            },
        );
        feed
    }

    #[test]
    fn an_own_write_seen_before_it_is_recorded_is_put_off_then_quiet() {
        let key = Key::new("k").unwrap();
        let feed = watching(&key, None);
        let committing = feed.committing(&key, (1, true));
        // The check ran between the commit and the record.
        assert_eq!(feed.judge("k", Some((1, true))), Change::PutOff);
        committing.wrote(None);
        assert_eq!(feed.judge("k", Some((1, true))), Change::Quiet);
        // Another process's write after it is news.
        assert_eq!(feed.judge("k", Some((2, true))), Change::News);
    }

    #[test]
    fn a_failed_commit_records_nothing() {
        let key = Key::new("k").unwrap();
        let feed = watching(&key, Some((1, true)));
        drop(feed.committing(&key, (2, true)));
        assert!(feed.state().committing.is_empty());
        // Whoever wrote version 2, it was not this store.
        assert_eq!(feed.judge("k", Some((2, true))), Change::News);
    }

    #[test]
    fn another_row_than_the_committing_write_s_is_judged_at_once() {
        let key = Key::new("k").unwrap();
        let feed = watching(&key, Some((1, true)));
        let committing = feed.committing(&key, (3, true));
        // Version 2 is not what the committing write leaves: not put off.
        assert_eq!(feed.judge("k", Some((2, true))), Change::News);
        committing.wrote(Some((2, true)));
        assert_eq!(feed.judge("k", Some((3, true))), Change::Quiet);
    }

    #[test]
    fn a_notify_wakes_even_an_unchanged_row() {
        let key = Key::new("k").unwrap();
        let feed = watching(&key, Some((1, true)));
        feed.state().running = true;
        feed.kick(&key);
        assert_eq!(feed.judge("k", Some((1, true))), Change::News);
        assert_eq!(feed.judge("k", Some((1, true))), Change::Quiet);
    }
}
