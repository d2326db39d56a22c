//! Against a real etcd server, named by `BAKERY_ETCD_URI`
//! (`scripts/backends.sh start etcd` writes it to `target/backends.env`).
//! Without it the tests print why and pass on a developer machine, and FAIL
//! under `CI=true`.
//!
//! The unreachable-endpoint test needs no server and always runs.

use std::time::Duration;

use bakery_core::{Bytes, DeleteOutcome, ErrorKind, Key, PutOutcome, Result, Row, VersionedStore};
use bakery_etcd::{EtcdConfig, EtcdStore};
use bakery_testkit::watch::{count_reaches, is_quiet, next_wake};

/// The server URI, or `None` (with the reason printed) on a developer
/// machine without one; panics under CI.
fn server_uri(test: &str) -> Option<String> {
    bakery_testkit::server_uri("BAKERY_ETCD_URI", test)
}

/// A prefix no other test or run uses.
fn run_prefix(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("bakery-test/{test}-{}-{nanos}/", std::process::id())
}

/// A store on the test server under `prefix`.
async fn open(uri: &str, prefix: &str) -> EtcdStore {
    let config = EtcdConfig::from_uri(uri)
        .unwrap_or_else(|e| panic!("BAKERY_ETCD_URI: {e}"))
        .with_prefix(prefix);
    EtcdStore::open(config)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to etcd: {e}"))
}

/// Run the test `name`'s `body` with the server URI and a prefix no other
/// test or run uses; without a server, print why and pass (see
/// [`server_uri`]).
async fn on_server(name: &str, body: impl AsyncFnOnce(&str, &str) -> Result<()>) -> Result<()> {
    let Some(uri) = server_uri(name) else {
        return Ok(());
    };
    body(&uri, &run_prefix(name)).await
}

/// [`on_server`] with a store under the prefix.
async fn on_store(name: &str, body: impl AsyncFnOnce(&str, EtcdStore) -> Result<()>) -> Result<()> {
    on_server(name, async |uri, prefix| {
        body(uri, open(uri, prefix).await).await
    })
    .await
}

fn applied(outcome: PutOutcome) -> Row {
    match outcome {
        PutOutcome::Applied(row) => row,
        PutOutcome::Conflict(current) => panic!("expected Applied, got Conflict({current:?})"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn version_of_a_cas_is_the_mod_revision_a_get_shows() -> Result<()> {
    on_store("revision", async |_, store| {
        let key = Key::new("row")?;
        let created = applied(store.put_if_version(&key, None, "a".into()).await?);
        assert_eq!(store.get(&key).await?, Some(created.clone()));
        let updated = applied(
            store
                .put_if_version(&key, Some(created.version), "b".into())
                .await?,
        );
        assert!(updated.version > created.version);
        assert_eq!(
            store.get(&key).await?,
            Some(updated.clone()),
            "the version a CAS returns is the mod_revision a get shows"
        );

        // A write to another key moves the (global) revision: the next version
        // of `row` skips it, and still equals what a get shows.
        let other = applied(
            store
                .put_if_version(&Key::new("other")?, None, "x".into())
                .await?,
        );
        assert!(other.version > updated.version);
        let third = applied(
            store
                .put_if_version(&key, Some(updated.version), "c".into())
                .await?,
        );
        assert!(third.version > other.version, "revisions are global");
        assert_eq!(store.get(&key).await?, Some(third.clone()));

        // Conflicts return the current row, with its mod_revision.
        let stale = store
            .put_if_version(&key, Some(created.version), "stale".into())
            .await?;
        assert_eq!(stale, PutOutcome::Conflict(Some(third.clone())));
        let stale = store.delete_if_version(&key, updated.version).await?;
        assert_eq!(stale, DeleteOutcome::Conflict(Some(third.clone())));

        // Delete and re-create: the new incarnation is above the deleted one.
        assert_eq!(
            store.delete_if_version(&key, third.version).await?,
            DeleteOutcome::Deleted
        );
        assert_eq!(store.get(&key).await?, None);
        let reborn = applied(store.put_if_version(&key, None, "d".into()).await?);
        assert!(reborn.version > third.version);
        assert_eq!(store.get(&key).await?, Some(reborn));
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn versions_that_no_key_can_have_always_conflict() -> Result<()> {
    on_store("impossible", async |_, store| {
        let missing = Key::new("missing")?;
        // An absent key's mod_revision is 0 in etcd: `Some(0)` must not create
        // it, and a delete at 0 must not "delete" nothing.
        for expected in [0, u64::MAX, i64::MAX as u64 + 1] {
            let put = store
                .put_if_version(&missing, Some(expected), "x".into())
                .await?;
            assert_eq!(put, PutOutcome::Conflict(None), "{expected}");
            let delete = store.delete_if_version(&missing, expected).await?;
            assert_eq!(delete, DeleteOutcome::Conflict(None), "{expected}");
        }
        assert_eq!(store.get(&missing).await?, None);
        let key = Key::new("present")?;
        let row = applied(store.put_if_version(&key, None, "x".into()).await?);
        for expected in [0, u64::MAX] {
            let put = store
                .put_if_version(&key, Some(expected), "y".into())
                .await?;
            assert_eq!(put, PutOutcome::Conflict(Some(row.clone())));
            let delete = store.delete_if_version(&key, expected).await?;
            assert_eq!(delete, DeleteOutcome::Conflict(Some(row.clone())));
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn prefixes_isolate_stores() -> Result<()> {
    on_server("isolation", async |uri, prefix| {
        let a = open(uri, &format!("{prefix}a/")).await;
        let b = open(uri, &format!("{prefix}b/")).await;
        let key = Key::new("same/name")?;
        let in_a = applied(a.put_if_version(&key, None, "from a".into()).await?);
        assert_eq!(b.get(&key).await?, None, "b must not see a's key");
        // b creates its own row under the same name; a's is untouched.
        let in_b = applied(b.put_if_version(&key, None, "from b".into()).await?);
        assert_eq!(a.get(&key).await?, Some(in_a.clone()));
        assert_eq!(b.get(&key).await?, Some(in_b.clone()));
        // Versions of one store do not act on the other's row.
        assert_eq!(
            b.delete_if_version(&key, in_a.version).await?,
            DeleteOutcome::Conflict(Some(in_b.clone()))
        );
        assert_eq!(
            a.delete_if_version(&key, in_a.version).await?,
            DeleteOutcome::Deleted
        );
        assert_eq!(b.get(&key).await?, Some(in_b));
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn values_past_the_request_limit_are_invalid_input() -> Result<()> {
    on_store("large", async |_, store| {
        let key = Key::new("big")?;
        // etcd's default --max-request-bytes is 1.5 MiB.
        let big = Bytes::from(vec![b'x'; 2 * 1024 * 1024]);
        let err = store
            .put_if_version(&key, None, big)
            .await
            .expect_err("a 2 MiB value must be refused");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert_eq!(err.backend(), "etcd");
        assert!(err.message().contains("1.5 MiB"), "{err}");
        assert_eq!(store.get(&key).await?, None, "nothing was written");
        // A value well inside the limit round-trips.
        let ok = Bytes::from(vec![7u8; 1024 * 1024]);
        let row = applied(store.put_if_version(&key, None, ok.clone()).await?);
        assert_eq!(store.get(&key).await?.map(|r| r.value), Some(ok));
        assert_eq!(
            store.delete_if_version(&key, row.version).await?,
            DeleteOutcome::Deleted
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_uri_from_env_and_capabilities() -> Result<()> {
    let Some(uri) = server_uri("connect_uri_from_env_and_capabilities") else {
        return Ok(());
    };
    let store = EtcdStore::connect(&uri).await?;
    use bakery_core::Capabilities as C;
    assert_eq!(store.backend(), "etcd");
    assert_eq!(
        store.capabilities(),
        C::PERSISTENT | C::SHARED | C::LINEARIZABLE_READS | C::WATCH
    );
    assert!(format!("{store:?}").contains("EtcdStore"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_and_deletes_wake_a_watch_subscribed_before_them() -> Result<()> {
    on_store("watch-wakes", async |_, store| {
        let key = Key::new("lock/a")?;
        let mut watch = store.watch(&key).await?.expect("etcd can watch");
        let row = applied(store.put_if_version(&key, None, "held".into()).await?);
        assert!(next_wake(&mut watch).await, "a create wakes the watch");
        assert_eq!(
            store.delete_if_version(&key, row.version).await?,
            DeleteOutcome::Deleted
        );
        assert!(next_wake(&mut watch).await, "a delete wakes the watch");
        // A failed CAS writes nothing, so it wakes nobody.
        let stale = store
            .put_if_version(&key, Some(row.version), "x".into())
            .await?;
        assert_eq!(stale, PutOutcome::Conflict(None));
        assert!(is_quiet(&mut watch).await, "a conflict woke the watch");
        // `notify` is a no-op on etcd (the watch sees every write).
        store.notify(&key).await?;
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_a_watch_ends_its_task() -> Result<()> {
    on_store("watch-drop", async |_, store| {
        let key = Key::new("lock/c")?;
        let kept = store.watch(&key).await?.expect("etcd can watch");
        let dropped = store.watch(&key).await?.expect("etcd can watch");
        assert_eq!(store.active_watches(), 2);
        drop(dropped);
        count_reaches("active watches", || store.active_watches(), 1).await;
        // Clones share the count; the remaining watch still works.
        let clone = store.clone();
        let mut kept = kept;
        applied(clone.put_if_version(&key, None, "x".into()).await?);
        assert!(next_wake(&mut kept).await);
        drop(kept);
        count_reaches("active watches", || clone.active_watches(), 0).await;
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_outlives_the_call_timeout() -> Result<()> {
    on_server("watch-long", async |uri, prefix| {
        let config = EtcdConfig::from_uri(uri)
            .unwrap_or_else(|e| panic!("BAKERY_ETCD_URI: {e}"))
            .with_prefix(prefix)
            .with_timeout(Duration::from_millis(300));
        let store = EtcdStore::open(config).await?;
        // The write that wakes it comes from a store with the default timeout:
        // a commit (an fsync) on a busy machine may take longer than 300 ms,
        // and this test is about the watch, not the write.
        let writer = open(uri, prefix).await;
        let key = Key::new("lock/d")?;
        // Opening the watch is itself a call under the 300 ms timeout: one
        // that missed it on a busy machine is tried again (bounded).
        let until = std::time::Instant::now() + Duration::from_secs(30);
        let mut watch = loop {
            match store.watch(&key).await {
                Ok(watch) => break watch.expect("etcd can watch"),
                Err(e) if e.is_temporary() && std::time::Instant::now() < until => {}
                Err(e) => return Err(e),
            }
        };
        // Three call timeouts pass: the stream must neither end (`changed()`
        // returning false) nor wake.
        let quiet = tokio::time::timeout(Duration::from_millis(900), watch.changed()).await;
        assert!(
            quiet.is_err(),
            "the watch ended or woke by itself: {quiet:?}"
        );
        applied(writer.put_if_version(&key, None, "x".into()).await?);
        assert!(next_wake(&mut watch).await);
        Ok(())
    })
    .await
}
