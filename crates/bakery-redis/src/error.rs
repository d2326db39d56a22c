//! The one place Redis failures become bakery errors.

use std::fmt;
use std::time::Duration;

use bakery_core::error::cause_chain;
use bakery_core::{Error, ErrorKind, Key, Operation};
use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind};

use crate::BACKEND;

/// Where in a store call a failure happened; with the call's [`Operation`]
/// it decides whether the call may have applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Connecting, authenticating, selecting the database, loading scripts.
    Connect,
    /// A read that changes nothing: `get`, or the `WATCH`/`HMGET` step of a
    /// transaction (nothing of the write has been sent yet).
    Read,
    /// A write of `put_if_version` or `delete_if_version` has been (or may
    /// have been) sent: the `EVALSHA` of the script strategy, the
    /// `MULTI … EXEC` of the watch strategy.
    Write,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Connect => "connect",
            Phase::Read => "read",
            Phase::Write => "write",
        })
    }
}

/// What went wrong: a driver error or our own per-call timeout.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An error from the redis crate (I/O, protocol, or a server error reply).
    Redis(RedisError),
    /// No reply within the configured `timeout_ms`.
    Timeout(Duration),
}

impl From<RedisError> for Failure {
    fn from(e: RedisError) -> Self {
        Failure::Redis(e)
    }
}

/// Server error codes that mean "refused before it took effect, try later".
const UNAVAILABLE_CODES: &[&str] = &[
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "READONLY",
    "OOM",
    "MISCONF",
    "NOREPLICAS",
];

/// Server error codes that mean the credentials or permissions are wrong.
const CONFIG_CODES: &[&str] = &["NOAUTH", "WRONGPASS", "NOPERM"];

/// Server error codes of Redis Cluster redirections: this backend speaks to
/// one primary, not to a cluster.
const CLUSTER_CODES: &[&str] = &["MOVED", "ASK", "CROSSSLOT"];

/// Map a failure of store call `op`, in `phase`, on `key` to a bakery error.
///
/// - Connection refused (nothing was sent) → `Unavailable` in every phase.
/// - I/O errors, a dropped connection, a garbled reply or our timeout →
///   `Unknown` once a write may have been sent ([`Phase::Write`]), else
///   `Unavailable`.
/// - Error replies: the server refused the command, so it did not apply.
///   `LOADING`, `BUSY`, `TRYAGAIN`, `MASTERDOWN`, `READONLY`, `OOM`,
///   `MISCONF` … → `Unavailable`; `NOAUTH`, `WRONGPASS`, `NOPERM` and a
///   client-side authentication failure → `Config`; `WRONGTYPE` → `Corrupt`
///   naming the key; cluster redirections → `Config`; anything else
///   → `Internal`.
///
/// The driver error is kept as the `source()` only; it never carries the
/// password.
pub(crate) fn map_err(failure: Failure, op: Operation, phase: Phase, key: Option<&Key>) -> Error {
    let subject = key.map(|key| format!("key `{key}`: ")).unwrap_or_default();
    let e = match failure {
        Failure::Timeout(after) => {
            return reply_lost(
                op,
                phase,
                format!("{subject}no reply within {after:?} ({phase})"),
            )
        }
        Failure::Redis(e) => e,
    };
    let code = server_code(&e);
    let code = code.as_deref();
    let detail = cause_chain(&e);
    // A TLS handshake that fails on the certificate will fail the same way
    // next time: a configuration problem (CA, host name), not an outage.
    let bad_certificate =
        phase == Phase::Connect && e.to_string().to_ascii_lowercase().contains("certificate");
    let kind = match e.kind() {
        _ if e.is_connection_refusal() => ErrorKind::Unavailable,
        _ if bad_certificate => ErrorKind::Config,
        RedisKind::Io | RedisKind::Parse => {
            let detail = format!("{subject}connection lost ({phase}): {detail}");
            return reply_lost(op, phase, detail).with_source(e);
        }
        RedisKind::AuthenticationFailed | RedisKind::InvalidClientConfig => ErrorKind::Config,
        RedisKind::Server(ServerErrorKind::BusyLoading)
        | RedisKind::Server(ServerErrorKind::TryAgain)
        | RedisKind::Server(ServerErrorKind::MasterDown)
        | RedisKind::Server(ServerErrorKind::ClusterDown)
        | RedisKind::Server(ServerErrorKind::ReadOnly) => ErrorKind::Unavailable,
        RedisKind::Server(ServerErrorKind::NoPerm) => ErrorKind::Config,
        RedisKind::Server(ServerErrorKind::Moved)
        | RedisKind::Server(ServerErrorKind::Ask)
        | RedisKind::Server(ServerErrorKind::CrossSlot) => ErrorKind::Config,
        _ => match code {
            Some(c) if UNAVAILABLE_CODES.contains(&c) => ErrorKind::Unavailable,
            Some(c) if CONFIG_CODES.contains(&c) => ErrorKind::Config,
            Some(c) if CLUSTER_CODES.contains(&c) => ErrorKind::Config,
            Some("WRONGTYPE") => ErrorKind::Corrupt,
            // "ERR invalid password" (requirepass, Redis < 6) and the
            // `SELECT` of a database the server does not have.
            Some("ERR") if phase == Phase::Connect && is_config_detail(e.detail()) => {
                ErrorKind::Config
            }
            _ => ErrorKind::Internal,
        },
    };
    let detail = match kind {
        ErrorKind::Unavailable if phase == Phase::Connect => {
            format!("cannot reach the server: {detail}")
        }
        ErrorKind::Unavailable => format!("{subject}refused or not sent ({phase}): {detail}"),
        ErrorKind::Corrupt => match key {
            Some(key) => format!(
                "key `{key}` holds a Redis value that is not a bakery hash (expected a HASH with fields `v` and `ver`): {detail}"
            ),
            None => detail,
        },
        ErrorKind::Config if CLUSTER_CODES.contains(&code.unwrap_or("")) => format!(
            "{subject}the server is a Redis Cluster node; bakery-redis needs a single primary: {detail}"
        ),
        ErrorKind::Config if bad_certificate => format!(
            "TLS handshake failed: the server's certificate is not trusted for this host (a private CA needs the option `ca_file`): {detail}"
        ),
        ErrorKind::Config => format!("{subject}rejected ({phase}), check the credentials, permissions and database: {detail}"),
        _ => format!("{subject}{phase}: {detail}"),
    };
    let err = match kind {
        // An error reply to a script or a transaction does not say what of
        // it ran before the error.
        ErrorKind::Internal => {
            Error::new(kind, BACKEND, format!("{op} failed: {detail}")).during(op)
        }
        // Any other error reply refused the command before it took effect.
        _ => Error::not_sent(kind, BACKEND, op, detail),
    };
    err.with_source(e)
}

/// No usable reply came: a write that may be on the wire ([`Phase::Write`])
/// is in doubt; a call that writes nothing failed; a write that was not
/// sent yet (its read step, its connection) applied nothing.
fn reply_lost(op: Operation, phase: Phase, detail: String) -> Error {
    if phase == Phase::Write || !op.writes() {
        Error::in_doubt(BACKEND, op, detail)
    } else {
        Error::not_sent(ErrorKind::Unavailable, BACKEND, op, detail)
    }
}

/// The error code of a server reply. For a pipeline or a transaction it is
/// the code of the first failing command (`RedisError::code` would give none
/// for codes the driver does not know, such as `WRONGTYPE`, and `EXECABORT`
/// for a transaction refused because of, say, `OOM`).
fn server_code(e: &RedisError) -> Option<String> {
    let inner = e
        .clone()
        .into_server_errors()
        .and_then(|errors| errors.first().map(|(_, err)| err.code().to_string()));
    let code = inner.or_else(|| e.code().map(str::to_string))?;
    Some(code.to_ascii_uppercase())
}

/// True if `e` is the server refusing a command that only inspects it
/// (`CONFIG GET`, `INFO`): renamed or disabled (`ERR unknown command`),
/// forbidden by an ACL (`NOPERM`), or any other error reply a
/// Redis-compatible server gives for a command it does not support. Not
/// the replies that mean "unavailable, retry" (`LOADING`, `BUSY`, …),
/// missing credentials (`NOAUTH`, `WRONGPASS`) or a cluster redirection:
/// those fail the open as any other call would. Not a lost connection or
/// a timeout either (no error reply at all).
pub(crate) fn is_refused_command(e: &RedisError) -> bool {
    match server_code(e) {
        Some(code) => {
            let code = code.as_str();
            !UNAVAILABLE_CODES.contains(&code)
                && !CLUSTER_CODES.contains(&code)
                && !matches!(code, "NOAUTH" | "WRONGPASS")
        }
        None => false,
    }
}

fn is_config_detail(detail: Option<&str>) -> bool {
    let detail = detail.unwrap_or("").to_ascii_lowercase();
    ["password", "db index", "auth", "unknown command", "no such"]
        .iter()
        .any(|needle| detail.contains(needle))
}

/// A stored hash that does not decode: `Corrupt`, naming the key.
pub(crate) fn corrupt(key: &Key, full_key: &str, problem: impl fmt::Display) -> Error {
    Error::corrupt(
        BACKEND,
        format!("row `{key}` (Redis hash `{full_key}`) {problem}"),
    )
}

/// A reply of a shape this crate never asks for: a bug (or a foreign server).
pub(crate) fn unexpected(what: &str, reply: impl fmt::Debug) -> Error {
    Error::new(
        ErrorKind::Internal,
        BACKEND,
        format!("{what}: unexpected reply {reply:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bakery_core::Sent;
    use std::io;

    fn server(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_string(), Some(detail.to_string()))
    }

    fn io(kind: io::ErrorKind) -> RedisError {
        RedisError::from(io::Error::new(kind, "boom"))
    }

    fn key() -> Key {
        Key::new("k").unwrap()
    }

    #[test]
    fn refused_is_unavailable_everywhere() {
        for phase in [Phase::Connect, Phase::Read, Phase::Write] {
            let err = map_err(
                io(io::ErrorKind::ConnectionRefused).into(),
                Operation::Put,
                phase,
                Some(&key()),
            );
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{phase}");
            assert_eq!(err.backend(), "redis");
        }
    }

    #[test]
    fn lost_connection_is_unknown_only_for_writes() {
        for kind in [
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::TimedOut,
        ] {
            let write = map_err(io(kind).into(), Operation::Put, Phase::Write, Some(&key()));
            assert_eq!(write.kind(), ErrorKind::Unknown, "{kind:?}");
            assert!(write.message().contains("may or may not"), "{write}");
            assert_eq!(write.operation(), Some(Operation::Put));
            assert_eq!(write.sent(), Some(Sent::Maybe));
            // The read step of a write: nothing of the write was sent.
            let read_step = map_err(io(kind).into(), Operation::Put, Phase::Read, Some(&key()));
            assert_eq!(read_step.kind(), ErrorKind::Unavailable, "{kind:?}");
            assert!(read_step.message().contains("nothing was applied"));
            let read = map_err(io(kind).into(), Operation::Get, Phase::Read, Some(&key()));
            assert_eq!(read.kind(), ErrorKind::Unavailable, "{kind:?}");
        }
        let t = Duration::from_millis(5);
        assert_eq!(
            map_err(Failure::Timeout(t), Operation::Put, Phase::Write, None).kind(),
            ErrorKind::Unknown
        );
        assert_eq!(
            map_err(Failure::Timeout(t), Operation::Get, Phase::Read, None).kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(
            map_err(Failure::Timeout(t), Operation::Open, Phase::Connect, None).kind(),
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn server_replies() {
        let cases = [
            (
                "LOADING",
                "Redis is loading the dataset in memory",
                ErrorKind::Unavailable,
            ),
            (
                "BUSY",
                "Redis is busy running a script",
                ErrorKind::Unavailable,
            ),
            ("TRYAGAIN", "x", ErrorKind::Unavailable),
            (
                "MASTERDOWN",
                "Link with MASTER is down",
                ErrorKind::Unavailable,
            ),
            (
                "READONLY",
                "You can't write against a read only replica.",
                ErrorKind::Unavailable,
            ),
            (
                "OOM",
                "command not allowed when used memory > 'maxmemory'.",
                ErrorKind::Unavailable,
            ),
            (
                "MISCONF",
                "Redis is configured to save RDB snapshots",
                ErrorKind::Unavailable,
            ),
            ("NOAUTH", "Authentication required.", ErrorKind::Config),
            (
                "WRONGPASS",
                "invalid username-password pair",
                ErrorKind::Config,
            ),
            ("NOPERM", "this user has no permissions", ErrorKind::Config),
            ("MOVED", "3999 127.0.0.1:6381", ErrorKind::Config),
            (
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value",
                ErrorKind::Corrupt,
            ),
            ("ERR", "unknown command", ErrorKind::Internal),
        ];
        for (code, detail, kind) in cases {
            for phase in [Phase::Read, Phase::Write] {
                let err = map_err(
                    server(code, detail).into(),
                    Operation::Put,
                    phase,
                    Some(&key()),
                );
                assert_eq!(err.kind(), kind, "{code} {phase}");
                assert_eq!(err.backend(), "redis");
                assert!(std::error::Error::source(&err).is_some());
            }
        }
        let err = map_err(
            server("WRONGTYPE", "x").into(),
            Operation::Get,
            Phase::Read,
            Some(&key()),
        );
        assert!(err.message().contains("`k`"), "{err}");
        let err = map_err(
            server("ERR", "DB index is out of range").into(),
            Operation::Open,
            Phase::Connect,
            None,
        );
        assert_eq!(err.kind(), ErrorKind::Config);
    }

    #[test]
    fn refused_inspection_commands() {
        for (code, detail) in [
            (
                "ERR",
                "unknown command 'CONFIG', with args beginning with: 'GET'",
            ),
            (
                "NOPERM",
                "this user has no permissions to run the 'config|get' command",
            ),
            ("ERR", "unknown subcommand 'GET'"),
            ("UNSUPPORTED", "command not supported by this proxy"),
        ] {
            assert!(is_refused_command(&server(code, detail)), "{code} {detail}");
        }
        for (code, detail) in [
            ("LOADING", "Redis is loading the dataset in memory"),
            ("BUSY", "Redis is busy running a script"),
            ("NOAUTH", "Authentication required."),
            ("WRONGPASS", "invalid username-password pair"),
            ("MOVED", "3999 127.0.0.1:6381"),
        ] {
            assert!(!is_refused_command(&server(code, detail)), "{code}");
        }
        assert!(!is_refused_command(&io(io::ErrorKind::ConnectionReset)));
    }
}
