//! An [`ApiError`] as a gRPC status: the code follows from its kind, the
//! message is its message, and the kind rides along in the status's
//! metadata (`bakery-error-kind`) for a client that matches on it.

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::error::{ApiError, Kind};

/// The metadata key that carries the error's kind.
const KIND_KEY: &str = "bakery-error-kind";

/// The status code of `kind`, and `kind` as the HTTP body names it.
fn code_of(kind: Kind) -> (Code, &'static str) {
    match kind {
        Kind::InvalidInput => (Code::InvalidArgument, "invalid_input"),
        Kind::NotFound => (Code::NotFound, "not_found"),
        Kind::Unauthorized => (Code::Unauthenticated, "unauthorized"),
        Kind::Forbidden => (Code::PermissionDenied, "forbidden"),
        // The grant is gone: retrying the same call cannot succeed, the
        // caller must start over (gRPC's advice for ABORTED).
        Kind::Lost => (Code::Aborted, "lost"),
        // The stored state refuses the request (a stale token, another
        // payload): not retryable until that state changes.
        Kind::Conflict => (Code::FailedPrecondition, "conflict"),
        Kind::Exhausted => (Code::ResourceExhausted, "exhausted"),
        Kind::Unavailable => (Code::Unavailable, "unavailable"),
        // Retrying is safe (a reservation whose outcome is unknown is
        // skipped, never handed out), as for UNAVAILABLE; the message says
        // which it was.
        Kind::UnknownOutcome => (Code::Unavailable, "unknown_outcome"),
        Kind::Corrupt => (Code::DataLoss, "corrupt"),
        Kind::Internal => (Code::Internal, "internal"),
    }
}

impl From<ApiError> for Status {
    fn from(err: ApiError) -> Status {
        let body = err.body();
        let (code, kind) = code_of(body.kind);
        let message = if body.kind == Kind::UnknownOutcome {
            format!("outcome unknown: {}", body.message)
        } else {
            body.message.clone()
        };
        let mut status = Status::new(code, message);
        status
            .metadata_mut()
            .insert(KIND_KEY, MetadataValue::from_static(kind));
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KINDS: [Kind; 11] = [
        Kind::InvalidInput,
        Kind::NotFound,
        Kind::Unavailable,
        Kind::UnknownOutcome,
        Kind::Exhausted,
        Kind::Corrupt,
        Kind::Unauthorized,
        Kind::Forbidden,
        Kind::Lost,
        Kind::Conflict,
        Kind::Internal,
    ];

    #[test]
    fn the_kind_in_the_metadata_is_the_one_the_json_body_names() {
        for kind in KINDS {
            let json = serde_json::to_value(kind).expect("a kind serializes");
            let status = Status::from(ApiError::new(kind, "m"));
            let sent = status.metadata().get(KIND_KEY).map(|v| v.as_bytes());
            let named = json.as_str().map(str::as_bytes);
            assert_eq!(sent, named, "{kind:?}");
        }
    }

    #[test]
    fn codes_follow_the_kind_and_an_unknown_outcome_says_so() {
        let stale = Status::from(ApiError::new(Kind::Conflict, "token 1 is stale"));
        assert_eq!(
            (stale.code(), stale.message()),
            (Code::FailedPrecondition, "token 1 is stale")
        );
        let unknown = Status::from(ApiError::new(Kind::UnknownOutcome, "reply lost"));
        assert_eq!(unknown.code(), Code::Unavailable);
        assert!(unknown.message().contains("outcome unknown"), "{unknown:?}");
        let codes: std::collections::HashSet<_> = KINDS.iter().map(|k| code_of(*k).0).collect();
        assert_eq!(
            codes.len(),
            KINDS.len() - 1,
            "only unknown_outcome shares a code"
        );
    }
}
