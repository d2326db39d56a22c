//! How an instance listens and sizes what it hands out.

use std::net::SocketAddr;

/// Where `bakery serve` listens unless told otherwise: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// Ids a Tinyid segment (`nextSegmentId`) reserves unless configured.
pub const DEFAULT_SEGMENT_SIZE: u64 = 1_000;

/// The most sequence handles an instance keeps (each holds a reserved block
/// in memory); past it, the least recently created is dropped, its unserved
/// ids left unused.
pub const DEFAULT_MAX_SEQUENCES: usize = 10_000;

/// The settings of one instance.
///
/// ```
/// use bakery_serve::ServeConfig;
///
/// let config = ServeConfig::default().with_listen("127.0.0.1:0".parse().unwrap());
/// assert!(config.check().is_ok());
/// let open = ServeConfig::default().with_listen("0.0.0.0:7878".parse().unwrap());
/// assert!(open.check().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    listen: SocketAddr,
    segment_size: u64,
    max_sequences: usize,
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            listen: DEFAULT_LISTEN.parse().unwrap_or_else(|_| unreachable!()),
            segment_size: DEFAULT_SEGMENT_SIZE,
            max_sequences: DEFAULT_MAX_SEQUENCES,
        }
    }
}

/// Why an instance could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The settings are unsafe or invalid; the message names the fix.
    #[error("{0}")]
    Config(String),
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server stopped on an I/O error.
    #[error("serving stopped: {0}")]
    Io(#[from] std::io::Error),
}

bakery_core::setters! { ServeConfig {
    /// Listen on `addr` (default [`DEFAULT_LISTEN`]). Port 0 picks a free
    /// port.
    with_listen(listen: SocketAddr);
    /// Ids per Tinyid segment (default [`DEFAULT_SEGMENT_SIZE`]).
    with_segment_size(segment_size: u64);
    /// The most sequence handles kept (default [`DEFAULT_MAX_SEQUENCES`]).
    with_max_sequences(max_sequences: usize);
}}

bakery_core::getters! { ServeConfig {
    /// The address to listen on.
    listen: SocketAddr;
    /// Ids per Tinyid segment.
    segment_size: u64;
    /// The most sequence handles kept.
    max_sequences: usize;
}}

impl ServeConfig {
    /// Refuse what is unsafe or meaningless: a non-loopback address while
    /// the service has no access tokens (anyone who reaches the port could
    /// take ids and, later, locks), a segment of no ids, no room for a
    /// single sequence.
    pub fn check(&self) -> Result<(), ServeError> {
        if !self.listen.ip().is_loopback() {
            return Err(ServeError::Config(format!(
                "refusing to listen on {}: without access tokens bakery serve answers anyone \
                 who reaches the port, so it binds loopback only; listen on 127.0.0.1 or ::1 \
                 and put an authenticating proxy in front",
                self.listen
            )));
        }
        if self.segment_size == 0 {
            return Err(ServeError::Config(
                "the Tinyid segment size must be at least 1".into(),
            ));
        }
        if self.max_sequences == 0 {
            return Err(ServeError::Config(
                "the sequence handle limit must be at least 1".into(),
            ));
        }
        Ok(())
    }
}
