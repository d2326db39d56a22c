//! MongoStore against a real server (`BAKERY_MONGODB_URI`, FerretDB in CI):
//! what only a server has — the document layout of both strategies,
//! version pruning, foreign documents, lost replies and unreachable
//! servers. The contract itself, races included, is the conformance
//! suite's (`cargo test -p bakery --features mongodb --test conformance`),
//! which runs the server's default strategy (`insert` on FerretDB: v1 does
//! not apply updates atomically, issue 3040, so `cas=update` loses updates
//! there by design).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bakery_core::{Capabilities, DeleteOutcome, ErrorKind, Key, PutOutcome, VersionedStore};
use bakery_mongodb::mongodb::bson::{doc, Bson, Document};
use bakery_mongodb::mongodb::options::IndexOptions;
use bakery_mongodb::mongodb::IndexModel;
use bakery_mongodb::{CasStrategy, MongoStore, LAYOUT_ID};
use bakery_testkit::{applied, corrupt};
use common::{
    drop_collection, fresh_collection, raw, refused_open, server_uri, store, with_options, Mode,
    Proxy,
};

const STRATEGIES: [&str; 2] = ["update", "insert"];

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

/// Run test `test`'s `body` once per strategy in `strategies`, with the
/// server URI, the strategy and a store with it on a fresh collection
/// `bk_TEST_…`, dropped after the run. Without a server, print why and
/// pass (see [`server_uri`]).
async fn on_stores(
    test: &str,
    strategies: &[&str],
    mut body: impl AsyncFnMut(&str, &str, MongoStore),
) {
    let Some(uri) = server_uri(test) else {
        return;
    };
    for cas in strategies {
        let store = store(&uri, cas, &format!("bk_{test}")).await;
        body(&uri, cas, store.clone()).await;
        drop_collection(&uri, &store).await;
    }
}

/// The documents behind a key, oldest first: `(_id, ver, dead)`.
async fn documents(uri: &str, store: &MongoStore, k: &str) -> Vec<(String, i64, bool)> {
    let filter = match store.strategy() {
        CasStrategy::Insert => doc! {"k": k},
        _ => doc! {"_id": k},
    };
    let mut cursor = raw(uri, store)
        .await
        .find(filter)
        .sort(doc! {"ver": 1})
        .await
        .unwrap();
    let mut out = Vec::new();
    while cursor.advance().await.unwrap() {
        let doc: Document = cursor.deserialize_current().unwrap();
        out.push((
            doc.get_str("_id").unwrap().to_string(),
            doc.get_i64("ver").unwrap(),
            doc.get_bool("dead").unwrap_or(false),
        ));
    }
    out
}

#[tokio::test]
async fn life_cycle_and_layout_of_both_strategies() {
    on_stores("life", &STRATEGIES, async |uri, cas, store| {
        assert_eq!(store.strategy().as_str(), cas);
        assert_eq!(store.backend(), "mongodb");
        assert_eq!(
            store.capabilities(),
            Capabilities::PERSISTENT | Capabilities::SHARED | Capabilities::LINEARIZABLE_READS
        );
        let k = key("life/one");
        assert_eq!(store.get(&k).await.unwrap(), None);
        let v1 = applied(&store, &k, None, "a").await;
        assert_eq!(v1.version, 1);
        assert_eq!(
            store.put_if_version(&k, None, "x".into()).await.unwrap(),
            PutOutcome::Conflict(Some(v1.clone()))
        );
        let v2 = applied(&store, &k, Some(1), "b").await;
        assert_eq!(v2.version, 2);
        for stale in [0, 1, 3, u64::MAX] {
            assert_eq!(
                store
                    .put_if_version(&k, Some(stale), "x".into())
                    .await
                    .unwrap(),
                PutOutcome::Conflict(Some(v2.clone())),
                "{cas}: expected {stale}"
            );
        }
        assert_eq!(
            store.delete_if_version(&k, 1).await.unwrap(),
            DeleteOutcome::Conflict(Some(v2.clone()))
        );
        assert_eq!(
            store.delete_if_version(&k, 2).await.unwrap(),
            DeleteOutcome::Deleted
        );
        assert_eq!(store.get(&k).await.unwrap(), None);
        assert_eq!(
            store.put_if_version(&k, Some(2), "x".into()).await.unwrap(),
            PutOutcome::Conflict(None),
            "{cas}: a deleted row cannot be updated"
        );
        assert_eq!(
            store.delete_if_version(&k, 2).await.unwrap(),
            DeleteOutcome::Conflict(None)
        );

        // The layout: a tombstone keeps the version, a re-create goes above it.
        let docs = documents(uri, &store, "life/one").await;
        match cas {
            "update" => assert_eq!(docs, vec![("life/one".to_string(), 2, true)]),
            _ => {
                // Version 1 may already be pruned (in the background).
                assert_eq!(
                    docs.last(),
                    Some(&("life/one#00000000000000000003".to_string(), 3, true))
                );
                for (id, ver, _) in &docs {
                    assert_eq!(id, &format!("life/one#{ver:020}"));
                }
            }
        }
        let again = applied(&store, &k, None, "c").await;
        let tombstone_version = if cas == "update" { 2 } else { 3 };
        assert_eq!(
            again.version,
            tombstone_version + 1,
            "{cas}: re-create continues above the tombstone"
        );
        assert_eq!(store.get(&k).await.unwrap(), Some(again.clone()));
        assert_eq!(
            store.put_if_version(&k, None, "x".into()).await.unwrap(),
            PutOutcome::Conflict(Some(again))
        );
    })
    .await;
}

/// Old versions are pruned in the background: after 100 updates a key has
/// at most three documents, and the newest is always there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_strategy_prunes_old_versions() {
    on_stores("prune", &["insert"], async |uri, _, store| {
        let k = key("pruned");
        let started = Instant::now();
        let mut row = applied(&store, &k, None, "0").await;
        for i in 1..=100 {
            row = applied(&store, &k, Some(row.version), &i.to_string()).await;
            // A reader never sees the key absent between versions.
            assert_eq!(store.get(&k).await.unwrap(), Some(row.clone()));
        }
        eprintln!(
            "cas=insert: 101 sequential writes + reads in {:?}",
            started.elapsed()
        );
        assert_eq!(row.version, 101);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let docs = documents(uri, &store, "pruned").await;
            assert_eq!(docs.last().map(|d| d.1), Some(101), "the newest stays");
            if docs.len() <= 3 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "still {} documents: {docs:?}",
                docs.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Deleting and re-creating continues the versions.
        assert_eq!(
            store.delete_if_version(&k, 101).await.unwrap(),
            DeleteOutcome::Deleted
        );
        assert_eq!(store.get(&k).await.unwrap(), None);
        let again = applied(&store, &k, None, "again").await;
        assert_eq!(again.version, 103);
    })
    .await;
}

/// A document inserted into a slot that pruning freed (a writer that
/// stalled while the key moved on) never becomes the current row.
#[tokio::test]
async fn late_insert_into_a_pruned_slot_is_ignored() {
    on_stores("late", &["insert"], async |uri, _, store| {
        let k = key("late");
        let mut row = applied(&store, &k, None, "1").await;
        for i in 2..=9 {
            row = applied(&store, &k, Some(row.version), &i.to_string()).await;
        }
        let coll = raw(uri, &store).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while coll
            .find_one(doc! {"_id": "late#00000000000000000002"})
            .await
            .unwrap()
            .is_some()
        {
            assert!(Instant::now() < deadline, "version 2 was never pruned");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        coll.insert_one(doc! {
            "_id": "late#00000000000000000002", "k": "late", "ver": 2_i64,
            "v": Bson::Binary(bakery_mongodb::mongodb::bson::Binary {
                subtype: bakery_mongodb::mongodb::bson::spec::BinarySubtype::Generic,
                bytes: b"late".to_vec(),
            }),
            "tok": bakery_mongodb::mongodb::bson::oid::ObjectId::new(), "anc": [],
        })
        .await
        .unwrap();
        assert_eq!(store.get(&k).await.unwrap(), Some(row.clone()));
        assert_eq!(
            store.put_if_version(&k, Some(2), "x".into()).await.unwrap(),
            PutOutcome::Conflict(Some(row))
        );
    })
    .await;
}

/// Foreign or damaged documents are `Corrupt` errors naming the key, never
/// panics, and bakery leaves them alone.
#[tokio::test]
async fn corrupt_documents_are_typed_errors() {
    on_stores("corrupt", &STRATEGIES, async |uri, cas, store| {
        let coll = raw(uri, &store).await;
        let before = coll.count_documents(doc! {}).await.unwrap();
        let id = |k: &str| match cas {
            "update" => k.to_string(),
            _ => format!("{k}#00000000000000000001"),
        };
        let junk: [(&str, Document); 4] = [
            ("ver-string", doc! {"ver": "junk", "v": "x"}),
            ("no-ver", doc! {"v": "x"}),
            ("ver-negative", doc! {"ver": -3_i64}),
            (
                "v-string",
                doc! {"ver": 1_i64, "v": "not binary", "tok": bakery_mongodb::mongodb::bson::oid::ObjectId::new()},
            ),
        ];
        for (name, mut doc) in junk {
            doc.insert("_id", id(name));
            doc.insert("k", name);
            coll.insert_one(doc).await.unwrap();
            // Version 7 matches none of them: every call must read.
            let stored = async |k: &str| coll.find_one(doc! {"_id": id(k)}).await.unwrap();
            corrupt::rejected(&store, "mongodb", name, &[Some(7), None], 7, stored).await;
        }
        // Nothing was changed.
        assert_eq!(coll.count_documents(doc! {}).await.unwrap(), before + 4);
    })
    .await;
}

fn upstream(uri: &str) -> SocketAddr {
    let rest = uri.split_once("://").unwrap().1;
    let authority = rest.split(['/', '?']).next().unwrap();
    let host = authority.rsplit('@').next().unwrap();
    host.parse()
        .expect("BAKERY_MONGODB_URI names one HOST:PORT")
}

/// The reply to a write is lost (the connection drops after the server got
/// the request): `Unknown`, and the write did apply. A write whose reply
/// never comes is `Unknown` when the call's timeout passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_are_unknown_outcomes() {
    let Some(uri) = server_uri("lost_replies_are_unknown_outcomes") else {
        return;
    };
    let proxy = Proxy::start(upstream(&uri)).await;
    let (_, rest) = uri.split_once("://").unwrap();
    let path_and_query = rest.split_once('/').map_or("", |(_, p)| p);
    let proxied = format!("mongodb://{}/{}", proxy.addr, path_and_query);
    for cas in STRATEGIES {
        let direct = store(&uri, cas, "bk_lost").await;
        let collection = direct.config().collection().to_string();
        let through = MongoStore::connect(&with_options(
            &proxied,
            &[
                &format!("cas={cas}"),
                &format!("collection={collection}"),
                "timeout_ms=1500",
                "serverMonitoringMode=poll",
                "directConnection=true",
                "allow_unproven_update=true",
            ],
        ))
        .await
        .unwrap();
        let k = key("lost/create");
        proxy.arm(Mode::DropReply);
        let err = through
            .put_if_version(&k, None, "v".into())
            .await
            .expect_err("the reply was dropped");
        assert_eq!(err.kind(), ErrorKind::Unknown, "{cas}: {err}");
        assert!(err.outcome_unknown());
        let row = direct.get(&k).await.unwrap().expect("the create applied");
        assert_eq!(row.version, 1);

        proxy.arm(Mode::HoldReply);
        let started = Instant::now();
        let err = through
            .put_if_version(&k, Some(1), "w".into())
            .await
            .expect_err("the reply never came");
        assert_eq!(err.kind(), ErrorKind::Unknown, "{cas}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(direct.get(&k).await.unwrap().unwrap().version, 2, "{cas}");

        proxy.arm(Mode::DropReply);
        let err = through.delete_if_version(&k, 2).await.expect_err("dropped");
        assert_eq!(err.kind(), ErrorKind::Unknown, "{cas}: {err}");
        assert_eq!(
            direct.get(&k).await.unwrap(),
            None,
            "{cas}: the delete applied"
        );

        // Reads are never in doubt, and the store recovers.
        assert_eq!(through.get(&k).await.unwrap(), None);
        drop_collection(&uri, &direct).await;
    }
}

/// The project's server is FerretDB: identified at open, given `insert` by
/// default, and an explicit `cas=update` is refused with a message naming
/// the server, the reason and the way out.
#[tokio::test]
async fn ferretdb_is_identified_and_gets_the_insert_strategy() {
    let Some(uri) = server_uri("ferretdb_is_identified_and_gets_the_insert_strategy") else {
        return;
    };
    let plain = with_options(&uri, &[&fresh_collection("bk_ident")]);
    // The default URI (whatever `cas` the environment's URI carried is
    // replaced by `auto`, the default).
    let default = with_options(&plain, &["cas=auto"]);
    let store = MongoStore::connect(&default).await.unwrap();
    let server = store.server().clone();
    // Ask the server directly (raw driver), so a FerretDB that bakery took
    // for something else fails here instead of skipping.
    let build_info = raw(&uri, &store)
        .await
        .client()
        .database("admin")
        .run_command(doc! {"buildInfo": 1})
        .await
        .unwrap();
    if !build_info.contains_key("ferretdbVersion") {
        eprintln!("not FerretDB ({server}): the FerretDB identification checks do not apply");
        return;
    }
    assert!(
        matches!(server.kind(), bakery_mongodb::ServerKind::FerretDb { .. }),
        "FerretDB identified as {server}"
    );
    assert_eq!(store.strategy(), CasStrategy::Insert, "{server}");
    assert!(server.to_string().starts_with("FerretDB"), "{server}");
    assert!(
        server.version().is_some(),
        "FerretDB answers with a MongoDB version"
    );
    // It works as a store, with writes journaled (FerretDB accepts `j`).
    let k = key("ident/one");
    applied(&store, &k, None, "a").await;

    refused_open(
        &with_options(&plain, &["cas=update"]),
        "cas=update on FerretDB",
        ErrorKind::Config,
        &[
            "on FerretDB",
            "cas=update is refused",
            "does not re-check the filter",
            "cas=insert",
            "allow_unproven_update=true",
        ],
    )
    .await;

    // The explicit override opens it (the negative control depends on it),
    // on a collection of its own: this one now holds `insert` rows.
    let other = fresh_collection("bk_ident_update");
    let overridden = MongoStore::connect(&with_options(
        &uri,
        &[&other, "cas=update", "allow_unproven_update=true"],
    ))
    .await
    .unwrap();
    assert_eq!(overridden.strategy(), CasStrategy::Update);
    drop_collection(&uri, &store).await;
    drop_collection(&uri, &overridden).await;
}

/// `journal=false` can lose acknowledged writes: refused unless the URI
/// accepts data loss.
#[tokio::test]
async fn an_unjournaled_write_concern_is_refused_unless_accepted() {
    let Some(uri) = server_uri("an_unjournaled_write_concern_is_refused_unless_accepted") else {
        return;
    };
    let unjournaled = with_options(&uri, &[&fresh_collection("bk_journal"), "journal=false"]);
    refused_open(
        &unjournaled,
        "journal=false",
        ErrorKind::Config,
        &["journal = false", "accept_data_loss=true"],
    )
    .await;

    let store = MongoStore::connect(&with_options(&unjournaled, &["accept_data_loss=true"]))
        .await
        .unwrap();
    applied(&store, &key("journal/one"), None, "a").await;
    drop_collection(&uri, &store).await;
}

/// A collection written with one strategy is refused by a store that would
/// use the other (the layouts do not see each other: every key would start
/// afresh and a sequence would repeat its ids) — in both directions.
#[tokio::test]
async fn a_collection_of_the_other_layout_is_refused() {
    let Some(uri) = server_uri("a_collection_of_the_other_layout_is_refused") else {
        return;
    };
    for (written, reopened) in [
        ("update", &["cas=auto"][..]),
        ("insert", &["cas=update", "allow_unproven_update=true"][..]),
    ] {
        let first = store(&uri, written, "bk_layout").await;
        applied(&first, &key("layout/one"), None, "a").await;
        let collection = format!("collection={}", first.config().collection());
        let mut options = vec![collection.as_str()];
        options.extend_from_slice(reopened);
        let reopen = with_options(&uri, &options);
        if reopen.contains("cas=auto") && first.server().update_is_proven() {
            // On MongoDB itself `auto` is `update`: no switch to refuse.
            drop_collection(&uri, &first).await;
            continue;
        }
        let marked = format!("is marked as written with cas={written}");
        refused_open(
            &reopen,
            "a store of the other layout",
            ErrorKind::Config,
            &[&marked, "hand out its ids again"],
        )
        .await;
        // Without its marker (a collection from before markers), the row
        // of the other layout is found and refused all the same.
        let coll = raw(&uri, &first).await;
        let removed = coll.delete_one(doc! {"_id": LAYOUT_ID}).await.unwrap();
        assert_eq!(removed.deleted_count, 1, "the first open left no marker");
        refused_open(
            &reopen,
            "an unmarked collection of the other layout",
            ErrorKind::Config,
            &[&format!("holds rows written with cas={written}")],
        )
        .await;
        // The same strategy still opens it.
        let again = with_options(
            &uri,
            &[
                collection.as_str(),
                &format!("cas={written}"),
                "allow_unproven_update=true",
            ],
        );
        MongoStore::connect(&again).await.unwrap();
        drop_collection(&uri, &first).await;
    }
}

/// Stores of both strategies opening one empty collection at once: the
/// layout marker's unique `_id` lets exactly one strategy claim it, and
/// every store of the other is refused, before anyone wrote a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_strategy_claims_an_empty_collection() {
    let Some(uri) = server_uri("one_strategy_claims_an_empty_collection") else {
        return;
    };
    let collection = fresh_collection("bk_claim");
    let opens: Vec<_> = (0..8)
        .map(|i| {
            let cas = format!("cas={}", STRATEGIES[i % 2]);
            let uri = with_options(&uri, &[&collection, &cas, "allow_unproven_update=true"]);
            tokio::spawn(async move { MongoStore::connect(&uri).await })
        })
        .collect();
    let mut opened = Vec::new();
    let mut refused = Vec::new();
    for open in opens {
        match open.await.expect("open task") {
            Ok(store) => opened.push(store),
            Err(e) => refused.push(e),
        }
    }
    let winner = opened.first().expect("no store opened").strategy();
    assert!(
        opened.iter().all(|s| s.strategy() == winner),
        "stores of both strategies opened one collection"
    );
    assert_eq!((opened.len(), refused.len()), (4, 4), "{refused:?}");
    for err in &refused {
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(
            err.to_string()
                .contains(&format!("is marked as written with cas={winner}")),
            "{err}"
        );
    }
    drop_collection(&uri, &opened[0]).await;
}

/// A damaged layout marker fails the open with a typed error naming it, and
/// is left as it was.
#[tokio::test]
async fn a_damaged_layout_marker_is_a_typed_error() {
    on_stores("marker", &["insert"], async |uri, _, first| {
        let coll = raw(uri, &first).await;
        let reopen = with_options(
            uri,
            &[
                "cas=insert",
                &format!("collection={}", first.config().collection()),
            ],
        );
        for damage in [doc! {"cas": 42_i32}, doc! {"cas": "upsert"}, doc! {}] {
            let marker = doc! {"_id": LAYOUT_ID};
            let mut replacement = damage.clone();
            replacement.insert("_id", LAYOUT_ID);
            coll.replace_one(marker.clone(), replacement.clone())
                .await
                .unwrap();
            refused_open(
                &reopen,
                &format!("the damaged marker {damage}"),
                ErrorKind::Corrupt,
                &[LAYOUT_ID],
            )
            .await;
            let kept = coll.find_one(marker).await.unwrap();
            assert_eq!(kept, Some(replacement), "the marker was changed");
        }
    })
    .await;
}

/// An index of someone else's that clashes with bakery's (the same keys
/// under another name) fails the open with a typed error naming the
/// collection, and is left alone.
#[tokio::test]
async fn a_clashing_index_is_a_config_error() {
    on_stores("index", &["insert"], async |uri, _, first| {
        let coll = raw(uri, &first).await;
        coll.drop_index("bakery_k_ver").await.unwrap();
        let theirs = IndexModel::builder()
            .keys(doc! {"k": 1, "ver": -1})
            .options(IndexOptions::builder().name("theirs".to_string()).build())
            .build();
        coll.create_index(theirs).await.unwrap();
        let collection = first.config().collection().to_string();
        let reopen = with_options(uri, &["cas=insert", &format!("collection={collection}")]);
        refused_open(
            &reopen,
            "a clashing index",
            ErrorKind::Config,
            &["clashes with bakery's", &collection],
        )
        .await;
        let names = coll.list_index_names().await.unwrap();
        assert!(names.contains(&"theirs".to_string()), "{names:?}");
    })
    .await;
}
