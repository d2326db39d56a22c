//! [`MetricsStore`]: counts, times and classifies the calls of any store
//! through the `metrics` crate's facade (feature `metrics`).

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    DeleteOutcome, ErrorKind, Key, Operation, PutOutcome, Result, Row, StoreLayer, Version,
    VersionedStore, Watch,
};

/// Records every call of any [`VersionedStore`] through the [`metrics`]
/// crate's facade: nothing is exported unless the application installs a
/// recorder (a Prometheus exporter, say); without one every record is a
/// no-op. Needs the `metrics` feature of `bakery-core`.
///
/// # Metrics
///
/// Every metric has the labels `backend` (the inner store's
/// [`backend()`](VersionedStore::backend): `memory`, `sqlite`, `postgres`,
/// `redis`, `etcd`, `mongodb`, `cassandra`) and `op` (the call:
/// `get`, `put_if_version`, `delete_if_version`, `watch`, `notify`).
///
/// | name | type | extra label | what |
/// |---|---|---|---|
/// | `bakery_store_calls_total` ([`CALLS`](Self::CALLS)) | counter | | calls that returned, whatever the result |
/// | `bakery_store_call_duration_seconds` ([`DURATION`](Self::DURATION)) | histogram (seconds) | | how long each returned call took |
/// | `bakery_store_conflicts_total` ([`CONFLICTS`](Self::CONFLICTS)) | counter | | `put_if_version` and `delete_if_version` calls that returned a conflict (the version did not match) |
/// | `bakery_store_errors_total` ([`ERRORS`](Self::ERRORS)) | counter | `kind` | calls that returned an error, by [`ErrorKind`] ([`kind_label`](Self::kind_label): `config`, `invalid_input`, `corrupt`, `unavailable`, `unknown`, `exhausted`, `timed_out`, `lost`, `internal`) |
/// | `bakery_store_unknown_outcomes_total` ([`UNKNOWN_OUTCOMES`](Self::UNKNOWN_OUTCOMES)) | counter | | calls whose outcome is unknown (sent, no reply: [`ErrorKind::Unknown`]), also counted in the errors with `kind="unknown"`; the one to alert on |
///
/// A call whose future is dropped before it returns (a caller's timeout)
/// is not recorded.
///
/// Inside a [`RetryStore`](crate::RetryStore) it records every attempt
/// (the retried `unavailable` errors included); outside one, each
/// operation once, with the result its caller saw.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{Key, MemoryStore, MetricsStore, RetryPolicy, RetryStore, VersionedStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// // Install a recorder first (e.g. `metrics_exporter_prometheus`); without
/// // one the metrics are not kept.
/// let metered = Arc::new(MetricsStore::new(Arc::new(MemoryStore::new())));
/// let store: Arc<dyn VersionedStore> = Arc::new(RetryStore::new(metered, RetryPolicy::default()));
/// let key = Key::new("k")?;
/// store.put_if_version(&key, None, "v".into()).await?;
/// assert!(!store.put_if_version(&key, None, "w".into()).await?.is_applied()); // a conflict
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MetricsStore {
    inner: Arc<dyn VersionedStore>,
}

impl MetricsStore {
    /// Counter `bakery_store_calls_total{backend, op}`.
    pub const CALLS: &'static str = "bakery_store_calls_total";
    /// Histogram `bakery_store_call_duration_seconds{backend, op}`.
    pub const DURATION: &'static str = "bakery_store_call_duration_seconds";
    /// Counter `bakery_store_conflicts_total{backend, op}`.
    pub const CONFLICTS: &'static str = "bakery_store_conflicts_total";
    /// Counter `bakery_store_errors_total{backend, op, kind}`.
    pub const ERRORS: &'static str = "bakery_store_errors_total";
    /// Counter `bakery_store_unknown_outcomes_total{backend, op}`.
    pub const UNKNOWN_OUTCOMES: &'static str = "bakery_store_unknown_outcomes_total";

    /// Record the calls made to `inner`. Also describes the metrics (help
    /// text and unit) to the recorder installed now: see [`describe`](Self::describe).
    pub fn new(inner: Arc<dyn VersionedStore>) -> Self {
        Self::describe();
        MetricsStore { inner }
    }

    /// Give the recorder installed now each metric's help text and unit
    /// (exporters print them, e.g. as Prometheus `# HELP` lines). Called
    /// by [`new`](Self::new); call it again after installing a recorder
    /// later.
    ///
    /// ```
    /// bakery_core::MetricsStore::describe(); // no recorder: a no-op
    /// ```
    pub fn describe() {
        let counters = [
            (
                Self::CALLS,
                "bakery store calls that returned, by backend and operation",
            ),
            (
                Self::CONFLICTS,
                "conditional writes that found another version (a conflict, not an error)",
            ),
            (
                Self::ERRORS,
                "bakery store calls that failed, by backend, operation and error kind",
            ),
            (
                Self::UNKNOWN_OUTCOMES,
                "bakery store calls sent without a reply: they may or may not have applied",
            ),
        ];
        for (name, help) in counters {
            ::metrics::describe_counter!(name, ::metrics::Unit::Count, help);
        }
        ::metrics::describe_histogram!(
            Self::DURATION,
            ::metrics::Unit::Seconds,
            "how long bakery store calls took, by backend and operation"
        );
    }

    /// The `kind` label of an error kind: its name in snake_case.
    ///
    /// ```
    /// use bakery_core::{ErrorKind, MetricsStore};
    /// assert_eq!(MetricsStore::kind_label(ErrorKind::InvalidInput), "invalid_input");
    /// assert_eq!(MetricsStore::kind_label(ErrorKind::Unknown), "unknown");
    /// ```
    pub fn kind_label(kind: ErrorKind) -> &'static str {
        match kind {
            ErrorKind::Config => "config",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Unknown => "unknown",
            ErrorKind::Exhausted => "exhausted",
            ErrorKind::TimedOut => "timed_out",
            ErrorKind::Lost => "lost",
            ErrorKind::Internal => "internal",
        }
    }

    /// Record one returned call `op` that started at `started`; `conflict`
    /// says whether an `Ok` value is a conflict.
    fn record<T>(
        &self,
        op: Operation,
        started: Instant,
        result: &Result<T>,
        conflict: impl FnOnce(&T) -> bool,
    ) {
        let elapsed = started.elapsed().as_secs_f64();
        let (backend, op) = (self.inner.backend(), op.as_str());
        ::metrics::counter!(Self::CALLS, "backend" => backend, "op" => op).increment(1);
        ::metrics::histogram!(Self::DURATION, "backend" => backend, "op" => op).record(elapsed);
        match result {
            Ok(value) if conflict(value) => {
                ::metrics::counter!(Self::CONFLICTS, "backend" => backend, "op" => op).increment(1);
            }
            Ok(_) => {}
            Err(err) => {
                let kind = Self::kind_label(err.kind());
                ::metrics::counter!(Self::ERRORS, "backend" => backend, "op" => op, "kind" => kind)
                    .increment(1);
                if err.kind() == ErrorKind::Unknown {
                    ::metrics::counter!(Self::UNKNOWN_OUTCOMES, "backend" => backend, "op" => op)
                        .increment(1);
                }
            }
        }
    }
}

#[async_trait]
impl StoreLayer for MetricsStore {
    fn inner(&self) -> &dyn VersionedStore {
        self.inner.as_ref()
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let started = Instant::now();
        let result = self.inner.get(key).await;
        self.record(Operation::Get, started, &result, |_| false);
        result
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let started = Instant::now();
        let result = self.inner.put_if_version(key, expected, value).await;
        self.record(Operation::Put, started, &result, |outcome| {
            matches!(outcome, PutOutcome::Conflict(_))
        });
        result
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let started = Instant::now();
        let result = self.inner.delete_if_version(key, expected).await;
        self.record(Operation::Delete, started, &result, |outcome| {
            matches!(outcome, DeleteOutcome::Conflict(_))
        });
        result
    }

    async fn watch(&self, key: &Key) -> Result<Option<Watch>> {
        let started = Instant::now();
        let result = self.inner.watch(key).await;
        self.record(Operation::Watch, started, &result, |_| false);
        result
    }

    async fn notify(&self, key: &Key) -> Result<()> {
        let started = Instant::now();
        let result = self.inner.notify(key).await;
        self.record(Operation::Notify, started, &result, |_| false);
        result
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;
    use crate::flaky::{create_then_conflict, fast, key, Flaky};
    use crate::RetryStore;

    /// The metrics' values by `name{label=value,…}` (labels sorted), and
    /// their descriptions by name.
    type Values = HashMap<String, DebugValue>;

    /// Run `body` on a current-thread runtime with a fresh recorder local
    /// to this thread (so tests running in parallel do not mix), and
    /// return what was recorded.
    fn recorded<F: std::future::Future<Output = ()>>(
        body: impl FnOnce() -> F,
    ) -> (Values, HashMap<String, String>) {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(body())
        });
        let mut values = HashMap::new();
        let mut help = HashMap::new();
        for (key, _unit, description, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            if let Some(description) = description {
                help.insert(key.name().to_owned(), description.to_string());
            }
            values.insert(format!("{}{{{}}}", key.name(), labels.join(",")), value);
        }
        (values, help)
    }

    /// The key of `metric` on the MemoryStore the tests meter, with
    /// `labels` (sorted, comma-separated) beside its backend label.
    fn memory_key(metric: &str, labels: &str) -> String {
        format!("{metric}{{backend=memory,{labels}}}")
    }

    fn counter(values: &Values, metric: &str, labels: &str) -> u64 {
        let key = memory_key(metric, labels);
        let key = key.as_str();
        match values.get(key) {
            Some(DebugValue::Counter(n)) => *n,
            Some(other) => panic!("{key} is not a counter: {other:?}"),
            None => 0,
        }
    }

    fn samples(values: &Values, metric: &str, labels: &str) -> usize {
        let key = memory_key(metric, labels);
        let key = key.as_str();
        match values.get(key) {
            Some(DebugValue::Histogram(samples)) => samples.len(),
            Some(other) => panic!("{key} is not a histogram: {other:?}"),
            None => 0,
        }
    }

    #[test]
    fn calls_conflicts_errors_and_unknown_outcomes_are_counted() {
        let (values, help) = recorded(|| async {
            let failing = Flaky::new(ErrorKind::Unavailable, 0);
            let store: Arc<dyn VersionedStore> = Arc::new(MetricsStore::new(failing.clone()));
            // Two put conflicts (a create over the row, a stale version)
            // and a delete conflict.
            create_then_conflict(&*store).await;
            store.get(&key()).await.expect("get");
            failing.fail_next(1, ErrorKind::Unavailable);
            store.get(&key()).await.expect_err("unavailable");
            failing.fail_next(1, ErrorKind::Unknown);
            let err = store.put_if_version(&key(), Some(1), "x".into()).await;
            assert_eq!(err.expect_err("unknown").kind(), ErrorKind::Unknown);
            store.notify(&key()).await.expect("notify");
        });
        let m = "backend=memory";
        assert_eq!(
            counter(&values, MetricsStore::CALLS, "op=put_if_version"),
            4
        );
        assert_eq!(counter(&values, MetricsStore::CALLS, "op=get"), 2);
        assert_eq!(
            counter(&values, MetricsStore::CALLS, "op=delete_if_version"),
            1
        );
        assert_eq!(counter(&values, MetricsStore::CALLS, "op=notify"), 1);
        assert_eq!(
            samples(&values, MetricsStore::DURATION, "op=put_if_version"),
            4
        );
        assert_eq!(samples(&values, MetricsStore::DURATION, "op=get"), 2);
        assert_eq!(
            counter(&values, MetricsStore::CONFLICTS, "op=put_if_version"),
            2
        );
        assert_eq!(
            counter(&values, MetricsStore::CONFLICTS, "op=delete_if_version"),
            1
        );
        assert_eq!(counter(&values, MetricsStore::CONFLICTS, "op=get"), 0);
        assert_eq!(
            counter(&values, MetricsStore::ERRORS, "kind=unavailable,op=get"),
            1
        );
        assert_eq!(
            counter(
                &values,
                MetricsStore::ERRORS,
                "kind=unknown,op=put_if_version"
            ),
            1
        );
        assert_eq!(
            counter(&values, MetricsStore::UNKNOWN_OUTCOMES, "op=put_if_version"),
            1
        );
        assert_eq!(
            counter(&values, MetricsStore::UNKNOWN_OUTCOMES, "op=get"),
            0
        );
        // Nothing else was recorded (no stray labels or names).
        let expected = [
            MetricsStore::CALLS,
            MetricsStore::DURATION,
            MetricsStore::CONFLICTS,
            MetricsStore::ERRORS,
            MetricsStore::UNKNOWN_OUTCOMES,
        ];
        for name in values.keys() {
            assert!(
                expected.iter().any(|e| name.starts_with(&format!("{e}{{"))),
                "{name}"
            );
            assert!(name.contains(m), "{name}");
        }
        assert_eq!(values.len(), 4 + 4 + 2 + 2 + 1, "{values:?}");
        for name in expected {
            assert!(
                help.contains_key(name),
                "{name} has no description: {help:?}"
            );
        }
    }

    #[test]
    fn inside_a_retry_store_every_attempt_is_recorded() {
        let (values, _) = recorded(|| async {
            let failing = Flaky::new(ErrorKind::Unavailable, 0);
            let metered = Arc::new(MetricsStore::new(failing.clone()));
            let store: Arc<dyn VersionedStore> = Arc::new(RetryStore::new(metered, fast(5)));
            failing.fail_next(2, ErrorKind::Unavailable);
            store.get(&key()).await.expect("the third attempt succeeds");
            failing.fail_next(1, ErrorKind::Unknown);
            store
                .put_if_version(&key(), None, "v".into())
                .await
                .expect_err("unknown: not retried");
        });
        assert_eq!(counter(&values, MetricsStore::CALLS, "op=get"), 3);
        assert_eq!(
            counter(&values, MetricsStore::ERRORS, "kind=unavailable,op=get"),
            2
        );
        assert_eq!(
            counter(&values, MetricsStore::CALLS, "op=put_if_version"),
            1
        );
        assert_eq!(
            counter(&values, MetricsStore::UNKNOWN_OUTCOMES, "op=put_if_version"),
            1
        );
    }

    #[test]
    fn every_kind_has_a_snake_case_label() {
        let kinds = [
            ErrorKind::Config,
            ErrorKind::InvalidInput,
            ErrorKind::Corrupt,
            ErrorKind::Unavailable,
            ErrorKind::Unknown,
            ErrorKind::Exhausted,
            ErrorKind::TimedOut,
            ErrorKind::Lost,
            ErrorKind::Internal,
        ];
        let labels: std::collections::HashSet<_> =
            kinds.iter().map(|k| MetricsStore::kind_label(*k)).collect();
        assert_eq!(labels.len(), kinds.len(), "distinct: {labels:?}");
        for label in labels {
            assert!(
                label.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{label}"
            );
        }
    }
}
