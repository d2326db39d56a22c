//! The relay against the real PostgreSQL (`scripts/backends.sh start
//! postgres`). Needs BAKERY_POSTGRES_URI; under CI=true a missing one fails.

use std::time::Duration;

use bakery_outbox::{emit, Relay};
use tokio::sync::watch;

const MESSAGES: u64 = 5_000;

/// A producer commits each message while the relay is confirming the
/// previous one, so commits land exactly while the slot advances — the race
/// in which advancing to the end of the WAL skipped a transaction (seen
/// about once per 10,000 messages on PostgreSQL 15, and caught as an
/// error by `confirm` should it recur). Every message must
/// arrive, once, in commit order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_during_a_confirm_are_never_skipped() {
    let Some(uri) = bakery_testkit::server_uri("BAKERY_POSTGRES_URI", "outbox relay") else {
        return;
    };
    let slot = bakery_testkit::unique_name("relay").replace('-', "_");
    let relay = Relay::connect(&uri, &slot)
        .await
        .expect("create the slot")
        .prefix("relaytest")
        .expect("prefix");
    let (delivered, mut seen) = watch::channel(0u64);
    let producer = tokio::spawn(async move {
        let client = bakery_outbox::connect(&uri).await.expect("connect");
        for n in 1..=MESSAGES {
            emit(&client, "relaytest", &n.to_be_bytes())
                .await
                .expect("emit");
            // Wait for the relay, so the next commit races its confirm.
            tokio::time::timeout(Duration::from_secs(10), seen.wait_for(|&d| d >= n))
                .await
                .unwrap_or_else(|_| panic!("message {n} was never delivered"))
                .expect("relay alive");
        }
    });
    let mut last = 0u64;
    while last < MESSAGES && !producer.is_finished() {
        let batch = relay.peek(100).await.expect("peek");
        for message in batch.messages() {
            let payload: [u8; 8] = message.payload[..].try_into().expect("8-byte payload");
            let n = u64::from_be_bytes(payload);
            assert_eq!(n, last + 1, "delivered out of order or twice");
            last = n;
        }
        delivered.send_replace(last);
        relay.confirm(&batch).await.expect("confirm");
        if batch.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let outcome = producer.await;
    relay.drop_slot().await.expect("drop the slot");
    outcome.expect("producer");
    assert_eq!(last, MESSAGES);
}
