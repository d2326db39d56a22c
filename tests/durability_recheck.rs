//! The durability check repeated while a store is live
//! (`bakery_core::durability::Recheck`), against real servers that change
//! under it: a server that became unsafe stops a store's writes with a
//! `Config` error naming the setting, and a server that is safe again lets
//! them through.
//!
//! - Redis (`redis_primary` with `redis_replica`, `wait_replicas=1`): the
//!   replica is stopped, then started again (scripts/backends.sh).
//! - Redis reconnecting to another server: a Toxiproxy port in front of the
//!   durable `redis` server is swapped for one in front of `redis_volatile`
//!   (`appendonly no`), with a re-check interval of an hour, so only the
//!   reconnect can catch it. Neither server's settings change.
//! - PostgreSQL (`postgres_primary`): `ALTER SYSTEM SET fsync = off` and a
//!   reload, then `RESET`; then the asynchronous `postgres_standby` starts.
//! - Cassandra (one node and the cluster) and MongoDB (FerretDB): no server
//!   here can become unsafe under a live store; the re-check's reads run
//!   before every write and must let them through.
//!
//! Each stops, starts or reconfigures a private server of the cluster
//! scripts (never the shared main ones), so it runs under
//! `BAKERY_FAULT_TESTS=1` (scripts/test.sh, CI), where a missing URI fails;
//! without it, it prints why and returns.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery::{Bytes, Error, ErrorKind, Key, Sequence, VersionedStore};
use bakery_testkit::proxy::{with_option, Toxiproxy};
#[cfg(feature = "postgres")]
use common::psql;
use common::{backends, fault_tests_uri};

/// How long a change may take to reach the store's writes, and a restarted
/// server to come back (a bound, not a speed check).
const BOUND: Duration = Duration::from_secs(60);

/// The interval of the tests that wait for a periodic re-check.
const RECHECK_MS: &str = "200";

fn unique(what: &str) -> String {
    format!("recheck_{what}_{}", std::process::id())
}

/// Conditional writes on `key`, one after another, until one ends as
/// `wanted` says; panics after [`BOUND`]. Returns the time it took and the
/// outcomes on the way (`Ok` or the error kind).
async fn write_until(
    store: &Arc<dyn VersionedStore>,
    key: &Key,
    what: &str,
    wanted: impl Fn(&bakery::Result<()>) -> bool,
) -> (Duration, Vec<Result<(), ErrorKind>>) {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        let current = store.get(key).await.ok().flatten().map(|row| row.version);
        let value = Bytes::from(format!("{}", seen.len()));
        let result = store.put_if_version(key, current, value).await.map(drop);
        if wanted(&result) {
            return (start.elapsed(), seen);
        }
        seen.push(result.map_err(|e| e.kind()));
        assert!(
            start.elapsed() < BOUND,
            "{what}: not within {BOUND:?}; outcomes: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A refusal by the re-check naming `setting`.
fn refused_naming(result: &bakery::Result<()>, setting: &str) -> bool {
    matches!(result, Err(e) if is_refusal(e, setting))
}

fn is_refusal(e: &Error, setting: &str) -> bool {
    e.kind() == ErrorKind::Config
        && e.message().contains("durability re-check")
        && e.message().contains(setting)
        && e.message().contains("accept_data_loss=true")
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_writes_stop_while_the_awaited_replica_is_gone() {
    let Some(primary) = fault_tests_uri("redis_primary", "BAKERY_REDIS_PRIMARY_URI") else {
        return;
    };
    if fault_tests_uri("redis_replica", "BAKERY_REDIS_REPLICA_URI").is_none() {
        return;
    }
    // The pair in sync (restarts a primary a failover test killed).
    backends("start", "redis_replica");
    let mut uri = with_option(&primary, "wait_replicas", "1");
    for (name, value) in [
        ("durability_recheck_ms", RECHECK_MS),
        ("timeout_ms", "1000"),
        ("prefix", &format!("{}:", unique("redis"))),
    ] {
        uri = with_option(&uri, name, value);
    }
    let store = bakery::connect(&uri).await.expect("open on the primary");
    let key = Key::new("row").unwrap();
    let seq = Sequence::builder(store.clone(), "ids")
        .block_size(1)
        .build()
        .expect("sequence");
    let before = seq.next().await.expect("an id with the replica");
    write_until(&store, &key, "a write with the replica", |r| r.is_ok()).await;

    backends("stop", "redis_replica");
    let stopped = scopeguard(|| backends("start", "redis_replica"));
    let (took, seen) = write_until(&store, &key, "refusal without the replica", |r| {
        refused_naming(r, "connected_slaves = 0")
    })
    .await;
    eprintln!("redis replica stopped: writes refused after {took:?}; outcomes before: {seen:?}");
    // Before the refusal a write may have applied on the primary alone:
    // then WAIT fell short and it is Unknown, never Ok.
    assert!(
        seen.iter().all(|r| *r == Err(ErrorKind::Unknown)),
        "a write before the refusal: {seen:?}"
    );
    let e = seq
        .next()
        .await
        .expect_err("an id handed out without the replica");
    assert!(is_refusal(&e, "connected_slaves = 0"), "{e}");

    drop(stopped); // starts the replica again
    let (took, _) = write_until(&store, &key, "writes after the replica is back", |r| {
        r.is_ok()
    })
    .await;
    eprintln!("redis replica back: writes accepted after {took:?}");
    let after = seq.next().await.expect("an id after the replica is back");
    assert!(after > before, "{after} after {before}");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_reconnect_to_a_server_that_forgets_is_refused() {
    let Some(durable) = fault_tests_uri("redis", "BAKERY_REDIS_URI") else {
        return;
    };
    let Some(volatile) = fault_tests_uri("redis_volatile", "BAKERY_REDIS_VOLATILE_URI") else {
        return;
    };
    let Some(api) = Toxiproxy::from_env("durability_recheck") else {
        return;
    };
    let addr = |uri: &str| {
        let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
        rest.split('/').next().unwrap_or(rest).to_string()
    };
    let name = unique("redis_proxy");
    let first = api
        .create(&name, &addr(&durable))
        .await
        .expect("proxy to redis");
    let listen = first.listen().to_string();
    // Only a reconnect can trigger a re-check within the test.
    let mut uri = with_option(&first.uri(&durable), "durability_recheck_ms", "3600000");
    uri = with_option(&uri, "prefix", &format!("{}:", unique("reconnect")));
    let store = bakery::connect(&uri).await.expect("open through the proxy");
    let key = Key::new("row").unwrap();
    write_until(&store, &key, "a write on the durable server", |r| r.is_ok()).await;

    // The same address now leads to a server without an append-only file.
    first.delete().await.expect("delete the proxy");
    let second = api
        .create_on(&unique("redis_proxy2"), &listen, &addr(&volatile))
        .await
        .expect("proxy to redis_volatile");
    let (took, seen) = write_until(&store, &key, "refusal after the reconnect", |r| {
        refused_naming(r, "appendonly = no")
    })
    .await;
    eprintln!(
        "redis reconnected to redis_volatile: refused after {took:?}; outcomes before: {seen:?}"
    );
    assert!(
        !seen.contains(&Ok(())),
        "a write applied on the server that forgets: {seen:?}"
    );
    // Negative control: a store that opted in writes through the same
    // address, so the refusal above is what kept the writes off it.
    let opted_in = with_option(&uri, "accept_data_loss", "true");
    let careless = bakery::connect(&opted_in).await.expect("open opted in");
    write_until(
        &careless,
        &key,
        "an opted-in write on redis_volatile",
        |r| r.is_ok(),
    )
    .await;
    second.delete().await.expect("delete the proxy");
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_writes_stop_while_the_server_is_unsafe() {
    let Some(primary) = fault_tests_uri("postgres_primary", "BAKERY_POSTGRES_PRIMARY_URI") else {
        return;
    };
    backends("start", "postgres_primary");
    // No standby yet: an asynchronous one would be refused at open.
    backends("stop", "postgres_standby");
    let standbys =
        "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'bakery_standby'";
    let start = Instant::now();
    while psql(&primary, standbys) != "0" {
        assert!(start.elapsed() < BOUND, "the standby stays connected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut uri = with_option(&primary, "durability_recheck_ms", RECHECK_MS);
    uri = with_option(&uri, "table", &unique("pg"));
    let store = bakery::connect(&uri).await.expect("open on the primary");
    let key = Key::new("row").unwrap();
    write_until(&store, &key, "a write on the durable server", |r| r.is_ok()).await;

    let reset = scopeguard(|| {
        psql(&primary, "ALTER SYSTEM RESET fsync");
        psql(&primary, "SELECT pg_reload_conf()");
    });
    psql(&primary, "ALTER SYSTEM SET fsync = off");
    assert_eq!(psql(&primary, "SELECT pg_reload_conf()"), "t");
    let (took, _) = write_until(&store, &key, "refusal with fsync off", |r| {
        refused_naming(r, "fsync = off")
    })
    .await;
    eprintln!("postgres fsync=off: writes refused after {took:?}");
    let read = store.get(&key).await.expect("reads go on");
    assert!(read.is_some());

    drop(reset);
    let (took, _) = write_until(&store, &key, "writes with fsync on again", |r| r.is_ok()).await;
    eprintln!("postgres fsync=on again: writes accepted after {took:?}");

    // An asynchronous standby connects: a failover to it could lose commits.
    backends("start", "postgres_standby");
    let (took, _) = write_until(&store, &key, "refusal with an async standby", |r| {
        refused_naming(r, "standbys that do not confirm commits")
    })
    .await;
    eprintln!("postgres async standby: writes refused after {took:?}");
}

/// Cassandra and MongoDB (FerretDB) stores re-check before their writes
/// too; the servers here cannot become unsafe under a live store (every
/// Cassandra node runs `commitlog_sync: batch`, FerretDB is standalone),
/// so this runs the re-check's reads on the real servers — due before
/// every write at a 1 ms interval — and asserts the writes go on.
#[cfg(all(feature = "cassandra", feature = "mongodb"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cassandra_and_mongodb_rechecks_pass_on_durable_servers() {
    let mut uris = Vec::new();
    for (server, var, table) in [
        ("cassandra", "BAKERY_CASSANDRA_URI", "table"),
        ("cassandra_n1", "BAKERY_CASSANDRA_CLUSTER_URI", "table"),
        ("mongodb", "BAKERY_MONGODB_URI", "collection"),
    ] {
        let Some(uri) = fault_tests_uri(server, var) else {
            return;
        };
        let uri = with_option(&uri, "durability_recheck_ms", "1");
        uris.push((server, with_option(&uri, table, &unique("live"))));
    }
    for (server, uri) in uris {
        let store = bakery::connect(&uri).await.expect("open");
        let key = Key::new("row").unwrap();
        let mut version = None;
        for round in 0..20u32 {
            let value = Bytes::from(round.to_string());
            let row = store
                .put_if_version(&key, version, value)
                .await
                .unwrap_or_else(|e| panic!("{server}: write {round} with re-checks: {e}"))
                .applied()
                .unwrap_or_else(|| panic!("{server}: write {round} conflicted"));
            version = Some(row.version);
        }
        assert_eq!(version, Some(20), "{server}");
        let deleted = store.delete_if_version(&key, 20).await;
        assert!(
            matches!(deleted, Ok(bakery::DeleteOutcome::Deleted)),
            "{server}: {deleted:?}"
        );
    }
}

/// MariaDB: `SET GLOBAL innodb_flush_log_at_trx_commit = 2` (as root)
/// under a live store stops its writes with a `Config` error naming the
/// setting; back to `1`, they go on. The shared `mariadb` server, restored
/// by a guard also when the test fails.
#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_writes_stop_while_the_redo_log_is_not_flushed_at_commit() {
    let Some(uri) = fault_tests_uri("mariadb", "BAKERY_MARIADB_URI") else {
        return;
    };
    // As root with the mariadb client (root has no password over TCP on the
    // test server: scripts/backends/mariadb.sh).
    let port = uri
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap_or_else(|| panic!("no port in {uri}"))
        .to_string();
    let set = move |value: u32| {
        let out = std::process::Command::new("mariadb")
            .args([
                "--no-defaults",
                "--protocol=TCP",
                "-h",
                "127.0.0.1",
                "-P",
                &port,
                "-u",
                "root",
                "-e",
            ])
            .arg(format!(
                "SET GLOBAL innodb_flush_log_at_trx_commit = {value}"
            ))
            .output()
            .expect("mariadb client");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let uri = with_option(&uri, "durability_recheck_ms", "1");
    let store = bakery::connect(&with_option(&uri, "table", &unique("live")))
        .await
        .expect("open");
    let key = Key::new("row").unwrap();
    let first = store
        .put_if_version(&key, None, Bytes::from("1"))
        .await
        .expect("durable: written");
    set(2);
    let restore = scopeguard(move || set(1));
    // The verdict of the last re-check stands until it is 1 ms old.
    let mut version = first.applied().map(|r| r.version);
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        match store.put_if_version(&key, version, Bytes::from("x")).await {
            Ok(outcome) => version = outcome.applied().map(|r| r.version),
            Err(e) => break e,
        }
        assert!(
            Instant::now() < deadline,
            "writes went on for 10 s on an unsafe server"
        );
    };
    assert_eq!(refused.kind(), ErrorKind::Config, "{refused}");
    assert!(
        refused
            .message()
            .contains("innodb_flush_log_at_trx_commit = 2"),
        "{refused}"
    );
    drop(restore);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let current = store.get(&key).await.expect("get").map(|r| r.version);
        match store.put_if_version(&key, current, Bytes::from("2")).await {
            Ok(outcome) if outcome.is_applied() => break,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Config && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            Err(e) => panic!("writes did not resume: {e}"),
        }
    }
}

/// DynamoDB (dynalite): the one hazard a live store can meet is its table
/// deleted and created again (its versions start over). The table is
/// deleted behind two stores' backs and re-created by a third open (as
/// bakery creates a missing table on demand): the first store's writes
/// stop with a `Config` refusal naming the table within a re-check, the
/// second's (`accept_data_loss=true`) go on, on the new table.
#[cfg(feature = "dynamodb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_writes_stop_when_the_table_is_recreated_under_the_store() {
    use bakery::backends::dynamodb::DynamoStore;
    let Some(uri) = fault_tests_uri("dynamodb", "BAKERY_DYNAMODB_URI") else {
        return;
    };
    let table = unique("dynamo");
    let uri = with_option(
        &with_option(&uri, "table", &table),
        "durability_recheck_ms",
        RECHECK_MS,
    );
    let strict: Arc<dyn VersionedStore> = bakery::connect(&uri).await.expect("open");
    let lenient: Arc<dyn VersionedStore> =
        bakery::connect(&with_option(&uri, "accept_data_loss", "true"))
            .await
            .expect("open with accept_data_loss");
    let key = Key::new("row").unwrap();
    let (_, seen) = write_until(&strict, &key, "a first write", |r| r.is_ok()).await;
    assert!(seen.is_empty(), "writes before the fault: {seen:?}");
    let raw = DynamoStore::connect(&uri).await.expect("raw");
    raw.client()
        .delete_table()
        .table_name(&table)
        .send()
        .await
        .expect("delete the table");
    // Deleting takes a moment; the next open creates it again once gone.
    let start = Instant::now();
    loop {
        let gone = raw
            .client()
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .is_err();
        if gone {
            break;
        }
        assert!(
            start.elapsed() < BOUND,
            "table not deleted within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _recreated = DynamoStore::connect(&uri)
        .await
        .expect("re-create the table");
    let (took, _) = write_until(&strict, &key, "the refusal", |r| {
        refused_naming(r, "re-created")
    })
    .await;
    eprintln!("dynamodb: writes refused {took:?} after the table was re-created");
    let (_, seen) = write_until(&lenient, &key, "a write with accept_data_loss", |r| {
        r.is_ok()
    })
    .await;
    assert!(
        seen.is_empty(),
        "accept_data_loss=true: refused writes {seen:?}"
    );
    let _ = raw.client().delete_table().table_name(&table).send().await;
}

/// Runs `undo` when dropped, also when the test panics: a server is left
/// as it was found.
fn scopeguard(undo: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(undo) = self.0.take() {
                undo();
            }
        }
    }
    Guard(Some(undo))
}
