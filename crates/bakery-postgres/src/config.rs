//! [`PostgresConfig`]: the URI, its options (bakery's own and the driver's),
//! the redacted form and the checks.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use bakery_core::durability::{UriOptions, DEFAULT_RECHECK, RECHECK_OPTION};
use bakery_core::error::cause_chain;
use bakery_core::options;
use bakery_core::{Error, Result};
use serde::Deserialize;

use crate::{BACKEND, SCHEMES};

/// The table used when none is configured.
pub const DEFAULT_TABLE: &str = "bakery_rows";

/// Connections a store keeps at most when `pool_size` is not given.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// The largest accepted `pool_size`.
pub const MAX_POOL_SIZE: usize = 1024;

/// How long one call may take when `timeout_ms` is not given: the server
/// cancels a statement after this long (`statement_timeout`), and the
/// client gives up [`CLIENT_GRACE`] later.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long opening a connection may take when `connect_timeout` is not
/// given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How much longer than the server-side `statement_timeout` the client waits
/// before it gives up on a call. The server's own cancellation comes back as
/// a clean "not applied" error; only a reply lost for longer than this is an
/// unknown outcome.
pub const CLIENT_GRACE: Duration = Duration::from_millis(250);

/// The largest `timeout_ms` (PostgreSQL's `statement_timeout` is an `int` of
/// milliseconds).
const MAX_TIMEOUT_MS: u64 = i32::MAX as u64;

/// The longest identifier PostgreSQL keeps (NAMEDATALEN - 1).
const MAX_IDENTIFIER_LEN: usize = 63;

/// The options the driver reads (libpq's names; `sslmode` is bakery's), for
/// the message about an option neither knows.
const DRIVER_OPTIONS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslnegotiation",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// bakery's own URI options (the field names are the option names); every
/// other option is the driver's.
#[derive(Deserialize)]
struct Options {
    table: Option<String>,
    pool_size: Option<usize>,
    #[serde(default, deserialize_with = "options::millis")]
    timeout_ms: Option<Duration>,
    sslmode: Option<SslMode>,
    sslrootcert: Option<String>,
    /// [`ACCEPT_DATA_LOSS`].
    accept_data_loss: Option<bool>,
    /// [`RECHECK_OPTION`].
    #[serde(default, deserialize_with = "options::millis")]
    durability_recheck_ms: Option<Duration>,
}

/// How hard the connection insists on TLS and checks the server's
/// certificate. The names and meanings are libpq's `sslmode`.
///
/// | mode | TLS | certificate checked |
/// |------|-----|---------------------|
/// | `disable` | never | — |
/// | `prefer` (default) | if the server offers it | only if `sslrootcert` is given (chain, not host name) |
/// | `require` | always | only if `sslrootcert` is given (chain, not host name) |
/// | `verify-ca` | always | chain against `sslrootcert` |
/// | `verify-full` | always | chain against `sslrootcert`, and the host name |
///
/// `verify-ca` and `verify-full` need `sslrootcert=FILE` (PEM) or
/// `sslrootcert=system` (the Mozilla root store built into bakery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server supports it, plain TCP otherwise.
    #[default]
    Prefer,
    /// TLS or fail; the certificate is not checked unless a root is given.
    Require,
    /// TLS, and the certificate chain must lead to the given root.
    VerifyCa,
    /// TLS, the chain must lead to the given root and name the host.
    VerifyFull,
}

impl SslMode {
    /// The libpq spelling (`"verify-full"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// The trust anchors a TLS connection checks the server's certificate
/// against (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RootCert {
    /// `sslrootcert=system`: the Mozilla root store compiled into bakery
    /// (the `webpki-roots` crate), for servers with a publicly trusted
    /// certificate.
    System,
    /// A PEM file of one or more CA certificates, read when the store opens.
    File(PathBuf),
}

impl fmt::Display for RootCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootCert::System => f.write_str("system"),
            RootCert::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A validated table name, optionally schema-qualified (`schema.table`).
/// Each part is `[A-Za-z_][A-Za-z0-9_]{0,62}` and is always double-quoted in
/// SQL, so it is case-sensitive and may be a keyword (`order`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    schema: Option<String>,
    name: String,
}

impl TableName {
    /// Parse `table` or `schema.table`; an [`ErrorKind::Config`] error
    /// names what is wrong.
    ///
    /// ```
    /// use bakery_postgres::TableName;
    /// let t = TableName::parse("bakery.rows")?;
    /// assert_eq!(t.schema(), Some("bakery"));
    /// assert_eq!(t.name(), "rows");
    /// assert_eq!(t.quoted(), "\"bakery\".\"rows\"");
    /// assert!(TableName::parse("rows; drop table x").is_err());
    /// # Ok::<(), bakery_core::Error>(())
    /// ```
    ///
    /// [`ErrorKind::Config`]: bakery_core::ErrorKind::Config
    pub fn parse(table: &str) -> Result<TableName> {
        let (schema, name) = match table.split_once('.') {
            Some((schema, name)) => (Some(schema), name),
            None => (None, table),
        };
        let check = |part: &str| {
            let mut chars = part.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && part.len() <= MAX_IDENTIFIER_LEN
        };
        if !(check(name) && schema.is_none_or(check)) {
            return Err(Error::config(
                BACKEND,
                format!(
                    "postgres option `table`: {table:?} is not a valid table name (expected NAME or SCHEMA.NAME, each [A-Za-z_][A-Za-z0-9_]{{0,62}})"
                ),
            ));
        }
        if schema.is_some_and(|s| s.len() >= 3 && s[..3].eq_ignore_ascii_case("pg_")) {
            return Err(Error::config(
                BACKEND,
                format!("postgres option `table`: {table:?} is in a `pg_` schema, reserved by PostgreSQL"),
            ));
        }
        Ok(TableName {
            schema: schema.map(str::to_string),
            name: name.to_string(),
        })
    }

    /// The schema, if the name is qualified (otherwise `search_path` decides).
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The table name without the schema.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as it goes into SQL: each part double-quoted.
    pub fn quoted(&self) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}\"", self.name),
            None => format!("\"{}\"", self.name),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// How to open a [`PostgresStore`](crate::PostgresStore): built from a URI with
/// [`PostgresConfig::from_uri`], then adjusted with the `with_*` methods.
///
/// The URI is libpq's: `postgres://USER[:PASSWORD]@HOST[:PORT][,HOST2…]/DBNAME?OPTIONS`
/// (`postgresql://` too). bakery takes its own options out of the query
/// string and hands everything else to the driver (tokio-postgres), which
/// knows `user`, `password`, `host`, `hostaddr`, `port`, `dbname`,
/// `options`, `application_name`, `connect_timeout` (seconds),
/// `tcp_user_timeout`, `keepalives*`, `target_session_attrs`,
/// `channel_binding`, `load_balance_hosts` and `sslnegotiation`.
///
/// | bakery option | default | meaning |
/// |---------------|---------|---------|
/// | `table=NAME` or `table=SCHEMA.NAME` | `bakery_rows` | the table holding the rows, see [`TableName`] |
/// | `pool_size=N` | `16` | connections kept, 1 to 1024 |
/// | `timeout_ms=N` | `10000` | server-side `statement_timeout`; the client gives up 250 ms later; 1 to 3600000 (`0` is refused: there is no "no limit" in a URI) |
/// | `sslmode=…` | `prefer` | see [`SslMode`] |
/// | `sslrootcert=FILE\|system` | none | see [`RootCert`] |
/// | `accept_data_loss=true\|false` | `false` | open even on a server that can lose acknowledged writes — `fsync` or `full_page_writes` off, or a connected standby that does not confirm commits (crate docs, "Durability") |
/// | `durability_recheck_ms=N` | `1000` | re-read those settings this often while live (and after every new connection), 1 ms to 1 h (crate docs, "Durability") |
///
/// `connect_timeout` defaults to 5 seconds here (libpq: none).
///
/// The password never appears in `Debug`, `Display` or any error.
///
/// ```
/// use std::time::Duration;
/// use bakery_postgres::{PostgresConfig, SslMode};
///
/// let config = PostgresConfig::from_uri(
///     "postgres://app:s3cret@db.example:5433/bakery?table=locks.rows&pool_size=4&sslmode=require",
/// )?;
/// assert_eq!(config.table().to_string(), "locks.rows");
/// assert_eq!(config.pool_size(), 4);
/// assert_eq!(config.ssl_mode(), SslMode::Require);
/// assert_eq!(config.timeout(), Some(Duration::from_secs(10)));
/// assert_eq!(
///     config.to_string(),
///     "postgres://app:***@db.example:5433/bakery?table=locks.rows&pool_size=4&timeout_ms=10000&connect_timeout=5&sslmode=require"
/// );
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), bakery_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    pg: tokio_postgres::Config,
    table: TableName,
    pool_size: usize,
    timeout: Option<Duration>,
    ssl_mode: SslMode,
    root_cert: Option<RootCert>,
    accept_data_loss: bool,
    durability_recheck: Duration,
}

impl PostgresConfig {
    /// Parse a `postgres://` or `postgresql://` URI. Any problem is an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error naming
    /// the offending part; the URI itself (which may hold a password) is
    /// never quoted.
    pub fn from_uri(uri: &str) -> Result<Self> {
        let (_, rest) = bakery_core::uri::strip_scheme(uri, SCHEMES).ok_or_else(|| {
            Error::config(
                BACKEND,
                "not a postgres URI (expected postgres://USER@HOST[:PORT]/DBNAME or postgresql://…)",
            )
        })?;
        // The driver takes everything up to the first `@` as credentials,
        // then host and path up to `?`: split the same way, so a `?` in a
        // password is never mistaken for the start of the options.
        let after_credentials = rest.find('@').map_or(0, |at| at + 1);
        let (base, query) = match rest[after_credentials..].find('?') {
            Some(q) => (
                &rest[..after_credentials + q],
                Some(&rest[after_credentials + q + 1..]),
            ),
            None => (rest, None),
        };

        let (options, driver_pairs): (Options, _) = options::split_query(BACKEND, query)?;

        let mut driver_uri = String::with_capacity(uri.len());
        driver_uri.push_str("postgresql://");
        driver_uri.push_str(base);
        if !driver_pairs.is_empty() {
            driver_uri.push('?');
            driver_uri.push_str(&driver_pairs.join("&"));
        }
        let mut pg: tokio_postgres::Config = driver_uri.parse().map_err(|e| {
            // The driver's messages name the option, never its value.
            let mut message = format!("postgres URI: {}", cause_chain(&e));
            if message.contains("unknown option") {
                message.push_str(&format!(
                    " (known: {}; the driver's: {})",
                    options::fields::<Options>().join(", "),
                    DRIVER_OPTIONS.join(", ")
                ));
            }
            Error::config(BACKEND, message)
        })?;
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        let pool_size = match options.pool_size {
            None => DEFAULT_POOL_SIZE,
            Some(n) if (1..=MAX_POOL_SIZE).contains(&n) => n,
            Some(n) => {
                return Err(options::invalid(
                    BACKEND,
                    "pool_size",
                    &n.to_string(),
                    &format!("a pool size from 1 to {MAX_POOL_SIZE}"),
                ))
            }
        };
        let root_cert = match options.sslrootcert.as_deref() {
            None => None,
            Some("") => {
                return Err(options::invalid(
                    BACKEND,
                    "sslrootcert",
                    "",
                    "a PEM file or `system`",
                ))
            }
            Some("system") => Some(RootCert::System),
            Some(file) => Some(RootCert::File(PathBuf::from(file))),
        };
        let config = PostgresConfig {
            pg,
            table: match options.table {
                Some(table) => TableName::parse(&table)?,
                None => default_table(),
            },
            pool_size,
            timeout: Some(options.timeout_ms.unwrap_or(DEFAULT_TIMEOUT)),
            ssl_mode: options.sslmode.unwrap_or_default(),
            root_cert,
            accept_data_loss: options.accept_data_loss.unwrap_or(false),
            durability_recheck: options.durability_recheck_ms.unwrap_or(DEFAULT_RECHECK),
        };
        config.validate()?;
        Ok(config)
    }

    /// Bound each call (`None`: no bound, which only the builder can say;
    /// `Display` then shows no `timeout_ms`). The server cancels a statement
    /// after `timeout` (it did not apply: [`ErrorKind::Unavailable`]); the
    /// client gives up [`CLIENT_GRACE`] later ([`ErrorKind::Unknown`] for a
    /// write whose request was sent). At most `i32::MAX` milliseconds.
    ///
    /// [`ErrorKind::Unavailable`]: bakery_core::ErrorKind::Unavailable
    /// [`ErrorKind::Unknown`]: bakery_core::ErrorKind::Unknown
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout.filter(|t| !t.is_zero());
        self
    }

    /// Bound opening one connection (TCP connect, TLS, authentication).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.pg.connect_timeout(timeout);
        self
    }

    /// How long opening one connection may take.
    pub fn connect_timeout(&self) -> Duration {
        self.pg
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT)
    }

    /// The user name.
    pub fn user(&self) -> Option<&str> {
        self.pg.get_user()
    }

    /// The database name (the driver defaults it to the user name).
    pub fn dbname(&self) -> Option<&str> {
        self.pg.get_dbname()
    }

    /// True if a password is configured (it is never shown).
    pub fn has_password(&self) -> bool {
        self.pg.get_password().is_some()
    }

    /// Check the whole configuration; an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error names
    /// what is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.pg.get_user().is_none_or(str::is_empty) {
            return Err(Error::config(
                BACKEND,
                "postgres URI names no user (expected postgres://USER@HOST/DBNAME or ?user=USER)",
            ));
        }
        if self.pg.get_hosts().is_empty() && self.pg.get_hostaddrs().is_empty() {
            return Err(Error::config(
                BACKEND,
                "postgres URI names no host (expected postgres://USER@HOST/DBNAME or ?host=…)",
            ));
        }
        // A host with characters no host name or address has is a URI
        // split where its author did not mean it (`postgres://?a=@&password=…`
        // names host `&password=…`): refused, and never echoed.
        for host in self.pg.get_hosts() {
            if let tokio_postgres::config::Host::Tcp(name) = host {
                let valid = |c: char| c.is_ascii_alphanumeric() || ".-_:%[]".contains(c);
                if name.is_empty() || !name.chars().all(valid) {
                    return Err(Error::config(
                        BACKEND,
                        "postgres URI: a host is not a host name or address (expected postgres://USER@HOST[:PORT]/DBNAME; a password must percent-encode `@`)",
                    ));
                }
            }
        }
        options::count_in_range(BACKEND, "pool_size", self.pool_size, MAX_POOL_SIZE)?;
        if self
            .timeout
            .is_some_and(|t| t.as_millis() > u128::from(MAX_TIMEOUT_MS) || t.as_millis() == 0)
        {
            return Err(Error::config(
                BACKEND,
                format!(
                    "postgres option `timeout_ms` must be from 1 to {MAX_TIMEOUT_MS} (or none)"
                ),
            ));
        }
        if self.durability_recheck.is_zero()
            || self.durability_recheck > Duration::from_millis(options::MAX_MILLIS)
        {
            return Err(options::invalid(
                BACKEND,
                RECHECK_OPTION,
                &self.durability_recheck.as_millis().to_string(),
                &format!("a number of milliseconds from 1 to {}", options::MAX_MILLIS),
            ));
        }
        if self.ssl_mode.verifies() && self.root_cert.is_none() {
            return Err(Error::config(
                BACKEND,
                format!(
                    "postgres option `sslmode={}` needs `sslrootcert=FILE` (a PEM file of CA certificates) or `sslrootcert=system` (the built-in Mozilla roots)",
                    self.ssl_mode.as_str()
                ),
            ));
        }
        if self.root_cert.is_some() && self.ssl_mode == SslMode::Disable {
            return Err(Error::config(
                BACKEND,
                "postgres option `sslrootcert` makes no sense with `sslmode=disable`",
            ));
        }
        Ok(())
    }

    /// The driver configuration with bakery's session settings added.
    pub(crate) fn driver_config(&self) -> tokio_postgres::Config {
        let mut pg = self.pg.clone();
        pg.ssl_mode(match self.ssl_mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        });
        // Session settings the guarantees rest on (see docs.md), sent in the
        // startup packet: no extra round trip. The user's own `options`
        // come last, so they win. `synchronous_commit` is not among them:
        // forcing `on` here would also lower a stronger database or role
        // default (`remote_apply`); each connection raises it from `off`
        // once it is open instead (durability::RAISE_SYNCHRONOUS_COMMIT).
        let timeout_ms = self.timeout.map_or(0, |t| t.as_millis());
        let mut options = format!(
            "-c statement_timeout={timeout_ms} -c default_transaction_isolation=read\\ committed"
        );
        if let Some(user) = self.pg.get_options().filter(|o| !o.trim().is_empty()) {
            options.push(' ');
            options.push_str(user);
        }
        pg.options(options);
        if self.pg.get_application_name().is_none() {
            pg.application_name("bakery");
        }
        pg
    }

    fn fmt_redacted(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("postgres://")?;
        if let Some(user) = self.pg.get_user() {
            f.write_str(user)?;
            if self.pg.get_password().is_some() {
                f.write_str(":***")?;
            }
            f.write_str("@")?;
        }
        let ports = self.pg.get_ports();
        let mut unix = Vec::new();
        let mut first = true;
        for (i, host) in self.pg.get_hosts().iter().enumerate() {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(name) => {
                    if !first {
                        f.write_str(",")?;
                    }
                    first = false;
                    if name.contains(':') {
                        write!(f, "[{name}]:{port}")?;
                    } else {
                        write!(f, "{name}:{port}")?;
                    }
                }
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(path) => unix.push(path.display().to_string()),
            }
        }
        if let Some(db) = self.pg.get_dbname() {
            write!(f, "/{db}")?;
        }
        write!(f, "?table={}&pool_size={}", self.table, self.pool_size)?;
        // No bound (only the builder can say so) is shown as no option.
        if let Some(timeout) = self.timeout {
            write!(f, "&timeout_ms={}", timeout.as_millis())?;
        }
        write!(
            f,
            "&connect_timeout={}&sslmode={}",
            self.connect_timeout().as_secs(),
            self.ssl_mode.as_str()
        )?;
        if let Some(root) = &self.root_cert {
            write!(f, "&sslrootcert={root}")?;
        }
        let durability = UriOptions {
            accept_data_loss: self.accept_data_loss,
            recheck: self.durability_recheck,
        };
        write!(f, "{durability}")?;
        for path in unix {
            write!(f, "&host={path}")?;
        }
        for addr in self.pg.get_hostaddrs() {
            write!(f, "&hostaddr={addr}")?;
        }
        if let Some(name) = self.pg.get_application_name() {
            write!(f, "&application_name={name}")?;
        }
        Ok(())
    }
}

// `Display`: the URI form with the password replaced by `***`; `Debug`:
// the same in `PostgresConfig(…)`.
bakery_core::redacted_fmt!(PostgresConfig);

fn default_table() -> TableName {
    TableName {
        schema: None,
        name: DEFAULT_TABLE.to_string(),
    }
}

bakery_core::setters! { PostgresConfig {
    /// Use the table `table` (`NAME` or `SCHEMA.NAME`, see [`TableName`]).
    with_table(table: TableName);
    /// Keep at most `pool_size` connections (1 to [`MAX_POOL_SIZE`]). Calls
    /// beyond that wait for a free connection, within their timeout.
    with_pool_size(pool_size: usize);
    /// Set the TLS mode (see [`SslMode`]).
    with_ssl_mode(ssl_mode: SslMode);
    /// Check the server's certificate against `root_cert` (see [`RootCert`]).
    with_root_cert(root_cert: Option<RootCert>);
    /// Open even on a server whose settings can lose acknowledged writes
    /// (default `false`: a server with `fsync = off` or `full_page_writes =
    /// off` is refused at open with an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error naming
    /// each setting; crate docs, "Durability"). With `true` the store opens
    /// and logs the settings as a warning: after a crash of the server or
    /// its machine a sequence may hand out the same ids again.
    with_accept_data_loss(accept_data_loss: bool);
    /// Re-read the server's durability settings this often while the store
    /// is live, and after every new connection (default
    /// [`DEFAULT_RECHECK`]; crate docs, "Durability").
    with_durability_recheck(durability_recheck: Duration);
}}

bakery_core::getters! { PostgresConfig {
    /// The table.
    table: &TableName;
    /// The most connections kept.
    pool_size: usize;
    /// The server-side statement timeout (`None`: none).
    timeout: Option<Duration>;
    /// The TLS mode.
    ssl_mode: SslMode;
    /// The trust anchors for the server's certificate, if any.
    root_cert: Option<&RootCert>;
    /// True if the store may open on a server that can lose acknowledged
    /// writes (`accept_data_loss=true`).
    accept_data_loss: bool;
    /// How often a live store re-reads the durability settings.
    durability_recheck: Duration;
}}
