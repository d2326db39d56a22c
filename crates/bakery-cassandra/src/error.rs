//! The one place driver errors become bakery errors.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use bakery_core::{Error, ErrorKind, Key};
use scylla::deserialize::DeserializationError;
use scylla::errors::{
    BadQuery, ConnectionError, ConnectionPoolError, ConnectionSetupRequestErrorKind, DbError,
    ExecutionError, IntoRowsResultError, MetadataError, MetadataFetchErrorKind, NewSessionError,
    PrepareError, RequestAttemptError, RowsError, SchemaAgreementError,
};

/// The backend name carried by every error of this crate.
pub(crate) const BACKEND: &str = "cassandra";

/// What the failed statement was; it decides whether a failure may have
/// applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Connecting, creating and checking the schema, preparing statements.
    Open,
    /// A read at SERIAL consistency: never changes our row.
    Read,
    /// A conditional write (a Paxos round that may commit).
    Write,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Open => "open",
            Op::Read => "serial read",
            Op::Write => "conditional write",
        })
    }
}

/// Every driver error this crate meets, so that one mapper sees them all.
#[derive(Debug)]
pub(crate) enum DriverError {
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
}

macro_rules! from_driver {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        $(impl From<$ty> for DriverError {
            fn from(e: $ty) -> Self {
                DriverError::$variant(e)
            }
        })*
    };
}

from_driver!(
    Execution(ExecutionError),
    NewSession(NewSessionError),
    Prepare(PrepareError),
    SchemaAgreement(SchemaAgreementError),
    IntoRows(IntoRowsResultError),
    Rows(RowsError),
    Deserialize(DeserializationError),
);

impl DriverError {
    fn as_std(&self) -> &(dyn StdError + 'static) {
        match self {
            DriverError::Execution(e) => e,
            DriverError::NewSession(e) => e,
            DriverError::Prepare(e) => e,
            DriverError::SchemaAgreement(e) => e,
            DriverError::IntoRows(e) => e,
            DriverError::Rows(e) => e,
            DriverError::Deserialize(e) => e,
        }
    }

    fn into_boxed(self) -> bakery_core::BoxError {
        match self {
            DriverError::Execution(e) => Box::new(e),
            DriverError::NewSession(e) => Box::new(e),
            DriverError::Prepare(e) => Box::new(e),
            DriverError::SchemaAgreement(e) => Box::new(e),
            DriverError::IntoRows(e) => Box::new(e),
            DriverError::Rows(e) => Box::new(e),
            DriverError::Deserialize(e) => Box::new(e),
        }
    }
}

/// A failure that does not say whether the request reached the replicas:
/// for a write it may have applied.
fn in_doubt(op: Op) -> ErrorKind {
    match op {
        Op::Write => ErrorKind::Unknown,
        Op::Open | Op::Read => ErrorKind::Unavailable,
    }
}

/// A reply that makes no sense: a write may have applied, anything else is
/// a bug.
fn garbled(op: Op) -> ErrorKind {
    match op {
        Op::Write => ErrorKind::Unknown,
        Op::Open | Op::Read => ErrorKind::Internal,
    }
}

/// The kind of an error the server reported for a statement of type `op`.
pub(crate) fn db_kind(db: &DbError, op: Op) -> ErrorKind {
    match db {
        // Refused while parsing, validating or authorising the statement:
        // nothing ran. "Keyspace … does not exist", "unconfigured table",
        // ScyllaDB's "LWT is not supported on tablets" are all `Invalid`.
        DbError::SyntaxError
        | DbError::Invalid
        | DbError::ConfigError
        | DbError::Unauthorized
        | DbError::AuthenticationError
        | DbError::AlreadyExists { .. } => ErrorKind::Config,
        // Not enough live replicas to start (each Paxos round checks this
        // first), an overloaded or bootstrapping coordinator, a rate limit
        // applied by the coordinator: refused before anything was proposed.
        DbError::Unavailable { .. } | DbError::Overloaded | DbError::IsBootstrapping => {
            ErrorKind::Unavailable
        }
        DbError::RateLimitReached {
            rejected_by_coordinator: true,
            ..
        } => ErrorKind::Unavailable,
        // Timeouts and failures of the replicas. A WriteTimeout of type CAS
        // (Paxos did not finish, or contention) or SIMPLE (the commit did
        // not reach the commit consistency) may still apply: UNKNOWN for a
        // write. For a read (ReadTimeout at SERIAL) nothing of ours changed.
        DbError::ReadTimeout { .. }
        | DbError::WriteTimeout { .. }
        | DbError::ReadFailure { .. }
        | DbError::WriteFailure { .. }
        | DbError::RateLimitReached { .. } => in_doubt(op),
        DbError::FunctionFailure { .. }
        | DbError::TruncateError
        | DbError::ProtocolError
        | DbError::Unprepared { .. } => ErrorKind::Internal,
        DbError::ServerError | DbError::Other(_) => garbled(op),
        _ => garbled(op),
    }
}

/// The kind of one failed attempt of a statement of type `op`.
fn attempt_kind(e: &RequestAttemptError, op: Op) -> ErrorKind {
    match e {
        RequestAttemptError::DbError(db, _) => db_kind(db, op),
        // The connection broke with the request possibly written.
        RequestAttemptError::BrokenConnectionError(_) => in_doubt(op),
        // No stream id: the request was never written.
        RequestAttemptError::UnableToAllocStreamId => ErrorKind::Unavailable,
        // Serialising our own request failed: nothing was sent, a bug.
        RequestAttemptError::SerializationError(_)
        | RequestAttemptError::CqlRequestSerialization(_)
        | RequestAttemptError::RepreparedIdChanged { .. }
        | RequestAttemptError::RepreparedIdMissingInBatch => ErrorKind::Internal,
        // A reply we cannot read: a write may have applied.
        RequestAttemptError::BodyExtensionsParseError(_)
        | RequestAttemptError::CqlResultParseError(_)
        | RequestAttemptError::CqlErrorParseError(_)
        | RequestAttemptError::UnexpectedResponse(_)
        | RequestAttemptError::NonfinishedPagingState => garbled(op),
        _ => garbled(op),
    }
}

/// A connection that could not be opened (nothing was sent on it).
fn connection_kind(e: &ConnectionError) -> ErrorKind {
    match e {
        ConnectionError::ConnectionSetupRequestError(setup) => match setup.get_error() {
            ConnectionSetupRequestErrorKind::DbError(db, _) => db_kind(db, Op::Open),
            ConnectionSetupRequestErrorKind::MissingAuthentication
            | ConnectionSetupRequestErrorKind::StartAuthSessionError(_)
            | ConnectionSetupRequestErrorKind::AuthChallengeEvaluationError(_)
            | ConnectionSetupRequestErrorKind::AuthFinishError(_) => ErrorKind::Config,
            _ => ErrorKind::Unavailable,
        },
        ConnectionError::TranslationError(_) | ConnectionError::UseKeyspaceError(_) => {
            ErrorKind::Config
        }
        // Refused, reset, timed out, no source port: transient.
        _ => ErrorKind::Unavailable,
    }
}

/// No usable connection to the chosen node: the request was not sent.
fn pool_kind(e: &ConnectionPoolError) -> ErrorKind {
    match e {
        ConnectionPoolError::Broken {
            last_connection_error,
        } => connection_kind(last_connection_error),
        _ => ErrorKind::Unavailable,
    }
}

/// Preparing never changes data.
fn prepare_kind(e: &PrepareError) -> ErrorKind {
    match e {
        PrepareError::ConnectionPoolError(pool) => pool_kind(pool),
        PrepareError::AllAttemptsFailed { first_attempt } => attempt_kind(first_attempt, Op::Open),
        _ => ErrorKind::Internal,
    }
}

fn metadata_kind(e: &MetadataError) -> ErrorKind {
    match e {
        MetadataError::ConnectionPoolError(pool) => pool_kind(pool),
        MetadataError::FetchError(fetch) => match &fetch.error {
            MetadataFetchErrorKind::PrepareError(attempt) => attempt_kind(attempt, Op::Open),
            MetadataFetchErrorKind::NextRowError(_) => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        },
        _ => ErrorKind::Internal,
    }
}

fn schema_agreement_kind(e: &SchemaAgreementError) -> ErrorKind {
    match e {
        SchemaAgreementError::ConnectionPoolError(pool) => pool_kind(pool),
        SchemaAgreementError::PrepareError(prepare) => prepare_kind(prepare),
        SchemaAgreementError::RequestError(attempt) => attempt_kind(attempt, Op::Open),
        // Timeout, a node missing from the pool: the cluster is not ready.
        _ => ErrorKind::Unavailable,
    }
}

/// The kind of a driver error for a statement of type `op`.
pub(crate) fn kind(e: &DriverError, op: Op) -> ErrorKind {
    match e {
        DriverError::Execution(e) => match e {
            ExecutionError::BadQuery(BadQuery::ValuesTooLongForKey(..)) => ErrorKind::InvalidInput,
            ExecutionError::BadQuery(_) => ErrorKind::Internal,
            // The load balancing plan was empty (no live node known): nothing sent.
            ExecutionError::EmptyPlan => ErrorKind::Unavailable,
            ExecutionError::PrepareError(prepare) => prepare_kind(prepare),
            ExecutionError::ConnectionPoolError(pool) => pool_kind(pool),
            ExecutionError::LastAttemptError(attempt) => attempt_kind(attempt, op),
            // The driver's own request timeout: the request may be on its way.
            ExecutionError::RequestTimeout(_) => in_doubt(op),
            ExecutionError::UseKeyspaceError(_) => ErrorKind::Config,
            ExecutionError::SchemaAgreementError(agreement) => schema_agreement_kind(agreement),
            ExecutionError::MetadataError(metadata) => metadata_kind(metadata),
            _ => garbled(op),
        },
        DriverError::NewSession(e) => match e {
            // DNS could not resolve any contact point (down or misspelt).
            NewSessionError::FailedToResolveAnyHostname(_) => ErrorKind::Unavailable,
            NewSessionError::EmptyKnownNodesList | NewSessionError::IllegalConfig(_) => {
                ErrorKind::Config
            }
            NewSessionError::UseKeyspaceError(_) => ErrorKind::Config,
            NewSessionError::MetadataError(metadata) => metadata_kind(metadata),
            _ => ErrorKind::Unavailable,
        },
        DriverError::Prepare(e) => prepare_kind(e),
        DriverError::SchemaAgreement(e) => schema_agreement_kind(e),
        DriverError::IntoRows(_) | DriverError::Rows(_) | DriverError::Deserialize(_) => {
            garbled(op)
        }
    }
}

/// Map a driver error from a statement of type `op` to a bakery error: the
/// one mapper of this crate. The driver error is kept as the `source()`;
/// the message never holds the URI or a password.
pub(crate) fn map_err(e: impl Into<DriverError>, op: Op) -> Error {
    let e = e.into();
    let kind = kind(&e, op);
    let detail = chain(e.as_std());
    let message = match kind {
        ErrorKind::Unknown => format!("{op} failed, it may or may not have applied: {detail}"),
        ErrorKind::Unavailable if op == Op::Write => {
            format!("{op} failed, nothing was applied: {detail}")
        }
        ErrorKind::Config if detail.contains("tablets") => format!(
            "{op} rejected: {detail} (ScyllaDB: lightweight transactions need a keyspace created with `tablets = {{'enabled': false}}`)"
        ),
        ErrorKind::Config => format!(
            "{op} rejected (check the user, the password, the keyspace and the table): {detail}"
        ),
        _ => format!("{op} failed: {detail}"),
    };
    Error::new(kind, BACKEND, message).with_source(e.into_boxed())
}

/// Our own deadline (`timeout_ms`) passed while a statement of type `op`
/// was in flight: a write may have been sent, so it is
/// [`ErrorKind::Unknown`].
pub(crate) fn timed_out(op: Op, after: Duration) -> Error {
    let kind = in_doubt(op);
    let ms = after.as_millis();
    let message = match op {
        Op::Write => {
            format!("{op} got no reply within {ms} ms (timeout_ms), it may or may not have applied")
        }
        Op::Read => format!("{op} got no reply within {ms} ms (timeout_ms)"),
        Op::Open => format!(
            "opening did not finish within {ms} ms (connecting, creating or checking the table)"
        ),
    };
    Error::new(kind, BACKEND, message)
}

/// The call's deadline passed between two statements: the next one (a
/// write) was not sent.
pub(crate) fn deadline_passed(after: Duration) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        BACKEND,
        format!(
            "the call's {} ms (timeout_ms) ran out before its next conditional write was sent; nothing was applied",
            after.as_millis()
        ),
    )
}

/// A reply of the wrong shape (no `[applied]` column, no row): a write
/// may have applied, anything else is a bug.
pub(crate) fn reply(op: Op, what: impl fmt::Display) -> Error {
    let kind = garbled(op);
    let suffix = if kind == ErrorKind::Unknown {
        "; it may or may not have applied"
    } else {
        ""
    };
    Error::new(
        kind,
        BACKEND,
        format!("{op}: unexpected reply from the server: {what}{suffix}"),
    )
}

/// A stored row bakery cannot use, named by its key; nothing was changed.
pub(crate) fn corrupt(key: &Key, what: impl fmt::Display) -> Error {
    Error::corrupt(
        BACKEND,
        format!("row `{key}` is corrupt: {what}; it was left unchanged"),
    )
}

/// An error and its causes on one line, `a: b: c`.
fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = one_line(&e.to_string());
    let mut source = e.source();
    while let Some(s) = source {
        let text = one_line(&s.to_string());
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use scylla::errors::{BrokenConnectionError, WriteType};
    use scylla::statement::Consistency;

    use super::*;

    const OPS: [Op; 3] = [Op::Open, Op::Read, Op::Write];

    fn db(db: DbError) -> ExecutionError {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, "msg".into()))
    }

    fn kind_of(e: ExecutionError, op: Op) -> ErrorKind {
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
            let err = map_err(db(write_timeout(write_type.clone())), Op::Write);
            assert_eq!(err.kind(), ErrorKind::Unknown);
            assert!(err.message().contains("may or may not"), "{err}");
            assert_eq!(
                kind_of(db(write_timeout(write_type)), Op::Read),
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
        assert_eq!(kind_of(read_timeout(), Op::Read), ErrorKind::Unavailable);
        assert_eq!(kind_of(read_timeout(), Op::Write), ErrorKind::Unknown);
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
                assert_eq!(kind_of(db(e), op), ErrorKind::Unavailable, "{op}");
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
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{op}");
            if op == Op::Write {
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
        assert_eq!(kind_of(broken(), Op::Write), ErrorKind::Unknown);
        assert_eq!(kind_of(broken(), Op::Read), ErrorKind::Unavailable);
        let timeout = || ExecutionError::RequestTimeout(Duration::from_secs(1));
        assert_eq!(kind_of(timeout(), Op::Write), ErrorKind::Unknown);
        assert_eq!(kind_of(timeout(), Op::Read), ErrorKind::Unavailable);
        assert_eq!(
            timed_out(Op::Write, Duration::from_millis(250)).kind(),
            ErrorKind::Unknown
        );
        assert_eq!(
            timed_out(Op::Read, Duration::from_millis(250)).kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(
            timed_out(Op::Open, Duration::from_millis(250)).kind(),
            ErrorKind::Unavailable
        );
        assert!(timed_out(Op::Write, Duration::from_millis(250))
            .message()
            .contains("250 ms"));
        assert_eq!(
            deadline_passed(Duration::from_secs(1)).kind(),
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
        let err = map_err(tablets, Op::Write);
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(
            err.message().contains("tablets = {'enabled': false}"),
            "{err}"
        );
        assert_eq!(
            kind_of(
                ExecutionError::BadQuery(BadQuery::ValuesTooLongForKey(70_000, 65_535)),
                Op::Write
            ),
            ErrorKind::InvalidInput
        );
    }

    #[test]
    fn server_errors_and_garbled_replies() {
        assert_eq!(
            kind_of(db(DbError::ServerError), Op::Write),
            ErrorKind::Unknown
        );
        assert_eq!(
            kind_of(db(DbError::ServerError), Op::Read),
            ErrorKind::Internal
        );
        assert_eq!(
            kind_of(db(DbError::ProtocolError), Op::Write),
            ErrorKind::Internal
        );
        let unexpected = || {
            ExecutionError::LastAttemptError(RequestAttemptError::UnexpectedResponse(
                scylla::frame::response::CqlResponseKind::Ready,
            ))
        };
        assert_eq!(kind_of(unexpected(), Op::Write), ErrorKind::Unknown);
        assert_eq!(kind_of(unexpected(), Op::Read), ErrorKind::Internal);
        assert_eq!(reply(Op::Write, "no [applied]").kind(), ErrorKind::Unknown);
        assert_eq!(reply(Op::Read, "two rows").kind(), ErrorKind::Internal);
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
        assert_eq!(map_err(refused, Op::Open).kind(), ErrorKind::Unavailable);
        assert_eq!(
            map_err(NewSessionError::EmptyKnownNodesList, Op::Open).kind(),
            ErrorKind::Config
        );
        assert_eq!(
            map_err(
                NewSessionError::FailedToResolveAnyHostname(vec!["nowhere.invalid:9042".into()]),
                Op::Open
            )
            .kind(),
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn corrupt_rows_name_the_key() {
        let key = Key::new("seq/x").unwrap();
        let err = corrupt(&key, "version is 0");
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        assert!(err.message().contains("seq/x"));
    }
}
