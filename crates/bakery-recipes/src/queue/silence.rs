//! What this process saw of a row's holders' heartbeats, and since when on
//! its own monotonic clock: a holder whose heartbeat stayed the same for a
//! whole lease of its own may be evicted (the lock, the semaphore, the
//! rwlock).
//!
//! One [`Silence`] per process and row, shared by every waiter and try of
//! the process: the count of a holder's silence starts the first time any
//! of them saw its heartbeat, and a new acquire (after a timeout, say) goes
//! on from there instead of starting again. Silent holders queued one
//! behind another (the requests of a crashed process, withdrawals lost to
//! a fault) then cost a lease each, not a lease each per acquire.
//!
//! Counting from the first sighting is safe for any observer of the
//! process: the row that showed the heartbeat was stored before the read
//! that returned it, so the holder has been silent at least since then.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bakery_core::{Row, Version};
use tokio::time::Instant;

/// One holder as an observer sees it: its request id, heartbeat and lease.
pub(crate) struct Beating<'a> {
    pub(crate) id: &'a str,
    pub(crate) beat: u64,
    pub(crate) lease_ms: u64,
}

/// This process's sightings of one row's holders.
#[derive(Debug, Default)]
pub(crate) struct Silence {
    seen: Mutex<Sightings>,
}

#[derive(Debug, Default)]
struct Sightings {
    /// The row version the sightings are of: an older row changes nothing.
    version: Version,
    by_holder: HashMap<String, Sighting>,
}

#[derive(Debug)]
struct Sighting {
    beat: u64,
    since: Instant,
    lease: Duration,
}

impl Silence {
    /// Note the `holders` of `row` (keeping the first
    /// sighting of those whose heartbeat did not move) and return those
    /// silent for a whole lease. A row older than one noted before (another
    /// task's stale copy) changes nothing and finds nobody silent: a write
    /// decided on it would be refused anyway.
    pub(crate) fn update<'a>(
        &self,
        row: Option<&Row>,
        holders: impl IntoIterator<Item = Beating<'a>>,
    ) -> Vec<String> {
        // No row: no holder, and older than any written row.
        let version = row.map_or(0, |row| row.version);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if version < seen.version {
            return Vec::new();
        }
        seen.version = version;
        let now = Instant::now();
        let holders: Vec<Beating<'a>> = holders.into_iter().collect();
        seen.by_holder
            .retain(|id, _| holders.iter().any(|holder| holder.id == id));
        let mut silent = Vec::new();
        for holder in holders {
            let fresh = || Sighting {
                beat: holder.beat,
                since: now,
                lease: Duration::from_millis(holder.lease_ms),
            };
            let sighting = seen
                .by_holder
                .entry(holder.id.to_owned())
                .or_insert_with(fresh);
            if sighting.beat != holder.beat {
                *sighting = fresh();
            }
            if now >= sighting.since + sighting.lease {
                silent.push(holder.id.to_owned());
            }
        }
        silent
    }

    /// When the first noted holder's lease runs out, if nothing moves.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.by_holder
            .values()
            .map(|sighting| sighting.since + sighting.lease)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `silence` finds silent in row `version`, where `held` hold:
    /// each an id and its heartbeat, with a lease of 1 s.
    fn see(silence: &Silence, version: Version, held: &[(&str, u64)]) -> Vec<String> {
        let key = bakery_core::Key::new("lock/t").expect("key");
        let row = Row::new(&key, bakery_core::Bytes::new(), version);
        let holders = held.iter().map(|&(id, beat)| Beating {
            id,
            beat,
            lease_ms: 1000,
        });
        silence.update(Some(&row), holders)
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_is_silent_after_a_lease_of_the_same_heartbeat() {
        let silence = Silence::default();
        assert!(see(&silence, 1, &[("a", 0)]).is_empty());
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(see(&silence, 1, &[("a", 0)]).is_empty());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(see(&silence, 1, &[("a", 0)]), ["a"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_starts_the_count_again() {
        let silence = Silence::default();
        see(&silence, 1, &[("a", 0)]);
        tokio::time::advance(Duration::from_millis(600)).await;
        see(&silence, 2, &[("a", 1)]);
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(see(&silence, 2, &[("a", 1)]).is_empty());
        assert_eq!(
            silence.deadline(),
            Some(Instant::now() + Duration::from_millis(400))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_row_neither_resets_nor_evicts() {
        let silence = Silence::default();
        see(&silence, 5, &[("b", 3)]);
        tokio::time::advance(Duration::from_secs(2)).await;
        // An older copy, where "a" held: it must not reset "b"'s count.
        assert!(see(&silence, 4, &[("a", 7)]).is_empty());
        assert_eq!(see(&silence, 5, &[("b", 3)]), ["b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_gone_and_back_is_counted_afresh() {
        let silence = Silence::default();
        see(&silence, 1, &[("a", 0)]);
        tokio::time::advance(Duration::from_secs(2)).await;
        see(&silence, 2, &[]);
        assert_eq!(silence.deadline(), None);
        assert!(see(&silence, 3, &[("a", 0)]).is_empty());
    }
}
