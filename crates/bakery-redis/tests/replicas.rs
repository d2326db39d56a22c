//! A primary with a replica (`scripts/backends.sh start redis_primary
//! redis_replica`): every call waits for the replica (`WAIT`) by default,
//! waiting for fewer replicas than are connected is refused unless the URI
//! says `accept_data_loss=true`, and a write the replica does not
//! acknowledge is an `Unknown` outcome (crate docs, "Replicas"). The
//! failover itself is `tests/cluster_redis.rs` at the workspace root.
//!
//! Needs `BAKERY_REDIS_PRIMARY_URI` and `BAKERY_REDIS_REPLICA_URI`; without
//! them each test prints why and passes, except under `CI=true`, where it
//! FAILS.

mod common;

use bakery_core::{Capabilities, ErrorKind, Key, PutOutcome, VersionedStore};
use bakery_redis::RedisStore;
use common::{query, raw, store_with};

/// The tests share the pair, and one pauses the replica: they take turns.
static PAIR: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The pair's URIs and this test's turn on it; `None` without them.
async fn pair(test: &str) -> Option<(String, String, tokio::sync::MutexGuard<'static, ()>)> {
    let primary = bakery_testkit::server_uri("BAKERY_REDIS_PRIMARY_URI", test)?;
    let replica = bakery_testkit::server_uri("BAKERY_REDIS_REPLICA_URI", test)?;
    let turn = PAIR.lock().await;
    Some((primary, replica, turn))
}

/// The replica's `ver` field of `key` under `store`'s prefix.
async fn replica_version(replica: &str, store: &RedisStore, key: &Key) -> Option<u64> {
    let mut conn = raw(replica).await;
    let ver: Option<String> = query(&mut conn, &["HGET", &store.redis_key(key), "ver"]).await;
    ver.map(|v| v.parse().expect("a decimal version"))
}

#[tokio::test]
async fn every_acknowledged_write_is_on_the_replica() {
    let Some((primary, replica, _turn)) = pair("every_acknowledged_write_is_on_the_replica").await
    else {
        return;
    };
    let store = store_with(&primary, "acked-on-replica", |c| c).await;
    assert_eq!(store.wait_replicas(), 1, "the primary has one replica");
    assert!(store.capabilities().contains(Capabilities::PERSISTENT));
    let key = Key::new("counter").expect("key");
    let mut expected = None;
    for n in 1..=200u64 {
        let row = match store
            .put_if_version(&key, expected, n.to_string().into())
            .await
            .unwrap_or_else(|e| panic!("put {n}: {e}"))
        {
            PutOutcome::Applied(row) => row,
            other => panic!("put {n}: {other:?}"),
        };
        // Acknowledged means on the replica: read it there at once.
        let there = replica_version(&replica, &store, &key).await;
        assert!(
            there >= Some(row.version),
            "write {n} acknowledged at version {} but the replica has {there:?}",
            row.version
        );
        expected = Some(row.version);
    }
}

#[tokio::test]
async fn waiting_for_fewer_replicas_is_refused_unless_accepted() {
    let Some((primary, replica, _turn)) = pair("waiting_for_fewer_replicas").await else {
        return;
    };
    let refused = RedisStore::connect(&format!("{primary}?wait_replicas=0"))
        .await
        .expect_err("wait_replicas=0 on a primary with a replica was accepted");
    assert_eq!(refused.kind(), ErrorKind::Config, "{refused}");
    for needle in [
        "connected_slaves = 1",
        "wait_replicas=0",
        "failover",
        "leave wait_replicas unset",
        "accept_data_loss=true",
    ] {
        assert!(
            refused.message().contains(needle),
            "{needle:?} missing from: {refused}"
        );
    }
    // Opted in: it opens, does not wait, and does not claim PERSISTENT.
    let store = store_with(&primary, "opted-in", |c| {
        c.with_wait_replicas(0).with_accept_data_loss(true)
    })
    .await;
    assert_eq!(store.wait_replicas(), 0);
    assert!(!store.capabilities().contains(Capabilities::PERSISTENT));
    let key = Key::new("k").expect("key");
    assert!(store
        .put_if_version(&key, None, "v".into())
        .await
        .expect("put")
        .is_applied());
    // The replica itself is refused: it is not the primary.
    let err = RedisStore::connect(&replica)
        .await
        .expect_err("a replica was accepted");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.message().contains("role = slave"), "{err}");
}

/// SIGSTOP of a process, undone when dropped (also when the test fails).
struct Stopped(String);

impl Stopped {
    fn pause(pid: &str) -> Stopped {
        signal("-STOP", pid);
        Stopped(pid.to_string())
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal("-CONT", &self.0);
    }
}

fn signal(which: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .args([which, pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pid} failed");
}

/// The replica stops acknowledging: a write applies on the primary but is
/// an `Unknown` outcome, a read fails without effect; once the replica is
/// back, both work and the write is there.
#[tokio::test]
async fn a_write_the_replica_does_not_acknowledge_is_unknown() {
    let Some((primary, replica, _turn)) = pair("unacknowledged_write_is_unknown").await else {
        return;
    };
    // `WAIT` gets half of each call's timeout; the other half is the
    // margin for the call's own round trips, so on a busy machine the call
    // still ends with the replica's missing acknowledgement, not with its
    // own deadline.
    let store = store_with(&primary, "unacknowledged", |c| {
        c.with_timeout(std::time::Duration::from_secs(6))
    })
    .await;
    let key = Key::new("k").expect("key");
    let first = store
        .put_if_version(&key, None, "1".into())
        .await
        .expect("put")
        .applied()
        .expect("applied");
    let info: String = query(&mut raw(&replica).await, &["INFO", "server"]).await;
    let pid = info
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .expect("process_id in INFO")
        .trim()
        .to_string();
    {
        let _paused = Stopped::pause(&pid);
        let err = store
            .put_if_version(&key, Some(first.version), "2".into())
            .await
            .expect_err("a write the replica never saw was acknowledged");
        assert_eq!(err.kind(), ErrorKind::Unknown, "{err}");
        assert!(
            err.message().contains("only 0 of 1 replicas acknowledged"),
            "{err}"
        );
        assert!(err.message().contains("a failover may lose it"), "{err}");
        let err = store.get(&key).await.expect_err("an unreplicated read");
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    }
    // Resumed: the write applied on the primary and reached the replica
    // (read once the replica has caught up: a read that finds it still
    // behind fails without effect, and is tried again, within a bound).
    let caught_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let row = loop {
        match store.get(&key).await {
            Ok(row) => break row.expect("row"),
            Err(e)
                if e.kind() == ErrorKind::Unavailable && std::time::Instant::now() < caught_up => {}
            Err(e) => panic!("get after CONT: {e}"),
        }
    };
    assert_eq!(
        (row.version, &row.value[..]),
        (first.version + 1, &b"2"[..])
    );
    assert_eq!(
        replica_version(&replica, &store, &key).await,
        Some(row.version)
    );
}
