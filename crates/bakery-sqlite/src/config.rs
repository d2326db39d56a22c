//! [`SqliteConfig`]: where the database lives, the URI and its options,
//! and the checks.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use bakery_core::options;
use bakery_core::{Error, Result};
use serde::{Deserialize, Deserializer};

use crate::BACKEND;

/// The table used when none is configured.
pub const DEFAULT_TABLE: &str = "bakery_rows";

/// How long a connection waits for another process's write lock before the
/// call fails with [`ErrorKind::Unavailable`](bakery_core::ErrorKind::Unavailable).
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections a file-backed store opens at most (and keeps idle).
pub const DEFAULT_POOL_SIZE: usize = 4;

/// The largest accepted `pool_size`.
pub const MAX_POOL_SIZE: usize = 64;

/// The largest busy timeout SQLite accepts (`i32::MAX` milliseconds).
const MAX_BUSY_TIMEOUT_MS: u64 = i32::MAX as u64;

/// The URI options (the field names are the option names).
#[derive(Deserialize)]
struct Options {
    table: Option<String>,
    #[serde(default, deserialize_with = "options::millis")]
    busy_timeout_ms: Option<Duration>,
    create: Option<bool>,
    #[serde(default, deserialize_with = "synchronous")]
    synchronous: Option<Synchronous>,
    pool_size: Option<usize>,
    /// `bakery_core::durability::ACCEPT_DATA_LOSS`.
    accept_data_loss: Option<bool>,
}

/// `synchronous=normal|full|extra`, in any case (as SQLite's pragma takes it).
fn synchronous<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Synchronous>, D::Error> {
    let text = String::deserialize(deserializer)?;
    Ok(Some(match text.to_ascii_lowercase().as_str() {
        "normal" => Synchronous::Normal,
        "full" => Synchronous::Full,
        "extra" => Synchronous::Extra,
        _ => {
            return Err(serde::de::Error::custom(
                "is not `normal`, `full` or `extra`",
            ))
        }
    }))
}

/// Where the database lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A database file (created if missing, unless `create=false`). A
    /// relative path is resolved against the working directory at open time.
    File(PathBuf),
    /// A private in-memory database: one connection, this process only, gone
    /// when the store is dropped.
    Memory,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(path) => write!(f, "{}", path.display()),
            Location::Memory => f.write_str(":memory:"),
        }
    }
}

/// SQLite's `PRAGMA synchronous` level, i.e. how hard a commit pushes to disk.
///
/// With WAL (always on for files), [`Synchronous::Normal`] survives a crash of
/// any process but may lose the last commits on power loss or an OS crash —
/// and a sequence whose last reservation is lost hands its ids out again. So
/// [`Synchronous::Full`] (an fsync per commit) is the default, and a file
/// opened with `Normal` is refused unless the configuration also accepts data
/// loss (`accept_data_loss=true`, see [`bakery_core::durability`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// `synchronous=NORMAL`: fsync at WAL checkpoints only. Needs
    /// `accept_data_loss=true` for a database file.
    Normal,
    /// `synchronous=FULL` (the default): fsync the WAL on every commit.
    #[default]
    Full,
    /// `synchronous=EXTRA`: like `FULL`, and also syncs the directory.
    Extra,
}

impl Synchronous {
    /// The pragma value (`"NORMAL"`, `"FULL"`, `"EXTRA"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
            Synchronous::Extra => "EXTRA",
        }
    }
}

/// How to open a [`SqliteStore`](crate::SqliteStore): built from a URI with
/// [`SqliteConfig::from_uri`] or in code with [`SqliteConfig::new`] and the
/// `with_*` methods. Everything is validated by [`SqliteConfig::validate`],
/// which [`SqliteStore::open`](crate::SqliteStore::open) calls.
///
/// URI forms (parsed by hand, like sqlx; the path is percent-decoded):
///
/// | URI | database |
/// |-----|----------|
/// | `sqlite://relative/path.db` | `relative/path.db` (working directory) |
/// | `sqlite:///abs/path.db` | `/abs/path.db` |
/// | `sqlite:relative.db` | `relative.db` |
/// | `sqlite::memory:` or `sqlite://:memory:` | private in-memory database |
///
/// Options after `?`, joined with `&`, read by the rules every backend
/// shares ([`bakery_core::options`]):
///
/// | option | default | meaning |
/// |--------|---------|---------|
/// | `table=NAME` | `bakery_rows` | table holding the rows; `[A-Za-z_][A-Za-z0-9_]{0,62}`, not `sqlite_…` |
/// | `busy_timeout_ms=N` | `5000` | wait this long for another writer's lock; 1 to 3600000 (`0`, "do not wait", is refused) |
/// | `create=true\|false` | `true` | create the file (and its directory) if missing |
/// | `synchronous=normal\|full\|extra` | `full` | see [`Synchronous`]; `normal` needs `accept_data_loss=true` |
/// | `accept_data_loss=true\|false` | `false` | allow `synchronous=normal` on a file (see [`bakery_core::durability`]) |
/// | `pool_size=N` | `4` (`1` in memory) | connections kept, 1 to 64 |
///
/// ```
/// use std::time::Duration;
/// use bakery_sqlite::{Location, SqliteConfig, Synchronous};
///
/// let config = SqliteConfig::from_uri("sqlite://data/bakery.db?table=rows&busy_timeout_ms=250")?;
/// assert_eq!(config.location(), &Location::File("data/bakery.db".into()));
/// assert_eq!(config.table(), "rows");
/// assert_eq!(config.busy_timeout(), Duration::from_millis(250));
///
/// let same = SqliteConfig::new("data/bakery.db")
///     .with_table("rows")
///     .with_busy_timeout(Duration::from_millis(250));
/// assert_eq!(config, same);
///
/// let err = SqliteConfig::from_uri("sqlite://x.db?colour=blue").unwrap_err();
/// assert_eq!(err.kind(), bakery_core::ErrorKind::Config);
/// # Ok::<(), bakery_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteConfig {
    location: Location,
    table: String,
    busy_timeout: Duration,
    create: bool,
    synchronous: Synchronous,
    pool_size: usize,
    accept_data_loss: bool,
}

impl SqliteConfig {
    /// A database file at `path`, with the defaults. The path `:memory:` means
    /// an in-memory database, as in SQLite itself (see [`SqliteConfig::memory`]).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        if path.as_os_str() == ":memory:" {
            return Self::memory();
        }
        Self::with_location(Location::File(path))
    }

    /// A private in-memory database: one connection (every SQLite connection
    /// to `:memory:` is a database of its own), this process only.
    pub fn memory() -> Self {
        SqliteConfig {
            pool_size: 1,
            ..Self::with_location(Location::Memory)
        }
    }

    fn with_location(location: Location) -> Self {
        SqliteConfig {
            location,
            table: DEFAULT_TABLE.to_string(),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            create: true,
            synchronous: Synchronous::default(),
            accept_data_loss: false,
            pool_size: DEFAULT_POOL_SIZE,
        }
    }

    /// Parse a `sqlite:` URI (forms and options in the type docs). Any
    /// problem is an [`ErrorKind::Config`](bakery_core::ErrorKind::Config)
    /// error whose message names the offending part.
    pub fn from_uri(uri: &str) -> Result<Self> {
        let rest = match uri.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case("sqlite:") => &uri[7..],
            _ => {
                return Err(Error::config(
                    BACKEND,
                    format!("{uri:?} is not a sqlite URI (expected sqlite://PATH, sqlite:///ABS/PATH or sqlite::memory:)"),
                ))
            }
        };
        let (location, query) = match rest.split_once('?') {
            Some((location, query)) => (location, Some(query)),
            None => (rest, None),
        };
        let location = location.strip_prefix("//").unwrap_or(location);
        let path = bakery_core::uri::percent_decode(BACKEND, "path", location)?;
        if path.is_empty() {
            return Err(Error::config(
                BACKEND,
                "sqlite URI has an empty path (expected sqlite://relative.db, sqlite:///abs/path.db or sqlite::memory:)",
            ));
        }
        if path.ends_with('/') {
            return Err(Error::config(
                BACKEND,
                format!("sqlite URI path {path:?} names a directory, not a database file"),
            ));
        }
        let options: Options = options::from_query(BACKEND, query)?;
        let mut config = SqliteConfig::new(path);
        if let Some(table) = options.table {
            validate_table(&table)?;
            config.table = table;
        }
        if let Some(timeout) = options.busy_timeout_ms {
            config.busy_timeout = timeout;
        }
        if let Some(create) = options.create {
            config.create = create;
        }
        if let Some(synchronous) = options.synchronous {
            config.synchronous = synchronous;
        }
        if let Some(accept) = options.accept_data_loss {
            config.accept_data_loss = accept;
        }
        if let Some(size) = options.pool_size {
            options::pool_size(BACKEND, size, MAX_POOL_SIZE)?;
            config.pool_size = size;
        }
        config.validate()?;
        Ok(config)
    }

    /// True for an in-memory database.
    pub fn is_memory(&self) -> bool {
        self.location == Location::Memory
    }

    /// Whether a missing file is created.
    pub fn create_if_missing(&self) -> bool {
        self.create
    }

    /// Check the whole configuration; an [`ErrorKind::Config`](bakery_core::ErrorKind::Config)
    /// error names what is wrong.
    pub fn validate(&self) -> Result<()> {
        validate_table(&self.table)?;
        if let Location::File(path) = &self.location {
            if path.as_os_str().is_empty() {
                return Err(Error::config(BACKEND, "sqlite database path is empty"));
            }
        }
        if self.busy_timeout.as_millis() > u128::from(MAX_BUSY_TIMEOUT_MS) {
            return Err(Error::config(
                BACKEND,
                format!("sqlite option `busy_timeout_ms` is above {MAX_BUSY_TIMEOUT_MS}"),
            ));
        }
        options::count_in_range(BACKEND, "pool_size", self.pool_size, MAX_POOL_SIZE)?;
        crate::durability::check(
            self.synchronous == Synchronous::Normal,
            self.is_memory(),
            self.accept_data_loss,
        )?;
        if self.is_memory() && self.pool_size != 1 {
            return Err(Error::config(
                BACKEND,
                "sqlite option `pool_size` must be 1 for an in-memory database (each connection would be a separate database)",
            ));
        }
        Ok(())
    }
}

/// A table name must be a plain identifier, so it can be formatted into SQL
/// once at open time: `[A-Za-z_][A-Za-z0-9_]{0,62}`, and not SQLite's
/// reserved `sqlite_` prefix.
fn validate_table(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 63;
    if !ok {
        return Err(Error::config(
            BACKEND,
            format!("sqlite option `table`: {name:?} is not a valid table name (expected [A-Za-z_][A-Za-z0-9_]{{0,62}})"),
        ));
    }
    if name.len() >= 7 && name[..7].eq_ignore_ascii_case("sqlite_") {
        return Err(Error::config(
            BACKEND,
            format!(
                "sqlite option `table`: {name:?} uses the prefix `sqlite_`, reserved by SQLite"
            ),
        ));
    }
    Ok(())
}

bakery_core::setters! { SqliteConfig {
    /// Use the table `table` (default [`DEFAULT_TABLE`]). Validated on open.
    with_table(table: impl Into<String>);
    /// Wait up to `busy_timeout` for another connection's write lock
    /// (default [`DEFAULT_BUSY_TIMEOUT`]; at most `i32::MAX` milliseconds).
    with_busy_timeout(busy_timeout: Duration);
    /// Create the database file and its parent directory if missing
    /// (default `true`). Ignored for an in-memory database.
    with_create_if_missing(create: bool);
    /// Set the durability level (default [`Synchronous::Full`];
    /// [`Synchronous::Normal`] on a file needs
    /// [`with_accept_data_loss(true)`](Self::with_accept_data_loss)).
    with_synchronous(synchronous: Synchronous);
    /// Allow a level that can lose acknowledged commits on power loss
    /// ([`Synchronous::Normal`]); default `false`. The URI option is
    /// `accept_data_loss=true`.
    with_accept_data_loss(accept_data_loss: bool);
    /// Keep at most `pool_size` connections (1 to [`MAX_POOL_SIZE`]; an
    /// in-memory database needs exactly 1). Calls beyond that wait for a
    /// connection.
    with_pool_size(pool_size: usize);
}}

bakery_core::getters! { SqliteConfig {
    /// Whether a level that can lose acknowledged commits is allowed.
    accept_data_loss: bool;
    /// Where the database lives.
    location: &Location;
    /// The table name.
    table: &str;
    /// The busy timeout.
    busy_timeout: Duration;
    /// The durability level.
    synchronous: Synchronous;
    /// The most connections kept.
    pool_size: usize;
}}
