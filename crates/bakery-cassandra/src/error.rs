//! The one place driver errors become bakery errors.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use bakery_core::error::cause_chain;
use bakery_core::{Error, ErrorKind, Key, Operation};
use scylla::deserialize::DeserializationError;
use scylla::errors::{
    BadQuery, ConnectionError, ConnectionPoolError, ConnectionSetupRequestErrorKind, DbError,
    ExecutionError, IntoRowsResultError, MetadataError, MetadataFetchErrorKind, NewSessionError,
    PrepareError, RequestAttemptError, RowsError, SchemaAgreementError,
};

use crate::BACKEND;

/// The statement that failed, and the store call that ran it: only a
/// conditional write can apply anything, so only its lost reply leaves a
/// call in doubt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// Any other statement: the catalog reads, DDL and prepares of `open`,
    /// and a read at SERIAL (`get`'s, or the one a put or delete makes when
    /// a reply does not show the current row). It changes no row.
    Read(Operation),
    /// A conditional write (a Paxos round that may commit) of a put or a
    /// delete.
    Write(Operation),
}

/// Every statement of `open`.
pub(crate) const OPEN: Request = Request::Read(Operation::Open);

impl Request {
    fn op(self) -> Operation {
        match self {
            Request::Read(op) | Request::Write(op) => op,
        }
    }

    /// A reply that makes no sense: a write may have applied, anything
    /// else is a bug.
    fn garbled(self) -> Verdict {
        match self {
            Request::Write(_) => Verdict::InDoubt,
            Request::Read(_) => Verdict::Failed(ErrorKind::Internal),
        }
    }

    /// The error of a statement that may have reached the replicas and got
    /// no usable reply.
    fn in_doubt(self, detail: impl fmt::Display) -> Error {
        match self {
            // The read of a write call: nothing of the call was applied.
            Request::Read(op) if op.writes() => {
                Error::not_sent(ErrorKind::Unavailable, BACKEND, op, detail)
            }
            Request::Read(op) | Request::Write(op) => Error::in_doubt(BACKEND, op, detail),
        }
    }

    /// The error of a statement that did not take effect.
    fn failed(self, kind: ErrorKind, detail: impl fmt::Display) -> Error {
        let op = self.op();
        match kind {
            ErrorKind::Unavailable | ErrorKind::Config | ErrorKind::InvalidInput => {
                Error::not_sent(kind, BACKEND, op, detail)
            }
            _ => Error::new(kind, BACKEND, format!("{op} failed: {detail}")).during(op),
        }
    }
}

/// What a failure says about the statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// It did not take effect: an error of this kind.
    Failed(ErrorKind),
    /// It may have reached the replicas, and no usable reply came back.
    InDoubt,
}

use Verdict::{Failed, InDoubt};

/// Declares `DriverError` from one list of `Variant(DriverType)`: the
/// enum, a `From` for each type, and the two views the mapper needs.
macro_rules! driver_errors {
    ($($(#[doc = $doc:literal])* $variant:ident($ty:ty),)*) => {
        /// Every driver error this crate meets, so that one mapper sees them all.
        #[derive(Debug)]
        pub(crate) enum DriverError {
            $($(#[doc = $doc])* $variant($ty),)*
        }

        $(impl From<$ty> for DriverError {
            fn from(e: $ty) -> Self {
                DriverError::$variant(e)
            }
        })*

        impl DriverError {
            fn as_std(&self) -> &(dyn StdError + 'static) {
                match self {
                    $(DriverError::$variant(e) => e,)*
                }
            }

            fn into_boxed(self) -> bakery_core::BoxError {
                match self {
                    $(DriverError::$variant(e) => Box::new(e),)*
                }
            }
        }
    };
}

driver_errors!(
    /// Executing a statement.
    Execution(ExecutionError),
    /// Creating the session (contact points, authentication, metadata).
    NewSession(NewSessionError),
    /// Preparing a statement.
    Prepare(PrepareError),
    /// Waiting for schema agreement.
    SchemaAgreement(SchemaAgreementError),
    /// A reply that is not a rows result.
    IntoRows(IntoRowsResultError),
    /// Rows of an unexpected type.
    Rows(RowsError),
    /// A row that does not deserialize.
    Deserialize(DeserializationError),
);

/// What an error the server reported says about `request`.
fn db_verdict(db: &DbError, request: Request) -> Verdict {
    match db {
        // Refused while parsing, validating or authorising the statement:
        // nothing ran. "Keyspace … does not exist", "unconfigured table",
        // ScyllaDB's "LWT is not supported on tablets" are all `Invalid`.
        DbError::SyntaxError
        | DbError::Invalid
        | DbError::ConfigError
        | DbError::Unauthorized
        | DbError::AuthenticationError
        | DbError::AlreadyExists { .. } => Failed(ErrorKind::Config),
        // Not enough live replicas to start (each Paxos round checks this
        // first), an overloaded or bootstrapping coordinator, a rate limit
        // applied by the coordinator: refused before anything was proposed.
        DbError::Unavailable { .. } | DbError::Overloaded | DbError::IsBootstrapping => {
            Failed(ErrorKind::Unavailable)
        }
        DbError::RateLimitReached {
            rejected_by_coordinator: true,
            ..
        } => Failed(ErrorKind::Unavailable),
        // Timeouts and failures of the replicas. A WriteTimeout of type CAS
        // (Paxos did not finish, or contention) or SIMPLE (the commit did
        // not reach the commit consistency) may still apply: UNKNOWN for a
        // write. For a read (ReadTimeout at SERIAL) nothing of ours changed.
        DbError::ReadTimeout { .. }
        | DbError::WriteTimeout { .. }
        | DbError::ReadFailure { .. }
        | DbError::WriteFailure { .. }
        | DbError::RateLimitReached { .. } => InDoubt,
        DbError::FunctionFailure { .. }
        | DbError::TruncateError
        | DbError::ProtocolError
        | DbError::Unprepared { .. } => Failed(ErrorKind::Internal),
        DbError::ServerError | DbError::Other(_) => request.garbled(),
        _ => request.garbled(),
    }
}

/// What one failed attempt says about `request`.
fn attempt_verdict(e: &RequestAttemptError, request: Request) -> Verdict {
    match e {
        RequestAttemptError::DbError(db, _) => db_verdict(db, request),
        // The connection broke with the request possibly written.
        RequestAttemptError::BrokenConnectionError(_) => InDoubt,
        // No stream id: the request was never written.
        RequestAttemptError::UnableToAllocStreamId => Failed(ErrorKind::Unavailable),
        // Serialising our own request failed: nothing was sent, a bug.
        RequestAttemptError::SerializationError(_)
        | RequestAttemptError::CqlRequestSerialization(_)
        | RequestAttemptError::RepreparedIdChanged { .. }
        | RequestAttemptError::RepreparedIdMissingInBatch => Failed(ErrorKind::Internal),
        // A reply we cannot read: a write may have applied.
        RequestAttemptError::BodyExtensionsParseError(_)
        | RequestAttemptError::CqlResultParseError(_)
        | RequestAttemptError::CqlErrorParseError(_)
        | RequestAttemptError::UnexpectedResponse(_)
        | RequestAttemptError::NonfinishedPagingState => request.garbled(),
        _ => request.garbled(),
    }
}

/// A connection that could not be opened (nothing was sent on it).
fn connection_verdict(e: &ConnectionError) -> Verdict {
    match e {
        ConnectionError::ConnectionSetupRequestError(setup) => match setup.get_error() {
            ConnectionSetupRequestErrorKind::DbError(db, _) => db_verdict(db, OPEN),
            ConnectionSetupRequestErrorKind::MissingAuthentication
            | ConnectionSetupRequestErrorKind::StartAuthSessionError(_)
            | ConnectionSetupRequestErrorKind::AuthChallengeEvaluationError(_)
            | ConnectionSetupRequestErrorKind::AuthFinishError(_) => Failed(ErrorKind::Config),
            _ => Failed(ErrorKind::Unavailable),
        },
        ConnectionError::TranslationError(_) | ConnectionError::UseKeyspaceError(_) => {
            Failed(ErrorKind::Config)
        }
        // Refused, reset, timed out, no source port: transient.
        _ => Failed(ErrorKind::Unavailable),
    }
}

/// No usable connection to the chosen node: the request was not sent.
fn pool_verdict(e: &ConnectionPoolError) -> Verdict {
    match e {
        ConnectionPoolError::Broken {
            last_connection_error,
        } => connection_verdict(last_connection_error),
        _ => Failed(ErrorKind::Unavailable),
    }
}

/// Preparing never changes data.
fn prepare_verdict(e: &PrepareError) -> Verdict {
    match e {
        PrepareError::ConnectionPoolError(pool) => pool_verdict(pool),
        PrepareError::AllAttemptsFailed { first_attempt } => attempt_verdict(first_attempt, OPEN),
        _ => Failed(ErrorKind::Internal),
    }
}

fn metadata_verdict(e: &MetadataError) -> Verdict {
    match e {
        MetadataError::ConnectionPoolError(pool) => pool_verdict(pool),
        MetadataError::FetchError(fetch) => match &fetch.error {
            MetadataFetchErrorKind::PrepareError(attempt) => attempt_verdict(attempt, OPEN),
            MetadataFetchErrorKind::NextRowError(_) => Failed(ErrorKind::Unavailable),
            _ => Failed(ErrorKind::Internal),
        },
        _ => Failed(ErrorKind::Internal),
    }
}

fn schema_agreement_verdict(e: &SchemaAgreementError) -> Verdict {
    match e {
        SchemaAgreementError::ConnectionPoolError(pool) => pool_verdict(pool),
        SchemaAgreementError::PrepareError(prepare) => prepare_verdict(prepare),
        SchemaAgreementError::RequestError(attempt) => attempt_verdict(attempt, OPEN),
        // Timeout, a node missing from the pool: the cluster is not ready.
        _ => Failed(ErrorKind::Unavailable),
    }
}

/// What a driver error says about `request`.
fn verdict(e: &DriverError, request: Request) -> Verdict {
    match e {
        DriverError::Execution(e) => match e {
            ExecutionError::BadQuery(BadQuery::ValuesTooLongForKey(..)) => {
                Failed(ErrorKind::InvalidInput)
            }
            ExecutionError::BadQuery(_) => Failed(ErrorKind::Internal),
            // The load balancing plan was empty (no live node known): nothing sent.
            ExecutionError::EmptyPlan => Failed(ErrorKind::Unavailable),
            ExecutionError::PrepareError(prepare) => prepare_verdict(prepare),
            ExecutionError::ConnectionPoolError(pool) => pool_verdict(pool),
            ExecutionError::LastAttemptError(attempt) => attempt_verdict(attempt, request),
            // The driver's own request timeout: the request may be on its way.
            ExecutionError::RequestTimeout(_) => InDoubt,
            ExecutionError::UseKeyspaceError(_) => Failed(ErrorKind::Config),
            ExecutionError::SchemaAgreementError(agreement) => schema_agreement_verdict(agreement),
            ExecutionError::MetadataError(metadata) => metadata_verdict(metadata),
            _ => request.garbled(),
        },
        DriverError::NewSession(e) => match e {
            // DNS could not resolve any contact point (down or misspelt).
            NewSessionError::FailedToResolveAnyHostname(_) => Failed(ErrorKind::Unavailable),
            NewSessionError::EmptyKnownNodesList | NewSessionError::IllegalConfig(_) => {
                Failed(ErrorKind::Config)
            }
            NewSessionError::UseKeyspaceError(_) => Failed(ErrorKind::Config),
            NewSessionError::MetadataError(metadata) => metadata_verdict(metadata),
            _ => Failed(ErrorKind::Unavailable),
        },
        DriverError::Prepare(e) => prepare_verdict(e),
        DriverError::SchemaAgreement(e) => schema_agreement_verdict(e),
        DriverError::IntoRows(_) | DriverError::Rows(_) | DriverError::Deserialize(_) => {
            request.garbled()
        }
    }
}

/// Map a driver error from `request` to a bakery error carrying the store
/// call: the one mapper of this crate. The driver error is kept as the
/// `source()`; the message never holds the URI or a password.
pub(crate) fn map_err(e: impl Into<DriverError>, request: Request) -> Error {
    let e = e.into();
    let detail = cause_chain(e.as_std());
    let err = match verdict(&e, request) {
        InDoubt => request.in_doubt(detail),
        Failed(kind @ ErrorKind::Config) if detail.contains("tablets") => request.failed(kind, format!(
            "rejected: {detail} (ScyllaDB: lightweight transactions need a keyspace created with `tablets = {{'enabled': false}}`)"
        )),
        Failed(kind @ ErrorKind::Config) => request.failed(kind, format!(
            "rejected (check the user, the password, the keyspace and the table): {detail}"
        )),
        Failed(kind) => request.failed(kind, detail),
    };
    err.with_source(e.into_boxed())
}

/// Our own deadline (`timeout_ms`) passed while `request` was in flight: a
/// write may have been sent, so it is [`ErrorKind::Unknown`].
pub(crate) fn timed_out(request: Request, after: Duration) -> Error {
    let ms = after.as_millis();
    request.in_doubt(match request {
        OPEN => format!(
            "opening did not finish within {ms} ms (connecting, creating or checking the table)"
        ),
        _ => format!("no reply within {ms} ms (timeout_ms)"),
    })
}

/// The call's deadline passed between two statements of the write call
/// `op`: the next conditional write was not sent.
pub(crate) fn deadline_passed(op: Operation, after: Duration) -> Error {
    Error::not_sent(
        ErrorKind::Unavailable,
        BACKEND,
        op,
        format!(
            "the call's {} ms (timeout_ms) ran out before its next conditional write was sent",
            after.as_millis()
        ),
    )
}

/// A reply of the wrong shape (no `[applied]` column, no row): a write
/// may have applied, anything else is a bug.
pub(crate) fn reply(request: Request, what: impl fmt::Display) -> Error {
    let detail = format!("unexpected reply from the server: {what}");
    match request.garbled() {
        InDoubt => request.in_doubt(detail),
        Failed(kind) => request.failed(kind, detail),
    }
}

/// A stored row bakery cannot use, named by its key; nothing was changed.
pub(crate) fn corrupt(op: Operation, key: &Key, what: impl fmt::Display) -> Error {
    Error::corrupt(
        BACKEND,
        format!("row `{key}` is corrupt: {what}; it was left unchanged"),
    )
    .during(op)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use scylla::errors::{BrokenConnectionError, WriteType};
    use scylla::statement::Consistency;

    use super::*;

    const READ: Request = Request::Read(Operation::Get);
    const WRITE: Request = Request::Write(Operation::Put);
    const OPS: [Request; 3] = [OPEN, READ, WRITE];

    fn db(db: DbError) -> ExecutionError {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, "msg".into()))
    }

    fn kind_of(e: ExecutionError, op: Request) -> ErrorKind {
        let err = map_err(e, op);
        assert_eq!(err.backend(), "cassandra");
        assert!(StdError::source(&err).is_some());
        err.kind()
    }

    fn write_timeout(write_type: WriteType) -> DbError {
        DbError::WriteTimeout {
            consistency: Consistency::Serial,
            received: 0,
            required: 1,
            write_type,
        }
    }

    #[test]
    fn cas_write_timeouts_are_unknown_for_writes_only() {
        for write_type in [WriteType::Cas, WriteType::Simple] {
            let err = map_err(db(write_timeout(write_type.clone())), WRITE);
            assert_eq!(err.kind(), ErrorKind::Unknown);
            assert!(err.message().contains("may or may not"), "{err}");
            assert_eq!(
                kind_of(db(write_timeout(write_type)), READ),
                ErrorKind::Unavailable
            );
        }
        let read_timeout = || {
            db(DbError::ReadTimeout {
                consistency: Consistency::Serial,
                received: 0,
                required: 1,
                data_present: false,
            })
        };
        assert_eq!(kind_of(read_timeout(), READ), ErrorKind::Unavailable);
        assert_eq!(kind_of(read_timeout(), WRITE), ErrorKind::Unknown);
    }

    #[test]
    fn refusals_before_any_proposal_are_unavailable() {
        for op in OPS {
            for e in [
                DbError::Unavailable {
                    consistency: Consistency::Quorum,
                    required: 2,
                    alive: 1,
                },
                DbError::Overloaded,
                DbError::IsBootstrapping,
            ] {
                assert_eq!(kind_of(db(e), op), ErrorKind::Unavailable, "{op:?}");
            }
            assert_eq!(
                kind_of(ExecutionError::EmptyPlan, op),
                ErrorKind::Unavailable
            );
            let refused = ConnectionPoolError::Broken {
                last_connection_error: ConnectionError::IoError(Arc::new(std::io::Error::from(
                    std::io::ErrorKind::ConnectionRefused,
                ))),
            };
            let err = map_err(ExecutionError::ConnectionPoolError(refused), op);
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{op:?}");
            if op == WRITE {
                assert!(err.message().contains("nothing was applied"), "{err}");
            }
        }
    }

    #[test]
    fn lost_connections_and_client_timeouts() {
        let broken = || {
            ExecutionError::LastAttemptError(RequestAttemptError::BrokenConnectionError(
                BrokenConnectionError::from(
                    scylla::errors::BrokenConnectionErrorKind::ChannelError,
                ),
            ))
        };
        assert_eq!(kind_of(broken(), WRITE), ErrorKind::Unknown);
        assert_eq!(kind_of(broken(), READ), ErrorKind::Unavailable);
        let timeout = || ExecutionError::RequestTimeout(Duration::from_secs(1));
        assert_eq!(kind_of(timeout(), WRITE), ErrorKind::Unknown);
        assert_eq!(kind_of(timeout(), READ), ErrorKind::Unavailable);
        assert_eq!(
            timed_out(WRITE, Duration::from_millis(250)).kind(),
            ErrorKind::Unknown
        );
        assert_eq!(
            timed_out(READ, Duration::from_millis(250)).kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(
            timed_out(OPEN, Duration::from_millis(250)).kind(),
            ErrorKind::Unavailable
        );
        assert!(timed_out(WRITE, Duration::from_millis(250))
            .message()
            .contains("250 ms"));
        assert_eq!(
            deadline_passed(Operation::Put, Duration::from_secs(1)).kind(),
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn configuration_problems() {
        for e in [
            DbError::SyntaxError,
            DbError::Invalid,
            DbError::Unauthorized,
            DbError::AuthenticationError,
            DbError::ConfigError,
        ] {
            for op in OPS {
                assert_eq!(kind_of(db(e.clone()), op), ErrorKind::Config, "{e:?}");
            }
        }
        let tablets = ExecutionError::LastAttemptError(RequestAttemptError::DbError(
            DbError::Invalid,
            "Cannot use LightWeight Transactions for table ks.t: LWT is not yet supported with tablets"
                .into(),
        ));
        let err = map_err(tablets, WRITE);
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(
            err.message().contains("tablets = {'enabled': false}"),
            "{err}"
        );
        assert_eq!(
            kind_of(
                ExecutionError::BadQuery(BadQuery::ValuesTooLongForKey(70_000, 65_535)),
                WRITE
            ),
            ErrorKind::InvalidInput
        );
    }

    #[test]
    fn server_errors_and_garbled_replies() {
        assert_eq!(kind_of(db(DbError::ServerError), WRITE), ErrorKind::Unknown);
        assert_eq!(kind_of(db(DbError::ServerError), READ), ErrorKind::Internal);
        assert_eq!(
            kind_of(db(DbError::ProtocolError), WRITE),
            ErrorKind::Internal
        );
        let unexpected = || {
            ExecutionError::LastAttemptError(RequestAttemptError::UnexpectedResponse(
                scylla::frame::response::CqlResponseKind::Ready,
            ))
        };
        assert_eq!(kind_of(unexpected(), WRITE), ErrorKind::Unknown);
        assert_eq!(kind_of(unexpected(), READ), ErrorKind::Internal);
        assert_eq!(reply(WRITE, "no [applied]").kind(), ErrorKind::Unknown);
        assert_eq!(reply(READ, "two rows").kind(), ErrorKind::Internal);
    }

    #[test]
    fn new_session_errors() {
        let refused = NewSessionError::MetadataError(MetadataError::ConnectionPoolError(
            ConnectionPoolError::Broken {
                last_connection_error: ConnectionError::IoError(Arc::new(std::io::Error::from(
                    std::io::ErrorKind::ConnectionRefused,
                ))),
            },
        ));
        assert_eq!(map_err(refused, OPEN).kind(), ErrorKind::Unavailable);
        assert_eq!(
            map_err(NewSessionError::EmptyKnownNodesList, OPEN).kind(),
            ErrorKind::Config
        );
        assert_eq!(
            map_err(
                NewSessionError::FailedToResolveAnyHostname(vec!["nowhere.invalid:9042".into()]),
                OPEN
            )
            .kind(),
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn every_error_names_its_store_call() {
        use bakery_core::Sent;
        let timeout = || ExecutionError::RequestTimeout(Duration::from_secs(1));
        let err = map_err(timeout(), Request::Write(Operation::Delete));
        assert_eq!(err.kind(), ErrorKind::Unknown);
        assert_eq!(err.operation(), Some(Operation::Delete));
        assert_eq!(err.sent(), Some(Sent::Maybe));
        // The SERIAL read a put makes after an unclear conflict applies
        // nothing: a lost reply is Unavailable, not Unknown.
        let read_by_put = Request::Read(Operation::Put);
        let after = Duration::from_millis(5);
        for err in [
            map_err(timeout(), read_by_put),
            timed_out(read_by_put, after),
            reply(read_by_put, "two rows"),
        ] {
            assert_ne!(err.kind(), ErrorKind::Unknown, "{err}");
            assert_eq!(err.operation(), Some(Operation::Put), "{err}");
        }
        assert!(timed_out(read_by_put, after)
            .message()
            .contains("nothing was applied"));
        assert_eq!(
            map_err(NewSessionError::EmptyKnownNodesList, OPEN).operation(),
            Some(Operation::Open)
        );
        let passed = deadline_passed(Operation::Delete, after);
        assert_eq!(passed.operation(), Some(Operation::Delete));
        assert!(passed.message().contains("nothing was applied"), "{passed}");
        let key = Key::new("k").unwrap();
        assert_eq!(
            corrupt(Operation::Put, &key, "x").operation(),
            Some(Operation::Put)
        );
    }

    #[test]
    fn corrupt_rows_name_the_key() {
        let key = Key::new("seq/x").unwrap();
        let err = corrupt(Operation::Get, &key, "version is 0");
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        assert!(err.message().contains("seq/x"));
    }
}
