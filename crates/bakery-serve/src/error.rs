//! The service's one error shape: an HTTP status and a JSON body
//! `{"kind", "message"}` whose `kind` a client can match on.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bakery::ErrorKind;
use serde::{Deserialize, Serialize};
use utoipa::{IntoResponses, ToSchema};

/// What went wrong, for a client to match on (the body's `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The request is malformed: a bad name, count, size or parameter.
    InvalidInput,
    /// No such thing (a route, or a sequence nobody has used).
    NotFound,
    /// The store is unreachable or refused the call before it took effect;
    /// retry after the `Retry-After` seconds.
    Unavailable,
    /// A write was sent and no reply came back: it may or may not have
    /// applied. Whatever it may have reserved is never handed out.
    UnknownOutcome,
    /// A sequence has no ids left (it reached `u64::MAX`, or it was handed
    /// back to the generator it was migrated from).
    Exhausted,
    /// A stored row could not be understood; nothing was changed.
    Corrupt,
    /// No access token, or one the server does not know (with a tokens
    /// file); send `Authorization: Bearer TOKEN`.
    Unauthorized,
    /// The token is known but not for this operation or name, or the
    /// session belongs to another token.
    Forbidden,
    /// The grant is no longer the session's (its lease ran out and another
    /// holder was served): what was done under it may have overlapped.
    Lost,
    /// The request contradicts what is stored: an idempotency key reused
    /// with another payload, a semaphore asked with another permit count.
    Conflict,
    /// The server is misconfigured, or broke an invariant of its own.
    Internal,
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, for a program.
    pub kind: Kind,
    /// What went wrong, for a person: names the offending input or cause.
    pub message: String,
}

/// The error responses of every route that returns JSON, as the OpenAPI
/// document lists them (handlers return [`ApiError`]; this type only
/// documents). A route lists them all, though each answers only those its
/// operation can meet.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum ErrorResponses {
    /// A bad name, count, size, TTL, timeout or field; the message names it.
    #[response(status = 400)]
    InvalidInput(ErrorBody),
    /// No token, or an unknown one (only with a tokens file).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token may not do this to this name, or the session is another
    /// token's.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such session (it ended, expired, or lives on another instance),
    /// grant or record.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// The grant was lost, the request contradicts the stored state, or
    /// the sequence has no ids left.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The store is unavailable, or the outcome of a write is unknown (ids
    /// it may have reserved are never handed out); retry after
    /// `Retry-After`.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// An error a handler returns: its status follows from its kind.
///
/// ```
/// use bakery_serve::{ApiError, Kind};
///
/// let err = ApiError::invalid_input("count must be at least 1");
/// assert_eq!(err.body().kind, Kind::InvalidInput);
/// assert_eq!(err.status().as_u16(), 400);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    body: ErrorBody,
}

/// Seconds a client is told to wait before retrying a 503.
const RETRY_AFTER_SECONDS: u64 = 1;

impl ApiError {
    /// An error of `kind` with `message`.
    pub fn new(kind: Kind, message: impl Into<String>) -> ApiError {
        ApiError {
            body: ErrorBody {
                kind,
                message: message.into(),
            },
        }
    }

    /// A malformed request (400).
    pub fn invalid_input(message: impl Into<String>) -> ApiError {
        ApiError::new(Kind::InvalidInput, message)
    }

    /// Nothing there (404).
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(Kind::NotFound, message)
    }

    /// Its body.
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }

    /// Its HTTP status.
    pub fn status(&self) -> StatusCode {
        match self.body.kind {
            Kind::InvalidInput => StatusCode::BAD_REQUEST,
            Kind::NotFound => StatusCode::NOT_FOUND,
            Kind::Unauthorized => StatusCode::UNAUTHORIZED,
            Kind::Forbidden => StatusCode::FORBIDDEN,
            Kind::Exhausted | Kind::Lost | Kind::Conflict => StatusCode::CONFLICT,
            Kind::Unavailable | Kind::UnknownOutcome => StatusCode::SERVICE_UNAVAILABLE,
            Kind::Corrupt | Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.body.kind, self.body.message)
    }
}

impl std::error::Error for ApiError {}

impl From<bakery::Error> for ApiError {
    fn from(err: bakery::Error) -> ApiError {
        let kind = match err.kind() {
            ErrorKind::InvalidInput => Kind::InvalidInput,
            ErrorKind::Unavailable | ErrorKind::TimedOut => Kind::Unavailable,
            ErrorKind::Unknown => Kind::UnknownOutcome,
            ErrorKind::Exhausted => Kind::Exhausted,
            ErrorKind::Corrupt => Kind::Corrupt,
            ErrorKind::Lost => Kind::Lost,
            // Config, Internal, and kinds added later: the server's own fault.
            _ => Kind::Internal,
        };
        if kind == Kind::Internal || kind == Kind::Corrupt {
            tracing::error!(error = %err, "request failed");
        }
        ApiError::new(kind, err.to_string())
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> ApiError {
        ApiError::invalid_input(rejection.body_text())
    }
}

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::JsonRejection) -> ApiError {
        ApiError::invalid_input(rejection.body_text())
    }
}

impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::PathRejection) -> ApiError {
        ApiError::invalid_input(rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, Json(self.body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
