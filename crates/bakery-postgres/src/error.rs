//! The one place PostgreSQL and driver errors become bakery errors.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use bakery_core::error::{cause_chain, one_line};
use bakery_core::{Error, ErrorKind, Operation};
use deadpool_postgres::{PoolError, TimeoutType};

use crate::BACKEND;

/// How far a call got; it decides whether a write may have applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Getting a connection: waiting for the pool, TCP, TLS, authentication.
    Connect,
    /// Preparing a statement (parse and describe only: nothing executes).
    Prepare,
    /// The statement has been sent.
    Execute,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Connect => "connect",
            Phase::Prepare => "prepare",
            Phase::Execute => "execute",
        })
    }
}

/// What a driver-side error is, read from what tokio-postgres exposes. Its
/// own kind is private; the typed signals are `is_closed()`, the type of
/// `source()` (an [`std::io::Error`] and its [`std::io::ErrorKind`], a
/// rustls error) and whether there is a source at all. Server errors
/// (`as_db_error()`) never get here: [`classify_db`] reads their SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driver {
    /// The connection task has ended, before or after our request went out
    /// (`is_closed()`). A socket that fails under a running statement ends
    /// up here too: the driver reports the I/O error to its connection task
    /// and `Closed` to the request.
    Closed,
    /// The socket failed: an I/O error of any kind but the ones below
    /// (reset, broken pipe, end of stream, timed out, a name that does not
    /// resolve, a TLS handshake cut off by the network, …).
    Io,
    /// The server was never reached: connection refused, or no local
    /// address to connect from. Nothing can have been sent.
    Connect,
    /// The driver's own timeout (`timeout waiting for server`; its async
    /// API reports `connect_timeout` as an I/O error of kind `TimedOut`).
    Timeout,
    /// The TLS handshake was refused for a reason that will not go away: a
    /// rustls error (certificate, alert, protocol), a host name TLS cannot
    /// use, or a server that offers no TLS when it is required.
    Tls,
    /// The client refused to authenticate the way the server asked
    /// (unsupported method, channel binding required, …).
    Auth,
    /// A configuration the driver rejects (no password for a server that
    /// asks for one, an unparsable connection string, …).
    Config,
    /// Bytes that break the protocol (an `io::Error` of kind `InvalidData`
    /// or `InvalidInput`: a reply that does not parse, a message that cannot
    /// be encoded, a SCRAM exchange that does not verify), or a reply that
    /// is not what the request expects (an error without a source: an
    /// unexpected message, a row or column count).
    Protocol,
    /// Anything else (a source of another type: a value that does not
    /// convert to or from SQL): a bug.
    Other,
}

fn driver_kind(e: &tokio_postgres::Error) -> Driver {
    if e.is_closed() {
        return Driver::Closed;
    }
    if any_cause(e, is_tls_refusal) {
        return Driver::Tls;
    }
    match e.source() {
        Some(source) => match source.downcast_ref::<std::io::Error>() {
            Some(io) => {
                use std::io::ErrorKind as K;
                match io.kind() {
                    K::InvalidData | K::InvalidInput => Driver::Protocol,
                    // Only a connect(2) fails this way: no connection ever
                    // existed, so nothing was sent.
                    K::ConnectionRefused | K::AddrNotAvailable => Driver::Connect,
                    _ => Driver::Io,
                }
            }
            None => by_phrase(e).unwrap_or(Driver::Other),
        },
        // No source and not closed: a reply that broke the request's
        // expectations (or the driver's timeout, told by its phrase). For a
        // sent write that is `Unknown`, so a reworded phrase errs safe.
        None => by_phrase(e).unwrap_or(Driver::Protocol),
    }
}

/// The fallback, and the only place message text decides a kind: the
/// driver's fixed `Display` phrase of its error kind, read only for driver
/// errors that carry no typed mark — no `source()` at all (the timeout), or
/// a source that is just a boxed string (TLS required but not offered,
/// authentication refused by the client, a configuration it rejects).
/// Every other driver error is decided by type in `driver_kind`. A phrase
/// that no longer matches leaves such an error `Protocol` (no source: a
/// sent write stays `Unknown`) or `Other` (`Internal`), and the test
/// `driver_tests::driver_phrases_are_what_the_fallback_reads`, which has
/// the driver produce each of them, fails.
const DRIVER_PHRASES: [(&str, Driver); 5] = [
    ("timeout waiting for server", Driver::Timeout),
    ("error performing TLS handshake", Driver::Tls),
    ("authentication error", Driver::Auth),
    ("invalid configuration", Driver::Config),
    ("invalid connection string", Driver::Config),
];

/// The fallback: [`DRIVER_PHRASES`] looked up by `e`'s own `Display`.
fn by_phrase(e: &tokio_postgres::Error) -> Option<Driver> {
    let text = e.to_string();
    DRIVER_PHRASES
        .iter()
        .find(|(phrase, _)| *phrase == text)
        .map(|&(_, driver)| driver)
}

/// A rustls error (as the `io::Error` tokio-rustls wraps it in, or bare),
/// or a host name rustls cannot use: TLS said no, and will again.
fn is_tls_refusal(e: &(dyn StdError + 'static)) -> bool {
    e.is::<rustls::Error>() || e.is::<rustls::pki_types::InvalidDnsNameError>()
}

/// Whether `found` holds for any cause of `e`, looking inside each
/// `io::Error` too (its own `source()` skips the error it wraps).
fn any_cause(e: &(dyn StdError + 'static), found: fn(&(dyn StdError + 'static)) -> bool) -> bool {
    sources(e).any(|cause| {
        found(cause)
            || cause
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| {
                    let inner: &(dyn StdError + 'static) = inner;
                    found(inner) || any_cause(inner, found)
                })
    })
}

/// The kind of a server-reported error, by SQLSTATE and severity.
pub(crate) fn classify_db(code: &str, severity: &str, phase: Phase, op: Operation) -> ErrorKind {
    let class = code.get(..2).unwrap_or("");
    // A FATAL (or PANIC) ends the session. During a write's statement it may
    // come after the commit (a shutdown arriving while the commit waits for
    // a synchronous standby): never guess.
    if phase == Phase::Execute && op.writes() && matches!(severity, "FATAL" | "PANIC") {
        return ErrorKind::Unknown;
    }
    match (class, code) {
        // Any other error aborted the statement's implicit transaction:
        // nothing applied, whatever the phase.
        (_, "22003") => ErrorKind::Exhausted, // bigint out of range: version + 1
        (_, "22001" | "22021" | "22P05") => ErrorKind::InvalidInput,
        ("22", _) => ErrorKind::Corrupt,
        (_, "23502" | "23514") => ErrorKind::Corrupt,
        (_, "XX001" | "XX002") => ErrorKind::Corrupt,
        (_, "40001" | "40P01") => ErrorKind::Unavailable,
        (_, "25006") => ErrorKind::Unavailable, // read-only: a standby, or a failover under way
        (_, "55P03" | "55006") => ErrorKind::Unavailable,
        ("08" | "53" | "57" | "58", _) => ErrorKind::Unavailable,
        ("28" | "42" | "0A" | "3D" | "3F", _) => ErrorKind::Config,
        _ => ErrorKind::Internal,
    }
}

/// The kind of a driver-side error.
pub(crate) fn classify_driver(driver: Driver, phase: Phase, op: Operation) -> ErrorKind {
    let sent = phase == Phase::Execute;
    match driver {
        Driver::Closed | Driver::Io | Driver::Protocol if sent && op.writes() => ErrorKind::Unknown,
        Driver::Closed | Driver::Io | Driver::Connect | Driver::Timeout => ErrorKind::Unavailable,
        Driver::Tls | Driver::Auth | Driver::Config => ErrorKind::Config,
        Driver::Protocol | Driver::Other => ErrorKind::Internal,
    }
}

/// The kind of `e`, an error of a call that got as far as `phase`: by
/// SQLSTATE for a server error, by the driver's typed signals otherwise.
pub(crate) fn classify(e: &tokio_postgres::Error, phase: Phase, op: Operation) -> ErrorKind {
    match e.as_db_error() {
        Some(db) => classify_db(db.code().code(), db.severity(), phase, op),
        None => classify_driver(driver_kind(e), phase, op),
    }
}

/// Whether `e`, met in `phase`, left the statement in flight: sent, and
/// no reply that says what became of it (the cases `classify_driver` makes
/// `Unknown` for a write). A server error is a reply: its statement rolled
/// back, or (FATAL during a write) `classify_db` says `Unknown` itself.
fn in_flight(e: &tokio_postgres::Error, phase: Phase) -> bool {
    phase == Phase::Execute
        && e.as_db_error().is_none()
        && matches!(
            driver_kind(e),
            Driver::Closed | Driver::Io | Driver::Protocol
        )
}

/// Map a driver error to a bakery error: the one mapper of this crate. The
/// driver error is kept as `source()` only; the message never holds the URI
/// or a password.
pub(crate) fn map_err(e: tokio_postgres::Error, phase: Phase, op: Operation) -> Error {
    let kind = classify(&e, phase, op);
    let detail = match e.as_db_error() {
        Some(db) => format!(
            "{} {}: {}",
            db.severity(),
            db.code().code(),
            one_line(db.message())
        ),
        None => cause_chain(&e),
    };
    failed(kind, op, phase, in_flight(&e, phase), &detail).with_source(e)
}

/// An error of a PostgreSQL client that is not the store (the migration
/// source, the outbox relay), as `backend`'s error: refused credentials,
/// missing objects and privileges and a server not set up for the request
/// (e.g. `wal_level` below logical) are configuration; a lost or shutting
/// down server is unavailable; the rest is internal. The message says what
/// the client was `doing`; the driver error is kept as `source()`.
///
/// ```no_run
/// use bakery_postgres::tokio_postgres::{self, NoTls};
///
/// # async fn demo() -> bakery_core::Result<()> {
/// let (client, connection) = tokio_postgres::connect("postgres://app@db/shop", NoTls)
///     .await
///     .map_err(|e| bakery_postgres::client_error(e, "myapp", "connecting"))?;
/// # drop((client, connection)); Ok(()) }
/// ```
pub fn client_error(e: tokio_postgres::Error, backend: &'static str, doing: &str) -> Error {
    let kind = match e.as_db_error().map(|db| db.code().code()) {
        Some(code) if code.starts_with("28") || code.starts_with("3D") => ErrorKind::Config,
        Some("42501" | "42P01" | "42704" | "55000") => ErrorKind::Config,
        Some(code) if code.starts_with("08") || code.starts_with("57") => ErrorKind::Unavailable,
        Some(_) => ErrorKind::Internal,
        None => match driver_kind(&e) {
            Driver::Closed | Driver::Io | Driver::Connect | Driver::Timeout => {
                ErrorKind::Unavailable
            }
            Driver::Tls | Driver::Auth | Driver::Config => ErrorKind::Config,
            Driver::Protocol | Driver::Other => ErrorKind::Internal,
        },
    };
    let detail = match e.as_db_error() {
        Some(db) => one_line(db.message()),
        None => cause_chain(&e),
    };
    Error::new(kind, backend, format!("{doing}: {detail}")).with_source(e)
}

/// Map a pool checkout error.
pub(crate) fn map_pool_err(e: PoolError, op: Operation, pool_size: usize) -> Error {
    let (kind, detail) = match e {
        PoolError::Backend(e) => return map_err(e, Phase::Connect, op),
        PoolError::Timeout(TimeoutType::Wait) => (
            ErrorKind::Unavailable,
            format!("all {pool_size} pooled connections stayed busy until the call timed out"),
        ),
        PoolError::Timeout(_) => (
            ErrorKind::Unavailable,
            "opening a connection timed out".to_string(),
        ),
        other => (
            ErrorKind::Internal,
            format!("connection pool: {}", one_line(&other.to_string())),
        ),
    };
    failed(kind, op, Phase::Connect, false, &detail)
}

/// The client-side deadline passed while the call was in `phase`.
pub(crate) fn timed_out(phase: Phase, op: Operation, limit: Duration) -> Error {
    let kind = if phase == Phase::Execute && op.writes() {
        ErrorKind::Unknown
    } else {
        ErrorKind::Unavailable
    };
    let detail = format!("no reply within {limit:?}");
    failed(kind, op, phase, phase == Phase::Execute, &detail)
}

/// The error of a call `op` that failed as `kind` in `phase`; `in_flight`
/// when its statement was sent and no reply told what became of it. The
/// wording about what applied is core's ([`Error::in_doubt`],
/// [`Error::not_sent`]).
fn failed(kind: ErrorKind, op: Operation, phase: Phase, in_flight: bool, detail: &str) -> Error {
    let detail = format!("{phase}: {detail}");
    let err = match kind {
        ErrorKind::Unknown => Error::in_doubt(BACKEND, op, detail),
        // A read (a write in flight is `Unknown`).
        ErrorKind::Unavailable if in_flight => Error::in_doubt(BACKEND, op, detail),
        _ if in_flight => Error::new(kind, BACKEND, format!("{op} failed: {detail}")).during(op),
        _ => Error::not_sent(kind, BACKEND, op, detail),
    };
    debug_assert_eq!(err.kind(), kind, "{err}");
    err
}

fn sources<'a>(
    e: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(e.source(), |s| {
        let s: &'a (dyn StdError + 'static) = *s;
        s.source()
    })
}

#[cfg(test)]
mod driver_tests;
#[cfg(test)]
mod server_tests;
#[cfg(test)]
mod support;
#[cfg(test)]
mod tests;
