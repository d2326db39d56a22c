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

/// Every call and every phase, for the tests.
#[cfg(test)]
const OPS: [Operation; 6] = [
    Operation::Open,
    Operation::Get,
    Operation::Put,
    Operation::Delete,
    Operation::Watch,
    Operation::Notify,
];
#[cfg(test)]
const PHASES: [Phase; 3] = [Phase::Connect, Phase::Prepare, Phase::Execute];

/// Every ERROR-severity SQLSTATE the mapper tells apart, with its kind:
/// classified alike by the unit tests and, produced on the real server, by
/// `server_tests`.
#[cfg(test)]
const SQLSTATES: [(&str, ErrorKind); 33] = [
    ("28P01", ErrorKind::Config),
    ("28000", ErrorKind::Config),
    ("3D000", ErrorKind::Config),
    ("3F000", ErrorKind::Config),
    ("0A000", ErrorKind::Config),
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
    ("55006", ErrorKind::Unavailable),
    ("58P01", ErrorKind::Unavailable),
    ("22003", ErrorKind::Exhausted),
    ("22001", ErrorKind::InvalidInput),
    ("22021", ErrorKind::InvalidInput),
    ("22P05", ErrorKind::InvalidInput),
    ("22P02", ErrorKind::Corrupt),
    ("22012", ErrorKind::Corrupt),
    ("23502", ErrorKind::Corrupt),
    ("23514", ErrorKind::Corrupt),
    ("XX001", ErrorKind::Corrupt),
    ("XX002", ErrorKind::Corrupt),
    ("XX000", ErrorKind::Internal),
    ("23505", ErrorKind::Internal),
];

/// `e` as every call would see it: `sent_write` for a write whose
/// statement was sent, `otherwise` for all other calls and phases.
#[cfg(test)]
fn assert_everywhere(
    e: &tokio_postgres::Error,
    sent_write: ErrorKind,
    otherwise: ErrorKind,
    what: &str,
) {
    for op in OPS {
        for phase in PHASES {
            let expected = if phase == Phase::Execute && op.writes() {
                sent_write
            } else {
                otherwise
            };
            assert_eq!(
                classify(e, phase, op),
                expected,
                "{what}: {op} {phase}: {e:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates() {
        for (code, kind) in SQLSTATES {
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
            for op in [Operation::Put, Operation::Delete] {
                for severity in ["FATAL", "PANIC"] {
                    let kind = classify_db(code, severity, Phase::Execute, op);
                    assert_eq!(kind, ErrorKind::Unknown, "{code} {severity} {op}");
                }
                for phase in [Phase::Connect, Phase::Prepare] {
                    let kind = classify_db(code, "FATAL", phase, op);
                    assert_ne!(kind, ErrorKind::Unknown, "{code} {phase} {op}");
                }
            }
            assert_ne!(
                classify_db(code, "FATAL", Phase::Execute, Operation::Get),
                ErrorKind::Unknown
            );
        }
        assert_eq!(
            classify_db("57P01", "FATAL", Phase::Execute, Operation::Get),
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
            for op in [Operation::Put, Operation::Delete] {
                assert_eq!(
                    classify_driver(driver, Phase::Execute, op),
                    ErrorKind::Unknown,
                    "{op}"
                );
            }
            for op in [Operation::Get, Operation::Watch, Operation::Notify] {
                assert_eq!(
                    classify_driver(driver, Phase::Execute, op),
                    ErrorKind::Unavailable,
                    "{op}"
                );
            }
        }
        for driver in [Driver::Connect, Driver::Timeout] {
            assert_eq!(
                classify_driver(driver, Phase::Connect, Operation::Put),
                ErrorKind::Unavailable
            );
        }
        for driver in [Driver::Tls, Driver::Auth, Driver::Config] {
            assert_eq!(
                classify_driver(driver, Phase::Connect, Operation::Open),
                ErrorKind::Config
            );
        }
        let cases = [
            (Driver::Protocol, Operation::Put, ErrorKind::Unknown),
            (Driver::Protocol, Operation::Get, ErrorKind::Internal),
            (Driver::Other, Operation::Put, ErrorKind::Internal),
        ];
        for (driver, op, kind) in cases {
            let found = classify_driver(driver, Phase::Execute, op);
            assert_eq!(found, kind, "{driver:?} {op}");
        }
    }

    #[test]
    fn client_timeouts() {
        let cases = [
            (Phase::Execute, Operation::Put, ErrorKind::Unknown),
            (Phase::Execute, Operation::Delete, ErrorKind::Unknown),
            (Phase::Execute, Operation::Get, ErrorKind::Unavailable),
            (Phase::Connect, Operation::Put, ErrorKind::Unavailable),
            (Phase::Prepare, Operation::Put, ErrorKind::Unavailable),
        ];
        for (phase, op, kind) in cases {
            let err = timed_out(phase, op, Duration::from_secs(1));
            assert_eq!(err.kind(), kind, "{op} {phase}");
        }
        let err = timed_out(Phase::Execute, Operation::Put, Duration::from_millis(1500));
        assert_eq!(err.backend(), "postgres");
        assert!(err.message().contains("may or may not"), "{err}");
    }

    #[test]
    fn driver_errors_that_can_be_built_here() {
        let e = "postgres://u@h/db?port=x"
            .parse::<tokio_postgres::Config>()
            .unwrap_err();
        let err = map_err(e, Phase::Connect, Operation::Open);
        assert_eq!(err.kind(), ErrorKind::Config);
        assert_eq!(err.backend(), "postgres");
        assert!(err.message().contains("port"), "{err}");
        assert!(StdError::source(&err).is_some());
    }
}

/// Real driver errors, made by the driver itself against loopback peers
/// that play a server's part: what the typed signals and the phrase
/// fallback see, and what each becomes.
#[cfg(test)]
mod driver_tests {
    use super::*;
    use std::future::Future;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// `AuthenticationOk` then `ReadyForQuery (idle)`: a finished startup.
    const STARTUP_DONE: &[u8] = b"R\0\0\0\x08\0\0\0\0Z\0\0\0\x05I";
    /// No test here waits longer for the driver.
    const LIMIT: Duration = Duration::from_secs(10);

    /// A peer on loopback that runs `script` on the first connection.
    async fn peer<F, Fut>(script: F) -> SocketAddr
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            if let Ok((socket, _)) = listener.accept().await {
                script(socket).await;
            }
        });
        addr
    }

    /// Read one untagged message (the startup packet or an SSLRequest).
    async fn read_untagged(socket: &mut TcpStream) -> Vec<u8> {
        let mut len = [0u8; 4];
        socket.read_exact(&mut len).await.unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize - 4];
        socket.read_exact(&mut body).await.unwrap();
        body
    }

    /// Answer the startup packet with `reply`, then hold the socket open
    /// until the client goes.
    async fn startup_reply(mut socket: TcpStream, reply: &'static [u8]) {
        read_untagged(&mut socket).await;
        socket.write_all(reply).await.unwrap();
        let _ = socket.read(&mut [0u8; 64]).await;
    }

    fn config(addr: SocketAddr) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(addr.port())
            .user("bk")
            .dbname("bk")
            .connect_timeout(Duration::from_secs(5));
        config
    }

    async fn connect_err(config: &tokio_postgres::Config) -> tokio_postgres::Error {
        let connect = config.connect(tokio_postgres::NoTls);
        match tokio::time::timeout(LIMIT, connect).await.expect("hung") {
            Ok(_) => panic!("the connect must fail"),
            Err(e) => e,
        }
    }

    /// Connect with bakery's own TLS connector (`sslmode=require`).
    async fn connect_tls_err(addr: SocketAddr) -> tokio_postgres::Error {
        let uri = format!(
            "postgres://bk@127.0.0.1:{}/bk?sslmode=require&connect_timeout=5",
            addr.port()
        );
        let config = crate::PostgresConfig::from_uri(&uri).unwrap();
        let tls = crate::store::tls::connector(&config).unwrap();
        let driver_config = config.driver_config();
        let connect = driver_config.connect(tls);
        match tokio::time::timeout(LIMIT, connect).await.expect("hung") {
            Ok(_) => panic!("the connect must fail"),
            Err(e) => e,
        }
    }

    /// A client whose startup went through; its connection task runs.
    async fn connected(addr: SocketAddr) -> tokio_postgres::Client {
        let (client, connection) = config(addr).connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    /// The error of an UPDATE sent to a peer that completes the startup,
    /// reads the statement and then runs `reply` instead of answering it.
    async fn sent_write_err<F, Fut>(reply: F) -> tokio_postgres::Error
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let addr = peer(move |mut socket| async move {
            read_untagged(&mut socket).await;
            socket.write_all(STARTUP_DONE).await.unwrap();
            let _ = socket.read(&mut [0u8; 512]).await; // the statement
            reply(socket).await;
        })
        .await;
        let client = connected(addr).await;
        client
            .simple_query("UPDATE t SET v = v + 1")
            .await
            .unwrap_err()
    }

    /// What the driver error of a failed open is, and what it becomes.
    fn assert_connect(e: &tokio_postgres::Error, driver: Driver, kind: ErrorKind) {
        assert_eq!(driver_kind(e), driver, "{e:?}");
        assert_eq!(classify(e, Phase::Connect, Operation::Open), kind, "{e:?}");
    }

    /// A 127.0.0.1 port nobody listens on (just released by the kernel).
    fn unused_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn io_kind(e: &tokio_postgres::Error) -> Option<std::io::ErrorKind> {
        e.source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .map(std::io::Error::kind)
    }

    /// The fallback reads the driver's `Display` for errors that carry no
    /// typed mark. Each phrase of [`DRIVER_PHRASES`] is produced here by
    /// the driver: a reworded one fails this test, not a caller.
    #[tokio::test]
    async fn driver_phrases_are_what_the_fallback_reads() {
        let mut seen: Vec<(String, Driver)> = Vec::new();
        let mut check =
            |e: tokio_postgres::Error, phrase: &str, driver: Driver, kind: ErrorKind| {
                assert_eq!(e.to_string(), phrase, "{e:?}");
                assert!(!e.is_closed() && e.as_db_error().is_none(), "{e:?}");
                assert!(
                    e.source().is_none_or(|s| !s.is::<std::io::Error>()),
                    "typed, not a fallback case: {e:?}"
                );
                assert_connect(&e, driver, kind);
                seen.push((phrase.to_string(), driver));
                e
            };

        // The driver's timeout (its constructor is public for its own
        // blocking wrapper; no source at all).
        check(
            tokio_postgres::Error::__private_api_timeout(),
            "timeout waiting for server",
            Driver::Timeout,
            ErrorKind::Unavailable,
        );

        // `sslmode=require`, and the server answers the SSLRequest "N".
        let addr = peer(|mut socket| async move {
            read_untagged(&mut socket).await;
            socket.write_all(b"N").await.unwrap();
            let _ = socket.read(&mut [0u8; 64]).await;
        })
        .await;
        let e = check(
            connect_tls_err(addr).await,
            "error performing TLS handshake",
            Driver::Tls,
            ErrorKind::Config,
        );
        assert_eq!(
            cause_chain(&e),
            "error performing TLS handshake: server does not support TLS"
        );

        // The server asks for Kerberos V5, which the driver cannot do.
        let addr = peer(|socket| startup_reply(socket, b"R\0\0\0\x08\0\0\0\x02")).await;
        check(
            connect_err(&config(addr)).await,
            "authentication error",
            Driver::Auth,
            ErrorKind::Config,
        );

        // The server asks for a password and none is configured.
        let addr = peer(|socket| startup_reply(socket, b"R\0\0\0\x08\0\0\0\x03")).await;
        let e = check(
            connect_err(&config(addr)).await,
            "invalid configuration",
            Driver::Config,
            ErrorKind::Config,
        );
        assert_eq!(cause_chain(&e), "invalid configuration: password missing");
        // No host at all.
        check(
            connect_err(&tokio_postgres::Config::new()).await,
            "invalid configuration",
            Driver::Config,
            ErrorKind::Config,
        );

        check(
            "postgres://u@h/db?port=x"
                .parse::<tokio_postgres::Config>()
                .unwrap_err(),
            "invalid connection string",
            Driver::Config,
            ErrorKind::Config,
        );

        let mut listed: Vec<(String, Driver)> = DRIVER_PHRASES
            .iter()
            .map(|&(phrase, driver)| (phrase.to_string(), driver))
            .collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        seen.dedup();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen, listed,
            "every phrase the fallback reads is produced here"
        );
    }

    /// Connection refused on an unused port: typed (`ConnectionRefused`),
    /// nothing was sent, `Unavailable` whatever the call.
    #[tokio::test]
    async fn connection_refused_is_unavailable() {
        let mut config = tokio_postgres::Config::new();
        config.host("127.0.0.1").port(unused_port());
        let e = connect_err(&config).await;
        assert_eq!(
            io_kind(&e),
            Some(std::io::ErrorKind::ConnectionRefused),
            "{e:?}"
        );
        assert_eq!(driver_kind(&e), Driver::Connect);
        assert_everywhere(
            &e,
            ErrorKind::Unavailable,
            ErrorKind::Unavailable,
            "refused",
        );
        let err = map_err(e, Phase::Connect, Operation::Put);
        assert!(err.message().contains("nothing was applied"), "{err}");
        assert!(!err.outcome_unknown());
    }

    /// The peer goes away during startup: its end of stream is `Closed`, a
    /// reset is an I/O error. Both `Unavailable` before anything was sent.
    #[tokio::test]
    async fn a_peer_lost_during_startup_is_unavailable() {
        let addr = peer(|mut socket| async move {
            read_untagged(&mut socket).await;
        })
        .await;
        let e = connect_err(&config(addr)).await;
        assert!(e.is_closed(), "{e:?}");
        assert_eq!(
            classify(&e, Phase::Connect, Operation::Open),
            ErrorKind::Unavailable
        );

        let addr = peer(|mut socket| async move {
            read_untagged(&mut socket).await;
            socket.set_zero_linger().unwrap();
        })
        .await;
        let e = connect_err(&config(addr)).await;
        assert_eq!(
            io_kind(&e),
            Some(std::io::ErrorKind::ConnectionReset),
            "{e:?}"
        );
        assert_eq!(driver_kind(&e), Driver::Io);
        for op in OPS {
            assert_eq!(classify(&e, Phase::Connect, op), ErrorKind::Unavailable);
        }
    }

    /// TLS: the network cutting the handshake off is `Unavailable`; rustls
    /// refusing it (here: the server's fatal alert) is `Config`, found by
    /// the rustls error's type inside the `io::Error`.
    #[tokio::test]
    async fn tls_cut_off_is_unavailable_and_tls_refused_is_config() {
        let addr = peer(|mut socket| async move {
            read_untagged(&mut socket).await;
            socket.write_all(b"S").await.unwrap();
            let _ = socket.read(&mut [0u8; 1024]).await; // the ClientHello
        })
        .await;
        let e = connect_tls_err(addr).await;
        assert_eq!(
            io_kind(&e),
            Some(std::io::ErrorKind::UnexpectedEof),
            "{e:?}"
        );
        assert_connect(&e, Driver::Io, ErrorKind::Unavailable);

        let addr = peer(|mut socket| async move {
            read_untagged(&mut socket).await;
            socket.write_all(b"S").await.unwrap();
            let _ = socket.read(&mut [0u8; 1024]).await; // the ClientHello
                                                         // Alert record: fatal (2), handshake_failure (40).
            socket
                .write_all(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28])
                .await
                .unwrap();
            let _ = socket.read(&mut [0u8; 64]).await;
        })
        .await;
        let e = connect_tls_err(addr).await;
        let rustls_error = e
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        assert!(
            matches!(rustls_error, Some(rustls::Error::AlertReceived(_))),
            "{e:?}"
        );
        assert_connect(&e, Driver::Tls, ErrorKind::Config);
    }

    /// A peer that does not speak the protocol at startup: a reply that
    /// does not parse (typed: `InvalidData`) or that is not what startup
    /// expects (no source). `Internal`: retrying will not help.
    #[tokio::test]
    async fn a_peer_breaking_the_protocol_at_startup_is_internal() {
        let replies: [(&[u8], _); 2] = [
            // A message length below the header's own 4 bytes.
            (b"R\0\0\0\x02", Some(std::io::ErrorKind::InvalidData)),
            // ReadyForQuery where authentication belongs.
            (b"Z\0\0\0\x05I", None),
        ];
        for (reply, io) in replies {
            let addr = peer(move |socket| startup_reply(socket, reply)).await;
            let e = connect_err(&config(addr)).await;
            match io {
                Some(io) => assert_eq!(io_kind(&e), Some(io), "{e:?}"),
                None => assert!(e.source().is_none() && !e.is_closed(), "{e:?}"),
            }
            assert_connect(&e, Driver::Protocol, ErrorKind::Internal);
        }
    }

    /// The issue's case. A statement was sent and the connection ended
    /// before its reply (end of stream, or a reset): the driver says
    /// `Closed` (typed) — `Unknown` for a write, `Unavailable` otherwise.
    #[tokio::test]
    async fn connection_lost_after_a_write_was_sent_is_unknown() {
        for reset in [false, true] {
            let e = sent_write_err(move |socket| async move {
                if reset {
                    socket.set_zero_linger().unwrap();
                }
            })
            .await;
            assert!(e.is_closed(), "reset {reset}: {e:?}");
            assert_everywhere(&e, ErrorKind::Unknown, ErrorKind::Unavailable, "lost");
            let err = map_err(e, Phase::Execute, Operation::Put);
            assert!(err.message().contains("may or may not"), "{err}");
        }
    }

    /// A reply to a sent statement that breaks the protocol: one that does
    /// not parse (an ErrorResponse without its fields; typed:
    /// `InvalidInput`) or one the request does not expect (no source).
    /// `Unknown` for a write (it may have run), `Internal` otherwise.
    #[tokio::test]
    async fn a_broken_reply_to_a_sent_write_is_unknown() {
        for reply in [&b"E\0\0\0\x05\0"[..], &b"n\0\0\0\x04"[..]] {
            let e = sent_write_err(move |mut socket| async move {
                socket.write_all(reply).await.unwrap();
                let _ = socket.read(&mut [0u8; 64]).await;
            })
            .await;
            assert!(!e.is_closed() && e.as_db_error().is_none(), "{e:?}");
            assert_eq!(driver_kind(&e), Driver::Protocol, "{e:?}");
            assert_everywhere(&e, ErrorKind::Unknown, ErrorKind::Internal, "broken reply");
        }
    }
}

/// Server errors of every SQLSTATE class the mapper tells apart, produced
/// on the real server (`BAKERY_POSTGRES_URI`) by the conditions that cause
/// them, and what each becomes.
#[cfg(test)]
mod server_tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio_postgres::{Client, NoTls};

    fn server(test: &str) -> Option<String> {
        let uri = bakery_testkit::server_uri("BAKERY_POSTGRES_URI", test)?;
        // The driver does not know bakery's options.
        Some(uri.split('?').next().unwrap_or(&uri).to_string())
    }

    async fn client(uri: &str) -> Client {
        let (client, connection) = tokio_postgres::connect(uri, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    fn unique(prefix: &str) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        format!(
            "{prefix}_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    async fn fails(client: &Client, sql: &str) -> tokio_postgres::Error {
        match client.batch_execute(sql).await {
            Ok(()) => panic!("{sql}: did not fail"),
            Err(e) => e,
        }
    }

    /// A table `t` of rows 1 and 2, on its own, dropped by `drop_table`.
    async fn table(uri: &str) -> String {
        let t = unique("bk_err");
        client(uri)
            .await
            .batch_execute(&format!(
                "CREATE TABLE {t} (id INT PRIMARY KEY, v INT); INSERT INTO {t} VALUES (1, 0), (2, 0)"
            ))
            .await
            .unwrap();
        t
    }

    async fn drop_table(uri: &str, t: &str) {
        let _ = client(uri)
            .await
            .batch_execute(&format!("DROP TABLE IF EXISTS {t}"))
            .await;
    }

    /// The conditions that one batch of SQL on a session of its own
    /// produces, by SQLSTATE.
    const BY_SQL: [(&str, &str); 15] = [
        ("42P01", "SELECT * FROM bk_no_such_table"),
        ("42703", "SELECT bk_no_such_column FROM (VALUES (1)) v(x)"),
        (
            "0A000",
            "CREATE TEMP TABLE t (v INT); SELECT count(*) FROM t FOR UPDATE",
        ),
        ("3F000", "CREATE TABLE bk_no_such_schema.t (v INT)"),
        ("22003", "SELECT 9223372036854775807::bigint + 1"),
        (
            "22001",
            "CREATE TEMP TABLE t (v VARCHAR(2)); INSERT INTO t VALUES ('abc')",
        ),
        ("22P05", r#"SELECT '"\u0000"'::jsonb"#),
        ("22P02", "SELECT 'x'::int"),
        ("22012", "SELECT 1 / 0"),
        (
            "23502",
            "CREATE TEMP TABLE t (v INT NOT NULL); INSERT INTO t VALUES (NULL)",
        ),
        (
            "23514",
            "CREATE TEMP TABLE t (v INT CHECK (v > 0)); INSERT INTO t VALUES (0)",
        ),
        (
            "23505",
            "CREATE TEMP TABLE t (v INT PRIMARY KEY); INSERT INTO t VALUES (1), (1)",
        ),
        // Dropping a table an open cursor of the session still reads.
        (
            "55006",
            "CREATE TEMP TABLE t (v INT); BEGIN; DECLARE c CURSOR FOR SELECT * FROM t; \
             FETCH 1 FROM c; DROP TABLE t",
        ),
        ("57014", "SET statement_timeout = 50; SELECT pg_sleep(5)"),
        ("58P01", "SELECT pg_read_file('bk_no_such_file')"),
    ];

    /// The error a condition produces on the server.
    async fn produce(uri: &str, code: &str) -> tokio_postgres::Error {
        let c = client(uri).await;
        if let Some((_, sql)) = BY_SQL.iter().find(|(by, _)| *by == code) {
            return fails(&c, sql).await;
        }
        match code {
            // A text parameter with a NUL in it, as a key would send it.
            "22021" => c
                .query("SELECT $1::text", &[&"a\0b"])
                .await
                .expect_err("NUL in text"),
            // A write in a read-only session (as on a standby).
            "25006" => {
                c.batch_execute("SET default_transaction_read_only = on")
                    .await
                    .unwrap();
                fails(&c, "CREATE TABLE bk_never_made (v INT)").await
            }
            // A row lock another session holds, asked for with NOWAIT.
            "55P03" => {
                let t = table(uri).await;
                let mut holder = client(uri).await;
                let tx = holder.transaction().await.unwrap();
                tx.batch_execute(&format!("SELECT * FROM {t} WHERE id = 1 FOR UPDATE"))
                    .await
                    .unwrap();
                let e = fails(
                    &c,
                    &format!("SELECT * FROM {t} WHERE id = 1 FOR UPDATE NOWAIT"),
                )
                .await;
                tx.rollback().await.unwrap();
                drop_table(uri, &t).await;
                e
            }
            // A REPEATABLE READ transaction updating a row another session
            // changed after its snapshot.
            "40001" => {
                let t = table(uri).await;
                let other = client(uri).await;
                c.batch_execute(&format!(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM {t}"
                ))
                .await
                .unwrap();
                other
                    .batch_execute(&format!("UPDATE {t} SET v = v + 1 WHERE id = 1"))
                    .await
                    .unwrap();
                let e = fails(&c, &format!("UPDATE {t} SET v = v + 1 WHERE id = 1")).await;
                drop(c);
                drop_table(uri, &t).await;
                e
            }
            // Two transactions each waiting for the other's row.
            "40P01" => {
                let t = table(uri).await;
                let other = client(uri).await;
                for (session, id) in [(&c, 1), (&other, 2)] {
                    // Session-level only; speeds the detector up.
                    let _ = session
                        .batch_execute("SET deadlock_timeout = '100ms'")
                        .await;
                    session
                        .batch_execute(&format!("BEGIN; UPDATE {t} SET v = 1 WHERE id = {id}"))
                        .await
                        .unwrap();
                }
                let (cross_a, cross_b) = (
                    format!("UPDATE {t} SET v = 2 WHERE id = 2"),
                    format!("UPDATE {t} SET v = 2 WHERE id = 1"),
                );
                let (a, b) = tokio::join!(c.batch_execute(&cross_a), other.batch_execute(&cross_b));
                drop((c, other));
                drop_table(uri, &t).await;
                match (a, b) {
                    (Err(e), _) | (_, Err(e)) => e,
                    _ => panic!("no deadlock was detected"),
                }
            }
            // No safe way to cause the others on a server other tests share
            // (a refused login or a shutdown arrive as FATAL, tested apart):
            // the server raises them as a PL/pgSQL exception instead.
            _ => {
                fails(
                    &c,
                    &format!(
                        "DO $$ BEGIN RAISE EXCEPTION 'bakery test' USING ERRCODE = '{code}'; END $$"
                    ),
                )
                .await
            }
        }
    }

    /// Every ERROR-severity SQLSTATE the mapper tells apart: the same kind
    /// whatever the call and however far it got (the statement's implicit
    /// transaction rolled back).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_errors_are_classified_by_sqlstate() {
        let Some(uri) = server("sqlstates") else {
            return;
        };
        for (code, kind) in SQLSTATES {
            let e = produce(&uri, code).await;
            let db = e.as_db_error().unwrap_or_else(|| panic!("{code}: {e:?}"));
            assert_eq!(db.code().code(), code, "{e:?}");
            assert_eq!(db.severity(), "ERROR", "{e:?}");
            for op in OPS {
                for phase in PHASES {
                    assert_eq!(classify(&e, phase, op), kind, "{code} {op} {phase}");
                }
            }
            let err = map_err(e, Phase::Execute, Operation::Put);
            assert_eq!(err.kind(), kind);
            assert!(err.message().contains(&format!("ERROR {code}")), "{err}");
            assert!(StdError::source(&err).is_some());
        }
    }

    /// A session the server ends (`pg_terminate_backend`, as a shutdown or
    /// a failover does): FATAL 57P01 under a running statement, `Closed`
    /// for a statement sent afterwards. `Unknown` for a write that was
    /// sent, `Unavailable` for everything else.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_terminated_session_is_unknown_only_for_a_sent_write() {
        let Some(uri) = server("terminated") else {
            return;
        };
        let admin = client(&uri).await;
        let terminate = |pid: i32| {
            let admin = &admin;
            async move {
                let row = admin
                    .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                    .await
                    .unwrap();
                assert!(row.get::<_, bool>(0));
            }
        };

        // Under a running statement.
        let victim = client(&uri).await;
        let pid: i32 = victim
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let running =
            tokio::spawn(async move { victim.batch_execute("SELECT pg_sleep(30)").await });
        wait_until(&admin, pid, "active").await;
        terminate(pid).await;
        let e = running.await.unwrap().expect_err("terminated");
        let db = e.as_db_error().unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!(
            (db.severity(), db.code().code()),
            ("FATAL", "57P01"),
            "{e:?}"
        );
        assert_everywhere(
            &e,
            ErrorKind::Unknown,
            ErrorKind::Unavailable,
            "under a statement",
        );
        let err = map_err(e, Phase::Execute, Operation::Delete);
        assert!(err.message().contains("may or may not"), "{err}");

        // Idle when terminated: the next statement meets a closed connection.
        let victim = client(&uri).await;
        let pid: i32 = victim
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        terminate(pid).await;
        tokio::time::timeout(Duration::from_secs(10), async {
            while !victim.is_closed() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the driver saw the session end");
        let e = victim.batch_execute("SELECT 1").await.unwrap_err();
        assert!(e.is_closed(), "{e:?}");
        assert_everywhere(&e, ErrorKind::Unknown, ErrorKind::Unavailable, "idle");
    }

    async fn wait_until(admin: &Client, pid: i32, state: &str) {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let row = admin
                    .query_opt(
                        "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = $2",
                        &[&pid, &state],
                    )
                    .await
                    .unwrap();
                if row.is_some() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("backend {pid} never became {state}"));
    }

    /// Refusals at connect, as FATAL errors of the startup: no such
    /// database (3D000), no such role (28000), a wrong password (28P01,
    /// only where the server asks for one). `Config`.
    #[tokio::test]
    async fn refused_logins_are_config() {
        let Some(uri) = server("logins") else {
            return;
        };
        let base: tokio_postgres::Config = uri.parse().unwrap();
        let connect = |mut config: tokio_postgres::Config| async move {
            config.connect_timeout(Duration::from_secs(5));
            config.connect(NoTls).await.map(|_| ())
        };
        let mut no_db = base.clone();
        no_db.dbname("bk_no_such_database");
        let mut no_role = base.clone();
        no_role.user("bk_no_such_role");
        for (config, code) in [(no_db, "3D000"), (no_role, "28000")] {
            let e = connect(config).await.expect_err(code);
            let db = e.as_db_error().unwrap_or_else(|| panic!("{e:?}"));
            assert_eq!((db.severity(), db.code().code()), ("FATAL", code), "{e:?}");
            for op in OPS {
                assert_eq!(
                    classify(&e, Phase::Connect, op),
                    ErrorKind::Config,
                    "{code}"
                );
            }
        }
        let mut wrong_password = base.clone();
        wrong_password.password("bk-wrong-password");
        match connect(wrong_password).await {
            Ok(()) => {
                eprintln!("logins: 28P01 skipped: the server does not check passwords (trust)")
            }
            Err(e) => {
                assert_eq!(e.code().map(|c| c.code()), Some("28P01"), "{e:?}");
                assert_eq!(
                    classify(&e, Phase::Connect, Operation::Open),
                    ErrorKind::Config
                );
            }
        }
    }
}
