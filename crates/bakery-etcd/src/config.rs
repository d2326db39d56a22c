//! [`EtcdConfig`]: where the cluster is, how long to wait, who to be.

use std::fmt;
use std::time::Duration;

use bakery_core::options::{self, MAX_MILLIS};
use bakery_core::uri::{percent_encode, Credentials};
use bakery_core::{Error, Result};

use crate::BACKEND;

/// The key prefix used when none is configured: every bakery key `k` is
/// stored under the etcd key `bakery/k`.
pub const DEFAULT_PREFIX: &str = "bakery/";

/// The port of an endpoint given without one (etcd's client port).
pub const DEFAULT_PORT: u16 = 2379;

/// How long one call (a read or a transaction) may take before it fails:
/// [`ErrorKind::Unavailable`](bakery_core::ErrorKind::Unavailable) for a
/// read, [`ErrorKind::Unknown`](bakery_core::ErrorKind::Unknown) for a write.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`EtcdStore::open`](crate::EtcdStore::open) waits for the
/// cluster to answer its first (linearizable) read before failing with
/// [`ErrorKind::Unavailable`](bakery_core::ErrorKind::Unavailable).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest accepted key prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 128;

/// The URI options (read by [`bakery_core::options`]).
#[derive(serde::Deserialize)]
struct Options {
    prefix: Option<String>,
    #[serde(default, deserialize_with = "options::millis")]
    timeout_ms: Option<Duration>,
    #[serde(default, deserialize_with = "options::millis")]
    connect_timeout_ms: Option<Duration>,
    user: Option<String>,
    password: Option<String>,
}

/// How to reach an etcd cluster: built from a URI with
/// [`EtcdConfig::from_uri`] or in code with [`EtcdConfig::new`] and the
/// `with_*` methods. Everything is validated by [`EtcdConfig::validate`],
/// which [`EtcdStore::open`](crate::EtcdStore::open) calls.
///
/// URI form: `etcd://[user:password@]host[:port][,host2[:port2]…][/][?options]`.
/// Hosts are names, IPv4 addresses or bracketed IPv6 addresses (`[::1]:2379`);
/// the port defaults to 2379. Several endpoints of one cluster are separated
/// by commas; the client balances calls over them.
///
/// Options after `?`, joined with `&`, read by the rules every backend
/// shares ([`bakery_core::options`]):
///
/// | option | default | meaning |
/// |--------|---------|---------|
/// | `prefix=P` | `bakery/` | prepended to every key; see below |
/// | `timeout_ms=N` | `5000` | deadline of each call, 1 to 3 600 000 |
/// | `connect_timeout_ms=N` | `5000` | deadline of connecting and of the first read, 1 to 3 600 000 |
/// | `user=NAME` | none | etcd user (auth enabled); also `user:password@` before the host |
/// | `password=SECRET` | none | its password; never printed |
///
/// A prefix is 1 to 128 bytes of ASCII letters, digits and `_ - . : / @ + =`,
/// ends with `/` and has no empty segment (`a//b/`); a leading `/` is allowed
/// (`/apps/bakery/`). Two stores with different prefixes share nothing as long
/// as neither prefix is a prefix of the other (`bakery/` and `bakery/test/`
/// overlap: keys `test/x` of the first are keys `x` of the second).
///
/// `Debug` and `Display` never print the password:
///
/// ```
/// use std::time::Duration;
/// use bakery_etcd::EtcdConfig;
///
/// let config = EtcdConfig::from_uri(
///     "etcd://alice:s3cret@10.0.0.1:2379,10.0.0.2/?prefix=app/&timeout_ms=250",
/// )?;
/// assert_eq!(config.endpoints(), ["10.0.0.1:2379", "10.0.0.2:2379"]);
/// assert_eq!(config.prefix(), "app/");
/// assert_eq!(config.timeout(), Duration::from_millis(250));
/// assert_eq!(config.user(), Some("alice"));
/// assert!(!format!("{config} {config:?}").contains("s3cret"));
///
/// let same = EtcdConfig::new(["10.0.0.1:2379", "10.0.0.2"])
///     .with_prefix("app/")
///     .with_timeout(Duration::from_millis(250))
///     .with_user("alice", "s3cret");
/// assert_eq!(config, same);
///
/// let err = EtcdConfig::from_uri("etcd://h:2379?colour=blue").unwrap_err();
/// assert_eq!(err.kind(), bakery_core::ErrorKind::Config);
/// # Ok::<(), bakery_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    endpoints: Vec<String>,
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    credentials: Credentials,
}

impl EtcdConfig {
    /// Endpoints as `host[:port]` (port 2379 when absent), with the defaults.
    /// Validated by [`EtcdConfig::validate`] (and so on open).
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdConfig {
            endpoints: endpoints
                .into_iter()
                .map(|e| {
                    let e = e.into();
                    // Normalise to host:port; a bad endpoint is kept as given
                    // for `validate` to report.
                    parse_endpoint(&e).unwrap_or(e)
                })
                .collect(),
            prefix: DEFAULT_PREFIX.to_string(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            credentials: Credentials::default(),
        }
    }

    /// Parse an `etcd://` URI (form and options in the type docs). Any
    /// problem is an [`ErrorKind::Config`](bakery_core::ErrorKind::Config)
    /// error whose message names the offending part, never the password.
    pub fn from_uri(uri: &str) -> Result<Self> {
        let rest = match uri.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("etcd") => rest,
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("etcds") => {
                return Err(Error::config(
                    BACKEND,
                    "etcds:// (TLS) is not supported by this build of bakery-etcd; use etcd:// (plain gRPC) on a trusted network",
                ))
            }
            _ => {
                return Err(Error::config(
                    BACKEND,
                    "not an etcd URI (expected etcd://HOST[:PORT][,HOST[:PORT]…][/?OPTIONS])",
                ))
            }
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if !(path.is_empty() || path == "/") {
            // The path is not echoed: a password with an unencoded `/`
            // would end up in it.
            return Err(Error::config(
                BACKEND,
                "etcd URI has a path, which is not supported (expected etcd://HOST[:PORT]/?prefix=…; percent-encode `/` in a password)",
            ));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        if hosts.is_empty() {
            return Err(Error::config(
                BACKEND,
                "etcd URI has no host (expected etcd://HOST[:PORT])",
            ));
        }
        let endpoints = hosts
            .split(',')
            .map(parse_endpoint)
            .collect::<Result<Vec<_>>>()?;
        let options: Options = options::from_query(BACKEND, query)?;
        let credentials = Credentials::from_userinfo(BACKEND, userinfo)?.with_options(
            BACKEND,
            options.user,
            options.password,
        )?;
        let config = EtcdConfig {
            prefix: options.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_string()),
            timeout: options.timeout_ms.unwrap_or(DEFAULT_TIMEOUT),
            connect_timeout: options
                .connect_timeout_ms
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            credentials,
            ..EtcdConfig::new(endpoints)
        };
        config.validate()?;
        Ok(config)
    }

    /// Check the whole configuration; an [`ErrorKind::Config`](bakery_core::ErrorKind::Config)
    /// error names what is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            return Err(Error::config(BACKEND, "no etcd endpoint given"));
        }
        for endpoint in &self.endpoints {
            parse_endpoint(endpoint)?;
        }
        validate_prefix(&self.prefix)?;
        for (name, value) in [
            ("timeout_ms", self.timeout),
            ("connect_timeout_ms", self.connect_timeout),
        ] {
            if value.is_zero() || value > Duration::from_millis(MAX_MILLIS) {
                return Err(Error::config(
                    BACKEND,
                    format!("etcd option `{name}` must be from 1 ms to {MAX_MILLIS} ms"),
                ));
            }
        }
        self.credentials.check(BACKEND)
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("user", &self.credentials.user)
            .field("password", &self.credentials.password)
            .finish()
    }
}

/// The configuration as a URI, with the password shown as `***`.
impl fmt::Display for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("etcd://")?;
        if let Some(user) = &self.credentials.user {
            write!(f, "{}:***@", percent_encode(user))?;
        }
        write!(
            f,
            "{}/?prefix={}&timeout_ms={}&connect_timeout_ms={}",
            self.endpoints.join(","),
            percent_encode(&self.prefix),
            self.timeout.as_millis(),
            self.connect_timeout.as_millis()
        )
    }
}

/// `host[:port]` or `[v6][:port]` to `host:port`.
fn parse_endpoint(endpoint: &str) -> Result<String> {
    // Only the host part is echoed: a URI missing its `@` would put a
    // password where the port goes.
    let shown = match endpoint.split_once(':') {
        Some((host, _)) if !endpoint.starts_with('[') => host,
        _ => endpoint,
    };
    let bad = |why: &str| {
        Error::config(
            BACKEND,
            format!("etcd endpoint {shown:?} {why} (expected HOST[:PORT] or [IPV6][:PORT])"),
        )
    };
    let (host, port) = if let Some(rest) = endpoint.strip_prefix('[') {
        let (v6, after) = rest
            .split_once(']')
            .ok_or_else(|| bad("has no closing `]`"))?;
        if v6.is_empty()
            || !v6
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err(bad("is not a valid IPv6 address"));
        }
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| bad("has text after `]`"))?,
            ),
        };
        (format!("[{v6}]"), port)
    } else {
        let (host, port) = match endpoint.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (endpoint, None),
        };
        if host.is_empty() {
            return Err(bad("has no host"));
        }
        if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(bad("has a host with characters outside [A-Za-z0-9._-]"));
        }
        (host.to_string(), port)
    };
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad("has a port that is not a number from 1 to 65535"))?,
    };
    Ok(format!("{host}:{port}"))
}

/// The prefix rules (see [`EtcdConfig`]).
fn validate_prefix(prefix: &str) -> Result<()> {
    let bad =
        |why: String| Error::config(BACKEND, format!("etcd option `prefix`: {prefix:?} {why}"));
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_LEN {
        return Err(bad(format!(
            "must be 1 to {MAX_PREFIX_LEN} bytes long (default {DEFAULT_PREFIX:?})"
        )));
    }
    if let Some(c) = prefix.chars().find(|c| {
        !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '@' | '+' | '='))
    }) {
        return Err(bad(format!(
            "contains {c:?}; allowed are ASCII letters, digits and _ - . : / @ + ="
        )));
    }
    if !prefix.ends_with('/') {
        return Err(bad("must end with `/`".into()));
    }
    if prefix.contains("//") || prefix == "/" {
        return Err(bad("has an empty `/` segment".into()));
    }
    Ok(())
}

bakery_core::setters! { EtcdConfig {
    /// Store keys under `prefix` (default [`DEFAULT_PREFIX`]). Validated on open.
    with_prefix(prefix: impl Into<String>);
    /// Fail a call that takes longer than `timeout` (default [`DEFAULT_TIMEOUT`]).
    with_timeout(timeout: Duration);
    /// Give up connecting after `connect_timeout` (default [`DEFAULT_CONNECT_TIMEOUT`]).
    with_connect_timeout(connect_timeout: Duration);
}}

bakery_core::credentials!(EtcdConfig);

bakery_core::getters! { EtcdConfig {
    /// The endpoints, as `host:port`.
    endpoints: &[String];
    /// The key prefix.
    prefix: &str;
    /// The deadline of each call.
    timeout: Duration;
    /// The deadline of connecting.
    connect_timeout: Duration;
}}
