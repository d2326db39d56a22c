//! A Redis primary with one replica (`redis_primary` and `redis_replica` of
//! `scripts/backends.sh`) fails over in the middle of a run: the primary is
//! SIGKILLed, the replica promoted (`REPLICAOF NO ONE`), and the clients
//! reopen on the replica's URI and go on.
//!
//! The clients are tests/common/cluster.rs's: counter clients doing
//! read-modify-write `put_if_version` through bakery_verify's
//! `RecordingStore`, sequence handles taking ids in small blocks, and lock
//! clients writing a fenced value under the fair lock (and, every other
//! round, once more with their previous token, which the fence must
//! refuse). Each run is one of two modes:
//!
//! - `default`: the URI as users write it. bakery sees the replica at open
//!   and `WAIT`s for it after every call (crates/bakery-redis docs,
//!   "Replicas"). Asserted: no acknowledged increment is lost, no sequence
//!   id is handed out twice, a new handle continues above every id, no
//!   stale fenced write is accepted, each counter is within [acknowledged,
//!   acknowledged + unknown], and the history is linearizable.
//! - `opted out` (`wait_replicas=0&accept_data_loss=true`; refused without
//!   the opt-in): the same run, measured and printed — lost acknowledged
//!   increments, duplicate ids, stale fenced writes accepted, the verdict —
//!   never asserted (on loopback the loss may be zero).
//!
//! and one of two faults: the primary killed while the replica keeps up, or
//! killed after the replica was cut off from it for a moment (pointed at an
//! address where nothing listens, as a network partition would: what the
//! primary acknowledged meanwhile exists only on the primary). A SIGSTOP of
//! the replica does not do that on loopback: the stream waits in the
//! replica's socket buffer and is applied when it resumes.
//!
//! Runs under `BAKERY_FAULT_TESTS=1` (scripts/test.sh, CI), where a missing
//! `BAKERY_REDIS_PRIMARY_URI` or `BAKERY_REDIS_REPLICA_URI` fails; without
//! it, it prints why and returns. Each run first restores the pair
//! (`scripts/backends.sh start redis_replica` restarts a killed primary and
//! makes the replica follow it again), and again at the end.

#![cfg(feature = "redis")]

mod common;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bakery::backends::redis::redis;
use bakery::{Capabilities, ErrorKind, FencedValue, Sequence, VersionedStore};
use bakery_testkit::proxy::with_option;
use bakery_verify::checks::check_sequence;
use bakery_verify::linearizability::{self, Verdict};
use bakery_verify::workload::Counts;
use bakery_verify::History;
use common::cluster::{acked_above, acked_after, eventually, puts_on, read_counts, Plan, Workload};
use common::report::FaultRow;
use common::{backends, fault_tests_uri};

/// The runs share the pair: they take turns.
static PAIR: Mutex<()> = Mutex::new(());

/// How long the restart, the promotion and the clients' recovery may take
/// (a bound, not a speed check).
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// Acknowledged writes awaited before the fault and after the failover:
/// the run's length.
const ACKS_PER_PHASE: u64 = 60;

/// How long the replica is cut off before the primary dies, in the
/// partitioned runs; the opted-out clients go on meanwhile until this many
/// more writes are acknowledged.
const CUT_OFF: Duration = Duration::from_millis(1500);
const ACKS_WHILE_CUT_OFF: u64 = 40;

/// Each call's limit: `WAIT` gets half of it, so while the replica is cut
/// off the default mode's writes end as `Unknown` within it.
const TIMEOUT_MS: &str = "1000";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// The URI as users write it: bakery WAITs for the replica.
    Default,
    /// `wait_replicas=0&accept_data_loss=true`: no waiting.
    OptedOut,
}

/// A raw connection to a server of the pair (the URI without options).
async fn raw(uri: &str) -> redis::aio::MultiplexedConnection {
    let base = uri.split('?').next().unwrap_or(uri);
    redis::Client::open(base)
        .expect("redis client")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to {base}: {e}"))
}

/// `REPLICAOF ARGS…` on the replica.
async fn replicaof(replica: &str, args: [&str; 2]) {
    let answer: String = redis::cmd("REPLICAOF")
        .arg(args[0])
        .arg(args[1])
        .query_async(&mut raw(replica).await)
        .await
        .unwrap_or_else(|e| panic!("REPLICAOF {args:?}: {e}"));
    assert!(answer.starts_with("OK"), "REPLICAOF {args:?}: {answer}");
}

/// Whether the lock clients get fenced writes accepted within `bound`: the
/// fenced value `name` is seen holding two different writes' data. The
/// first of them had returned before the second holder got the lock, and
/// its writer's raise of the fence returned before it wrote: the clients'
/// recorded fenced calls then include accepted ones, whatever a fault does
/// to the calls still in flight.
async fn fenced_writes_seen(store: Arc<dyn VersionedStore>, name: &str, bound: Duration) -> bool {
    let value = FencedValue::new(store, name).expect("fenced value");
    let start = Instant::now();
    let mut first = None;
    while start.elapsed() < bound {
        if let Ok(Some(now)) = value.read().await {
            match &first {
                None => first = Some(now.data),
                Some(first) if *first != now.data => return true,
                Some(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn failover(mode: Mode, partitioned: bool) {
    let Some(primary) = fault_tests_uri("redis_primary", "BAKERY_REDIS_PRIMARY_URI") else {
        return;
    };
    let Some(replica) = fault_tests_uri("redis_replica", "BAKERY_REDIS_REPLICA_URI") else {
        return;
    };
    let _turn = PAIR.lock().unwrap_or_else(PoisonError::into_inner);
    // The pair, in sync: a killed primary restarts from its append-only
    // file and the (promoted) replica follows it again.
    backends("start", "redis_replica");
    let label = match (mode, partitioned) {
        (Mode::Default, false) => "default",
        (Mode::Default, true) => "default, replica cut off",
        (Mode::OptedOut, false) => "opted out",
        (Mode::OptedOut, true) => "opted out, replica cut off",
    };
    let options = |uri: &str| {
        let uri = with_option(uri, "timeout_ms", TIMEOUT_MS);
        match mode {
            Mode::Default => uri,
            Mode::OptedOut => with_option(
                &with_option(&uri, "wait_replicas", "0"),
                "accept_data_loss",
                "true",
            ),
        }
    };
    bakery_testkit::runtime(4).block_on(async {
        if mode == Mode::OptedOut {
            // Not waiting for a connected replica is refused without the opt-in.
            let uri = with_option(&primary, "wait_replicas", "0");
            let refused = bakery::connect(&uri).await.expect_err("wait_replicas=0 accepted");
            assert_eq!(refused.kind(), ErrorKind::Config, "{refused}");
            assert!(refused.message().contains("connected_slaves = 1"), "{refused}");
        }
        let store = bakery::connect(&options(&primary)).await.expect("connect to the primary");
        assert_eq!(
            store.capabilities().contains(Capabilities::PERSISTENT),
            mode == Mode::Default,
            "{label}: PERSISTENT is claimed only when every write reaches the replica"
        );
        let history = History::new();
        let plan = Plan::new("cluster-redis", 2, 4, 3);
        let before = Workload::start(&options(&primary), &history, &plan, 0).await;
        let served = before.served(&history, 0, ACKS_PER_PHASE, RECOVERY_BOUND);
        assert!(served.await, "{label}: no writes acknowledged before the fault");
        // The lock clients are under way too (the phase's length is the
        // counters'): the workload ran on both sides of the failover.
        assert!(
            fenced_writes_seen(store.clone(), &plan.lock, RECOVERY_BOUND).await,
            "{label}: no fenced writes accepted before the fault"
        );

        // The fault: (the replica is cut off, then) the primary dies, and
        // the replica is promoted.
        let cut_from = history.now_ns();
        if partitioned {
            // Port 1: nothing listens, the replica keeps its data and retries.
            replicaof(&replica, ["127.0.0.1", "1"]).await;
            // Bounded: in the default mode nothing is acknowledged now.
            let _ = eventually(CUT_OFF, || {
                acked_after(&history, cut_from) >= ACKS_WHILE_CUT_OFF
            })
            .await;
        }
        let acked_cut_off = acked_after(&history, cut_from);
        tokio::task::spawn_blocking(|| backends("kill", "redis_primary"))
            .await
            .expect("kill the primary");
        replicaof(&replica, ["NO", "ONE"]).await;
        // The old clients give up on the dead primary…
        let mut observed = before.stop().await;
        let stopped_ns = history.now_ns();
        // …what the promoted replica holds is what survived…
        let promoted_store = bakery::connect(&options(&replica))
            .await
            .expect("connect to the promoted replica");
        let survived = read_counts(&*promoted_store, &plan.keys, RECOVERY_BOUND).await;
        let lost: u64 = plan
            .keys
            .iter()
            .zip(&survived)
            .map(|(key, &count)| acked_above(&history, key, stopped_ns, count))
            .sum();
        // …and new clients go on there.
        let after = Workload::start(&options(&replica), &history, &plan, 100).await;
        let served = after.served(&history, stopped_ns, ACKS_PER_PHASE, RECOVERY_BOUND);
        assert!(served.await, "{label}: no writes acknowledged after the failover");
        observed.merge(after.stop().await);
        let late = Sequence::builder(promoted_store.clone(), &plan.sequence)
            .block_size(1)
            .build()
            .expect("late sequence")
            .next()
            .await
            .expect("a new handle after the failover");

        // Figures.
        let counts = Counts::of(&history);
        let report = linearizability::check(&history);
        let sequence = check_sequence(&observed.ids);
        let highest = observed.ids.iter().flatten().copied().max().unwrap_or(0);
        let locks = observed.lock_report();
        let fence = &locks.fence;
        let values = read_counts(&*promoted_store, &plan.keys, RECOVERY_BOUND).await;
        let mut outside = Vec::new();
        for (key, value) in plan.keys.iter().zip(&values) {
            let (acked, unknown) = puts_on(&history, key, None);
            if !(acked..=acked + unknown).contains(value) {
                outside.push(format!("{key} = {value} not in [{acked}, {}]", acked + unknown));
            }
        }
        println!(
            "cluster_redis [{label}]: calls {counts}; {lost} acknowledged increments lost \
             (promoted replica holds {survived:?}); history {:?} ({} ops, {} unknown); \
             {} sequence clients: {} ids, {} duplicates, {} gaps, new handle got {late} (highest before {highest}); \
             {locks}; fenced calls {} accepted, {} rejected; \
             counters {values:?}{}; errors: counter {}, sequence {}{}",
            report.verdict(),
            report.ops(),
            report.unknown(),
            observed.ids.len(),
            sequence.ids,
            sequence.duplicates,
            sequence.gaps,
            fence.accepted,
            fence.rejected,
            if outside.is_empty() { String::new() } else { format!(" ({})", outside.join("; ")) },
            observed.counter_errors,
            observed.sequence_errors,
            if partitioned {
                format!("; acknowledged while the replica was cut off {acked_cut_off}")
            } else {
                String::new()
            },
        );

        FaultRow {
            suite: "cluster",
            backend: "redis".into(),
            setup: match mode {
                Mode::Default => "primary + replica, default (every call WAITs for the replicas)",
                Mode::OptedOut => "primary + replica, wait_replicas=0&accept_data_loss=true",
            }
            .into(),
            fault: if partitioned {
                "replica cut off, primary SIGKILLed, replica promoted"
            } else {
                "primary SIGKILLed, replica promoted"
            }
            .into(),
            counts,
            lost_acked: Some(lost),
            duplicate_ids: Some(sequence.duplicates),
            stale_accepted: Some(locks.stale_accepted()),
            sequence_clients: Some(observed.ids.len()),
            locks: Some((&locks).into()),
            verdict: format!("{:?} ({} ops, {} unknown)", report.verdict(), report.ops(), report.unknown()),
        }
        .record();
        // The workload ran on both sides of the failover, with 3+ separate
        // clients of each kind on each side.
        assert!(sequence.ids > 0, "{label}: {sequence:?}");
        assert!(observed.ids.len() >= 6, "{label}: {} sequence clients", observed.ids.len());
        assert!(locks.clients >= 6 && locks.writes_accepted > 0, "{label}: {locks}");
        if mode == Mode::Default {
            assert_eq!(lost, 0, "{label}: acknowledged increments lost in the failover");
            assert!(sequence.passed(), "{label}: sequence ids: {sequence:?}");
            assert!(late > highest, "{label}: a new handle got {late}, not above {highest}");
            locks.assert_kept(label, 6);
            assert!(outside.is_empty(), "{label}: counters: {outside:?}");
            assert_eq!(
                report.verdict(),
                Verdict::Linearizable,
                "{label}: the history through the failover is not linearizable:\n{report}"
            );
        }
    });
    // The pair again, for the next run and the other tests.
    backends("start", "redis_replica");
}

/// The default, through both faults: nothing acknowledged is lost.
#[test]
fn failover_with_the_default_loses_nothing() {
    for partitioned in [false, true] {
        failover(Mode::Default, partitioned);
    }
}

/// Opted out, through both faults: what is lost is measured and printed.
#[test]
fn failover_opted_out_is_measured() {
    for partitioned in [false, true] {
        failover(Mode::OptedOut, partitioned);
    }
}
