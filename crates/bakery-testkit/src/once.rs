//! Exactly-once recipes on a real store: idempotent execution (`once`) and
//! the high-water-mark consumer (`consumer`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bakery_core::{Capabilities, CountingStore, ErrorKind, Key, VersionedStore};
use bakery_recipes::consumer::{Consumer, Processed};
use bakery_recipes::keys;
use bakery_recipes::once::{Execution, Idempotency, OnBusy, OnFailure, RunError, Status};

use crate::faults::{Fault, FaultStore};
use crate::support::PATIENCE;
use crate::{unique_name, Case, Clients};

pub(crate) fn cases() -> Vec<Case> {
    let mut all = crate::cases_of!("once":
        concurrent_duplicates_run_once,
        completed_key_replays_and_other_payload_is_refused,
        busy_key_waits_or_fails_as_asked,
        crashed_worker_is_taken_over_after_its_lease,
        paused_worker_loses_and_its_result_is_not_stored,
        failure_is_released_or_recorded,
        expired_record_runs_again,
        lost_replies_still_run_once,
        corrupt_record_is_a_typed_error_and_kept,
        new_key_costs_two_round_trips,
        a_listening_waiter_marks_the_claim_and_is_notified,
    );
    all.extend(crate::cases_of!("consumer":
        duplicates_and_reordering_apply_once,
        lost_reply_is_resolved_by_reading_back,
        one_round_trip_per_message,
        old_time_ordered_keys_are_expired,
        corrupt_row_is_a_typed_error_and_kept,
    ));
    all
}

fn once(store: &Arc<dyn VersionedStore>, scope: &str) -> Idempotency {
    Idempotency::builder(store.clone(), scope)
        .build()
        .expect("valid settings")
}

type Ran = Result<Execution<u64>, RunError<String>>;

/// Run key "k" (payload "p") on `worker` with an operation that returns 1
/// once the returned sender is used (or dropped); returns when it started.
async fn run_until_told(
    worker: Idempotency,
) -> (
    tokio::task::JoinHandle<Ran>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (finish_tx, finish) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        worker
            .run("k", b"p", |_| async move {
                let _ = started_tx.send(());
                let _ = finish.await;
                Ok(1)
            })
            .await
    });
    tokio::time::timeout(PATIENCE, started)
        .await
        .expect("the worker never started")
        .expect("started");
    (running, finish_tx)
}

async fn concurrent_duplicates_run_once(clients: Clients) {
    let scope = unique_name("once-dup");
    let runs = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for client in 0..8u64 {
        let (store, scope, runs) = (clients.client().await, scope.clone(), runs.clone());
        tasks.push(tokio::spawn(async move {
            let once = once(&store, &scope);
            once.run("job", b"payload", |_| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                // Long enough for the others to find it in progress.
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, String>(client)
            })
            .await
        }));
    }
    let mut executed = Vec::new();
    let mut results = Vec::new();
    for task in tasks {
        let ran: Ran = tokio::time::timeout(PATIENCE, task)
            .await
            .expect("a duplicate never finished")
            .expect("task");
        let ran = ran.expect("every duplicate gets the result");
        if ran.executed() {
            executed.push(ran.clone().into_inner());
        }
        results.push(ran.into_inner());
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the operation ran more than once"
    );
    assert_eq!(
        executed.len(),
        1,
        "exactly one call reports Executed: {executed:?}"
    );
    assert!(
        results.iter().all(|r| *r == executed[0]),
        "results differ: {results:?}"
    );
}

async fn completed_key_replays_and_other_payload_is_refused(store: Arc<dyn VersionedStore>) {
    let once = once(&store, &unique_name("once-replay"));
    let first: Ran = once.run("k", b"a", |_| async { Ok(7) }).await;
    assert_eq!(first.expect("first"), Execution::Executed(7));
    let again: Ran = once
        .run("k", b"a", |_| async { panic!("must not run again") })
        .await;
    assert_eq!(again.expect("replay"), Execution::Replayed(7));
    let other: Ran = once
        .run("k", b"b", |_| async { panic!("must not run") })
        .await;
    assert!(
        matches!(other, Err(RunError::PayloadMismatch { .. })),
        "{other:?}"
    );
    let bytes = once
        .run_bytes("raw", b"", |_| async {
            Ok::<_, String>("é\0\u{1}".into())
        })
        .await
        .expect("bytes");
    assert_eq!(bytes.into_inner().as_ref(), "é\0\u{1}".as_bytes());
    let replay = once
        .run_bytes("raw", b"", |_| async { Ok::<_, String>("x".into()) })
        .await
        .expect("bytes replay");
    assert_eq!(replay, Execution::Replayed("é\0\u{1}".into()));
    for bad in ["", "a/b", "with space"] {
        let err: Ran = once.run(bad, b"", |_| async { Ok(1) }).await;
        assert!(
            matches!(&err, Err(RunError::Store(e)) if e.kind() == ErrorKind::InvalidInput),
            "{bad:?}: {err:?}"
        );
    }
}

/// A worker that heartbeats keeps its key however long it runs: a caller
/// that fails when busy is refused, and a patient one waits for the result
/// instead of taking the key over. The operation runs until the patient
/// caller has demonstrably found the claim (its claim write conflicted) and
/// then watched it for two whole leases, far longer than a silent worker
/// would have been left alone.
async fn busy_key_waits_or_fails_as_asked(clients: Clients) {
    let scope = unique_name("once-busy");
    // Long beside a heartbeat's gap on a loaded machine (it beats every
    // lease/3): only a worker that stopped beating loses the key here.
    let lease = Duration::from_secs(2);
    let worker = Idempotency::builder(clients.client().await, &scope)
        .lease(lease)
        .build()
        .expect("settings");
    // Runs until the test lets it finish (several leases).
    let (running, finish_tx) = run_until_told(worker).await;
    let impatient = Idempotency::builder(clients.client().await, &scope)
        .on_busy(OnBusy::Fail)
        .build()
        .expect("settings");
    let busy: Ran = impatient.run("k", b"p", |_| async { Ok(2) }).await;
    assert!(
        matches!(busy, Err(RunError::InProgress { attempt: 1, .. })),
        "{busy:?}"
    );
    let watched = Arc::new(CountingStore::new(clients.client().await));
    let patient = Idempotency::builder(watched.clone(), &scope)
        .lease(lease)
        .build()
        .expect("settings");
    let mut waiting = tokio::spawn(async move {
        let ran: Ran = patient.run("k", b"p", |_| async { Ok(3) }).await;
        ran
    });
    // The patient caller's claim write conflicted (or it read the row
    // back): it has seen the claim and times the worker's heartbeat from
    // now on.
    let give_up = tokio::time::Instant::now() + PATIENCE;
    loop {
        let seen = watched.counts();
        if seen.conflicts + seen.gets > 0 {
            break;
        }
        if waiting.is_finished() {
            panic!(
                "the waiter returned without finding the claim: {:?}",
                waiting.await
            );
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the waiter never found the claim"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Keep the worker running for two leases of the waiter's watching: it
    // must not return (nor take over) while the heartbeat goes on.
    tokio::select! {
        early = &mut waiting => panic!(
            "a live worker (heartbeating) must not be taken over: the waiter returned {early:?}"
        ),
        () = tokio::time::sleep(lease * 2) => {}
    }
    let _ = finish_tx.send(());
    let waited: Ran = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the waiter never got the result")
        .expect("task");
    assert_eq!(
        waited.expect("waited"),
        Execution::Replayed(1),
        "a live worker (heartbeating) must not be taken over"
    );
    assert_eq!(
        tokio::time::timeout(PATIENCE, running)
            .await
            .expect("the worker never finished")
            .expect("task")
            .expect("ran"),
        Execution::Executed(1)
    );
}

async fn crashed_worker_is_taken_over_after_its_lease(clients: Clients) {
    let store = clients.store();
    let scope = unique_name("once-crash");
    let lease = Duration::from_millis(200);
    let build = |store: Arc<dyn VersionedStore>| {
        Idempotency::builder(store, &scope)
            .lease(lease)
            .build()
            .expect("settings")
    };
    let crashed = build(clients.client().await);
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let _: Ran = crashed
            .run("k", b"p", |_| async move {
                let _ = started_tx.send(());
                std::future::pending::<()>().await;
                Ok(0)
            })
            .await;
    });
    started.await.expect("started");
    task.abort(); // the worker dies mid-operation
    let _ = task.await;
    let record = build(store.clone())
        .inspect("k")
        .await
        .expect("inspect")
        .expect("claimed");
    assert_eq!(record.status, Status::InProgress);
    let begun = tokio::time::Instant::now();
    let ran: Ran = tokio::time::timeout(
        PATIENCE,
        build(clients.client().await).run("k", b"p", |attempt| async move { Ok(attempt.token()) }),
    )
    .await
    .expect("never taken over");
    assert_eq!(
        ran.expect("taken over"),
        Execution::Executed(2),
        "the takeover's token is 2"
    );
    assert!(
        begun.elapsed() >= lease,
        "taken over before a whole lease of silence"
    );
}

async fn paused_worker_loses_and_its_result_is_not_stored(clients: Clients) {
    let scope = unique_name("once-pause");
    let lease = Duration::from_millis(150);
    let paused_store = Arc::new(FaultStore::new(clients.client().await));
    let slow = Idempotency::builder(paused_store.clone(), &scope)
        .lease(lease)
        .build()
        .expect("settings");
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (go_tx, go) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let ran: Ran = slow
            .run("k", b"p", |_| async move {
                let _ = started_tx.send(());
                let _ = go.await;
                Ok(1)
            })
            .await;
        ran
    });
    started.await.expect("started");
    paused_store.pause(); // its heartbeats stop reaching the store
    let other = Idempotency::builder(clients.client().await, &scope)
        .lease(lease)
        .build()
        .expect("settings");
    let ran: Ran = tokio::time::timeout(
        PATIENCE,
        other.run("k", b"p", |a| async move { Ok(a.token() * 10) }),
    )
    .await
    .expect("never taken over");
    assert_eq!(ran.expect("taken over"), Execution::Executed(20));
    paused_store.resume();
    let _ = go_tx.send(());
    let late = tokio::time::timeout(PATIENCE, task)
        .await
        .expect("paused worker hung")
        .expect("task");
    assert!(
        matches!(
            late,
            Err(RunError::Lost {
                attempt: 1,
                by: 2,
                ..
            })
        ),
        "{late:?}"
    );
    let replay: Ran = other.run("k", b"p", |_| async { Ok(0) }).await;
    assert_eq!(
        replay.expect("replay"),
        Execution::Replayed(20),
        "the paused worker's result overwrote"
    );
}

async fn failure_is_released_or_recorded(store: Arc<dyn VersionedStore>) {
    let released = once(&store, &unique_name("once-release"));
    let failed: Ran = released
        .run("k", b"p", |_| async { Err("boom".to_string()) })
        .await;
    assert!(
        matches!(&failed, Err(RunError::Failed(m)) if m == "boom"),
        "{failed:?}"
    );
    assert!(
        released.inspect("k").await.expect("inspect").is_none(),
        "released"
    );
    let retried: Ran = released
        .run("k", b"p", |a| async move { Ok(a.token()) })
        .await;
    assert_eq!(retried.expect("retry runs"), Execution::Executed(1));

    let recorded = Idempotency::builder(store.clone(), &unique_name("once-record"))
        .on_failure(OnFailure::Record)
        .build()
        .expect("settings");
    let failed: Ran = recorded
        .run("k", b"p", |_| async { Err("boom".to_string()) })
        .await;
    assert!(matches!(failed, Err(RunError::Failed(_))), "{failed:?}");
    let again: Ran = recorded
        .run("k", b"p", |_| async { panic!("recorded: must not run") })
        .await;
    assert!(
        matches!(&again, Err(RunError::FailedBefore { message, attempt: 1, .. }) if message == "boom"),
        "{again:?}"
    );
    assert!(recorded.forget("k").await.expect("forget"));
    let fresh: Ran = recorded.run("k", b"p", |_| async { Ok(5) }).await;
    assert_eq!(fresh.expect("runs after forget"), Execution::Executed(5));
}

/// A finished record is replayed inside its expiry window and runs again
/// after it. The replay is only evidence while the record has not expired
/// yet: a run whose completion, inspection and replay outlasted the window
/// (a slow store, a loaded machine) proves nothing about it and is repeated
/// with a longer window.
async fn expired_record_runs_again(store: Arc<dyn VersionedStore>) {
    let mut window = Duration::from_millis(300);
    let (once, record) = loop {
        let once = Idempotency::builder(store.clone(), &unique_name("once-expire"))
            .expire_after(window)
            .build()
            .expect("settings");
        let first: Ran = once.run("k", b"p", |a| async move { Ok(a.token()) }).await;
        assert_eq!(first.expect("first"), Execution::Executed(1));
        let record = once.inspect("k").await.expect("inspect").expect("stored");
        assert!(record.expires_at_ms.is_some(), "an expiry is stored");
        let replay: Ran = once.run("k", b"p", |_| async { Ok(0) }).await;
        let expired_by_then = expired_now(&record);
        match replay.expect("replay") {
            Execution::Replayed(1) => break (once, record),
            ran @ Execution::Executed(_) if !expired_by_then => {
                panic!("not expired yet, yet the key ran again: {ran:?}")
            }
            Execution::Executed(_) => {
                // The record expired before the replay returned: retry
                // with a window that outlasts this machine's round trips.
                window *= 4;
                assert!(
                    window <= PATIENCE,
                    "no replay ever came back within the expiry window"
                );
            }
            other => panic!("a replay must return the stored result 1: {other:?}"),
        }
    };
    // Wait (bounded) until the wall clock passes the stored expiry.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !expired_now(&record) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the record never expired"
        );
        tokio::time::sleep(window / 4).await;
    }
    let again: Ran = once
        .run("k", b"other payload is fine once expired", |a| async move {
            Ok(a.token())
        })
        .await;
    assert_eq!(again.expect("runs again"), Execution::Executed(2));
}

fn expired_now(record: &bakery_recipes::once::OnceRecord) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    record.expired(now)
}

/// Run `key` with an operation that counts its runs in `runs`.
async fn run_counted(once: &Idempotency, key: &str, runs: &Arc<AtomicUsize>, value: u64) -> Ran {
    let counter = runs.clone();
    once.run(key, b"p", |_| async move {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(value)
    })
    .await
}

async fn lost_replies_still_run_once(store: Arc<dyn VersionedStore>) {
    let faulty = Arc::new(FaultStore::new(store.clone()));
    let once = Idempotency::builder(faulty.clone(), &unique_name("once-unknown"))
        .build()
        .expect("settings");
    let runs = Arc::new(AtomicUsize::new(0));
    // The claim's reply is lost (it applied), then the completion's.
    faulty.script([Fault::LoseReply, Fault::LoseReply]);
    let ran = run_counted(&once, "k", &runs, 9).await;
    assert_eq!(
        ran.expect("resolved by reading back"),
        Execution::Executed(9)
    );
    assert_eq!(faulty.remaining(), 0);
    let replay: Ran = once.run("k", b"p", |_| async { Ok(0) }).await;
    assert_eq!(replay.expect("replay"), Execution::Replayed(9));
    // A claim that was lost on the way: nothing applied; it is retried.
    faulty.script([Fault::LoseRequest]);
    let ran = run_counted(&once, "k2", &runs, 1).await;
    assert_eq!(ran.expect("retried"), Execution::Executed(1));
    assert_eq!(runs.load(Ordering::SeqCst), 2, "each key ran exactly once");
}

async fn corrupt_record_is_a_typed_error_and_kept(store: Arc<dyn VersionedStore>) {
    let scope = unique_name("once-corrupt");
    let once = once(&store, &scope);
    let key = once.row_key("k").expect("key");
    for garbage in [
        &b"{not json"[..],
        br#"{"status":"completed","payload_sha256":"00","attempt":1}"#,
    ] {
        let _ = store
            .put_if_version(
                &key,
                store.get(&key).await.expect("get").map(|r| r.version),
                garbage.into(),
            )
            .await
            .expect("seed");
        let ran: Ran = once
            .run("k", b"p", |_| async {
                panic!("must not run on a corrupt record")
            })
            .await;
        assert!(
            matches!(&ran, Err(RunError::Store(e)) if e.kind() == ErrorKind::Corrupt),
            "{ran:?}"
        );
        assert_eq!(
            once.inspect("k").await.expect_err("corrupt").kind(),
            ErrorKind::Corrupt
        );
        let row = store.get(&key).await.expect("get").expect("kept");
        assert_eq!(&row.value[..], garbage, "the corrupt row was changed");
    }
}

async fn new_key_costs_two_round_trips(store: Arc<dyn VersionedStore>) {
    let counting = Arc::new(CountingStore::new(store.clone()));
    let once = Idempotency::builder(counting.clone(), &unique_name("once-cost"))
        .build()
        .expect("settings");
    let ran: Ran = once.run("k", b"p", |_| async { Ok(1) }).await;
    assert!(ran.expect("ran").executed());
    let c = counting.counts();
    assert_eq!(
        (c.gets, c.puts, c.deletes, c.notifies),
        (0, 2, 0, 0),
        "claim + completion, and no notify (nobody waited): {c:?}"
    );
}

async fn a_listening_waiter_marks_the_claim_and_is_notified(store: Arc<dyn VersionedStore>) {
    let listens = store.capabilities().contains(Capabilities::WATCH);
    let scope = unique_name("once-told");
    // A waiter that listens reads on its own only every lease/4: with this
    // lease, one that missed the notification would outlast PATIENCE.
    let lease = PATIENCE * 8;
    let counting = Arc::new(CountingStore::new(store.clone()));
    let worker = Idempotency::builder(counting.clone(), &scope)
        .lease(lease)
        .build()
        .expect("settings");
    let (running, finish_tx) = run_until_told(worker).await;
    let waiter = Idempotency::builder(store.clone(), &scope)
        .lease(lease)
        .build()
        .expect("settings");
    let waiting = tokio::spawn(async move {
        let ran: Ran = waiter.run("k", b"p", |_| async { Ok(2) }).await;
        ran
    });
    let inspector = Idempotency::builder(store.clone(), &scope)
        .build()
        .expect("settings");
    if listens {
        // The waiter marks the claim before it waits.
        let give_up = tokio::time::Instant::now() + PATIENCE;
        loop {
            let record = inspector.inspect("k").await.expect("inspect");
            if record.as_ref().is_some_and(|r| r.awaited) {
                assert_eq!(record.map(|r| r.attempt), Some(1), "still the first claim");
                break;
            }
            assert!(
                tokio::time::Instant::now() < give_up,
                "the waiter never marked the claim"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let _ = finish_tx.send(());
    let ran = tokio::time::timeout(PATIENCE, running)
        .await
        .expect("the worker never finished")
        .expect("task");
    assert_eq!(ran.expect("ran"), Execution::Executed(1));
    let waited = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the waiter was not told of the completion")
        .expect("task");
    assert_eq!(waited.expect("waited"), Execution::Replayed(1));
    let c = counting.counts();
    assert_eq!(
        c.notifies,
        u64::from(listens),
        "the worker notifies a marked claim's end (where the store can notify): {c:?}"
    );
    let record = inspector
        .inspect("k")
        .await
        .expect("inspect")
        .expect("stored");
    assert_eq!(
        (record.status, record.awaited),
        (Status::Completed, false),
        "the finished record carries no mark"
    );
}

// ---- consumer ----

async fn duplicates_and_reordering_apply_once(clients: Clients) {
    let store = clients.store();
    let name = unique_name("consumer");
    let messages: u128 = 40;
    let mut tasks = Vec::new();
    // Four consumers each get the whole stream (at-least-once delivery from
    // a redelivering broker), with extra re-sends of older keys mixed in.
    for client in 0..4u128 {
        let store = clients.client().await;
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            let consumer = Consumer::builder(store, &name).build().expect("consumer");
            let mut applied = 0;
            for key in 1..=messages {
                for k in [key, key.saturating_sub(1 + client % 3).max(1)] {
                    let out = consumer
                        .process("p", k, |mut seen: Vec<u128>| {
                            seen.push(k);
                            seen
                        })
                        .await
                        .expect("process");
                    if out.applied() {
                        applied += 1;
                    }
                }
            }
            applied
        }));
    }
    let mut applied = 0;
    for task in tasks {
        applied += tokio::time::timeout(PATIENCE, task)
            .await
            .expect("hung")
            .expect("task");
    }
    let consumer = Consumer::builder(store.clone(), &name)
        .build()
        .expect("consumer");
    let (mark, seen) = consumer
        .state::<Vec<u128>>("p")
        .await
        .expect("state")
        .expect("written");
    assert_eq!(mark, messages);
    assert_eq!(
        seen,
        (1..=messages).collect::<Vec<_>>(),
        "every key applied once, in order"
    );
    assert_eq!(applied, messages, "Applied was reported once per key");
    // Another partition is independent.
    let other = consumer.process("q", 1, |n: u64| n + 1).await.expect("q");
    assert_eq!(other, Processed::Applied(1));
    assert!(
        matches!(consumer.process("p", 3, |n: Vec<u128>| n).await.expect("late"), Processed::Duplicate { mark } if mark == messages)
    );
}

async fn lost_reply_is_resolved_by_reading_back(store: Arc<dyn VersionedStore>) {
    let faulty = Arc::new(FaultStore::new(store.clone()));
    let consumer = Consumer::builder(faulty.clone(), &unique_name("consumer-unknown"))
        .build()
        .expect("consumer");
    faulty.script([Fault::LoseReply]);
    let out = consumer
        .process("p", 5, |n: u64| n + 1)
        .await
        .expect("process");
    assert_eq!(
        out,
        Processed::Applied(1),
        "the write applied and is reported so"
    );
    faulty.script([Fault::LoseRequest]);
    let out = consumer
        .process("p", 6, |n: u64| n + 1)
        .await
        .expect("process");
    assert_eq!(out, Processed::Applied(2), "lost on the way: retried once");
    assert_eq!(
        consumer.state::<u64>("p").await.expect("state"),
        Some((6, 2))
    );
}

async fn one_round_trip_per_message(store: Arc<dyn VersionedStore>) {
    let counting = Arc::new(CountingStore::new(store.clone()));
    let consumer = Consumer::builder(counting.clone(), &unique_name("consumer-cost"))
        .build()
        .expect("consumer");
    for key in 1..=20u128 {
        assert!(consumer
            .process("p", key, |n: u64| n + 1)
            .await
            .expect("process")
            .applied());
    }
    let c = counting.counts();
    assert_eq!(
        (c.gets, c.puts),
        (0, 20),
        "one conditional write per message: {c:?}"
    );
    // A second handle (another process) pays one conflict for its stale view.
    let counting2 = Arc::new(CountingStore::new(store.clone()));
    let second = Consumer::builder(counting2.clone(), consumer.name())
        .build()
        .expect("consumer");
    assert!(second
        .process("p", 21, |n: u64| n + 1)
        .await
        .expect("process")
        .applied());
    let c = counting2.counts();
    assert_eq!((c.gets, c.puts, c.conflicts), (0, 2, 1), "{c:?}");
}

async fn old_time_ordered_keys_are_expired(store: Arc<dyn VersionedStore>) {
    let window = Duration::from_secs(60);
    let consumer = Consumer::builder(store.clone(), &unique_name("consumer-age"))
        .reject_older_than(window)
        .build()
        .expect("consumer");
    let fresh = keys::uuid7();
    assert!(consumer
        .process("p", fresh, |n: u64| n + 1)
        .await
        .expect("fresh")
        .applied());
    // A key minted two minutes ago: same layout, older timestamp.
    let old_ms = u128::from(
        u64::try_from(
            (std::time::SystemTime::now() - Duration::from_secs(120))
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis(),
        )
        .expect("ms"),
    );
    let old = (old_ms << 80) | (fresh & ((1u128 << 80) - 1));
    match consumer
        .process("p", old, |n: u64| n + 1)
        .await
        .expect("old")
    {
        Processed::Expired { age } => assert!(age >= Duration::from_secs(119), "{age:?}"),
        other => panic!("an old key must be Expired, got {other:?}"),
    }
    let not_v7 = uuid::Uuid::new_v4().as_u128();
    let err = consumer
        .process("p", not_v7, |n: u64| n + 1)
        .await
        .expect_err("not v7");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(
        consumer.state::<u64>("p").await.expect("state"),
        Some((fresh, 1))
    );
}

async fn corrupt_row_is_a_typed_error_and_kept(store: Arc<dyn VersionedStore>) {
    let name = unique_name("consumer-corrupt");
    let consumer = Consumer::builder(store.clone(), &name)
        .build()
        .expect("consumer");
    let key = Key::new(format!("consumer/{name}/p")).expect("key");
    let mut version = None;
    for garbage in [
        &b"no header"[..],
        b"{\"mark\":\"-1\",\"by\":\"x\"}\n1",
        b"{\"mark\":\"1\",\"by\":\"x\"}\nnot json",
    ] {
        let row = store
            .put_if_version(&key, version, garbage.into())
            .await
            .expect("seed");
        version = row.applied().map(|r| r.version);
        let err = consumer
            .process("p", 2, |n: u64| n + 1)
            .await
            .expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{garbage:?}");
        let stored = store.get(&key).await.expect("get").expect("kept");
        assert_eq!(&stored.value[..], garbage, "the corrupt row was changed");
    }
    for bad in ["", "a/b"] {
        let err = consumer
            .process(bad, 1, |n: u64| n)
            .await
            .expect_err("bad partition");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }
}
