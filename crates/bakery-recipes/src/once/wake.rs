//! How a caller waits for a running key's row to change: a store
//! notification when the backend offers one (`Capabilities::WATCH`),
//! jittered polling otherwise. A notification that carries the row the
//! change left ([`Change::Row`]) is used as it is, saving the read.

use std::time::Duration;

use bakery_core::{Change, Row, Version, Watch};
use rand::Rng;
use tokio::time::Instant;

/// First poll delay; doubled up to the configured interval while nothing changes.
const FIRST_POLL: Duration = Duration::from_millis(1);

pub(crate) struct Wakeup {
    watch: Option<Watch>,
    poll_interval: Duration,
    /// Longest wait while listening: a notification may be lost (a dropped
    /// feed, a notify that failed), so a listener still reads this often.
    slowest: Duration,
    next_poll: Duration,
}

impl Wakeup {
    pub(crate) fn new(watch: Option<Watch>, poll_interval: Duration, lease: Duration) -> Self {
        Wakeup {
            watch,
            poll_interval,
            slowest: (lease / 4).max(poll_interval),
            next_poll: FIRST_POLL.min(poll_interval),
        }
    }

    /// Does this waiter listen for notifications (rather than poll)?
    pub(crate) fn listening(&self) -> bool {
        self.watch.is_some()
    }

    /// Wait until a notification, the next poll, or `deadline` (the moment
    /// the running worker's lease runs out), whichever comes first. Returns
    /// the row a notification handed over if it is newer than `seen` (the
    /// version the caller has); `None`: the caller reads.
    pub(crate) async fn wait(&mut self, deadline: Instant, seen: Option<Version>) -> Option<Row> {
        let delay = match self.watch {
            Some(_) => self.slowest,
            None => {
                let poll = jitter(self.next_poll);
                self.next_poll = (self.next_poll * 2).min(self.poll_interval);
                poll
            }
        };
        let wake_at = (Instant::now() + delay).min(deadline);
        loop {
            let Some(watch) = self.watch.as_mut() else {
                tokio::time::sleep_until(wake_at).await;
                return None;
            };
            tokio::select! {
                change = watch.next_change() => match change {
                    Some(Change::Row(row)) if seen < Some(row.version) => return Some(row),
                    // A stale row is no news: the wait goes on.
                    Some(Change::Row(_)) => {}
                    Some(Change::Read) => return None,
                    None => {
                        tracing::debug!("once: store notifications stopped; polling");
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
fn jitter(d: Duration) -> Duration {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(2);
    Duration::from_nanos(rand::rng().random_range(nanos / 2..=nanos))
}
