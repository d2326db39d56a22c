//! DynamoStore: opening (the SDK client, the table), the call wrapper
//! (timeout, unknown outcomes), and the three calls.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableDescription, TableStatus,
};
use aws_sdk_dynamodb::Client;
use bakery_core::durability::Recheck;
use bakery_core::{
    async_trait, Bytes, Capabilities, DeleteOutcome, Error, ErrorKind, Key, Operation, PutOutcome,
    Result, Row, Stored, Version, VersionedStore,
};

use crate::durability::{check_key_schema, table_hazards};
use crate::error::{self, map_err, Stage};
use crate::{DynamoConfig, BACKEND, KEY_ATTR, TABLE_WAIT, VALUE_ATTR, VERSION_ATTR};

/// The condition of an update or a delete at version `:n`: the item holds a
/// binary value at that version. `attribute_type` alone would do on
/// DynamoDB; dynalite evaluates it (and `size`) false for an empty binary
/// value, which the equality admits.
const VALUE_IS_BINARY_AT_N: &str = "#ver = :n AND (attribute_type(#v, :binary) OR #v = :empty)";

/// How many times one call re-runs when the fallback read after a refused
/// write saw a row that would have let the write apply (a concurrent
/// writer between the two); then it gives up with
/// [`ErrorKind::Unavailable`], nothing applied.
const MAX_ATTEMPTS: u32 = 8;

/// A [`VersionedStore`] on one DynamoDB table (or a DynamoDB-compatible
/// server's). Cheap to clone: clones share one SDK client (and its
/// connection pool).
///
/// Each item is `{k: S, ver: N, v: B}`; a tombstone is `{k, ver}`. Every
/// write is one conditional `PutItem` or `UpdateItem`; see the crate docs for the
/// expressions, the guarantees and what they rest on.
///
/// ```no_run
/// use bakery_dynamodb::DynamoStore;
/// use bakery_core::{Key, VersionedStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> bakery_core::Result<()> {
/// let store = DynamoStore::connect("dynamodb://us-east-1/bakery_rows").await?;
/// let key = Key::new("orders/next-id")?;
/// let row = store.put_if_version(&key, None, "1".into()).await?.applied();
/// assert_eq!(row.map(|r| r.version), Some(1));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DynamoStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: DynamoConfig,
    client: Client,
    /// The table's id when the store opened: another id later means the
    /// table was deleted and created again (its versions started over).
    table_id: Option<String>,
    recheck: Recheck,
}

/// One call in flight: which operation, and whether a write it sent may
/// have applied without the call knowing yet.
struct Call {
    op: Operation,
    doubt: AtomicBool,
}

impl Call {
    fn new(op: Operation) -> Call {
        Call {
            op,
            doubt: AtomicBool::new(false),
        }
    }

    fn sending(&self) {
        self.doubt.store(true, Ordering::Relaxed);
    }

    fn settled(&self) {
        self.doubt.store(false, Ordering::Relaxed);
    }

    fn in_doubt(&self) -> bool {
        self.doubt.load(Ordering::Relaxed)
    }
}

/// What a conditional write came to.
enum Written {
    /// It applied; for a create, the version it took.
    Applied(Option<Version>),
    /// The condition failed; the item as it was, if the server returned it
    /// (`ReturnValuesOnConditionCheckFailure=ALL_OLD`).
    Refused(Option<HashMap<String, AttributeValue>>),
}

impl DynamoStore {
    /// Parse `uri` (see [`DynamoConfig`]) and open the store.
    pub async fn connect(uri: &str) -> Result<Self> {
        Self::open(DynamoConfig::from_uri(uri)?).await
    }

    /// Open a store: build the SDK client (credentials from the URI, else
    /// the default chain; the SDK's retries off), describe the table,
    /// create it when it does not exist (on-demand capacity) and wait until
    /// it is `ACTIVE`, and check its key schema (`k`, a string, the only
    /// key). A server that cannot be reached is
    /// [`ErrorKind::Unavailable`]; missing credentials, a refused
    /// `CreateTable` (AccessDenied) and a table with another key schema are
    /// [`ErrorKind::Config`].
    pub async fn open(config: DynamoConfig) -> Result<Self> {
        Self::open_checked(config)
            .await
            .map_err(|e| e.during(Operation::Open))
    }

    async fn open_checked(config: DynamoConfig) -> Result<Self> {
        config.validate()?;
        let client = client(&config).await;
        let table = prepare_table(&client, &config).await?;
        let recheck = Recheck::new(
            BACKEND,
            config.durability_recheck(),
            config.accept_data_loss(),
        );
        tracing::debug!(
            table = config.table(),
            region = config.region(),
            "dynamodb: opened"
        );
        Ok(DynamoStore {
            inner: Arc::new(Inner {
                table_id: table.table_id().map(str::to_string),
                config,
                client,
                recheck,
            }),
        })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &DynamoConfig {
        &self.inner.config
    }

    /// The SDK client, for inspection and maintenance (and benchmarks).
    /// Writing to bakery's table behind its back can break every
    /// guarantee.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    fn table(&self) -> &str {
        self.inner.config.table()
    }

    /// Before a write: the durability re-check (crate docs). When due, the
    /// table is described again; a table whose id changed was deleted and
    /// created again under this store, and its versions started over.
    async fn rechecked(&self, op: Operation) -> Result<()> {
        let inner = &self.inner;
        let inspect = || async move {
            let table = describe(&inner.client, inner.config.table())
                .await
                .map_err(|e| map_err(e, op, Stage::Read))?
                .ok_or_else(|| {
                    Error::not_sent(
                        ErrorKind::Config,
                        BACKEND,
                        op,
                        format!(
                            "durability re-check: table {:?} no longer exists (deleted under the store); reopen the store to create it again",
                            inner.config.table()
                        ),
                    )
                })?;
            Ok(table_hazards(
                inner.config.table(),
                inner.table_id.as_deref(),
                &table,
            ))
        };
        inner.recheck.guard(op, inspect).await
    }

    /// Run one call within the timeout; every error names the call, and a
    /// failure while a write is in doubt becomes [`ErrorKind::Unknown`].
    async fn bounded<T>(&self, call: &Call, f: impl Future<Output = Result<T>>) -> Result<T> {
        let limit = self.inner.config.timeout();
        match tokio::time::timeout(limit, f).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if call.in_doubt() => Err(error::in_doubt(call.op, e)),
            Ok(Err(e)) => Err(e.during(call.op)),
            Err(_) => Err(error::timed_out(call.op, call.in_doubt(), limit)),
        }
    }

    /// The key's item (tombstone included), read strongly consistent.
    async fn read(&self, call: &Call, key: &Key) -> Result<Option<Stored>> {
        let out = self
            .inner
            .client
            .get_item()
            .table_name(self.table())
            .key(KEY_ATTR, AttributeValue::S(key.as_str().to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_err(e, call.op, Stage::Read))?;
        out.item()
            .map(|item| decode(self.table(), key, item))
            .transpose()
    }

    /// One conditional `UpdateItem` (a create).
    async fn write(
        &self,
        call: &Call,
        key: &Key,
        update: &str,
        condition: &str,
        values: HashMap<String, AttributeValue>,
        returns: ReturnValue,
    ) -> Result<Written> {
        call.sending();
        let sent = self
            .inner
            .client
            .update_item()
            .table_name(self.table())
            .key(KEY_ATTR, AttributeValue::S(key.as_str().to_string()))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names()))
            .set_expression_attribute_values(Some(values))
            .return_values(returns)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        call.settled();
        match sent {
            // Applied: a reply that does not say at which version is an
            // outcome the call cannot report, so not a plain Corrupt.
            Ok(out) => {
                let version = match out.attributes().and_then(|a| a.get(VERSION_ATTR)) {
                    Some(ver) => Some(
                        decode_version(self.table(), key, ver)
                            .map_err(|e| error::in_doubt(call.op, e))?,
                    ),
                    None => None,
                };
                Ok(Written::Applied(version))
            }
            Err(SdkError::ServiceError(service))
                if matches!(
                    service.err(),
                    UpdateItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                match service.into_err() {
                    UpdateItemError::ConditionalCheckFailedException(failed) => {
                        Ok(Written::Refused(failed.item))
                    }
                    // (not reached: matched above)
                    other => {
                        Err(Error::new(ErrorKind::Internal, BACKEND, other.to_string())
                            .during(call.op))
                    }
                }
            }
            Err(e) => Err(map_err(e, call.op, Stage::Write)),
        }
    }

    /// One conditional `PutItem` of the whole item `{k, ver: version, v:
    /// value}` (no `v`: a tombstone), if the item holds a value at
    /// `expected`.
    async fn replace(
        &self,
        call: &Call,
        key: &Key,
        value: Option<AttributeValue>,
        version: Version,
        expected: Version,
    ) -> Result<Written> {
        let mut item = HashMap::from([
            (
                KEY_ATTR.to_string(),
                AttributeValue::S(key.as_str().to_string()),
            ),
            (
                VERSION_ATTR.to_string(),
                AttributeValue::N(version.to_string()),
            ),
        ]);
        if let Some(value) = value {
            item.insert(VALUE_ATTR.to_string(), value);
        }
        let values = HashMap::from([
            (":n".to_string(), AttributeValue::N(expected.to_string())),
            (":binary".to_string(), AttributeValue::S("B".into())),
            (
                ":empty".to_string(),
                AttributeValue::B(Blob::new(Vec::new())),
            ),
        ]);
        call.sending();
        let sent = self
            .inner
            .client
            .put_item()
            .table_name(self.table())
            .set_item(Some(item))
            .condition_expression(VALUE_IS_BINARY_AT_N)
            .set_expression_attribute_names(Some(names()))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        call.settled();
        match sent {
            Ok(_) => Ok(Written::Applied(Some(version))),
            Err(SdkError::ServiceError(service))
                if matches!(
                    service.err(),
                    PutItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                match service.into_err() {
                    PutItemError::ConditionalCheckFailedException(failed) => {
                        Ok(Written::Refused(failed.item))
                    }
                    // (not reached: matched above)
                    other => {
                        Err(Error::new(ErrorKind::Internal, BACKEND, other.to_string())
                            .during(call.op))
                    }
                }
            }
            Err(e) => Err(map_err(e, call.op, Stage::Write)),
        }
    }

    /// A write the server refused as invalid (`ValidationException`): an
    /// item whose `ver` is not a number makes `if_not_exists(ver) + 1`
    /// invalid; say so as [`ErrorKind::Corrupt`] rather than blame the
    /// input.
    async fn damaged(&self, call: &Call, key: &Key, written: Result<Written>) -> Result<Written> {
        match written {
            Err(e) if e.kind() == ErrorKind::InvalidInput => match self.read(call, key).await {
                Err(corrupt) if corrupt.kind() == ErrorKind::Corrupt => {
                    Err(corrupt.during(call.op))
                }
                _ => Err(e),
            },
            other => other,
        }
    }

    /// The current row after a refused write: the item the server returned
    /// with the refusal, else (a server that ignores
    /// `ReturnValuesOnConditionCheckFailure`, or a key with no item at all)
    /// a strongly consistent read. `None` when that read saw a row under
    /// which the write would have applied: the caller tries again.
    async fn refused_row(
        &self,
        call: &Call,
        key: &Key,
        item: Option<HashMap<String, AttributeValue>>,
        would_apply: impl Fn(Option<&Row>) -> bool,
    ) -> Result<Option<Option<Row>>> {
        let stored = match item {
            Some(item) => Some(decode(self.table(), key, &item)?),
            None => self.read(call, key).await?,
        };
        let current = stored.as_ref().and_then(|stored| stored.live(key));
        if let (true, Some(stored)) = (current.is_none(), &stored) {
            exhausted(self.table(), key, stored)?;
        }
        if would_apply(current.as_ref()) {
            Ok(None)
        } else {
            Ok(Some(current))
        }
    }

    async fn put_inner(
        &self,
        call: &Call,
        key: &Key,
        expected: Option<Version>,
        value: &Bytes,
    ) -> Result<PutOutcome> {
        for _ in 0..MAX_ATTEMPTS {
            let blob = AttributeValue::B(Blob::new(value.to_vec()));
            let (written, next) = match expected {
                // A create: over nothing, or over a tombstone, whose version
                // the new row continues above.
                None => {
                    let values = HashMap::from([
                        (":v".to_string(), blob),
                        (":zero".to_string(), AttributeValue::N("0".into())),
                        (":one".to_string(), AttributeValue::N("1".into())),
                        (
                            ":max".to_string(),
                            AttributeValue::N(Version::MAX.to_string()),
                        ),
                    ]);
                    let written = self
                        .write(
                            call,
                            key,
                            "SET #v = :v, #ver = if_not_exists(#ver, :zero) + :one",
                            // A tombstone at the largest version cannot be
                            // continued above; one at a version no write
                            // gives (a damaged item) is left alone.
                            "attribute_not_exists(#v) AND (attribute_not_exists(#ver) OR (#ver >= :one AND #ver < :max))",
                            values,
                            ReturnValue::UpdatedNew,
                        )
                        .await;
                    (self.damaged(call, key, written).await?, None)
                }
                Some(n) => {
                    let Some(next) = n.checked_add(1).filter(|_| n > 0) else {
                        // No row can be at 0 or u64::MAX: a conflict.
                        let current = self.read(call, key).await?.and_then(|s| s.live(key));
                        return Ok(PutOutcome::Conflict(current));
                    };
                    // The whole item, replaced: one PutItem (cheaper to
                    // evaluate than an update expression).
                    let written = self.replace(call, key, Some(blob), next, n).await?;
                    (written, Some(next))
                }
            };
            match written {
                Written::Applied(version) => {
                    let version = next.or(version).ok_or_else(|| {
                        error::in_doubt(
                            call.op,
                            Error::corrupt(
                                BACKEND,
                                format!("table {:?}: a create of {key} applied but the reply carried no `{VERSION_ATTR}`", self.table()),
                            ),
                        )
                    })?;
                    return Ok(PutOutcome::Applied(Row::new(key, value.clone(), version)));
                }
                Written::Refused(item) => {
                    if expected.is_none() {
                        if let Some(item) = &item {
                            exhausted(self.table(), key, &decode(self.table(), key, item)?)?;
                        }
                    }
                    let would_apply = |row: Option<&Row>| match expected {
                        None => row.is_none(),
                        Some(n) => row.is_some_and(|row| row.version == n),
                    };
                    if let Some(current) = self.refused_row(call, key, item, would_apply).await? {
                        return Ok(PutOutcome::Conflict(current));
                    }
                }
            }
        }
        Err(contended(call.op, key))
    }

    async fn delete_inner(
        &self,
        call: &Call,
        key: &Key,
        expected: Version,
    ) -> Result<DeleteOutcome> {
        if expected == 0 {
            // No row is at version 0 (a damaged item may be: left alone).
            let current = self.read(call, key).await?.and_then(|s| s.live(key));
            return Ok(DeleteOutcome::Conflict(current));
        }
        for _ in 0..MAX_ATTEMPTS {
            // The tombstone keeps `ver`, so a re-create continues above it.
            let written = self.replace(call, key, None, expected, expected).await?;
            match written {
                Written::Applied(_) => return Ok(DeleteOutcome::Deleted),
                Written::Refused(item) => {
                    let would_apply =
                        |row: Option<&Row>| row.is_some_and(|row| row.version == expected);
                    if let Some(current) = self.refused_row(call, key, item, would_apply).await? {
                        return Ok(DeleteOutcome::Conflict(current));
                    }
                }
            }
        }
        Err(contended(call.op, key))
    }
}

/// The expressions' attribute names: names, not the attributes themselves,
/// because DynamoDB has hundreds of reserved words. Each must be used
/// (DynamoDB refuses unused ones).
fn names() -> HashMap<String, String> {
    HashMap::from([
        ("#ver".to_string(), VERSION_ATTR.to_string()),
        ("#v".to_string(), VALUE_ATTR.to_string()),
    ])
}

/// A tombstone at the largest version: the key cannot be created again.
fn exhausted(table: &str, key: &Key, stored: &Stored) -> Result<()> {
    if stored.value.is_none() && stored.version == Version::MAX {
        return Err(Error::new(
            ErrorKind::Exhausted,
            BACKEND,
            format!("table {table:?}, item `{key}`: deleted at the largest version, {}; it cannot be created again", Version::MAX),
        ));
    }
    Ok(())
}

/// The refusal and the fallback read disagreed [`MAX_ATTEMPTS`] times.
fn contended(op: Operation, key: &Key) -> Error {
    Error::not_sent(
        ErrorKind::Unavailable,
        BACKEND,
        op,
        format!("{key}: the row changed between each refused write and the read after it, {MAX_ATTEMPTS} times"),
    )
}

/// The SDK client: the URI's credentials or the default chain, rustls
/// with `ring`, no SDK retries (bakery's RetryStore decides; crate docs),
/// the connect timeout half the call timeout (at most 10 s).
async fn client(config: &DynamoConfig) -> Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(config.region().to_string()))
        .http_client(http)
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout((config.timeout() / 2).min(Duration::from_secs(10)))
                .build(),
        );
    if let Some(endpoint) = config.endpoint() {
        loader = loader.endpoint_url(endpoint);
    }
    if let Some((id, secret)) = config.static_credentials() {
        loader =
            loader.credentials_provider(Credentials::new(id, secret, None, None, "bakery-uri"));
    }
    Client::new(&loader.load().await)
}

/// `DescribeTable`; `None` when the table does not exist.
async fn describe(
    client: &Client,
    table: &str,
) -> std::result::Result<
    Option<TableDescription>,
    SdkError<
        aws_sdk_dynamodb::operation::describe_table::DescribeTableError,
        aws_sdk_dynamodb::config::http::HttpResponse,
    >,
> {
    match client.describe_table().table_name(table).send().await {
        Ok(out) => Ok(out.table),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Describe the table, create it when missing, wait until it is `ACTIVE`,
/// check its key schema.
async fn prepare_table(client: &Client, config: &DynamoConfig) -> Result<TableDescription> {
    const OP: Operation = Operation::Open;
    let table = config.table();
    let limit = config.timeout();
    let start = Instant::now();
    let described = within(limit, describe(client, table))
        .await?
        .map_err(|e| map_err(e, OP, Stage::Connect))?;
    if described.is_none() {
        create_table(client, config).await?;
    }
    let mut pause = Duration::from_millis(50);
    loop {
        let described = within(limit, describe(client, table))
            .await?
            .map_err(|e| map_err(e, OP, Stage::Connect))?;
        if let Some(described) = described {
            check_key_schema(table, &described)?;
            bakery_core::durability::check(
                BACKEND,
                &table_hazards(table, None, &described),
                config.accept_data_loss(),
            )?;
            match described.table_status() {
                Some(TableStatus::Active) | Some(TableStatus::Updating) | None => {
                    return Ok(described)
                }
                Some(TableStatus::Creating) => {}
                Some(other) => {
                    return Err(Error::config(
                        BACKEND,
                        format!(
                            "table {table:?} is {} and cannot take writes",
                            other.as_str()
                        ),
                    ))
                }
            }
        } else if start.elapsed() > limit {
            // Created a moment ago, and still not described: someone
            // deleted it again, or the server lost it.
            return Err(Error::not_sent(
                ErrorKind::Unavailable,
                BACKEND,
                OP,
                format!("table {table:?} was created but is not there"),
            ));
        }
        if start.elapsed() > TABLE_WAIT {
            return Err(Error::not_sent(
                ErrorKind::Unavailable,
                BACKEND,
                OP,
                format!(
                    "table {table:?} did not become ACTIVE within {} s",
                    TABLE_WAIT.as_secs()
                ),
            ));
        }
        // Table creation is asynchronous in DynamoDB: poll, as the SDK's
        // own waiter does (whose 20 s first pause is too long here).
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// `CreateTable` with on-demand capacity; another opener creating it at
/// the same time is fine.
async fn create_table(client: &Client, config: &DynamoConfig) -> Result<()> {
    let table = config.table();
    let request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(KEY_ATTR)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| Error::new(ErrorKind::Internal, BACKEND, e.to_string()))?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(KEY_ATTR)
                .key_type(KeyType::Hash)
                .build()
                .map_err(|e| Error::new(ErrorKind::Internal, BACKEND, e.to_string()))?,
        )
        .send();
    match within(config.timeout(), request).await? {
        Ok(_) => {
            tracing::info!(table, "dynamodb: created table (on-demand capacity)");
            Ok(())
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) =>
        {
            Ok(())
        }
        Err(e) => {
            let err = map_err(e, Operation::Open, Stage::Connect);
            if err.kind() == ErrorKind::Config {
                Err(Error::config(
                    BACKEND,
                    format!(
                        "table {table:?} does not exist and these credentials may not create it ({}); \
                         create it (partition key `{KEY_ATTR}`, type S, no sort key) or grant dynamodb:CreateTable",
                        err.message()
                    ),
                ))
            } else {
                Err(err)
            }
        }
    }
}

/// `f` within `limit`; running out is [`ErrorKind::Unavailable`] (opening
/// writes nothing bakery's rows depend on).
async fn within<T>(limit: Duration, f: impl Future<Output = T>) -> Result<T> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| error::timed_out(Operation::Open, false, limit))
}

/// Decode `{k: S, ver: N, v: B?}`; anything else is
/// [`ErrorKind::Corrupt`].
fn decode(table: &str, key: &Key, item: &HashMap<String, AttributeValue>) -> Result<Stored> {
    let corrupt =
        |what: String| Error::corrupt(BACKEND, format!("table {table:?}, item `{key}`: {what}"));
    match item.get(KEY_ATTR) {
        Some(AttributeValue::S(k)) if k == key.as_str() => {}
        Some(other) => return Err(corrupt(format!("`{KEY_ATTR}` is {other:?}, not the key"))),
        None => return Err(corrupt(format!("no `{KEY_ATTR}`"))),
    }
    let version = match item.get(VERSION_ATTR) {
        Some(ver) => decode_version(table, key, ver)?,
        None => return Err(corrupt(format!("no `{VERSION_ATTR}`"))),
    };
    let value = match item.get(VALUE_ATTR) {
        None => None,
        Some(AttributeValue::B(blob)) => Some(Bytes::from(blob.clone().into_inner())),
        Some(other) => {
            return Err(corrupt(format!(
                "`{VALUE_ATTR}` is {}, not binary",
                kind_of(other)
            )))
        }
    };
    Ok(Stored { value, version })
}

fn decode_version(table: &str, key: &Key, ver: &AttributeValue) -> Result<Version> {
    match ver {
        AttributeValue::N(n) => match n.parse::<Version>() {
            Ok(version) if version > 0 => Ok(version),
            _ => Err(Error::corrupt(
                BACKEND,
                format!("table {table:?}, item `{key}`: `{VERSION_ATTR}` is {n:?}, not a version (1 to 2^64-1)"),
            )),
        },
        other => Err(Error::corrupt(
            BACKEND,
            format!("table {table:?}, item `{key}`: `{VERSION_ATTR}` is {}, not a number", kind_of(other)),
        )),
    }
}

/// An attribute value's type, for messages (never its content).
fn kind_of(value: &AttributeValue) -> &'static str {
    match value {
        AttributeValue::B(_) => "binary",
        AttributeValue::Bool(_) => "a boolean",
        AttributeValue::Bs(_) => "a binary set",
        AttributeValue::L(_) => "a list",
        AttributeValue::M(_) => "a map",
        AttributeValue::N(_) => "a number",
        AttributeValue::Ns(_) => "a number set",
        AttributeValue::Null(_) => "null",
        AttributeValue::S(_) => "a string",
        AttributeValue::Ss(_) => "a string set",
        _ => "an unknown type",
    }
}

#[async_trait]
impl VersionedStore for DynamoStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    /// Persistent and shared; reads are linearizable because every read is
    /// `ConsistentRead=true` (crate docs, "Consistency and durability").
    /// No `WATCH`: DynamoDB Streams are an asynchronous change log read by
    /// polling shards, not a notification.
    fn capabilities(&self) -> Capabilities {
        Capabilities::PERSISTENT | Capabilities::SHARED | Capabilities::LINEARIZABLE_READS
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let call = Call::new(Operation::Get);
        self.bounded(&call, async {
            Ok(self
                .read(&call, key)
                .await?
                .and_then(|stored| stored.live(key)))
        })
        .await
    }

    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let call = Call::new(Operation::Put);
        self.bounded(&call, async {
            self.rechecked(call.op).await?;
            self.put_inner(&call, key, expected, &value).await
        })
        .await
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let call = Call::new(Operation::Delete);
        self.bounded(&call, async {
            self.rechecked(call.op).await?;
            self.delete_inner(&call, key, expected).await
        })
        .await
    }
}

impl fmt::Debug for DynamoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}
