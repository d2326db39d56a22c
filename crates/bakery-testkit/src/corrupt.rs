//! Rows written behind a store's back, for backends' own server tests.
//!
//! Each backend writes its damaged rows its own way (SQL, CQL, a hash, a
//! document); what the store must then do is the same everywhere, so it is
//! checked here. `raw` is the backend's own read of a stored row, behind the
//! store, so a check can see that nothing was changed.

use std::fmt::Debug;

use bakery_core::{DeleteOutcome, Error, ErrorKind, Key, Operation, PutOutcome, VersionedStore};

/// A stored row as a table with a signed 64-bit `version` column holds it:
/// key, value (`None`: a tombstone) and version (`None`: null).
pub type SignedRow = (&'static str, Option<&'static [u8]>, Option<i64>);

/// The case for a backend that keeps versions in a signed 64-bit column
/// (SQL `BIGINT`, CQL `bigint`) which it never leaves zero, negative or
/// null: `write` puts such rows, and two at `i64::MAX`, behind the store's
/// back; each is then [`rejected`] (puts also at the very version stored),
/// or [`at_max_version`].
pub async fn signed_versions<R: PartialEq + Debug>(
    store: &dyn VersionedStore,
    backend: &str,
    mut write: impl AsyncFnMut(SignedRow),
    mut raw: impl AsyncFnMut(&str) -> R,
) {
    let x: &[u8] = b"x";
    for row in [
        ("c/zero", Some(x), Some(0)),
        ("c/neg", Some(x), Some(-5)),
        ("c/negtomb", None, Some(-3)),
        ("c/null", Some(x), None),
        ("c/max", Some(x), Some(i64::MAX)),
        ("c/maxtomb", None, Some(i64::MAX)),
    ] {
        write(row).await;
    }
    for (k, puts) in [
        ("c/zero", &[Some(1), None, Some(0)][..]),
        ("c/neg", &[Some(5)]),
        ("c/negtomb", &[None]),
        ("c/null", &[Some(1), None]),
    ] {
        rejected(store, backend, k, puts, 5, &mut raw).await;
    }
    let max = store.get(&key("c/max")).await.unwrap().expect("c/max");
    assert_eq!((&max.value[..], max.version), (x, i64::MAX as u64));
    at_max_version(store, "c/max", "c/maxtomb", raw).await;
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap_or_else(|e| panic!("{k:?}: {e}"))
}

/// Every call on `k`, whose stored row is corrupt, is an
/// [`ErrorKind::Corrupt`] error of `backend` naming the key in backticks:
/// `get`, a put at each of `puts`, and a delete at `delete`. The stored row
/// (`raw`) is unchanged afterwards. Returns each error with its operation,
/// in that order, for the backend's own further checks.
pub async fn rejected<R: PartialEq + Debug>(
    store: &dyn VersionedStore,
    backend: &str,
    k: &str,
    puts: &[Option<u64>],
    delete: u64,
    mut raw: impl AsyncFnMut(&str) -> R,
) -> Vec<(Operation, Error)> {
    let before = raw(k).await;
    let key = key(k);
    let mut errors = vec![(Operation::Get, store.get(&key).await.map(|_| ()))];
    for expected in puts {
        let result = store.put_if_version(&key, *expected, "new".into()).await;
        errors.push((Operation::Put, result.map(|_| ())));
    }
    let result = store.delete_if_version(&key, delete).await;
    errors.push((Operation::Delete, result.map(|_| ())));
    let errors: Vec<_> = errors
        .into_iter()
        .map(|(op, result)| {
            let err = result.expect_err(&format!("{op:?} {k} must fail"));
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{op:?} {k}: {err}");
            assert_eq!(err.backend(), backend, "{op:?} {k}: {err}");
            assert!(err.message().contains(&format!("`{k}`")), "{op:?}: {err}");
            (op, err)
        })
        .collect();
    assert_eq!(raw(k).await, before, "{k} was changed");
    errors
}

/// `live` holds a value and `tomb` a tombstone, both at the largest
/// version the backend stores (`i64::MAX`): `live` reads, but its next
/// write and a re-create of `tomb` are [`ErrorKind::Exhausted`] (not a wrap)
/// and change nothing (`raw`); a mismatch is still a plain conflict, and
/// `live` can be deleted.
pub async fn at_max_version<R: PartialEq + Debug>(
    store: &dyn VersionedStore,
    live: &str,
    tomb: &str,
    mut raw: impl AsyncFnMut(&str) -> R,
) {
    let top = i64::MAX as u64;
    let (live, tomb_key) = (key(live), key(tomb));
    let row = store.get(&live).await.unwrap().expect("the live row");
    assert_eq!(row.version, top);
    let before = raw(live.as_str()).await;
    let err = store
        .put_if_version(&live, Some(top), "next".into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Exhausted, "{err}");
    let err = store
        .put_if_version(&tomb_key, None, "again".into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Exhausted, "{err}");
    assert_eq!(raw(live.as_str()).await, before, "{live} was changed");
    assert_eq!(store.get(&tomb_key).await.unwrap(), None);
    assert_eq!(
        store
            .put_if_version(&live, Some(1), "v".into())
            .await
            .unwrap(),
        PutOutcome::Conflict(Some(row))
    );
    assert_eq!(
        store.delete_if_version(&live, top).await.unwrap(),
        DeleteOutcome::Deleted
    );
}

/// A stored row as [`tombstone_life_cycle`]'s `raw` reads it, behind the
/// store: `(value, version)`, `value` `None` for a tombstone.
pub type StoredRow = Option<(Option<Vec<u8>>, Option<i64>)>;

/// The life cycle of `life/one` (and `life/empty`) in an empty table of a
/// backend that keeps a tombstone at the deleted version: a delete leaves
/// `(None, version)` behind (`raw`), reads as absent, and refuses a write
/// at the deleted version; a re-create continues above the tombstone
/// (`raw` shows its value and version); versions no row can have (0, the
/// largest `u64`, and both sides of `i64::MAX`) are conflicts, not errors;
/// an empty value is a value, not a tombstone.
pub async fn tombstone_life_cycle(
    store: &dyn VersionedStore,
    mut raw: impl AsyncFnMut(&str) -> StoredRow,
) {
    use crate::applied;
    let k = key("life/one");
    let v1 = applied(store, &k, None, "a").await;
    assert_eq!(v1.version, 1);
    let v2 = applied(store, &k, Some(1), "b").await;
    assert_eq!(v2.version, 2);
    assert_eq!(
        store.delete_if_version(&k, 2).await.unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(raw(k.as_str()).await, Some((None, Some(2))));
    assert_eq!(store.get(&k).await.unwrap(), None);
    let zombie = store.put_if_version(&k, Some(2), "zombie".into()).await;
    assert_eq!(zombie.unwrap(), PutOutcome::Conflict(None));
    assert_eq!(
        store.delete_if_version(&k, 2).await.unwrap(),
        DeleteOutcome::Conflict(None)
    );
    let v3 = applied(store, &k, None, "c").await;
    assert_eq!(v3.version, 3, "a re-create continues above the tombstone");
    assert_eq!(raw(k.as_str()).await, Some((Some(b"c".to_vec()), Some(3))));
    assert_eq!(store.get(&k).await.unwrap(), Some(v3.clone()));
    // A second create conflicts with the re-created row.
    let current = PutOutcome::Conflict(Some(v3.clone()));
    assert_eq!(
        store.put_if_version(&k, None, "d".into()).await.unwrap(),
        current
    );
    // Versions no row can have are conflicts, not errors.
    for bad in [0, u64::MAX, i64::MAX as u64, i64::MAX as u64 + 1] {
        let put = store.put_if_version(&k, Some(bad), "x".into()).await;
        assert_eq!(put.unwrap(), current, "put at {bad}");
        let deleted = store.delete_if_version(&k, bad).await.unwrap();
        assert_eq!(
            deleted,
            DeleteOutcome::Conflict(Some(v3.clone())),
            "delete at {bad}"
        );
    }
    // An empty value is a value, not a tombstone: it can be updated and
    // deleted like any other.
    let empty = applied(store, &k, Some(3), "").await;
    assert_eq!(store.get(&k).await.unwrap(), Some(empty.clone()));
    let v5 = applied(store, &k, Some(4), "e").await;
    assert_eq!(v5.version, 5);
    let e = key("life/empty");
    let created = applied(store, &e, None, "").await;
    assert_eq!(
        store.delete_if_version(&e, created.version).await.unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(applied(store, &e, None, "").await.version, 2);
}
