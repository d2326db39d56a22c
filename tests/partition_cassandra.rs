//! A three-node Cassandra cluster (`cassandra_net1..3` of
//! `scripts/backends.sh`, each node in a network namespace of its own;
//! keyspace with replication_factor 3, Paxos v2) is partitioned while
//! every node stays up (`scripts/partition.sh cassandra`), three times,
//! each fault a run of its own:
//! - node 1 (the seed, the clients' first contact point) isolated from
//!   both others, both ways: 2|1, then healed;
//! - 1|1|1: every node cut from every other (no quorum anywhere), then
//!   healed;
//! - a one-way drop: node 1's packets to node 2 dropped, node 2's still
//!   delivered, then healed.
//!
//! Through each, the recorded workload of the other cluster tests (counter
//! clients by conditional `put_if_version`, three sequence clients, three
//! lock clients writing a fenced value, each on a store of its own) runs on
//! the cluster's URI (all three nodes). Asserted: the history is
//! linearizable, no sequence id twice, every acknowledged increment kept,
//! no stale fenced write accepted, no overlapping grants; with a majority
//! (2|1, one-way) writes are acknowledged while cut, with node 1 isolated
//! by every counter client, whichever node its calls reach first (the
//! store moves a call node 1 refuses as unavailable to another node);
//! with none (1|1|1) no
//! write is acknowledged once the cut stands (failures and unknown
//! outcomes only); writes are acknowledged again after each heal.
//!
//! Negative control: while node 1 is cut off, its own view of the
//! counters — a read at consistency ONE sent to it alone (a minimal CQL
//! client, tests/common/cql.rs), each checked to be older than a write
//! the majority acknowledged — is added to the history as another
//! client's reads; that history must NOT be linearizable.
//!
//! Runs under `BAKERY_FAULT_TESTS=1` (scripts/test.sh, CI), where a missing
//! `BAKERY_CASSANDRA_NETNS_URI` fails; without it, it prints why and
//! returns.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use bakery::Key;
use bakery_verify::History;
use common::cluster::{assert_kept, eventually, Plan, Workload};
use common::cql::{Cql, ONE};
use common::partition::{
    acked, assert_caught, client_calls, cuts_shown, own_and_all, stale_read, HealOnDrop, Window,
};
use common::{backends, fault_tests_uri};

const MEMBERS: [&str; 3] = ["cassandra_net1", "cassandra_net2", "cassandra_net3"];

/// How long a heal, the clients' moving to the majority and a node's
/// failure detector may take (a bound, not a speed check).
const RECOVERY_BOUND: Duration = Duration::from_secs(90);

/// Acknowledged writes awaited in each phase: the run's length.
const ACKS_PER_PHASE: u64 = 20;

/// How long each cut stands at least (the 1|1|1 split: exactly), past the
/// failure detector's first suspicion.
const HOLD: Duration = Duration::from_secs(5);

/// How long every counter client may take to have a write acknowledged
/// by the majority after node 1 is cut off (node 1 refuses each call it
/// coordinates at once, `Unavailable`, and the store moves it on to
/// another node), before the negative control reads every counter.
const FRESH_BOUND: Duration = Duration::from_secs(15);

/// The keyspace of BAKERY_CASSANDRA_NETNS_URI and bakery's table.
const TABLE: &str = "bakery_netns.bakery_rows";

/// The faults, each a run of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    IsolateNode,
    Split,
    OneWay,
}

#[test]
fn cassandra_keeps_every_guarantee_through_partitions() {
    let Some(uri) = fault_tests_uri(
        "cassandra_net1 cassandra_net2 cassandra_net3",
        "BAKERY_CASSANDRA_NETNS_URI",
    ) else {
        return;
    };
    // What an interrupted run left healed, nodes up; and what this one
    // leaves healed, a panic included.
    let _heal = HealOnDrop::new("cassandra");
    for member in MEMBERS {
        backends("start", member);
    }
    let nodes = hosts_of(&uri);
    assert_eq!(nodes.len(), MEMBERS.len(), "{uri} names one host a node");
    bakery_testkit::runtime(4).block_on(async move {
        let uri = bakery_testkit::proxy::with_option(&uri, "timeout_ms", "5000");
        for fault in [Fault::IsolateNode, Fault::Split, Fault::OneWay] {
            let started = Instant::now();
            run(&uri, &nodes, fault).await;
            println!(
                "partition_cassandra: {fault:?}: {:.1}s",
                started.elapsed().as_secs_f64()
            );
        }
    });
}

/// The `host:port`s of a `cassandra://h1:p1,h2:p2,…/…` URI.
fn hosts_of(uri: &str) -> Vec<String> {
    let rest = uri
        .strip_prefix("cassandra://")
        .expect("a cassandra:// URI");
    let hosts = rest.split(['/', '?']).next().unwrap_or_default();
    hosts.split(',').map(str::to_owned).collect()
}

/// One fault through a workload of its own, checked and reported.
async fn run(uri: &str, nodes: &[String], fault: Fault) {
    let store = bakery::connect(uri).await.expect("connect to the cluster");
    let history = History::new();
    let plan = Plan::new("partition-cassandra", 2, 4, 3);
    let workload = Workload::start(uri, &history, &plan, 0).await;
    let served = workload.served(&history, 0, ACKS_PER_PHASE, RECOVERY_BOUND);
    assert!(
        served.await,
        "{fault:?}: no writes acknowledged before the fault"
    );
    let (cut, what): (&[&str], String) = match fault {
        Fault::IsolateNode => (
            &["isolate", "1"],
            format!("{} isolated both ways (2|1)", MEMBERS[0]),
        ),
        Fault::Split => (&["split"], "1|1|1 split".to_owned()),
        Fault::OneWay => (
            &["oneway", "1", "2"],
            format!("{}'s packets to {} dropped", MEMBERS[0], MEMBERS[1]),
        ),
    };
    let cut_ns = common::partition::cut(&history, "cassandra", cut).await;
    if fault == Fault::OneWay {
        // The cut is in effect: listed, and node 1 reaches node 2 no more
        // (node 3 still).
        let shown = cuts_shown("cassandra");
        assert_eq!(shown, ["1 -> 2"], "{what}: partition.sh shows {shown:?}");
        assert!(
            !reaches(MEMBERS[0], &nodes[1]),
            "{what}: {} still reaches {}",
            MEMBERS[0],
            nodes[1]
        );
        assert!(
            reaches(MEMBERS[0], &nodes[2]),
            "{what}: {} does not reach {} either",
            MEMBERS[0],
            nodes[2]
        );
    }
    let mut stale_reads = 0;
    match fault {
        Fault::IsolateNode => {
            acked(
                &history,
                cut_ns,
                ACKS_PER_PHASE,
                RECOVERY_BOUND,
                "by the majority with node 1 cut off",
            )
            .await;
            // Every counter client is served by the majority, whichever
            // node its calls go to first.
            let clients = 0..plan.counter_clients;
            let served = eventually(FRESH_BOUND, || {
                clients
                    .clone()
                    .all(|c| client_calls(&history, c, cut_ns, history.now_ns()).acked > 0)
            });
            let all_served = served.await;
            for client in clients.clone() {
                let calls = client_calls(&history, client, cut_ns, history.now_ns());
                println!("partition_cassandra: counter client {client} since the cut: {calls}");
            }
            assert!(
                all_served,
                "{what}: a counter client had no write acknowledged within {FRESH_BOUND:?}"
            );
            // The negative control's reads, once the majority has moved on:
            // every counter has a write acknowledged after the cut.
            let keys = plan.keys.clone();
            let (history, node) = (history.clone(), nodes[0].clone());
            stale_reads = tokio::task::spawn_blocking(move || read_alone(&history, &node, &keys))
                .await
                .expect("reads at ONE");
        }
        Fault::Split => {}
        Fault::OneWay => {
            acked(
                &history,
                cut_ns,
                ACKS_PER_PHASE,
                RECOVERY_BOUND,
                "with node 1's packets to node 2 dropped",
            )
            .await;
        }
    }
    let held_ns = history.now_ns() - cut_ns;
    tokio::time::sleep(HOLD.saturating_sub(Duration::from_nanos(held_ns))).await;
    let window = Window::end(
        &history,
        "cassandra",
        cut_ns,
        true,
        ACKS_PER_PHASE,
        RECOVERY_BOUND,
    )
    .await;
    let observed = workload.stop().await;
    if fault == Fault::IsolateNode {
        // While cut, to its heal: every counter client had writes
        // acknowledged, none was left on the cut-off node.
        for client in 0..plan.counter_clients {
            let calls = client_calls(&history, client, cut_ns, window.healed_ns);
            println!("partition_cassandra: {what}: counter client {client} while cut: {calls}");
            assert!(
                calls.acked > 0,
                "{what}: counter client {client} had no write acknowledged while cut: {calls}"
            );
        }
    }
    if fault == Fault::Split {
        window.assert_none_acked(&history, &what, "a quorum");
    }

    let (own, all) = own_and_all(&history);
    let setup = "3 nodes, each in a network namespace, replication_factor 3";
    let held = format!("{what} for {:.1}s, healed", window.held_s());
    let kept = assert_kept(
        ("cassandra", setup, held.clone()),
        &own,
        observed,
        &*store,
        &plan.keys,
    )
    .await;
    println!("partition_cassandra: {held}: {kept}; {window}");
    if fault == Fault::IsolateNode {
        assert_caught(
            "partition_cassandra",
            "cassandra",
            setup,
            &what,
            "its own reads at consistency ONE",
            &all,
            stale_reads,
        );
    }
}

/// Whether a TCP connection from `member`'s namespace to `host:port`
/// opens within 2 seconds.
fn reaches(member: &str, host_port: &str) -> bool {
    let (host, port) = host_port.rsplit_once(':').expect("host:port");
    Command::new("ip")
        .args(["netns", "exec", &format!("bakery-{member}")])
        .args(["timeout", "2", "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/{host}/{port}"))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run ip netns exec (root)")
        .success()
}

/// How long the cut-off node may take to answer a read at ONE by itself:
/// until its failure detector marks the others down it may send the read
/// to one of them, and time out.
const ALONE_BOUND: Duration = Duration::from_secs(60);

/// Each of `keys` as the node at `node` alone holds it (consistency ONE,
/// asked of that node only), recorded as the negative control's reads,
/// each checked to be stale first; how many were recorded.
fn read_alone(history: &History, node: &str, keys: &[Key]) -> usize {
    let mut recorded = 0;
    for key in keys {
        assert!(!key.as_str().contains('\''), "a quote in key {key}");
        let cql = format!(
            r#"SELECT "version", "value" FROM {TABLE} WHERE "key" = '{}'"#,
            key.as_str()
        );
        let start = Instant::now();
        let read = || loop {
            let answer =
                Cql::connect(node, Duration::from_secs(5)).and_then(|mut c| c.query(&cql, ONE));
            match answer {
                Ok(rows) => {
                    let row = rows.into_iter().next()?;
                    let version = row[0].as_ref().expect("a version");
                    let version = i64::from_be_bytes(version[..].try_into().expect("a bigint"));
                    let value = row[1].clone().unwrap_or_default();
                    return Some((version as u64, value));
                }
                Err(e) if start.elapsed() < ALONE_BOUND => {
                    eprintln!("partition_cassandra: read at ONE on {node}: {e}; again");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => panic!(
                    "negative control: no read at ONE from {node} within {ALONE_BOUND:?}: {e}"
                ),
            }
        };
        if stale_read(history, node, key, read) {
            recorded += 1;
        }
    }
    recorded
}
