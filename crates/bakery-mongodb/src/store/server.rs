//! Who is on the other end of a `mongodb://` URI, and which compare-and-set
//! strategy that server may be given.
//!
//! Many servers speak MongoDB's wire protocol; not all of them apply a
//! filtered `findOneAndUpdate` atomically (FerretDB v1 reads, then writes
//! without re-checking the filter). The `update` strategy is only as safe as
//! that atomicity, so it goes by default only to a server that identifies
//! itself as MongoDB; everything else gets `insert`, which relies on nothing
//! but a unique `_id` index.

use std::fmt;

use bakery_core::{Error, Result};
use mongodb::bson::{Bson, Document};

use crate::{CasStrategy, ALLOW_UNPROVEN_UPDATE, BACKEND};

/// What a server says it is, read at open from `buildInfo`, `hello` and the
/// host names of the URI.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerKind {
    /// MongoDB itself (`mongod` or `mongos`, Percona Server for MongoDB
    /// included): `buildInfo` lists its storage engines, allocator and
    /// JavaScript engine, and names no compatible server.
    MongoDb,
    /// FerretDB (`buildInfo.ferretdbVersion`). Version 1 applies updates as
    /// read-then-write (FerretDB issue 3040).
    FerretDb {
        /// FerretDB's own version, e.g. `v1.24.2`.
        version: String,
    },
    /// The DocumentDB PostgreSQL extension's gateway (FerretDB v2 and
    /// `documentdb-local`): `hello.internal.documentdb_versions`.
    DocumentDbExtension,
    /// Amazon DocumentDB (a `*.docdb.amazonaws.com` host).
    AmazonDocumentDb,
    /// Azure Cosmos DB for MongoDB (a `*.cosmos.azure.com` host).
    AzureCosmosDb,
    /// A server that speaks the protocol but carries none of the marks above.
    Unidentified,
}

/// The server a store opened on: its kind, the MongoDB version it reports,
/// and its replica set, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    kind: ServerKind,
    version: Option<String>,
    replica_set: Option<String>,
    members: usize,
    router: bool,
}

impl ServerInfo {
    /// Identify a server from its `buildInfo` and `hello` replies (either may
    /// be empty when the server refused the command) and the host names of
    /// the URI.
    ///
    /// ```
    /// use bakery_mongodb::mongodb::bson::doc;
    /// use bakery_mongodb::{CasStrategy, ServerInfo, ServerKind};
    ///
    /// let ferret = ServerInfo::identify(
    ///     &doc! {"version": "7.0.42", "ferretdbVersion": "v1.24.2", "ok": 1.0},
    ///     &doc! {"isWritablePrimary": true, "ok": 1.0},
    ///     &["127.0.0.1"],
    /// );
    /// assert_eq!(ferret.kind(), &ServerKind::FerretDb { version: "v1.24.2".into() });
    /// assert_eq!(ferret.default_strategy(), CasStrategy::Insert);
    /// assert!(!ferret.update_is_proven());
    /// ```
    pub fn identify(build_info: &Document, hello: &Document, hosts: &[&str]) -> ServerInfo {
        let version = build_info.get_str("version").ok().map(str::to_string);
        let replica_set = hello.get_str("setName").ok().map(str::to_string);
        let members = ["hosts", "passives"]
            .iter()
            .filter_map(|field| hello.get_array(field).ok())
            .map(Vec::len)
            .sum();
        let host_ends = |suffixes: &[&str]| {
            hosts.iter().any(|host| {
                let host = host.to_ascii_lowercase();
                suffixes.iter().any(|suffix| host.ends_with(suffix))
            })
        };
        let ferretdb_version = build_info
            .iter()
            .find(|(name, _)| name.to_ascii_lowercase().starts_with("ferretdb"))
            .map(|_| match build_info.get("ferretdbVersion") {
                Some(Bson::String(v)) => v.clone(),
                _ => "unknown".to_string(),
            });
        let internal = hello.get_document("internal").ok();
        let documentdb = internal.is_some_and(|i| i.contains_key("documentdb_versions"));
        let cosmos = internal.is_some_and(|i| i.contains_key("cosmos_versions"));
        let kind = if let Some(version) = ferretdb_version {
            ServerKind::FerretDb { version }
        } else if documentdb {
            ServerKind::DocumentDbExtension
        } else if host_ends(&[".docdb.amazonaws.com", ".docdb-elastic.amazonaws.com"]) {
            ServerKind::AmazonDocumentDb
        } else if cosmos || host_ends(&[".cosmos.azure.com"]) {
            ServerKind::AzureCosmosDb
        } else if is_mongodb_build(build_info, hello) {
            ServerKind::MongoDb
        } else {
            ServerKind::Unidentified
        };
        ServerInfo {
            kind,
            version,
            replica_set,
            members,
            router: hello.get_str("msg") == Ok("isdbgrid"),
        }
    }

    /// The data-bearing members of the replica set (`hello.hosts` and
    /// `hello.passives`); 0 for a standalone server.
    pub fn members(&self) -> usize {
        self.members
    }

    /// What the server is.
    pub fn kind(&self) -> &ServerKind {
        &self.kind
    }

    /// The MongoDB version the server reports (`buildInfo.version`); a
    /// compatible server reports the version it imitates.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// The replica set name (`hello.setName`), or `None` for a standalone
    /// server.
    pub fn replica_set(&self) -> Option<&str> {
        self.replica_set.as_deref()
    }

    /// True for a `mongos` router (`hello.msg: "isdbgrid"`): every shard
    /// behind it is a replica set whose size the router does not report.
    pub fn is_router(&self) -> bool {
        self.router
    }

    /// True only for MongoDB itself, whose single-document
    /// `findOneAndUpdate` re-checks its filter under the document's write
    /// lock (MongoDB documents single-document atomicity, and Jepsen's
    /// MongoDB 3.4.0-rc3 analysis found a version-filtered
    /// `findAndModify` compare-and-set linearizable). No other server has
    /// shown that here; FerretDB v1 is known to fail it.
    pub fn update_is_proven(&self) -> bool {
        self.kind == ServerKind::MongoDb
    }

    /// The strategy used when the URI does not choose one: `update` on
    /// MongoDB, `insert` on everything else.
    pub fn default_strategy(&self) -> CasStrategy {
        if self.update_is_proven() {
            CasStrategy::Update
        } else {
            CasStrategy::Insert
        }
    }

    /// The strategy a store on this server uses: `chosen` by the URI, or
    /// the [`default`](Self::default_strategy). An explicit `update` on a
    /// server where its atomicity is not proven is refused
    /// ([`ErrorKind::Config`](bakery_core::ErrorKind::Config)) unless
    /// `allow_unproven` ([`ALLOW_UNPROVEN_UPDATE`]`=true`).
    pub fn strategy(
        &self,
        chosen: Option<CasStrategy>,
        allow_unproven: bool,
    ) -> Result<CasStrategy> {
        match chosen {
            None => Ok(self.default_strategy()),
            Some(CasStrategy::Update) if !self.update_is_proven() && !allow_unproven => {
                Err(Error::config(
                    BACKEND,
                    format!(
                    "cas=update is refused on {self}: {} Two writers presenting the same version \
                     could both succeed, and a sequence would hand out the same ids twice. Use \
                     cas=insert (one immutable document per version under a unique _id; the \
                     default on this server), or add `{ALLOW_UNPROVEN_UPDATE}=true` only if you \
                     have verified that this server applies a filtered findOneAndUpdate atomically",
                    self.why_unproven()
                ),
                ))
            }
            Some(chosen) => Ok(chosen),
        }
    }

    fn why_unproven(&self) -> &'static str {
        match self.kind {
            ServerKind::FerretDb { .. } => {
                "FerretDB applies findAndModify as a read followed by a write that does not \
                 re-check the filter (FerretDB issue 3040)."
            }
            ServerKind::MongoDb => "",
            _ => {
                "it is not MongoDB, and whether it applies a version-filtered findOneAndUpdate \
                 atomically has not been shown."
            }
        }
    }
}

/// `FerretDB v1.24.2 (answers as MongoDB 7.0.42)`, `MongoDB 7.0.14 (replica
/// set rs0)`, …
impl fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ServerKind::MongoDb => write!(
                f,
                "MongoDB {}",
                self.version().unwrap_or("(version unknown)")
            )?,
            ServerKind::FerretDb { version } if version.is_empty() || version == "unknown" => {
                f.write_str("FerretDB (its version unreported)")?
            }
            ServerKind::FerretDb { version } => write!(f, "FerretDB {version}")?,
            ServerKind::DocumentDbExtension => {
                f.write_str("a DocumentDB (PostgreSQL extension) gateway")?
            }
            ServerKind::AmazonDocumentDb => f.write_str("Amazon DocumentDB")?,
            ServerKind::AzureCosmosDb => f.write_str("Azure Cosmos DB for MongoDB")?,
            ServerKind::Unidentified => f.write_str("an unidentified MongoDB-compatible server")?,
        }
        if self.kind != ServerKind::MongoDb {
            if let Some(version) = self.version() {
                write!(f, " (answers as MongoDB {version})")?;
            }
        }
        if let Some(set) = self.replica_set() {
            write!(f, " (replica set {set})")?;
        }
        Ok(())
    }
}

/// The marks of MongoDB's own `buildInfo` that compatible servers have not
/// copied together: a 40-hex-digit `gitVersion`, an allocator, a real
/// JavaScript engine, and MongoDB's storage engine (`wiredTiger` or
/// `inMemory`) — or, for a `mongos` router, which has none, the router's
/// `hello.msg: "isdbgrid"`.
fn is_mongodb_build(build_info: &Document, hello: &Document) -> bool {
    let git = build_info
        .get_str("gitVersion")
        .is_ok_and(|v| v.len() == 40 && v.bytes().all(|b| b.is_ascii_hexdigit()));
    let allocator = build_info
        .get_str("allocator")
        .is_ok_and(|value| !value.is_empty());
    let javascript = build_info
        .get_str("javascriptEngine")
        .is_ok_and(|engine| !engine.is_empty() && engine != "none");
    let mongodb_engine = build_info.get_array("storageEngines").is_ok_and(|engines| {
        engines
            .iter()
            .any(|e| matches!(e.as_str(), Some("wiredTiger" | "inMemory")))
    });
    let router = hello.get_str("msg") == Ok("isdbgrid");
    git && allocator && javascript && (mongodb_engine || router)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    /// The shape of `buildInfo` from a MongoDB 7.0 `mongod` (abridged).
    fn mongod_build_info() -> Document {
        doc! {
            "version": "7.0.14",
            "gitVersion": "ce59cfc6a3c5e5c067dca0d30697edd68d4f5188",
            "modules": [],
            "allocator": "tcmalloc",
            "javascriptEngine": "mozjs",
            "sysInfo": "deprecated",
            "versionArray": [7, 0, 14, 0],
            "bits": 64,
            "debug": false,
            "maxBsonObjectSize": 16777216,
            "storageEngines": ["devnull", "wiredTiger"],
            "ok": 1.0,
        }
    }

    /// FerretDB v1.24's `buildInfo` (msg_buildinfo.go): no storage engines,
    /// allocator or JavaScript engine; its own version beside the imitated
    /// one.
    fn ferretdb_build_info() -> Document {
        doc! {
            "version": "7.0.42",
            "gitVersion": "unknown",
            "modules": [],
            "sysInfo": "deprecated",
            "versionArray": [7, 0, 42, 0],
            "bits": 64,
            "debug": false,
            "maxBsonObjectSize": 16777216,
            "buildEnvironment": {},
            "ferretdbVersion": "v1.24.2",
            "ferretdbFeatures": {"aggregationStages": []},
            "ok": 1.0,
        }
    }

    #[test]
    fn mongod_gets_update_and_ferretdb_insert() {
        let mongo = ServerInfo::identify(&mongod_build_info(), &doc! {"setName": "rs0"}, &["db1"]);
        assert_eq!(mongo.kind(), &ServerKind::MongoDb);
        assert_eq!(mongo.default_strategy(), CasStrategy::Update);
        assert_eq!(
            mongo.strategy(Some(CasStrategy::Update), false).unwrap(),
            CasStrategy::Update
        );
        assert_eq!(mongo.to_string(), "MongoDB 7.0.14 (replica set rs0)");

        let ferret = ServerInfo::identify(&ferretdb_build_info(), &doc! {}, &["127.0.0.1"]);
        assert_eq!(
            ferret.kind(),
            &ServerKind::FerretDb {
                version: "v1.24.2".into()
            }
        );
        assert_eq!(ferret.default_strategy(), CasStrategy::Insert);
        assert_eq!(
            ferret.to_string(),
            "FerretDB v1.24.2 (answers as MongoDB 7.0.42)"
        );
    }

    #[test]
    fn explicit_update_is_refused_unless_allowed() {
        let ferret = ServerInfo::identify(&ferretdb_build_info(), &doc! {}, &["127.0.0.1"]);
        let e = ferret
            .strategy(Some(CasStrategy::Update), false)
            .unwrap_err();
        assert_eq!(e.kind(), bakery_core::ErrorKind::Config);
        bakery_testkit::assert_mentions(
            &e,
            &[
                "FerretDB v1.24.2",
                "issue 3040",
                "cas=insert",
                "allow_unproven_update=true",
            ],
        );
        assert_eq!(
            ferret.strategy(Some(CasStrategy::Update), true).unwrap(),
            CasStrategy::Update
        );
        assert_eq!(
            ferret.strategy(Some(CasStrategy::Insert), false).unwrap(),
            CasStrategy::Insert
        );
    }

    #[test]
    fn anything_short_of_mongod_is_not_proven() {
        // A mongos router: no storage engine, but `hello.msg: isdbgrid`.
        let mut router_info = mongod_build_info();
        router_info.insert("storageEngines", Bson::Array(vec![]));
        let router = ServerInfo::identify(&router_info, &doc! {"msg": "isdbgrid"}, &["r"]);
        assert_eq!(router.kind(), &ServerKind::MongoDb);
        assert!(router.is_router());
        // An emulator copying the field names, not MongoDB's values.
        let emulator = ServerInfo::identify(
            &doc! {"version": "4.2.0", "gitVersion": "unknown", "allocator": "system",
            "javascriptEngine": "none", "storageEngines": ["orbit"]},
            &doc! {},
            &["h"],
        );
        assert_eq!(emulator.kind(), &ServerKind::Unidentified);
        let cosmos = ServerInfo::identify(
            &mongod_build_info(),
            &doc! {"internal": {"cosmos_versions": ["1"]}},
            &["10.0.0.5"],
        );
        assert_eq!(cosmos.kind(), &ServerKind::AzureCosmosDb);
        // A mongod-like reply missing one mark.
        for missing in [
            "storageEngines",
            "allocator",
            "javascriptEngine",
            "gitVersion",
        ] {
            let mut info = mongod_build_info();
            info.remove(missing);
            let server = ServerInfo::identify(&info, &doc! {}, &["h"]);
            assert_eq!(
                server.kind(),
                &ServerKind::Unidentified,
                "without {missing}"
            );
            assert_eq!(server.default_strategy(), CasStrategy::Insert);
            assert!(server.strategy(Some(CasStrategy::Update), false).is_err());
        }
        // The command refused: nothing to go on.
        let silent = ServerInfo::identify(&doc! {}, &doc! {}, &["h"]);
        assert_eq!(silent.kind(), &ServerKind::Unidentified);
        assert_eq!(
            silent.to_string(),
            "an unidentified MongoDB-compatible server"
        );
        // Hosted look-alikes, even when they copy mongod's buildInfo.
        for (host, kind) in [
            (
                "c.cluster-x.us-east-1.docdb.amazonaws.com",
                ServerKind::AmazonDocumentDb,
            ),
            ("acct.mongo.cosmos.azure.com", ServerKind::AzureCosmosDb),
        ] {
            let server = ServerInfo::identify(&mongod_build_info(), &doc! {}, &[host]);
            assert_eq!(server.kind(), &kind);
            assert_eq!(server.default_strategy(), CasStrategy::Insert);
        }
        let gateway = ServerInfo::identify(
            &mongod_build_info(),
            &doc! {"internal": {"documentdb_versions": ["0.109-0"]}},
            &["h"],
        );
        assert_eq!(gateway.kind(), &ServerKind::DocumentDbExtension);
    }
}
