//! The one place PostgreSQL and driver errors become bakery errors.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use bakery_core::{Error, ErrorKind};
use deadpool_postgres::{PoolError, TimeoutType};

/// The backend name carried by every error of this crate.
pub(crate) const BACKEND: &str = "postgres";

/// Which call failed; a write whose request was sent may have applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Opening the store: connecting, creating and checking the table.
    Open,
    /// `get`.
    Get,
    /// `put_if_version`.
    Put,
    /// `delete_if_version`.
    Delete,
    /// `watch`: opening the LISTEN session (never writes).
    Watch,
    /// `notify`: a `pg_notify` (never writes a row).
    Notify,
}

impl Op {
    fn is_write(self) -> bool {
        matches!(self, Op::Put | Op::Delete)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Open => "open",
            Op::Get => "get",
            Op::Put => "put_if_version",
            Op::Delete => "delete_if_version",
            Op::Watch => "watch",
            Op::Notify => "notify",
        })
    }
}

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

/// What the driver error is, as far as tokio-postgres lets us see (its kind
/// is private; its `Display` is one fixed phrase per kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driver {
    /// The connection task has ended (before or after our request went out).
    Closed,
    /// Reading or writing the socket failed.
    Io,
    /// TCP connect failed.
    Connect,
    /// `connect_timeout` passed.
    Timeout,
    /// The TLS handshake failed for a reason that will not go away
    /// (certificate, no TLS on the server).
    Tls,
    /// The TLS handshake was cut off by the network.
    TlsIo,
    /// Authentication failed on the client side (no password given, …).
    Auth,
    /// A configuration the driver rejects.
    Config,
    /// The server's reply made no sense (after the request was sent).
    Protocol,
    /// Anything else: a bug.
    Other,
}

fn driver_kind(e: &tokio_postgres::Error) -> Driver {
    if e.is_closed() {
        return Driver::Closed;
    }
    match e.to_string().as_str() {
        "error communicating with the server" => Driver::Io,
        "error connecting to server" => Driver::Connect,
        "timeout waiting for server" => Driver::Timeout,
        "error performing TLS handshake" => {
            let transient = sources(e).any(|s| {
                s.downcast_ref::<std::io::Error>().is_some_and(|io| {
                    use std::io::ErrorKind as K;
                    matches!(
                        io.kind(),
                        K::ConnectionReset
                            | K::ConnectionAborted
                            | K::BrokenPipe
                            | K::UnexpectedEof
                            | K::TimedOut
                    )
                })
            });
            if transient {
                Driver::TlsIo
            } else {
                Driver::Tls
            }
        }
        "authentication error" => Driver::Auth,
        "invalid configuration" | "invalid connection string" => Driver::Config,
        "unexpected message from server" | "error parsing response from server" => Driver::Protocol,
        _ => Driver::Other,
    }
}

/// The kind of a server-reported error, by SQLSTATE and severity.
pub(crate) fn classify_db(code: &str, severity: &str, phase: Phase, op: Op) -> ErrorKind {
    let class = code.get(..2).unwrap_or("");
    // A FATAL (or PANIC) ends the session. During a write's statement it may
    // come after the commit (a shutdown arriving while the commit waits for
    // a synchronous standby): never guess.
    if phase == Phase::Execute && op.is_write() && matches!(severity, "FATAL" | "PANIC") {
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
pub(crate) fn classify_driver(driver: Driver, phase: Phase, op: Op) -> ErrorKind {
    let sent = phase == Phase::Execute;
    match driver {
        Driver::Closed | Driver::Io | Driver::Protocol if sent && op.is_write() => {
            ErrorKind::Unknown
        }
        Driver::Closed | Driver::Io | Driver::Connect | Driver::Timeout | Driver::TlsIo => {
            ErrorKind::Unavailable
        }
        Driver::Tls | Driver::Auth | Driver::Config => ErrorKind::Config,
        Driver::Protocol | Driver::Other => ErrorKind::Internal,
    }
}

/// Map a driver error to a bakery error: the one mapper of this crate. The
/// driver error is kept as `source()` only; the message never holds the URI
/// or a password.
pub(crate) fn map_err(e: tokio_postgres::Error, phase: Phase, op: Op) -> Error {
    let (kind, detail) = match e.as_db_error() {
        Some(db) => (
            classify_db(db.code().code(), db.severity(), phase, op),
            format!(
                "{} {}: {}",
                db.severity(),
                db.code().code(),
                one_line(db.message())
            ),
        ),
        None => (classify_driver(driver_kind(&e), phase, op), chain(&e)),
    };
    Error::new(kind, BACKEND, describe(kind, phase, op, &detail)).with_source(e)
}

/// Map a pool checkout error.
pub(crate) fn map_pool_err(e: PoolError, op: Op, pool_size: usize) -> Error {
    match e {
        PoolError::Backend(e) => map_err(e, Phase::Connect, op),
        PoolError::Timeout(TimeoutType::Wait) => Error::new(
            ErrorKind::Unavailable,
            BACKEND,
            format!("{op}: all {pool_size} pooled connections stayed busy until the call timed out; nothing was sent"),
        ),
        PoolError::Timeout(_) => Error::new(
            ErrorKind::Unavailable,
            BACKEND,
            format!("{op}: opening a connection timed out; nothing was sent"),
        ),
        other => Error::new(
            ErrorKind::Internal,
            BACKEND,
            format!("{op}: connection pool: {}", one_line(&other.to_string())),
        ),
    }
}

/// The client-side deadline passed while the call was in `phase`.
pub(crate) fn timed_out(phase: Phase, op: Op, limit: Duration) -> Error {
    let kind = if phase == Phase::Execute && op.is_write() {
        ErrorKind::Unknown
    } else {
        ErrorKind::Unavailable
    };
    let detail = format!("no reply within {limit:?}");
    Error::new(kind, BACKEND, describe(kind, phase, op, &detail))
}

fn describe(kind: ErrorKind, phase: Phase, op: Op, detail: &str) -> String {
    match kind {
        ErrorKind::Unknown => {
            format!("{op} ({phase}): {detail}; the write may or may not have applied")
        }
        ErrorKind::Unavailable if op.is_write() => {
            format!("{op} ({phase}): {detail}; nothing was applied")
        }
        _ => format!("{op} ({phase}): {detail}"),
    }
}

fn sources<'a>(
    e: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(e.source(), |s| {
        let s: &'a (dyn StdError + 'static) = *s;
        s.source()
    })
}

/// An error and its causes on one line, `a: b: c`.
pub(crate) fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = one_line(&e.to_string());
    for source in sources(e) {
        let text = one_line(&source.to_string());
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPS: [Op; 6] = [
        Op::Open,
        Op::Get,
        Op::Put,
        Op::Delete,
        Op::Watch,
        Op::Notify,
    ];
    const PHASES: [Phase; 3] = [Phase::Connect, Phase::Prepare, Phase::Execute];

    #[test]
    fn sqlstates() {
        let cases = [
            ("28P01", ErrorKind::Config),
            ("28000", ErrorKind::Config),
            ("3D000", ErrorKind::Config),
            ("3F000", ErrorKind::Config),
            ("42P01", ErrorKind::Config),
            ("42501", ErrorKind::Config),
            ("42703", ErrorKind::Config),
            ("08006", ErrorKind::Unavailable),
            ("08001", ErrorKind::Unavailable),
            ("57P01", ErrorKind::Unavailable),
            ("57P02", ErrorKind::Unavailable),
            ("57P03", ErrorKind::Unavailable),
            ("57014", ErrorKind::Unavailable),
            ("53300", ErrorKind::Unavailable),
            ("40001", ErrorKind::Unavailable),
            ("40P01", ErrorKind::Unavailable),
            ("25006", ErrorKind::Unavailable),
            ("55P03", ErrorKind::Unavailable),
            ("22003", ErrorKind::Exhausted),
            ("22021", ErrorKind::InvalidInput),
            ("22P02", ErrorKind::Corrupt),
            ("23514", ErrorKind::Corrupt),
            ("XX001", ErrorKind::Corrupt),
            ("XX000", ErrorKind::Internal),
            ("23505", ErrorKind::Internal),
        ];
        for (code, kind) in cases {
            for op in OPS {
                for phase in PHASES {
                    assert_eq!(
                        classify_db(code, "ERROR", phase, op),
                        kind,
                        "{code} {op} {phase}"
                    );
                }
            }
        }
    }

    #[test]
    fn fatal_while_a_write_executes_is_unknown() {
        for code in ["57P01", "57P02", "08006", "XX000"] {
            for op in [Op::Put, Op::Delete] {
                assert_eq!(
                    classify_db(code, "FATAL", Phase::Execute, op),
                    ErrorKind::Unknown
                );
                assert_eq!(
                    classify_db(code, "PANIC", Phase::Execute, op),
                    ErrorKind::Unknown
                );
                assert_ne!(
                    classify_db(code, "FATAL", Phase::Connect, op),
                    ErrorKind::Unknown
                );
                assert_ne!(
                    classify_db(code, "FATAL", Phase::Prepare, op),
                    ErrorKind::Unknown
                );
            }
            assert_ne!(
                classify_db(code, "FATAL", Phase::Execute, Op::Get),
                ErrorKind::Unknown
            );
        }
        assert_eq!(
            classify_db("57P01", "FATAL", Phase::Execute, Op::Get),
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn lost_connections() {
        for driver in [Driver::Closed, Driver::Io] {
            for op in OPS {
                for phase in [Phase::Connect, Phase::Prepare] {
                    assert_eq!(classify_driver(driver, phase, op), ErrorKind::Unavailable);
                }
            }
            assert_eq!(
                classify_driver(driver, Phase::Execute, Op::Put),
                ErrorKind::Unknown
            );
            assert_eq!(
                classify_driver(driver, Phase::Execute, Op::Delete),
                ErrorKind::Unknown
            );
            for op in [Op::Get, Op::Watch, Op::Notify] {
                assert_eq!(
                    classify_driver(driver, Phase::Execute, op),
                    ErrorKind::Unavailable,
                    "{op}"
                );
            }
        }
        for driver in [Driver::Connect, Driver::Timeout, Driver::TlsIo] {
            assert_eq!(
                classify_driver(driver, Phase::Connect, Op::Put),
                ErrorKind::Unavailable
            );
        }
        for driver in [Driver::Tls, Driver::Auth, Driver::Config] {
            assert_eq!(
                classify_driver(driver, Phase::Connect, Op::Open),
                ErrorKind::Config
            );
        }
        assert_eq!(
            classify_driver(Driver::Protocol, Phase::Execute, Op::Put),
            ErrorKind::Unknown
        );
        assert_eq!(
            classify_driver(Driver::Protocol, Phase::Execute, Op::Get),
            ErrorKind::Internal
        );
        assert_eq!(
            classify_driver(Driver::Other, Phase::Execute, Op::Put),
            ErrorKind::Internal
        );
    }

    #[test]
    fn client_timeouts() {
        assert_eq!(
            timed_out(Phase::Execute, Op::Put, Duration::from_secs(1)).kind(),
            ErrorKind::Unknown
        );
        assert_eq!(
            timed_out(Phase::Execute, Op::Delete, Duration::from_secs(1)).kind(),
            ErrorKind::Unknown
        );
        assert_eq!(
            timed_out(Phase::Execute, Op::Get, Duration::from_secs(1)).kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(
            timed_out(Phase::Connect, Op::Put, Duration::from_secs(1)).kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(
            timed_out(Phase::Prepare, Op::Put, Duration::from_secs(1)).kind(),
            ErrorKind::Unavailable
        );
        let err = timed_out(Phase::Execute, Op::Put, Duration::from_millis(1500));
        assert_eq!(err.backend(), "postgres");
        assert!(err.message().contains("may or may not"), "{err}");
    }

    #[test]
    fn driver_errors_that_can_be_built_here() {
        let e = "postgres://u@h/db?port=x"
            .parse::<tokio_postgres::Config>()
            .unwrap_err();
        let err = map_err(e, Phase::Connect, Op::Open);
        assert_eq!(err.kind(), ErrorKind::Config);
        assert_eq!(err.backend(), "postgres");
        assert!(err.message().contains("port"), "{err}");
        assert!(StdError::source(&err).is_some());
    }
}
