//! Whether a server keeps what it acknowledged: the check every server
//! backend runs when it opens, and [`Recheck`], which repeats it while the
//! store is live.
//!
//! A sequence is unique only if the server remembers every reservation it
//! acknowledged. A server that can forget one (Redis without an fsynced
//! append-only file, PostgreSQL with `fsync=off`, a single Cassandra node
//! with a periodic commit log, …) will, after a crash, let the next client
//! reserve the same block again: duplicate ids, silently. So each backend
//! reads the server's durability settings at connect, turns every setting
//! that can lose an acknowledged write into a [`Hazard`], and [`check`]
//! refuses the store with one [`ErrorKind::Config`] error that names each
//! setting, what it loses and how to fix it — unless the URI carries the
//! explicit opt-in [`ACCEPT_DATA_LOSS`]`=true`, for users who know their
//! store may forget (a cache, a test) and accept duplicates after a crash.
//!
//! The bar is the same on every backend: an acknowledged write is on
//! stable storage (fsynced) on the server, or on enough replicas that one
//! machine's crash or power loss cannot lose it.
//!
//! ```
//! use bakery_core::durability::{check, Hazard};
//! use bakery_core::ErrorKind;
//!
//! let found = [Hazard::new(
//!     "appendonly",
//!     "no",
//!     "a restart forgets every write since the last snapshot",
//!     "appendonly yes, appendfsync always",
//! )];
//! let refused = check("redis", &found, false).unwrap_err();
//! assert_eq!(refused.kind(), ErrorKind::Config);
//! assert!(refused.message().contains("appendonly = no"));
//! assert!(refused.message().contains("accept_data_loss=true"));
//! // Opted in: allowed (and logged as a warning).
//! check("redis", &found, true)?;
//! // Nothing found: allowed.
//! check("redis", &[], false)?;
//! # Ok::<(), bakery_core::Error>(())
//! ```

use std::fmt;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::{Error, ErrorKind, Operation, Result};

/// The URI option that lets a store open on a server that can lose
/// acknowledged writes: `accept_data_loss=true` (default `false`). The same
/// name and meaning on every server backend.
pub const ACCEPT_DATA_LOSS: &str = "accept_data_loss";

/// One server setting under which an acknowledged write can be lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hazard {
    /// The setting as the server names it, e.g. `appendonly`.
    pub setting: String,
    /// Its value on this server, e.g. `no`.
    pub value: String,
    /// What is lost, and when, e.g. "a restart forgets every write since
    /// the last snapshot".
    pub loses: String,
    /// The durable setting to use instead, e.g. "appendonly yes".
    pub fix: String,
}

impl Hazard {
    /// A hazard: `setting` is `value` on the server, which `loses`; `fix`
    /// says what to set instead.
    pub fn new(
        setting: impl Into<String>,
        value: impl Into<String>,
        loses: impl Into<String>,
        fix: impl Into<String>,
    ) -> Hazard {
        Hazard {
            setting: setting.into(),
            value: value.into(),
            loses: loses.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {} ({})", self.setting, self.value, self.loses)
    }
}

/// Refuse a server whose settings can lose acknowledged writes, unless the
/// user opted in with [`ACCEPT_DATA_LOSS`]`=true` (`accepted`). Returns an
/// [`ErrorKind::Config`] error naming every hazard and its fix; with the
/// opt-in, logs them as one warning and returns `Ok`.
pub fn check(backend: &'static str, hazards: &[Hazard], accepted: bool) -> Result<()> {
    if hazards.is_empty() {
        return Ok(());
    }
    let found = hazards
        .iter()
        .map(Hazard::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if accepted {
        tracing::warn!(
            backend,
            "{backend}: opened with {ACCEPT_DATA_LOSS}=true on a server that can lose acknowledged writes: {found}; a sequence may hand out ids again after a crash"
        );
        return Ok(());
    }
    let fixes = hazards
        .iter()
        .map(|h| h.fix.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Err(Error::new(
        ErrorKind::Config,
        backend,
        format!(
            "the server can lose acknowledged writes, and a sequence would then hand out the same ids again: {found}. \
             Make it durable ({fixes}), or add `{ACCEPT_DATA_LOSS}=true` to the URI to use it anyway"
        ),
    ))
}

/// Parse the value of the [`ACCEPT_DATA_LOSS`] option: `true` or `false`
/// (ASCII case-insensitive); anything else is an [`ErrorKind::Config`]
/// error naming the option.
///
/// ```
/// use bakery_core::durability::parse_accept;
/// assert!(parse_accept("redis", "true")?);
/// assert!(!parse_accept("redis", "FALSE")?);
/// assert!(parse_accept("redis", "yes").is_err());
/// # Ok::<(), bakery_core::Error>(())
/// ```
pub fn parse_accept(backend: &'static str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(Error::config(
            backend,
            format!(
                "{backend} URI option `{ACCEPT_DATA_LOSS}`: {value:?} is not `true` or `false`"
            ),
        )),
    }
}

/// The URI option setting how often a live store re-reads its server's
/// durability settings ([`Recheck`]): `durability_recheck_ms=N`, whole
/// milliseconds from 1 to an hour, like every duration option.
pub const RECHECK_OPTION: &str = "durability_recheck_ms";

/// The default [`RECHECK_OPTION`]: one second, a tenth of the lock's
/// default lease, so a server that became unsafe stops a sequence and a
/// lock well within one lease, for one cheap read a second.
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(1);

/// The durability options of a store URI that differ from their defaults,
/// as `&name=value` pairs: what a backend's config prints after its own
/// options, so its URI parses back to the same settings.
///
/// ```
/// use std::time::Duration;
/// use bakery_core::durability::{UriOptions, DEFAULT_RECHECK};
///
/// let shown = UriOptions { accept_data_loss: false, recheck: DEFAULT_RECHECK };
/// assert_eq!(shown.to_string(), "");
/// let shown = UriOptions { accept_data_loss: true, recheck: Duration::from_millis(250) };
/// assert_eq!(shown.to_string(), "&accept_data_loss=true&durability_recheck_ms=250");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct UriOptions {
    /// The [`ACCEPT_DATA_LOSS`] opt-in.
    pub accept_data_loss: bool,
    /// The [`RECHECK_OPTION`] interval.
    pub recheck: Duration,
}

impl fmt::Display for UriOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.accept_data_loss {
            write!(f, "&{ACCEPT_DATA_LOSS}=true")?;
        }
        if self.recheck != DEFAULT_RECHECK {
            write!(f, "&{RECHECK_OPTION}={}", self.recheck.as_millis())?;
        }
        Ok(())
    }
}

/// The durability check of [`check`], repeated while a store is live: a
/// server can become unsafe after the store opened (a replica lost, a
/// setting changed and reloaded, a reconnect that reached another server).
///
/// A backend store holds one and calls [`Recheck::guard`] before every
/// conditional write (`put_if_version`, `delete_if_version`, never reads),
/// passing how to read its server's hazards; it calls
/// [`Recheck::invalidate`] whenever its driver opened a new connection.
/// `guard` re-reads the settings when the last verdict is older than the
/// interval, or after an `invalidate`, and returns the verdict: `Ok`, or
/// the [`ErrorKind::Config`] refusal [`check`] words, before the write is
/// sent. A later check that finds the server safe again clears it.
///
/// The hot path stays cheap: while the verdict is younger than the interval
/// nothing is read; when it is due, one caller reads (at most one read is
/// in flight per store) and the others go on with the last verdict, as long
/// as it is younger than two intervals. A write is never issued on an
/// older verdict, or on none since a new connection: such a caller waits
/// for the read in flight, or makes it. So a server that became unsafe
/// takes at most two intervals (plus one read) to stop the store's writes;
/// writes already on the wire then are not recalled.
///
/// ```
/// use std::time::Duration;
/// use bakery_core::durability::{Hazard, Recheck};
/// use bakery_core::{ErrorKind, Operation};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let recheck = Recheck::new("redis", Duration::from_secs(1), false);
/// // Fresh after the check at open: nothing is read.
/// recheck.guard(Operation::Put, || async { unreachable!() }).await?;
/// // A reconnect: the next write reads the settings first.
/// recheck.invalidate();
/// let lost = || async {
///     Ok(vec![Hazard::new("appendonly", "no", "a restart forgets writes", "appendonly yes")])
/// };
/// let refused = recheck.guard(Operation::Put, lost).await.unwrap_err();
/// assert_eq!(refused.kind(), ErrorKind::Config);
/// assert!(refused.message().contains("appendonly = no"));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Recheck {
    backend: &'static str,
    interval: Duration,
    accepted: bool,
    verdict: Mutex<Verdict>,
    /// Held by the one caller reading the settings.
    reading: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Verdict {
    /// When the settings were last read; `None` after a new connection.
    at: Option<Instant>,
    /// The refusal [`check`] gave then (`None`: safe, or accepted).
    refusal: Option<String>,
}

impl Recheck {
    /// A recheck every `interval` for a store of `backend` that has just
    /// passed [`check`] at open; `accepted` is the URI's
    /// [`ACCEPT_DATA_LOSS`] (then hazards found later are logged, never
    /// refused).
    pub fn new(backend: &'static str, interval: Duration, accepted: bool) -> Recheck {
        Recheck {
            backend,
            interval,
            accepted,
            verdict: Mutex::new(Verdict {
                at: Some(Instant::now()),
                refusal: None,
            }),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    /// The interval between reads.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The driver opened a new connection (maybe to another server): the
    /// next write reads the settings before it is sent.
    pub fn invalidate(&self) {
        self.lock().at = None;
    }

    /// Judge freshly read `hazards` as [`check`] does and keep the verdict.
    /// A change is logged: a warning when the server became unsafe, info
    /// when it is safe again.
    pub fn record(&self, hazards: &[Hazard]) {
        let refusal = check(self.backend, hazards, self.accepted)
            .err()
            .map(|e| e.message().to_string());
        let mut verdict = self.lock();
        match (&verdict.refusal, &refusal) {
            (None, Some(now)) => tracing::warn!(
                backend = self.backend,
                "durability re-check: writes refused: {now}"
            ),
            (Some(_), None) => tracing::info!(
                backend = self.backend,
                "durability re-check: the server is safe again; writes resume"
            ),
            _ => {}
        }
        verdict.at = Some(Instant::now());
        verdict.refusal = refusal;
    }

    /// Before the write `op`: `Ok`, or the refusal of the last check
    /// (an [`ErrorKind::Config`] error, nothing sent). Reads the settings
    /// with `inspect` first when they are due (see the type docs); an
    /// `inspect` error is returned as it is, and leaves the verdict alone.
    pub async fn guard<F, Fut>(&self, op: Operation, inspect: F) -> Result<()>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Hazard>>>,
    {
        let age = self.age();
        if age.is_some_and(|age| age < self.interval) {
            return self.verdict(op);
        }
        let reading = if age.is_some_and(|age| age < self.interval * 2) {
            match self.reading.try_lock() {
                Ok(reading) => reading,
                // Another caller is reading; the last verdict is young enough.
                Err(_) => return self.verdict(op),
            }
        } else {
            let reading = self.reading.lock().await;
            if self.age().is_some_and(|age| age < self.interval) {
                // Read by the caller we waited for.
                return self.verdict(op);
            }
            reading
        };
        let hazards = inspect().await?;
        self.record(&hazards);
        drop(reading);
        self.verdict(op)
    }

    fn age(&self) -> Option<Duration> {
        self.lock().at.map(|at| at.elapsed())
    }

    fn verdict(&self, op: Operation) -> Result<()> {
        match &self.lock().refusal {
            None => Ok(()),
            Some(refusal) => Err(Error::not_sent(
                ErrorKind::Config,
                self.backend,
                op,
                format!("durability re-check: {refusal}"),
            )),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Verdict> {
        // The verdict is two plain fields, valid even if a holder panicked.
        self.verdict.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_names_every_hazard_and_fix() {
        let hazards = [
            Hazard::new("fsync", "off", "an OS crash loses commits", "fsync = on"),
            Hazard::new(
                "full_page_writes",
                "off",
                "a power loss can tear pages",
                "full_page_writes = on",
            ),
        ];
        let e = check("postgres", &hazards, false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_eq!(e.backend(), "postgres");
        for text in [
            "fsync = off (an OS crash loses commits)",
            "full_page_writes = off",
            "fsync = on; full_page_writes = on",
            "accept_data_loss=true",
        ] {
            assert!(e.message().contains(text), "{text:?} missing from {e}");
        }
        assert!(check("postgres", &hazards, true).is_ok());
    }

    fn lost() -> Vec<Hazard> {
        vec![Hazard::new(
            "appendfsync",
            "everysec",
            "an OS crash forgets a second",
            "appendfsync always",
        )]
    }

    const SECOND: Duration = Duration::from_secs(1);

    /// Counts the reads a guard makes and answers with `found`.
    async fn guarded(
        recheck: &Recheck,
        reads: &std::cell::Cell<u32>,
        found: Vec<Hazard>,
    ) -> Result<()> {
        recheck
            .guard(Operation::Put, || async {
                reads.set(reads.get() + 1);
                Ok(found)
            })
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn reads_only_when_due_or_after_a_new_connection() {
        let recheck = Recheck::new("redis", SECOND, false);
        let reads = std::cell::Cell::new(0);
        guarded(&recheck, &reads, lost()).await.unwrap();
        assert_eq!(reads.get(), 0, "fresh after open");
        tokio::time::advance(SECOND).await;
        assert!(guarded(&recheck, &reads, lost()).await.is_err());
        assert_eq!(reads.get(), 1, "due after one interval");
        assert!(
            guarded(&recheck, &reads, vec![]).await.is_err(),
            "not due: last verdict"
        );
        assert_eq!(reads.get(), 1);
        recheck.invalidate();
        guarded(&recheck, &reads, vec![]).await.unwrap();
        assert_eq!(reads.get(), 2, "a new connection is read at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hazard_refuses_writes_until_the_server_is_safe_again() {
        let recheck = Recheck::new("redis", SECOND, false);
        let reads = std::cell::Cell::new(0);
        tokio::time::advance(SECOND).await;
        let e = guarded(&recheck, &reads, lost()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_eq!(e.sent(), Some(crate::Sent::No));
        assert_eq!(e.operation(), Some(Operation::Put));
        for text in [
            "appendfsync = everysec",
            "appendfsync always",
            "accept_data_loss=true",
        ] {
            assert!(e.message().contains(text), "{text:?} missing from {e}");
        }
        tokio::time::advance(SECOND).await;
        guarded(&recheck, &reads, vec![]).await.unwrap();
        assert_eq!(reads.get(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn accepted_hazards_never_refuse() {
        let recheck = Recheck::new("redis", SECOND, true);
        recheck.invalidate();
        let reads = std::cell::Cell::new(0);
        guarded(&recheck, &reads, lost()).await.unwrap();
        assert_eq!(reads.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_error_is_returned_and_keeps_the_verdict_due() {
        let recheck = Recheck::new("redis", SECOND, false);
        recheck.invalidate();
        let down = recheck
            .guard(Operation::Delete, || async {
                Err(Error::new(
                    ErrorKind::Unavailable,
                    "redis",
                    "connection refused",
                ))
            })
            .await
            .unwrap_err();
        assert_eq!(down.kind(), ErrorKind::Unavailable);
        let reads = std::cell::Cell::new(0);
        guarded(&recheck, &reads, vec![]).await.unwrap();
        assert_eq!(reads.get(), 1, "still due after the failed read");
    }

    /// While one caller reads, others go on with a verdict younger than two
    /// intervals, and wait for the read when it is older.
    #[tokio::test(start_paused = true)]
    async fn one_read_in_flight_and_no_write_on_a_verdict_two_intervals_old() {
        let recheck = Recheck::new("redis", SECOND, false);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let reads = std::cell::Cell::new(0);
        tokio::time::advance(SECOND).await;
        let slow = recheck.guard(Operation::Put, || async {
            reads.set(reads.get() + 1);
            let _ = released.await;
            Ok(lost())
        });
        let others = async {
            // Due, but the read is in flight: the last (safe) verdict.
            guarded(&recheck, &reads, lost()).await.unwrap();
            assert_eq!(reads.get(), 1, "one read in flight");
            tokio::time::advance(SECOND).await;
            // Two intervals old: this write waits for the read in flight.
            let waiting = guarded(&recheck, &reads, vec![]);
            let waited = async {
                tokio::task::yield_now().await;
                release.send(()).unwrap();
            };
            let (verdict, ()) = tokio::join!(waiting, waited);
            verdict
        };
        let (first, waited) = tokio::join!(slow, others);
        assert_eq!(first.unwrap_err().kind(), ErrorKind::Config);
        assert_eq!(
            waited.unwrap_err().kind(),
            ErrorKind::Config,
            "the in-flight read's verdict"
        );
        assert_eq!(reads.get(), 1);
    }
}
