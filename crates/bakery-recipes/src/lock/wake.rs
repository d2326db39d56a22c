//! How a waiter waits for the row to change: a store notification when the
//! backend offers one (`Capabilities::WATCH`), jittered polling otherwise.
//! A notification that carries the row the change left
//! ([`Change::Row`]) is used as it is: the waiter learns of its grant
//! without a read.

use std::time::Duration;

use bakery_core::{Change, Row, Version, Watch};
use rand::Rng;
use tokio::time::Instant;

/// First poll delay; doubled up to the configured interval while nothing changes.
const FIRST_POLL: Duration = Duration::from_millis(1);

pub(crate) struct Wakeup {
    watch: Option<Watch>,
    poll_interval: Duration,
    /// Longest delay between two reads: a waiter far back in the queue
    /// still checks the holder's lease a few times per lease, and a
    /// listener re-reads this often in case a notification was lost (a
    /// dropped feed, a notify that failed).
    slowest: Duration,
    next_poll: Duration,
    /// Smoothed latency of this waiter's reads: it never polls faster than
    /// the store answers, so a loaded store is not loaded further.
    read_latency: Duration,
    /// The watch has handed over rows: every waiter listens, whatever its
    /// place, since hearing of a change then costs no read.
    rows: bool,
}

impl Wakeup {
    pub(crate) fn new(watch: Option<Watch>, poll_interval: Duration, lease: Duration) -> Self {
        Wakeup {
            watch,
            poll_interval,
            slowest: (lease / 4).max(poll_interval),
            next_poll: FIRST_POLL.min(poll_interval),
            read_latency: Duration::ZERO,
            rows: false,
        }
    }

    /// One read took `latency`.
    pub(crate) fn observe_read(&mut self, latency: Duration) {
        // Exponentially weighted, 1/4 to the new sample.
        self.read_latency = (self.read_latency * 3 + latency) / 4;
    }

    /// The row changed: poll quickly again (the next hand-off may be near).
    pub(crate) fn progress(&mut self) {
        self.next_poll = FIRST_POLL.min(self.poll_interval);
    }

    /// Wait until a notification, the next poll, or `deadline` (the moment an
    /// observed holder's lease runs out), whichever comes first. Returns the
    /// row a notification handed over, if it did (else the caller reads).
    ///
    /// `position` is this waiter's place in the queue (0: next). Only the
    /// next holder needs to react fast, so the poll delay grows with the
    /// position, and only the first two waiters act on a plain "it
    /// changed" notification: a hand-off then costs O(log n) reads, not one
    /// per waiter. Notifications that carry the row wake every waiter:
    /// they cost no read.
    ///
    /// `last_request` is when this waiter last sent a request: it reads at
    /// least every `slowest` after it, even while notifications keep coming,
    /// because a grant's lease counts from the last request that did not
    /// show it (a waiter that only listened for longer than a lease would
    /// take the lock already expired).
    ///
    /// `seen` is the version of the row the caller has: a row handed over
    /// that is no newer is no news, and the wait goes on.
    pub(crate) async fn wait(
        &mut self,
        position: usize,
        deadline: Instant,
        last_request: Instant,
        seen: Option<Version>,
    ) -> Option<Row> {
        let backoff = self.next_poll;
        self.next_poll = (self.next_poll * 2).min(self.poll_interval);
        let behind = u32::try_from(position.saturating_add(1)).unwrap_or(u32::MAX);
        let base = backoff.max(self.read_latency);
        let poll = jitter(base.saturating_mul(behind)).min(self.slowest);
        let listen = position <= 1 || self.rows;
        let delay = match self.watch {
            Some(_) if listen => self.slowest,
            _ => poll,
        };
        let wake_at = (Instant::now() + delay)
            .min(last_request + self.slowest)
            .min(deadline);
        loop {
            let Some(watch) = self.watch.as_mut() else {
                tokio::time::sleep_until(wake_at).await;
                return None;
            };
            tokio::select! {
                change = watch.next_change() => match change {
                    Some(Change::Row(row)) => {
                        self.rows = true;
                        if seen < Some(row.version) {
                            return Some(row);
                        }
                    }
                    Some(Change::Read) if listen => return None,
                    // Far back: a plain wake-up is not worth a read; keep
                    // the poll's time.
                    Some(Change::Read) => {}
                    None => {
                        tracing::debug!("lock: store notifications stopped; polling");
                        self.watch = None;
                        return None;
                    }
                },
                () = tokio::time::sleep_until(wake_at) => return None,
            }
        }
    }
}

/// Uniform in [d/2, d]: waiters that started together spread out.
pub(crate) fn jitter(d: Duration) -> Duration {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(2);
    Duration::from_nanos(rand::rng().random_range(nanos / 2..=nanos))
}
