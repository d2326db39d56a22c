//! How a waiter waits for the row to change: a store notification when the
//! backend offers one (`Capabilities::WATCH`), jittered polling otherwise.

use std::time::Duration;

use bakery_core::Watch;
use rand::Rng;
use tokio::time::Instant;

/// First poll delay; doubled up to the configured interval while nothing changes.
const FIRST_POLL: Duration = Duration::from_millis(1);

pub(crate) struct Wakeup {
    watch: Option<Watch>,
    poll_interval: Duration,
    /// Safety net while watching: notifications can be lost (a dropped
    /// feed, a notify that failed), so re-read at least this often.
    watch_fallback: Duration,
    next_poll: Duration,
}

impl Wakeup {
    pub(crate) fn new(watch: Option<Watch>, poll_interval: Duration, lease: Duration) -> Self {
        Wakeup {
            watch,
            poll_interval,
            watch_fallback: (lease / 4).max(poll_interval),
            next_poll: FIRST_POLL.min(poll_interval),
        }
    }

    /// The row changed: poll quickly again (the next hand-off may be near).
    pub(crate) fn progress(&mut self) {
        self.next_poll = FIRST_POLL.min(self.poll_interval);
    }

    /// Wait until a notification, the next poll, or `deadline` (the moment an
    /// observed holder's lease runs out), whichever comes first.
    pub(crate) async fn wait(&mut self, deadline: Option<Instant>) {
        let delay = match self.watch {
            Some(_) => self.watch_fallback,
            None => {
                let delay = jitter(self.next_poll);
                self.next_poll = (self.next_poll * 2).min(self.poll_interval);
                delay
            }
        };
        let mut wake_at = Instant::now() + delay;
        if let Some(deadline) = deadline {
            wake_at = wake_at.min(deadline);
        }
        match self.watch.as_mut() {
            Some(watch) => {
                tokio::select! {
                    alive = watch.changed() => {
                        if !alive {
                            tracing::debug!("lock: store notifications stopped; polling");
                            self.watch = None;
                        }
                    }
                    () = tokio::time::sleep_until(wake_at) => {}
                }
            }
            None => tokio::time::sleep_until(wake_at).await,
        }
    }
}

/// Uniform in [d/2, d]: waiters that started together spread out.
pub(crate) fn jitter(d: Duration) -> Duration {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(2);
    Duration::from_nanos(rand::rng().random_range(nanos / 2..=nanos))
}
