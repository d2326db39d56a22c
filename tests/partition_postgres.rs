//! A PostgreSQL primary and its synchronous standby (`postgres_net1`,
//! `postgres_net2` of `scripts/backends.sh`, each in a network namespace of
//! its own; `synchronous_standby_names` names the standby, bakery's
//! sessions commit with `synchronous_commit = on`) are partitioned while
//! both stay up (`scripts/partition.sh postgres`), each fault a run of its
//! own on a fresh pair:
//! - the standby isolated from the primary, both ways, then healed;
//! - the primary's packets to the standby dropped (one way), then healed;
//! - the standby's packets to the primary dropped (one way: it receives the
//!   WAL, its confirmations are lost), then healed;
//! - failover: the primary cut off from the standby and from the clients,
//!   the standby promoted (`pg_promote()`), the clients (on a multi-host
//!   URI with `target_session_attrs=read-write`) move on to it;
//! - the standby isolated, then, that cut standing, the primary cut off
//!   from the clients too and the standby promoted: the commits that
//!   waited for the standby, their clients timed out, never become visible
//!   on the old primary (bakery drops a timed-out write's connection, it
//!   does not cancel it), so no client reads a commit the failover loses
//!   (see `isolated_then_failover`).
//!
//! Through each, the recorded workload of the other cluster tests (counter
//! clients by read-modify-write `put_if_version`, three sequence clients,
//! three lock clients writing a fenced value, each on a store of its own).
//! Asserted: the history is linearizable, no sequence id twice, every
//! acknowledged increment kept (after a failover: on the promoted standby),
//! no stale fenced write accepted, no overlapping grants. While the standby
//! is cut off in either direction the primary acknowledges no write (its
//! commits wait for the standby's confirmation: the clients see timeouts,
//! outcomes unknown), and writes are acknowledged again after the heal.
//!
//! Negative control (a run of its own): the same pair made asynchronous
//! (`synchronous_standby_names = ''`; the clients open with
//! `accept_data_loss=true`, else bakery refuses it), the standby isolated:
//! the primary goes on acknowledging writes, and the standby's own view of
//! the counters (read with psql from the cut-off standby, each checked to
//! be older than an acknowledged write first) added to the history as
//! another client's reads must make it `NotLinearizable`.
//!
//! Runs under `BAKERY_FAULT_TESTS=1` (scripts/test.sh, CI), where a missing
//! `BAKERY_POSTGRES_NETNS_PRIMARY_URI` or `…_STANDBY_URI` fails; without it,
//! it prints why and returns. It leaves a fresh synchronous pair behind.

mod common;

use std::time::Duration;

use bakery::Key;
use bakery_verify::history::{Outcome, Reply};
use bakery_verify::linearizability::{self, Verdict};
use bakery_verify::workload::Counts;
use bakery_verify::History;
use common::cluster::{acked_above, assert_counters, assert_kept, count_of, Plan, Workload};
use common::partition::{acked, assert_caught, own_and_all, stale_read, HealOnDrop, Window};
use common::report::FaultRow;
use common::{backends, fault_tests_uri, psql, psql_output};

/// How long a heal, a promotion and the clients' reconnection may take (a
/// bound, not a speed check).
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// Acknowledged writes awaited in each phase: the run's length.
const ACKS_PER_PHASE: u64 = 30;

/// How long a cut between primary and standby stands (the clients'
/// calls time out meanwhile: `timeout_ms` is 2 s).
const HOLD: Duration = Duration::from_secs(5);

/// The standby's application_name (scripts/backends/postgres_netns.sh).
const STANDBY_NAME: &str = "bakery_net_standby";

/// The faults, each a run of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    StandbyIsolated,
    PrimaryToStandbyDropped,
    StandbyToPrimaryDropped,
    Failover,
    /// The standby isolated, then the primary cut off and the standby
    /// promoted (see [`isolated_then_failover`]).
    IsolatedThenFailover,
    /// The negative control: asynchronous, standby isolated.
    AsyncStandbyRead,
}

/// `scripts/partition.sh postgres ARGS`.
fn partition(args: &[&str]) {
    common::partition::partition("postgres", args);
}

/// A fresh synchronous pair: a new primary (initdb) and a new standby from
/// its base backup, streaming and `sync` (postgres_netns.sh waits for it).
fn fresh_pair() {
    partition(&["heal"]);
    backends("restart", "postgres_net1");
    backends("restart", "postgres_net2");
}

#[test]
fn postgres_keeps_every_guarantee_through_partitions() {
    let primary = fault_tests_uri("postgres_net1", "BAKERY_POSTGRES_NETNS_PRIMARY_URI");
    let standby = fault_tests_uri("postgres_net2", "BAKERY_POSTGRES_NETNS_STANDBY_URI");
    let (Some(primary), Some(standby)) = (primary, standby) else {
        return;
    };
    // What an interrupted run left healed; and what this one leaves, a
    // panic included.
    let _heal = HealOnDrop::new("postgres");
    let faults = [
        Fault::StandbyIsolated,
        Fault::PrimaryToStandbyDropped,
        Fault::StandbyToPrimaryDropped,
        Fault::Failover,
        Fault::IsolatedThenFailover,
        Fault::AsyncStandbyRead,
    ];
    for fault in faults {
        let started = std::time::Instant::now();
        fresh_pair();
        let pair_s = started.elapsed().as_secs_f64();
        let runtime = bakery_testkit::runtime(4);
        if fault == Fault::IsolatedThenFailover {
            runtime.block_on(isolated_then_failover(&primary, &standby));
        } else {
            runtime.block_on(run(&primary, &standby, fault));
        }
        println!(
            "partition_postgres: {fault:?}: {:.1}s, {pair_s:.1}s of it the pair's restart",
            started.elapsed().as_secs_f64()
        );
    }
    fresh_pair();
}

/// `primary,standby` as one multi-host URI whose sessions go to the one
/// that takes writes.
fn both(primary: &str, standby: &str) -> String {
    let standby_host = standby
        .split_once('@')
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("host:port in the standby's URI");
    let (head, path) = primary
        .rsplit_once('/')
        .expect("a database in the primary's URI");
    let uri = format!("{head},{standby_host}/{path}");
    let uri = bakery_testkit::proxy::with_option(&uri, "target_session_attrs", "read-write");
    bakery_testkit::proxy::with_option(&uri, "connect_timeout", "2")
}

/// One fault through a workload of its own, checked and reported.
async fn run(primary: &str, standby: &str, fault: Fault) {
    let mut uri = match fault {
        Fault::Failover => both(primary, standby),
        _ => primary.to_owned(),
    };
    if fault == Fault::AsyncStandbyRead {
        uri = bakery_testkit::proxy::with_option(&uri, "accept_data_loss", "true");
    }
    let uri = bakery_testkit::proxy::with_option(&uri, "timeout_ms", "2000");
    let history = History::new();
    let plan = Plan::new("partition-pg", 2, 4, 3);
    let workload = Workload::start(&uri, &history, &plan, 0).await;
    let opened_s = history.now_ns() as f64 / 1e9;
    let served = workload.served(&history, 0, ACKS_PER_PHASE, RECOVERY_BOUND);
    assert!(
        served.await,
        "{fault:?}: no writes acknowledged before the fault"
    );
    println!(
        "partition_postgres: {fault:?}: clients opened in {opened_s:.1}s, every one served after \
         {:.1}s",
        history.now_ns() as f64 / 1e9
    );
    if fault == Fault::AsyncStandbyRead {
        let primary = primary.to_owned();
        blocking(move || asynchronous(&primary)).await;
    }

    let (cut, what): (&[&str], &str) = match fault {
        Fault::StandbyIsolated => (&["isolate", "2"], "standby isolated both ways"),
        Fault::PrimaryToStandbyDropped => (
            &["oneway", "1", "2"],
            "primary's packets to the standby dropped",
        ),
        Fault::StandbyToPrimaryDropped => (
            &["oneway", "2", "1"],
            "standby's packets to the primary dropped",
        ),
        Fault::Failover => (
            &["cutoff", "1"],
            "primary cut off from standby and clients, standby promoted",
        ),
        Fault::IsolatedThenFailover => unreachable!("isolated_then_failover"),
        Fault::AsyncStandbyRead => (
            &["isolate", "2"],
            "asynchronous standby (synchronous_standby_names = '') isolated",
        ),
    };
    let cut_ns = common::partition::cut(&history, "postgres", cut).await;
    let mut stale_reads = 0;
    let standby_cut = matches!(
        fault,
        Fault::StandbyIsolated | Fault::PrimaryToStandbyDropped | Fault::StandbyToPrimaryDropped
    );
    match fault {
        Fault::StandbyIsolated
        | Fault::PrimaryToStandbyDropped
        | Fault::StandbyToPrimaryDropped => tokio::time::sleep(HOLD).await,
        Fault::IsolatedThenFailover => unreachable!("isolated_then_failover"),
        Fault::Failover => {
            let standby = standby.to_owned();
            let promoted = blocking(move || psql(&standby, "SELECT pg_promote(true, 60)")).await;
            assert_eq!(promoted, "t", "pg_promote on the standby failed");
            acked(
                &history,
                cut_ns,
                ACKS_PER_PHASE,
                RECOVERY_BOUND,
                "by the promoted standby",
            )
            .await;
        }
        Fault::AsyncStandbyRead => {
            acked(
                &history,
                cut_ns,
                ACKS_PER_PHASE,
                RECOVERY_BOUND,
                "by the asynchronous primary with its standby cut off",
            )
            .await;
            let keys = common::partition::fresh_keys(
                &history,
                &plan.keys,
                cut_ns,
                RECOVERY_BOUND,
                "partition_postgres",
            )
            .await;
            stale_reads = read_alone(&history, standby, &keys);
        }
    }
    // A failover leaves the old primary cut off.
    let window = Window::end(
        &history,
        "postgres",
        cut_ns,
        fault != Fault::Failover,
        ACKS_PER_PHASE,
        RECOVERY_BOUND,
    )
    .await;
    let observed = workload.stop().await;
    if standby_cut {
        // The commits wait for the standby's confirmation: none is
        // acknowledged once the cut stands, each call times out.
        window.assert_none_acked(&history, what, "the synchronous standby");
    }

    // The workload's own history, then the negative control's.
    let (own, all) = own_and_all(&history);
    let setup = if fault == Fault::AsyncStandbyRead {
        "primary + asynchronous standby (accept_data_loss=true), each in a network namespace"
    } else {
        "primary + synchronous standby, each in a network namespace"
    };
    let held = format!(
        "{what} for {:.1}s{}",
        window.held_s(),
        if fault == Fault::Failover {
            ", clients moved on"
        } else {
            ", healed"
        }
    );
    // What survives is on the server the clients ended on.
    let ended_on = if fault == Fault::Failover {
        standby
    } else {
        primary
    };
    let ended_on = if fault == Fault::AsyncStandbyRead {
        bakery_testkit::proxy::with_option(ended_on, "accept_data_loss", "true")
    } else {
        ended_on.to_owned()
    };
    let store = bakery::connect(&ended_on)
        .await
        .expect("connect to the server the clients ended on");
    let kept = assert_kept(
        ("postgres", setup, held.clone()),
        &own,
        observed,
        &*store,
        &plan.keys,
    )
    .await;
    println!("partition_postgres: {held}: {kept}; {window}");
    if fault == Fault::AsyncStandbyRead {
        assert!(
            window.acked >= ACKS_PER_PHASE,
            "the asynchronous primary acknowledged {} writes with its standby cut off",
            window.acked
        );
        assert_caught(
            "partition_postgres",
            "postgres",
            setup,
            what,
            "the cut-off standby's own reads (psql on the hot standby)",
            &all,
            stale_reads,
        );
    }
}

/// `f` on a blocking thread (a script, psql).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking call")
}

/// The primary made asynchronous: no standby named, reloaded, and the
/// standby seen `async`.
fn asynchronous(primary: &str) {
    psql(primary, "ALTER SYSTEM SET synchronous_standby_names = ''");
    assert_eq!(psql(primary, "SELECT pg_reload_conf()"), "t");
    let query = format!(
        "SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'"
    );
    let start = std::time::Instant::now();
    while psql(primary, &query) != "async" {
        assert!(
            start.elapsed() < RECOVERY_BOUND,
            "the standby is not async after the reload: {:?}",
            psql(primary, &query)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each of `keys` as the cut-off standby alone holds it (psql on the hot
/// standby), recorded as the negative control's reads, each checked to
/// be stale first; how many were recorded.
fn read_alone(history: &History, standby: &str, keys: &[Key]) -> usize {
    let mut recorded = 0;
    for key in keys {
        assert!(!key.as_str().contains('\''), "a quote in key {key}");
        let sql = format!(
            "SELECT version, encode(value, 'escape') FROM bakery_rows WHERE key = '{}'",
            key.as_str()
        );
        let read = || {
            let out = psql_output(standby, &sql);
            assert!(
                out.status.success(),
                "negative control: psql on the cut-off standby: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            let (version, value) = text.split_once('|')?;
            let version = version.parse().expect("a version");
            Some((version, value.as_bytes().to_vec()))
        };
        if stale_read(history, "the cut-off standby", key, read) {
            recorded += 1;
        }
    }
    recorded
}

/// The standby isolated for [`HOLD`] (the primary's commits wait for it;
/// a client that times out drops its connection, and the commit stays
/// invisible while it waits), then, the cut standing, the primary cut off
/// from the clients too and the standby promoted; the clients (multi-host
/// URI) move on to it.
///
/// Asserted: before the promotion the old primary shows no counter ahead
/// of the standby (no commit visible that was not replicated); no
/// acknowledged increment lost (none was acknowledged without the
/// standby), no id twice, the fence and the grants kept, each counter
/// within [acked, acked + unknown]; no call answered Ok on the old primary
/// saw an increment the promoted standby never had ("seen, then gone": a
/// cancelled sync wait makes such commits visible), and the history is
/// `Linearizable`.
async fn isolated_then_failover(primary: &str, standby: &str) {
    let uri = bakery_testkit::proxy::with_option(&both(primary, standby), "timeout_ms", "2000");
    let history = History::new();
    let plan = Plan::new("partition-pg", 2, 4, 3);
    let workload = Workload::start(&uri, &history, &plan, 0).await;
    let served = workload.served(&history, 0, ACKS_PER_PHASE, RECOVERY_BOUND);
    assert!(served.await, "no writes acknowledged before the fault");
    let cut_ns = common::partition::cut(&history, "postgres", &["isolate", "2"]).await;
    tokio::time::sleep(HOLD).await;
    // What the old primary shows, its clients' waiting commits timed out
    // by now, read while the clients still reach it.
    let on_primary: Vec<u64> = {
        let (primary, keys) = (primary.to_owned(), plan.keys.clone());
        blocking(move || keys.iter().map(|k| count_on(&primary, k)).collect()).await
    };
    let cutoff_ns = common::partition::cut(&history, "postgres", &["cutoff", "1"]).await;
    // What the standby holds, read before it is promoted (cut off from the
    // primary since `cut_ns`: final).
    let survived: Vec<u64> = {
        let (standby, keys) = (standby.to_owned(), plan.keys.clone());
        blocking(move || keys.iter().map(|k| count_on(&standby, k)).collect()).await
    };
    let promoted = {
        let standby = standby.to_owned();
        blocking(move || psql(&standby, "SELECT pg_promote(true, 60)")).await
    };
    assert_eq!(promoted, "t", "pg_promote on the standby failed");
    let promoted_ns = history.now_ns();
    acked(
        &history,
        promoted_ns,
        ACKS_PER_PHASE,
        RECOVERY_BOUND,
        "by the promoted standby",
    )
    .await;
    let mut observed = workload.stop().await;
    common::partition::cut(&history, "postgres", &["heal"]).await;

    let store = bakery::connect(standby)
        .await
        .expect("connect to the promoted standby");
    let finals = common::cluster::read_counts(&*store, &plan.keys, RECOVERY_BOUND).await;
    let mut lost_acked = 0;
    let mut seen_then_gone = 0;
    for (key, &held) in plan.keys.iter().zip(&survived) {
        lost_acked += acked_above(&history, key, promoted_ns, held);
        seen_then_gone += history
            .operations()
            .iter()
            .filter(|op| op.key == key.as_str())
            .filter(|op| op.completed_ns.is_some_and(|t| t < cutoff_ns))
            .filter(|op| match &op.outcome {
                Outcome::Ok {
                    reply: Reply::Row(Some(row)) | Reply::Conflict(Some(row)),
                } => count_of(&row.value.0) > held,
                _ => false,
            })
            .count();
    }
    let ahead = on_primary
        .iter()
        .zip(&survived)
        .filter(|(primary, standby)| primary > standby)
        .count();
    let sequence = bakery_verify::checks::check_sequence(&observed.ids);
    let locks = observed.lock_report();
    let report = linearizability::check(&history);
    let what = "standby isolated, then the primary cut off from standby and clients, standby \
                promoted";
    FaultRow {
        suite: "cluster",
        backend: "postgres".into(),
        setup: "primary + synchronous standby, each in a network namespace".into(),
        fault: format!(
            "{what} ({:.1}s, then {:.1}s), clients moved on; {seen_then_gone} Ok calls on the old \
             primary saw an increment the promoted standby never had; old primary ahead of the \
             standby on {ahead} counters",
            (cutoff_ns - cut_ns) as f64 / 1e9,
            (promoted_ns - cutoff_ns) as f64 / 1e9
        ),
        counts: Counts::of(&history),
        lost_acked: Some(lost_acked),
        duplicate_ids: Some(sequence.duplicates),
        stale_accepted: Some(locks.stale_accepted()),
        sequence_clients: Some(observed.ids.len()),
        locks: Some((&locks).into()),
        verdict: format!(
            "{:?} ({} ops, {} unknown)",
            report.verdict(),
            report.ops(),
            report.unknown()
        ),
    }
    .record();
    println!(
        "partition_postgres: {what}: calls {}; standby at promotion {survived:?}, at the end \
         {finals:?}, old primary before the cutoff {on_primary:?}; acknowledged increments lost {lost_acked}; {seen_then_gone} Ok calls on the \
         old primary saw an increment the promoted standby never had; sequence: {} ids, {} \
         duplicates; {locks}; history {:?} ({} ops, {} unknown)",
        Counts::of(&history),
        sequence.ids,
        sequence.duplicates,
        report.verdict(),
        report.ops(),
        report.unknown()
    );
    assert_eq!(
        ahead, 0,
        "{what}: the old primary showed counters {on_primary:?}, the standby cut off from it \
         {survived:?}: commits never replicated were visible (a cancelled sync wait?)"
    );
    assert_eq!(
        seen_then_gone, 0,
        "{what}: {seen_then_gone} Ok calls on the old primary saw an increment the promoted \
         standby never had"
    );
    assert_eq!(lost_acked, 0, "{what}: acknowledged increments lost");
    assert!(sequence.passed(), "{what}: ids: {sequence:?}");
    assert!(
        observed.ids.len() >= 3 && observed.ids.iter().all(|ids| !ids.is_empty()),
        "{what}: want 3+ sequence clients, each with ids"
    );
    locks.assert_kept(what, 3);
    assert_counters(what, &history, &plan.keys, &finals);
    assert_eq!(report.verdict(), Verdict::Linearizable, "{what}:\n{report}");
}

/// The count the server at `uri` holds in counter `key` (0: absent),
/// read with psql.
fn count_on(uri: &str, key: &Key) -> u64 {
    assert!(!key.as_str().contains('\''), "a quote in key {key}");
    let value = psql(
        uri,
        &format!(
            "SELECT encode(value, 'escape') FROM bakery_rows WHERE key = '{}'",
            key.as_str()
        ),
    );
    count_of(value.as_bytes())
}
