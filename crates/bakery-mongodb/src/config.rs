//! [`MongoConfig`]: the URI, bakery's options and the driver's, the
//! defaults bakery sets, validation and redaction.

use std::fmt;
use std::time::Duration;

use bakery_core::durability::{UriOptions, DEFAULT_RECHECK, RECHECK_OPTION};
use bakery_core::options::{self, split_query};
use bakery_core::{Error, Operation, Result};
use mongodb::error::ErrorKind as DriverKind;
use mongodb::options::{
    Acknowledgment, ClientOptions, ConnectionString, ReadConcern, ReadPreference, WriteConcern,
};
use serde::de::{self, IntoDeserializer};
use serde::Deserialize;

use crate::error::{self, driver_message, Stage};
use crate::BACKEND;
#[cfg(doc)]
use crate::{MongoStore, ServerInfo};

/// The collection used when none is configured.
pub const DEFAULT_COLLECTION: &str = "bakery_rows";

/// The database used when the URI names none (`mongodb://host/` or
/// `mongodb://host`).
pub const DEFAULT_DATABASE: &str = "bakery";

/// How long one call may take when `timeout_ms` is not given. The bound is
/// client-side and covers every round trip of the call; when it passes, a
/// call that had sent a write is [`ErrorKind::Unknown`], any other
/// [`ErrorKind::Unavailable`].
///
/// [`ErrorKind::Unknown`]: bakery_core::ErrorKind::Unknown
/// [`ErrorKind::Unavailable`]: bakery_core::ErrorKind::Unavailable
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest accepted `timeout_ms` (one hour, as every backend).
pub const MAX_TIMEOUT: Duration = Duration::from_millis(options::MAX_MILLIS);

/// The longest accepted collection name, in bytes.
pub const MAX_COLLECTION_LEN: usize = 120;

/// The URI option that lets an explicit `cas=update` open on a server
/// where its atomicity is not proven (anything but MongoDB itself):
/// `allow_unproven_update=true`. Never the default; see [`ServerInfo`].
pub const ALLOW_UNPROVEN_UPDATE: &str = "allow_unproven_update";

/// How a compare-and-set is made atomic on the server. See the crate docs
/// for the full argument, the round trips and the servers each is correct
/// on. Unless the URI chooses one, the store picks it at open from what the
/// server is ([`ServerInfo::default_strategy`]): `Update` on MongoDB,
/// `Insert` on everything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum CasStrategy {
    /// One document per key, `{_id: key, v, ver, dead}`; a write is one
    /// `findOneAndUpdate` filtered on `{_id, ver}` that `$inc`s `ver`. One
    /// round trip. Atomic on real MongoDB (a single-document update
    /// re-checks its filter under the document's write lock), NOT on
    /// FerretDB v1, whose update reads, then writes without re-checking the
    /// filter (FerretDB issue 3040): concurrent writers can both succeed.
    /// Refused on any server but MongoDB unless the URI adds
    /// [`ALLOW_UNPROVEN_UPDATE`]`=true`.
    Update,
    /// One immutable document per version, `_id: "<key>#<20-digit
    /// version>"`; a write inserts version `n + 1`, and the unique `_id`
    /// index lets exactly one writer of `n + 1` succeed. Atomic on any
    /// server with a unique `_id` index, FerretDB v1 included. Three round
    /// trips per applied write (read, insert, confirm) plus background
    /// pruning of old versions.
    Insert,
}

bakery_core::spellings! {
    /// The URI spelling: `"update"` or `"insert"`.
    CasStrategy { Update => "update", Insert => "insert" }
}

/// How to reach MongoDB (or a server speaking its protocol) and where to
/// keep bakery's rows: built from a URI with [`MongoConfig::from_uri`], then
/// adjusted with the `with_*` methods. [`MongoStore::open`] validates it.
///
/// URI: `mongodb://[USER[:PASSWORD]@]HOST[:PORT][,HOST2[:PORT2]…][/DATABASE][?OPTIONS]`
/// (and `mongodb+srv://USER:PASSWORD@CLUSTER/DATABASE` with the `srv`
/// feature). `DATABASE` defaults to [`DEFAULT_DATABASE`]. bakery takes its
/// own options out of the query string and hands everything else to the
/// driver unchanged (`replicaSet`, `directConnection`, `w`, `wtimeoutMS`,
/// `journal`, `readConcernLevel`, `authSource`, `authMechanism`, `tls`,
/// `tlsCAFile`, `serverSelectionTimeoutMS`, `connectTimeoutMS`,
/// `maxPoolSize`, `appName`, `retryWrites`, …); an option neither knows is
/// an [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error.
///
/// | bakery option | default | meaning |
/// |---------------|---------|---------|
/// | `cas=auto\|update\|insert` | `auto` | see [`CasStrategy`]; `auto` = by the server, see [`ServerInfo`] |
/// | `allow_unproven_update=true\|false` | `false` | let `cas=update` open on a server other than MongoDB |
/// | `accept_data_loss=true\|false` | `false` | open even if `journal=false` or `w=1` on a replica set (see [`bakery_core::durability`]) |
/// | `collection=NAME` | `bakery_rows` | the collection; 1 to 120 bytes of `A-Z a-z 0-9 _ - .`, not `system.…` |
/// | `timeout_ms=N` | `10000` | client-side limit on each call, 1 ms to 1 h |
/// | `durability_recheck_ms=N` | `1000` | re-read the server's topology this often while live (and after every new connection), 1 ms to 1 h (crate docs, "Consistency and durability") |
///
/// Driver defaults bakery changes unless the URI sets them: `w=majority`,
/// `journal=true`, `readConcernLevel=majority`, `retryWrites=false`, `appName=bakery`,
/// `serverSelectionTimeoutMS` and `connectTimeoutMS` = half of `timeout_ms`
/// (at most 30 s and 10 s).
///
/// The password never appears in `Debug`, `Display` or any error.
///
/// ```
/// use std::time::Duration;
/// use bakery_mongodb::{CasStrategy, MongoConfig};
///
/// let config = MongoConfig::from_uri(
///     "mongodb://app:s3cret@db1:27017,db2:27017/orders?replicaSet=rs0&cas=insert&collection=seqs&timeout_ms=2500",
/// )?;
/// assert_eq!(config.cas(), Some(CasStrategy::Insert));
/// assert_eq!(config.database(), "orders");
/// assert_eq!(config.collection(), "seqs");
/// assert_eq!(config.timeout(), Duration::from_millis(2500));
/// assert!(!config.retry_writes());
/// assert_eq!(
///     config.to_string(),
///     "mongodb://app:***@db1:27017,db2:27017/orders?cas=insert&collection=seqs&timeout_ms=2500&replicaSet=rs0"
/// );
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), bakery_core::Error>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct MongoConfig {
    conn: ConnectionString,
    /// `mongodb` or `mongodb+srv`, lowercase.
    scheme: &'static str,
    /// `USER[:***]@HOSTS` as given, password replaced.
    authority: String,
    /// The driver's options as given (`name=value`), secrets redacted, for
    /// `Display` only.
    shown_options: Vec<String>,
    database: String,
    collection: String,
    /// `None`: chosen at open by what the server is.
    cas: Option<CasStrategy>,
    allow_unproven_update: bool,
    accept_data_loss: bool,
    timeout: Duration,
    durability_recheck: Duration,
}

impl MongoConfig {
    /// Parse a `mongodb://` (or `mongodb+srv://`) URI; the forms and options
    /// are in the type docs. Any problem is an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error naming the
    /// offending part; the URI itself (which may hold a password) is never
    /// quoted. No network access: `mongodb+srv` seed lists are resolved by
    /// [`MongoStore::open`].
    pub fn from_uri(uri: &str) -> Result<Self> {
        let (scheme, rest) = bakery_core::uri::strip_scheme(uri, SCHEME_FORMS).ok_or_else(|| {
            Error::config(
                BACKEND,
                "not a mongodb URI (expected mongodb://[USER:PASSWORD@]HOST[:PORT][,HOST2…][/DATABASE][?OPTIONS])",
            )
        })?;
        if scheme == "mongodb+srv" && !cfg!(feature = "srv") {
            return Err(Error::config(
                BACKEND,
                "mongodb+srv:// needs the `srv` feature of bakery-mongodb (a DNS resolver), which this build has off",
            ));
        }
        // The driver splits the same way: options after the first `?`,
        // credentials before the last `@` (a password must percent-encode
        // `@`, `:`, `/` and `?`).
        let (base, query) = match rest.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (rest, None),
        };
        let (userinfo, hosts_and_db) = match base.rfind('@') {
            Some(at) => (Some(&base[..at]), &base[at + 1..]),
            None => (None, base),
        };
        let secrets = Secrets::from_userinfo(userinfo);
        let hosts = hosts_and_db
            .split_once('/')
            .map_or(hosts_and_db, |(hosts, _)| hosts);
        options::require(BACKEND, !hosts.is_empty(), || {
            "mongodb URI names no host (expected mongodb://HOST[:PORT]/DATABASE)".into()
        })?;
        options::require(BACKEND, !uri.contains('#'), || {
            "mongodb URI has a `#`; a fragment is not supported (percent-encode `#` in a password as %23)".into()
        })?;

        let (options, driver_pairs): (Options, _) =
            split_query(BACKEND, query).map_err(|e| secrets.scrub_error(e))?;
        let shown_options = driver_pairs
            .iter()
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if is_secret_option(name) => format!("{name}=***"),
                _ => pair.to_string(),
            })
            .collect();

        let mut driver_uri = String::with_capacity(uri.len());
        driver_uri.push_str(scheme);
        driver_uri.push_str("://");
        driver_uri.push_str(base);
        if !driver_pairs.is_empty() {
            driver_uri.push('?');
            driver_uri.push_str(&driver_pairs.join("&"));
        }
        let conn = ConnectionString::parse(&driver_uri)
            .map_err(|e| secrets.scrub_error(driver_refused(&e, &driver_pairs)))?;
        let database = conn
            .default_database
            .clone()
            .unwrap_or_else(|| DEFAULT_DATABASE.to_string());
        let authority = match userinfo {
            Some(userinfo) => {
                let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
                if userinfo.contains(':') {
                    format!("{user}:***@{hosts}")
                } else {
                    format!("{user}@{hosts}")
                }
            }
            None => hosts.to_string(),
        };
        let config = MongoConfig {
            conn,
            scheme,
            authority,
            shown_options,
            database,
            collection: options
                .collection
                .unwrap_or_else(|| DEFAULT_COLLECTION.to_string()),
            cas: options.cas,
            allow_unproven_update: options.allow_unproven_update.unwrap_or(false),
            accept_data_loss: options.accept_data_loss.unwrap_or(false),
            timeout: options.timeout_ms.unwrap_or(DEFAULT_TIMEOUT),
            durability_recheck: options.durability_recheck_ms.unwrap_or(DEFAULT_RECHECK),
        };
        config.validate()?;
        Ok(config)
    }

    /// The user name, if the URI has credentials.
    pub fn username(&self) -> Option<&str> {
        self.conn.credential.as_ref()?.username.as_deref()
    }

    /// True if a password is configured (it is never shown).
    pub fn has_password(&self) -> bool {
        self.conn
            .credential
            .as_ref()
            .is_some_and(|c| c.password.is_some())
    }

    /// Whether the driver retries a write once after a network error
    /// (`retryWrites`; bakery's default is `false`, see the crate docs).
    pub fn retry_writes(&self) -> bool {
        self.conn.retry_writes.unwrap_or(false)
    }

    /// The write concern every write uses: the URI's (`w`, `wtimeoutMS`,
    /// `journal`), with `w` defaulting to `majority` and `journal` to
    /// `true` (a standalone server acknowledges an unjournaled write from
    /// memory, and a crash in the next 100 ms forgets it).
    pub fn write_concern(&self) -> WriteConcern {
        let mut concern = self.conn.write_concern.clone().unwrap_or_default();
        if concern.w.is_none() {
            concern.w = Some(Acknowledgment::Majority);
        }
        if concern.journal.is_none() {
            concern.journal = Some(true);
        }
        concern
    }

    /// The read concern every read uses: the URI's `readConcernLevel`, else
    /// `majority`.
    pub fn read_concern(&self) -> ReadConcern {
        self.conn
            .read_concern
            .clone()
            .unwrap_or_else(ReadConcern::majority)
    }

    /// Check the whole configuration; an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error names
    /// what is wrong.
    pub fn validate(&self) -> Result<()> {
        validate_collection(&self.collection)?;
        validate_database(&self.database)?;
        for (name, value) in [
            ("timeout_ms", self.timeout),
            (RECHECK_OPTION, self.durability_recheck),
        ] {
            if value.is_zero() || value > MAX_TIMEOUT {
                return Err(options::invalid(
                    BACKEND,
                    name,
                    &value.as_millis().to_string(),
                    &format!("a number of milliseconds from 1 to {}", options::MAX_MILLIS),
                ));
            }
        }
        if matches!(
            self.conn.write_concern.as_ref().and_then(|w| w.w.as_ref()),
            Some(Acknowledgment::Nodes(0))
        ) {
            return Err(Error::config(
                BACKEND,
                "mongodb option `w=0` (unacknowledged writes) cannot report whether a compare-and-set applied",
            ));
        }
        if !matches!(
            self.conn.read_preference,
            None | Some(ReadPreference::Primary)
        ) {
            return Err(Error::config(
                BACKEND,
                "mongodb option `readPreference` must be `primary`: reads from secondaries can miss acknowledged writes",
            ));
        }
        Ok(())
    }

    /// The driver's options with bakery's defaults filled in; resolves
    /// `mongodb+srv` seed lists (DNS).
    pub(crate) async fn client_options(&self) -> Result<ClientOptions> {
        let mut options = ClientOptions::parse(self.conn.clone())
            .await
            .map_err(|e| error::map_err(e, Operation::Open, Stage::Connect))?;
        options.retry_writes = Some(self.retry_writes());
        options.write_concern = Some(self.write_concern());
        options.read_concern = Some(self.read_concern());
        let half = self.timeout / 2;
        if options.server_selection_timeout.is_none() {
            options.server_selection_timeout = Some(half.min(Duration::from_secs(30)));
        }
        if options.connect_timeout.is_none() {
            options.connect_timeout = Some(half.min(Duration::from_secs(10)));
        }
        if options.app_name.is_none() {
            options.app_name = Some("bakery".to_string());
        }
        Ok(options)
    }

    fn fmt_redacted(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}/{}?cas={}&collection={}&timeout_ms={}",
            self.scheme,
            self.authority,
            self.database,
            self.cas.map_or("auto", CasStrategy::as_str),
            self.collection,
            self.timeout.as_millis()
        )?;
        if self.allow_unproven_update {
            write!(f, "&{ALLOW_UNPROVEN_UPDATE}=true")?;
        }
        let durability = UriOptions {
            accept_data_loss: self.accept_data_loss,
            recheck: self.durability_recheck,
        };
        write!(f, "{durability}")?;
        for option in &self.shown_options {
            write!(f, "&{option}")?;
        }
        Ok(())
    }
}

// `Display`: the URI form with the password (and secret-bearing driver
// options) replaced by `***`; `Debug`: the same in `MongoConfig(…)`.
bakery_core::redacted_fmt!(MongoConfig);

/// Every scheme this crate knows, compiled in or not: a `mongodb+srv` URI
/// without the `srv` feature gets the driver's own explanation.
const SCHEME_FORMS: &[&str] = &["mongodb+srv", "mongodb"];

/// The password of a URI, raw and decoded, so that no message built from a
/// driver error can ever echo it.
struct Secrets(Vec<String>);

impl Secrets {
    fn from_userinfo(userinfo: Option<&str>) -> Secrets {
        let mut secrets = Vec::new();
        if let Some((_, password)) = userinfo.and_then(|u| u.split_once(':')) {
            if !password.is_empty() {
                secrets.push(password.to_string());
                if let Ok(decoded) = bakery_core::uri::percent_decode(BACKEND, "password", password)
                {
                    if decoded != password && !decoded.is_empty() {
                        secrets.push(decoded);
                    }
                }
            }
        }
        Secrets(secrets)
    }

    fn scrub(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_string(), |text, secret| text.replace(secret, "***"))
    }

    /// `e` (a URI error) with the password scrubbed from its message.
    fn scrub_error(&self, e: Error) -> Error {
        if self
            .0
            .iter()
            .any(|secret| e.message().contains(secret.as_str()))
        {
            Error::new(e.kind(), BACKEND, self.scrub(e.message()))
        } else {
            e
        }
    }
}

/// Driver options whose values must not be shown.
fn is_secret_option(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.contains("password")
        || name.contains("secret")
        || name.contains("token")
        || name == "authmechanismproperties"
}

/// Collection names are used verbatim as MongoDB namespaces; keep them to an
/// alphabet that means the same on every server (FerretDB maps them to
/// PostgreSQL tables).
fn validate_collection(name: &str) -> Result<()> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    let ok = !name.is_empty()
        && name.len() <= MAX_COLLECTION_LEN
        && ok_chars
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !name.starts_with("system.");
    if ok {
        Ok(())
    } else {
        Err(options::invalid(
            BACKEND,
            "collection",
            name,
            &format!(
                "a valid collection name (1 to {MAX_COLLECTION_LEN} bytes of A-Z a-z 0-9 _ - ., no leading, trailing or double `.`, not `system.…`)"
            ),
        ))
    }
}

fn validate_database(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    options::require(BACKEND, ok, || {
        format!(
            "mongodb database {name:?} is not a valid database name (1 to 63 bytes of A-Z a-z 0-9 _ -)"
        )
    })
}

/// bakery's URI options (the table in [`MongoConfig`]'s docs), read by
/// [`bakery_core::options`] with the rules every backend shares; every
/// other option is the driver's.
#[derive(Deserialize)]
struct Options {
    #[serde(default, deserialize_with = "strategy_or_auto")]
    cas: Option<CasStrategy>,
    collection: Option<String>,
    #[serde(default, deserialize_with = "options::millis")]
    timeout_ms: Option<Duration>,
    allow_unproven_update: Option<bool>,
    accept_data_loss: Option<bool>,
    #[serde(default, deserialize_with = "options::millis")]
    durability_recheck_ms: Option<Duration>,
}

/// `cas=update|insert`, or `cas=auto` (`None`: chosen at open by the server).
fn strategy_or_auto<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<CasStrategy>, D::Error> {
    // Any case, like every named value of every backend's options.
    let value = String::deserialize(d)?.to_ascii_lowercase();
    if value == "auto" {
        return Ok(None);
    }
    CasStrategy::deserialize(value.into_deserializer())
        .map(Some)
        .map_err(|_: de::value::Error| de::Error::custom("is not `auto`, `update` or `insert`"))
}

/// The driver refused its part of the URI. An option it does not know is
/// one neither bakery nor the driver knows: say so as for any backend.
fn driver_refused(e: &mongodb::error::Error, driver_pairs: &[&str]) -> Error {
    let detail = driver_message(e);
    let unknown = driver_pairs.iter().find_map(|pair| {
        let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
        let refused = format!("{} is an invalid option", name.to_lowercase());
        matches!(&*e.kind, DriverKind::InvalidArgument { message, .. } if message.starts_with(&refused))
            .then_some(name)
    });
    let message = match unknown {
        Some(name) => format!(
            "unknown mongodb URI option `{name}` (known: {}, and the driver's): {detail}",
            options::fields::<Options>().join(", ")
        ),
        None => format!("mongodb URI: {detail}"),
    };
    Error::config(BACKEND, message)
}

bakery_core::setters! { MongoConfig {
    /// Choose how a compare-and-set is made atomic; `None` lets the store
    /// choose by the server at open (the default; see [`ServerInfo`]).
    with_cas(cas: impl Into<Option<CasStrategy>>);
    /// Let an explicit [`CasStrategy::Update`] open on a server other than
    /// MongoDB ([`ALLOW_UNPROVEN_UPDATE`]; default `false`). Only for a
    /// server you have verified applies a filtered `findOneAndUpdate`
    /// atomically.
    with_allow_unproven_update(allow_unproven_update: bool);
    /// Open even when the write concern can lose acknowledged writes
    /// (`journal=false`, or `w=1` on a replica set):
    /// [`ACCEPT_DATA_LOSS`],
    /// default `false`.
    with_accept_data_loss(accept_data_loss: bool);
    /// Keep the rows in `collection` (default [`DEFAULT_COLLECTION`]);
    /// checked by [`MongoConfig::validate`].
    with_collection(collection: impl Into<String>);
    /// Keep the collection in `database` (default: the URI's, else
    /// [`DEFAULT_DATABASE`]).
    with_database(database: impl Into<String>);
    /// Limit each call to `timeout` (default [`DEFAULT_TIMEOUT`]).
    with_timeout(timeout: Duration);
    /// Re-read the server's topology this often while the store is live,
    /// and after every new connection (default [`DEFAULT_RECHECK`]; crate
    /// docs, "Consistency and durability").
    with_durability_recheck(durability_recheck: Duration);
}}

bakery_core::getters! { MongoConfig {
    /// The compare-and-set strategy the URI chose, or `None` when the
    /// store chooses it at open by the server ([`MongoStore::strategy`] is
    /// the one in use).
    cas: Option<CasStrategy>;
    /// Whether an explicit `cas=update` may open on a server other than
    /// MongoDB.
    allow_unproven_update: bool;
    /// Whether the store may open with a write concern that can lose
    /// acknowledged writes.
    accept_data_loss: bool;
    /// The collection holding the rows.
    collection: &str;
    /// The database holding the collection.
    database: &str;
    /// The client-side limit on each call.
    timeout: Duration;
    /// How often a live store re-reads the server's topology.
    durability_recheck: Duration;
}}
