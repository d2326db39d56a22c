//! The recorded-history checks of `bakery verify` on every backend: a
//! short run of its three workloads (compare-and-set on shared keys, a
//! sequence with small blocks, a fenced lock), every call recorded and
//! checked — per-key linearizability, no duplicate or non-increasing id,
//! no stale fenced write accepted, FIFO grants.

use std::sync::Arc;
use std::time::Duration;

use bakery_core::VersionedStore;
use bakery_verify::{verify, Config, Status};

use crate::{unique_name, Case};

pub(crate) fn cases() -> Vec<Case> {
    crate::cases_of!("verify":
        recorded_histories_check_out,
    )
}

/// Small enough for every backend's share of the test command (a few
/// seconds on Cassandra), contended enough to race: 4 clients on 2 keys.
async fn recorded_histories_check_out(store: Arc<dyn VersionedStore>) {
    let backend = store.backend();
    let config = Config {
        clients: 4,
        keys: 2,
        duration: Duration::from_secs(30),
        cas_ops: 100,
        sequence_ids: 200,
        block_size: 5,
        lock_rounds: 4,
        namespace: unique_name("verify"),
        ..Config::default()
    };
    let report = match verify(store, &config).await {
        Ok(report) => report,
        Err(e) => panic!("{backend}: verify did not run: {e}"),
    };
    let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "cas-linearizability",
            "sequence",
            "fenced-writes",
            "lock-fifo"
        ],
        "{backend}: {report}"
    );
    for check in &report.checks {
        // Skipped is allowed only for FIFO order after a lease expired.
        let allowed = check.status == Status::Pass
            || (check.name == "lock-fifo" && check.status == Status::Skipped);
        assert!(
            allowed,
            "{backend}: {} is {:?}\n{report}",
            check.name, check.status
        );
        // A workload whose every call failed would pass vacuously.
        assert!(
            check.counts.ok > 0,
            "{backend}: {} did nothing\n{report}",
            check.name
        );
    }
}
