//! The one place MongoDB and driver errors become bakery errors.

use std::fmt;
use std::time::Duration;

use bakery_core::error::one_line;
use bakery_core::{Error, ErrorKind, Operation};
use mongodb::error::{
    Error as DriverError, ErrorKind as DriverKind, WriteFailure, RETRYABLE_WRITE_ERROR,
    SYSTEM_OVERLOADED_ERROR,
};

use crate::BACKEND;

/// MongoDB's duplicate key error: an insert met an existing `_id`.
pub(crate) const DUPLICATE_KEY: i32 = 11000;

/// What the failed driver command was; with the store call's
/// [`Operation`] it decides whether a lost reply leaves a write in doubt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Opening: parsing, server selection, `ping`, `createIndexes`.
    Connect,
    /// A read (`find`): nothing it does can change a row.
    Read,
    /// A write command (`insert`, `findAndModify`, `update`) of
    /// `put_if_version` or `delete_if_version`.
    Write,
    /// A read after a write of the same call was sent and before its
    /// outcome is known (the confirming read of `cas=insert`): whatever
    /// fails, the write may or may not have applied.
    Confirm,
}

/// Codes with which a primary refuses a write before executing it.
const NOT_PRIMARY: &[i32] = &[10107, 13435, 13436, 10058];

/// Codes of an operation interrupted while it ran (shutdown, step-down,
/// time limit, a network failure between servers): a write may have been
/// applied before the interruption.
///
/// `1` (InternalError) is here too: FerretDB reports a failure of its
/// storage (PostgreSQL restarting: SQLSTATE 57P01) that way, and MongoDB an
/// unexpected failure inside the server — for a write, neither says whether
/// it applied. Found by the fault test restarting PostgreSQL under FerretDB.
const INTERRUPTED: &[i32] = &[11600, 11601, 11602, 91, 189, 50, 262, 9001, 89, 6, 7, 1];

/// Codes of a transient refusal: nothing applied, try again.
const TRANSIENT: &[i32] = &[112, 46, 24, 133, 462, 202];

/// Codes saying the server, the deployment or the credentials do not fit
/// this configuration.
const CONFIG: &[i32] = &[
    13, 18, 8000, 59, 115, 238, 73, 20, 166, 72, 79, 100, 121, 31, 11, 26,
];

/// Codes of a value the server cannot store (a document over 16 MiB).
const TOO_LARGE: &[i32] = &[10334, 17419, 17420, 10003];

/// The bakery kind of a server error code.
fn classify_code(code: i32, stage: Stage, retryable_label: bool) -> ErrorKind {
    let write = stage == Stage::Write;
    if NOT_PRIMARY.contains(&code) || TRANSIENT.contains(&code) {
        ErrorKind::Unavailable
    } else if INTERRUPTED.contains(&code) {
        if write {
            ErrorKind::Unknown
        } else {
            ErrorKind::Unavailable
        }
    } else if CONFIG.contains(&code) {
        ErrorKind::Config
    } else if TOO_LARGE.contains(&code) {
        ErrorKind::InvalidInput
    } else if write && retryable_label {
        // The server marks errors a retryable write may retry: it says the
        // operation may be retried safely by txnNumber, not that it did
        // not run.
        ErrorKind::Unknown
    } else {
        ErrorKind::Internal
    }
}

/// The message of a pool cleared while a connection was checked out: the
/// command was not sent on it.
const CLEARED_AT_CHECKOUT: &str = "Connection pool for ";

/// The kind of a `ConnectionPoolCleared` error with `message`. The driver
/// raises it at checkout (nothing sent), and also for a command in flight
/// on a connection it interrupts when its monitor loses the server ("…
/// interrupted due to server monitor timeout"): that write may have
/// applied. Only the checkout's message is believed unsent.
fn pool_cleared(message: &str, stage: Stage) -> ErrorKind {
    if stage == Stage::Write && !message.starts_with(CLEARED_AT_CHECKOUT) {
        ErrorKind::Unknown
    } else {
        ErrorKind::Unavailable
    }
}

/// The bakery kind of a driver error raised at `stage`.
pub(crate) fn classify(e: &DriverError, stage: Stage) -> ErrorKind {
    let write = stage == Stage::Write;
    let retryable_label = e.contains_label(RETRYABLE_WRITE_ERROR);
    match e.kind.as_ref() {
        // Nothing was sent: no server could be selected, the client is
        // closed.
        DriverKind::ServerSelection { .. }
        | DriverKind::DnsResolve { .. }
        | DriverKind::Shutdown => ErrorKind::Unavailable,
        DriverKind::ConnectionPoolCleared { message, .. } => pool_cleared(message, stage),
        DriverKind::Io(io) => {
            // The driver labels failures of connection establishment (TCP,
            // TLS, handshake) `SystemOverloadedError`: before our command.
            let before_send = io.kind() == std::io::ErrorKind::ConnectionRefused
                || e.contains_label(SYSTEM_OVERLOADED_ERROR);
            if write && !before_send {
                ErrorKind::Unknown
            } else {
                ErrorKind::Unavailable
            }
        }
        DriverKind::Authentication { .. }
        | DriverKind::InvalidTlsConfig { .. }
        | DriverKind::IncompatibleServer { .. } => ErrorKind::Config,
        DriverKind::InvalidArgument { .. } if stage == Stage::Connect => ErrorKind::Config,
        DriverKind::Command(c) => classify_code(c.code, stage, retryable_label),
        DriverKind::Write(WriteFailure::WriteError(w)) => {
            classify_code(w.code, stage, retryable_label)
        }
        // The write was applied on the primary; only its replication to a
        // majority is unconfirmed.
        DriverKind::Write(WriteFailure::WriteConcernError(_)) => {
            if write {
                ErrorKind::Unknown
            } else {
                ErrorKind::Unavailable
            }
        }
        DriverKind::InvalidResponse { .. } | DriverKind::BsonDeserialization(_) if write => {
            ErrorKind::Unknown
        }
        DriverKind::BsonDeserialization(_) => ErrorKind::Corrupt,
        _ => ErrorKind::Internal,
    }
}

/// True for an insert that met an existing `_id` (E11000): a conflict, not
/// an error.
pub(crate) fn is_duplicate_key(e: &DriverError) -> bool {
    match e.kind.as_ref() {
        DriverKind::Write(WriteFailure::WriteError(w)) => w.code == DUPLICATE_KEY,
        DriverKind::Command(c) => c.code == DUPLICATE_KEY,
        _ => false,
    }
}

/// The server's error code, when `e` is a command's refusal.
pub(crate) fn command_code(e: &DriverError) -> Option<i32> {
    match e.kind.as_ref() {
        DriverKind::Command(c) => Some(c.code),
        _ => None,
    }
}

/// Map a driver error of store call `op` at `stage` to a bakery error: the
/// one mapper of this crate. The driver error is kept as `source()` only;
/// the message is one line, never the URI or a password.
pub(crate) fn map_err(e: DriverError, op: Operation, stage: Stage) -> Error {
    let detail = driver_message(&e);
    let err = match stage {
        Stage::Confirm => Error::in_doubt(
            BACKEND,
            op,
            format!("a write was sent, then a read failed: {detail}"),
        ),
        _ => match classify(&e, stage) {
            // Only a write command (`Stage::Write`, of a writing call) is
            // classified `Unknown`.
            ErrorKind::Unknown => Error::in_doubt(BACKEND, op, detail),
            // Refused, or never sent.
            kind @ (ErrorKind::Unavailable | ErrorKind::Config | ErrorKind::InvalidInput) => {
                Error::not_sent(kind, BACKEND, op, detail)
            }
            kind => Error::new(kind, BACKEND, format!("{op} failed: {detail}")).during(op),
        },
    };
    err.with_source(e)
}

/// The client-side deadline passed; `in_doubt`: a write of this call was
/// sent and its outcome is not known.
pub(crate) fn timed_out(op: Operation, in_doubt: bool, limit: Duration) -> Error {
    let detail = format!("no reply within {limit:?}");
    if in_doubt || !op.writes() {
        Error::in_doubt(BACKEND, op, detail)
    } else {
        Error::not_sent(ErrorKind::Unavailable, BACKEND, op, detail)
    }
}

/// An error raised after a write of this call was sent and before its
/// outcome was known: whatever went wrong, the write may have applied.
pub(crate) fn in_doubt(op: Operation, e: Error) -> Error {
    if e.kind() == ErrorKind::Unknown {
        return e;
    }
    let detail = format!("a write was sent, then: {} ({})", e.message(), e.kind());
    Error::in_doubt(BACKEND, op, detail).with_source(e)
}

/// A stored document of row `key` bakery cannot read; nothing was changed.
pub(crate) fn corrupt(
    collection: &str,
    key: &bakery_core::Key,
    id: &str,
    what: impl fmt::Display,
) -> Error {
    Error::corrupt(
        BACKEND,
        format!("row `{key}`: document `{id}` in collection {collection}: {what}"),
    )
}

/// A driver error on one line: its kind, code and message, and its labels.
pub(crate) fn driver_message(e: &DriverError) -> String {
    let text = match e.kind.as_ref() {
        DriverKind::Command(c) => format!("{} ({}): {}", c.code_name, c.code, c.message),
        DriverKind::Write(WriteFailure::WriteError(w)) => format!(
            "write error {}{}: {}",
            w.code,
            w.code_name
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default(),
            w.message
        ),
        DriverKind::Write(WriteFailure::WriteConcernError(w)) => format!(
            "write concern error {} ({}): {}",
            w.code, w.code_name, w.message
        ),
        DriverKind::Io(io) => format!("I/O error: {io}"),
        DriverKind::ServerSelection { message, .. } => message.clone(),
        DriverKind::InvalidArgument { message, .. } => message.clone(),
        DriverKind::Authentication { message, .. } => format!("authentication failed: {message}"),
        other => other.to_string(),
    };
    let mut labels: Vec<&str> = e.labels().iter().map(String::as_str).collect();
    labels.sort_unstable();
    let mut out = one_line(&text);
    if !labels.is_empty() {
        out.push_str(&format!(" [labels: {}]", labels.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAGES: [Stage; 3] = [Stage::Connect, Stage::Read, Stage::Write];

    #[test]
    fn server_codes() {
        for code in [10107, 13435, 112, 46] {
            for stage in STAGES {
                assert_eq!(
                    classify_code(code, stage, true),
                    ErrorKind::Unavailable,
                    "{code}"
                );
            }
        }
        for code in [11600, 11602, 91, 189, 50, 1] {
            assert_eq!(classify_code(code, Stage::Write, false), ErrorKind::Unknown);
            assert_eq!(
                classify_code(code, Stage::Read, false),
                ErrorKind::Unavailable
            );
        }
        for code in [13, 18, 238, 121] {
            assert_eq!(classify_code(code, Stage::Write, false), ErrorKind::Config);
        }
        assert_eq!(
            classify_code(10334, Stage::Write, false),
            ErrorKind::InvalidInput
        );
        assert_eq!(classify_code(2, Stage::Write, true), ErrorKind::Unknown);
        assert_eq!(classify_code(2, Stage::Write, false), ErrorKind::Internal);
        assert_eq!(classify_code(2, Stage::Read, true), ErrorKind::Internal);
    }

    #[test]
    fn an_interrupted_write_is_in_doubt_and_a_cleared_checkout_is_not() {
        let interrupted = "Connection to 127.0.0.1:27017 interrupted due to server monitor timeout";
        let checkout = "Connection pool for 127.0.0.1:27017 cleared because another operation failed with: I/O error";
        assert_eq!(pool_cleared(interrupted, Stage::Write), ErrorKind::Unknown);
        assert_eq!(
            pool_cleared(interrupted, Stage::Read),
            ErrorKind::Unavailable
        );
        assert_eq!(pool_cleared(checkout, Stage::Write), ErrorKind::Unavailable);
        // A message this crate does not know is believed sent.
        assert_eq!(pool_cleared("cleared", Stage::Write), ErrorKind::Unknown);
    }

    #[test]
    fn timeouts_and_doubt() {
        let limit = Duration::from_millis(1500);
        assert_eq!(
            timed_out(Operation::Put, true, limit).kind(),
            ErrorKind::Unknown
        );
        assert_eq!(
            timed_out(Operation::Put, false, limit).kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(
            timed_out(Operation::Get, false, limit).kind(),
            ErrorKind::Unavailable
        );
        let err = timed_out(Operation::Delete, true, limit);
        assert_eq!(err.backend(), "mongodb");
        assert!(err.message().contains("may or may not"), "{err}");

        let key = bakery_core::Key::new("k").unwrap();
        let corrupt = corrupt("c", &key, "k", "field `ver` is a string");
        assert_eq!(corrupt.kind(), ErrorKind::Corrupt);
        assert!(corrupt.message().contains("row `k`"), "{corrupt}");
        let doubt = in_doubt(Operation::Put, corrupt);
        assert_eq!(doubt.kind(), ErrorKind::Unknown);
        assert!(doubt.message().contains("field `ver`"), "{doubt}");
        assert!(std::error::Error::source(&doubt).is_some());
    }
}
