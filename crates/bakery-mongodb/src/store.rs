//! MongoStore: opening, the call wrapper (timeout, unknown outcomes,
//! tracing), and the `update` strategy. The `insert` strategy is in
//! `store/versions.rs`, the server's identification in `store/server.rs`.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bakery_core::durability::Recheck;
use bakery_core::{
    async_trait, signed_version, Bytes, Capabilities, DeleteOutcome, Error, ErrorKind, Key,
    Operation, PutOutcome, Result, Row, Version, VersionedStore,
};
use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{doc, Binary, Bson, Document};
use mongodb::event::cmap::CmapEvent;
use mongodb::event::EventHandler;
use mongodb::options::{CollectionOptions, ReadPreference, ReturnDocument};
use mongodb::{Client, Collection, IndexModel};

use crate::error::{self, is_duplicate_key, map_err, Stage};
use crate::{CasStrategy, MongoConfig, BACKEND};

mod layout;
mod server;
mod versions;

pub use layout::LAYOUT_ID;
pub use server::{ServerInfo, ServerKind};

/// How many times one call re-runs when what it read disagrees with what
/// its write saw (a concurrent writer between the two); then it gives up
/// with [`ErrorKind::Unavailable`], nothing applied.
pub(crate) const MAX_ATTEMPTS: u32 = 8;

/// The index the `insert` strategy reads the newest version by.
pub(crate) const VERSIONS_INDEX: &str = "bakery_k_ver";

/// A [`VersionedStore`] on MongoDB, or on any server speaking its wire
/// protocol (FerretDB with [`CasStrategy::Insert`]). Cheap to clone: clones
/// share one driver client (and its connection pool).
///
/// See the crate docs for the two strategies, the settings the guarantees
/// rest on, and the caveats.
#[derive(Clone)]
pub struct MongoStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: MongoConfig,
    /// The strategy in use: the URI's, or the server's default.
    strategy: CasStrategy,
    server: ServerInfo,
    pub(crate) coll: Collection<Document>,
    client: Client,
    /// The seed list, as `identify` takes it.
    hosts: Vec<String>,
    recheck: Arc<Recheck>,
    /// Background prunes under way (`insert` strategy).
    pub(crate) pruning: AtomicUsize,
}

/// One call in flight: which operation, and whether a write it sent may
/// have applied without the call knowing yet.
pub(crate) struct Call {
    pub(crate) op: Operation,
    doubt: AtomicBool,
}

impl Call {
    fn new(op: Operation) -> Call {
        Call {
            op,
            doubt: AtomicBool::new(false),
        }
    }

    /// A write is about to be sent: until [`Call::settled`], any failure
    /// (or the deadline) leaves the outcome unknown.
    pub(crate) fn sending(&self) {
        self.doubt.store(true, Ordering::Relaxed);
    }

    /// The write's outcome is known (applied or not).
    pub(crate) fn settled(&self) {
        self.doubt.store(false, Ordering::Relaxed);
    }

    fn in_doubt(&self) -> bool {
        self.doubt.load(Ordering::Relaxed)
    }

    /// Map a failed read (a write of this call may be in doubt).
    pub(crate) fn read_err(&self, e: mongodb::error::Error) -> Error {
        let stage = if self.in_doubt() {
            Stage::Confirm
        } else {
            Stage::Read
        };
        map_err(e, self.op, stage)
    }

    /// Map a failed write command; its outcome is then decided by the
    /// mapper (`Unknown` when the reply was lost after sending).
    pub(crate) fn write_err(&self, e: mongodb::error::Error) -> Error {
        self.settled();
        map_err(e, self.op, Stage::Write)
    }
}

impl MongoStore {
    /// Parse `uri` (see [`MongoConfig`]) and open the store.
    pub async fn connect(uri: &str) -> Result<Self> {
        Self::open(MongoConfig::from_uri(uri)?).await
    }

    /// Open a store: build the driver client, then, within the call
    /// timeout, identify the server (`buildInfo`, `hello`; see
    /// [`ServerInfo`]), choose the strategy (the URI's, or the server's
    /// default: `update` on MongoDB, `insert` elsewhere), check the write
    /// concern's durability, check or claim the collection's layout marker
    /// (one document, `_id: "#bakery-layout"`, naming the strategy), and for
    /// `insert` create the `{k: 1, ver: -1}` index. A server that cannot be reached is
    /// [`ErrorKind::Unavailable`]; bad credentials or options, an explicit
    /// `cas=update` on a server other than MongoDB (without
    /// `allow_unproven_update=true`), a write concern that can lose
    /// acknowledged writes (without `accept_data_loss=true`), a
    /// collection marked or written with the other strategy, and an index
    /// that clashes with bakery's (the same keys under another name) are
    /// [`ErrorKind::Config`].
    pub async fn open(config: MongoConfig) -> Result<Self> {
        Self::open_checked(config)
            .await
            .map_err(|e| e.during(Operation::Open))
    }

    async fn open_checked(config: MongoConfig) -> Result<Self> {
        const OP: Operation = Operation::Open;
        config.validate()?;
        let timeout = config.timeout();
        let mut options = match tokio::time::timeout(timeout, config.client_options()).await {
            Ok(options) => options?,
            Err(_) => return Err(error::timed_out(OP, false, timeout)),
        };
        let recheck = Arc::new(Recheck::new(
            BACKEND,
            config.durability_recheck(),
            config.accept_data_loss(),
        ));
        // A new connection may reach another server (a failover, a DNS
        // change): the next write re-reads the topology first.
        let invalidated = recheck.clone();
        options.cmap_event_handler = Some(EventHandler::callback(move |event| {
            if matches!(event, CmapEvent::ConnectionReady(_)) {
                invalidated.invalidate();
            }
        }));
        let hosts: Vec<String> = options.hosts.iter().map(|host| host.to_string()).collect();
        let client = Client::with_options(options).map_err(|e| map_err(e, OP, Stage::Connect))?;
        let server = match tokio::time::timeout(timeout, identify(&client, &config, &hosts)).await {
            Ok(server) => server?,
            Err(_) => return Err(error::timed_out(OP, false, timeout)),
        };
        let strategy = server.strategy(config.cas(), config.allow_unproven_update())?;
        bakery_core::durability::check(
            BACKEND,
            &config.durability_hazards(&server),
            config.accept_data_loss(),
        )?;
        if strategy == CasStrategy::Update && !server.update_is_proven() {
            tracing::warn!(
                %server,
                "mongodb: cas=update with allow_unproven_update=true: concurrent writers may both succeed unless this server applies a filtered findOneAndUpdate atomically"
            );
        }
        tracing::debug!(%server, cas = %strategy, "mongodb: opened");
        let coll = client
            .database(config.database())
            .collection_with_options::<Document>(
                config.collection(),
                CollectionOptions::builder()
                    .selection_criteria(Some(ReadPreference::Primary.into()))
                    .read_concern(Some(config.read_concern()))
                    .write_concern(Some(config.write_concern()))
                    .build(),
            );
        let store = MongoStore {
            inner: Arc::new(Inner {
                config,
                strategy,
                server,
                coll,
                client,
                hosts,
                recheck,
                pruning: AtomicUsize::new(0),
            }),
        };
        let prepare = async {
            store.claim_layout().await?;
            if strategy == CasStrategy::Insert {
                store.create_versions_index().await?;
            }
            Ok::<(), Error>(())
        };
        match tokio::time::timeout(timeout, prepare).await {
            Ok(result) => result?,
            Err(_) => return Err(error::timed_out(OP, false, timeout)),
        }
        Ok(store)
    }

    /// Before a write: the durability re-check (crate docs, "Consistency
    /// and durability"). When it is due, or after a new connection, the
    /// server is identified again: a replica set that grew past what a
    /// numeric `w` covers, or a reconnect that reached a replica set where
    /// there was a standalone server, stops the store's writes.
    async fn rechecked(&self, op: Operation) -> Result<()> {
        let inner = &self.inner;
        let inspect = || async move {
            let server = identify(&inner.client, &inner.config, &inner.hosts)
                .await
                .map_err(|e| {
                    Error::not_sent(
                        ErrorKind::Unavailable,
                        BACKEND,
                        op,
                        format!("durability re-check: {}", e.message()),
                    )
                })?;
            Ok(inner.config.durability_hazards(&server))
        };
        inner.recheck.guard(op, inspect).await
    }

    async fn create_versions_index(&self) -> Result<()> {
        let index = IndexModel::builder()
            .keys(doc! {"k": 1, "ver": -1})
            .options(
                mongodb::options::IndexOptions::builder()
                    .name(VERSIONS_INDEX.to_string())
                    .build(),
            )
            .build();
        match self.inner.coll.create_index(index).await {
            Ok(_) => Ok(()),
            // IndexOptionsConflict, IndexKeySpecsConflict: someone made an
            // index bakery's clashes with; only its owner may drop it.
            Err(e) if error::command_code(&e).is_some_and(|code| matches!(code, 85 | 86)) => {
                let detail = error::driver_message(&e);
                Err(Error::config(
                    BACKEND,
                    format!(
                        "collection {:?} has an index that clashes with bakery's {VERSIONS_INDEX:?} on {{k: 1, ver: -1}} ({detail}): \
                         drop that index, or use another collection (`collection=`)",
                        self.collection_name()
                    ),
                )
                .with_source(e))
            }
            Err(e) => Err(map_err(e, Operation::Open, Stage::Connect)),
        }
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &MongoConfig {
        &self.inner.config
    }

    /// The compare-and-set strategy in use: the URI's, or the one chosen at
    /// open for this server.
    pub fn strategy(&self) -> CasStrategy {
        self.inner.strategy
    }

    /// The server this store opened on, as identified at open.
    pub fn server(&self) -> &ServerInfo {
        &self.inner.server
    }

    /// The driver's handle on the collection, for inspection and
    /// maintenance. Writing to it behind bakery's back can break every
    /// guarantee.
    pub fn collection(&self) -> &Collection<Document> {
        &self.inner.coll
    }

    pub(crate) fn coll(&self) -> &Collection<Document> {
        &self.inner.coll
    }

    pub(crate) fn collection_name(&self) -> &str {
        self.inner.config.collection()
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

    // ----- the `update` strategy: one document per key -----

    /// Read the key's document (tombstone included).
    async fn u_read(&self, call: &Call, key: &Key) -> Result<Option<Stored>> {
        let doc = self
            .coll()
            .find_one(doc! {"_id": key.as_str()})
            .await
            .map_err(|e| call.read_err(e))?;
        doc.map(|doc| decode_row(self.collection_name(), key, &doc))
            .transpose()
    }

    /// Apply `update` to the document `filter` matches (a conditional
    /// write): the version it now holds, or `None` if nothing matched.
    async fn u_update(
        &self,
        call: &Call,
        key: &Key,
        filter: Document,
        update: Document,
    ) -> Result<Option<Version>> {
        call.sending();
        let updated = self
            .coll()
            .find_one_and_update(filter, update)
            .return_document(ReturnDocument::After)
            .await
            .map_err(|e| call.write_err(e))?;
        // Settled only once decoded: a corrupt reply leaves the write in doubt.
        let version = match updated {
            Some(doc) => Some(decode_row(self.collection_name(), key, &doc)?.version),
            None => None,
        };
        call.settled();
        Ok(version)
    }

    async fn u_put(
        &self,
        call: &Call,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        for attempt in 1..=MAX_ATTEMPTS {
            let current = match expected {
                Some(expected) => {
                    let Some(raw) = signed_version(expected) else {
                        // No document can hold this version.
                        let current = self.u_read(call, key).await?;
                        return Ok(PutOutcome::Conflict(current.and_then(|s| s.live(key))));
                    };
                    if raw == i64::MAX {
                        return self.exhausted_or_conflict(call, key, expected).await;
                    }
                    let updated = self
                        .u_update(
                            call,
                            key,
                            doc! {"_id": key.as_str(), "ver": raw, "dead": {"$ne": true}},
                            doc! {"$set": {"v": binary(&value)}, "$inc": {"ver": 1_i64}},
                        )
                        .await?;
                    if let Some(version) = updated {
                        tracing::debug!(version, attempt, "applied");
                        return Ok(PutOutcome::Applied(Row::new(key, value, version)));
                    }
                    self.u_read(call, key).await?
                }
                None => {
                    call.sending();
                    let inserted = self
                        .coll()
                        .insert_one(doc! {"_id": key.as_str(), "v": binary(&value), "ver": 1_i64})
                        .await;
                    match inserted {
                        Ok(_) => {
                            call.settled();
                            tracing::debug!(version = 1, attempt, "created");
                            return Ok(PutOutcome::Applied(Row::new(key, value, 1)));
                        }
                        Err(e) if is_duplicate_key(&e) => call.settled(),
                        Err(e) => return Err(call.write_err(e)),
                    }
                    match self.u_read(call, key).await? {
                        // A tombstone: re-create above its version.
                        Some(tomb) if tomb.value.is_none() => {
                            let raw = signed_version(tomb.version).unwrap_or(i64::MAX);
                            if raw == i64::MAX {
                                return Err(exhausted(key));
                            }
                            let updated = self
                                .u_update(
                                    call,
                                    key,
                                    doc! {"_id": key.as_str(), "ver": raw, "dead": true},
                                    doc! {
                                        "$set": {"v": binary(&value), "dead": false},
                                        "$inc": {"ver": 1_i64},
                                    },
                                )
                                .await?;
                            if let Some(version) = updated {
                                tracing::debug!(version, attempt, "re-created");
                                return Ok(PutOutcome::Applied(Row::new(key, value, version)));
                            }
                            // Someone else re-created it first: read again.
                            self.u_read(call, key).await?
                        }
                        other => other,
                    }
                }
            };
            let current = current.and_then(|s| s.live(key));
            if read_lags(&current, expected, attempt).await {
                continue;
            }
            return Ok(PutOutcome::Conflict(current));
        }
        Err(lost_races(call.op, key))
    }

    async fn u_delete(&self, call: &Call, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let Some(raw) = signed_version(expected) else {
            let current = self.u_read(call, key).await?;
            return Ok(DeleteOutcome::Conflict(current.and_then(|s| s.live(key))));
        };
        for attempt in 1..=MAX_ATTEMPTS {
            call.sending();
            let result = self
                .coll()
                .update_one(
                    doc! {"_id": key.as_str(), "ver": raw, "dead": {"$ne": true}},
                    doc! {"$set": {"dead": true}, "$unset": {"v": ""}},
                )
                .await
                .map_err(|e| call.write_err(e))?;
            call.settled();
            if result.matched_count > 0 {
                tracing::debug!(attempt, "deleted");
                return Ok(DeleteOutcome::Deleted);
            }
            let current = self.u_read(call, key).await?.and_then(|s| s.live(key));
            if read_lags(&current, Some(expected), attempt).await {
                continue;
            }
            return Ok(DeleteOutcome::Conflict(current));
        }
        Err(lost_races(call.op, key))
    }

    /// `expected` is the largest version a document can hold: if the row is
    /// there, it cannot be written again.
    async fn exhausted_or_conflict(
        &self,
        call: &Call,
        key: &Key,
        expected: Version,
    ) -> Result<PutOutcome> {
        let current = self.u_read(call, key).await?.and_then(|s| s.live(key));
        if current.as_ref().map(|row| row.version) == Some(expected) {
            return Err(exhausted(key));
        }
        Ok(PutOutcome::Conflict(current))
    }
}

#[async_trait]
impl VersionedStore for MongoStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::PERSISTENT | Capabilities::SHARED | Capabilities::LINEARIZABLE_READS
    }

    async fn get(&self, key: &Key) -> Result<Option<Row>> {
        let call = Call::new(Operation::Get);
        let read = async {
            match self.strategy() {
                CasStrategy::Update => Ok(self.u_read(&call, key).await?.and_then(|s| s.live(key))),
                CasStrategy::Insert => self.v_get(&call, key).await,
            }
        };
        self.bounded(&call, read).await
    }

    /// `cas=update`: a conditional update of the key's one document;
    /// `cas=insert`: a new document per version, under a unique index.
    async fn put_if_version(
        &self,
        key: &Key,
        expected: Option<Version>,
        value: Bytes,
    ) -> Result<PutOutcome> {
        let call = Call::new(Operation::Put);
        self.bounded(&call, async {
            self.rechecked(call.op).await?;
            match self.strategy() {
                CasStrategy::Update => self.u_put(&call, key, expected, value).await,
                CasStrategy::Insert => self.v_put(&call, key, expected, value).await,
            }
        })
        .await
    }

    async fn delete_if_version(&self, key: &Key, expected: Version) -> Result<DeleteOutcome> {
        let call = Call::new(Operation::Delete);
        self.bounded(&call, async {
            self.rechecked(call.op).await?;
            match self.strategy() {
                CasStrategy::Update => self.u_delete(&call, key, expected).await,
                CasStrategy::Insert => self.v_delete(&call, key, expected).await,
            }
        })
        .await
    }
}

/// A row document of the `update` strategy, decoded and checked. `value:
/// None` is a tombstone.
pub(crate) use bakery_core::Stored;

/// Decode `{_id: key, v: BinData, ver: Int64, dead: bool?}`; anything else
/// is [`ErrorKind::Corrupt`] naming the key, never a panic.
fn decode_row(collection: &str, key: &Key, doc: &Document) -> Result<Stored> {
    let id = key.as_str();
    let version = field_version(collection, key, id, doc)?;
    let (value, _) = field_value(collection, key, id, doc)?;
    Ok(Stored { value, version })
}

/// The `ver` field: a positive Int64 (an Int32 is accepted).
pub(crate) fn field_version(collection: &str, key: &Key, id: &str, doc: &Document) -> Result<u64> {
    match doc.get("ver") {
        Some(Bson::Int64(v)) if *v > 0 => Ok(v.unsigned_abs()),
        Some(Bson::Int32(v)) if *v > 0 => Ok(u64::from(v.unsigned_abs())),
        Some(Bson::Int64(v)) => Err(error::corrupt(
            collection,
            key,
            id,
            format!("field `ver` is {v}; expected a positive Int64"),
        )),
        Some(Bson::Int32(v)) => Err(error::corrupt(
            collection,
            key,
            id,
            format!("field `ver` is {v}; expected a positive Int64"),
        )),
        Some(other) => Err(error::corrupt(
            collection,
            key,
            id,
            format!(
                "field `ver` is a BSON {:?}; expected a positive Int64",
                other.element_type()
            ),
        )),
        None => Err(error::corrupt(
            collection,
            key,
            id,
            "field `ver` is missing; expected a positive Int64",
        )),
    }
}

/// The `dead` and `v` fields: `(None, true)` for a tombstone, `(Some(bytes),
/// false)` for a live row.
pub(crate) fn field_value(
    collection: &str,
    key: &Key,
    id: &str,
    doc: &Document,
) -> Result<(Option<Bytes>, bool)> {
    let dead = match doc.get("dead") {
        None | Some(Bson::Null) | Some(Bson::Boolean(false)) => false,
        Some(Bson::Boolean(true)) => true,
        Some(other) => {
            return Err(error::corrupt(
                collection,
                key,
                id,
                format!(
                    "field `dead` is a BSON {:?}; expected a boolean",
                    other.element_type()
                ),
            ))
        }
    };
    match (doc.get("v"), dead) {
        (Some(Bson::Binary(bin)), false) => Ok((Some(Bytes::from(bin.bytes.clone())), false)),
        (None | Some(Bson::Null), true) => Ok((None, true)),
        // A tombstone keeps no value; tolerate one left behind.
        (Some(Bson::Binary(_)), true) => Ok((None, true)),
        (None, false) => Err(error::corrupt(
            collection,
            key,
            id,
            "field `v` is missing on a live row; expected binary data",
        )),
        (Some(other), _) => Err(error::corrupt(
            collection,
            key,
            id,
            format!(
                "field `v` is a BSON {:?}; expected binary data",
                other.element_type()
            ),
        )),
    }
}

/// The value as BSON binary data (subtype generic).
pub(crate) fn binary(value: &Bytes) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes: value.to_vec(),
    })
}

pub(crate) fn exhausted(key: &Key) -> Error {
    Error::new(
        ErrorKind::Exhausted,
        BACKEND,
        format!(
            "row `{key}` is at version {}, the largest a document can hold",
            i64::MAX
        ),
    )
}

pub(crate) fn lost_races(op: Operation, key: &Key) -> Error {
    Error::not_sent(
        ErrorKind::Unavailable,
        BACKEND,
        op,
        format!("row `{key}` met a concurrent writer {MAX_ATTEMPTS} times in a row; retry"),
    )
}

/// Whether `current`, read after a write that did not apply, would have let
/// it apply: the read is older than what the write met (a concurrent
/// writer, or a majority snapshot behind the primary), so the caller re-runs
/// the call, after a short pause. Otherwise `current` is the conflict.
pub(crate) async fn read_lags(
    current: &Option<Row>,
    expected: Option<Version>,
    attempt: u32,
) -> bool {
    if current.as_ref().map(|row| row.version) == expected {
        tracing::debug!(attempt, "read and write disagree; re-running");
        tokio::time::sleep(Duration::from_millis(u64::from(attempt))).await;
        return true;
    }
    tracing::debug!(current = ?current.as_ref().map(|r| r.version), "conflict");
    false
}

/// Ask the server what it is. `buildInfo` and `hello` are open to every
/// client; a server that refuses one (a reply that is an error, not a lost
/// connection) is identified from what it did answer.
async fn identify(client: &Client, config: &MongoConfig, hosts: &[String]) -> Result<ServerInfo> {
    let db = client.database(config.database());
    let build_info = answer(db.run_command(doc! {"buildInfo": 1}).await)?;
    let hello = match answer(db.run_command(doc! {"hello": 1}).await)? {
        // Servers before MongoDB 4.4.2 know only the legacy name.
        reply if reply.is_empty() => answer(db.run_command(doc! {"isMaster": 1}).await)?,
        reply => reply,
    };
    let hosts: Vec<&str> = hosts
        .iter()
        .map(|host| {
            host.rsplit_once(':')
                .map_or(host.as_str(), |(name, _)| name)
        })
        .collect();
    Ok(ServerInfo::identify(&build_info, &hello, &hosts))
}

/// A command's reply, or an empty document when the server refused the
/// command (unknown command, not authorized): it spoke, it just would not
/// say. Anything else (unreachable, bad credentials, shutting down) is the
/// mapped error.
fn answer(reply: mongodb::error::Result<Document>) -> Result<Document> {
    match reply {
        Ok(reply) => Ok(reply),
        // CommandNotFound (59), Unauthorized (13): the server will not say.
        // Anything else (shutting down, interrupted) is a transient failure,
        // never a reason to identify the server differently.
        Err(e) if matches!(&*e.kind, mongodb::error::ErrorKind::Command(c) if matches!(c.code, 13 | 59)) => {
            Ok(Document::new())
        }
        Err(e) => Err(map_err(e, Operation::Open, Stage::Connect)),
    }
}

impl fmt::Debug for MongoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoStore")
            .field("config", &format_args!("{}", self.inner.config))
            .finish()
    }
}
