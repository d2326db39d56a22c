//! The one place etcd client errors become bakery errors.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use bakery_core::{Error, ErrorKind, Operation};
use tonic::Code;

use crate::BACKEND;

/// The request that failed, and the store call that made it. A lost reply
/// to a transaction leaves a put or delete in doubt; a lost reply to a read
/// never does, whichever call made it (`put_if_version` answers a version
/// no key can have with a read alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// Connecting, a linearizable read, or a watch: changes nothing.
    Read(Operation),
    /// A transaction that writes when its compare holds (put or delete).
    Txn(Operation),
}

impl Request {
    fn op(self) -> Operation {
        match self {
            Request::Read(op) | Request::Txn(op) => op,
        }
    }

    /// A failure that does not say whether the request reached the server.
    fn in_doubt(self, detail: impl fmt::Display) -> Error {
        match self {
            // Nothing of a write call was applied by its read.
            Request::Read(op) if op.writes() => {
                Error::not_sent(ErrorKind::Unavailable, BACKEND, op, detail)
            }
            Request::Read(op) | Request::Txn(op) => Error::in_doubt(BACKEND, op, detail),
        }
    }

    /// An answer that makes no sense: a transaction may have applied, for
    /// anything else it is a bug.
    fn garbled(self) -> Verdict {
        match self {
            Request::Txn(_) => Verdict::InDoubt,
            Request::Read(_) => Verdict::Failed(ErrorKind::Internal),
        }
    }
}

/// What a failure says about the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// It did not take effect: an error of this kind.
    Failed(ErrorKind),
    /// It may have reached the server, and no usable answer came back.
    InDoubt,
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

/// What a gRPC status says about `request`.
fn status_verdict(status: &tonic::Status, request: Request) -> Verdict {
    let message = status.message();
    let kind = match status.code() {
        // Authentication and authorisation: the server refused before
        // applying anything, and retrying will not help.
        Code::Unauthenticated | Code::PermissionDenied => ErrorKind::Config,
        // "authentication is not enabled" (a user was configured), and
        // other refusals of the cluster's set-up.
        Code::FailedPrecondition => ErrorKind::Config,
        // etcd 3.4 reports a wrong user or password as InvalidArgument.
        Code::InvalidArgument if message.contains("authentication failed") => ErrorKind::Config,
        Code::InvalidArgument if request.op() == Operation::Open => ErrorKind::Config,
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
        | Code::DataLoss => return Verdict::InDoubt,
        Code::Ok
        | Code::NotFound
        | Code::AlreadyExists
        | Code::OutOfRange
        | Code::Unimplemented => return request.garbled(),
    };
    Verdict::Failed(kind)
}

/// The message of the innermost error behind `e`, if it has a source.
fn root_cause(e: &(dyn StdError + 'static)) -> Option<String> {
    let mut cause = e.source()?;
    while let Some(next) = cause.source() {
        cause = next;
    }
    Some(cause.to_string())
}

/// Map an etcd client error from `request` to a bakery error carrying the
/// store call.
///
/// Reads and connects fail `Unavailable` on any transport trouble. A write
/// fails `Unavailable` only when it provably did not apply (no connection
/// could be made, no leader, a refusal such as "too many requests") and
/// `Unknown` whenever the request may have reached the server (timeouts,
/// cancellations, a connection lost mid-call, etcd's own "request timed
/// out"). The driver error is kept as the source only.
pub(crate) fn map_err(e: etcd_client::Error, request: Request) -> Error {
    use etcd_client::Error as E;
    let verdict = match &e {
        E::GRpcStatus(status) => status_verdict(status, request),
        // Building an endpoint or a request from our configuration.
        E::InvalidArgs(_) | E::InvalidUri(_) | E::EndpointError(_) => {
            Verdict::Failed(ErrorKind::Config)
        }
        E::TransportError(_) | E::IoError(_) => Verdict::InDoubt,
        _ => request.garbled(),
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
    let op = request.op();
    let err = match verdict {
        Verdict::InDoubt => request.in_doubt(detail),
        Verdict::Failed(kind @ ErrorKind::InvalidInput)
            if detail.contains("too large") || detail.contains("larger than max") =>
        {
            Error::not_sent(kind, BACKEND, op, format!(
                "the request is larger than the etcd server accepts (its --max-request-bytes, 1.5 MiB by default): {detail}"
            ))
        }
        Verdict::Failed(kind @ ErrorKind::Config) => Error::not_sent(kind, BACKEND, op, format!(
            "rejected by etcd (check the user, the password, and the user's permissions on the key prefix): {detail}"
        )),
        Verdict::Failed(kind @ (ErrorKind::Unavailable | ErrorKind::InvalidInput)) => {
            Error::not_sent(kind, BACKEND, op, detail)
        }
        Verdict::Failed(kind) => {
            Error::new(kind, BACKEND, format!("{op} failed: {detail}")).during(op)
        }
    };
    err.with_source(e)
}

/// Our own deadline (`timeout_ms`, `connect_timeout_ms`) passed: the request
/// may have been sent, so a write is [`ErrorKind::Unknown`].
pub(crate) fn timed_out(request: Request, after: Duration) -> Error {
    let ms = after.as_millis();
    request.in_doubt(match request.op() {
        Operation::Open => format!("no etcd endpoint answered within {ms} ms (connect_timeout_ms)"),
        Operation::Watch => format!("etcd did not confirm the watch within {ms} ms"),
        _ => format!("no reply within {ms} ms (timeout_ms)"),
    })
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
    Error::not_sent(
        kind,
        BACKEND,
        Operation::Watch,
        format!("refused by etcd: {}", reason.trim()),
    )
}

/// A reply that breaks etcd's own contract (a missing response, a
/// non-positive revision): a bug somewhere, never a retry.
pub(crate) fn protocol(op: Operation, what: impl fmt::Display) -> Error {
    Error::new(
        ErrorKind::Internal,
        BACKEND,
        format!("{op} failed: unexpected reply from etcd: {what}"),
    )
    .during(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: Request = Request::Read(Operation::Open);
    const READ: Request = Request::Read(Operation::Get);
    const WRITE: Request = Request::Txn(Operation::Put);
    const WATCH: Request = Request::Read(Operation::Watch);

    fn status(code: Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    fn kind(e: etcd_client::Error, op: Request) -> ErrorKind {
        let err = map_err(e, op);
        assert_eq!(err.backend(), "etcd");
        assert!(StdError::source(&err).is_some());
        err.kind()
    }

    #[test]
    fn refused_connections_are_unavailable_even_for_writes() {
        for op in [OPEN, READ, WRITE] {
            let mut status =
                tonic::Status::unavailable("tcp connect error: Connection refused (os error 111)");
            status.set_source(std::sync::Arc::new(tonic::ConnectError(Box::new(
                std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            ))));
            let err = map_err(etcd_client::Error::GRpcStatus(status), op);
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{op:?}");
            if op == WRITE {
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
            let err = map_err(status(code, message), WRITE);
            assert_eq!(err.kind(), ErrorKind::Unknown, "{code:?} {message}");
            assert!(err.outcome_unknown());
            assert!(err.message().contains("may or may not"), "{err}");
            assert_eq!(
                kind(status(code, message), READ),
                ErrorKind::Unavailable,
                "{code:?} {message}"
            );
            assert_eq!(kind(status(code, message), OPEN), ErrorKind::Unavailable);
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
            for op in [READ, WRITE] {
                assert_eq!(
                    kind(status(code, message), op),
                    expected,
                    "{code:?} {message} {op:?}"
                );
            }
        }
        let err = map_err(
            status(Code::InvalidArgument, "etcdserver: request is too large"),
            WRITE,
        );
        assert!(err.message().contains("1.5 MiB"), "{err}");
        assert_eq!(
            kind(status(Code::InvalidArgument, "bad"), OPEN),
            ErrorKind::Config
        );
    }

    #[test]
    fn other_errors() {
        assert_eq!(
            kind(
                etcd_client::Error::InvalidArgs("empty endpoints".into()),
                OPEN
            ),
            ErrorKind::Config
        );
        assert_eq!(
            kind(etcd_client::Error::Internal("x".into()), READ),
            ErrorKind::Internal
        );
        assert_eq!(
            kind(etcd_client::Error::Internal("x".into()), WRITE),
            ErrorKind::Unknown
        );
        assert_eq!(
            kind(status(Code::Unimplemented, "x"), READ),
            ErrorKind::Internal
        );
        let io = || etcd_client::Error::IoError(std::io::Error::other("broken"));
        assert_eq!(kind(io(), WRITE), ErrorKind::Unknown);
        assert_eq!(kind(io(), READ), ErrorKind::Unavailable);
    }

    #[test]
    fn our_timeouts() {
        let after = Duration::from_millis(5000);
        let write = timed_out(WRITE, after);
        assert_eq!(write.kind(), ErrorKind::Unknown);
        assert!(write.message().contains("5000 ms"), "{write}");
        assert_eq!(timed_out(READ, after).kind(), ErrorKind::Unavailable);
        assert_eq!(timed_out(OPEN, after).kind(), ErrorKind::Unavailable);
        assert_eq!(timed_out(READ, after).backend(), "etcd");
        assert_eq!(timed_out(WATCH, after).kind(), ErrorKind::Unavailable);
    }

    #[test]
    fn every_error_names_its_store_call() {
        use bakery_core::Sent;
        let lost = || status(Code::Unavailable, "connection reset");
        let err = map_err(lost(), Request::Txn(Operation::Delete));
        assert_eq!(err.operation(), Some(Operation::Delete));
        assert_eq!(err.sent(), Some(Sent::Maybe));
        assert!(
            err.message().starts_with("delete_if_version failed"),
            "{err}"
        );
        // A read made by a put (a version no key can have) applies nothing.
        let read_by_put = Request::Read(Operation::Put);
        let after = Duration::from_millis(5);
        for err in [map_err(lost(), read_by_put), timed_out(read_by_put, after)] {
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
            assert_eq!(err.operation(), Some(Operation::Put));
            assert!(err.message().contains("nothing was applied"), "{err}");
        }
        assert_eq!(
            map_err(status(Code::PermissionDenied, "denied"), OPEN).operation(),
            Some(Operation::Open)
        );
        assert_eq!(
            protocol(Operation::Get, "x").operation(),
            Some(Operation::Get)
        );
        assert_eq!(watch_refused("x").operation(), Some(Operation::Watch));
    }

    #[test]
    fn watches_fail_like_reads() {
        let err = map_err(status(Code::Unavailable, "connection reset"), WATCH);
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
