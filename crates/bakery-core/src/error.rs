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
    operation: Option<Operation>,
    sent: Option<Sent>,
    #[source]
    source: Option<BoxError>,
}

/// The store call that failed. It decides what a lost reply means: only a
/// [`Operation::writes`] call can have applied anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Opening a store: connecting, authenticating, checking the schema and
    /// the server's settings.
    Open,
    /// [`VersionedStore::get`](crate::VersionedStore::get).
    Get,
    /// [`VersionedStore::put_if_version`](crate::VersionedStore::put_if_version).
    Put,
    /// [`VersionedStore::delete_if_version`](crate::VersionedStore::delete_if_version).
    Delete,
    /// [`VersionedStore::watch`](crate::VersionedStore::watch): never writes.
    Watch,
    /// [`VersionedStore::notify`](crate::VersionedStore::notify): never writes a row.
    Notify,
}

impl Operation {
    /// The name used in messages: the method name, or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Open => "open",
            Operation::Get => "get",
            Operation::Put => "put_if_version",
            Operation::Delete => "delete_if_version",
            Operation::Watch => "watch",
            Operation::Notify => "notify",
        }
    }

    /// True for the calls that change a row (put and delete): a lost reply
    /// to one of them leaves the outcome unknown.
    pub fn writes(self) -> bool {
        matches!(self, Operation::Put | Operation::Delete)
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How far a failed request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Sent {
    /// It never reached the server, or the server refused it before it could
    /// apply (connection refused, busy, a rejected argument).
    No,
    /// It was (or may have been) sent and no usable reply came back.
    Maybe,
}

impl Error {
    /// A new error of `kind`, raised by `backend` (or a recipe name).
    pub fn new(kind: ErrorKind, backend: &'static str, message: impl Into<String>) -> Self {
        Error {
            kind,
            backend,
            message: message.into(),
            operation: None,
            sent: None,
            source: None,
        }
    }

    /// A store call `op` that failed before its request could apply: `kind`
    /// is usually [`ErrorKind::Unavailable`] (or `Config`, `InvalidInput`
    /// for a refusal that a retry will not cure). For a write the message
    /// says that nothing was applied.
    ///
    /// ```
    /// use bakery_core::{Error, ErrorKind, Operation, Sent};
    ///
    /// let err = Error::not_sent(ErrorKind::Unavailable, "redis", Operation::Put, "connection refused");
    /// assert_eq!(err.sent(), Some(Sent::No));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "redis: unavailable: put_if_version failed, nothing was applied: connection refused"
    /// );
    /// ```
    pub fn not_sent(
        kind: ErrorKind,
        backend: &'static str,
        op: Operation,
        detail: impl fmt::Display,
    ) -> Self {
        let message = if op.writes() && kind != ErrorKind::Config {
            format!("{op} failed, nothing was applied: {detail}")
        } else {
            format!("{op} failed: {detail}")
        };
        let mut err = Error::new(kind, backend, message);
        err.operation = Some(op);
        err.sent = Some(Sent::No);
        err
    }

    /// A store call `op` whose request was (or may have been) sent and got
    /// no usable reply: a write is [`ErrorKind::Unknown`] (it may or may
    /// not have applied, and the message says so), anything else
    /// [`ErrorKind::Unavailable`].
    ///
    /// ```
    /// use bakery_core::{Error, ErrorKind, Operation};
    ///
    /// let write = Error::in_doubt("etcd", Operation::Put, "connection reset");
    /// assert_eq!(write.kind(), ErrorKind::Unknown);
    /// assert!(write.message().contains("may or may not have applied"));
    /// let read = Error::in_doubt("etcd", Operation::Get, "connection reset");
    /// assert_eq!(read.kind(), ErrorKind::Unavailable);
    /// ```
    pub fn in_doubt(backend: &'static str, op: Operation, detail: impl fmt::Display) -> Self {
        let (kind, message) = if op.writes() {
            (
                ErrorKind::Unknown,
                format!("{op} failed, it may or may not have applied: {detail}"),
            )
        } else {
            (ErrorKind::Unavailable, format!("{op} failed: {detail}"))
        };
        let mut err = Error::new(kind, backend, message);
        err.operation = Some(op);
        err.sent = Some(Sent::Maybe);
        err
    }

    /// Record which store call failed (for errors built with [`Error::new`]).
    pub fn during(mut self, op: Operation) -> Self {
        self.operation = Some(op);
        self
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

    /// The store call that failed, when the backend recorded it.
    pub fn operation(&self) -> Option<Operation> {
        self.operation
    }

    /// Whether the request reached the server, when the backend knows.
    pub fn sent(&self) -> Option<Sent> {
        self.sent
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

/// `e` and its chain of sources on one line, `outer: inner: innermost`,
/// each message's whitespace folded to single spaces, and a source left out
/// when the text so far already contains its message (drivers often repeat
/// their cause in their own message).
///
/// ```
/// use bakery_core::error::cause_chain;
///
/// let io = std::io::Error::new(std::io::ErrorKind::Other, "connection\n  reset");
/// assert_eq!(cause_chain(&io), "connection reset");
/// ```
pub fn cause_chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = one_line(&e.to_string());
    let mut source = e.source();
    while let Some(cause) = source {
        let text = one_line(&cause.to_string());
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// `text` with every run of whitespace (newlines included) folded to one
/// space, for messages that must stay on one line.
///
/// ```
/// assert_eq!(bakery_core::error::one_line(" a\n  b "), "a b");
/// ```
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Wrap(String, #[source] std::io::Error);

    #[test]
    fn chain_skips_causes_already_said() {
        let inner = std::io::Error::other("refused");
        let outer = Wrap("connect: refused".into(), inner);
        assert_eq!(cause_chain(&outer), "connect: refused");
        let outer = Wrap("connect".into(), std::io::Error::other("refused"));
        assert_eq!(cause_chain(&outer), "connect: refused");
    }

    #[test]
    fn writes_in_doubt_are_unknown_reads_unavailable() {
        for op in [Operation::Put, Operation::Delete] {
            let err = Error::in_doubt("x", op, "reset");
            assert_eq!(err.kind(), ErrorKind::Unknown);
            assert_eq!(err.operation(), Some(op));
            assert_eq!(err.sent(), Some(Sent::Maybe));
        }
        for op in [
            Operation::Open,
            Operation::Get,
            Operation::Watch,
            Operation::Notify,
        ] {
            let err = Error::in_doubt("x", op, "reset");
            assert_eq!(err.kind(), ErrorKind::Unavailable, "{op}");
            assert!(!err.message().contains("may or may not"), "{err}");
        }
        let err = Error::not_sent(ErrorKind::Config, "x", Operation::Put, "denied");
        assert_eq!(err.message(), "put_if_version failed: denied");
        assert_eq!(Error::new(ErrorKind::Internal, "x", "m").operation(), None);
    }
}
