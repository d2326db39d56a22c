//! CassandraStore against a real server, named by `BAKERY_CASSANDRA_URI`
//! (`scripts/backends.sh start cassandra` writes it to `target/backends.env`):
//! what only a server has — contention on Paxos, tombstones, corrupt rows
//! written behind bakery's back, foreign schemas, concurrent table
//! creation, timeouts. Without the variable the tests print why and pass on
//! a developer machine, and FAIL under `CI=true`. The contract itself is
//! the conformance suite's
//! (`cargo test -p bakery --features cassandra --test conformance`).
//!
//! The unreachable-server test needs no server and always runs.

use std::time::{Duration, Instant};

use bakery_cassandra::scylla::client::session::Session;
use bakery_cassandra::{CassandraConfig, CassandraStore, Serial};
use bakery_core::{DeleteOutcome, ErrorKind, Key, VersionedStore};
use bakery_testkit::{applied, corrupt, unique_ident};

/// The server URI, or `None` (with the reason printed) on a developer
/// machine without one; panics under CI.
fn server_uri(test: &str) -> Option<String> {
    bakery_testkit::server_uri("BAKERY_CASSANDRA_URI", test)
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

fn config(uri: &str) -> CassandraConfig {
    CassandraConfig::from_uri(uri).unwrap_or_else(|e| panic!("BAKERY_CASSANDRA_URI: {e}"))
}

async fn open(uri: &str, table: &str) -> CassandraStore {
    CassandraStore::open(config(uri).with_table(table))
        .await
        .unwrap_or_else(|e| panic!("open table {table}: {e}"))
}

async fn open_err(uri: &str, table: &str) -> bakery_core::Error {
    CassandraStore::open(config(uri).with_table(table))
        .await
        .expect_err("opening must fail")
}

/// A raw statement through the driver, behind bakery's back.
async fn raw(session: &Session, cql: &str) {
    session
        .query_unpaged(cql, ())
        .await
        .unwrap_or_else(|e| panic!("{cql}: {e}"));
}

async fn drop_table(session: &Session, keyspace: &str, table: &str) {
    raw(
        session,
        &format!("DROP TABLE IF EXISTS \"{keyspace}\".\"{table}\""),
    )
    .await;
}

/// Run `body` with the server URI and a store on a fresh table named
/// `PREFIX_…`, then drop the table; without a server, print why and pass
/// (see [`server_uri`]).
async fn on_fresh_table(test: &str, prefix: &str, body: impl AsyncFnOnce(&str, &CassandraStore)) {
    let Some(uri) = server_uri(test) else {
        return;
    };
    let store = open(&uri, &unique_ident(prefix)).await;
    body(&uri, &store).await;
    drop_table(
        store.session(),
        store.config().keyspace(),
        store.config().table(),
    )
    .await;
}

/// The stored row behind the API: `(value, version)`, tombstones included.
async fn raw_row(store: &CassandraStore, k: &str) -> Option<(Option<Vec<u8>>, Option<i64>)> {
    let config = store.config();
    let cql = format!(
        "SELECT \"value\", \"version\" FROM \"{}\".\"{}\" WHERE \"key\" = ?",
        config.keyspace(),
        config.table()
    );
    let rows = store
        .session()
        .query_unpaged(cql, (k,))
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    rows.maybe_first_row::<(Option<Vec<u8>>, Option<i64>)>()
        .unwrap()
}

#[tokio::test]
async fn a_tombstone_keeps_its_version_and_a_recreate_continues_above_it() {
    on_fresh_table("tombstone", "bk_tomb", async |_, store| {
        corrupt::tombstone_life_cycle(store, async |k| raw_row(store, k).await).await;
    })
    .await;
}

#[tokio::test]
async fn corrupt_rows_are_typed_errors_naming_the_key_and_stay_unchanged() {
    on_fresh_table("corrupt", "bk_corrupt", async |_, store| {
        let table = store.config().table();
        let insert = format!(
            "INSERT INTO \"{}\".\"{table}\" (\"key\", \"value\", \"version\") VALUES (?, ?, ?)",
            store.config().keyspace()
        );
        // Plain (non-LWT) writes behind bakery's back.
        let write = async |row: corrupt::SignedRow| {
            store
                .session()
                .query_unpaged(insert.as_str(), row)
                .await
                .unwrap_or_else(|e| panic!("{insert} {row:?}: {e}"));
        };
        let raw = async |k: &str| raw_row(store, k).await;
        corrupt::signed_versions(store, "cassandra", write, raw).await;
    })
    .await;
}

#[tokio::test]
async fn a_table_of_another_shape_is_a_config_error() {
    let Some(uri) = server_uri("wrong_schema") else {
        return;
    };
    // A store on the default table, only for its session.
    let admin = open(&uri, &unique_ident("bk_admin")).await;
    let keyspace = admin.config().keyspace().to_string();
    let cases = [
        "\"key\" text PRIMARY KEY, \"value\" text, \"version\" bigint",
        "\"key\" text PRIMARY KEY, \"value\" blob, \"version\" int",
        "\"key\" text PRIMARY KEY, \"value\" blob, \"version\" bigint, extra int",
        "\"key\" text, c int, \"value\" blob, \"version\" bigint, PRIMARY KEY (\"key\", c)",
        "\"key\" ascii PRIMARY KEY, \"value\" blob, \"version\" bigint",
        "id int PRIMARY KEY",
    ];
    for columns in cases {
        let table = unique_ident("bk_wrong");
        raw(
            admin.session(),
            &format!("CREATE TABLE \"{keyspace}\".\"{table}\" ({columns})"),
        )
        .await;
        let err = open_err(&uri, &table).await;
        assert_eq!(err.kind(), ErrorKind::Config, "{columns}: {err}");
        assert_eq!(err.backend(), "cassandra");
        assert!(
            err.message().contains("unexpected schema"),
            "{columns}: {err}"
        );
        assert!(err.message().contains(&table), "{columns}: {err}");
        drop_table(admin.session(), &keyspace, &table).await;
    }
    drop_table(admin.session(), &keyspace, admin.config().table()).await;
}

#[tokio::test]
async fn a_missing_keyspace_is_created() {
    let Some(uri) = server_uri("keyspace") else {
        return;
    };
    let keyspace = unique_ident("bk_ks");
    let store = CassandraStore::open(config(&uri).with_keyspace(&keyspace))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "keyspace: created {keyspace} on {}",
        if store.is_scylla() {
            "ScyllaDB"
        } else {
            "Apache Cassandra"
        }
    );
    let k = key("ks/k");
    assert_eq!(applied(&store, &k, None, "v").await.version, 1);
    raw(store.session(), &format!("DROP KEYSPACE \"{keyspace}\"")).await;
}

/// A client deadline far below one Paxos round: writes that time out are
/// UNKNOWN (they were sent), reads are Unavailable; nothing else surfaces.
#[tokio::test]
async fn client_timeouts_are_unknown_for_writes_and_unavailable_for_reads() {
    on_fresh_table("timeouts", "bk_timeout", async |uri, store| {
        let table = store.config().table();
        let hurried = CassandraStore::open(
            config(uri)
                .with_table(table)
                .with_timeout(Duration::from_millis(1)),
        )
        .await
        .unwrap();
        let (mut unknown, mut unavailable) = (0, 0);
        for i in 0..20 {
            let k = key(&format!("hurry/{i}"));
            match hurried.put_if_version(&k, None, "x".into()).await {
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Unknown, "{e}");
                    assert!(e.message().contains("may or may not"), "{e}");
                    unknown += 1;
                }
            }
            match hurried.get(&k).await {
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                    unavailable += 1;
                }
            }
        }
        eprintln!("timeouts: {unknown} unknown writes, {unavailable} unavailable reads of 20");
        // Whatever happened, the normal store sees a consistent state.
        for i in 0..20 {
            let k = key(&format!("hurry/{i}"));
            if let Some(row) = store.get(&k).await.unwrap() {
                assert_eq!(row.version, 1);
            }
        }
    })
    .await;
}

/// One client, no contention: how long each kind of call takes (printed,
/// not asserted: a guide for the docs, not a benchmark).
#[tokio::test]
async fn uncontended_latency_per_call() {
    on_fresh_table("latency", "bk_latency", async |_, store| {
        const N: u64 = 200;
        let k = key("latency/k");
        let mut row = applied(store, &k, None, "0").await;
        let started = Instant::now();
        for i in 1..=N {
            row = applied(store, &k, Some(row.version), &i.to_string()).await;
        }
        let update = started.elapsed() / N as u32;
        let started = Instant::now();
        for _ in 0..N {
            assert!(store
                .put_if_version(&k, Some(1), "stale".into())
                .await
                .unwrap()
                .applied()
                .is_none());
        }
        let conflict = started.elapsed() / N as u32;
        let started = Instant::now();
        for _ in 0..N {
            store.get(&k).await.unwrap();
        }
        let get = started.elapsed() / N as u32;
        let started = Instant::now();
        for i in 0..N {
            let k = key(&format!("latency/c{i}"));
            applied(store, &k, None, "x").await;
        }
        let create = started.elapsed() / N as u32;
        let started = Instant::now();
        for i in 0..N {
            let k = key(&format!("latency/c{i}"));
            assert_eq!(
                store.delete_if_version(&k, 1).await.unwrap(),
                DeleteOutcome::Deleted
            );
        }
        let delete = started.elapsed() / N as u32;
        let started = Instant::now();
        for i in 0..N {
            let k = key(&format!("latency/c{i}"));
            assert_eq!(applied(store, &k, None, "y").await.version, 2);
        }
        let recreate = started.elapsed() / N as u32;
        eprintln!(
            "latency per call: get {get:?}, create {create:?}, update {update:?}, conflict {conflict:?}, delete {delete:?}, re-create over a tombstone {recreate:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn capabilities_and_debug() {
    let Some(uri) = server_uri("capabilities") else {
        return;
    };
    let store = CassandraStore::connect(&uri).await.unwrap();
    assert_eq!(store.backend(), "cassandra");
    assert_eq!(
        store.capabilities(),
        bakery_core::Capabilities::PERSISTENT
            | bakery_core::Capabilities::SHARED
            | bakery_core::Capabilities::LINEARIZABLE_READS
    );
    let shown = format!("{store:?}");
    assert!(shown.contains("CassandraStore"), "{shown}");
    // The server answers the probe the store relies on.
    let rows = store
        .session()
        .query_unpaged("SELECT release_version FROM system.local", ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let (version,) = rows.first_row::<(String,)>().unwrap();
    eprintln!("capabilities: server release {version}");
}

/// The settings read path at open: the project's server (started by
/// `scripts/backends.sh` with `commitlog_sync: batch`) reports `batch`
/// where bakery reads it, and a store opens with the default URI (no
/// `accept_data_loss`).
#[tokio::test]
async fn the_server_reports_a_batch_commit_log_and_a_default_store_opens() {
    let Some(uri) = server_uri("durability_settings") else {
        return;
    };
    assert!(!config(&uri).accept_data_loss(), "{uri}");
    let store = CassandraStore::connect(&uri)
        .await
        .unwrap_or_else(|e| panic!("a durable server must open: {e}"));
    let table = if store.is_scylla() {
        "system.config"
    } else {
        "system_views.settings"
    };
    let rows = store
        .session()
        .query_unpaged(
            format!("SELECT value FROM {table} WHERE name = 'commitlog_sync'"),
            (),
        )
        .await
        .unwrap_or_else(|e| panic!("{table}: {e}"))
        .into_rows_result()
        .unwrap();
    let (value,) = rows.first_row::<(String,)>().unwrap();
    assert_eq!(value.trim_matches('"'), "batch", "{table}");
    eprintln!("durability: commitlog_sync = {value} ({table})");
}

/// One replica is durable when the commit log is fsynced before each
/// acknowledgement: a keyspace created outside bakery with
/// `replication_factor` 1 opens, and so does `serial=local_serial` on it
/// and on a one-data-center `NetworkTopologyStrategy` keyspace (both single
/// data center: LOCAL_SERIAL is a quorum of every replica).
#[tokio::test]
async fn a_keyspace_with_one_replica_opens_on_a_batch_commit_log() {
    let Some(uri) = server_uri("durability_rf1") else {
        return;
    };
    let admin = open(&uri, &unique_ident("bk_admin")).await;
    // A keyspace made behind bakery's back, with `replication`; and a store
    // on it, with `serial` (a panic naming `what` if it does not open).
    let keyspace = async |prefix: &str, replication: String| {
        let name = unique_ident(prefix);
        let cql = format!("CREATE KEYSPACE \"{name}\" WITH replication = {{{replication}}}");
        raw(admin.session(), &cql).await;
        name
    };
    let open_on = async |keyspace: &str, serial, what: &str| {
        CassandraStore::open(config(&uri).with_keyspace(keyspace).with_serial(serial))
            .await
            .unwrap_or_else(|e| panic!("{what} must open: {e}"))
    };
    let simple = keyspace(
        "bk_rf1",
        "'class': 'SimpleStrategy', 'replication_factor': 1".to_string(),
    )
    .await;
    let store = open_on(&simple, Serial::Serial, "rf=1 on a batch commit log").await;
    assert_eq!(applied(&store, &key("rf1/k"), None, "v").await.version, 1);
    let local = open_on(
        &simple,
        Serial::LocalSerial,
        "local_serial on one data center",
    )
    .await;
    assert_eq!(
        local.get(&key("rf1/k")).await.unwrap().map(|r| r.version),
        Some(1)
    );

    let (dc,) = admin
        .session()
        .query_unpaged("SELECT data_center FROM system.local", ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .first_row::<(String,)>()
        .unwrap();
    let replication = format!("'class': 'NetworkTopologyStrategy', '{dc}': 1");
    let nts = keyspace("bk_nts1", replication).await;
    let what = format!("NetworkTopologyStrategy {dc}:1");
    let store = open_on(&nts, Serial::LocalSerial, &what).await;
    assert_eq!(applied(&store, &key("nts/k"), None, "v").await.version, 1);

    raw(admin.session(), &format!("DROP KEYSPACE \"{simple}\"")).await;
    raw(admin.session(), &format!("DROP KEYSPACE \"{nts}\"")).await;
    drop_table(
        admin.session(),
        admin.config().keyspace(),
        admin.config().table(),
    )
    .await;
}
