//! [`MysqlConfig`]: the URI, its options (bakery's own and the driver's),
//! the redacted form and the checks.

use std::fmt;
use std::time::Duration;

use bakery_core::durability::{UriOptions, DEFAULT_RECHECK, RECHECK_OPTION};
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
/// aborts a statement after this long (`max_statement_time` on MariaDB,
/// `innodb_lock_wait_timeout` for lock waits on both), and the client gives
/// up [`CLIENT_GRACE`] later.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long opening a connection may take when `connect_timeout_ms` is not
/// given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How much longer than the server-side limit the client waits before it
/// gives up on a call: the server's own abort comes back as a clean "not
/// applied" error; only a reply lost for longer is an unknown outcome.
pub const CLIENT_GRACE: Duration = Duration::from_millis(250);

/// How long an idle pooled connection is kept when the URI does not say
/// (the driver's `inactive_connection_ttl`).
const IDLE_CONNECTION_TTL: Duration = Duration::from_secs(300);

/// The longest identifier MySQL and MariaDB keep.
const MAX_IDENTIFIER_LEN: usize = 64;

/// Driver options that would break what the store relies on: the pool size
/// is bakery's `pool_size`, `client_found_rows` would make an unchanged row
/// look like an insert (crate docs, "Affected rows"), and
/// `reset_connection` would drop the session settings.
const REFUSED_DRIVER_OPTIONS: &[&str] = &[
    "pool_min",
    "pool_max",
    "client_found_rows",
    "reset_connection",
];

/// bakery's own URI options (the field names are the option names); every
/// other option is the driver's (mysql_async's URL parameters).
#[derive(Deserialize)]
struct Options {
    table: Option<String>,
    pool_size: Option<usize>,
    #[serde(default, deserialize_with = "options::millis")]
    timeout_ms: Option<Duration>,
    #[serde(default, deserialize_with = "options::millis")]
    connect_timeout_ms: Option<Duration>,
    /// [`bakery_core::durability::ACCEPT_DATA_LOSS`].
    accept_data_loss: Option<bool>,
    /// [`RECHECK_OPTION`].
    #[serde(default, deserialize_with = "options::millis")]
    durability_recheck_ms: Option<Duration>,
    returning: Option<bool>,
}

/// A validated table name, optionally database-qualified (`db.table`). Each
/// part is `[A-Za-z_][A-Za-z0-9_]{0,63}` and is always backquoted in SQL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    database: Option<String>,
    name: String,
}

impl TableName {
    /// Parse `table` or `database.table`; an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error names
    /// what is wrong.
    ///
    /// ```
    /// use bakery_mysql::TableName;
    /// let t = TableName::parse("locks.rows")?;
    /// assert_eq!(t.database(), Some("locks"));
    /// assert_eq!(t.name(), "rows");
    /// assert_eq!(t.quoted(), "`locks`.`rows`");
    /// assert!(TableName::parse("rows; drop table x").is_err());
    /// # Ok::<(), bakery_core::Error>(())
    /// ```
    pub fn parse(table: &str) -> Result<TableName> {
        let (database, name) = match table.split_once('.') {
            Some((database, name)) => (Some(database), name),
            None => (None, table),
        };
        let check = |part: &str| {
            let mut chars = part.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && part.len() <= MAX_IDENTIFIER_LEN
        };
        if !(check(name) && database.is_none_or(check)) {
            return Err(Error::config(
                BACKEND,
                format!(
                    "mysql option `table`: {table:?} is not a valid table name (expected NAME or DATABASE.NAME, each [A-Za-z_][A-Za-z0-9_]{{0,63}})"
                ),
            ));
        }
        Ok(TableName {
            database: database.map(str::to_string),
            name: name.to_string(),
        })
    }

    /// The database, if the name is qualified (otherwise the URI's).
    pub fn database(&self) -> Option<&str> {
        self.database.as_deref()
    }

    /// The table name without the database.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as it goes into SQL: each part backquoted.
    pub fn quoted(&self) -> String {
        match &self.database {
            Some(db) => format!("`{db}`.`{}`", self.name),
            None => format!("`{}`", self.name),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.database {
            Some(db) => write!(f, "{db}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// How to open a [`MysqlStore`](crate::MysqlStore): built from a URI with
/// [`MysqlConfig::from_uri`], then adjusted with the `with_*` methods.
///
/// The URI is `mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE?OPTIONS`
/// (`mariadb://` too). bakery takes its own options out of the query string
/// and hands everything else to the driver (mysql_async's URL parameters:
/// `require_ssl`, `socket`, `tcp_keepalive`, `stmt_cache_size`, …; not
/// `pool_min`, `pool_max`, `client_found_rows` or `reset_connection`).
///
/// | bakery option | default | meaning |
/// |---------------|---------|---------|
/// | `table=NAME` or `table=DATABASE.NAME` | `bakery_rows` | the table holding the rows, see [`TableName`] |
/// | `pool_size=N` | `16` | connections kept, 1 to 1024 |
/// | `timeout_ms=N` | `10000` | server-side limit of a statement; the client gives up 250 ms later |
/// | `connect_timeout_ms=N` | `5000` | opening one connection |
/// | `accept_data_loss=true\|false` | `false` | open even on a server that can lose acknowledged writes (crate docs, "Durability") |
/// | `durability_recheck_ms=N` | `1000` | re-read those settings this often while live |
/// | `returning=true\|false` | `true` | on MariaDB, a create returns its row in the same statement (`RETURNING`); `false` writes creates as on MySQL (crate docs, "How a write works"), which is how the test command runs that path here |
///
/// The password never appears in `Debug`, `Display` or any error.
///
/// ```
/// use bakery_mysql::MysqlConfig;
///
/// let config = MysqlConfig::from_uri(
///     "mariadb://app:s3cret@db.example:3307/bakery?table=locks&pool_size=4",
/// )?;
/// assert_eq!(config.table().to_string(), "locks");
/// assert_eq!(config.pool_size(), 4);
/// assert_eq!(
///     config.to_string(),
///     "mysql://app:***@db.example:3307/bakery?table=locks&pool_size=4&timeout_ms=10000&connect_timeout_ms=5000"
/// );
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), bakery_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct MysqlConfig {
    opts: mysql_async::Opts,
    table: TableName,
    pool_size: usize,
    timeout: Option<Duration>,
    connect_timeout: Duration,
    accept_data_loss: bool,
    durability_recheck: Duration,
    returning: bool,
}

impl MysqlConfig {
    /// Parse a `mysql://` or `mariadb://` URI. Any problem is an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error naming
    /// the offending part; the URI itself (which may hold a password) is
    /// never quoted.
    pub fn from_uri(uri: &str) -> Result<Self> {
        let (_, rest) = bakery_core::uri::strip_scheme(uri, SCHEMES).ok_or_else(|| {
            Error::config(
                BACKEND,
                "not a mysql URI (expected mysql://USER@HOST[:PORT]/DATABASE or mariadb://…)",
            )
        })?;
        // Split where the driver would: the options start at the first `?`
        // after the credentials.
        let after_credentials = rest.find('@').map_or(0, |at| at + 1);
        let (base, query) = match rest[after_credentials..].find('?') {
            Some(q) => (
                &rest[..after_credentials + q],
                Some(&rest[after_credentials + q + 1..]),
            ),
            None => (rest, None),
        };
        let (options, driver_pairs): (Options, Vec<&str>) = options::split_query(BACKEND, query)?;
        for pair in &driver_pairs {
            let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
            if REFUSED_DRIVER_OPTIONS.contains(&name) {
                return Err(Error::config(
                    BACKEND,
                    format!(
                        "mysql URI option `{name}` is not accepted: bakery sets it (use `pool_size` for the pool)"
                    ),
                ));
            }
        }
        let mut driver_uri = format!("mysql://{base}");
        if !driver_pairs.is_empty() {
            driver_uri.push('?');
            driver_uri.push_str(&driver_pairs.join("&"));
        }
        let opts = mysql_async::Opts::from_url(&driver_uri).map_err(|e| {
            // The driver's messages name the parameter, never a password.
            let mut message = format!("mysql URI: {e}");
            if matches!(e, mysql_async::UrlError::UnknownParameter { .. }) {
                message.push_str(&format!(
                    " (bakery's options: {})",
                    options::fields::<Options>().join(", ")
                ));
            }
            Error::config(BACKEND, message)
        })?;
        let config = MysqlConfig {
            opts,
            table: match options.table {
                Some(table) => TableName::parse(&table)?,
                None => TableName {
                    database: None,
                    name: DEFAULT_TABLE.to_string(),
                },
            },
            pool_size: options.pool_size.unwrap_or(DEFAULT_POOL_SIZE),
            timeout: Some(options.timeout_ms.unwrap_or(DEFAULT_TIMEOUT)),
            connect_timeout: options
                .connect_timeout_ms
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            accept_data_loss: options.accept_data_loss.unwrap_or(false),
            durability_recheck: options.durability_recheck_ms.unwrap_or(DEFAULT_RECHECK),
            returning: options.returning.unwrap_or(true),
        };
        config.validate()?;
        Ok(config)
    }

    /// Bound each call (`None`: no bound, which only the builder can say).
    /// The server aborts a statement after `timeout` (it did not apply:
    /// [`ErrorKind::Unavailable`]); the client gives up [`CLIENT_GRACE`]
    /// later ([`ErrorKind::Unknown`] for a write whose request was sent).
    ///
    /// [`ErrorKind::Unavailable`]: bakery_core::ErrorKind::Unavailable
    /// [`ErrorKind::Unknown`]: bakery_core::ErrorKind::Unknown
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout.filter(|t| !t.is_zero());
        self
    }

    /// The user name.
    pub fn user(&self) -> Option<&str> {
        self.opts.user()
    }

    /// The database named in the URI.
    pub fn database(&self) -> Option<&str> {
        self.opts.db_name()
    }

    /// True if a password is configured (it is never shown).
    pub fn has_password(&self) -> bool {
        self.opts.pass().is_some()
    }

    /// Check the whole configuration; an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error names
    /// what is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.opts.user().is_none_or(str::is_empty) {
            return Err(Error::config(
                BACKEND,
                "mysql URI names no user (expected mysql://USER@HOST/DATABASE)",
            ));
        }
        if self.table.database.is_none() && self.opts.db_name().is_none_or(str::is_empty) {
            return Err(Error::config(
                BACKEND,
                "mysql URI names no database (expected mysql://USER@HOST/DATABASE, or table=DATABASE.NAME)",
            ));
        }
        options::count_in_range(BACKEND, "pool_size", self.pool_size, MAX_POOL_SIZE)?;
        let max = Duration::from_millis(options::MAX_MILLIS);
        for (name, value) in [
            ("timeout_ms", self.timeout),
            ("connect_timeout_ms", Some(self.connect_timeout)),
            (RECHECK_OPTION, Some(self.durability_recheck)),
        ] {
            if let Some(value) = value {
                if value.is_zero() || value > max {
                    return Err(options::invalid(
                        BACKEND,
                        name,
                        &value.as_millis().to_string(),
                        &format!("a number of milliseconds from 1 to {}", options::MAX_MILLIS),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The session settings every connection starts with (crate docs,
    /// "Sessions"): READ COMMITTED, a strict `sql_mode`, lock waits bounded by the timeout, and on
    /// MariaDB `max_statement_time` (the `/*M! */` comment runs on MariaDB
    /// only; MySQL sees `SET @bakery = 1`).
    pub(crate) fn session_init(&self) -> Vec<String> {
        let mut init = vec![
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".to_string(),
            // Strict: a value that does not fit is an error, never stored
            // cut short; and CREATE TABLE … InnoDB fails rather than
            // falling back to another engine.
            "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'".to_string(),
        ];
        if let Some(timeout) = self.timeout {
            let seconds = timeout.as_secs_f64();
            init.push(format!(
                "SET /*M! SESSION max_statement_time = {seconds}, */ SESSION innodb_lock_wait_timeout = {}",
                timeout.as_secs().clamp(1, 1_073_741_824)
            ));
        }
        init
    }

    /// The driver options with bakery's session settings and pool.
    pub(crate) fn driver_opts(&self) -> mysql_async::Opts {
        let constraints = mysql_async::PoolConstraints::new(0, self.pool_size).unwrap_or_default();
        // No COM_RESET_CONNECTION when a connection goes back to the pool:
        // it would drop the session settings above (the driver does not run
        // `init` again) and the prepared statements, costing a prepare per
        // call. The store leaves no other session state behind.
        let pool = self
            .opts
            .pool_opts()
            .clone()
            .with_constraints(constraints)
            .with_reset_connection(false);
        // With no idle lifetime the driver closes every connection above
        // the pool's minimum (0) as soon as it is returned: each call would
        // connect anew. Idle connections are kept this long instead.
        let pool = if pool.inactive_connection_ttl().is_zero() {
            pool.with_inactive_connection_ttl(IDLE_CONNECTION_TTL)
        } else {
            pool
        };
        mysql_async::OptsBuilder::from_opts(self.opts.clone())
            .client_found_rows(false)
            .init(self.session_init())
            .pool_opts(pool)
            .into()
    }

    fn fmt_redacted(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("mysql://")?;
        if let Some(user) = self.opts.user() {
            f.write_str(user)?;
            if self.opts.pass().is_some() {
                f.write_str(":***")?;
            }
            f.write_str("@")?;
        }
        let host = self.opts.ip_or_hostname();
        if host.contains(':') {
            write!(f, "[{host}]:{}", self.opts.tcp_port())?;
        } else {
            write!(f, "{host}:{}", self.opts.tcp_port())?;
        }
        if let Some(db) = self.opts.db_name() {
            write!(f, "/{db}")?;
        }
        write!(f, "?table={}&pool_size={}", self.table, self.pool_size)?;
        if let Some(timeout) = self.timeout {
            write!(f, "&timeout_ms={}", timeout.as_millis())?;
        }
        write!(
            f,
            "&connect_timeout_ms={}",
            self.connect_timeout.as_millis()
        )?;
        if !self.returning {
            f.write_str("&returning=false")?;
        }
        let durability = UriOptions {
            accept_data_loss: self.accept_data_loss,
            recheck: self.durability_recheck,
        };
        write!(f, "{durability}")
    }
}

// `Display`: the URI form with the password replaced by `***`; `Debug`:
// the same in `MysqlConfig(…)`.
bakery_core::redacted_fmt!(MysqlConfig);

bakery_core::setters! { MysqlConfig {
    /// Use the table `table` (`NAME` or `DATABASE.NAME`, see [`TableName`]).
    with_table(table: TableName);
    /// Keep at most `pool_size` connections (1 to [`MAX_POOL_SIZE`]).
    with_pool_size(pool_size: usize);
    /// Bound opening one connection.
    with_connect_timeout(connect_timeout: Duration);
    /// Open even on a server whose settings can lose acknowledged writes
    /// (default `false`; crate docs, "Durability").
    with_accept_data_loss(accept_data_loss: bool);
    /// Re-read the server's durability settings this often while the store
    /// is live, and after every new connection (default [`DEFAULT_RECHECK`]).
    with_durability_recheck(durability_recheck: Duration);
    /// On MariaDB, write creates with `INSERT … RETURNING` (default `true`)
    /// or as on MySQL (`false`).
    with_returning(returning: bool);
}}

bakery_core::getters! { MysqlConfig {
    /// The table.
    table: &TableName;
    /// The most connections kept.
    pool_size: usize;
    /// The server-side statement limit (`None`: none).
    timeout: Option<Duration>;
    /// How long opening one connection may take.
    connect_timeout: Duration;
    /// True if the store may open on a server that can lose acknowledged
    /// writes (`accept_data_loss=true`).
    accept_data_loss: bool;
    /// How often a live store re-reads the durability settings.
    durability_recheck: Duration;
    /// Whether a create on MariaDB uses `INSERT … RETURNING` (`returning=`).
    returning: bool;
}}
