//! Faults on real servers: stop the server in the middle of a run of CAS
//! operations and sequence reservations, then start it again.
//!
//! Asserts, per backend:
//! - while the server is down every call returns a typed error
//!   (`Unavailable` or `Unknown`) within a bounded time — no panic, no hang;
//! - after the restart, calls succeed again on the SAME store value (the
//!   client reconnects by itself);
//! - no sequence id is handed out twice across the restart, each client's
//!   ids increase, and a client created after the restart continues above;
//! - the CAS counter holds every acknowledged increment (plus possibly some
//!   whose outcome was unknown, never fewer);
//! - two lock clients incrementing a fenced counter under the fair lock
//!   see only typed errors, never get a stale fenced write accepted, and
//!   the counter holds every accepted increment (plus possibly unknown
//!   ones) — mutual exclusion of the data survives the outage.
//!
//! Servers are stopped and started with `scripts/backends.sh`, so this runs
//! only where that script started them: `BAKERY_FAULT_TESTS=1` (set by
//! `scripts/test.sh`, hence in CI). Without it, it prints why and does
//! nothing; with it, a backend whose URI is missing fails.

mod common;

use common::{backends, fault_tests_uri as enabled};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bakery::{
    Bytes, ErrorKind, FencedRead, FencedValue, FencedWrite, Key, Lock, PutOutcome, Sequence,
    VersionedStore,
};

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

#[derive(Default, Debug)]
struct LockTally {
    /// Fenced increments the value accepted.
    accepted: u64,
    /// Fenced writes refused (a newer holder had written): stale writes
    /// stopped by the fence.
    rejected: u64,
    /// Lock or fence calls that failed with a typed error.
    errors: u64,
    /// Fenced writes whose outcome was unknown.
    unknown_writes: u64,
}

/// One lock client: acquire, read the fenced counter, write it + 1 with the
/// grant's token, release — until `stop`, through the outage. Each accepted
/// increment is also counted in `accepted` as it happens.
async fn lock_client(
    store: Arc<dyn VersionedStore>,
    name: String,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
) -> LockTally {
    let mut tally = LockTally::default();
    let lock = Lock::builder(store.clone(), &name)
        .lease(Duration::from_secs(2))
        .acquire_timeout(CALL_BOUND)
        .build()
        .expect("lock");
    let counter = FencedValue::new(store, &name).expect("fenced value");
    while !stop.load(Ordering::Relaxed) {
        let guard = match lock.acquire().await {
            Ok(guard) => guard,
            Err(e) => {
                lock_error(&mut tally, &e);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Raise the fence to our token before reading, so an older holder
        // cannot write between our read and our write.
        let read = tokio::time::timeout(CALL_BOUND, counter.read_fenced(guard.token())).await;
        let n = match read {
            Ok(Ok(FencedRead::Current(data))) => data.map_or(0, |data| {
                std::str::from_utf8(&data)
                    .expect("utf8")
                    .parse::<u64>()
                    .expect("number")
            }),
            Ok(Ok(FencedRead::Rejected { .. })) => {
                tally.rejected += 1;
                let _ = guard.release().await;
                continue;
            }
            Ok(Err(e)) => {
                lock_error(&mut tally, &e);
                let _ = guard.release().await;
                continue;
            }
            Err(_) => panic!("fenced read hung for {CALL_BOUND:?}"),
        };
        let write = tokio::time::timeout(
            CALL_BOUND,
            counter.write(guard.token(), Bytes::from((n + 1).to_string())),
        )
        .await;
        match write {
            Ok(Ok(FencedWrite::Accepted(_))) => {
                tally.accepted += 1;
                accepted.fetch_add(1, Ordering::SeqCst);
            }
            Ok(Ok(FencedWrite::Rejected { .. })) => tally.rejected += 1,
            Ok(Err(e)) => {
                if e.kind() == ErrorKind::Unknown {
                    tally.unknown_writes += 1;
                }
                lock_error(&mut tally, &e);
            }
            Err(_) => panic!("fenced write hung for {CALL_BOUND:?}"),
        }
        if let Err(e) = guard.release().await {
            lock_error(&mut tally, &e);
        }
    }
    tally
}

fn lock_error(tally: &mut LockTally, e: &bakery::Error) {
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Unavailable | ErrorKind::Unknown | ErrorKind::TimedOut | ErrorKind::Lost
        ),
        "lock client: untyped failure during the outage: {e}"
    );
    tally.errors += 1;
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
        let suffix = bakery_testkit::unique_name("faults");
        let key = Key::new(format!("bakery-test/faults/{suffix}")).expect("key");
        let name = format!("faults-{suffix}");
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = Vec::new();
        for _ in 0..4 {
            let seq = Sequence::builder(store.clone(), &name).block_size(5).build().expect("seq");
            clients.push(tokio::spawn(client(store.clone(), key.clone(), seq, stop.clone())));
        }
        let lock_name = format!("faults-lock-{suffix}");
        let fenced_so_far = Arc::new(AtomicU64::new(0));
        let lock_clients: Vec<_> = (0..2)
            .map(|_| {
                let client = lock_client(store.clone(), lock_name.clone(), stop.clone(), fenced_so_far.clone());
                tokio::spawn(client)
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
        while fenced_so_far.load(Ordering::SeqCst) == 0 {
            assert!(
                warm_up.elapsed() < RECOVERY_BOUND,
                "no fenced increment accepted in {RECOVERY_BOUND:?} before the fault"
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
        let mut locked = LockTally::default();
        for client in lock_clients {
            let tally = client.await.expect("lock client panicked");
            locked.accepted += tally.accepted;
            locked.rejected += tally.rejected;
            locked.errors += tally.errors;
            locked.unknown_writes += tally.unknown_writes;
        }
        let fenced = FencedValue::new(store.clone(), &lock_name)
            .expect("fenced value")
            .read()
            .await
            .expect("read fenced counter")
            .map_or(0, |v| std::str::from_utf8(&v.data).expect("utf8").parse::<u64>().expect("number"));
        assert!(locked.accepted > 0, "no fenced increment at all: {locked:?}");
        assert!(
            fenced >= locked.accepted && fenced <= locked.accepted + locked.unknown_writes,
            "fenced counter {fenced} outside [accepted {}, accepted + unknown {}]: {locked:?}",
            locked.accepted,
            locked.accepted + locked.unknown_writes
        );
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
            "faults[{backend}]: {} ids unique, {acked} CAS acked, {unknown} unknown, {unavailable} unavailable, counter {counter}; \
             lock: {} fenced increments accepted, {} stale writes rejected, {} typed errors, fenced counter {fenced}",
            all.len(),
            locked.accepted,
            locked.rejected,
            locked.errors
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
