//! The one place etcd client errors become bakery errors.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use bakery_core::{Error, ErrorKind};
use tonic::Code;

/// The backend name carried by every error of this crate.
pub(crate) const BACKEND: &str = "etcd";

/// What the failed call was; it decides whether a failure may have applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Connecting, authenticating, and the first read of `open`.
    Connect,
    /// A linearizable read: never changes anything.
    Read,
    /// A transaction that may write (put or delete).
    Write,
    /// Opening or reading a watch: never changes anything.
    Watch,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Connect => "connect",
            Op::Read => "read",
            Op::Write => "write",
            Op::Watch => "watch",
        })
    }
}

/// The kind of a failure that does not say whether the request reached the
/// server: for a write it may have applied.
fn in_doubt(op: Op) -> ErrorKind {
    match op {
        Op::Write => ErrorKind::Unknown,
        Op::Connect | Op::Read | Op::Watch => ErrorKind::Unavailable,
    }
}

/// True when tonic failed to open a connection, i.e. the request was never
/// written to a socket.
fn connect_failed(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn StdError + 'static)> = status.source();
    while let Some(err) = source {
        if err.is::<tonic::ConnectError>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// The kind of a gRPC status for a call of type `op`.
fn status_kind(status: &tonic::Status, op: Op) -> ErrorKind {
    let message = status.message();
    match status.code() {
        // Authentication and authorisation: the server refused before
        // applying anything, and retrying will not help.
        Code::Unauthenticated | Code::PermissionDenied => ErrorKind::Config,
        // "authentication is not enabled" (a user was configured), and
        // other refusals of the cluster's set-up.
        Code::FailedPrecondition => ErrorKind::Config,
        // etcd 3.4 reports a wrong user or password as InvalidArgument.
        Code::InvalidArgument if message.contains("authentication failed") => ErrorKind::Config,
        Code::InvalidArgument if op == Op::Connect => ErrorKind::Config,
        // "request is too large", "key is not provided", …: checked on
        // receipt, before the request is proposed to raft.
        Code::InvalidArgument => ErrorKind::InvalidInput,
        // The gRPC layer's own size limit ("received message larger than max").
        Code::ResourceExhausted if message.contains("larger than max") => ErrorKind::InvalidInput,
        // "too many requests", "database space exceeded" (NOSPACE alarm):
        // rejected before they are proposed.
        Code::ResourceExhausted => ErrorKind::Unavailable,
        // Never connected: the request was not sent.
        Code::Unavailable if connect_failed(status) => ErrorKind::Unavailable,
        // `require_leader` is set: a member without a leader refuses the
        // call before proposing it.
        Code::Unavailable if message.contains("no leader") => ErrorKind::Unavailable,
        // etcd also uses Unavailable for "request timed out" and "leader
        // changed", which may follow a proposal: a write may have applied.
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown
        | Code::Aborted
        | Code::Internal
        | Code::DataLoss => in_doubt(op),
        Code::Ok
        | Code::NotFound
        | Code::AlreadyExists
        | Code::OutOfRange
        | Code::Unimplemented => match op {
            // A write that got an unexpected answer may have applied.
            Op::Write => ErrorKind::Unknown,
            Op::Connect | Op::Read | Op::Watch => ErrorKind::Internal,
        },
    }
}

/// The message of the innermost error behind `e`, if it has a source.
fn root_cause(e: &(dyn StdError + 'static)) -> Option<String> {
    let mut cause = e.source()?;
    while let Some(next) = cause.source() {
        cause = next;
    }
    Some(cause.to_string())
}

/// Map an etcd client error from a call of type `op` to a bakery error.
///
/// Reads and connects fail `Unavailable` on any transport trouble. A write
/// fails `Unavailable` only when it provably did not apply (no connection
/// could be made, no leader, a refusal such as "too many requests") and
/// `Unknown` whenever the request may have reached the server (timeouts,
/// cancellations, a connection lost mid-call, etcd's own "request timed
/// out"). The driver error is kept as the source only.
pub(crate) fn map_err(e: etcd_client::Error, op: Op) -> Error {
    use etcd_client::Error as E;
    let kind = match &e {
        E::GRpcStatus(status) => status_kind(status, op),
        // Building an endpoint or a request from our configuration.
        E::InvalidArgs(_) | E::InvalidUri(_) | E::EndpointError(_) => ErrorKind::Config,
        E::TransportError(_) | E::IoError(_) => in_doubt(op),
        _ => match op {
            Op::Write => ErrorKind::Unknown,
            Op::Connect | Op::Read | Op::Watch => ErrorKind::Internal,
        },
    };
    let mut detail = match &e {
        E::GRpcStatus(status) => format!("{:?}: {}", status.code(), status.message()),
        other => other.to_string(),
    };
    // The innermost cause says the most ("Connection refused (os error 111)").
    // (etcd_client::Error does not expose its source; look inside.)
    let inner: Option<&(dyn StdError + 'static)> = match &e {
        E::GRpcStatus(status) => Some(status),
        E::TransportError(transport) => Some(transport),
        E::IoError(io) => Some(io),
        _ => None,
    };
    if let Some(cause) = inner
        .and_then(root_cause)
        .filter(|cause| !detail.contains(cause.as_str()))
    {
        detail = format!("{detail}: {cause}");
    }
    let message = match kind {
        ErrorKind::Unknown => {
            format!("{op} failed, it may or may not have applied: {detail}")
        }
        ErrorKind::Unavailable if op == Op::Write => {
            format!("{op} failed, nothing was applied: {detail}")
        }
        ErrorKind::InvalidInput if detail.contains("too large") || detail.contains("larger than max") => format!(
            "{op} rejected: the request is larger than the etcd server accepts (its --max-request-bytes, 1.5 MiB by default; nothing was applied): {detail}"
        ),
        ErrorKind::Config => format!(
            "{op} rejected by etcd (check the user, the password, and the user's permissions on the key prefix): {detail}"
        ),
        _ => format!("{op} failed: {detail}"),
    };
    Error::new(kind, BACKEND, message).with_source(e)
}

/// Our own deadline (`timeout_ms`, `connect_timeout_ms`) passed: the request
/// may have been sent, so a write is [`ErrorKind::Unknown`].
pub(crate) fn timed_out(op: Op, after: Duration) -> Error {
    let kind = in_doubt(op);
    let message = match op {
        Op::Write => format!(
            "write timed out after {} ms, it may or may not have applied",
            after.as_millis()
        ),
        Op::Read => format!("read timed out after {} ms", after.as_millis()),
        Op::Watch => format!(
            "etcd did not confirm the watch within {} ms",
            after.as_millis()
        ),
        Op::Connect => format!(
            "no etcd endpoint answered within {} ms (connect_timeout_ms)",
            after.as_millis()
        ),
    };
    Error::new(kind, BACKEND, message)
}

/// etcd cancelled a watch as it created it (`cancel_reason`): a missing
/// permission on the key is [`ErrorKind::Config`], anything else
/// [`ErrorKind::Unavailable`] (the caller polls instead).
pub(crate) fn watch_refused(reason: &str) -> Error {
    let kind = if reason.contains("permission denied") {
        ErrorKind::Config
    } else {
        ErrorKind::Unavailable
    };
    Error::new(
        kind,
        BACKEND,
        format!("watch refused by etcd: {}", reason.trim()),
    )
}

/// A reply that breaks etcd's own contract (a missing response, a
/// non-positive revision): a bug somewhere, never a retry.
pub(crate) fn protocol(op: Op, what: impl Into<String>) -> Error {
    let what = what.into();
    Error::new(
        ErrorKind::Internal,
        BACKEND,
        format!("{op}: unexpected reply from etcd: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    fn kind(e: etcd_client::Error, op: Op) -> ErrorKind {
        let err = map_err(e, op);
        assert_eq!(err.backend(), "etcd");
        assert!(StdError::source(&err).is_some());
        err.kind()
    }

    #[test]
    fn refused_connections_are_unavailable_even_for_writes() {
        for op in [Op::Connect, Op::Read, Op::Write] {
            let mut status =
                tonic::Status::unavailable("tcp connect error: Connection refused (os error 111)");
            status.set_source(std::sync::Arc::new(tonic::ConnectError(Box::new(
                std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            ))));
            let err = map_err(etcd_client::Error::GRpcStatus(status), op);
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{op}");
            if op == Op::Write {
                assert!(err.message().contains("nothing was applied"), "{err}");
            }
        }
    }

    #[test]
    fn in_flight_failures_are_unknown_for_writes_only() {
        for (code, message) in [
            (Code::Unavailable, "etcdserver: request timed out"),
            (Code::Unavailable, "etcdserver: leader changed"),
            (Code::Unavailable, "connection reset"),
            (Code::DeadlineExceeded, "context deadline exceeded"),
            (Code::Cancelled, "Timeout expired"),
            (Code::Unknown, "h2 protocol error"),
            (Code::Internal, "h2 protocol error"),
        ] {
            let err = map_err(status(code, message), Op::Write);
            assert_eq!(err.kind(), ErrorKind::Unknown, "{code:?} {message}");
            assert!(err.outcome_unknown());
            assert!(err.message().contains("may or may not"), "{err}");
            assert_eq!(
                kind(status(code, message), Op::Read),
                ErrorKind::Unavailable,
                "{code:?} {message}"
            );
            assert_eq!(
                kind(status(code, message), Op::Connect),
                ErrorKind::Unavailable
            );
        }
    }

    #[test]
    fn refusals_before_proposal() {
        let cases = [
            (
                Code::Unavailable,
                "etcdserver: no leader",
                ErrorKind::Unavailable,
            ),
            (
                Code::ResourceExhausted,
                "etcdserver: too many requests",
                ErrorKind::Unavailable,
            ),
            (
                Code::ResourceExhausted,
                "etcdserver: mvcc: database space exceeded",
                ErrorKind::Unavailable,
            ),
            (
                Code::ResourceExhausted,
                "grpc: received message larger than max (3000000 vs. 2097152)",
                ErrorKind::InvalidInput,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: request is too large",
                ErrorKind::InvalidInput,
            ),
            (
                Code::Unauthenticated,
                "etcdserver: invalid auth token",
                ErrorKind::Config,
            ),
            (
                Code::PermissionDenied,
                "etcdserver: permission denied",
                ErrorKind::Config,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password",
                ErrorKind::Config,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: authentication is not enabled",
                ErrorKind::Config,
            ),
        ];
        for (code, message, expected) in cases {
            for op in [Op::Read, Op::Write] {
                assert_eq!(
                    kind(status(code, message), op),
                    expected,
                    "{code:?} {message} {op}"
                );
            }
        }
        let err = map_err(
            status(Code::InvalidArgument, "etcdserver: request is too large"),
            Op::Write,
        );
        assert!(err.message().contains("1.5 MiB"), "{err}");
        assert_eq!(
            kind(status(Code::InvalidArgument, "bad"), Op::Connect),
            ErrorKind::Config
        );
    }

    #[test]
    fn other_errors() {
        assert_eq!(
            kind(
                etcd_client::Error::InvalidArgs("empty endpoints".into()),
                Op::Connect
            ),
            ErrorKind::Config
        );
        assert_eq!(
            kind(etcd_client::Error::Internal("x".into()), Op::Read),
            ErrorKind::Internal
        );
        assert_eq!(
            kind(etcd_client::Error::Internal("x".into()), Op::Write),
            ErrorKind::Unknown
        );
        assert_eq!(
            kind(status(Code::Unimplemented, "x"), Op::Read),
            ErrorKind::Internal
        );
        let io = || etcd_client::Error::IoError(std::io::Error::other("broken"));
        assert_eq!(kind(io(), Op::Write), ErrorKind::Unknown);
        assert_eq!(kind(io(), Op::Read), ErrorKind::Unavailable);
    }

    #[test]
    fn our_timeouts() {
        let after = Duration::from_millis(5000);
        let write = timed_out(Op::Write, after);
        assert_eq!(write.kind(), ErrorKind::Unknown);
        assert!(write.message().contains("5000 ms"), "{write}");
        assert_eq!(timed_out(Op::Read, after).kind(), ErrorKind::Unavailable);
        assert_eq!(timed_out(Op::Connect, after).kind(), ErrorKind::Unavailable);
        assert_eq!(timed_out(Op::Read, after).backend(), "etcd");
        assert_eq!(timed_out(Op::Watch, after).kind(), ErrorKind::Unavailable);
    }

    #[test]
    fn watches_fail_like_reads() {
        let err = map_err(status(Code::Unavailable, "connection reset"), Op::Watch);
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert!(err.message().starts_with("watch failed"), "{err}");
        assert_eq!(
            watch_refused("etcdserver: permission denied").kind(),
            ErrorKind::Config
        );
        assert_eq!(
            watch_refused("etcdserver: no leader").kind(),
            ErrorKind::Unavailable
        );
    }
}
