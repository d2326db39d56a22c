//! [`CassandraConfig`]: the contact points, the keyspace and table, the
//! consistency levels and the timeout, from a URI or in code.

use std::fmt;
use std::time::Duration;

use bakery_core::durability::{UriOptions, DEFAULT_RECHECK, RECHECK_OPTION};
use bakery_core::options::{self, MAX_MILLIS};
use bakery_core::uri::{percent_decode, percent_encode, Credentials};
use bakery_core::{Error, Result};
use serde::de;

use crate::{BACKEND, SCHEMES};

/// The CQL native-protocol port of a host given without one.
pub const DEFAULT_PORT: u16 = 9042;

/// The keyspace used when the URI has no path.
pub const DEFAULT_KEYSPACE: &str = "bakery";

/// The table used when none is configured.
pub const DEFAULT_TABLE: &str = "bakery_rows";

/// How long one call (`get`, `put_if_version`, `delete_if_version`, with all
/// its round trips) may take, and how long opening may take, before the
/// client gives up: [`ErrorKind::Unavailable`](bakery_core::ErrorKind::Unavailable)
/// for a read, [`ErrorKind::Unknown`](bakery_core::ErrorKind::Unknown) for a
/// write that was sent.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest keyspace or table name accepted (Cassandra's keyspace limit).
pub const MAX_NAME_LEN: usize = 48;

/// The highest replication factor accepted (per data center).
const MAX_RF: u32 = 100;

/// The URI options (read by [`bakery_core::options`]).
#[derive(serde::Deserialize)]
struct Options {
    table: Option<String>,
    replication: Option<String>,
    #[serde(default, deserialize_with = "any_case")]
    serial: Option<Serial>,
    #[serde(default, deserialize_with = "any_case")]
    consistency: Option<Consistency>,
    #[serde(default, deserialize_with = "options::millis")]
    timeout_ms: Option<Duration>,
    user: Option<String>,
    password: Option<String>,
    accept_data_loss: Option<bool>,
    #[serde(default, deserialize_with = "options::millis")]
    durability_recheck_ms: Option<Duration>,
}

/// How a keyspace that bakery creates is replicated. An existing keyspace
/// is used as it is and never altered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// `SimpleStrategy` with this replication factor (URI: `replication=rf=N`).
    Simple(u32),
    /// `NetworkTopologyStrategy` with a replication factor per data center
    /// (URI: `replication=dc=NAME:N,NAME2:N2`).
    NetworkTopology(Vec<(String, u32)>),
}

impl Default for Replication {
    /// `SimpleStrategy`, replication factor 1: a single-node development
    /// server. Production clusters should say `rf=3` or `dc=…`.
    fn default() -> Self {
        Replication::Simple(1)
    }
}

impl Replication {
    /// Parse the value of the `replication` URI option: `rf=N` or
    /// `dc=NAME:N[,NAME:N…]`, each `N` in plain digits.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            options::invalid(
                BACKEND,
                "replication",
                text,
                &format!("`rf=N` or `dc=NAME:N[,NAME:N…]` (it {why})"),
            )
        };
        let factor = |n: &str| {
            n.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| n.parse().ok())
                .flatten()
        };
        let replication = match text.split_once('=') {
            Some(("rf", n)) => Replication::Simple(factor(n).ok_or_else(|| bad("has a bad `rf`"))?),
            Some(("dc", list)) => {
                let mut dcs = Vec::new();
                for item in list.split(',') {
                    let (name, n) = item
                        .rsplit_once(':')
                        .ok_or_else(|| bad("has a data center without `:N`"))?;
                    let n =
                        factor(n).ok_or_else(|| bad("has a bad data center replication factor"))?;
                    dcs.push((name.to_string(), n));
                }
                Replication::NetworkTopology(dcs)
            }
            _ => return Err(bad("is not understood")),
        };
        replication.validate()?;
        Ok(replication)
    }

    /// Check the factors (1 to 100) and data center names (1 to 64 ASCII
    /// letters, digits, `_ - .`, each named once).
    pub fn validate(&self) -> Result<()> {
        let bad_rf = |n: u32| {
            Error::config(
                BACKEND,
                format!("cassandra replication factor {n} is out of range (1 to {MAX_RF})"),
            )
        };
        match self {
            Replication::Simple(n) => {
                if !(1..=MAX_RF).contains(n) {
                    return Err(bad_rf(*n));
                }
            }
            Replication::NetworkTopology(dcs) => {
                if dcs.is_empty() {
                    return Err(Error::config(
                        BACKEND,
                        "cassandra replication names no data center",
                    ));
                }
                for (i, (name, n)) in dcs.iter().enumerate() {
                    let ok = !name.is_empty()
                        && name.len() <= 64
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
                    if !ok {
                        return Err(Error::config(
                            BACKEND,
                            format!(
                                "cassandra data center name {name:?} is not 1 to 64 ASCII letters, digits, `_`, `-` or `.`"
                            ),
                        ));
                    }
                    if dcs[..i].iter().any(|(other, _)| other == name) {
                        return Err(Error::config(
                            BACKEND,
                            format!("cassandra data center {name:?} is named twice"),
                        ));
                    }
                    if !(1..=MAX_RF).contains(n) {
                        return Err(bad_rf(*n));
                    }
                }
            }
        }
        Ok(())
    }

    /// The CQL map literal of `CREATE KEYSPACE … WITH replication = …`
    /// (built from validated parts only).
    pub(crate) fn cql(&self) -> String {
        match self {
            Replication::Simple(n) => {
                format!("{{'class': 'SimpleStrategy', 'replication_factor': {n}}}")
            }
            Replication::NetworkTopology(dcs) => {
                let mut out = String::from("{'class': 'NetworkTopologyStrategy'");
                for (name, n) in dcs {
                    out.push_str(&format!(", '{name}': {n}"));
                }
                out.push('}');
                out
            }
        }
    }
}

/// The URI form of the replication (`rf=N` or `dc=NAME:N,…`).
impl fmt::Display for Replication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Replication::Simple(n) => write!(f, "rf={n}"),
            Replication::NetworkTopology(dcs) => {
                f.write_str("dc=")?;
                for (i, (name, n)) in dcs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}:{n}")?;
                }
                Ok(())
            }
        }
    }
}

/// [`Level`] for a consistency enum from its URI spellings, and its
/// `as_str`.
macro_rules! level {
    ($level:ident { $($name:literal => $variant:ident,)* }) => {
        impl Level for $level {
            const NAMES: &'static [(&'static str, Self)] = &[$(($name, $level::$variant)),*];
        }

        impl $level {
            /// The URI spelling.
            pub fn as_str(self) -> &'static str {
                self.name()
            }
        }
    };
}

/// The serial consistency of the Paxos rounds (conditional writes and
/// reads): who has to agree on the ballot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Serial {
    /// `SERIAL`: a quorum of all replicas, in all data centers. Linearizable
    /// across the whole cluster. The default.
    #[default]
    Serial,
    /// `LOCAL_SERIAL`: a quorum of the replicas in the coordinator's data
    /// center. Linearizable only when all the keyspace's replicas are in
    /// one data center (there it is the same quorum as `SERIAL`): bakery
    /// does not pin a key's coordinator to a data center, so opening
    /// refuses it ([`ErrorKind::Config`](bakery_core::ErrorKind::Config))
    /// on a keyspace replicated to several.
    LocalSerial,
}

level!(Serial {
    "serial" => Serial,
    "local_serial" => LocalSerial,
});

/// The (commit) consistency level of the conditional writes: how many
/// replicas must have applied the Paxos commit before a write is
/// acknowledged. Reads are always at the [`Serial`] level, which finishes
/// any accepted but uncommitted round, so every level keeps bakery
/// linearizable: a conditional write is acknowledged only once a Paxos
/// quorum has accepted it, whatever this level (crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Consistency {
    /// `ANY`.
    Any,
    /// `ONE`.
    One,
    /// `TWO`.
    Two,
    /// `THREE`.
    Three,
    /// `QUORUM`: the default.
    #[default]
    Quorum,
    /// `ALL`.
    All,
    /// `LOCAL_QUORUM`.
    LocalQuorum,
    /// `EACH_QUORUM`.
    EachQuorum,
    /// `LOCAL_ONE`.
    LocalOne,
}

level!(Consistency {
    "any" => Any,
    "one" => One,
    "two" => Two,
    "three" => Three,
    "quorum" => Quorum,
    "all" => All,
    "local_quorum" => LocalQuorum,
    "each_quorum" => EachQuorum,
    "local_one" => LocalOne,
});

/// A consistency level, named in the URI in any case (`local_serial`,
/// `LOCAL_SERIAL`: CQL spells them in capitals).
trait Level: Copy + PartialEq + 'static {
    /// Every level with its URI spelling.
    const NAMES: &'static [(&'static str, Self)];

    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, level)| *level == self)
            .map_or("", |(name, _)| name)
    }
}

/// `deserialize_with` for a [`Level`] option.
fn any_case<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: de::Deserializer<'de>,
    T: Level,
{
    let text = <String as de::Deserialize>::deserialize(deserializer)?;
    let lower = text.to_ascii_lowercase();
    match T::NAMES.iter().find(|(name, _)| *name == lower) {
        Some((_, level)) => Ok(Some(*level)),
        None => {
            let names: Vec<&str> = T::NAMES.iter().map(|(name, _)| *name).collect();
            Err(de::Error::custom(format!(
                "is not one of {}",
                names.join(", ")
            )))
        }
    }
}

/// How to reach a Cassandra (or ScyllaDB) cluster and where the rows live:
/// built from a URI with [`CassandraConfig::from_uri`] or in code with
/// [`CassandraConfig::new`] and the `with_*` methods. Everything is validated
/// by [`CassandraConfig::validate`], which
/// [`CassandraStore::open`](crate::CassandraStore::open) calls.
///
/// URI form:
/// `cassandra://[user:password@]host[:port][,host2[:port2]…][/keyspace][?options]`
/// (or `scylla://…`, the same). Hosts are names, IPv4 addresses or bracketed
/// IPv6 addresses; the port defaults to 9042; the hosts are contact points
/// of one cluster (the driver discovers the others). The keyspace defaults
/// to `bakery`.
///
/// Options after `?`, joined with `&`, read by the rules every backend
/// shares ([`bakery_core::options`]); the consistency levels in any case:
///
/// | option | default | meaning |
/// |--------|---------|---------|
/// | `table=NAME` | `bakery_rows` | the table |
/// | `replication=rf=N` or `replication=dc=NAME:N,…` | `rf=1` | replication of a keyspace bakery creates: `SimpleStrategy` or `NetworkTopologyStrategy` |
/// | `serial=serial\|local_serial` | `serial` | serial consistency of the Paxos rounds |
/// | `consistency=LEVEL` | `quorum` | commit consistency of the writes: `any`, `one`, `two`, `three`, `quorum`, `all`, `local_quorum`, `each_quorum`, `local_one` |
/// | `timeout_ms=N` | `10000` | client-side bound of each call and of opening, 1 to 3 600 000 |
/// | `user=NAME` | none | user (PasswordAuthenticator); also `user:password@` before the host |
/// | `password=SECRET` | none | its password; never printed |
/// | `accept_data_loss=true\|false` | `false` | open even where an acknowledged write can be lost (crate docs, "Durability") |
/// | `durability_recheck_ms=N` | `1000` | re-read the commit log mode and the keyspace's replicas this often while live, 1 to 3 600 000 (crate docs, "Durability") |
///
/// Keyspace and table names are 1 to 48 ASCII letters, digits and `_`,
/// starting with a letter; they are always double-quoted in CQL, so their
/// case is kept (`Bakery` and `bakery` are different keyspaces). Keyspaces
/// named `system…` are refused.
///
/// `Debug` and `Display` never print the password:
///
/// ```
/// use std::time::Duration;
/// use bakery_cassandra::{CassandraConfig, Replication, Serial};
///
/// let config = CassandraConfig::from_uri(
///     "cassandra://app:s3cret@10.0.0.1,10.0.0.2:19042/orders?replication=dc=dc1:3&serial=local_serial&timeout_ms=2500",
/// )?;
/// assert_eq!(config.hosts(), ["10.0.0.1:9042", "10.0.0.2:19042"]);
/// assert_eq!(config.keyspace(), "orders");
/// assert_eq!(config.table(), "bakery_rows");
/// assert_eq!(config.replication(), &Replication::NetworkTopology(vec![("dc1".into(), 3)]));
/// assert_eq!(config.serial(), Serial::LocalSerial);
/// assert_eq!(config.timeout(), Duration::from_millis(2500));
/// assert!(!format!("{config} {config:?}").contains("s3cret"));
///
/// let err = CassandraConfig::from_uri("cassandra://h/ks?colour=blue").unwrap_err();
/// assert_eq!(err.kind(), bakery_core::ErrorKind::Config);
/// # Ok::<(), bakery_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct CassandraConfig {
    scheme: &'static str,
    hosts: Vec<String>,
    keyspace: String,
    table: String,
    replication: Replication,
    serial: Serial,
    consistency: Consistency,
    timeout: Duration,
    credentials: Credentials,
    accept_data_loss: bool,
    durability_recheck: Duration,
}

impl CassandraConfig {
    /// Contact points as `host[:port]` (port 9042 when absent), with the
    /// defaults. Validated by [`CassandraConfig::validate`] (and so on open).
    pub fn new<I, S>(hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        CassandraConfig {
            scheme: "cassandra",
            hosts: hosts
                .into_iter()
                .map(|h| {
                    let h = h.into();
                    // Normalise to host:port; a bad one is kept as given for
                    // `validate` to report.
                    parse_host(&h).unwrap_or(h)
                })
                .collect(),
            keyspace: DEFAULT_KEYSPACE.to_string(),
            table: DEFAULT_TABLE.to_string(),
            replication: Replication::default(),
            serial: Serial::default(),
            consistency: Consistency::default(),
            timeout: DEFAULT_TIMEOUT,
            credentials: Credentials::default(),
            accept_data_loss: false,
            durability_recheck: DEFAULT_RECHECK,
        }
    }

    /// Parse a `cassandra://` or `scylla://` URI (form and options in the
    /// type docs). Any problem is an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error whose
    /// message names the offending part, never the password.
    pub fn from_uri(uri: &str) -> Result<Self> {
        let (scheme, rest) = match uri.split_once("://") {
            Some((scheme, rest)) => match SCHEMES.iter().find(|s| s.eq_ignore_ascii_case(scheme)) {
                Some(scheme) => (*scheme, rest),
                None => return Err(not_a_uri()),
            },
            None => return Err(not_a_uri()),
        };
        // The userinfo may hold `?` or `/` (a password); the authority ends
        // at the first `/` or `?` after the last `@` that precedes them.
        let (userinfo, after) = split_userinfo(rest);
        let (hostpart, path, query) = {
            let end = after.find(['/', '?']).unwrap_or(after.len());
            let (hosts, tail) = after.split_at(end);
            let (path, query) = match tail.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (tail, None),
            };
            (hosts, path, query)
        };
        if hostpart.is_empty() {
            return Err(Error::config(
                BACKEND,
                "cassandra URI has no host (expected cassandra://HOST[:PORT]/KEYSPACE)",
            ));
        }
        let hosts = hostpart
            .split(',')
            .map(parse_host)
            .collect::<Result<Vec<_>>>()?;
        let keyspace = path.strip_prefix('/').unwrap_or(path);
        let keyspace = match keyspace {
            "" => DEFAULT_KEYSPACE.to_string(),
            _ => percent_decode(BACKEND, "keyspace", keyspace)?,
        };
        if keyspace.contains('/') {
            return Err(Error::config(
                BACKEND,
                "cassandra URI path must be one keyspace name (cassandra://HOST/KEYSPACE)",
            ));
        }
        let options: Options = options::from_query(BACKEND, query)?;
        let credentials = Credentials::from_userinfo(BACKEND, userinfo)?.with_options(
            BACKEND,
            options.user,
            options.password,
        )?;
        let config = CassandraConfig {
            scheme,
            keyspace,
            table: options.table.unwrap_or_else(|| DEFAULT_TABLE.to_string()),
            replication: match options.replication {
                Some(text) => Replication::parse(&text)?,
                None => Replication::default(),
            },
            serial: options.serial.unwrap_or_default(),
            consistency: options.consistency.unwrap_or_default(),
            timeout: options.timeout_ms.unwrap_or(DEFAULT_TIMEOUT),
            credentials,
            accept_data_loss: options.accept_data_loss.unwrap_or(false),
            durability_recheck: options.durability_recheck_ms.unwrap_or(DEFAULT_RECHECK),
            ..CassandraConfig::new(hosts)
        };
        config.validate()?;
        Ok(config)
    }

    /// The scheme the configuration was parsed from (`cassandra` or
    /// `scylla`; `cassandra` when built in code). Informational only: the
    /// server kind is detected on open.
    pub fn scheme(&self) -> &'static str {
        self.scheme
    }

    /// Check the whole configuration; an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error names
    /// what is wrong.
    pub fn validate(&self) -> Result<()> {
        if self.hosts.is_empty() {
            return Err(Error::config(BACKEND, "no cassandra host given"));
        }
        for host in &self.hosts {
            parse_host(host)?;
        }
        validate_name("keyspace", &self.keyspace)?;
        if self.keyspace.to_ascii_lowercase().starts_with("system") {
            return Err(Error::config(
                BACKEND,
                format!(
                    "cassandra keyspace `{}` is reserved (names starting with `system` belong to the server)",
                    self.keyspace
                ),
            ));
        }
        validate_name("table", &self.table)?;
        self.replication.validate()?;
        for (name, value) in [
            ("timeout_ms", self.timeout),
            (RECHECK_OPTION, self.durability_recheck),
        ] {
            if value.is_zero() || value > Duration::from_millis(MAX_MILLIS) {
                return Err(Error::config(
                    BACKEND,
                    format!("cassandra option `{name}` must be from 1 to {MAX_MILLIS}"),
                ));
            }
        }
        self.credentials.check(BACKEND)
    }

    /// `"keyspace"."table"`, both quoted (validated names only).
    pub(crate) fn qualified_table(&self) -> String {
        format!("\"{}\".\"{}\"", self.keyspace, self.table)
    }
}

impl fmt::Debug for CassandraConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CassandraConfig")
            .field("scheme", &self.scheme)
            .field("hosts", &self.hosts)
            .field("keyspace", &self.keyspace)
            .field("table", &self.table)
            .field("replication", &self.replication)
            .field("serial", &self.serial)
            .field("consistency", &self.consistency)
            .field("timeout", &self.timeout)
            .field("user", &self.credentials.user)
            .field("password", &self.credentials.password)
            .field("accept_data_loss", &self.accept_data_loss)
            .field("durability_recheck", &self.durability_recheck)
            .finish()
    }
}

/// The configuration as a URI, with the password shown as `***`.
impl fmt::Display for CassandraConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme)?;
        if let Some(user) = &self.credentials.user {
            write!(f, "{}:***@", percent_encode(user))?;
        }
        write!(
            f,
            "{}/{}?table={}&replication={}&serial={}&consistency={}&timeout_ms={}",
            self.hosts.join(","),
            self.keyspace,
            self.table,
            self.replication,
            self.serial.as_str(),
            self.consistency.as_str(),
            self.timeout.as_millis()
        )?;
        let durability = UriOptions {
            accept_data_loss: self.accept_data_loss,
            recheck: self.durability_recheck,
        };
        write!(f, "{durability}")?;
        Ok(())
    }
}

fn not_a_uri() -> Error {
    Error::config(
        BACKEND,
        "not a cassandra URI (expected cassandra://HOST[:PORT][,HOST[:PORT]…]/KEYSPACE[?OPTIONS] or scylla://…)",
    )
}

/// Split `user:password@` off the front of `rest`. The userinfo ends at
/// the last `@` that comes before any `=` or `&` (the options), so `@`, `:`,
/// `/` and `?` in a password work unencoded; `=` and `&` must be
/// percent-encoded.
fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    let limit = rest.find(['=', '&']).unwrap_or(rest.len());
    match rest[..limit].rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    }
}

/// A keyspace or table name: `[A-Za-z][A-Za-z0-9_]{0,47}`.
fn validate_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.as_bytes()[0].is_ascii_alphabetic()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    options::require(BACKEND, ok, || {
        format!(
            "cassandra `{what}` name {name:?} is not 1 to {MAX_NAME_LEN} ASCII letters, digits and `_` starting with a letter"
        )
    })
}

/// `host[:port]` or `[v6][:port]` to `host:port`.
fn parse_host(host: &str) -> Result<String> {
    // Only the host part is echoed: a URI missing its `@` would put a
    // password where the port goes.
    let shown = match host.split_once(':') {
        Some((name, _)) if !host.starts_with('[') => name,
        _ => host,
    };
    let bad = |why: &str| {
        Error::config(
            BACKEND,
            format!("cassandra host `{shown}` is invalid: {why}"),
        )
    };
    if host.is_empty() {
        return Err(Error::config(
            BACKEND,
            "cassandra URI has an empty host (no host)",
        ));
    }
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        let (addr, tail) = v6.split_once(']').ok_or_else(|| bad("no closing `]`"))?;
        addr.parse::<std::net::Ipv6Addr>()
            .map_err(|_| bad("not an IPv6 address"))?;
        let port = match tail {
            "" => None,
            _ => Some(
                tail.strip_prefix(':')
                    .ok_or_else(|| bad("unexpected text after `]`"))?,
            ),
        };
        (format!("[{addr}]"), port)
    } else {
        let (name, port) = match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        };
        if name.is_empty() {
            return Err(Error::config(
                BACKEND,
                "cassandra URI has a port without a host (no host)",
            ));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            return Err(bad("not a host name or address"));
        }
        (name.to_string(), port)
    };
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(bad("bad port (1 to 65535)")),
        },
    };
    Ok(format!("{name}:{port}"))
}

bakery_core::setters! { CassandraConfig {
    /// Use `keyspace` (default [`DEFAULT_KEYSPACE`]). Validated on open.
    with_keyspace(keyspace: impl Into<String>);
    /// Use `table` (default [`DEFAULT_TABLE`]). Validated on open.
    with_table(table: impl Into<String>);
    /// Replicate a keyspace bakery creates this way (default `rf=1`).
    with_replication(replication: Replication);
    /// The serial consistency of the Paxos rounds (default `SERIAL`).
    with_serial(serial: Serial);
    /// The commit consistency of the writes (default `QUORUM`).
    with_consistency(consistency: Consistency);
    /// Fail a call, or opening, that takes longer than `timeout` (default
    /// [`DEFAULT_TIMEOUT`]).
    with_timeout(timeout: Duration);
    /// Open even where an acknowledged write can be lost to one machine's
    /// crash or power loss (default `false`: such a deployment is refused
    /// at open with an [`ErrorKind::Config`](bakery_core::ErrorKind::Config)
    /// error naming each setting; crate docs, "Durability"). With `true`
    /// the store opens and logs the settings as a warning: after a crash a
    /// sequence may hand out the same ids again.
    with_accept_data_loss(accept_data_loss: bool);
    /// Re-read the commit log mode of the node that answers and the
    /// keyspace's replication this often while the store is live (default
    /// [`DEFAULT_RECHECK`]; crate docs, "Durability").
    with_durability_recheck(durability_recheck: Duration);
}}

bakery_core::credentials!(CassandraConfig);

bakery_core::getters! { CassandraConfig {
    /// The contact points, as `host:port`.
    hosts: &[String];
    /// The keyspace.
    keyspace: &str;
    /// The table.
    table: &str;
    /// The replication of a keyspace bakery creates.
    replication: &Replication;
    /// The serial consistency of the Paxos rounds.
    serial: Serial;
    /// The commit consistency of the writes.
    consistency: Consistency;
    /// The client-side bound of each call.
    timeout: Duration;
    /// True if the store may open where an acknowledged write can be lost
    /// (`accept_data_loss=true`).
    accept_data_loss: bool;
    /// How often a live store re-reads the durability settings.
    durability_recheck: Duration;
}}
