//! A three-member etcd cluster (`etcd_net1..3` of `scripts/backends.sh`,
//! each member in a network namespace of its own) is partitioned while
//! every member stays up (`scripts/partition.sh`), three times, each fault
//! a run of its own:
//! - the leader isolated from both followers (both ways), then healed;
//! - 1|1|1: every member cut from every other (no quorum), then healed;
//! - a one-way drop: the leader's packets to one follower dropped, the
//!   follower's still delivered, then healed.
//!
//! Through each, counter clients (read-modify-write `put_if_version`,
//! recorded by bakery_verify's `RecordingStore`), three sequence clients
//! and three lock clients writing a fenced value (each on a store of its
//! own) run on the cluster's URI (all three endpoints). Asserted, as in
//! the kill/restart cluster tests: the recorded history is linearizable,
//! no sequence id is handed out twice, every acknowledged increment is
//! kept, no stale fenced write is accepted and no confirmed grants
//! overlap; writes are acknowledged again after each fault and after each
//! heal; the cut-off leader is replaced.
//!
//! Negative control: while the old leader is cut off, its own view of the
//! counters, read without a quorum (`etcdctl get --consistency=s`), is
//! added to the history as another client's reads; that history must NOT
//! be linearizable (the isolated member serves what the majority has
//! overwritten since), which shows the checker sees what a partition does
//! to a store that answers alone.
//!
//! Runs under `BAKERY_FAULT_TESTS=1` (scripts/test.sh, CI), where a missing
//! `BAKERY_ETCD_NETNS_URI` fails; without it, it prints why and returns.

mod common;

use std::process::Command;
use std::time::Duration;

use bakery::Key;
use bakery_verify::History;
use common::cluster::{acked_after, assert_kept, eventually, Plan, Sampler, Workload};
use common::etcd::{leader_now, members_up, status, Sample};
use common::fault_tests_uri;
use common::partition::{assert_caught, own_and_all, stale_read, HealOnDrop};

const MEMBERS: [&str; 3] = ["etcd_net1", "etcd_net2", "etcd_net3"];

/// How long an election, a heal and the clients' failover may take (a
/// bound, not a speed check).
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// Acknowledged writes awaited in each phase: the run's length.
const ACKS_PER_PHASE: u64 = 30;

/// How long the 1|1|1 split stands once no member names a leader: the
/// clients' calls time out meanwhile (their `timeout_ms` is 2 s).
const SPLIT_HOLD: Duration = Duration::from_secs(3);

/// `scripts/partition.sh etcd ARGS`; panics with its stderr if it fails.
fn partition(args: &[&str]) {
    common::partition::partition("etcd", args);
}

/// The faults, each a run of its own.
#[derive(Debug, Clone, Copy)]
enum Fault {
    IsolateLeader,
    Split,
    OneWay,
}

#[test]
fn etcd_keeps_every_guarantee_through_partitions() {
    let Some(uri) = fault_tests_uri("etcd_net1 etcd_net2 etcd_net3", "BAKERY_ETCD_NETNS_URI")
    else {
        return;
    };
    // What an interrupted run left healed; and what this one leaves, a
    // panic included.
    let _heal = HealOnDrop::new("etcd");
    let endpoints = members_up(&MEMBERS, &uri);
    bakery_testkit::runtime(4).block_on(async move {
        let uri = bakery_testkit::proxy::with_option(&uri, "timeout_ms", "2000");
        for fault in [Fault::IsolateLeader, Fault::Split, Fault::OneWay] {
            run(&uri, &endpoints, fault).await;
        }
    });
}

/// One fault through a workload of its own, checked and reported.
async fn run(uri: &str, endpoints: &[String], fault: Fault) {
    let store = bakery::connect(uri).await.expect("connect to the cluster");
    let history = History::new();
    let plan = Plan::new("partition-etcd", 2, 4, 3);
    let monitor = Sampler::start(&history, {
        let endpoints = endpoints.to_vec();
        move |at_ns| status(&endpoints, at_ns)
    });
    let latest = || monitor.latest();
    assert!(
        eventually(RECOVERY_BOUND, || latest().leader.is_some()).await,
        "{fault:?}: the cluster has no leader: {:?}",
        latest()
    );
    let workload = Workload::start(uri, &history, &plan, 0).await;
    let served = workload.served(&history, 0, ACKS_PER_PHASE, RECOVERY_BOUND);
    assert!(
        served.await,
        "{fault:?}: no writes acknowledged before the fault"
    );
    let leader = leader_now(endpoints, RECOVERY_BOUND).await;
    let leader = leader
        .leader
        .unwrap_or_else(|| panic!("{fault:?}: no leader before the fault: {leader:?}"));
    let follower = (leader + 1) % MEMBERS.len();
    let (n, f) = ((leader + 1).to_string(), (follower + 1).to_string());

    let (cut, what) = match fault {
        Fault::IsolateLeader => (
            vec!["isolate", n.as_str()],
            format!("leader {} isolated both ways", MEMBERS[leader]),
        ),
        Fault::Split => (vec!["split"], "1|1|1 split".to_owned()),
        Fault::OneWay => (
            vec!["oneway", n.as_str(), f.as_str()],
            format!(
                "{}'s packets to {} dropped",
                MEMBERS[leader], MEMBERS[follower]
            ),
        ),
    };
    partition(&cut);
    let cut_ns = history.now_ns();
    let stale_reads = match fault {
        Fault::IsolateLeader => {
            let elected = eventually(RECOVERY_BOUND, || {
                latest().leader.is_some_and(|l| l != leader)
            });
            assert!(
                elected.await,
                "no new leader after {} was cut off: {:?}",
                MEMBERS[leader],
                latest()
            );
            acked(&history, cut_ns, "with the old leader cut off").await;
            // The negative control's reads, once the majority has moved on.
            let keys = common::partition::fresh_keys(
                &history,
                &plan.keys,
                cut_ns,
                RECOVERY_BOUND,
                "partition_etcd",
            )
            .await;
            read_alone(&history, &endpoints[leader], &keys)
        }
        Fault::Split => {
            let leaderless = eventually(RECOVERY_BOUND, || latest().leader.is_none());
            assert!(
                leaderless.await,
                "a leader without a quorum: {:?}",
                latest()
            );
            tokio::time::sleep(SPLIT_HOLD).await;
            0
        }
        Fault::OneWay => {
            acked(
                &history,
                cut_ns,
                "with the leader's packets to a follower dropped",
            )
            .await;
            0
        }
    };
    let healed_ns = history.now_ns();
    partition(&["heal"]);
    acked(&history, healed_ns, "after the heal").await;
    let observed = workload.stop().await;
    let whole = eventually(RECOVERY_BOUND, || {
        let now = latest();
        now.answering == MEMBERS.len() && now.leader.is_some()
    });
    assert!(
        whole.await,
        "{fault:?}: the cluster did not heal: {:?}",
        latest()
    );
    let samples = monitor.stop();
    let acked_during = acked_after(&history, cut_ns) - acked_after(&history, healed_ns);

    // The workload's own history, then the negative control's.
    let (own, all) = own_and_all(&history);
    let row_setup = "3 members, each in a network namespace";
    let row = (
        "etcd",
        row_setup,
        format!(
            "{what} for {:.1}s, healed",
            (healed_ns - cut_ns) as f64 / 1e9
        ),
    );
    let kept = assert_kept(row, &own, observed, &*store, &plan.keys).await;
    let terms = term_span(&samples, cut_ns);
    println!(
        "partition_etcd: {what}: {kept}; {acked_during} writes acknowledged while cut; \
         raft term {} -> {}",
        terms.0, terms.1
    );
    if stale_reads > 0 {
        assert_caught(
            "partition_etcd",
            "etcd",
            row_setup,
            &what,
            "its own reads without a quorum (`etcdctl get --consistency=s`)",
            &all,
            stale_reads,
        );
    } else if let Fault::IsolateLeader = fault {
        panic!("negative control: no read from the cut-off leader");
    }
}

/// Waits until writes were acknowledged after `after_ns`.
async fn acked(history: &History, after_ns: u64, when: &str) {
    common::partition::acked(history, after_ns, ACKS_PER_PHASE, RECOVERY_BOUND, when).await;
}

/// The lowest and highest raft term seen from `from_ns` on.
fn term_span(samples: &[Sample], from_ns: u64) -> (u64, u64) {
    let terms = samples
        .iter()
        .filter(|s| s.at_ns >= from_ns)
        .map(|s| s.term);
    let low = terms.clone().filter(|&t| t > 0).min().unwrap_or(0);
    (low, terms.max().unwrap_or(0))
}

/// Each of `keys` as the member at `endpoint` alone holds it (a
/// serializable read: no quorum asked), recorded into `history` as the
/// negative control's gets, each checked to be stale first
/// ([`stale_read`]); how many were recorded.
fn read_alone(history: &History, endpoint: &str, keys: &[Key]) -> usize {
    let mut recorded = 0;
    for key in keys {
        let etcd_key = format!("bakery/{}", key.as_str());
        let read = || {
            let revision = etcdctl(endpoint, &["get", &etcd_key, "-w", "json"]);
            let revision: serde_json::Value =
                serde_json::from_slice(&revision).expect("etcdctl's JSON");
            let value = etcdctl(endpoint, &["get", &etcd_key, "--print-value-only"]);
            let version = revision["kvs"][0]["mod_revision"].as_u64()?;
            // etcdctl ends the value with a newline; the counters' values have none.
            Some((
                version,
                value.strip_suffix(b"\n").unwrap_or(&value).to_vec(),
            ))
        };
        if stale_read(history, endpoint, key, read) {
            recorded += 1;
        }
    }
    recorded
}

/// `etcdctl --endpoints=ENDPOINT --consistency=s ARGS`'s output.
fn etcdctl(endpoint: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args([
            "--dial-timeout=1s",
            "--command-timeout=2s",
            "--consistency=s",
        ])
        .args(args)
        .output()
        .expect("run etcdctl (scripts/backends.sh installs it)");
    assert!(
        out.status.success(),
        "etcdctl {args:?} on {endpoint}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
