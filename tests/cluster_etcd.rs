//! A three-member etcd cluster (`etcd_m1..3` of `scripts/backends.sh`)
//! loses its leader to SIGKILL in the middle of a run, elects another,
//! and gets the old leader back.
//!
//! Counter clients (read-modify-write `put_if_version`, recorded by
//! bakery_verify's `RecordingStore`) three sequence clients and three
//! lock clients writing a fenced value (each on a store of its own) run on the
//! cluster's URI (all three endpoints) throughout; a monitor asks every
//! member for its status (`etcdctl endpoint status`) every 100 ms.
//! Asserted:
//! - every error is typed (`Unavailable`, `Unknown`, `TimedOut`), no call
//!   hangs;
//! - the two remaining members elect a new leader, the clients' writes are
//!   acknowledged again after the kill and again after the restart, and
//!   the restarted member rejoins;
//! - the recorded history is linearizable (bakery_verify's checker);
//! - no sequence id is handed out twice, each client's ids increase;
//! - each counter holds every acknowledged increment and at most the
//!   acknowledged plus the unknown ones;
//! - the lock clients get fenced writes accepted, never a stale one (a
//!   write with a released token, tried deliberately), and no two grants
//!   whose release confirmed them overlap.
//!
//! Printed: calls ok/failed/unknown, elections (raft terms) observed, how
//! long no live member named a live leader.
//!
//! Runs under `BAKERY_FAULT_TESTS=1` (scripts/test.sh, CI), where a missing
//! `BAKERY_ETCD_CLUSTER_URI` fails; without it, it prints why and returns.

mod common;

use std::time::Duration;

use bakery_verify::History;
use common::cluster::{acked_after, assert_kept, eventually, Plan, Sampler, Workload};
use common::etcd::{leader_now, members_up, status};
use common::{backends, fault_tests_uri};

const MEMBERS: [&str; 3] = ["etcd_m1", "etcd_m2", "etcd_m3"];

/// How long an election, a restart and the client's failover may take (a
/// bound, not a speed check).
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// Acknowledged writes awaited in each phase (before the kill, after it,
/// after the restart): the run's length.
const ACKS_PER_PHASE: u64 = 40;

#[test]
fn etcd_cluster_survives_leader_kill() {
    let Some(uri) = fault_tests_uri("etcd_m1 etcd_m2 etcd_m3", "BAKERY_ETCD_CLUSTER_URI") else {
        return;
    };
    // A member an interrupted run left down comes back first.
    let endpoints = members_up(&MEMBERS, &uri);
    bakery_testkit::runtime(4).block_on(async move {
        let uri = bakery_testkit::proxy::with_option(&uri, "timeout_ms", "2000");
        let store = bakery::connect(&uri).await.expect("connect to the cluster");
        let history = History::new();
        let plan = Plan::new("cluster-etcd", 2, 4, 3);

        // The monitor: every member's status every 100 ms.
        let monitor = Sampler::start(&history, {
            let endpoints = endpoints.clone();
            move |at_ns| status(&endpoints, at_ns)
        });
        let latest = || monitor.latest();
        assert!(
            eventually(RECOVERY_BOUND, || latest().leader.is_some()).await,
            "the cluster has no leader: {:?}",
            latest()
        );

        let workload = Workload::start(&uri, &history, &plan, 0).await;
        let served = workload.served(&history, 0, ACKS_PER_PHASE, RECOVERY_BOUND);
        assert!(served.await, "no writes acknowledged before the fault");
        // Asked now, not from the last sample: the leader to kill.
        let old = leader_now(&endpoints, RECOVERY_BOUND).await;
        let old = old
            .leader
            .unwrap_or_else(|| panic!("no leader before the fault: {old:?}"));
        tokio::task::spawn_blocking(move || backends("kill", MEMBERS[old]))
            .await
            .expect("kill");
        let killed_ns = history.now_ns();
        let elected = eventually(RECOVERY_BOUND, || {
            latest().leader.is_some_and(|l| l != old)
        })
        .await;
        assert!(elected, "no new leader after {} was killed: {:?}", MEMBERS[old], latest());
        assert!(
            eventually(RECOVERY_BOUND, || acked_after(&history, killed_ns) >= ACKS_PER_PHASE).await,
            "no writes acknowledged after the leader was killed"
        );
        tokio::task::spawn_blocking(move || backends("start", MEMBERS[old]))
            .await
            .expect("restart");
        let restarted_ns = history.now_ns();
        assert!(
            eventually(RECOVERY_BOUND, || {
                acked_after(&history, restarted_ns) >= ACKS_PER_PHASE
            })
            .await,
            "no writes acknowledged after the old leader came back"
        );
        let observed = workload.stop().await;
        let rejoined = eventually(RECOVERY_BOUND, || {
            let now = latest();
            now.answering == MEMBERS.len() && now.leader.is_some()
        })
        .await;
        assert!(rejoined, "{} did not rejoin: {:?}", MEMBERS[old], latest());
        let samples = monitor.stop();

        // Figures.
        let first_term = samples.first().map_or(0, |s| s.term);
        let last_term = samples.iter().map(|s| s.term).max().unwrap_or(0);
        let new_leader_ns = samples
            .iter()
            .find(|s| s.at_ns > killed_ns && s.leader.is_some_and(|l| l != old))
            .map_or(killed_ns, |s| s.at_ns);
        let leaders: Vec<&str> = samples
            .iter()
            .filter_map(|s| s.leader)
            .fold(Vec::new(), |mut seen, l| {
                if seen.last() != Some(&MEMBERS[l]) {
                    seen.push(MEMBERS[l]);
                }
                seen
            });

        // Checks.
        let fault = format!(
            "leader SIGKILLed, restarted; no leader for {:.2}s",
            (new_leader_ns - killed_ns) as f64 / 1e9
        );
        let row = ("etcd", "3 members", fault);
        let kept = assert_kept(row, &history, observed, &*store, &plan.keys).await;
        println!(
            "cluster_etcd: killed leader {}; {kept}; \
             elections observed {} (raft term {first_term} -> {last_term}), leaders seen {leaders:?}; \
             no live leader for {:.2}s after the kill (100 ms polls)",
            MEMBERS[old],
            last_term - first_term,
            (new_leader_ns - killed_ns) as f64 / 1e9,
        );
    });
}
