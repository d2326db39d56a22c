//! [`DynamoConfig`]: the URI, its options, the redacted form and the checks.

use std::fmt;
use std::time::Duration;

use bakery_core::durability::{UriOptions, DEFAULT_RECHECK, RECHECK_OPTION};
use bakery_core::options;
use bakery_core::uri::{Credentials, Password};
use bakery_core::{Error, Result};
use serde::Deserialize;

#[cfg(doc)]
use crate::DynamoStore;
use crate::BACKEND;

/// The table used when the URI names none.
pub const DEFAULT_TABLE: &str = "bakery_rows";

/// How long one call may take when `timeout_ms` is not given. The bound is
/// client-side and covers every round trip of the call; when it passes, a
/// call that had sent a write is
/// [`ErrorKind::Unknown`](bakery_core::ErrorKind::Unknown), any other
/// [`ErrorKind::Unavailable`](bakery_core::ErrorKind::Unavailable).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`DynamoStore::open`] waits for a table it created (or found
/// `CREATING`) to become `ACTIVE`. DynamoDB usually takes seconds; the
/// bound is generous because a slow account should not fail an open.
pub const TABLE_WAIT: Duration = Duration::from_secs(300);

/// The longest accepted `timeout_ms` (one hour, as every backend).
pub const MAX_TIMEOUT: Duration = Duration::from_millis(options::MAX_MILLIS);

/// How to reach DynamoDB (or a server speaking its API) and which table
/// holds bakery's rows: built from a URI with [`DynamoConfig::from_uri`],
/// then adjusted with the `with_*` methods. [`DynamoStore::open`] validates
/// it.
///
/// URI: `dynamodb://[ACCESS_KEY_ID:SECRET_ACCESS_KEY@]REGION[/TABLE][?OPTIONS]`.
///
/// Without `ACCESS_KEY_ID:SECRET_ACCESS_KEY@` the credentials come from the
/// AWS SDK's default chain (environment, shared config and credentials
/// files, web identity, ECS and EC2 instance roles), as for any AWS tool.
/// Explicit keys in the URI are meant for a local DynamoDB-compatible
/// server (crate docs, "Credentials"); the secret never appears in `Debug`,
/// `Display` or any error.
///
/// | option | default | meaning |
/// |--------|---------|---------|
/// | `endpoint=URL` | AWS's endpoint for the region | `http://` or `https://` URL of a DynamoDB-compatible server |
/// | `table=NAME` | the path, else `bakery_rows` | the table (3 to 255 of `A-Z a-z 0-9 _ - .`); not both path and option |
/// | `timeout_ms=N` | `10000` | client-side limit on each call, 1 ms to 1 h |
/// | `accept_data_loss=true\|false` | `false` | keep writing after the table was deleted and re-created under the store (crate docs) |
/// | `durability_recheck_ms=N` | `1000` | re-describe the table this often while live, 1 ms to 1 h |
///
/// ```
/// use std::time::Duration;
/// use bakery_dynamodb::DynamoConfig;
///
/// let config = DynamoConfig::from_uri(
///     "dynamodb://AKIDEXAMPLE:s3cret@eu-west-1/locks?endpoint=http://127.0.0.1:18000&timeout_ms=2500",
/// )?;
/// assert_eq!(config.region(), "eu-west-1");
/// assert_eq!(config.table(), "locks");
/// assert_eq!(config.endpoint(), Some("http://127.0.0.1:18000"));
/// assert_eq!(config.timeout(), Duration::from_millis(2500));
/// assert_eq!(
///     config.to_string(),
///     "dynamodb://AKIDEXAMPLE:***@eu-west-1/locks?endpoint=http://127.0.0.1:18000&timeout_ms=2500"
/// );
/// assert!(!format!("{config:?}").contains("s3cret"));
/// // No keys: the SDK's default credential chain.
/// let aws = DynamoConfig::from_uri("dynamodb://us-east-1")?;
/// assert_eq!((aws.table(), aws.has_static_credentials()), ("bakery_rows", false));
/// # Ok::<(), bakery_core::Error>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct DynamoConfig {
    region: String,
    table: String,
    endpoint: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<Password>,
    timeout: Duration,
    accept_data_loss: bool,
    durability_recheck: Duration,
}

/// bakery's URI options (the table in [`DynamoConfig`]'s docs).
#[derive(Deserialize)]
struct Options {
    endpoint: Option<String>,
    table: Option<String>,
    #[serde(default, deserialize_with = "options::millis")]
    timeout_ms: Option<Duration>,
    accept_data_loss: Option<bool>,
    #[serde(default, deserialize_with = "options::millis")]
    durability_recheck_ms: Option<Duration>,
}

impl DynamoConfig {
    /// Parse a `dynamodb://` URI; the forms and options are in the type
    /// docs. Any problem is an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error naming
    /// the offending part; the secret key is never quoted. No network
    /// access.
    pub fn from_uri(uri: &str) -> Result<Self> {
        let (_, rest) = bakery_core::uri::strip_scheme(uri, crate::SCHEMES).ok_or_else(|| {
            Error::config(
                BACKEND,
                "not a dynamodb URI (expected dynamodb://[KEY_ID:SECRET@]REGION[/TABLE][?endpoint=URL&…])",
            )
        })?;
        options::require(BACKEND, !uri.contains('#'), || {
            "dynamodb URI has a `#`; a fragment is not supported (percent-encode `#` in a secret as %23)".into()
        })?;
        let (base, query) = match rest.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (rest, None),
        };
        let (userinfo, authority) = match base.rfind('@') {
            Some(at) => (Some(&base[..at]), &base[at + 1..]),
            None => (None, base),
        };
        let credentials = Credentials::from_userinfo(BACKEND, userinfo)?;
        credentials.check(BACKEND)?;
        let (region, path_table) = match authority.split_once('/') {
            Some((region, table)) => (region, (!table.is_empty()).then_some(table)),
            None => (authority, None),
        };
        let region = bakery_core::uri::percent_decode(BACKEND, "region", region)?;
        let path_table = path_table
            .map(|t| bakery_core::uri::percent_decode(BACKEND, "table", t))
            .transpose()?;
        let options: Options = options::from_query(BACKEND, query)?;
        let table = match (path_table, options.table) {
            (Some(path), Some(option)) if path != option => {
                return Err(Error::config(
                    BACKEND,
                    format!(
                        "dynamodb URI names two tables: {path:?} in the path and {option:?} as `table=`; give one"
                    ),
                ))
            }
            (Some(table), _) | (None, Some(table)) => table,
            (None, None) => DEFAULT_TABLE.to_string(),
        };
        let config = DynamoConfig {
            region,
            table,
            endpoint: options.endpoint,
            access_key_id: credentials.user,
            secret_access_key: credentials.password,
            timeout: options.timeout_ms.unwrap_or(DEFAULT_TIMEOUT),
            accept_data_loss: options.accept_data_loss.unwrap_or(false),
            durability_recheck: options.durability_recheck_ms.unwrap_or(DEFAULT_RECHECK),
        };
        config.validate()?;
        Ok(config)
    }

    /// Check the whole configuration; an
    /// [`ErrorKind::Config`](bakery_core::ErrorKind::Config) error names
    /// what is wrong.
    pub fn validate(&self) -> Result<()> {
        let region_ok = !self.region.is_empty()
            && self.region.len() <= 64
            && self
                .region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        options::require(BACKEND, region_ok, || {
            format!(
                "dynamodb region {:?} is not a region name (e.g. us-east-1: lowercase letters, digits and `-`; dynamodb://REGION/TABLE)",
                self.region
            )
        })?;
        validate_table(&self.table)?;
        if let Some(endpoint) = &self.endpoint {
            // The endpoint is never quoted: it might carry credentials.
            let parsed = url::Url::parse(endpoint).map_err(|e| {
                Error::config(
                    BACKEND,
                    format!("dynamodb option `endpoint` is not an http:// or https:// URL ({e})"),
                )
            })?;
            let ok = matches!(parsed.scheme(), "http" | "https")
                && parsed.host_str().is_some()
                && parsed.username().is_empty()
                && parsed.password().is_none()
                && parsed.query().is_none();
            options::require(BACKEND, ok, || {
                "dynamodb option `endpoint` must be an http:// or https:// URL of a server, without credentials or a query".to_string()
            })?;
        }
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(_)) if !id.is_empty() => {}
            (None, None) => {}
            _ => {
                return Err(Error::config(
                    BACKEND,
                    "dynamodb credentials need both an access key id and a secret (dynamodb://KEY_ID:SECRET@REGION), or neither for the SDK's default chain",
                ))
            }
        }
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
        Ok(())
    }

    /// True when the URI carries an access key id and secret; otherwise the
    /// SDK's default credential chain is used.
    pub fn has_static_credentials(&self) -> bool {
        self.secret_access_key.is_some()
    }

    /// The endpoint URL, if the URI names one (otherwise AWS's for the
    /// region).
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// The access key id and the secret, for the SDK.
    pub(crate) fn static_credentials(&self) -> Option<(&str, &str)> {
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => Some((id, secret.expose())),
            _ => None,
        }
    }

    fn fmt_redacted(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dynamodb://")?;
        if let Some(id) = &self.access_key_id {
            write!(f, "{}:***@", bakery_core::uri::percent_encode(id))?;
        }
        write!(f, "{}/{}", self.region, self.table)?;
        let mut sep = '?';
        if let Some(endpoint) = &self.endpoint {
            write!(f, "{sep}endpoint={endpoint}")?;
            sep = '&';
        }
        write!(f, "{sep}timeout_ms={}", self.timeout.as_millis())?;
        let durability = UriOptions {
            accept_data_loss: self.accept_data_loss,
            recheck: self.durability_recheck,
        };
        write!(f, "{durability}")
    }
}

// `Display`: the URI form with the secret replaced by `***`; `Debug`: the
// same in `DynamoConfig(…)`.
bakery_core::redacted_fmt!(DynamoConfig);

/// DynamoDB's rule for table names.
fn validate_table(name: &str) -> Result<()> {
    let ok = (3..=255).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(options::invalid(
            BACKEND,
            "table",
            name,
            "a DynamoDB table name (3 to 255 of A-Z a-z 0-9 _ - .)",
        ))
    }
}

bakery_core::setters! { DynamoConfig {
    /// Keep the rows in `table` (default [`DEFAULT_TABLE`]); checked by
    /// [`DynamoConfig::validate`].
    with_table(table: impl Into<String>);
    /// Send requests to `endpoint` instead of AWS's endpoint for the region
    /// (a DynamoDB-compatible server, a VPC endpoint).
    with_endpoint(endpoint: impl Into<Option<String>>);
    /// Limit each call to `timeout` (default [`DEFAULT_TIMEOUT`]).
    with_timeout(timeout: Duration);
    /// Keep writing after the table was re-created under a live store
    /// ([`ACCEPT_DATA_LOSS`], default `false`).
    with_accept_data_loss(accept_data_loss: bool);
    /// Re-describe the table this often while the store is live (default
    /// [`DEFAULT_RECHECK`]).
    with_durability_recheck(durability_recheck: Duration);
}}

bakery_core::getters! { DynamoConfig {
    /// The AWS region (the URI's host part).
    region: &str;
    /// The table holding the rows.
    table: &str;
    /// The client-side limit on each call.
    timeout: Duration;
    /// Whether the store keeps writing after its table was re-created.
    accept_data_loss: bool;
    /// How often a live store re-describes its table.
    durability_recheck: Duration;
}}

#[cfg(doc)]
use bakery_core::durability::ACCEPT_DATA_LOSS;
