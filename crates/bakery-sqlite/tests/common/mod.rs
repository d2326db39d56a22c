//! Helpers shared by the integration tests.
#![allow(dead_code)]

use bakery_core::{Key, PutOutcome, VersionedStore};

/// Increment a decimal counter stored at `key` with a compare-and-set loop,
/// retrying with the row a conflict hands back (no second read). Returns the
/// value written, which must equal the row's version.
pub async fn increment(store: &dyn VersionedStore, key: &Key) -> u64 {
    let mut current = store.get(key).await.expect("get");
    loop {
        let n: u64 = match &current {
            Some(row) => std::str::from_utf8(&row.value).unwrap().parse().unwrap(),
            None => 0,
        };
        let expected = current.as_ref().map(|row| row.version);
        match store
            .put_if_version(key, expected, (n + 1).to_string().into())
            .await
            .expect("put_if_version")
        {
            PutOutcome::Applied(row) => {
                assert_eq!(row.version, n + 1, "version and counter move together");
                return n + 1;
            }
            PutOutcome::Conflict(now) => {
                let now = now.expect("the counter is never deleted");
                assert!(
                    Some(now.version) > expected,
                    "a conflict returns a newer row"
                );
                current = Some(now);
            }
        }
    }
}

/// The decimal number stored in a row's value.
pub fn number(value: &[u8]) -> u64 {
    std::str::from_utf8(value).unwrap().parse().unwrap()
}
