//! The one place SQLite errors become bakery errors.

use std::fmt;

use bakery_core::{Error, ErrorKind, Operation};
use rusqlite::ffi::ErrorCode;

use crate::BACKEND;

/// Where in a call an error happened; it decides whether the call may have
/// applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Opening a connection, setting pragmas, creating or checking the table.
    Open,
    /// Reading a row (in `get`, or inside a write transaction).
    Read,
    /// `BEGIN IMMEDIATE`: taking the write lock.
    Begin,
    /// The write statement, inside the transaction, before `COMMIT`.
    Write,
    /// `COMMIT`: the write may or may not be durable if this fails.
    Commit,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Open => "open",
            Phase::Read => "read",
            Phase::Begin => "begin immediate",
            Phase::Write => "write",
            Phase::Commit => "commit",
        })
    }
}

/// Map a driver error of the call `op`, met in `phase`, to a bakery error.
/// Before `COMMIT` nothing has applied (SQLite rolls the transaction back),
/// so lock contention and I/O trouble are [`ErrorKind::Unavailable`]; a
/// failed `COMMIT` is conservatively [`ErrorKind::Unknown`]. The driver
/// error is kept as the source only.
pub(crate) fn map_err(e: rusqlite::Error, op: Operation, phase: Phase) -> Error {
    let code = match &e {
        rusqlite::Error::SqliteFailure(error, _) => Some(error.code),
        rusqlite::Error::SqlInputError { error, .. } => Some(error.code),
        _ => None,
    };
    let kind = match (code, phase) {
        (Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase), _) => ErrorKind::Corrupt,
        // COMMIT failed: the write may be durable or not. Never guess.
        (_, Phase::Commit) => ErrorKind::Unknown,
        (
            Some(
                ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
                | ErrorCode::OperationInterrupted
                | ErrorCode::FileLockingProtocolFailed
                | ErrorCode::OutOfMemory,
            ),
            _,
        ) => ErrorKind::Unavailable,
        (Some(ErrorCode::CannotOpen), Phase::Open) => ErrorKind::Config,
        // The file was fine when opened; a sibling (-wal, -shm) may not be.
        (Some(ErrorCode::CannotOpen), _) => ErrorKind::Unavailable,
        (
            Some(
                ErrorCode::PermissionDenied
                | ErrorCode::ReadOnly
                | ErrorCode::AuthorizationForStatementDenied,
            ),
            _,
        ) => ErrorKind::Config,
        // A path SQLite cannot take (an interior NUL byte).
        (None, Phase::Open)
            if matches!(
                e,
                rusqlite::Error::NulError(_) | rusqlite::Error::InvalidPath(_)
            ) =>
        {
            ErrorKind::Config
        }
        _ => ErrorKind::Internal,
    };
    let detail = format!("{phase}: {e}");
    let err = match kind {
        ErrorKind::Unknown => Error::in_doubt(BACKEND, op, detail),
        // A corrupt file met at COMMIT: what became of the write is not
        // known either, so the message claims nothing.
        _ if phase == Phase::Commit => {
            Error::new(kind, BACKEND, format!("{op} failed: {detail}")).during(op)
        }
        _ => Error::not_sent(kind, BACKEND, op, detail),
    };
    err.with_source(e)
}

/// A blocking task that panicked or was cancelled: a bug, never a retry.
pub(crate) fn join_error(e: tokio::task::JoinError) -> Error {
    Error::new(
        ErrorKind::Internal,
        BACKEND,
        format!("blocking SQLite task failed: {e}"),
    )
    .with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::ffi;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(code), None)
    }

    #[test]
    fn busy_before_commit_is_unavailable_and_at_commit_unknown() {
        for code in [
            ffi::SQLITE_BUSY,
            ffi::SQLITE_LOCKED,
            ffi::SQLITE_IOERR,
            ffi::SQLITE_FULL,
        ] {
            for phase in [Phase::Open, Phase::Read, Phase::Begin, Phase::Write] {
                let err = map_err(failure(code), Operation::Put, phase);
                assert_eq!(err.kind(), ErrorKind::Unavailable, "{code} {phase}");
                assert!(!err.outcome_unknown());
            }
            let err = map_err(failure(code), Operation::Put, Phase::Commit);
            assert_eq!(err.kind(), ErrorKind::Unknown, "{code}");
            assert!(err.message().contains("may or may not"), "{err}");
            assert_eq!(err.operation(), Some(Operation::Put));
        }
        // Extended codes map by their primary code.
        let err = map_err(
            failure(ffi::SQLITE_BUSY_SNAPSHOT),
            Operation::Delete,
            Phase::Begin,
        );
        assert_eq!(err.kind(), ErrorKind::Unavailable);
    }

    #[test]
    fn other_codes() {
        let cases = [
            (ffi::SQLITE_CORRUPT, Phase::Read, ErrorKind::Corrupt),
            (ffi::SQLITE_CORRUPT, Phase::Commit, ErrorKind::Corrupt),
            (ffi::SQLITE_NOTADB, Phase::Open, ErrorKind::Corrupt),
            (ffi::SQLITE_CANTOPEN, Phase::Open, ErrorKind::Config),
            (ffi::SQLITE_CANTOPEN, Phase::Write, ErrorKind::Unavailable),
            (ffi::SQLITE_PERM, Phase::Open, ErrorKind::Config),
            (ffi::SQLITE_READONLY, Phase::Write, ErrorKind::Config),
            (ffi::SQLITE_AUTH, Phase::Read, ErrorKind::Config),
            (ffi::SQLITE_CONSTRAINT, Phase::Write, ErrorKind::Internal),
            (ffi::SQLITE_ERROR, Phase::Read, ErrorKind::Internal),
            (ffi::SQLITE_MISUSE, Phase::Begin, ErrorKind::Internal),
            (ffi::SQLITE_ERROR, Phase::Commit, ErrorKind::Unknown),
        ];
        for (code, phase, kind) in cases {
            let err = map_err(failure(code), Operation::Put, phase);
            assert_eq!(err.kind(), kind, "{code} {phase}");
            assert_eq!(err.backend(), "sqlite");
            assert!(std::error::Error::source(&err).is_some());
        }
        let err = map_err(
            rusqlite::Error::QueryReturnedNoRows,
            Operation::Get,
            Phase::Read,
        );
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert_eq!(err.backend(), "sqlite");
    }
}
