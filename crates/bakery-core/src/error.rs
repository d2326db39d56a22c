//! One error type for every backend and recipe.

use std::error::Error as StdError;
use std::fmt;

/// Boxed source error, kept for `source()` chains but never part of the API.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What went wrong, in the categories a caller has to tell apart.
///
/// The split that matters most is [`ErrorKind::Unavailable`] (the request did
/// not take effect, retry freely) versus [`ErrorKind::Unknown`] (the request
/// was sent and the reply was lost: it may or may not have applied). A
/// sequence must never reuse a range whose reservation ended `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bad configuration: an unparsable URI, an unknown option, a backend
    /// that is not compiled in, a schema that does not match.
    Config,
    /// The caller passed something invalid (a key or name that breaks the
    /// rules, an argument out of range). Nothing was sent.
    InvalidInput,
    /// A stored row could not be understood (foreign or damaged data).
    /// Nothing was changed.
    Corrupt,
    /// The backend could not be reached or refused the request before it
    /// took effect (connection refused, lock busy, overloaded). Safe to retry.
    Unavailable,
    /// UNKNOWN OUTCOME: the request was sent but no reply came back (timeout
    /// after send, connection lost mid-call). It may or may not have applied.
    Unknown,
    /// A recipe ran out of room (a sequence reached `u64::MAX`).
    Exhausted,
    /// A wait gave up at the limit the caller configured (a lock acquire
    /// timeout). Nothing is held; any queue entry was withdrawn.
    TimedOut,
    /// A lock guard found that the lock is no longer its own (its lease ran
    /// out and another client evicted it). Writes fenced with its token will
    /// be rejected.
    Lost,
    /// A bug or an invariant broken inside bakery or the backend driver.
    Internal,
}

impl ErrorKind {
    /// A short lowercase label, stable for logs and JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Corrupt => "corrupt data",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Unknown => "unknown outcome",
            ErrorKind::Exhausted => "exhausted",
            ErrorKind::TimedOut => "timed out",
            ErrorKind::Lost => "lock lost",
            ErrorKind::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of every bakery operation: a [`ErrorKind`], the backend that
/// raised it, a human message and, optionally, the driver error behind it.
///
/// ```
/// use bakery_core::{Error, ErrorKind};
///
/// let err = Error::new(ErrorKind::Unknown, "sqlite", "commit reply lost");
/// assert!(err.is_temporary());
/// assert!(err.outcome_unknown());
/// assert_eq!(err.to_string(), "sqlite: unknown outcome: commit reply lost");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{backend}: {kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    backend: &'static str,
    message: String,
    #[source]
    source: Option<BoxError>,
}

impl Error {
    /// A new error of `kind`, raised by `backend` (or a recipe name).
    pub fn new(kind: ErrorKind, backend: &'static str, message: impl Into<String>) -> Self {
        Error {
            kind,
            backend,
            message: message.into(),
            source: None,
        }
    }

    /// Attach the underlying cause (a driver error, an I/O error).
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Shorthand for an [`ErrorKind::InvalidInput`] error.
    pub fn invalid_input(backend: &'static str, message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidInput, backend, message)
    }

    /// Shorthand for an [`ErrorKind::Config`] error.
    pub fn config(backend: &'static str, message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Config, backend, message)
    }

    /// Shorthand for an [`ErrorKind::Corrupt`] error.
    pub fn corrupt(backend: &'static str, message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corrupt, backend, message)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The backend (or recipe) that raised the error, e.g. `"sqlite"`.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The message, without the backend and kind prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when retrying later may succeed: [`ErrorKind::Unavailable`] and
    /// [`ErrorKind::Unknown`]. A retry after `Unknown` must re-read first.
    pub fn is_temporary(&self) -> bool {
        matches!(self.kind, ErrorKind::Unavailable | ErrorKind::Unknown)
    }

    /// True when the request may have been applied although it reported an
    /// error ([`ErrorKind::Unknown`]).
    pub fn outcome_unknown(&self) -> bool {
        self.kind == ErrorKind::Unknown
    }
}

/// `Result` with bakery's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
