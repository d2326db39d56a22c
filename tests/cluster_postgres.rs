//! PostgreSQL failover: a primary with a streaming standby
//! (`postgres_primary`, `postgres_standby` of `scripts/backends.sh`), the
//! primary SIGKILLed in the middle of a run, the standby promoted
//! (`pg_promote()`), and new clients opened on the standby's URI.
//!
//! Once with asynchronous replication (PostgreSQL's default) and once with
//! synchronous replication (`synchronous_standby_names` naming the
//! standby; bakery's sessions commit with `synchronous_commit = on`). The
//! asynchronous pair is refused at open by default (a standby that does not
//! confirm commits is a durability hazard), so that run opts in with
//! `accept_data_loss=true`. The same workload both times: counter clients (read-modify-write
//! `put_if_version`, recorded by bakery_verify's `RecordingStore`, all in
//! one history across the failover), sequence handles, and lock clients
//! writing a fenced value with their tokens. Measured, per mode:
//! acknowledged increments the promoted standby lacks, sequence ids handed
//! out again after the promotion, stale fenced writes accepted, and the
//! linearizability verdict of the whole history.
//!
//! Asserted in both modes (what a single primary guarantees): every error
//! is typed, no call hangs; the calls made on the primary form a
//! linearizable history; no id twice from one server; each counter on the standby holds at most the
//! acknowledged plus the unknown increments; the clients on the standby get
//! writes acknowledged. Asserted with synchronous replication: no
//! acknowledged increment lost, no id handed out twice across the
//! failover, no stale fenced write accepted, the whole history
//! linearizable, each counter within [acked, acked + unknown]. With
//! asynchronous replication the losses are only reported: on loopback the
//! standby is usually caught up, and a loss is a possibility, not a
//! certainty.
//!
//! Each mode starts from the primary (restarted if a run killed it) and a
//! fresh standby (`restart postgres_standby` makes one from a new base
//! backup), and the test leaves the pair that way, asynchronous, so it can
//! run again. Runs under `BAKERY_FAULT_TESTS=1` (scripts/test.sh, CI),
//! where a missing URI fails; without it, it prints why and returns.

mod common;

use std::time::Duration;

use bakery_verify::checks::check_sequence;
use bakery_verify::linearizability::{self, check_operations, Verdict, DEFAULT_STEP_LIMIT};
use bakery_verify::workload::Counts;
use bakery_verify::History;
use common::cluster::{
    acked_above, assert_counters, puts_on, read_counts, Observed, Plan, Workload,
};
use common::report::FaultRow;
use common::{backends, fault_tests_uri, psql};

const PRIMARY: &str = "postgres_primary";
const STANDBY: &str = "postgres_standby";

/// The standby's application_name (scripts/backends/postgres_standby.sh).
const STANDBY_NAME: &str = "bakery_standby";

/// How long a promotion, a reconnection and a restart may take (a bound,
/// not a speed check).
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// Acknowledged counter writes awaited before the kill and after the
/// promotion: the run's length.
const ACKS_PER_PHASE: u64 = 60;

/// Clients opened on the standby record as clients from here on.
const STANDBY_CLIENTS: u64 = 100;

/// The primary running, replicating to a fresh standby, synchronously or not.
fn fresh_pair(primary: &str, sync: bool) {
    backends("start", PRIMARY);
    let names = if sync { STANDBY_NAME } else { "" };
    psql(
        primary,
        &format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'"),
    );
    assert_eq!(psql(primary, "SELECT pg_reload_conf()"), "t");
    backends("restart", STANDBY);
    let want = if sync { "sync" } else { "async" };
    let query = format!(
        "SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'"
    );
    let start = std::time::Instant::now();
    while psql(primary, &query) != want {
        assert!(
            start.elapsed() < RECOVERY_BOUND,
            "the standby is not {want}: {:?}",
            psql(primary, &query)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What one failover showed.
#[derive(Debug)]
struct Figures {
    counts: Counts,
    unknown_puts: u64,
    lost_acked: u64,
    duplicates: u64,
    stale_accepted: u64,
    sequence_clients: usize,
    locks: common::report::LockFigures,
    verdict: Verdict,
}

fn failover(primary: &str, standby: &str, sync: bool) -> Figures {
    let mode = if sync { "synchronous" } else { "asynchronous" };
    fresh_pair(primary, sync);
    bakery_testkit::runtime(4).block_on(async move {
        // By default bakery refuses a primary whose standby does not
        // confirm commits: the failover below shows why.
        let opened = bakery::connect(primary).await;
        let primary = if sync {
            assert!(opened.is_ok(), "{mode}: refused: {:?}", opened.err());
            primary.to_owned()
        } else {
            let Err(refused) = opened else {
                panic!("{mode}: opened beside a standby that does not confirm commits");
            };
            assert_eq!(refused.kind(), bakery::ErrorKind::Config, "{refused}");
            bakery_testkit::assert_mentions(
                &refused,
                &[
                    "do not confirm commits",
                    "1 connected",
                    "accept_data_loss=true",
                ],
            );
            let sep = if primary.contains('?') { '&' } else { '?' };
            format!("{primary}{sep}accept_data_loss=true")
        };
        let history = History::new();
        let plan = Plan::new("cluster-pg", 2, 4, 3);
        let workload = Workload::start(&primary, &history, &plan, 0).await;
        let served = workload.served(&history, 0, ACKS_PER_PHASE, RECOVERY_BOUND);
        assert!(
            served.await,
            "{mode}: the primary did not serve every client"
        );
        tokio::task::spawn_blocking(|| backends("kill", PRIMARY))
            .await
            .expect("kill");
        let killed_ns = history.now_ns();
        let promoted = tokio::task::spawn_blocking({
            let standby = standby.to_owned();
            move || psql(&standby, "SELECT pg_promote(true, 60)")
        })
        .await
        .expect("promote");
        assert_eq!(promoted, "t", "{mode}: pg_promote failed");
        let mut observed: Observed = workload.stop().await;

        // New clients, on the standby's URI.
        let on_standby = bakery::connect(standby)
            .await
            .expect("connect to the promoted standby");
        let survived = read_counts(&*on_standby, &plan.keys, RECOVERY_BOUND).await;
        let reopened_ns = history.now_ns();
        let workload = Workload::start(standby, &history, &plan, STANDBY_CLIENTS).await;
        let continued = workload
            .served(&history, reopened_ns, ACKS_PER_PHASE, RECOVERY_BOUND)
            .await;
        assert!(
            continued,
            "{mode}: the promoted standby did not serve every client"
        );
        let on_primary_ids = observed.ids.len();
        observed.merge(workload.stop().await);
        let finals = read_counts(&*on_standby, &plan.keys, RECOVERY_BOUND).await;

        // Measured.
        let mut lost_acked = 0;
        let mut unknown_puts = 0;
        for (i, key) in plan.keys.iter().enumerate() {
            let (acked, unknown) = puts_on(&history, key, Some(reopened_ns));
            lost_acked += acked_above(&history, key, killed_ns, survived[i]);
            unknown_puts += unknown;
            assert!(
                survived[i] <= acked + unknown,
                "{mode}: counter {key} = {} on the promoted standby, above acked + unknown {}",
                survived[i],
                acked + unknown
            );
        }
        let sequence = check_sequence(&observed.ids);
        let locks = observed.lock_report();
        let fence = &locks.fence;
        let report = linearizability::check(&history);
        let figures = Figures {
            counts: Counts::of(&history),
            unknown_puts,
            lost_acked,
            duplicates: sequence.duplicates,
            stale_accepted: locks.stale_accepted(),
            sequence_clients: observed.ids.len(),
            locks: (&locks).into(),
            verdict: report.verdict(),
        };
        println!(
            "cluster_postgres[{mode}]: calls {} ({} counter, {} sequence, {} lock errors); \
             counters on the standby at promotion {survived:?}, at the end {finals:?}; \
             acknowledged increments lost {lost_acked}, unknown {unknown_puts}; \
             sequence: {} clients, {} ids, {} duplicates, {} non-increasing, {} gaps; \
             {locks}; fenced calls {} accepted, {} rejected; \
             whole history {:?} ({} ops, {} unknown)",
            figures.counts,
            observed.counter_errors,
            observed.sequence_errors,
            locks.failures.len(),
            observed.ids.len(),
            sequence.ids,
            sequence.duplicates,
            sequence.non_increasing,
            sequence.gaps,
            fence.accepted,
            fence.rejected,
            report.verdict(),
            report.ops(),
            report.unknown(),
        );

        // Guaranteed in both modes: each server on its own is one primary.
        // (The standby's calls alone start from rows they did not write,
        // so only the primary's are checked alone.)
        let on_primary: Vec<_> = history
            .operations()
            .into_iter()
            .filter(|op| op.client < STANDBY_CLIENTS)
            .collect();
        let alone = check_operations(&on_primary, DEFAULT_STEP_LIMIT);
        assert_eq!(
            alone.verdict(),
            Verdict::Linearizable,
            "{mode}: the calls on the primary alone:\n{alone}"
        );
        let (before, after) = observed.ids.split_at(on_primary_ids);
        for (server, ids) in [("primary", before), ("promoted standby", after)] {
            let alone = check_sequence(ids);
            assert!(
                alone.passed(),
                "{mode}: ids from the {server} alone: {alone:?}"
            );
        }

        // Both modes: three separate clients of each kind on each server,
        // and fenced writes made (and deliberate stale ones tried), so the
        // fence check below judges something.
        assert_eq!(observed.ids.len(), 6, "{mode}: sequence clients");
        assert!(
            observed.ids.iter().all(|ids| !ids.is_empty()),
            "{mode}: a sequence client got no id"
        );
        assert!(
            locks.clients == 6 && locks.writes_accepted > 0 && locks.stale_tried > 0,
            "{mode}: {locks}"
        );
        if sync {
            assert_eq!(lost_acked, 0, "{mode}: acknowledged increments lost");
            assert!(
                sequence.passed(),
                "{mode}: ids across the failover: {sequence:?}"
            );
            locks.assert_kept(&format!("{mode}, across the failover"), 6);
            assert_eq!(
                report.verdict(),
                Verdict::Linearizable,
                "{mode}: the whole history:\n{report}"
            );
            assert_counters(mode, &history, &plan.keys, &finals);
        }
        figures
    })
}

#[test]
fn postgres_standby_promotion() {
    let primary = fault_tests_uri(PRIMARY, "BAKERY_POSTGRES_PRIMARY_URI");
    let standby = fault_tests_uri(STANDBY, "BAKERY_POSTGRES_STANDBY_URI");
    let (Some(primary), Some(standby)) = (primary, standby) else {
        return;
    };
    let asynchronous = failover(&primary, &standby, false);
    let synchronous = failover(&primary, &standby, true);
    // Leave the pair as `start` makes it: asynchronous, standby streaming.
    fresh_pair(&primary, false);
    for (mode, f) in [("asynchronous", asynchronous), ("synchronous", synchronous)] {
        FaultRow {
            suite: "cluster",
            backend: "postgres".into(),
            setup: if mode == "asynchronous" {
                "primary + asynchronous standby (refused by default; accept_data_loss=true)".into()
            } else {
                "primary + synchronous standby".into()
            },
            fault: "primary crashed (all its processes SIGKILLed at once), standby promoted".into(),
            counts: f.counts,
            lost_acked: Some(f.lost_acked),
            duplicate_ids: Some(f.duplicates),
            stale_accepted: Some(f.stale_accepted),
            sequence_clients: Some(f.sequence_clients),
            locks: Some(f.locks),
            verdict: format!("{:?}", f.verdict),
        }
        .record();
        println!(
            "cluster_postgres: {mode:>12}: calls {}, puts of unknown outcome {}, acknowledged \
             increments lost {}, duplicate ids {}, stale fenced writes accepted {}, history {:?}; \
             {} sequence clients, {} lock clients, {} grants ({} overlapping), {} fenced writes accepted, \
             {} stale tried",
            f.counts, f.unknown_puts, f.lost_acked, f.duplicates, f.stale_accepted, f.verdict,
            f.sequence_clients, f.locks.clients, f.locks.grants, f.locks.overlapping,
            f.locks.fenced_accepted, f.locks.stale_tried
        );
    }
}
