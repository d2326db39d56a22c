//! The contract of `put_if_version`, `get` and `delete_if_version`.

use std::sync::Arc;

use bakery_core::{
    Bytes, CountingStore, DeleteOutcome, ErrorKind, Key, PutOutcome, Row, VersionedStore,
};

use crate::support::on_clients;
use crate::{unique_key, Case, Clients};

pub(crate) fn cases() -> Vec<Case> {
    crate::cases_of!("cas":
        get_of_missing_key_is_none,
        create_if_absent_applies,
        second_create_conflicts_with_current_row,
        update_at_current_version_applies,
        stale_version_conflicts_with_current_row,
        update_of_missing_key_conflicts_with_none,
        delete_if_version,
        versions_never_repeat_across_delete,
        values_round_trip_byte_for_byte,
        race_of_8_tasks_loses_no_update,
        invalid_keys_are_rejected_before_the_store,
        create_and_delete_churn_never_repeats_a_version,
    )
}

fn applied(outcome: PutOutcome, what: &str) -> Row {
    match outcome {
        PutOutcome::Applied(row) => row,
        PutOutcome::Conflict(current) => {
            panic!("{what}: expected Applied, got Conflict({current:?})")
        }
    }
}

async fn create(store: &dyn VersionedStore, key: &Key, value: &'static str) -> Row {
    let outcome = store
        .put_if_version(key, None, Bytes::from_static(value.as_bytes()))
        .await
        .unwrap_or_else(|e| panic!("create {key}: {e}"));
    applied(outcome, "create of an absent key")
}

/// Update `key` from version `from` to `value`; must apply.
async fn update(store: &dyn VersionedStore, key: &Key, from: &Row, value: &'static str) -> Row {
    let outcome = store
        .put_if_version(
            key,
            Some(from.version),
            Bytes::from_static(value.as_bytes()),
        )
        .await
        .unwrap_or_else(|e| panic!("update {key}: {e}"));
    applied(outcome, "update at the current version")
}

async fn get_of_missing_key_is_none(store: Arc<dyn VersionedStore>) {
    let key = unique_key("missing");
    let got = store.get(&key).await.expect("get");
    assert_eq!(got, None, "a key never written must read as None");
}

async fn create_if_absent_applies(store: Arc<dyn VersionedStore>) {
    let key = unique_key("create");
    let row = create(&*store, &key, "v1").await;
    assert_eq!(row.key, key);
    assert_eq!(&row.value[..], b"v1");
    assert!(
        row.version > 0,
        "versions start above 0, got {}",
        row.version
    );
    let read = store.get(&key).await.expect("get");
    assert_eq!(
        read,
        Some(row),
        "get must return the row the create returned"
    );
}

async fn second_create_conflicts_with_current_row(store: Arc<dyn VersionedStore>) {
    let key = unique_key("create2");
    let first = create(&*store, &key, "first").await;
    let outcome = store
        .put_if_version(&key, None, Bytes::from_static(b"second"))
        .await
        .expect("second create");
    assert_eq!(outcome, PutOutcome::Conflict(Some(first.clone())));
    assert_eq!(
        store.get(&key).await.expect("get"),
        Some(first),
        "the loser wrote nothing"
    );
}

async fn update_at_current_version_applies(store: Arc<dyn VersionedStore>) {
    let key = unique_key("update");
    let v1 = create(&*store, &key, "a").await;
    let v2 = update(&*store, &key, &v1, "b").await;
    assert!(
        v2.version > v1.version,
        "version must grow: {} -> {}",
        v1.version,
        v2.version
    );
    assert_eq!(&v2.value[..], b"b");
    assert_eq!(store.get(&key).await.expect("get"), Some(v2));
}

async fn stale_version_conflicts_with_current_row(store: Arc<dyn VersionedStore>) {
    let key = unique_key("stale");
    let v1 = create(&*store, &key, "a").await;
    let v2 = update(&*store, &key, &v1, "b").await;
    // Count round trips: the conflict must carry the current row, so the
    // caller needs no second read.
    let counting = CountingStore::new(store.clone());
    let outcome = counting
        .put_if_version(&key, Some(v1.version), Bytes::from_static(b"stale"))
        .await
        .expect("stale update");
    assert_eq!(outcome, PutOutcome::Conflict(Some(v2.clone())));
    assert_eq!(counting.counts().total(), 1);
    // And a version that never existed conflicts too.
    let future = store
        .put_if_version(&key, Some(v2.version + 1_000_000), Bytes::from_static(b"x"))
        .await
        .expect("update at a future version");
    assert_eq!(future, PutOutcome::Conflict(Some(v2.clone())));
    assert_eq!(store.get(&key).await.expect("get"), Some(v2));
}

async fn update_of_missing_key_conflicts_with_none(store: Arc<dyn VersionedStore>) {
    let key = unique_key("update-missing");
    let outcome = store
        .put_if_version(&key, Some(1), Bytes::from_static(b"x"))
        .await
        .expect("update of a missing key");
    assert_eq!(outcome, PutOutcome::Conflict(None));
    assert_eq!(
        store.get(&key).await.expect("get"),
        None,
        "nothing may be created"
    );
}

async fn delete_if_version(store: Arc<dyn VersionedStore>) {
    let key = unique_key("delete");
    let v1 = create(&*store, &key, "a").await;
    let v2 = update(&*store, &key, &v1, "b").await;
    let stale = store
        .delete_if_version(&key, v1.version)
        .await
        .expect("stale delete");
    assert_eq!(stale, DeleteOutcome::Conflict(Some(v2.clone())));
    assert_eq!(store.get(&key).await.expect("get"), Some(v2.clone()));
    let done = store
        .delete_if_version(&key, v2.version)
        .await
        .expect("delete");
    assert_eq!(done, DeleteOutcome::Deleted);
    assert_eq!(store.get(&key).await.expect("get"), None);
    let again = store
        .delete_if_version(&key, v2.version)
        .await
        .expect("second delete");
    assert_eq!(again, DeleteOutcome::Conflict(None));
    let update = store
        .put_if_version(&key, Some(v2.version), Bytes::from_static(b"zombie"))
        .await
        .expect("update of a deleted row");
    assert_eq!(
        update,
        PutOutcome::Conflict(None),
        "a deleted row cannot be updated (ABA)"
    );
}

async fn versions_never_repeat_across_delete(store: Arc<dyn VersionedStore>) {
    let key = unique_key("aba");
    let mut seen = Vec::new();
    for round in 0..3 {
        let row = create(&*store, &key, "x").await;
        assert!(
            seen.iter().all(|v| *v < row.version),
            "round {round}: version {} does not exceed earlier versions {seen:?}",
            row.version
        );
        seen.push(row.version);
        let deleted = store
            .delete_if_version(&key, row.version)
            .await
            .expect("delete");
        assert_eq!(deleted, DeleteOutcome::Deleted);
    }
}

async fn values_round_trip_byte_for_byte(store: Arc<dyn VersionedStore>) {
    let key = unique_key("bytes");
    let mut value: Vec<u8> = (0..=255u8).collect();
    value.extend_from_slice("ünïcødé \0 nul and \u{1F600}".as_bytes());
    let row = applied(
        store
            .put_if_version(&key, None, Bytes::from(value.clone()))
            .await
            .expect("create binary"),
        "create binary",
    );
    assert_eq!(&row.value[..], &value[..]);
    let read = store.get(&key).await.expect("get").expect("row exists");
    assert_eq!(
        &read.value[..],
        &value[..],
        "stored bytes must come back unchanged"
    );
    let empty = applied(
        store
            .put_if_version(&key, Some(row.version), Bytes::new())
            .await
            .expect("update to empty"),
        "update to empty",
    );
    let read = store
        .get(&key)
        .await
        .expect("get")
        .expect("an empty value is not a delete");
    assert_eq!(read, empty);
    assert!(read.value.is_empty());
}

/// 8 tasks × 200 increments of one counter by CAS; a lost update would end
/// below 1600. Conflicts are retried with the returned row only.
async fn race_of_8_tasks_loses_no_update(clients: Clients) {
    const TASKS: u64 = 8;
    const INCREMENTS: u64 = 200;
    let key = unique_key("race");
    let store = clients.store();
    let applied = on_clients(&clients, TASKS as usize, |_, store| {
        let key = key.clone();
        async move { increment_n(&*store, &key, INCREMENTS).await }
    });
    let applied_total: u64 = applied.await.into_iter().sum();
    assert_eq!(applied_total, TASKS * INCREMENTS);
    let row = store.get(&key).await.expect("get").expect("counter exists");
    assert_eq!(
        decode_counter(&row),
        TASKS * INCREMENTS,
        "lost updates: every one of {} increments was acknowledged",
        TASKS * INCREMENTS
    );
}

/// Increment the counter at `key` `n` times by CAS; returns how many applied.
pub(crate) async fn increment_n(store: &dyn VersionedStore, key: &Key, n: u64) -> u64 {
    let mut current = store.get(key).await.expect("initial get");
    let mut done = 0;
    while done < n {
        let value = current.as_ref().map(decode_counter).unwrap_or(0) + 1;
        let expected = current.as_ref().map(|row| row.version);
        match store
            .put_if_version(key, expected, Bytes::from(value.to_string()))
            .await
            .expect("increment")
        {
            PutOutcome::Applied(row) => {
                done += 1;
                current = Some(row);
            }
            PutOutcome::Conflict(now) => current = now,
        }
    }
    done
}

fn decode_counter(row: &Row) -> u64 {
    std::str::from_utf8(&row.value)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("counter row {row:?} is not a number"))
}

async fn invalid_keys_are_rejected_before_the_store(_store: Arc<dyn VersionedStore>) {
    for bad in ["", "a b", "x\n", "/lead", "a//b", "ключ", &"k".repeat(513)] {
        let err = Key::new(bad).expect_err("invalid key accepted");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}: {err}");
    }
}

/// 8 tasks × 25 rounds of create-then-delete on one key: a create that
/// conflicts sees a live row, a delete that conflicts sees another version
/// than the one it presented, and no version is ever applied twice — each
/// task's versions increase, and all of them are distinct. A refusal
/// (`Unavailable`) is retried; a lost reply (`Unknown`) is not counted.
async fn create_and_delete_churn_never_repeats_a_version(clients: Clients) {
    const TASKS: usize = 8;
    const ROUNDS: usize = 25;
    let key = unique_key("churn");
    let tasks = on_clients(&clients, TASKS, |_, store| {
        let key = key.clone();
        async move {
            let mut versions = Vec::new();
            for _ in 0..ROUNDS {
                let row = match store.put_if_version(&key, None, "x".into()).await {
                    Ok(PutOutcome::Applied(row)) => {
                        versions.push(row.version);
                        row
                    }
                    Ok(PutOutcome::Conflict(current)) => {
                        current.expect("a create conflicts only with a live row")
                    }
                    Err(e) if e.is_temporary() => continue,
                    Err(e) => panic!("create: {e}"),
                };
                match store.delete_if_version(&key, row.version).await {
                    Ok(DeleteOutcome::Deleted) => {}
                    Ok(DeleteOutcome::Conflict(current)) => assert_ne!(
                        current.map(|c| c.version),
                        Some(row.version),
                        "a delete conflicted with the version it presented"
                    ),
                    Err(e) if e.is_temporary() => {}
                    Err(e) => panic!("delete: {e}"),
                }
            }
            versions
        }
    });
    let mut all = Vec::new();
    for versions in tasks.await {
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "one task's versions must increase: {versions:?}"
        );
        all.extend(versions);
    }
    let count = all.len();
    assert!(
        count > 0,
        "no create applied in {} attempts",
        TASKS * ROUNDS
    );
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "a version was handed out twice");
}
