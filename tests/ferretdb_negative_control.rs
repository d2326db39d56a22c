//! A real negative control: the conformance suite must be able to FAIL on a
//! real server.
//!
//! FerretDB v1 (our stand-in for MongoDB) does not apply `findAndModify`
//! atomically (FerretDB issue 3040): two concurrent updates filtered on the
//! same version can both succeed. The MongoDB backend's `update` strategy —
//! correct on real MongoDB — must therefore be CAUGHT losing updates by the
//! suite's race case. The race is repeated a bounded number of times until a
//! lost update shows, so the test is not flaky; if FerretDB ever stops
//! losing updates, this test fails and says so.
//!
//! On a real MongoDB (e.g. from docker/compose.yaml) the same race must
//! pass instead. Needs `BAKERY_MONGODB_URI` (FAILS under `CI=true` without it).

#![cfg(feature = "mongodb")]

use std::sync::Arc;

use bakery::backends::mongodb::{MongoStore, ServerKind};
use bakery::VersionedStore;

/// Races before concluding that the server does not lose updates.
const ATTEMPTS: usize = 10;

/// Where the `update` strategy's races write; dropped at the end.
const UPDATE_COLLECTION: &str = "collection=bakery_negative_control";

fn uri() -> Option<String> {
    bakery_testkit::server_uri("BAKERY_MONGODB_URI", "ferretdb negative control")
}

/// The same URI with the `update` strategy selected through the explicit
/// override: without `allow_unproven_update=true`, bakery refuses
/// `cas=update` on FerretDB (and on any server but MongoDB).
fn with_update_strategy(uri: &str) -> String {
    // A collection of its own: `update` rows in the shared default
    // collection would make every `insert` store refuse it (the layouts do
    // not see each other).
    with_strategy(
        uri,
        &[
            "cas=update",
            "allow_unproven_update=true",
            UPDATE_COLLECTION,
        ],
    )
}

/// `uri` with its strategy options replaced by `options`.
fn with_strategy(uri: &str, options: &[&str]) -> String {
    let (base, query) = uri.split_once('?').unwrap_or((uri, ""));
    let mut kept: Vec<&str> = query
        .split('&')
        .filter(|o| {
            !o.is_empty() && !o.starts_with("cas=") && !o.starts_with("allow_unproven_update=")
        })
        .collect();
    kept.extend(options);
    format!("{base}?{}", kept.join("&"))
}

/// Whether the server is FerretDB, as bakery identifies it at open.
async fn is_ferretdb(uri: &str) -> bool {
    let store = MongoStore::connect(uri)
        .await
        .expect("open the MongoDB test server");
    matches!(store.server().kind(), ServerKind::FerretDb { .. })
}

fn race_fails_once(runtime: &tokio::runtime::Runtime, uri: &str) -> bool {
    let case = bakery_testkit::cases()
        .into_iter()
        .find(|c| c.name == "cas::race_of_8_tasks_loses_no_update")
        .expect("the race case exists");
    runtime.block_on(async {
        let store: Arc<dyn VersionedStore> = bakery::connect(uri).await.expect("connect");
        tokio::spawn(case.run_on(store)).await.is_err()
    })
}

#[test]
fn update_strategy_loses_updates_on_ferretdb_and_the_suite_sees_it() {
    let Some(uri) = uri() else { return };
    let runtime = bakery_testkit::runtime(4);
    let update_uri = with_update_strategy(&uri);
    let ferretdb = runtime.block_on(is_ferretdb(&uri));
    // Drop the race collection whatever the outcome.
    struct DropAfter<'a>(&'a tokio::runtime::Runtime, &'a str);
    impl Drop for DropAfter<'_> {
        fn drop(&mut self) {
            let _ = self.0.block_on(async {
                let store = MongoStore::connect(self.1).await?;
                store
                    .collection()
                    .drop()
                    .await
                    .map_err(|e| bakery::Error::config("test", e.to_string()))
            });
        }
    }
    let _drop = DropAfter(&runtime, &update_uri);
    if ferretdb {
        let detected_at = (1..=ATTEMPTS).find(|_| race_fails_once(&runtime, &update_uri));
        match detected_at {
            Some(attempt) => eprintln!(
                "negative control: the race case caught FerretDB losing updates with cas=update (attempt {attempt} of {ATTEMPTS})"
            ),
            None => panic!(
                "FerretDB did not lose a single update in {ATTEMPTS} races of 8 × 200 CAS with cas=update: \
                 either FerretDB now applies findAndModify atomically (then cas=update may be correct on it — \
                 re-check FerretDB issue 3040 and update docs and this control), or the suite can no longer fail"
            ),
        }
    } else {
        assert!(
            !race_fails_once(&runtime, &update_uri),
            "real MongoDB lost an update with cas=update: the update strategy is broken"
        );
    }
}

#[test]
fn insert_strategy_passes_the_same_race() {
    let Some(uri) = uri() else { return };
    let runtime = bakery_testkit::runtime(4);
    let insert_uri = with_strategy(&uri, &["cas=insert"]);
    for _ in 0..3 {
        assert!(
            !race_fails_once(&runtime, &insert_uri),
            "cas=insert lost an update"
        );
    }
}
