//! [`RedisConfig`]: the URI, its options, validation and redaction.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use bakery_core::durability::{UriOptions, DEFAULT_RECHECK, RECHECK_OPTION};
use bakery_core::options::{self, invalid};
use bakery_core::uri::{percent_decode, Password};
use bakery_core::{Error, Result};
use serde::Deserialize;

use crate::BACKEND;

/// The port used when a URI names none.
pub const DEFAULT_PORT: u16 = 6379;

/// The prefix put in front of every bakery key when none is configured.
pub const DEFAULT_PREFIX: &str = "bakery:";

/// The longest accepted key prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 128;

/// How long one call (connecting, a read, a compare-and-set) may take before
/// it fails: [`ErrorKind::Unavailable`] for reads and for writes that were
/// not sent, [`ErrorKind::Unknown`] for writes that were.
///
/// [`ErrorKind::Unavailable`]: bakery_core::ErrorKind::Unavailable
/// [`ErrorKind::Unknown`]: bakery_core::ErrorKind::Unknown
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest accepted `timeout_ms` (one hour, as every backend).
pub const MAX_TIMEOUT: Duration = Duration::from_millis(options::MAX_MILLIS);

/// Dedicated connections kept by the `watch` strategy.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// The largest accepted `pool_size`.
pub const MAX_POOL_SIZE: usize = 256;

/// The largest accepted `wait_replicas`.
pub const MAX_WAIT_REPLICAS: usize = 255;

/// How a compare-and-set is made atomic on the server. Both give the same
/// results (the conformance suite runs against each); they differ in round
/// trips and in how they behave under contention. See the crate docs for
/// the measured figures that chose the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum CasStrategy {
    /// A Lua script, loaded once and run by `EVALSHA`: the read, the version
    /// check and the write are one atomic server-side step, one round trip,
    /// no connection state (so one multiplexed connection serves every call).
    /// The default: it was faster in every measured case.
    #[default]
    Script,
    /// `WATCH key` + `HMGET`, the version compared in Rust, then
    /// `MULTI`/`HSET`/`HINCRBY`/`EXEC`; an aborted `EXEC` (a concurrent
    /// write) re-reads and reports the current row. Two round trips, and one
    /// dedicated connection per transaction, from a pool of `pool_size`.
    Watch,
}

bakery_core::spellings! {
    /// The URI spelling: `"script"` or `"watch"`.
    CasStrategy { Script => "script", Watch => "watch" }
}

/// How to reach a Redis server and lay bakery's rows out in it: built from a
/// URI with [`RedisConfig::from_uri`] or in code with [`RedisConfig::new`]
/// and the `with_*` methods. [`RedisStore::open`](crate::RedisStore::open) validates it.
///
/// URI: `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?OPTIONS]`, or
/// `rediss://…` for TLS (feature `tls`, on by default). The user and
/// password are percent-decoded; `DB` is the logical database (default 0).
///
/// | option | default | meaning |
/// |--------|---------|---------|
/// | `prefix=P` | `bakery:` | prepended to every key; 1 to 128 bytes of `A-Z a-z 0-9 _ - . : / @ + = { }` |
/// | `cas=script\|watch` | `script` | see [`CasStrategy`] |
/// | `timeout_ms=N` | `5000` | limit on each call, 1 ms to 1 h |
/// | `pool_size=N` | `16` | dedicated connections of the `watch` strategy, 1 to 256 |
/// | `ca_file=PATH` | system roots | PEM file of the CA to trust (`rediss` only) |
/// | `wait_replicas=N` | the replicas connected at open | after every call, `WAIT` until `N` replicas have everything it wrote or read; fewer than those connected can lose writes in a failover (crate docs, "Replicas") |
/// | `accept_data_loss=true\|false` | `false` | open even on a server that can lose acknowledged writes (crate docs, "Durability") |
/// | `durability_recheck_ms=N` | `1000` | re-read the durability settings this often while live (and after every reconnect), 1 ms to 1 h (crate docs, "Durability") |
///
/// The password never appears in `Debug` or `Display` output, nor in error
/// messages.
///
/// ```
/// use std::time::Duration;
/// use bakery_redis::{CasStrategy, RedisConfig};
///
/// let config = RedisConfig::from_uri(
///     "redis://app:s3cret@cache.internal:6380/2?prefix=myapp:&cas=watch&timeout_ms=250",
/// )?;
/// assert_eq!(config.host(), "cache.internal");
/// assert_eq!(config.port(), 6380);
/// assert_eq!(config.db(), 2);
/// assert_eq!(config.prefix(), "myapp:");
/// assert_eq!(config.cas(), CasStrategy::Watch);
/// assert_eq!(config.timeout(), Duration::from_millis(250));
///
/// // The password is redacted everywhere it could be printed.
/// assert!(!format!("{config} {config:?}").contains("s3cret"));
///
/// let same = RedisConfig::new("cache.internal")
///     .with_port(6380)
///     .with_db(2)
///     .with_username("app")
///     .with_password("s3cret")
///     .with_prefix("myapp:")
///     .with_cas(CasStrategy::Watch)
///     .with_timeout(Duration::from_millis(250));
/// assert_eq!(config, same);
///
/// let err = RedisConfig::from_uri("redis://localhost?colour=blue").unwrap_err();
/// assert_eq!(err.kind(), bakery_core::ErrorKind::Config);
/// # Ok::<(), bakery_core::Error>(())
/// ```
/// `Debug` shows everything but the password (`Some("***")`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    tls: bool,
    host: String,
    port: u16,
    db: i64,
    username: Option<String>,
    password: Option<Password>,
    prefix: String,
    cas: CasStrategy,
    timeout: Duration,
    pool_size: usize,
    ca_file: Option<PathBuf>,
    wait_replicas: Option<usize>,
    accept_data_loss: bool,
    durability_recheck: Duration,
}

impl RedisConfig {
    /// A plain-TCP server at `host` on port [`DEFAULT_PORT`], database 0,
    /// no credentials, and the defaults for everything else.
    pub fn new(host: impl Into<String>) -> Self {
        RedisConfig {
            tls: false,
            host: host.into(),
            port: DEFAULT_PORT,
            db: 0,
            username: None,
            password: None,
            prefix: DEFAULT_PREFIX.to_string(),
            cas: CasStrategy::default(),
            timeout: DEFAULT_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            ca_file: None,
            wait_replicas: None,
            accept_data_loss: false,
            durability_recheck: DEFAULT_RECHECK,
        }
    }

    /// Parse a `redis://` or `rediss://` URI (forms and options in the type
    /// docs). Any problem is an [`ErrorKind::Config`](bakery_core::ErrorKind::Config)
    /// error naming the offending part, with the password redacted.
    pub fn from_uri(uri: &str) -> Result<Self> {
        let (base, query) = match uri.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (uri, None),
        };
        let scheme = base
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        let tls = match scheme.as_deref() {
            Some("redis") => false,
            Some("rediss") => true,
            _ => {
                return Err(Error::config(
                    BACKEND,
                    format!(
                        "{:?} is not a redis URI (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] or rediss://…)",
                        bakery_core::uri::redact(uri)
                    ),
                ))
            }
        };
        // The URI is only ever shown redacted.
        let bad = |why: &str| {
            Error::config(
                BACKEND,
                format!("redis URI {:?} {why}", bakery_core::uri::redact(uri)),
            )
        };
        let url = url::Url::parse(base).map_err(|e| bad(&format!("does not parse: {e}")))?;
        if url.fragment().is_some() {
            return Err(bad(
                "has a `#` fragment; none is supported (options go after `?`)",
            ));
        }
        let host = match url.host() {
            // Host names are case-insensitive; keep one spelling.
            Some(url::Host::Domain(name)) if !name.is_empty() => name.to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            _ => return Err(bad("names no host")),
        };
        let mut config = RedisConfig::new(host).with_tls(tls);
        if let Some(port) = url.port() {
            config.port = port;
        }
        if !url.username().is_empty() {
            config.username = Some(percent_decode(BACKEND, "user name", url.username())?);
        }
        if let Some(password) = url.password() {
            // Never echo the password, not even in a decoding error.
            config.password = Some(Password::new(
                percent_decode(BACKEND, "password", password).map_err(|_| {
                    Error::config(
                        BACKEND,
                        "redis URI password has an invalid percent-encoding or is not UTF-8",
                    )
                })?,
            ));
        }
        config.db = match url.path() {
            "" | "/" => 0,
            path => path
                .strip_prefix('/')
                .filter(|db| !db.is_empty() && db.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|db| db.parse::<i64>().ok())
                .ok_or_else(|| {
                    Error::config(
                        BACKEND,
                        format!(
                            "redis URI path {path:?} is not a database number (expected /0, /1, …)"
                        ),
                    )
                })?,
        };
        let options: Options = options::from_query(BACKEND, query)?;
        if let Some(prefix) = options.prefix {
            config.prefix = prefix;
        }
        config.cas = options.cas.unwrap_or_default();
        config.timeout = options.timeout_ms.unwrap_or(DEFAULT_TIMEOUT);
        config.pool_size = options.pool_size.unwrap_or(DEFAULT_POOL_SIZE);
        if let Some(path) = options.ca_file {
            if path.is_empty() {
                return Err(invalid(BACKEND, "ca_file", &path, "a file path"));
            }
            config.ca_file = Some(PathBuf::from(path));
        }
        config.wait_replicas = options.wait_replicas;
        config.accept_data_loss = options.accept_data_loss.unwrap_or(false);
        config.durability_recheck = options.durability_recheck_ms.unwrap_or(DEFAULT_RECHECK);
        config.validate()?;
        Ok(config)
    }

    /// True when a password is configured (the password itself is not
    /// exposed).
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    pub(crate) fn password(&self) -> Option<&str> {
        self.password.as_ref().map(Password::expose)
    }

    /// Authenticate with `password` (`AUTH`). Never printed.
    pub fn with_password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(Password::new(password));
        self
    }

    /// Check the whole configuration; an [`ErrorKind::Config`](bakery_core::ErrorKind::Config)
    /// error names what is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.host.is_empty() {
            return Err(Error::config(BACKEND, "redis host is empty"));
        }
        if self.tls && !cfg!(feature = "tls") {
            return Err(Error::config(
                BACKEND,
                "rediss:// (TLS) needs the `tls` feature of bakery-redis, which this build has off",
            ));
        }
        if self.ca_file.is_some() && !self.tls {
            return Err(Error::config(
                BACKEND,
                "redis option `ca_file` needs TLS (a rediss:// URI)",
            ));
        }
        if self.db < 0 {
            return Err(Error::config(
                BACKEND,
                format!("redis database {} is negative", self.db),
            ));
        }
        if self.username.is_some() && self.password.is_none() {
            return Err(Error::config(
                BACKEND,
                "redis user name given without a password (use redis://USER:PASSWORD@HOST)",
            ));
        }
        validate_prefix(&self.prefix)?;
        if let Some(n) = self.wait_replicas.filter(|&n| n > MAX_WAIT_REPLICAS) {
            return Err(invalid(
                BACKEND,
                "wait_replicas",
                &n.to_string(),
                &format!("a number of replicas from 0 to {MAX_WAIT_REPLICAS}"),
            ));
        }
        for (name, value) in [
            ("timeout_ms", self.timeout),
            (RECHECK_OPTION, self.durability_recheck),
        ] {
            if value.is_zero() || value > MAX_TIMEOUT {
                return Err(invalid(
                    BACKEND,
                    name,
                    &value.as_millis().to_string(),
                    &format!("a number of milliseconds from 1 to {}", options::MAX_MILLIS),
                ));
            }
        }
        options::pool_size(BACKEND, self.pool_size, MAX_POOL_SIZE)
    }
}

/// `Display` is the URI with the password replaced by `***`.
impl fmt::Display for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "rediss" } else { "redis" };
        write!(f, "{scheme}://")?;
        match (&self.username, &self.password) {
            (Some(user), Some(_)) => write!(f, "{user}:***@")?,
            (Some(user), None) => write!(f, "{user}@")?,
            (None, Some(_)) => f.write_str(":***@")?,
            (None, None) => {}
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        write!(
            f,
            ":{}/{}?prefix={}&cas={}&timeout_ms={}&pool_size={}",
            self.port,
            self.db,
            self.prefix,
            self.cas,
            self.timeout.as_millis(),
            self.pool_size
        )?;
        if let Some(ca) = &self.ca_file {
            write!(f, "&ca_file={}", ca.display())?;
        }
        if let Some(n) = self.wait_replicas {
            write!(f, "&wait_replicas={n}")?;
        }
        let durability = UriOptions {
            accept_data_loss: self.accept_data_loss,
            recheck: self.durability_recheck,
        };
        write!(f, "{durability}")?;
        Ok(())
    }
}

/// A prefix is formatted into every Redis key, so it keeps to a safe
/// alphabet: the key alphabet plus `{ }` (for a cluster hash tag).
fn validate_prefix(prefix: &str) -> Result<()> {
    let allowed = |c: char| {
        c.is_ascii_alphanumeric()
            || matches!(c, '_' | '-' | '.' | ':' | '/' | '@' | '+' | '=' | '{' | '}')
    };
    if (1..=MAX_PREFIX_LEN).contains(&prefix.len()) && prefix.chars().all(allowed) {
        return Ok(());
    }
    Err(invalid(
        BACKEND,
        "prefix",
        prefix,
        &format!(
            "1 to {MAX_PREFIX_LEN} bytes of ASCII letters, digits and _ - . : / @ + = {{ }} (it keeps bakery's keys apart from other data)"
        ),
    ))
}

/// The URI options (the table in [`RedisConfig`]'s docs), read by
/// [`bakery_core::options`] with the rules every backend shares.
#[derive(Deserialize)]
struct Options {
    prefix: Option<String>,
    cas: Option<CasStrategy>,
    #[serde(default, deserialize_with = "options::millis")]
    timeout_ms: Option<Duration>,
    pool_size: Option<usize>,
    ca_file: Option<String>,
    wait_replicas: Option<usize>,
    accept_data_loss: Option<bool>,
    #[serde(default, deserialize_with = "options::millis")]
    durability_recheck_ms: Option<Duration>,
}

bakery_core::setters! { RedisConfig {
    /// Connect by TLS (`rediss://`) or not (default). TLS needs the `tls`
    /// feature; [`RedisConfig::validate`] says so if it is off.
    with_tls(tls: bool);
    /// The server's port (default [`DEFAULT_PORT`]).
    with_port(port: u16);
    /// The logical database (`SELECT n`; default 0).
    with_db(db: i64);
    /// Authenticate as `username` (Redis 6 ACL users; needs a password).
    with_username(username: impl Into<String>) Some;
    /// Prefix every key with `prefix` (default [`DEFAULT_PREFIX`]).
    with_prefix(prefix: impl Into<String>);
    /// Choose how a compare-and-set is made atomic (default
    /// [`CasStrategy::Script`]).
    with_cas(cas: CasStrategy);
    /// Limit each call to `timeout` (default [`DEFAULT_TIMEOUT`]).
    with_timeout(timeout: Duration);
    /// Keep at most `pool_size` dedicated connections for the `watch`
    /// strategy (default [`DEFAULT_POOL_SIZE`]). Calls beyond that wait for one.
    with_pool_size(pool_size: usize);
    /// Trust the CA certificate(s) in the PEM file at `ca_file` instead of
    /// the system's roots (`rediss` only).
    with_ca_file(ca_file: impl Into<PathBuf>) Some;
    /// After every call, `WAIT` until `wait_replicas` replicas have
    /// everything it wrote or read (default: as many as the primary has
    /// connected at open; 0 never waits). Fewer than the replicas connected
    /// at open can lose acknowledged writes in a failover, and is refused
    /// at open unless `accept_data_loss` is set (crate docs, "Replicas").
    with_wait_replicas(wait_replicas: usize) Some;
    /// Open even on a server whose settings can lose acknowledged writes
    /// (default `false`: such a server is refused at open with an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error naming
    /// each setting; crate docs, "Durability"). With `true` the store opens
    /// and logs the settings as a warning: after a crash or restart of the
    /// server a sequence may hand out the same ids again.
    with_accept_data_loss(accept_data_loss: bool);
    /// Re-read the server's durability settings this often while the store
    /// is live, and after every reconnect (default
    /// [`DEFAULT_RECHECK`]; crate docs, "Durability").
    with_durability_recheck(durability_recheck: Duration);
}}

bakery_core::getters! { RedisConfig {
    /// True for `rediss://` (TLS).
    tls: bool;
    /// The server's host name or address.
    host: &str;
    /// The server's port.
    port: u16;
    /// The logical database.
    db: i64;
    /// The user name, if any.
    username: Option<&str>;
    /// The key prefix.
    prefix: &str;
    /// The compare-and-set strategy.
    cas: CasStrategy;
    /// The limit on each call.
    timeout: Duration;
    /// The most dedicated connections of the `watch` strategy.
    pool_size: usize;
    /// The CA file trusted for TLS, if any.
    ca_file: Option<&std::path::Path>;
    /// The replicas every call waits for, if set (`None`: those connected
    /// at open).
    wait_replicas: Option<usize>;
    /// True if the store may open on a server that can lose acknowledged
    /// writes (`accept_data_loss=true`).
    accept_data_loss: bool;
    /// How often a live store re-reads the durability settings.
    durability_recheck: Duration;
}}
