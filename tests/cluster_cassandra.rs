//! A three-node Cassandra cluster (`cassandra_n1..3` of
//! `scripts/backends.sh`, keyspace replication factor 3) loses a node to
//! SIGKILL in the middle of a run, keeps serving with two of three (a
//! Paxos quorum), and gets the node back.
//!
//! Counter clients (read-modify-write `put_if_version`, recorded by
//! bakery_verify's `RecordingStore`) three sequence clients and three
//! lock clients writing a fenced value (each on a store of its own) run on the
//! cluster's URI (all three nodes) throughout. The driver spreads the calls
//! over the nodes (every node holds a replica of every key, and the driver
//! cannot tell Cassandra's LWTs apart, so it shuffles the replicas): the
//! node killed is the one that coordinated the most requests of the
//! clients so far (`system_views.clients` of each node). A monitor sends a
//! CQL `OPTIONS` to every node every 100 ms.
//! Asserted:
//! - every error is typed (`Unavailable`, `Unknown`, `TimedOut`), no call
//!   hangs;
//! - the clients' writes are acknowledged before the kill, with the node
//!   down, and after it is back;
//! - the restarted node rejoins: every node coordinates a read at
//!   consistency `ALL` (it sees the other two up and they answer), and the
//!   clients' requests reach the restarted node again;
//! - the recorded history is linearizable (bakery_verify's checker);
//! - no sequence id is handed out twice, each client's ids increase;
//! - each counter holds every acknowledged increment and at most the
//!   acknowledged plus the unknown ones;
//! - the lock clients get fenced writes accepted, never a stale one (a
//!   write with a released token, tried deliberately), and no two grants
//!   whose release confirmed them overlap.
//!
//! Printed: calls ok/failed/unknown and their errors by message, the
//! requests each node coordinated, how long the killed node was down and
//! its restart took, how long after the kill a write was acknowledged, the
//! longest pause between acknowledged writes in each phase.
//!
//! Runs under `BAKERY_FAULT_TESTS=1` (scripts/test.sh, CI), where a missing
//! `BAKERY_CASSANDRA_CLUSTER_URI` fails; without it, it prints why and
//! returns.

#![cfg(feature = "cassandra")]

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bakery_cassandra::scylla::client::session::Session;
use bakery_cassandra::scylla::client::session_builder::SessionBuilder;
use bakery_cassandra::scylla::client::SelfIdentity;
use bakery_cassandra::scylla::policies::load_balancing::{
    NodeIdentifier, SingleTargetLoadBalancingPolicy,
};
use bakery_cassandra::scylla::statement::unprepared::Statement;
use bakery_cassandra::scylla::statement::Consistency;
use bakery_cassandra::CassandraConfig;
use bakery_verify::history::{Outcome, Reply};
use bakery_verify::History;
use common::cluster::{acked_after, assert_kept, eventually, Plan, Sampler, Workload};
use common::{backends, fault_tests_uri};

const NODES: [&str; 3] = ["cassandra_n1", "cassandra_n2", "cassandra_n3"];

/// How long a restart, the rejoin and the driver's reconnection may take (a
/// bound, not a speed check).
const RECOVERY_BOUND: Duration = Duration::from_secs(120);

/// Acknowledged writes awaited in each phase (before the kill, with the
/// node down, after it rejoined): the run's length.
const ACKS_PER_PHASE: u64 = 40;

/// The monitor's session names itself so, and its own requests are not
/// counted as the clients'.
const MONITOR: &str = "bakery-cluster-monitor";

/// What one round of CQL `OPTIONS` probes saw.
#[derive(Debug, Clone, Default)]
struct Sample {
    /// When (on the history's clock).
    at_ns: u64,
    /// Which nodes answered.
    answering: [bool; 3],
}

/// One CQL `OPTIONS` request (protocol v4, stream 0) to `addr`: does it
/// answer `SUPPORTED` (`84 00 00 00 06`)? The probe of scripts/backends.sh.
fn answers(addr: SocketAddr) -> bool {
    let probe = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300))?;
        stream.set_read_timeout(Some(Duration::from_millis(500)))?;
        stream.set_write_timeout(Some(Duration::from_millis(500)))?;
        stream.write_all(&[4, 0, 0, 0, 5, 0, 0, 0, 0])?;
        let mut reply = [0u8; 5];
        stream.read_exact(&mut reply)?;
        Ok(reply == [0x84, 0, 0, 0, 6])
    };
    probe().unwrap_or(false)
}

/// A statement run on `node` only, within 2 s.
fn on_node(cql: &str, node: SocketAddr, consistency: Consistency) -> Statement {
    let mut statement = Statement::new(cql);
    statement.set_load_balancing_policy(Some(SingleTargetLoadBalancingPolicy::new(
        NodeIdentifier::NodeAddress(node),
        None,
    )));
    statement.set_consistency(consistency);
    statement.set_request_timeout(Some(Duration::from_secs(2)));
    statement
}

/// Requests the clients (every connection but the monitor's) sent to
/// `node` since it started.
async fn client_requests(monitor: &Session, node: SocketAddr) -> Option<i64> {
    let cql = "SELECT client_options, request_count FROM system_views.clients";
    let result = monitor
        .query_unpaged(on_node(cql, node, Consistency::One), ())
        .await
        .ok()?;
    let rows = result.into_rows_result().ok()?;
    let mut total = 0;
    for row in rows
        .rows::<(Option<HashMap<String, String>>, Option<i64>)>()
        .ok()?
    {
        let (options, count) = row.ok()?;
        let name = options.as_ref().and_then(|o| o.get("APPLICATION_NAME"));
        if name.map(String::as_str) != Some(MONITOR) {
            total += count.unwrap_or(0);
        }
    }
    Some(total)
}

/// `node` coordinates a read at consistency `ALL` of a key bakery never
/// writes: it holds every other node up, and they answer.
async fn reads_at_all(monitor: &Session, node: SocketAddr, table: &str) -> bool {
    let cql = format!(r#"SELECT "version" FROM {table} WHERE "key" = '/bakery-open-probe'"#);
    monitor
        .query_unpaged(on_node(&cql, node, Consistency::All), ())
        .await
        .is_ok()
}

/// Every node coordinates a read at `ALL`, within `bound`.
async fn all_see_all(
    monitor: &Session,
    nodes: &[SocketAddr],
    table: &str,
    bound: Duration,
) -> bool {
    let start = Instant::now();
    loop {
        let mut all = true;
        for node in nodes {
            all &= reads_at_all(monitor, *node, table).await;
        }
        if all {
            return true;
        }
        if start.elapsed() >= bound {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Completion times of the acknowledged writes in `history`, sorted.
fn ack_times(history: &History) -> Vec<u64> {
    let mut times: Vec<u64> = history
        .operations()
        .iter()
        .filter(|op| {
            matches!(
                op.outcome,
                Outcome::Ok {
                    reply: Reply::Applied(_)
                }
            )
        })
        .filter_map(|op| op.completed_ns)
        .collect();
    times.sort_unstable();
    times
}

/// The longest time in `[from_ns, to_ns]` without an acknowledged write, in
/// seconds (from `from_ns` to the first, between two, from the last to
/// `to_ns`).
fn longest_pause(acks: &[u64], from_ns: u64, to_ns: u64) -> f64 {
    let mut points = vec![from_ns];
    points.extend(
        acks.iter()
            .copied()
            .filter(|t| (from_ns..=to_ns).contains(t)),
    );
    points.push(to_ns);
    let gap = points.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    gap as f64 / 1e9
}

/// The errors of the recorded calls that failed or may have applied, by
/// message (digits blanked, cut at 220 characters), most frequent first.
fn errors_by_message(history: &History) -> Vec<(usize, String)> {
    let mut by: HashMap<String, usize> = HashMap::new();
    for op in history.operations() {
        let (kind, error) = match &op.outcome {
            Outcome::Fail { error } => ("failed", error),
            Outcome::Unknown { error } => ("unknown", error),
            _ => continue,
        };
        let shape: String = error
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .take(220)
            .collect();
        *by.entry(format!("{kind}: {shape}")).or_default() += 1;
    }
    let mut out: Vec<(usize, String)> = by.into_iter().map(|(k, n)| (n, k)).collect();
    out.sort_unstable_by(|a, b| b.cmp(a));
    out
}

/// Seconds from `from_ns` to the first acknowledged write after it.
fn first_ack_after(acks: &[u64], from_ns: u64) -> f64 {
    acks.iter()
        .find(|t| **t > from_ns)
        .map_or(f64::NAN, |t| (t - from_ns) as f64 / 1e9)
}

#[test]
fn cassandra_cluster_survives_node_kill() {
    let Some(uri) = fault_tests_uri(
        "cassandra_n1 cassandra_n2 cassandra_n3",
        "BAKERY_CASSANDRA_CLUSTER_URI",
    ) else {
        return;
    };
    let test_start = Instant::now();
    // A node an interrupted run left down comes back first.
    for node in NODES {
        backends("start", node);
    }
    let config = CassandraConfig::from_uri(&uri).expect("a cassandra:// URI");
    let nodes: Vec<SocketAddr> = config
        .hosts()
        .iter()
        .map(|h| h.parse().expect("the cluster's hosts are IPv4:port"))
        .collect();
    assert_eq!(nodes.len(), NODES.len(), "{uri} names three nodes");
    let table = format!(r#""{}"."{}""#, config.keyspace(), config.table());

    bakery_testkit::runtime(4).block_on(async move {
        // Above Cassandra's own timeouts (write 2 s, CAS contention 1 s), so
        // the server answers first (crate docs).
        let uri = bakery_testkit::proxy::with_option(&uri, "timeout_ms", "5000");
        let store = bakery::connect(&uri).await.expect("connect to the cluster");
        let monitor = SessionBuilder::new()
            .known_nodes(config.hosts())
            .custom_identity(SelfIdentity::new().with_application_name(MONITOR))
            .build()
            .await
            .expect("monitor session");
        assert!(
            all_see_all(&monitor, &nodes, &table, RECOVERY_BOUND).await,
            "not every node sees the other two up before the fault"
        );
        let history = History::new();
        let plan = Plan::new("cluster-cassandra", 2, 4, 3);

        // The probe monitor: whether each node answers, every 100 ms.
        let prober = Sampler::start(&history, {
            let nodes = nodes.clone();
            move |at_ns| {
                let mut sample = Sample {
                    at_ns,
                    ..Sample::default()
                };
                for (i, node) in nodes.iter().enumerate() {
                    sample.answering[i] = answers(*node);
                }
                sample
            }
        });

        // Phase 1: all three nodes.
        let workload = Workload::start(&uri, &history, &plan, 0).await;
        let served = workload.served(&history, 0, ACKS_PER_PHASE, RECOVERY_BOUND);
        assert!(served.await, "no writes acknowledged before the fault");
        let mut before = Vec::new();
        for node in &nodes {
            let start = Instant::now();
            let requests = loop {
                match client_requests(&monitor, *node).await {
                    Some(requests) => break requests,
                    None if start.elapsed() < RECOVERY_BOUND => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    None => panic!("{node} does not show system_views.clients"),
                }
            };
            before.push(requests);
        }
        // The node that coordinated the most of the clients' requests.
        let victim = (0..nodes.len())
            .max_by_key(|&i| before[i])
            .expect("three nodes");
        tokio::task::spawn_blocking(move || backends("kill", NODES[victim]))
            .await
            .expect("kill");
        let killed_ns = history.now_ns();

        // Phase 2: two of three.
        assert!(
            eventually(RECOVERY_BOUND, || acked_after(&history, killed_ns) >= ACKS_PER_PHASE).await,
            "no writes acknowledged with {} down",
            NODES[victim]
        );
        let restart_ns = history.now_ns();
        let restart_start = Instant::now();
        tokio::task::spawn_blocking(move || backends("start", NODES[victim]))
            .await
            .expect("restart");
        let restart_took = restart_start.elapsed();
        let answered_ns = history.now_ns();
        assert!(
            all_see_all(&monitor, &nodes, &table, RECOVERY_BOUND).await,
            "{} did not rejoin: not every node coordinates a read at ALL",
            NODES[victim]
        );
        let rejoined_ns = history.now_ns();
        // The clients' connections come back to it: their requests grow.
        let start = Instant::now();
        let first = client_requests(&monitor, nodes[victim]).await.unwrap_or(0);
        let mut back = first;
        while back < first + ACKS_PER_PHASE as i64 && start.elapsed() < RECOVERY_BOUND {
            tokio::time::sleep(Duration::from_millis(200)).await;
            back = client_requests(&monitor, nodes[victim]).await.unwrap_or(back);
        }
        assert!(
            back >= first + ACKS_PER_PHASE as i64,
            "the clients did not use {} again after it rejoined ({first} -> {back} requests in {RECOVERY_BOUND:?})",
            NODES[victim]
        );

        // Phase 3: all three again.
        assert!(
            eventually(RECOVERY_BOUND, || acked_after(&history, rejoined_ns) >= ACKS_PER_PHASE)
                .await,
            "no writes acknowledged after {} rejoined",
            NODES[victim]
        );
        let end_ns = history.now_ns();
        let observed = workload.stop().await;
        let samples = prober.stop();

        // Figures.
        let down_s = samples
            .iter()
            .filter(|s| s.at_ns > killed_ns && !s.answering[victim])
            .map(|s| s.at_ns)
            .max()
            .map_or(0.0, |last| (last - killed_ns) as f64 / 1e9);
        let acks = ack_times(&history);
        let errors = errors_by_message(&history);

        // Checks.
        let fault = format!(
            "node coordinating the most SIGKILLed, restarted; longest stall {:.2}s",
            longest_pause(&acks, killed_ns, restart_ns)
        );
        let row = ("cassandra", "3 nodes, replication factor 3", fault);
        let kept = assert_kept(row, &history, observed, &*store, &plan.keys).await;
        println!(
            "cluster_cassandra: killed {} (client requests coordinated before: {before:?}); {kept}; \
             first write acknowledged {:.2}s after the kill, longest pause between acknowledged writes: \
             {:.2}s before the kill, {:.2}s with the node down, {:.2}s from its restart to the end; \
             node not answering CQL for {down_s:.1}s (100 ms probes), `backends.sh start` took {:.1}s, \
             rejoined (reads at ALL from every node) {:.1}s after it answered; test {:.1}s; \
             recorded errors by message: {errors:?}",
            NODES[victim],
            first_ack_after(&acks, killed_ns),
            longest_pause(&acks, acks.first().copied().unwrap_or(0), killed_ns),
            longest_pause(&acks, killed_ns, restart_ns),
            longest_pause(&acks, restart_ns, end_ns),
            restart_took.as_secs_f64(),
            (rejoined_ns - answered_ns) as f64 / 1e9,
            test_start.elapsed().as_secs_f64(),
        );
    });
}
