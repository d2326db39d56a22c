//! Leader election: candidates campaign in FIFO order, one leader at a time,
//! each term numbered by a fencing token, the leader's value readable (and
//! observable) by everyone.
//!
//! Built on the fair [`Lock`] named `election.NAME`: a
//! campaign is an acquire whose grant carries the candidate's value, the term
//! is the grant's fencing token, resigning is a release (handing leadership
//! to the next candidate in the same write), and a leader silent for a whole
//! lease is replaced the way a lock holder is evicted — no synchronized
//! clocks. So everything the lock guarantees holds per term; `bakery lock
//! show election.NAME` shows the queue of candidates.
//!
//! ```
//! use std::sync::Arc;
//! use bakery_core::MemoryStore;
//! use bakery_recipes::election::Election;
//!
//! # #[tokio::main]
//! # async fn main() -> bakery_core::Result<()> {
//! let store = Arc::new(MemoryStore::new());
//! let node = Election::builder(store.clone(), "scheduler")
//!     .value("10.0.0.7:8080")
//!     .build()?;
//! let leadership = node.campaign().await?; // waits its turn
//!
//! // Anyone can ask who leads, and since which term.
//! let observer = Election::builder(store, "scheduler").build()?;
//! let leader = observer.leader().await?.expect("elected");
//! assert_eq!(leader.value.as_deref(), Some("10.0.0.7:8080"));
//! assert_eq!(leader.term, leadership.term());
//!
//! leadership.resign().await?;
//! assert!(observer.leader().await?.is_none());
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Change, Key, Result, VersionedStore, Watch};
use serde::Serialize;

use crate::lock::{self, Lock, LockBuilder, LockGuard, LockState, LostReason};

/// Prefix of the lock an election runs on: election `db` is lock `election.db`.
pub const LOCK_PREFIX: &str = "election.";

/// Default longest time an observer goes without reading the leader, on
/// stores that do not notify every change.
pub const DEFAULT_OBSERVE_INTERVAL: Duration = Duration::from_secs(1);

/// Configures an [`Election`]; start with [`Election::builder`].
#[derive(Debug, Clone)]
pub struct ElectionBuilder {
    lock: LockBuilder,
    store: Arc<dyn VersionedStore>,
    name: String,
    observe_interval: Duration,
    notifications: bool,
}

impl ElectionBuilder {
    /// This candidate's value, published while it leads (e.g. its address);
    /// at most [`lock::MAX_DATA_LEN`] bytes.
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.lock = self.lock.data(value);
        self
    }

    /// How long leadership survives the leader's silence (default 10 s):
    /// the leader renews it every lease/3.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lock = self.lock.lease(lease);
        self
    }

    /// Give up a [`campaign`](Election::campaign) after this long with
    /// `ErrorKind::TimedOut`. Default: wait forever.
    pub fn campaign_timeout(mut self, timeout: Duration) -> Self {
        self.lock = self.lock.acquire_timeout(timeout);
        self
    }

    /// The owner shown with the leader (default `host:pid`).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.lock = self.lock.owner(owner);
        self
    }

    /// Longest time an [`observe`](Election::observe)r goes without reading
    /// the leader (default 1 s). Changes the store notifies are seen at once.
    pub fn observe_interval(mut self, interval: Duration) -> Self {
        self.observe_interval = interval;
        self
    }

    /// Use the store's notifications (default `true`), as the lock does.
    pub fn notifications(mut self, notifications: bool) -> Self {
        self.lock = self.lock.notifications(notifications);
        self.notifications = notifications;
        self
    }

    /// Check the settings and build. No store call is made.
    pub fn build(self) -> Result<Election> {
        if self.observe_interval.is_zero() {
            return Err(bakery_core::Error::invalid_input(
                "election",
                "observe interval must be > 0",
            ));
        }
        let lock = self.lock.build()?;
        let key = Key::with_prefix(lock::KEY_PREFIX, lock.name())?;
        Ok(Election {
            lock,
            store: self.store,
            name: self.name,
            key,
            observe_interval: self.observe_interval,
            notifications: self.notifications,
        })
    }
}

/// A leader election among the processes that build it with the same store
/// and name. Cheap to clone; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Election {
    lock: Lock,
    store: Arc<dyn VersionedStore>,
    name: String,
    key: Key,
    observe_interval: Duration,
    notifications: bool,
}

/// The leader of a term, as everyone can read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leader {
    /// The term: the fencing token of the leader's grant, larger for every
    /// new leader. Check it where the leader writes (see
    /// [`FencedValue`](crate::fence::FencedValue)).
    pub term: u64,
    /// The value the leader published, if any.
    pub value: Option<String>,
    /// The leader's owner (`host:pid` unless set).
    pub owner: String,
    /// The leader's campaign id (unique per campaign).
    pub id: String,
}

impl Leader {
    fn of(state: &LockState) -> Option<Leader> {
        state.holder.as_ref().map(|holder| Leader {
            term: state.token,
            value: holder.data.as_deref().map(str::to_owned),
            owner: holder.owner.to_string(),
            id: holder.id.to_string(),
        })
    }
}

impl Election {
    /// Start configuring the election `name` (the rules of lock names).
    pub fn builder(store: Arc<dyn VersionedStore>, name: &str) -> ElectionBuilder {
        let lock = Lock::builder(store.clone(), &format!("{LOCK_PREFIX}{name}"));
        ElectionBuilder {
            lock,
            store,
            name: name.to_owned(),
            observe_interval: DEFAULT_OBSERVE_INTERVAL,
            notifications: true,
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Wait until this candidate leads: candidates are served in the order
    /// they campaigned. Dropping the future withdraws the candidacy.
    pub async fn campaign(&self) -> Result<Leadership> {
        let guard = self.lock.acquire().await?;
        Ok(Leadership { guard })
    }

    /// Lead only if nobody leads and nobody else campaigns; `Ok(None)` at
    /// once otherwise.
    pub async fn try_campaign(&self) -> Result<Option<Leadership>> {
        Ok(self
            .lock
            .try_acquire()
            .await?
            .map(|guard| Leadership { guard }))
    }

    /// The current leader, read from the store (`None`: nobody leads).
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.state().await?.as_ref().and_then(Leader::of))
    }

    async fn state(&self) -> Result<Option<LockState>> {
        Lock::inspect(&*self.store, self.lock.name()).await
    }

    /// Follow the leadership: [`LeaderWatch::next`] returns the leader now,
    /// then every change of leader (or to no leader).
    pub fn observe(&self) -> LeaderWatch {
        LeaderWatch {
            election: self.clone(),
            watch: None,
            subscribed: false,
            last: None,
        }
    }
}

/// This process leads until it resigns or loses the lease. Dropping it
/// resigns (through the runtime when there is one).
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// The term of this leadership: larger than every earlier leader's.
    pub fn term(&self) -> u64 {
        self.guard.token()
    }

    /// True until it resigns or learns it lost the leadership.
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Completes when this process learns it no longer leads (its lease
    /// ran out and another candidate took over). Race it against the work
    /// done as leader.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// The lock grant underneath (its token is the term), e.g. to hold it
    /// with code written for [`LockGuard`].
    pub fn into_lock_guard(self) -> LockGuard {
        self.guard
    }

    /// Step down, handing leadership to the next candidate in one write.
    /// `ErrorKind::Lost` if it had already lost it.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }
}

/// Follows an election's leader; from [`Election::observe`].
#[derive(Debug)]
pub struct LeaderWatch {
    election: Election,
    watch: Option<Watch>,
    subscribed: bool,
    /// The (term, campaign id) last returned; `None` inside: no leader.
    last: Option<Option<(u64, String)>>,
}

impl LeaderWatch {
    /// The leader now on the first call; then wait for the next change of
    /// leader and return it (`None`: nobody leads). Changes between two
    /// calls may be seen as one.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        if !self.subscribed && self.election.notifications {
            // Before the read, so a change after it is heard.
            self.watch = self.election.store.watch(&self.election.key).await?;
            self.subscribed = true;
        }
        let mut first = self.last.is_none();
        loop {
            if !first {
                self.wait().await;
            }
            first = false;
            let leader = self.election.leader().await?;
            let seen = leader.as_ref().map(|l| (l.term, l.id.clone()));
            if self.last.as_ref() != Some(&seen) {
                self.last = Some(seen);
                return Ok(leader);
            }
        }
    }

    /// Until the store says the row changed, or the observe interval.
    async fn wait(&mut self) {
        let interval = self.election.observe_interval;
        match self.watch.as_mut() {
            Some(watch) => {
                match tokio::time::timeout(interval, watch.next_change()).await {
                    // The backend stopped notifying: poll from now on.
                    Ok(None) => self.watch = None,
                    Ok(Some(Change::Read | Change::Row(_))) | Err(_) => {}
                }
            }
            None => tokio::time::sleep(interval).await,
        }
    }
}
