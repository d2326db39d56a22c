//! The one place DynamoDB and SDK errors become bakery errors.

use std::error::Error as StdError;
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use bakery_core::error::one_line;
use bakery_core::{Error, ErrorKind, Operation};

use crate::BACKEND;

/// What the failed request was; with the store call's [`Operation`] it
/// decides whether a lost reply leaves a write in doubt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Opening: `DescribeTable`, `CreateTable`.
    Connect,
    /// A read (`GetItem`): nothing it does can change a row.
    Read,
    /// A conditional `PutItem` or `UpdateItem` of `put_if_version` or
    /// `delete_if_version`.
    Write,
}

/// Error codes with which DynamoDB refuses a request before applying it
/// (AWS's "Error handling with DynamoDB": throttling and limits are
/// retryable, 4xx, nothing written). `TransactionConflictException` on a
/// single-item write: the item is locked by a transaction in progress, and
/// the write was rejected. A 503 is not among them: AWS does not say a
/// write answered so did not apply, and a proxy or endpoint in between can
/// answer 503 after forwarding it.
const REFUSED: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
    "TransactionConflictException",
    "TransactionInProgressException",
];

/// Codes saying the credentials or the account do not fit this
/// configuration: a retry will not cure them.
const CONFIG: &[&str] = &[
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "IncompleteSignature",
    "IncompleteSignatureException",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "ResourceNotFoundException",
];

/// The bakery kind of a DynamoDB error `code` (with its HTTP `status`) at
/// `stage`.
pub(crate) fn classify_code(code: &str, status: u16, stage: Stage) -> ErrorKind {
    if REFUSED.contains(&code) {
        ErrorKind::Unavailable
    } else if CONFIG.contains(&code) {
        ErrorKind::Config
    } else if code == "ValidationException" && stage == Stage::Write {
        // The only input bakery does not check itself is the item size
        // (400 KB); every other validation error is bakery's own bug, and
        // equally refused before anything applied.
        ErrorKind::InvalidInput
    } else if status >= 500 {
        // InternalServerError: AWS documents that the request may have
        // succeeded; only a read can say "not applied". (ServiceUnavailable,
        // 503: see REFUSED.)
        if stage == Stage::Write {
            ErrorKind::Unknown
        } else {
            ErrorKind::Unavailable
        }
    } else {
        ErrorKind::Internal
    }
}

/// The bakery kind of an SDK error raised at `stage`.
pub(crate) fn classify<E>(e: &SdkError<E, HttpResponse>, stage: Stage) -> ErrorKind
where
    E: ProvideErrorMetadata + StdError + 'static,
{
    let write = stage == Stage::Write;
    match e {
        // The request was never built (a bad endpoint, no credentials):
        // nothing was sent.
        SdkError::ConstructionFailure(_) => {
            if no_credentials(e) {
                ErrorKind::Config
            } else {
                ErrorKind::Unavailable
            }
        }
        SdkError::DispatchFailure(failure) => {
            // A connection that could not be made (refused, TLS, the
            // connect timeout) carried nothing; any other failure of the
            // connection may have come after the request was written.
            let before_send = failure.is_user()
                || failure
                    .as_connector_error()
                    .is_some_and(|c| connect_failed(c));
            if write && !before_send {
                ErrorKind::Unknown
            } else {
                ErrorKind::Unavailable
            }
        }
        // A timeout (the SDK's own, or a read timeout) or a response that
        // could not be read: the request was sent.
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            if write {
                ErrorKind::Unknown
            } else {
                ErrorKind::Unavailable
            }
        }
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            classify_code(e.code().unwrap_or(""), status, stage)
        }
        _ => {
            if write {
                ErrorKind::Unknown
            } else {
                ErrorKind::Unavailable
            }
        }
    }
}

/// Whether hyper-util says the connection was never established.
fn connect_failed(e: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(client) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
            return client.is_connect();
        }
        next = e.source();
    }
    false
}

/// Whether signing failed for want of credentials (the default chain found
/// none).
fn no_credentials<E>(e: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata + StdError + 'static,
{
    let mut next: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(e) = next {
        if e.downcast_ref::<aws_credential_types::provider::error::CredentialsError>()
            .is_some()
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// The SDK's message: the service's code and message, or the error chain.
pub(crate) fn sdk_message<E>(e: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + StdError + 'static,
{
    match (e.code(), e.message()) {
        (Some(code), Some(message)) if !message.is_empty() => {
            format!("{code}: {}", one_line(message))
        }
        (Some(code), _) => code.to_string(),
        _ => one_line(&DisplayErrorContext(e).to_string()),
    }
}

/// Map an SDK error of a request made at `stage` for the store call `op`.
pub(crate) fn map_err<E>(e: SdkError<E, HttpResponse>, op: Operation, stage: Stage) -> Error
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let kind = classify(&e, stage);
    let mut detail = sdk_message(&e);
    if kind == ErrorKind::Config {
        detail.push_str(&config_hint(e.code()));
    }
    let err = match kind {
        ErrorKind::Unknown => Error::in_doubt(BACKEND, op, detail),
        ErrorKind::Unavailable | ErrorKind::Config | ErrorKind::InvalidInput => {
            Error::not_sent(kind, BACKEND, op, detail)
        }
        _ => Error::new(kind, BACKEND, format!("{op} failed: {detail}")).during(op),
    };
    err.with_source(e)
}

/// What to do about a configuration error.
fn config_hint(code: Option<&str>) -> String {
    match code {
        Some("ResourceNotFoundException") => {
            " (the table is gone: it was deleted while the store was open; reopen the store to create it again)".into()
        }
        Some("AccessDeniedException") | Some("AccessDenied") => {
            " (the credentials lack a permission bakery needs: dynamodb:DescribeTable, GetItem, PutItem, UpdateItem, and CreateTable unless the table exists)".into()
        }
        None => " (no AWS credentials: set them as for any AWS tool — AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance role — or put KEY_ID:SECRET@ in the URI for a local server)".into(),
        Some(_) => " (check the credentials and the region)".into(),
    }
}

/// A call that ran out of its time budget. A write it had sent may have
/// applied.
pub(crate) fn timed_out(op: Operation, write_sent: bool, limit: Duration) -> Error {
    let detail = format!("no reply within {} ms (timeout_ms)", limit.as_millis());
    if write_sent {
        Error::in_doubt(BACKEND, op, detail)
    } else {
        Error::not_sent(ErrorKind::Unavailable, BACKEND, op, detail)
    }
}

/// An error of a call whose write was sent and whose outcome is unknown:
/// whatever failed afterwards, the write may have applied.
pub(crate) fn in_doubt(op: Operation, e: Error) -> Error {
    if e.kind() == ErrorKind::Unknown || !op.writes() {
        return e.during(op);
    }
    Error::in_doubt(BACKEND, op, e.message().to_string()).with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_is_unavailable_and_a_500_write_is_unknown() {
        for code in [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "RequestLimitExceeded",
        ] {
            assert_eq!(
                classify_code(code, 400, Stage::Write),
                ErrorKind::Unavailable,
                "{code}"
            );
        }
        assert_eq!(
            classify_code("ServiceUnavailable", 503, Stage::Write),
            ErrorKind::Unknown
        );
        assert_eq!(
            classify_code("ServiceUnavailable", 503, Stage::Read),
            ErrorKind::Unavailable
        );
        assert_eq!(
            classify_code("InternalServerError", 500, Stage::Write),
            ErrorKind::Unknown
        );
        assert_eq!(
            classify_code("InternalServerError", 500, Stage::Read),
            ErrorKind::Unavailable
        );
        assert_eq!(
            classify_code("AccessDeniedException", 400, Stage::Connect),
            ErrorKind::Config
        );
        assert_eq!(
            classify_code("ValidationException", 400, Stage::Write),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            classify_code("SomethingNew", 400, Stage::Read),
            ErrorKind::Internal
        );
    }
}
