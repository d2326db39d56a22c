//! Heartbeats that start when they are due, not at the grant.
//!
//! A grant (of a lock, a semaphore permit or a read/write lock) first
//! renews its lease a third of a lease after it was written (or ends at its
//! hold limit), and most grants are released long before. A heartbeat task
//! spawned at every grant and stopped at its release cost two task
//! wake-ups and a timer per acquisition for nothing, a large share of an
//! uncontended acquire + release on a fast store. Instead, each handle
//! keeps one timer task ([`Beats`]), which starts a grant's heartbeat task
//! when the grant's first beat is due and the grant is still held
//! ([`Heartbeat`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the timer starts when it is due.
pub(crate) trait Due: Send + Sync {
    /// Its time came: start it (unless it ended meanwhile).
    fn start(self: Arc<Self>);
}

/// A scheduled start, for [`Beats::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ticket {
    at: Instant,
    id: u64,
}

/// One handle's pending heartbeat starts and the task that runs them.
pub(crate) struct Beats {
    schedule: Mutex<Schedule>,
    changed: Arc<Notify>,
    /// The usual delay of a start (the handle's lease/3): an idle timer
    /// waits this long before it stops ticking, so the next grants, due no
    /// earlier, do not have to wake it.
    period: Duration,
}

struct Schedule {
    due: BTreeMap<Ticket, Weak<dyn Due>>,
    next_id: u64,
    /// When the timer task wakes next (`None`: only when told).
    wakes_at: Option<Instant>,
    /// Something was scheduled since the timer's last wake-up.
    scheduled: bool,
    task: Option<JoinHandle<()>>,
}

impl Beats {
    /// A schedule whose starts are usually `period` after their grant.
    pub(crate) fn new(period: Duration) -> Arc<Beats> {
        Arc::new(Beats {
            schedule: Mutex::new(Schedule {
                due: BTreeMap::new(),
                next_id: 0,
                wakes_at: None,
                scheduled: false,
                task: None,
            }),
            changed: Arc::new(Notify::new()),
            period,
        })
    }

    fn schedule(&self) -> MutexGuard<'_, Schedule> {
        self.schedule
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Start `entry` at `at` (at once if `at` has passed). Needs a tokio
    /// runtime: the timer task runs on the caller's (and moves to the next
    /// caller's if that one was shut down).
    fn start_at(self: &Arc<Self>, entry: Weak<dyn Due>, at: Instant) -> Ticket {
        let mut schedule = self.schedule();
        let ticket = Ticket {
            at,
            id: schedule.next_id,
        };
        schedule.next_id += 1;
        schedule.due.insert(ticket, entry);
        schedule.scheduled = true;
        if schedule.task.as_ref().is_none_or(JoinHandle::is_finished) {
            schedule.wakes_at = Some(at);
            let task = tokio::spawn(timer(Arc::downgrade(self), self.changed.clone()));
            schedule.task = Some(task);
        } else if schedule.wakes_at.is_none_or(|wakes_at| at < wakes_at) {
            // Sooner than the timer would look: wake it (a permit is kept
            // if it is not waiting yet, so this is never lost).
            schedule.wakes_at = Some(at);
            self.changed.notify_one();
        }
        ticket
    }

    /// Forget a start that is no longer needed (the grant ended first).
    fn cancel(&self, ticket: Ticket) {
        self.schedule().due.remove(&ticket);
    }

    /// Take the entries due at `now`; and when to look next.
    fn take_due(&self, now: Instant) -> (Vec<Weak<dyn Due>>, Option<Instant>) {
        let mut schedule = self.schedule();
        let mut due = Vec::new();
        while let Some(entry) = schedule.due.first_entry() {
            if entry.key().at > now {
                break;
            }
            due.push(entry.remove());
        }
        let next = match schedule.due.keys().next() {
            Some(ticket) => Some(ticket.at),
            // Idle, but grants came since the last look: more will, due no
            // sooner than a period from now, so ticking once more is
            // cheaper than being woken by each. Idle for a whole period:
            // sleep until told.
            None if schedule.scheduled => Some(now + self.period),
            None => None,
        };
        schedule.scheduled = false;
        schedule.wakes_at = next;
        (due, next)
    }
}

impl Drop for Beats {
    fn drop(&mut self) {
        if let Some(task) = self.schedule().task.take() {
            task.abort();
        }
    }
}

/// Where one grant's heartbeat is: scheduled on its handle's [`Beats`],
/// running, or stopped by whoever gives the grant back.
pub(crate) struct Heartbeat {
    beats: Arc<Beats>,
    state: Mutex<State>,
}

enum State {
    /// Not started, and not scheduled yet (only while the grant is built:
    /// a start due at once may come before its ticket is stored).
    Waiting,
    /// To start when its first beat is due.
    Scheduled(Ticket),
    Running(JoinHandle<()>),
    Stopped,
}

impl Heartbeat {
    /// A heartbeat not scheduled yet, on `beats`.
    pub(crate) fn new(beats: Arc<Beats>) -> Heartbeat {
        Heartbeat {
            beats,
            state: Mutex::new(State::Waiting),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Have `grant` started at `at` ([`Due::start`] then calls
    /// [`Self::start`]). Called once, when the grant is built.
    pub(crate) fn schedule(&self, grant: Weak<dyn Due>, at: Instant) {
        let ticket = self.beats.start_at(grant, at);
        let mut state = self.state();
        if let State::Waiting = *state {
            *state = State::Scheduled(ticket);
        }
    }

    /// Start the heartbeat task now (`spawn` spawns it), unless it started
    /// or stopped already.
    pub(crate) fn start(&self, spawn: impl FnOnce() -> JoinHandle<()>) {
        let mut state = self.state();
        match *state {
            State::Waiting => {}
            State::Scheduled(ticket) => self.beats.cancel(ticket),
            State::Running(_) | State::Stopped => return,
        }
        *state = State::Running(spawn());
    }

    /// Stop for good (the grant is being given back). Returns the task if
    /// it had started, for the caller to abort (and to wait for, if no
    /// beat may be in flight after this).
    pub(crate) fn stop(&self) -> Option<JoinHandle<()>> {
        match std::mem::replace(&mut *self.state(), State::Stopped) {
            State::Scheduled(ticket) => {
                self.beats.cancel(ticket);
                None
            }
            State::Running(task) => Some(task),
            State::Waiting | State::Stopped => None,
        }
    }
}

/// The timer task: start what is due, sleep until the next, repeat until
/// the handle is gone.
async fn timer(beats: Weak<Beats>, changed: Arc<Notify>) {
    loop {
        let (due, next) = match beats.upgrade() {
            Some(beats) => beats.take_due(Instant::now()),
            None => return,
        };
        for entry in due {
            if let Some(entry) = entry.upgrade() {
                entry.start();
            }
        }
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = changed.notified() => {}
                }
            }
            None => changed.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// An entry that only counts its starts.
    struct Counted(AtomicUsize);

    impl Due for Counted {
        fn start(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Counted {
        fn starts(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A [`Counted`] entry of `beats`, to start at `at`; its ticket.
    fn counted(beats: &Arc<Beats>, at: Instant) -> (Arc<Counted>, Ticket) {
        let counted = Arc::new(Counted(AtomicUsize::new(0)));
        let weak: Weak<Counted> = Arc::downgrade(&counted);
        let ticket = beats.start_at(weak, at);
        (counted, ticket)
    }

    #[tokio::test(start_paused = true)]
    async fn starts_what_is_due_and_not_what_was_cancelled() {
        let beats = Beats::new(Duration::from_secs(10));
        let now = Instant::now();
        let (late, _) = counted(&beats, now + Duration::from_secs(10));
        let (cancelled, ticket) = counted(&beats, now + Duration::from_secs(1));
        // Sooner than the timer's next look: it must be woken for it.
        let (soon, _) = counted(&beats, now + Duration::from_millis(500));
        beats.cancel(ticket);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(soon.starts(), 1);
        assert_eq!(cancelled.starts(), 0);
        assert_eq!(late.starts(), 0, "not due yet");
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert_eq!(late.starts(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_timer_is_woken_by_the_next_start() {
        let beats = Beats::new(Duration::from_millis(10));
        let (first, _) = counted(&beats, Instant::now() + Duration::from_millis(10));
        // Long idle: the timer ticks once more, then sleeps until told.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(first.starts(), 1);
        let (second, _) = counted(&beats, Instant::now() + Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(second.starts(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_entry_is_skipped() {
        let beats = Beats::new(Duration::from_millis(10));
        let (gone, _) = counted(&beats, Instant::now() + Duration::from_millis(10));
        drop(gone);
        let (kept, _) = counted(&beats, Instant::now() + Duration::from_millis(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(kept.starts(), 1);
    }

    /// A grant whose heartbeat task only counts its starts.
    struct Grant {
        heartbeat: Heartbeat,
        started: AtomicUsize,
    }

    impl Due for Grant {
        fn start(self: Arc<Self>) {
            self.heartbeat.start(|| {
                self.started.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async {})
            });
        }
    }

    fn grant(beats: &Arc<Beats>, at: Instant) -> Arc<Grant> {
        let grant = Arc::new(Grant {
            heartbeat: Heartbeat::new(beats.clone()),
            started: AtomicUsize::new(0),
        });
        let weak: Weak<Grant> = Arc::downgrade(&grant);
        grant.heartbeat.schedule(weak, at);
        grant
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_starts_once_when_due_or_when_started_early() {
        let beats = Beats::new(Duration::from_secs(1));
        let due = grant(&beats, Instant::now() + Duration::from_secs(1));
        let early = grant(&beats, Instant::now() + Duration::from_secs(1));
        // Started before its time (an extended hold): not again when due.
        early.clone().start();
        assert_eq!(early.started.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(due.started.load(Ordering::SeqCst), 1);
        assert_eq!(early.started.load(Ordering::SeqCst), 1);
        due.clone().start();
        assert_eq!(due.started.load(Ordering::SeqCst), 1, "running already");
        assert!(due.heartbeat.stop().is_some(), "the running task");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_heartbeat_never_starts() {
        let beats = Beats::new(Duration::from_secs(1));
        let released = grant(&beats, Instant::now() + Duration::from_secs(1));
        assert!(released.heartbeat.stop().is_none(), "nothing ran yet");
        tokio::time::sleep(Duration::from_secs(2)).await;
        released.clone().start();
        assert_eq!(released.started.load(Ordering::SeqCst), 0);
    }
}
