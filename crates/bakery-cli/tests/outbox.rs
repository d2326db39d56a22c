//! The outbox end to end on the real PostgreSQL: producers commit
//! interleaved transactions (some rolled back) while `bakery outbox relay`
//! is `kill -9`-ed and restarted mid-stream; the consumer on a bakery store
//! (SQLite) must end up with every committed message applied exactly once,
//! in commit order.
//!
//! Needs BAKERY_POSTGRES_URI (set by scripts/backends.sh); under CI=true a
//! missing one fails, on a developer machine the test says why and passes.
#![cfg(feature = "outbox")]

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bakery_outbox::{Digest, Message, Relay};
use bakery_recipes::consumer::Consumer;

const BIN: &str = env!("CARGO_BIN_EXE_bakery");
const PRODUCERS: usize = 4;
const TRANSACTIONS: usize = 30;
const KILLS: usize = 6;

fn postgres_uri() -> Option<String> {
    bakery_testkit::server_uri("BAKERY_POSTGRES_URI", "outbox")
}

/// A name no other run uses, in PostgreSQL's slot alphabet.
fn unique_slot(case: &str) -> String {
    bakery_testkit::unique_name(case).replace('-', "_")
}

fn relay_process(pg: &str, slot: &str, prefix: &str, to: &str, idle_exit: bool) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "outbox", "relay", "--from", pg, "--slot", slot, "--prefix", prefix, "--to", to,
    ])
    .args(["--batch", "5", "--poll", "10ms"])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    if idle_exit {
        cmd.arg("--exit-when-idle");
    }
    cmd.spawn().expect("spawn the relay")
}

/// Every message left in `relay`'s slot, confirmed as read.
async fn drain(relay: &Relay) -> Vec<Message> {
    let mut all = Vec::new();
    loop {
        let batch = relay.peek(1000).await.expect("peek");
        if batch.is_empty() {
            return all;
        }
        all.extend(batch.messages().cloned());
        relay.confirm(&batch).await.expect("confirm");
    }
}

#[test]
fn killed_relay_delivers_every_committed_message_exactly_once_in_commit_order() {
    let Some(pg) = postgres_uri() else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let slot = unique_slot("outbox");
        let truth_slot = unique_slot("truth");
        let prefix = bakery_testkit::unique_name("outbox");
        let dir = tempfile::tempdir().expect("dir");
        let to = format!("sqlite://{}", dir.path().join("consumer.db").display());
        // Both slots exist before the first message (a slot sees only what
        // is committed after it was created). The truth slot is read by the
        // library at the end: PostgreSQL's own commit order.
        let truth = Relay::connect(&pg, &truth_slot).await.expect("truth slot").prefix(&prefix).expect("prefix");
        Relay::connect(&pg, &slot).await.expect("slot");

        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (pg, prefix) = (pg.clone(), prefix.clone());
                tokio::spawn(async move {
                    let mut client = bakery_outbox::connect(&pg).await.expect("producer connects");
                    let mut committed = Vec::new();
                    let mut rolled_back = 0;
                    for t in 0..TRANSACTIONS {
                        let tx = client.transaction().await.expect("begin");
                        let count = 1 + (t + p) % 3;
                        let mut payloads = Vec::new();
                        for m in 0..count {
                            let payload = format!("p{p}-t{t}-m{m}");
                            bakery_outbox::emit(&tx, &prefix, payload.as_bytes()).await.expect("emit");
                            payloads.push(payload);
                            // Let other producers' transactions interleave.
                            tokio::task::yield_now().await;
                        }
                        if (t + p) % 5 == 0 {
                            tx.rollback().await.expect("rollback");
                            rolled_back += payloads.len();
                        } else {
                            tx.commit().await.expect("commit");
                            committed.extend(payloads);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    (committed, rolled_back)
                })
            })
            .collect();

        // The relay is killed with SIGKILL and restarted while they run.
        let mut kills = 0;
        let mut relay = relay_process(&pg, &slot, &prefix, &to, false);
        let started = Instant::now();
        while producers.iter().any(|p| !p.is_finished()) || kills < KILLS {
            tokio::time::sleep(Duration::from_millis(60 + 37 * (kills as u64 % 4))).await;
            if kills < KILLS {
                relay.kill().expect("kill -9 the relay");
                let _ = relay.wait();
                kills += 1;
                relay = relay_process(&pg, &slot, &prefix, &to, false);
            }
            assert!(started.elapsed() < Duration::from_secs(300), "producers never finished");
        }
        relay.kill().expect("kill -9 the relay");
        let _ = relay.wait();
        let mut committed = Vec::new();
        let mut rolled_back = 0;
        for p in producers {
            let (c, r) = p.await.expect("producer");
            committed.push(c);
            rolled_back += r;
        }
        // A last relay drains the slot and exits.
        let last = relay_process(&pg, &slot, &prefix, &to, true)
            .wait_with_output()
            .expect("final relay");
        let last_stderr = String::from_utf8_lossy(&last.stderr).into_owned();
        assert!(last.status.success(), "final relay failed: {last_stderr}");

        // A crash after the sink applied a batch but before the slot was
        // confirmed: the batch comes again and is dropped as duplicates.
        let client = bakery_outbox::connect(&pg).await.expect("connect");
        for i in 0..3 {
            bakery_outbox::emit(&client, &prefix, format!("late-{i}").as_bytes()).await.expect("emit");
        }
        committed.push((0..3).map(|i| format!("late-{i}")).collect());
        let crashing = Relay::connect(&pg, &slot).await.expect("slot").prefix(&prefix).expect("prefix");
        let batch = crashing.peek(100).await.expect("peek");
        let store: Arc<dyn bakery::VersionedStore> = bakery::connect(&to).await.expect("consumer store");
        let mut sink = bakery_outbox::ConsumerSink::digest(Consumer::builder(store.clone(), &slot).build().expect("consumer"));
        for m in batch.messages() {
            bakery_outbox::Sink::deliver(&mut sink, m).await.expect("deliver");
        }
        assert_eq!((sink.applied, sink.duplicates), (3, 0));
        drop(crashing); // no confirm: the "crash"
        let again = relay_process(&pg, &slot, &prefix, &to, true).wait_with_output().expect("relay");
        let again_stderr = String::from_utf8_lossy(&again.stderr).into_owned();
        assert!(again.status.success(), "{again_stderr}");
        assert!(again_stderr.contains("3 messages delivered") && again_stderr.contains("0 applied, 3 duplicates"), "{again_stderr}");

        // PostgreSQL's order, read from the untouched truth slot.
        let order = drain(&truth).await;
        truth.drop_slot().await.expect("drop the truth slot");
        Relay::connect(&pg, &slot).await.expect("slot").drop_slot().await.expect("drop the slot");

        let total: usize = committed.iter().map(Vec::len).sum();
        assert!(order.windows(2).all(|w| w[0].key < w[1].key), "keys must strictly increase");
        let delivered: Vec<String> = order
            .iter()
            .map(|m| String::from_utf8(m.payload.to_vec()).expect("utf8"))
            .collect();
        let unique: HashSet<&String> = delivered.iter().collect();
        assert_eq!(unique.len(), delivered.len(), "the slot gave a message twice");
        let expected: HashSet<&String> = committed.iter().flatten().collect();
        assert_eq!(unique, expected, "committed messages, and only those (no rolled-back one)");
        // Each producer's messages in its own commit order.
        let mut position: HashMap<&String, usize> = HashMap::new();
        for (i, d) in delivered.iter().enumerate() {
            position.insert(d, i);
        }
        for c in &committed {
            assert!(c.windows(2).all(|w| position[&w[0]] < position[&w[1]]), "a producer's messages out of order");
        }

        // The consumer: every committed message exactly once, in that order.
        let want = order.iter().fold(Digest::default(), |d, m| d.apply(m.key, &m.payload));
        let consumer = Consumer::builder(store, &slot).build().expect("consumer");
        let (mark, got) = consumer.state::<Digest>(&prefix).await.expect("state").expect("written");
        assert_eq!(got.count as usize, total, "applied count");
        assert_eq!(got, want, "the consumer's state differs from applying each message once in commit order");
        assert_eq!(Some(mark), order.last().map(|m| m.key));
        eprintln!(
            "outbox: {total} committed messages ({rolled_back} rolled back, never delivered) from {PRODUCERS} producers; \
             relay killed {kills} times; consumer applied {}; drain after the kills: {}; after a crash before confirm: {}",
            got.count,
            last_stderr.trim(),
            again_stderr.trim()
        );
    });
}

#[test]
fn bad_slots_are_typed_errors() {
    let Some(pg) = postgres_uri() else { return };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        for bad in ["", "Upper", "with-dash", &"x".repeat(64)] {
            let err = Relay::connect(&pg, bad).await.expect_err("bad name");
            assert_eq!(err.kind(), bakery::ErrorKind::InvalidInput, "{bad:?}");
        }
        // A slot of another plugin is refused, not used.
        let client = bakery_outbox::connect(&pg).await.expect("connect");
        let other = unique_slot("other");
        client
            .execute(
                "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
                &[&other],
            )
            .await
            .expect("create a test_decoding slot");
        let err = Relay::connect(&pg, &other).await.expect_err("other plugin");
        assert_eq!(err.kind(), bakery::ErrorKind::Config);
        assert!(err.to_string().contains("test_decoding"), "{err}");
        client
            .execute("SELECT pg_drop_replication_slot($1)", &[&other])
            .await
            .expect("drop");
        // A slot dropped under a running relay: a Config error, no silent re-create.
        let slot = unique_slot("drop");
        let relay = Relay::connect(&pg, &slot).await.expect("slot");
        client
            .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
            .await
            .expect("drop");
        let err = relay.peek(10).await.expect_err("dropped");
        assert_eq!(err.kind(), bakery::ErrorKind::Config, "{err}");
        let exists = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .expect("count");
        assert_eq!(exists.get::<_, i64>(0), 0, "the relay re-created the slot");
        // A prefix that is not a name is refused before anything is written.
        let err = bakery_outbox::emit(&client, "bad prefix", b"x")
            .await
            .expect_err("bad prefix");
        assert_eq!(err.kind(), bakery::ErrorKind::InvalidInput);
    });
}
