//! [`RetryStore`]: retries the store calls that failed before they could
//! take effect ([`ErrorKind::Unavailable`]), with bounded, jittered
//! exponential backoff; [`RetryPolicy`] says how.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use backon::{BackoffBuilder, ExponentialBuilder};
use bytes::Bytes;
use tokio::time::Instant;

use crate::{
    DeleteOutcome, Error, ErrorKind, Key, Operation, PutOutcome, Result, Row, StoreLayer, Version,
    VersionedStore, Watch,
};

/// How a [`RetryStore`] (or [`RetryPolicy::retry`]) retries: at most
/// [`max_attempts`](Self::max_attempts) calls in all, no retry that would
/// start after [`max_elapsed`](Self::max_elapsed), and between two calls a
/// delay that starts at [`min_delay`](Self::min_delay), grows by
/// [`factor`](Self::factor) up to [`max_delay`](Self::max_delay), and, with
/// [`jitter`](Self::jitter), is stretched by a random share of itself (a
/// delay `d` becomes one in `d..2d`), so clients that failed together do
/// not retry together. The schedule is `backon`'s exponential backoff.
///
/// Only [`ErrorKind::Unavailable`] is retried: the request did not take
/// effect, so sending it again cannot apply it twice. Every other kind is
/// returned at once — above all [`ErrorKind::Unknown`] (sent, no reply: it
/// may have applied, and a blind retry of a compare-and-set could apply a
/// second time, or report a conflict with the caller's own write), but also
/// a conflict, which is an `Ok` outcome and never an error.
///
/// The defaults: 5 attempts, 50 ms doubling to at most 2 s, jitter on, and
/// no retry that would start after 10 s; with jitter the four retries wait
/// 0.75 s to 1.5 s in all.
///
/// ```
/// use std::time::Duration;
/// use bakery_core::RetryPolicy;
///
/// let policy = RetryPolicy::default()
///     .max_attempts(4)
///     .min_delay(Duration::from_millis(20))
///     .max_delay(Duration::from_secs(1))
///     .max_elapsed(Some(Duration::from_secs(5)))
///     .jitter(true);
/// assert_eq!(policy.get_max_attempts(), 4);
/// assert_eq!(RetryPolicy::none().get_max_attempts(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    max_attempts: u32,
    max_elapsed: Option<Duration>,
    min_delay: Duration,
    max_delay: Duration,
    factor: f32,
    jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            max_elapsed: Some(Duration::from_secs(10)),
            min_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(2),
            factor: 2.0,
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// No retry: one attempt, every error returned as it came.
    ///
    /// ```
    /// assert_eq!(bakery_core::RetryPolicy::none().get_max_attempts(), 1);
    /// ```
    pub fn none() -> Self {
        RetryPolicy::default().max_attempts(1)
    }

    /// The most calls made for one operation, the first included (so `n - 1`
    /// retries); 0 is taken as 1.
    ///
    /// ```
    /// use bakery_core::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().max_attempts(0).get_max_attempts(), 1);
    /// ```
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// No retry starts later than `max_elapsed` after the first call
    /// started (`None`: only [`max_attempts`](Self::max_attempts) bounds
    /// them). A call already running is not cut short: each backend's own
    /// `timeout_ms` bounds a call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bakery_core::RetryPolicy;
    /// let policy = RetryPolicy::default().max_elapsed(Some(Duration::from_secs(1)));
    /// assert_eq!(policy.get_max_elapsed(), Some(Duration::from_secs(1)));
    /// ```
    pub fn max_elapsed(mut self, max_elapsed: Option<Duration>) -> Self {
        self.max_elapsed = max_elapsed;
        self
    }

    /// The delay before the first retry.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bakery_core::RetryPolicy;
    /// let policy = RetryPolicy::default().min_delay(Duration::from_millis(5));
    /// assert_eq!(policy.get_min_delay(), Duration::from_millis(5));
    /// ```
    pub fn min_delay(mut self, min_delay: Duration) -> Self {
        self.min_delay = min_delay;
        self
    }

    /// The longest delay between two calls, before jitter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use bakery_core::RetryPolicy;
    /// let policy = RetryPolicy::default().max_delay(Duration::from_millis(500));
    /// assert_eq!(policy.get_max_delay(), Duration::from_millis(500));
    /// ```
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// How much each delay grows over the one before (2 by default); a
    /// factor below 1 (or NaN) is taken as 1, a constant delay.
    ///
    /// ```
    /// use bakery_core::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().factor(0.5).get_factor(), 1.0);
    /// ```
    pub fn factor(mut self, factor: f32) -> Self {
        self.factor = factor.max(1.0);
        self
    }

    /// Stretch each delay by a random share of itself (`d` becomes a delay
    /// in `d..2d`). On by default.
    ///
    /// ```
    /// assert!(!bakery_core::RetryPolicy::default().jitter(false).get_jitter());
    /// ```
    pub fn jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// See [`max_attempts`](Self::max_attempts).
    pub fn get_max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// See [`max_elapsed`](Self::max_elapsed).
    pub fn get_max_elapsed(&self) -> Option<Duration> {
        self.max_elapsed
    }

    /// See [`min_delay`](Self::min_delay).
    pub fn get_min_delay(&self) -> Duration {
        self.min_delay
    }

    /// See [`max_delay`](Self::max_delay).
    pub fn get_max_delay(&self) -> Duration {
        self.max_delay
    }

    /// See [`factor`](Self::factor).
    pub fn get_factor(&self) -> f32 {
        self.factor
    }

    /// See [`jitter`](Self::jitter).
    pub fn get_jitter(&self) -> bool {
        self.jitter
    }

    /// The delays between calls, as `backon` computes them.
    fn delays(&self) -> impl Iterator<Item = Duration> {
        let retries = usize::try_from(self.max_attempts.saturating_sub(1)).unwrap_or(usize::MAX);
        let builder = ExponentialBuilder::new()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay.max(self.min_delay))
            .with_factor(self.factor)
            .with_max_times(retries);
        let builder = if self.jitter {
            builder.with_jitter()
        } else {
            builder
        };
        builder.build()
    }

    /// Run `call` (the store call `op`) until it succeeds, fails with an
    /// error other than [`ErrorKind::Unavailable`], or the policy gives up.
    ///
    /// Each retry is logged at `warn` (`tracing`) with the backend, the
    /// operation, the attempt, the delay and the error. An error that is
    /// not retried is returned unchanged. When the policy gives up on an
    /// `Unavailable` error, the error returned has the same kind, backend
    /// and operation, its message ends with how many attempts were made
    /// over how long, and its [`source()`](std::error::Error::source) is
    /// the last error itself, whole. (With one attempt allowed, the error
    /// is returned unchanged.)
    ///
    /// Useful for calls that are not store calls but as safe to repeat,
    /// such as opening a store:
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use bakery_core::{Error, ErrorKind, Operation, RetryPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = RetryPolicy::default().max_attempts(3).min_delay(Duration::from_millis(1));
    /// let calls = AtomicU32::new(0);
    /// let result: Result<(), Error> = policy
    ///     .retry(Operation::Open, || async {
    ///         calls.fetch_add(1, Ordering::Relaxed);
    ///         Err(Error::new(ErrorKind::Unavailable, "demo", "connection refused"))
    ///     })
    ///     .await;
    /// let err = result.unwrap_err();
    /// assert_eq!(calls.load(Ordering::Relaxed), 3);
    /// assert_eq!(err.kind(), ErrorKind::Unavailable);
    /// assert!(err.message().contains("gave up after 3 attempts"), "{err}");
    /// # }
    /// ```
    pub async fn retry<T, F, Fut>(&self, op: Operation, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let started = Instant::now();
        let mut delays = self.delays();
        let mut attempts: u32 = 0;
        loop {
            attempts += 1;
            let err = match call().await {
                Ok(value) => {
                    if attempts > 1 {
                        tracing::debug!(op = %op, attempts, "store call succeeded after retrying");
                    }
                    return Ok(value);
                }
                Err(err) => err,
            };
            if err.kind() != ErrorKind::Unavailable {
                if err.kind() == ErrorKind::Unknown {
                    tracing::debug!(
                        backend = err.backend(),
                        op = %op,
                        attempt = attempts,
                        error = %err,
                        "not retried: the outcome is unknown (it may have applied)"
                    );
                }
                return Err(err);
            }
            if self.max_attempts <= 1 {
                return Err(err);
            }
            let elapsed = started.elapsed();
            let delay = match delays.next() {
                Some(delay) if self.max_elapsed.is_none_or(|max| elapsed + delay <= max) => delay,
                _ => {
                    let err = gave_up(err, op, attempts, elapsed);
                    tracing::warn!(
                        backend = err.backend(),
                        op = %op,
                        attempts,
                        error = %err,
                        "store call still unavailable; giving up"
                    );
                    return Err(err);
                }
            };
            tracing::warn!(
                backend = err.backend(),
                op = %op,
                attempt = attempts,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %err,
                "store call unavailable; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

/// `last`, the error of the last of `attempts` calls over `elapsed`, with
/// that said in its message, and kept whole as the source.
fn gave_up(last: Error, op: Operation, attempts: u32, elapsed: Duration) -> Error {
    // The message is the last one with the count after it, so the one-line
    // cause chain (`error::cause_chain`) shows the last error once.
    let message = format!(
        "{} (gave up after {attempts} attempts in {} ms)",
        last.message(),
        elapsed.as_millis()
    );
    Error::new(last.kind(), last.backend(), message)
        .during(last.operation().unwrap_or(op))
        .with_source(last)
}

/// Retries the calls of any [`VersionedStore`] that fail with
/// [`ErrorKind::Unavailable`] (refused before taking effect: safe to send
/// again), as its [`RetryPolicy`] says; never [`ErrorKind::Unknown`] (sent,
/// no reply: it may have applied) nor any other error. Conflicts are
/// outcomes, not errors, and pass through untouched.
///
/// Every call is covered: `get`, `put_if_version`, `delete_if_version`,
/// `watch` (the subscription's setup; a watch that stops delivering later
/// is the caller's to handle, by polling) and `notify`. See
/// [`RetryPolicy::retry`] for the logging and the error returned when it
/// gives up.
///
/// Wrap it outside the layers that should see every attempt (a
/// `MetricsStore`, a `CountingStore`), inside those that should see one
/// call per operation.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use bakery_core::{Key, MemoryStore, RetryPolicy, RetryStore, VersionedStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let policy = RetryPolicy::default()
///     .max_attempts(4)
///     .min_delay(Duration::from_millis(25))
///     .max_delay(Duration::from_secs(1))
///     .max_elapsed(Some(Duration::from_secs(5)));
/// let store: Arc<dyn VersionedStore> =
///     Arc::new(RetryStore::new(Arc::new(MemoryStore::new()), policy));
/// let key = Key::new("k")?;
/// assert!(store.put_if_version(&key, None, "v".into()).await?.is_applied());
/// assert_eq!(store.backend(), "memory");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RetryStore {
    inner: Arc<dyn VersionedStore>,
    policy: RetryPolicy,
}

impl RetryStore {
    /// Retry the calls made to `inner` as `policy` says.
    pub fn new(inner: Arc<dyn VersionedStore>, policy: RetryPolicy) -> Self {
        RetryStore { inner, policy }
    }

    /// The policy it retries by.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bakery_core::{MemoryStore, RetryPolicy, RetryStore};
    ///
    /// let store = RetryStore::new(Arc::new(MemoryStore::new()), RetryPolicy::none());
    /// assert_eq!(store.policy().get_max_attempts(), 1);
    /// ```
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }
}

#[async_trait]
impl StoreLayer for RetryStore {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        self.policy
            .retry(Operation::Get, || self.inner.get(key))
            .await
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        // `Bytes` clones share the buffer: no copy per attempt.
        self.policy
            .retry(Operation::Put, || {
                self.inner.put_if_version(key, expected, value.clone())
            })
            .await
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        self.policy
            .retry(Operation::Delete, || {
                self.inner.delete_if_version(key, expected)
            })
            .await
    }

    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        self.policy
            .retry(Operation::Watch, || self.inner.watch(key))
            .await
    }

    async fn notify(&self, key: &Key) -> Result<()> {
        self.policy
            .retry(Operation::Notify, || self.inner.notify(key))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::flaky::{create, create_then_conflict, fast, key, Flaky};

    /// `flaky` behind a RetryStore, as callers see it (with both traits
    /// in scope a call on the concrete type would be ambiguous).
    fn retrying(flaky: &Arc<Flaky>, policy: RetryPolicy) -> Arc<dyn VersionedStore> {
        Arc::new(RetryStore::new(flaky.clone(), policy))
    }

    #[tokio::test]
    async fn unavailable_is_retried_until_the_call_succeeds() {
        let flaky = Flaky::new(ErrorKind::Unavailable, 3);
        let store = retrying(&flaky, fast(4));
        let outcome = store
            .put_if_version(&key(), None, "v".into())
            .await
            .expect("the fourth attempt succeeds");
        assert!(outcome.is_applied());
        assert_eq!(flaky.calls(), 4);
        // Applied exactly once: the row is at its first version.
        let row = store.get(&key()).await.expect("get");
        assert_eq!(row.map(|r| r.version), Some(1));
        assert_eq!(flaky.calls(), 5);
    }

    #[tokio::test]
    async fn unavailable_is_retried_up_to_the_limit_then_returned_with_the_count() {
        let flaky = Flaky::new(ErrorKind::Unavailable, u32::MAX);
        let store = retrying(&flaky, fast(3));
        let err = store
            .put_if_version(&key(), None, "v".into())
            .await
            .expect_err("every attempt fails");
        assert_eq!(flaky.calls(), 3);
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert_eq!(err.backend(), "flaky");
        assert_eq!(err.operation(), Some(Operation::Put));
        // The last error's message, then the count.
        assert!(err.message().contains("refused #3"), "{err}");
        assert!(err.message().contains("gave up after 3 attempts"), "{err}");
        let last = err
            .source()
            .and_then(|s| s.downcast_ref::<Error>())
            .expect("the last error is the source");
        assert!(last.message().ends_with("refused #3"), "{last}");
        assert_eq!(last.sent(), Some(crate::Sent::No));
        // Nothing applied.
        let inner = StoreLayer::inner(flaky.as_ref());
        assert_eq!(inner.get(&key()).await.expect("get"), None);
    }

    #[tokio::test]
    async fn unknown_is_never_retried() {
        for op in [Operation::Put, Operation::Delete] {
            let flaky = Flaky::new(ErrorKind::Unknown, 1);
            let store = retrying(&flaky, fast(5));
            let err = match op {
                Operation::Put => store
                    .put_if_version(&key(), None, "v".into())
                    .await
                    .map(drop),
                _ => store.delete_if_version(&key(), 1).await.map(drop),
            }
            .expect_err("the first call fails");
            assert_eq!(flaky.calls(), 1, "{op}: called exactly once");
            assert_eq!(err.kind(), ErrorKind::Unknown);
            // Returned as it came: no count, the backend's own words.
            assert!(err.message().ends_with("reset #1"), "{err}");
            assert!(!err.message().contains("gave up"), "{err}");
        }
    }

    #[tokio::test]
    async fn other_kinds_are_not_retried() {
        for kind in [
            ErrorKind::Config,
            ErrorKind::InvalidInput,
            ErrorKind::Corrupt,
            ErrorKind::TimedOut,
            ErrorKind::Internal,
        ] {
            let flaky = Flaky::new(kind, 1);
            let store = retrying(&flaky, fast(5));
            let err = store.get(&key()).await.expect_err("the first call fails");
            assert_eq!((err.kind(), flaky.calls()), (kind, 1), "{err}");
        }
    }

    #[tokio::test]
    async fn conflicts_pass_through_untouched() {
        let flaky = Flaky::new(ErrorKind::Unavailable, 0);
        let store = retrying(&flaky, fast(5));
        create_then_conflict(&*store).await;
        // The create, then each conflict from exactly one call.
        assert_eq!(flaky.calls(), 4);
    }

    #[tokio::test]
    async fn every_call_is_retried() {
        let flaky = Flaky::new(ErrorKind::Unavailable, 0);
        let store = retrying(&flaky, fast(3));
        let row = create(&*store).await;
        let mut before = flaky.calls();
        for op in [
            Operation::Get,
            Operation::Watch,
            Operation::Notify,
            Operation::Delete,
        ] {
            flaky.fail_next(2, ErrorKind::Unavailable);
            let result = match op {
                Operation::Get => store.get(&key()).await.map(drop),
                Operation::Watch => store.watch(&key()).await.map(drop),
                Operation::Notify => store.notify(&key()).await,
                _ => store
                    .delete_if_version(&key(), row.version)
                    .await
                    .map(|o| assert_eq!(o, DeleteOutcome::Deleted)),
            };
            result.unwrap_or_else(|e| panic!("{op}: {e}"));
            assert_eq!(
                flaky.calls() - before,
                3,
                "{op}: two failures, then success"
            );
            before = flaky.calls();
        }
    }

    #[tokio::test]
    async fn one_attempt_returns_the_error_unchanged() {
        let flaky = Flaky::new(ErrorKind::Unavailable, 1);
        let store = retrying(&flaky, RetryPolicy::none());
        let err = store.get(&key()).await.expect_err("fails once");
        assert_eq!(flaky.calls(), 1);
        assert!(err.message().ends_with("refused #1"), "{err}");
        assert!(err.source().is_none());
    }

    #[tokio::test]
    async fn no_retry_starts_after_max_elapsed() {
        let flaky = Flaky::new(ErrorKind::Unavailable, 1);
        // The first delay alone would pass the limit.
        let policy = fast(5)
            .min_delay(Duration::from_secs(60))
            .max_delay(Duration::from_secs(60))
            .max_elapsed(Some(Duration::from_secs(1)));
        let store = retrying(&flaky, policy);
        let err = store.get(&key()).await.expect_err("no retry");
        assert_eq!(flaky.calls(), 1);
        assert!(err.message().contains("gave up after 1 attempts"), "{err}");
    }

    /// Virtual time: the sleeps advance the paused clock at once, so the
    /// schedule is measured exactly without waiting for it.
    #[tokio::test(start_paused = true)]
    async fn delays_grow_exponentially_up_to_the_cap() {
        let ms = Duration::from_millis;
        // The timer rounds each sleep up to its next millisecond tick.
        let cases = [
            // attempts, min, max, jitter: elapsed range
            (4, ms(100), ms(10_000), false, ms(700)..=ms(703)),
            (4, ms(100), ms(150), false, ms(400)..=ms(403)),
            (4, ms(100), ms(10_000), true, ms(700)..=ms(1403)),
        ];
        for (attempts, min, max, jitter, range) in cases {
            let flaky = Flaky::new(ErrorKind::Unavailable, u32::MAX);
            let policy = RetryPolicy::default()
                .max_attempts(attempts)
                .min_delay(min)
                .max_delay(max)
                .jitter(jitter)
                .max_elapsed(None);
            let store = retrying(&flaky, policy);
            let started = Instant::now();
            store.get(&key()).await.expect_err("every attempt fails");
            let waited = started.elapsed();
            assert_eq!(flaky.calls(), attempts);
            assert!(range.contains(&waited), "{policy:?}: waited {waited:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn max_elapsed_stops_the_retries_that_would_pass_it() {
        let ms = Duration::from_millis;
        let flaky = Flaky::new(ErrorKind::Unavailable, u32::MAX);
        // 100 + 200 fit in 350 ms; the third delay (400) would not.
        let policy = RetryPolicy::default()
            .max_attempts(10)
            .min_delay(ms(100))
            .jitter(false)
            .max_elapsed(Some(ms(350)));
        let store = retrying(&flaky, policy);
        let err = store.get(&key()).await.expect_err("gives up");
        assert_eq!(flaky.calls(), 3);
        assert!(
            err.message().contains("gave up after 3 attempts in 30"),
            "{err}"
        );
    }
}
