//! Faults on real servers: stop the server in the middle of a run of CAS
//! operations and sequence reservations, then start it again.
//!
//! Asserts, per backend:
//! - while the server is down every call returns a typed error
//!   (`Unavailable` or `Unknown`) within a bounded time — no panic, no hang;
//! - after the restart, calls succeed again on the SAME store value (the
//!   client reconnects by itself);
//! - no sequence id is handed out twice across the restart by four
//!   separate clients (each its own `bakery::connect`), each client's ids
//!   increase, and a client created after the restart continues above;
//! - the CAS counter holds every acknowledged increment (plus possibly some
//!   whose outcome was unknown, never fewer);
//! - three separate lock clients incrementing a fenced counter under the
//!   fair lock (tests/common/clients.rs) see only typed errors, get fenced
//!   writes accepted, never a stale one (a write with a released token is
//!   tried deliberately every other round), no two grants their release
//!   confirmed overlap, and the counter holds every accepted increment
//!   (plus possibly unknown ones) — mutual exclusion of the data survives
//!   the outage.
//!
//! Servers are stopped and started with `scripts/backends.sh`, so this runs
//! only where that script started them: `BAKERY_FAULT_TESTS=1` (set by
//! `scripts/test.sh`, hence in CI). Without it, it prints why and does
//! nothing; with it, a backend whose URI is missing fails.

mod common;

use common::clients::{lock_client, lock_on, open_each, LockReport};
use common::{backends, fault_tests_uri as enabled};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bakery::{Bytes, ErrorKind, FencedValue, Key, PutOutcome, Sequence, VersionedStore};
use bakery_verify::History;

/// Separate counter-and-sequence clients, and lock clients.
const CLIENTS: usize = 4;
const LOCK_CLIENTS: usize = 3;

/// The lock's lease: the clients lose their grants during the outage.
const LEASE: Duration = Duration::from_secs(2);

/// A call that takes longer than this is a hang (a bound, not a speed test).
const CALL_BOUND: Duration = Duration::from_secs(30);

/// How long a restarted server and the client's reconnection may take
/// (Cassandra needs tens of seconds to start).
const RECOVERY_BOUND: Duration = Duration::from_secs(180);

#[derive(Default, Debug)]
struct Tally {
    acked: u64,
    unknown: u64,
    unavailable: u64,
    ids: Vec<u64>,
}

/// One client: increments the counter by CAS and takes sequence ids until
/// `stop`, recording every outcome.
async fn client(
    store: Arc<dyn VersionedStore>,
    key: Key,
    seq: Sequence,
    stop: Arc<AtomicBool>,
) -> Tally {
    let mut tally = Tally::default();
    let mut current = None;
    let mut fresh = false;
    while !stop.load(Ordering::Relaxed) {
        if !fresh {
            match tokio::time::timeout(CALL_BOUND, store.get(&key)).await {
                Ok(Ok(row)) => {
                    current = row;
                    fresh = true;
                }
                Ok(Err(e)) => {
                    note(&mut tally, e.kind(), &e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(_) => panic!("get hung for {CALL_BOUND:?}"),
            }
        }
        let n: u64 = current
            .as_ref()
            .map(|r: &bakery::Row| {
                std::str::from_utf8(&r.value)
                    .expect("utf8")
                    .parse()
                    .expect("number")
            })
            .unwrap_or(0);
        let expected = current.as_ref().map(|r| r.version);
        match tokio::time::timeout(
            CALL_BOUND,
            store.put_if_version(&key, expected, Bytes::from((n + 1).to_string())),
        )
        .await
        {
            Ok(Ok(PutOutcome::Applied(row))) => {
                tally.acked += 1;
                current = Some(row);
            }
            Ok(Ok(PutOutcome::Conflict(now))) => current = now,
            Ok(Err(e)) => {
                note(&mut tally, e.kind(), &e);
                fresh = false; // re-read: the outcome may be unknown
            }
            Err(_) => panic!("put_if_version hung for {CALL_BOUND:?}"),
        }
        match tokio::time::timeout(CALL_BOUND, seq.next()).await {
            Ok(Ok(id)) => tally.ids.push(id),
            Ok(Err(e)) => note(&mut tally, e.kind(), &e),
            Err(_) => panic!("Sequence::next hung for {CALL_BOUND:?}"),
        }
    }
    tally
}

fn note(tally: &mut Tally, kind: ErrorKind, e: &bakery::Error) {
    match kind {
        ErrorKind::Unknown => tally.unknown += 1,
        ErrorKind::Unavailable => tally.unavailable += 1,
        other => {
            panic!("during the outage only Unavailable/Unknown are acceptable, got {other:?}: {e}")
        }
    }
}

/// FerretDB (the `mongodb` backend here) stores its data in the project's
/// PostgreSQL, so restarting PostgreSQL is a fault for it too: the two
/// tests take this lock so neither restarts a server under the other.
/// The other servers stand alone and run their tests in parallel.
static POSTGRES_AND_DEPENDENTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn restart_mid_run(backend: &str, var: &str) {
    let Some(uri) = enabled(backend, var) else {
        return;
    };
    // A panic in the other test poisons the lock; that test has failed
    // already and this one still runs.
    let _exclusive = matches!(backend, "postgres" | "mongodb").then(|| {
        POSTGRES_AND_DEPENDENTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = bakery::connect(&uri).await.expect("connect");
        let who = format!("faults[{backend}]");
        let suffix = bakery_testkit::unique_name("faults");
        let key = Key::new(format!("bakery-test/faults/{suffix}")).expect("key");
        let name = format!("faults-{suffix}");
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = Vec::new();
        for own in open_each(&uri, CLIENTS, RECOVERY_BOUND).await {
            let seq = Sequence::builder(own.clone(), &name).block_size(5).build().expect("seq");
            clients.push(tokio::spawn(client(own, key.clone(), seq, stop.clone())));
        }
        let lock_name = format!("faults-lock-{suffix}");
        let clock = History::new();
        let lock_clients: Vec<_> = open_each(&uri, LOCK_CLIENTS, RECOVERY_BOUND)
            .await
            .into_iter()
            .zip(0..)
            .map(|(own, i)| {
                let lock = lock_on(&own, &lock_name, LEASE);
                tokio::spawn(lock_client(lock, clock.clone(), i, stop.clone(), Arc::default()))
            })
            .collect();
        // Let work start, stop the server, keep going, start it again.
        let probe = Sequence::builder(store.clone(), &name).block_size(1).build().expect("probe");
        // Healthy first: an earlier fault test may have restarted a server
        // this one depends on (FerretDB keeps dead PostgreSQL connections
        // until each fails once), so temporary errors are tolerated here,
        // for a bounded time, until 20 calls in a row succeed.
        let warm_up = std::time::Instant::now();
        let mut in_a_row = 0;
        while in_a_row < 20 {
            match probe.next().await {
                Ok(_) => in_a_row += 1,
                Err(e) if e.is_temporary() && warm_up.elapsed() < RECOVERY_BOUND => in_a_row = 0,
                Err(e) => panic!("server not healthy before the fault: {e}"),
            }
        }
        // The lock clients are under way too: a fenced increment accepted
        // before the fault (so the checks below see the lock at work, not
        // only the outage).
        let fenced = FencedValue::new(store.clone(), &lock_name).expect("fenced value");
        while !matches!(fenced.read().await, Ok(Some(_))) {
            assert!(
                warm_up.elapsed() < RECOVERY_BOUND,
                "{who}: no fenced increment accepted in {RECOVERY_BOUND:?} before the fault"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let name_owned = backend.to_string();
        tokio::task::spawn_blocking(move || backends("stop", &name_owned)).await.expect("stop");
        let down = probe.next().await;
        let err = down.expect_err("the server is stopped");
        assert!(matches!(err.kind(), ErrorKind::Unavailable | ErrorKind::Unknown), "{err}");
        let name_owned = backend.to_string();
        tokio::task::spawn_blocking(move || backends("start", &name_owned)).await.expect("start");
        // The same store value must work again (bounded retries while the
        // server finishes starting and pools reconnect).
        let mut after = None;
        let recovery = std::time::Instant::now();
        while recovery.elapsed() < RECOVERY_BOUND {
            match probe.next().await {
                Ok(id) => {
                    after = Some(id);
                    break;
                }
                Err(e) => {
                    assert!(e.is_temporary(), "{e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        let after = after.expect("the store never recovered after the restart");
        for _ in 0..20 {
            probe.next().await.expect("steady after the restart");
        }
        stop.store(true, Ordering::Relaxed);
        let mut all = HashSet::new();
        let (mut acked, mut unknown, mut unavailable) = (0, 0, 0);
        for client in clients {
            let tally = client.await.expect("client panicked");
            assert!(tally.ids.windows(2).all(|w| w[0] < w[1]), "a client's ids went backwards");
            for id in &tally.ids {
                assert!(all.insert(*id), "id {id} handed out twice");
            }
            acked += tally.acked;
            unknown += tally.unknown;
            unavailable += tally.unavailable;
        }
        let mut tallies = Vec::new();
        for client in lock_clients {
            tallies.push(client.await.expect("lock client panicked"));
        }
        let locks = LockReport::of(tallies);
        locks.assert_kept(&who, LOCK_CLIENTS);
        let fenced = locks.assert_count(&who, &store, &lock_name).await;
        // A client created after the restart continues above everything.
        let late = Sequence::builder(store.clone(), &name).block_size(1).build().expect("late");
        let late_id = late.next().await.expect("late client");
        let highest = all.iter().copied().max().unwrap_or(0).max(after);
        assert!(late_id > highest, "late client got {late_id}, below {highest}");
        let counter: u64 = store
            .get(&key)
            .await
            .expect("get")
            .map(|r| std::str::from_utf8(&r.value).expect("utf8").parse().expect("number"))
            .unwrap_or(0);
        assert!(
            counter >= acked && counter <= acked + unknown,
            "counter {counter} outside [acked {acked}, acked + unknown {}]",
            acked + unknown
        );
        eprintln!(
            "{who}: {CLIENTS} sequence clients, {} ids unique, {acked} CAS acked, {unknown} unknown, {unavailable} unavailable, \
             counter {counter}; {locks}, fenced counter {fenced}",
            all.len(),
        );
    });
}

#[test]
fn postgres_restart_mid_run() {
    restart_mid_run("postgres", "BAKERY_POSTGRES_URI");
}

#[test]
fn redis_restart_mid_run() {
    restart_mid_run("redis", "BAKERY_REDIS_URI");
}

#[test]
fn etcd_restart_mid_run() {
    restart_mid_run("etcd", "BAKERY_ETCD_URI");
}

#[test]
fn mongodb_restart_mid_run() {
    restart_mid_run("mongodb", "BAKERY_MONGODB_URI");
}

#[test]
fn cassandra_restart_mid_run() {
    restart_mid_run("cassandra", "BAKERY_CASSANDRA_URI");
}

/// `mysql` is the MariaDB server's alias in scripts/backends.sh.
#[cfg(feature = "mysql")]
#[test]
fn mysql_restart_mid_run() {
    restart_mid_run("mysql", "BAKERY_MARIADB_URI");
}

/// dynalite keeps its tables on disk (`--path`, scripts/backends/dynamodb.sh),
/// so a restart keeps every acknowledged write, as DynamoDB would.
#[test]
fn dynamodb_restart_mid_run() {
    restart_mid_run("dynamodb", "BAKERY_DYNAMODB_URI");
}
