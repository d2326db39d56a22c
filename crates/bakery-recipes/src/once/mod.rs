//! Idempotent execution: run an operation at most once per key, across every
//! process that shares the store, and hand its stored result to everyone
//! who asks again.
//!
//! # How it works
//! One row per key (`once/SCOPE/KEY`) holds an [`OnceRecord`]:
//! - **Claim.** The first caller writes an `in_progress` record naming
//!   itself, conditioned on the row being absent (or expired): one write,
//!   and only one caller can win it. Others see the record and wait for it
//!   ([`OnBusy::Wait`], the default) or get [`RunError::InProgress`].
//! - **Complete.** The winner runs the operation and writes `completed`
//!   with the result, conditioned on its own claim still being there. A new
//!   key therefore costs two store round trips.
//! - **Waiting.** A waiter that listens for store notifications first marks
//!   the claim ([`OnceRecord::awaited`], a write conditioned on the claim),
//!   and the worker notifies at its end only if the claim it finishes is
//!   marked: a key nobody waits for costs no notify call. A mark made
//!   after the worker's last write makes that write conflict, so the worker
//!   learns of it before it finishes; its heartbeat carries the mark on.
//! - **Replay.** A completed key returns the stored result without running
//!   the operation again; a key reused with a different payload is refused
//!   ([`RunError::PayloadMismatch`]): the payload's SHA-256 is kept.
//! - **A dead worker.** While it runs, the worker advances a heartbeat in
//!   the record every lease/3. A waiter that sees the same (worker,
//!   heartbeat) for a whole lease *on its own monotonic clock* takes the key
//!   over with a write conditioned on exactly that record — the lock's
//!   clock-free lease rule. Every claim increments [`Attempt::token`], a
//!   fencing token for what the operation writes: a worker that was only
//!   paused finds its completion refused ([`RunError::Lost`]).
//! - **Failure.** An operation that returns `Err` releases the key for a
//!   retry ([`OnFailure::Release`], the default), or records the failure so
//!   later callers get it without running ([`OnFailure::Record`]).
//! - **Expiry.** A finished record is ignored after
//!   [`IdempotencyBuilder::expire_after`] (by the reading process's wall
//!   clock: expiry decides when a key may run *again*, never whether two
//!   runs overlap), and the key runs anew.
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use bakery_core::MemoryStore;
//! use bakery_recipes::once::{Execution, Idempotency};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(MemoryStore::new());
//! let payments = Idempotency::builder(store, "payments").build()?;
//!
//! let charge = |_| async { Ok::<_, std::io::Error>(42u64) };
//! let first = payments.run("order-7", b"EUR 10", charge).await?;
//! assert_eq!(first, Execution::Executed(42));
//! // A retry of the same request: not run again, the stored result comes back.
//! let again = payments
//!     .run("order-7", b"EUR 10", |_| async { Ok::<_, std::io::Error>(0u64) })
//!     .await?;
//! assert_eq!(again, Execution::Replayed(42));
//! // The same key with another payload is a client bug, and refused.
//! assert!(payments.run("order-7", b"EUR 99", charge).await.is_err());
//! # Ok(()) }
//! ```

mod record;
mod wake;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bakery_core::{
    Bytes, DeleteOutcome, Error, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

pub use record::{OnceRecord, Status, Worker};

use crate::beats::{self, Beats, Due};
use wake::Wakeup;

/// Key prefix of idempotency rows: key `k` of scope `payments` is stored
/// under `once/payments/k`.
pub const KEY_PREFIX: &str = "once";

/// Default lease of a running worker: a silent worker is replaced after this.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Shortest lease accepted: the heartbeat runs every lease/3.
pub const MIN_LEASE: Duration = Duration::from_millis(30);

/// Default longest delay between two reads of a waiter.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// What a caller does when another worker is running the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnBusy {
    /// Wait for its result (or take over when its lease runs out).
    #[default]
    Wait,
    /// Return [`RunError::InProgress`] at once.
    Fail,
}

/// What happens to a key whose operation returned `Err`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// Delete the record: the next caller runs the operation again.
    #[default]
    Release,
    /// Keep the failure: later callers get [`RunError::FailedBefore`] with
    /// its message until the record expires.
    Record,
}

/// How a [`Idempotency::run`] call was served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Execution<T> {
    /// This call ran the operation and stored its result.
    Executed(T),
    /// An earlier call ran it; this is its stored result.
    Replayed(T),
}

impl<T> Execution<T> {
    /// The result, however it was obtained.
    pub fn into_inner(self) -> T {
        match self {
            Execution::Executed(t) | Execution::Replayed(t) => t,
        }
    }

    /// True if this call ran the operation.
    pub fn executed(&self) -> bool {
        matches!(self, Execution::Executed(_))
    }
}

/// Passed to the operation: which claim of the key this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    key: String,
    token: u64,
}

impl Attempt {
    /// The key being run.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Fencing token: 1 for the first claim of the key, larger for every
    /// takeover. Check it where the operation writes (see
    /// [`FencedValue`](crate::fence::FencedValue)) so that a worker paused
    /// past its lease cannot overwrite its successor's work.
    pub fn token(&self) -> u64 {
        self.token
    }
}

/// Why [`Idempotency::run`] did not return a result.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E> {
    /// The store failed; see [`Error::kind`] (an `Unknown` claim or
    /// completion is resolved by reading back before this is returned).
    #[error(transparent)]
    Store(#[from] Error),
    /// Another worker is running the key and the caller chose
    /// [`OnBusy::Fail`].
    #[error("key {key:?} is being run by {owner} (attempt {attempt})")]
    InProgress {
        /// The key.
        key: String,
        /// The running worker's owner string.
        owner: String,
        /// Its attempt number.
        attempt: u64,
    },
    /// The key was first used with a different payload.
    #[error("key {key:?} was first used with a different payload (sha256 {stored}); a key must name one request")]
    PayloadMismatch {
        /// The key.
        key: String,
        /// The stored payload hash.
        stored: String,
    },
    /// The operation ran in this call and returned this error. Under
    /// [`OnFailure::Release`] the key is free again; under
    /// [`OnFailure::Record`] the failure is stored.
    #[error("the operation failed: {0}")]
    Failed(E),
    /// An earlier run failed and recorded its failure ([`OnFailure::Record`]).
    #[error("key {key:?} failed before (attempt {attempt}): {message}")]
    FailedBefore {
        /// The key.
        key: String,
        /// The attempt that failed.
        attempt: u64,
        /// Its error message.
        message: String,
    },
    /// The operation ran, but this worker's lease had run out and another
    /// worker took the key over (attempt `by`): this run's result was not
    /// stored. Its writes fenced with [`Attempt::token`] are refused.
    #[error(
        "key {key:?}: attempt {attempt} lost the key to attempt {by}; its result was not stored"
    )]
    Lost {
        /// The key.
        key: String,
        /// This run's attempt.
        attempt: u64,
        /// The attempt that took over.
        by: u64,
    },
}

/// Configures an [`Idempotency`]; start with [`Idempotency::builder`].
#[derive(Debug, Clone)]
pub struct IdempotencyBuilder {
    store: Arc<dyn VersionedStore>,
    scope: String,
    lease: Duration,
    expire_after: Option<Duration>,
    on_busy: OnBusy,
    on_failure: OnFailure,
    poll_interval: Duration,
    owner: Option<String>,
}

bakery_core::setters! { IdempotencyBuilder {
    /// How long a running worker may stay silent before a waiter takes the
    /// key over (default 30 s; at least 30 ms). It heartbeats every lease/3.
    lease(lease: Duration);
    /// Forget finished records this long after they finished (default:
    /// never): the key may then run again.
    expire_after(expire_after: Duration) Some;
    /// Wait for a running worker (default) or fail at once.
    on_busy(on_busy: OnBusy);
    /// Release the key after a failed operation (default) or record it.
    on_failure(on_failure: OnFailure);
    /// Longest delay between two reads while waiting (default 50 ms).
    /// With store notifications this is only the fallback.
    poll_interval(poll_interval: Duration);
    /// The owner shown to other callers (default `host:pid`).
    owner(owner: impl Into<String>) Some;
}}

impl IdempotencyBuilder {
    /// Check the settings and build. No store call is made.
    pub fn build(self) -> Result<Idempotency> {
        Key::with_prefix(KEY_PREFIX, &self.scope)?;
        if self.lease < MIN_LEASE {
            return Err(Error::invalid_input(
                "once",
                format!("lease must be at least {MIN_LEASE:?}, got {:?}", self.lease),
            ));
        }
        let lease_ms = u64::try_from(self.lease.as_millis())
            .map_err(|_| Error::invalid_input("once", "lease too long"))?;
        let expire_ms = match self.expire_after {
            Some(d) if d.is_zero() => {
                return Err(Error::invalid_input("once", "expiry window must be > 0"))
            }
            Some(d) => Some(
                u64::try_from(d.as_millis())
                    .map_err(|_| Error::invalid_input("once", "expiry window too long"))?,
            ),
            None => None,
        };
        if self.poll_interval.is_zero() {
            return Err(Error::invalid_input("once", "poll interval must be > 0"));
        }
        let beat_period = Duration::from_millis(lease_ms / 3).max(Duration::from_millis(1));
        Ok(Idempotency {
            inner: Arc::new(Inner {
                store: self.store,
                scope: self.scope,
                lease_ms,
                expire_ms,
                on_busy: self.on_busy,
                on_failure: self.on_failure,
                poll_interval: self.poll_interval,
                owner: self.owner.unwrap_or_else(crate::grant::default_owner),
                beat_period,
                beats: Beats::new(beat_period),
            }),
        })
    }
}

/// Runs operations at most once per key. Cheap to clone. See the
/// [module docs](self).
#[derive(Clone)]
pub struct Idempotency {
    inner: Arc<Inner>,
}

impl fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("scope", &self.inner.scope)
            .field("lease_ms", &self.inner.lease_ms)
            .field("backend", &self.inner.store.backend())
            .finish()
    }
}

struct Inner {
    store: Arc<dyn VersionedStore>,
    scope: String,
    lease_ms: u64,
    expire_ms: Option<u64>,
    on_busy: OnBusy,
    on_failure: OnFailure,
    poll_interval: Duration,
    owner: String,
    /// How often a claim's heartbeat advances (lease/3).
    beat_period: Duration,
    /// Starts the claims' heartbeats when due.
    beats: Arc<Beats>,
}

/// The claim this call holds: the row as last written by it.
struct Claim {
    row: Row,
    record: OnceRecord,
}

impl Idempotency {
    /// Start configuring the keys of `scope` (a name: letters, digits and
    /// `_ - . : @ + =`).
    pub fn builder(store: Arc<dyn VersionedStore>, scope: &str) -> IdempotencyBuilder {
        IdempotencyBuilder {
            store,
            scope: scope.to_owned(),
            lease: DEFAULT_LEASE,
            expire_after: None,
            on_busy: OnBusy::default(),
            on_failure: OnFailure::default(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            owner: None,
        }
    }

    /// The row key of `key` (validated like a name).
    pub fn row_key(&self, key: &str) -> Result<Key> {
        bakery_core::validate_name(key)?;
        Key::new(format!("{KEY_PREFIX}/{}/{key}", self.inner.scope))
    }

    /// Run `op` at most once for `key`, with a serde result. See
    /// [`run_bytes`](Self::run_bytes) for the rules.
    pub async fn run<T, E, F, Fut>(
        &self,
        key: &str,
        payload: &[u8],
        op: F,
    ) -> std::result::Result<Execution<T>, RunError<E>>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let encode = |t: &T| -> std::result::Result<Bytes, RunError<E>> {
            serde_json::to_vec(t).map(Bytes::from).map_err(|e| {
                RunError::Store(Error::invalid_input(
                    "once",
                    format!("encode the result: {e}"),
                ))
            })
        };
        match self.run_inner(key, payload, op, encode).await? {
            (Execution::Executed(_), Some(t)) => Ok(Execution::Executed(t)),
            (execution, _) => {
                let executed = execution.executed();
                let t = serde_json::from_slice(&execution.into_inner()).map_err(|e| {
                    RunError::Store(Error::corrupt(
                        "once",
                        format!("the stored result of {key:?} is not of the expected type: {e}"),
                    ))
                })?;
                Ok(if executed {
                    Execution::Executed(t)
                } else {
                    Execution::Replayed(t)
                })
            }
        }
    }

    /// Run `op` at most once for `key` across every process on the store,
    /// with a result stored as bytes.
    ///
    /// - a new (or expired) key: `op` runs, its `Ok` is stored and returned
    ///   as [`Execution::Executed`];
    /// - a completed key with the same `payload`: the stored result, as
    ///   [`Execution::Replayed`], without running `op`;
    /// - a different `payload`: [`RunError::PayloadMismatch`];
    /// - running elsewhere: wait for it, or [`RunError::InProgress`]
    ///   ([`OnBusy`]); a worker silent for a lease is taken over.
    pub async fn run_bytes<E, F, Fut>(
        &self,
        key: &str,
        payload: &[u8],
        op: F,
    ) -> std::result::Result<Execution<Bytes>, RunError<E>>
    where
        E: fmt::Display,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = std::result::Result<Bytes, E>>,
    {
        let (execution, _) = self
            .run_inner(key, payload, op, |b: &Bytes| Ok(b.clone()))
            .await?;
        Ok(execution)
    }

    /// The stored record of `key`, if any (expired ones included).
    pub async fn inspect(&self, key: &str) -> Result<Option<OnceRecord>> {
        let row_key = self.row_key(key)?;
        match self.inner.store.get(&row_key).await? {
            Some(row) => OnceRecord::decode(&row).map(Some),
            None => Ok(None),
        }
    }

    /// Delete the record of `key` whatever its state, so that it runs again
    /// (an operator's tool). Returns whether there was one.
    pub async fn forget(&self, key: &str) -> Result<bool> {
        let row_key = self.row_key(key)?;
        loop {
            let Some(row) = self.inner.store.get(&row_key).await? else {
                return Ok(false);
            };
            OnceRecord::decode(&row)?;
            match self
                .inner
                .store
                .delete_if_version(&row_key, row.version)
                .await?
            {
                DeleteOutcome::Deleted => {
                    self.notify(&row_key).await;
                    return Ok(true);
                }
                DeleteOutcome::Conflict(_) => continue,
            }
        }
    }

    async fn run_inner<T, E, F, Fut, Enc>(
        &self,
        key: &str,
        payload: &[u8],
        op: F,
        encode: Enc,
    ) -> std::result::Result<(Execution<Bytes>, Option<T>), RunError<E>>
    where
        E: fmt::Display,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        Enc: FnOnce(&T) -> std::result::Result<Bytes, RunError<E>>,
    {
        let row_key = self.row_key(key)?;
        let hash = record::payload_hash(payload);
        let claim = match self.claim(key, &row_key, &hash).await? {
            Ok(claim) => claim,
            Err(replayed) => return Ok((Execution::Replayed(replayed), None)),
        };
        let attempt = Attempt {
            key: key.to_owned(),
            token: claim.record.attempt,
        };
        let heartbeat = Heartbeat::start(self.inner.clone(), row_key.clone(), claim);
        let outcome = op(attempt).await;
        let claim = heartbeat.stop().await;
        drop(heartbeat);
        match outcome {
            Ok(t) => {
                let bytes = encode(&t)?;
                let finished = claim.record.completed(&bytes, self.expires_at());
                self.finish(key, &row_key, claim, Some(finished)).await?;
                Ok((Execution::Executed(bytes), Some(t)))
            }
            Err(e) => {
                let finished = match self.inner.on_failure {
                    OnFailure::Release => None,
                    OnFailure::Record => {
                        Some(claim.record.failed(&e.to_string(), self.expires_at()))
                    }
                };
                self.finish(key, &row_key, claim, finished).await?;
                Err(RunError::Failed(e))
            }
        }
    }

    fn expires_at(&self) -> Option<u64> {
        self.inner
            .expire_ms
            .map(|ms| record::now_ms().saturating_add(ms))
    }

    /// Claim the key: `Ok(claim)` to run, `Err(result)` to replay.
    async fn claim<E>(
        &self,
        key: &str,
        row_key: &Key,
        hash: &str,
    ) -> std::result::Result<std::result::Result<Claim, Bytes>, RunError<E>> {
        let store = &self.inner.store;
        let me = Worker {
            id: uuid::Uuid::new_v4().simple().to_string().into(),
            owner: self.inner.owner.as_str().into(),
            beat: 1,
            lease_ms: self.inner.lease_ms,
            data: None,
        };
        // Assume the key is new: the claim is then one write, and a
        // conflict hands back the current row anyway.
        let mut current: Option<Row> = None;
        // The running worker as first seen: (id, beat, when).
        let mut observed: Option<(Arc<str>, u64, Instant)> = None;
        let mut wakeup: Option<Wakeup> = None;
        loop {
            let record = current.as_ref().map(OnceRecord::decode).transpose()?;
            // The next claim continues the attempts of any record, expired or not.
            let previous = record.as_ref().map_or(0, |r| r.attempt);
            let live = record.filter(|r| !r.expired(record::now_ms()));
            let mut take_over = false;
            if let Some(rec) = &live {
                if rec.payload_sha256 != hash {
                    return Err(RunError::PayloadMismatch {
                        key: key.to_owned(),
                        stored: rec.payload_sha256.clone(),
                    });
                }
                match rec.status {
                    Status::Completed => return Ok(Err(rec.result_bytes()?)),
                    Status::Failed => {
                        return Err(RunError::FailedBefore {
                            key: key.to_owned(),
                            attempt: rec.attempt,
                            message: rec.error.clone().unwrap_or_default(),
                        })
                    }
                    Status::InProgress => {
                        let worker = rec.worker_or_corrupt(row_key)?;
                        if self.inner.on_busy == OnBusy::Fail {
                            return Err(RunError::InProgress {
                                key: key.to_owned(),
                                owner: worker.owner.to_string(),
                                attempt: rec.attempt,
                            });
                        }
                        let now = Instant::now();
                        let lease = Duration::from_millis(worker.lease_ms);
                        let since = match &observed {
                            Some((id, beat, at)) if *id == worker.id && *beat == worker.beat => *at,
                            _ => {
                                observed = Some((worker.id.clone(), worker.beat, now));
                                now
                            }
                        };
                        if now.duration_since(since) < lease {
                            if wakeup.is_none() {
                                let watch = store.watch(row_key).await?;
                                wakeup = Some(Wakeup::new(
                                    watch,
                                    self.inner.poll_interval,
                                    Duration::from_millis(self.inner.lease_ms),
                                ));
                            }
                            let listening = wakeup.as_ref().is_some_and(Wakeup::listening);
                            if listening && !rec.awaited {
                                // Tell the worker someone listens (it
                                // notifies only then), before waiting.
                                let marked = rec.marked_awaited().encode()?;
                                let expected = current.as_ref().map(|r| r.version);
                                current =
                                    match store.put_if_version(row_key, expected, marked).await {
                                        Ok(PutOutcome::Applied(row)) => Some(row),
                                        Ok(PutOutcome::Conflict(now)) => now,
                                        Err(e) if e.outcome_unknown() => store.get(row_key).await?,
                                        Err(e) => return Err(e.into()),
                                    };
                                // Decide again on the row as it is now: it
                                // may be ours (marked), finished or taken.
                                continue;
                            }
                            let seen = current.as_ref().map(|r| r.version);
                            let pushed = match wakeup.as_mut() {
                                Some(w) => w.wait(since + lease, seen).await,
                                None => None,
                            };
                            // A row the notification handed over saves the read.
                            current = match pushed {
                                Some(row) => Some(row),
                                None => store.get(row_key).await?,
                            };
                            continue;
                        }
                        tracing::info!(key, worker = %worker.owner, attempt = rec.attempt, "once: taking over from a silent worker");
                        take_over = true;
                    }
                }
            }
            let claim = OnceRecord::in_progress(hash, previous + 1, me.clone());
            let expected = current.as_ref().map(|r| r.version);
            match store
                .put_if_version(row_key, expected, claim.encode()?)
                .await
            {
                Ok(PutOutcome::Applied(row)) => {
                    if take_over {
                        self.notify(row_key).await;
                    }
                    return Ok(Ok(Claim { row, record: claim }));
                }
                Ok(PutOutcome::Conflict(now)) => current = now,
                Err(e) if e.outcome_unknown() => {
                    // Read back: the claim is ours only if the row names us.
                    current = store.get(row_key).await?;
                    if let Some(row) = &current {
                        let rec = OnceRecord::decode(row)?;
                        if rec.worker.as_ref().is_some_and(|w| w.id == me.id) {
                            return Ok(Ok(Claim {
                                row: row.clone(),
                                record: rec,
                            }));
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Write the final record (or delete the claim) conditioned on the claim
    /// still being ours.
    async fn finish<E>(
        &self,
        key: &str,
        row_key: &Key,
        mut claim: Claim,
        finished: Option<OnceRecord>,
    ) -> std::result::Result<(), RunError<E>> {
        let store = &self.inner.store;
        let attempt = claim.record.attempt;
        let lost = |by: u64| RunError::Lost {
            key: key.to_owned(),
            attempt,
            by,
        };
        let value = finished.as_ref().map(OnceRecord::encode).transpose()?;
        loop {
            let result = match &value {
                Some(v) => store
                    .put_if_version(row_key, Some(claim.row.version), v.clone())
                    .await
                    .map(|o| match o {
                        PutOutcome::Applied(_) => None,
                        PutOutcome::Conflict(now) => Some(now),
                    }),
                None => store
                    .delete_if_version(row_key, claim.row.version)
                    .await
                    .map(|o| match o {
                        DeleteOutcome::Deleted => None,
                        DeleteOutcome::Conflict(now) => Some(now),
                    }),
            };
            let now = match result {
                Ok(None) => {
                    self.notify_waiters(&claim, row_key).await;
                    return Ok(());
                }
                Ok(Some(now)) => now,
                Err(e) if e.outcome_unknown() => store.get(row_key).await?,
                Err(e) => return Err(e.into()),
            };
            // Someone else's row, our heartbeat's last write, or our own
            // final write whose reply was lost.
            let Some(row) = now else {
                return if value.is_none() {
                    Ok(()) // released (by this call's lost reply or an operator)
                } else {
                    Err(lost(0))
                };
            };
            let rec = OnceRecord::decode(&row)?;
            if rec.attempt != claim.record.attempt {
                return Err(lost(rec.attempt));
            }
            match (&rec.status, &finished) {
                (Status::InProgress, _) => {
                    claim.row = row;
                    claim.record = rec;
                }
                (_, Some(f)) if rec.status == f.status => {
                    self.notify_waiters(&claim, row_key).await;
                    return Ok(());
                }
                _ => {
                    return Err(RunError::Store(Error::new(
                        ErrorKind::Internal,
                        "once",
                        format!("key {key:?}: attempt {} finished twice", rec.attempt),
                    )))
                }
            }
        }
    }

    /// Wake the waiters of `claim` after its completion or release, if any
    /// marked it: nobody else listens for its end.
    async fn notify_waiters(&self, claim: &Claim, row_key: &Key) {
        if claim.record.awaited {
            self.notify(row_key).await;
        }
    }

    /// Wake waiters after a completion or release. Only stores with
    /// `WATCH` have waiters that listen; elsewhere they poll, so no call.
    async fn notify(&self, row_key: &Key) {
        if !self
            .inner
            .store
            .capabilities()
            .contains(bakery_core::Capabilities::WATCH)
        {
            return;
        }
        if let Err(e) = self.inner.store.notify(row_key).await {
            tracing::debug!(key = %row_key, error = %e, "once: notify failed; waiters poll");
        }
    }
}

/// Keeps a claim alive while the operation runs: advances the heartbeat
/// every lease/3 with a write conditioned on the claim's last row. The
/// beating task starts only when the first beat is due (the handle's one
/// timer, [`Beats`]): most operations end before it, and a task spawned
/// and aborted per run cost more than a write on a fast store.
struct Heartbeat {
    beat: Arc<Beat>,
}

/// What the beating task needs, shared with the timer that starts it.
struct Beat {
    inner: Arc<Inner>,
    row_key: Key,
    /// The claim as last written (by the run's claim, then by each beat).
    claim: Mutex<Claim>,
    heartbeat: beats::Heartbeat,
}

impl Heartbeat {
    fn start(inner: Arc<Inner>, row_key: Key, claim: Claim) -> Heartbeat {
        let first = Instant::now() + inner.beat_period;
        let beat = Arc::new(Beat {
            heartbeat: beats::Heartbeat::new(inner.beats.clone()),
            inner,
            row_key,
            claim: Mutex::new(claim),
        });
        let due: Arc<dyn Due> = beat.clone();
        beat.heartbeat.schedule(Arc::downgrade(&due), first);
        Heartbeat { beat }
    }

    /// Stop beating; the claim as last written.
    async fn stop(&self) -> Claim {
        if let Some(task) = self.beat.heartbeat.stop() {
            task.abort();
            let _ = task.await;
        }
        let c = self.beat.claim.lock().unwrap_or_else(|p| p.into_inner());
        Claim {
            row: c.row.clone(),
            record: c.record.clone(),
        }
    }
}

impl Drop for Heartbeat {
    /// A cancelled `run` (its future dropped) stops beating, so the key is
    /// taken over after one lease like a crashed worker's.
    fn drop(&mut self) {
        if let Some(task) = self.beat.heartbeat.stop() {
            task.abort();
        }
    }
}

impl Due for Beat {
    fn start(self: Arc<Self>) {
        let beat = self.clone();
        self.heartbeat.start(|| tokio::spawn(beat.beat_on()));
    }
}

impl Beat {
    /// Beat now (the first beat is due), then every period, until stopped.
    async fn beat_on(self: Arc<Self>) {
        let period = self.inner.beat_period;
        loop {
            let Some((version, next)) = self
                .claim
                .lock()
                .ok()
                .map(|c| (c.row.version, c.record.beaten()))
            else {
                return;
            };
            let Ok(value) = next.encode() else { return };
            match self
                .inner
                .store
                .put_if_version(&self.row_key, Some(version), value)
                .await
            {
                Ok(PutOutcome::Applied(row)) => {
                    if let Ok(mut c) = self.claim.lock() {
                        *c = Claim { row, record: next };
                    }
                }
                Ok(PutOutcome::Conflict(Some(row))) => {
                    // Still our claim, marked by a waiter: beat on from that
                    // row (at once: this beat is due).
                    let ours = OnceRecord::decode(&row)
                        .ok()
                        .filter(|record| record.same_claim(&next));
                    let Some(record) = ours else { return };
                    if let Ok(mut c) = self.claim.lock() {
                        *c = Claim { row, record };
                    }
                    continue;
                }
                // Taken over (or finished by an operator): stop; the
                // completion write finds out and reports it.
                Ok(PutOutcome::Conflict(None)) => return,
                Err(e) => {
                    tracing::debug!(key = %self.row_key, error = %e, "once: heartbeat failed; retrying")
                }
            }
            tokio::time::sleep(period).await;
        }
    }
}
