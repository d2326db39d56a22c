//! How an instance listens and sizes what it hands out.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where `bakery serve` listens unless told otherwise: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// Ids a Tinyid segment (`nextSegmentId`) reserves unless configured.
pub const DEFAULT_SEGMENT_SIZE: u64 = 1_000;

/// The most sequence handles an instance keeps (each holds a reserved block
/// in memory); past it, the least recently created is dropped, its unserved
/// ids left unused.
pub const DEFAULT_MAX_SEQUENCES: usize = 10_000;

/// The lease of the store-side grants an instance holds for its sessions
/// unless configured: an instance that dies loses its holds after this.
pub const DEFAULT_LEASE: Duration = bakery::lock::DEFAULT_LEASE;

/// The most sessions an instance keeps open at once unless configured.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;

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
    lease: Duration,
    max_sessions: usize,
    tokens_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            listen: DEFAULT_LISTEN.parse().unwrap_or_else(|_| unreachable!()),
            segment_size: DEFAULT_SEGMENT_SIZE,
            max_sequences: DEFAULT_MAX_SEQUENCES,
            lease: DEFAULT_LEASE,
            max_sessions: DEFAULT_MAX_SESSIONS,
            tokens_file: None,
            tls_cert: None,
            tls_key: None,
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
    /// A TLS certificate or private key file could not be used: unreadable,
    /// not PEM, empty, or a key that does not match the certificate.
    #[error("cannot use the TLS file {}: {reason}", path.display())]
    Tls {
        /// The file at fault (the key when key and certificate disagree).
        path: PathBuf,
        /// Why.
        reason: String,
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
    /// The lease of the grants held for sessions (default
    /// [`DEFAULT_LEASE`]; at least 30 ms): renewed every lease/3 while the
    /// session lives; after a crash of the instance, waiters elsewhere are
    /// served one lease after its last renewal.
    with_lease(lease: Duration);
    /// The most sessions open at once (default [`DEFAULT_MAX_SESSIONS`]).
    with_max_sessions(max_sessions: usize);
    /// Require bearer tokens from this file (see [`Tokens`](crate::Tokens)
    /// for its format); also what allows a non-loopback address.
    with_tokens_file(tokens_file: impl Into<PathBuf>) Some;
    /// Serve HTTPS with the PEM certificate chain in this file (leaf
    /// first); needs [`with_tls_key`](Self::with_tls_key) too. HTTP/2 and
    /// HTTP/1.1 are both offered (ALPN `h2`, `http/1.1`).
    ///
    /// ```
    /// use bakery_serve::ServeConfig;
    ///
    /// let config = ServeConfig::default()
    ///     .with_tls_cert("/etc/bakery/cert.pem")
    ///     .with_tls_key("/etc/bakery/key.pem");
    /// assert!(config.check().is_ok());
    /// assert_eq!(config.tls_cert(), Some(std::path::Path::new("/etc/bakery/cert.pem")));
    /// // A certificate without its key is refused.
    /// assert!(ServeConfig::default().with_tls_cert("cert.pem").check().is_err());
    /// ```
    with_tls_cert(tls_cert: impl Into<PathBuf>) Some;
    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of
    /// [`with_tls_cert`](Self::with_tls_cert)'s certificate.
    ///
    /// ```
    /// use bakery_serve::ServeConfig;
    ///
    /// let config = ServeConfig::default().with_tls_key("key.pem");
    /// assert_eq!(config.tls_key(), Some(std::path::Path::new("key.pem")));
    /// assert!(config.check().is_err()); // no certificate
    /// ```
    with_tls_key(tls_key: impl Into<PathBuf>) Some;
}}

bakery_core::getters! { ServeConfig {
    /// The address to listen on.
    listen: SocketAddr;
    /// Ids per Tinyid segment.
    segment_size: u64;
    /// The most sequence handles kept.
    max_sequences: usize;
    /// The lease of the grants held for sessions.
    lease: Duration;
    /// The most sessions open at once.
    max_sessions: usize;
    /// The PEM certificate chain served, if HTTPS.
    ///
    /// ```
    /// assert!(bakery_serve::ServeConfig::default().tls_cert().is_none());
    /// ```
    tls_cert: Option<&Path>;
    /// The PEM private key of the certificate, if HTTPS.
    ///
    /// ```
    /// assert!(bakery_serve::ServeConfig::default().tls_key().is_none());
    /// ```
    tls_key: Option<&Path>;
    /// The tokens file, if access needs tokens.
    ///
    /// ```
    /// assert!(bakery_serve::ServeConfig::default().tokens_file().is_none());
    /// ```
    tokens_file: Option<&Path>;
}}

impl ServeConfig {
    /// Refuse what is unsafe or meaningless: a non-loopback address while
    /// the service has no access tokens (anyone who reaches the port could
    /// take ids and locks), a segment of no ids, no room for a single
    /// sequence or session, a lease shorter than 30 ms, a TLS certificate
    /// without its key or a key without its certificate. (The files
    /// themselves are read by [`bind`](crate::bind).)
    pub fn check(&self) -> Result<(), ServeError> {
        if !self.listen.ip().is_loopback() && self.tokens_file.is_none() {
            return Err(ServeError::Config(format!(
                "refusing to listen on {}: without access tokens bakery serve answers anyone \
                 who reaches the port, so it binds loopback only; give a tokens file \
                 (--tokens FILE) or listen on 127.0.0.1 or ::1 behind an authenticating proxy",
                self.listen
            )));
        }
        if self.lease < bakery::lock::MIN_LEASE {
            return Err(ServeError::Config(format!(
                "the lease must be at least {:?}, got {:?}",
                bakery::lock::MIN_LEASE,
                self.lease
            )));
        }
        if self.max_sessions == 0 {
            return Err(ServeError::Config(
                "the session limit must be at least 1".into(),
            ));
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
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => Err(ServeError::Config(
                "a TLS certificate needs its private key too".into(),
            )),
            (None, Some(_)) => Err(ServeError::Config(
                "a TLS private key needs its certificate too".into(),
            )),
            _ => Ok(()),
        }
    }
}
