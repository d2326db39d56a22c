//! The Redis durability check, on real servers started by
//! `scripts/backends.sh`:
//!
//! - `redis_volatile` (`--appendonly no --save ''`, Redis's default
//!   `appendonly`) is REFUSED at open, with a `Config` error naming
//!   `appendonly` and the opt-in `accept_data_loss=true`, whichever CAS
//!   strategy;
//! - the project's durable `redis` (`appendonly yes`, `appendfsync always`)
//!   opens;
//! - the NEGATIVE CONTROL shows what the refusal prevents: opted in with
//!   `accept_data_loss=true`, a sequence on the volatile server hands out
//!   ids, the server restarts, and a new sequence of the same name hands out
//!   the same ids again. If that ever stops happening, the control fails
//!   and says so.
//!
//! Needs `BAKERY_REDIS_VOLATILE_URI` and `BAKERY_REDIS_URI`
//! (`scripts/backends.sh start redis redis_volatile`); without them it
//! prints why and passes, except under `CI=true`, where it FAILS.

#![cfg(feature = "redis")]

mod common;

use common::backends;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bakery::{ErrorKind, Sequence};

/// The volatile server is restarted by the negative control: the tests that
/// use it take turns.
static VOLATILE: Mutex<()> = Mutex::new(());

/// The volatile server's URI, and this test's turn on it (held until the
/// guard drops); `None` without the server.
fn volatile_server() -> Option<(String, MutexGuard<'static, ()>)> {
    let uri = bakery_testkit::server_uri("BAKERY_REDIS_VOLATILE_URI", "redis_durability")?;
    Some((uri, VOLATILE.lock().unwrap_or_else(PoisonError::into_inner)))
}

/// How long the restarted server and a new client may take to answer.
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// `uri` with `options` added to its query.
fn with_options(uri: &str, options: &[&str]) -> String {
    let separator = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{separator}{}", options.join("&"))
}

/// 250 ids of a new sequence `name` (blocks of 100, no prefetch).
async fn take_250(
    store: std::sync::Arc<dyn bakery::VersionedStore>,
    name: &str,
    when: &str,
) -> Vec<u64> {
    let seq = Sequence::builder(store, name)
        .block_size(100)
        .prefetch(false)
        .build()
        .expect("sequence");
    let mut ids = Vec::new();
    for _ in 0..250 {
        ids.push(
            seq.next()
                .await
                .unwrap_or_else(|e| panic!("next {when}: {e}")),
        );
    }
    ids
}

fn unique_name(case: &str) -> String {
    bakery_testkit::unique_name(&format!("durability-{case}"))
}

#[test]
fn a_server_without_aof_is_refused_by_both_strategies() {
    let Some((uri, _turn)) = volatile_server() else {
        return;
    };
    bakery_testkit::runtime(2).block_on(async {
        for cas in ["script", "watch"] {
            let uri = with_options(&uri, &[&format!("cas={cas}")]);
            let err = match bakery::connect(&uri).await {
                Ok(_) => panic!("cas={cas}: a Redis with appendonly no was accepted"),
                Err(err) => err,
            };
            assert_eq!(err.kind(), ErrorKind::Config, "cas={cas}: {err}");
            assert_eq!(err.backend(), "redis", "cas={cas}: {err}");
            assert!(!err.is_temporary(), "cas={cas}: {err}");
            for needle in [
                "appendonly = no",
                "since the last RDB snapshot",
                "appendonly yes and appendfsync always",
                "accept_data_loss=true",
            ] {
                assert!(
                    err.message().contains(needle),
                    "cas={cas}: {needle:?} missing from: {err}"
                );
            }
            // Opted in, the same server opens (and answers).
            let store = bakery::connect(&with_options(&uri, &["accept_data_loss=true"]))
                .await
                .unwrap_or_else(|e| panic!("cas={cas} with accept_data_loss=true: {e}"));
            let key = bakery::Key::new(unique_name("opt-in")).expect("key");
            assert_eq!(store.get(&key).await.expect("get"), None);
            assert!(
                !store
                    .capabilities()
                    .contains(bakery::Capabilities::PERSISTENT),
                "cas={cas}: a store on a server that forgets must not claim PERSISTENT"
            );
        }
    });
}

#[test]
fn the_durable_server_opens() {
    let Some(uri) = bakery_testkit::server_uri("BAKERY_REDIS_URI", "redis_durability") else {
        return;
    };
    bakery_testkit::runtime(2).block_on(async {
        for cas in ["script", "watch"] {
            let uri = with_options(&uri, &[&format!("cas={cas}")]);
            let store = bakery::connect(&uri).await.unwrap_or_else(|e| {
                panic!(
                    "cas={cas}: the project's Redis (appendonly yes, appendfsync always) was refused: {e}"
                )
            });
            assert!(
                store
                    .capabilities()
                    .contains(bakery::Capabilities::PERSISTENT),
                "cas={cas}: a durable server's store claims PERSISTENT"
            );
            let seq = Sequence::builder(store, &unique_name("durable"))
                .block_size(10)
                .build()
                .expect("sequence");
            assert_eq!(seq.next().await.expect("next"), 1, "cas={cas}");
        }
    });
}

/// NEGATIVE CONTROL: what `accept_data_loss=true` lets through. The
/// volatile server forgets the sequence's row at the restart, and a new
/// sequence of the same name hands out the same ids again.
#[test]
fn opted_in_a_restart_hands_out_the_same_ids_again() {
    let Some((uri, _turn)) = volatile_server() else {
        return;
    };
    let uri = with_options(&uri, &["accept_data_loss=true"]);
    let name = unique_name("restart");
    let rt = bakery_testkit::runtime(2);
    let before: Vec<u64> = rt.block_on(async {
        let store = bakery::connect(&uri).await.expect("connect, opted in");
        take_250(store, &name, "before the restart").await
    });
    assert_eq!(before.len(), 250);
    assert_eq!(
        before.iter().collect::<HashSet<_>>().len(),
        before.len(),
        "ids repeat even without a restart"
    );

    backends("restart", "redis_volatile");

    let after: Vec<u64> = rt.block_on(async {
        let started = Instant::now();
        let store = loop {
            match bakery::connect(&uri).await {
                Ok(store) => break store,
                Err(e) if e.is_temporary() && started.elapsed() < RECOVERY_BOUND => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("connect after the restart: {e}"),
            }
        };
        take_250(store, &name, "after the restart").await
    });
    let handed_out: HashSet<u64> = before.iter().copied().collect();
    let duplicates: Vec<u64> = after
        .iter()
        .copied()
        .filter(|id| handed_out.contains(id))
        .collect();
    eprintln!(
        "negative control: after the restart of a Redis with appendonly no, {} of {} ids were handed out again (first {:?}, last {:?})",
        duplicates.len(),
        after.len(),
        duplicates.first(),
        duplicates.last()
    );
    assert!(
        !duplicates.is_empty(),
        "no id was handed out twice across the restart of a server with appendonly no: \
         did it keep its data (a snapshot, an append-only file)? Then this control no longer \
         shows the hazard that the durability check refuses"
    );
}
