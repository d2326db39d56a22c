//! The order in which one process's clients asked for a queue recipe (the
//! lock, the semaphore, the rwlock), kept until each has sent its first
//! request.
//!
//! Every acquisition takes a number when it is called ([`Arrivals::arrive`])
//! and sends its first request only after every earlier acquisition of the
//! process has sent its own ([`Arrival::earlier_gone`], then
//! [`Arrival::depart`] once the request is placed). The process's requests
//! are applied in the order they are placed, so the recipe's queue follows
//! the order of the calls: a client that releases and at once asks again
//! cannot overtake clients that asked before it but have not run since.
//! The runtime can leave those unpolled for milliseconds (a worker thread
//! the OS preempted, with tasks no other worker may take), long enough for
//! one client to re-take the lock hundreds of times in a row while the
//! others wait inside `acquire`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a first request waits for the earlier acquisitions of its
/// process to send theirs. One not polled for this long (a future kept but
/// no longer polled) loses its place rather than stall the process.
pub(crate) const ARRIVAL_PATIENCE: Duration = Duration::from_millis(100);

/// The acquisitions of one process and row that began and have not sent
/// their first request yet.
#[derive(Default)]
pub(crate) struct Arrivals {
    waiting: Mutex<Waiting>,
}

/// The numbers not yet departed, each with the signal that tells it it is
/// first. Only the new first is woken when the first departs: waking every
/// waiting acquisition on each departure would make the process's CPU per
/// grant grow with its number of clients.
#[derive(Default)]
struct Waiting {
    numbers: BTreeMap<u64, Arc<Notify>>,
    next: u64,
}

impl Waiting {
    /// Tell the first number, if any, that nobody is before it.
    fn wake_first(&self) {
        if let Some(first) = self.numbers.values().next() {
            // A stored permit if it is not waiting yet: never lost.
            first.notify_one();
        }
    }
}

/// An acquisition that has begun and not yet sent its first request; it
/// departs when dropped, if it has not before.
pub(crate) struct Arrival {
    arrivals: Arc<Arrivals>,
    number: u64,
    /// Signalled when this arrival may be first.
    first: Arc<Notify>,
    /// Departed: its first request was placed (or it lost its place).
    departed: bool,
}

impl Arrivals {
    fn waiting(&self) -> MutexGuard<'_, Waiting> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new acquisition of this process: its place in the process's order.
    pub(crate) fn arrive(self: &Arc<Self>) -> Arrival {
        let mut waiting = self.waiting();
        let number = waiting.next;
        waiting.next += 1;
        let first = Arc::new(Notify::new());
        waiting.numbers.insert(number, first.clone());
        Arrival {
            arrivals: self.clone(),
            number,
            first,
            departed: false,
        }
    }
}

impl Arrival {
    /// Return once every earlier acquisition of the process has departed
    /// (at once if this one has). The caller then places its first request
    /// and calls [`Self::depart`]: later acquisitions wait until then.
    pub(crate) async fn earlier_gone(&mut self) {
        if self.departed {
            return;
        }
        let arrivals = &*self.arrivals;
        let mut patience = None;
        loop {
            let turn = self.first.notified();
            tokio::pin!(turn);
            turn.as_mut().enable();
            let earlier = arrivals
                .waiting()
                .numbers
                .keys()
                .next()
                .is_some_and(|first| *first < self.number);
            if !earlier {
                return;
            }
            let until = *patience.get_or_insert_with(|| Instant::now() + ARRIVAL_PATIENCE);
            if tokio::time::timeout_at(until, turn).await.is_err() {
                let mine = self.number;
                arrivals
                    .waiting()
                    .numbers
                    .retain(|number, _| *number >= mine);
            }
        }
    }

    /// The first request is placed: later acquisitions may place theirs.
    pub(crate) fn depart(&mut self) {
        if !std::mem::replace(&mut self.departed, true) {
            let mut waiting = self.arrivals.waiting();
            let was_first = waiting.numbers.keys().next() == Some(&self.number);
            waiting.numbers.remove(&self.number);
            // Only the first's departure lets anyone go: the next one.
            if was_first {
                waiting.wake_first();
            }
        }
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        self.depart();
    }
}

/// The scenario every queue recipe must pass, for its unit tests.
#[cfg(test)]
pub(crate) mod order {
    pub(crate) use super::ARRIVAL_PATIENCE;
    use std::future::Future;
    use std::pin::{pin, Pin};
    use std::task::Poll;

    use bakery_core::Result;

    /// Poll `future` once, with this task's waker.
    pub(crate) async fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        let mut future = Some(future);
        std::future::poll_fn(|cx| match future.take() {
            Some(future) => Poll::Ready(future.poll(cx)),
            None => Poll::Pending,
        })
        .await
    }

    /// A client that asked first is served first, though its task did not
    /// run again before another client released and asked anew (a worker
    /// thread preempted by the OS leaves its tasks unpolled). `a` and `b`
    /// acquire the same exclusive grant for two clients of one process; B
    /// begins while A holds the grant (`b_begins_while_held`: B waits to
    /// listen for its grant), or after A held and released it (the recipe
    /// yields before it takes a free grant).
    /// `token` and `release` are the grant's own.
    pub(crate) async fn asked_first_is_served_first<H, FA, FB, FR>(
        a: impl Fn() -> FA,
        b: impl FnOnce() -> FB,
        token: impl Fn(&H) -> u64,
        release: impl Fn(H) -> FR,
        b_begins_while_held: bool,
    ) where
        FA: Future<Output = Result<H>>,
        FB: Future<Output = Result<H>>,
        FR: Future<Output = Result<()>>,
    {
        let mut held = Some(a().await.unwrap());
        if !b_begins_while_held {
            if let Some(held) = held.take() {
                release(held).await.unwrap();
            }
        }
        // B begins and is not run again.
        let mut b_acquire = pin!(b());
        assert!(poll_once(b_acquire.as_mut()).await.is_pending());
        if let Some(held) = held {
            release(held).await.unwrap();
        }
        let mut a_acquire = pin!(a());
        for _ in 0..10 {
            assert!(
                poll_once(a_acquire.as_mut()).await.is_pending(),
                "the client that asked second was served first"
            );
            tokio::task::yield_now().await;
        }
        let b_held = b_acquire.await.unwrap();
        assert!(poll_once(a_acquire.as_mut()).await.is_pending());
        let b_token = token(&b_held);
        release(b_held).await.unwrap();
        let a_held = a_acquire.await.unwrap();
        assert_eq!(token(&a_held), b_token + 1);
        release(a_held).await.unwrap();
    }

    /// Clients of one process in a closed loop (acquire, release, at once
    /// acquire again) take turns: once every client has been served, and
    /// until the first stops, nobody holds the grant more than twice in a
    /// row. Run it on a multi-thread runtime too: a lock whose release
    /// writes ahead of the enqueues already waiting in its process's writer
    /// passes on one thread and, on two, lets one client keep the lock
    /// hundreds of times in a row. `acquire(client)` acquires for a client (a
    /// clone of its handle); `release` gives the grant back.
    pub(crate) async fn clients_in_a_closed_loop_take_turns<C, H, FA, FR>(
        clients: Vec<C>,
        acquire: impl Fn(C) -> FA + Send + Sync + Clone + 'static,
        release: impl Fn(H) -> FR + Send + Sync + Clone + 'static,
    ) where
        C: Clone + Send + 'static,
        H: Send + 'static,
        FA: Future<Output = Result<H>> + Send + 'static,
        FR: Future<Output = Result<()>> + Send + 'static,
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};

        const GRANTS: usize = 10000;
        let count = clients.len();
        let grants = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(index, client)| {
                let (grants, stop) = (grants.clone(), stop.clone());
                let (acquire, release) = (acquire.clone(), release.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let held = acquire(client.clone()).await.unwrap();
                        {
                            let mut grants = grants.lock().unwrap();
                            grants.push(index);
                            if grants.len() >= GRANTS {
                                stop.store(true, Ordering::SeqCst);
                            }
                        }
                        release(held).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let grants = grants.lock().unwrap();
        // From the grant that completes the first round of all clients
        // (the tasks start one after another).
        let mut seen = vec![false; count];
        let started = grants
            .iter()
            .position(|&client| {
                seen[client] = true;
                seen.iter().all(|&s| s)
            })
            .expect("every client was served");
        // The longest run of one client, and where it begins.
        let (mut longest, mut at, mut begins) = (0, started, started);
        for run in grants[started..].chunk_by(|a, b| a == b) {
            if run.len() > longest {
                (longest, at) = (run.len(), begins);
            }
            begins += run.len();
        }
        assert!(
            longest <= 2,
            "one client held the grant {longest} times in a row: {:?}",
            &grants[at.saturating_sub(8)..(at + longest + 8).min(grants.len())]
        );
    }
}
