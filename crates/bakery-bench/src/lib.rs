//! The benchmark framework behind `bakery bench`: the same workloads, clients
//! and duration on every store, side by side, with native peers (PostgreSQL
//! `nextval()`, advisory locks and a processed-keys table, Redis `INCRBY`
//! and its `SET NX PX` lock, etcd's lock) as reference; throughput, HDR
//! latency percentiles, round trips and conflicts per operation, fairness;
//! the performance targets checked; and the report as console tables, JSON,
//! SVG charts and Markdown.
//!
//! ```no_run
//! # async fn example() -> Result<(), bakery_bench::BenchError> {
//! use std::time::Duration;
//!
//! let plan = bakery_bench::Plan {
//!     workloads: vec!["sequence".into()],
//!     uris: Vec::new(), // memory:// and a throwaway SQLite file
//!     clients: vec![1, 4],
//!     duration: Duration::from_secs(1),
//!     rounds: 1,
//!     block_size: 1000,
//!     command: "example".into(),
//!     progress: false,
//!     processes: None, // or a client per OS process: `ProcessPlan`
//!     mariadb: None,  // or a MariaDB server whose GET_LOCK runs beside PostgreSQL
//! };
//! let report = bakery_bench::run(plan).await?;
//! print!("{}", bakery_bench::report::text::render(&report, None));
//! # Ok(()) }
//! ```
//!
//! # Layers
//!
//! Every module imports only modules above it in this list (`use crate::…`
//! and `use super::…` alike; a parent `mod.rs` declares its files, no file
//! imports its parent), so there is no import circle. In parentheses: what
//! each imports.
//!
//! 1. [`error`] — [`BenchError`], one-line messages (nothing).
//! 2. [`stats`] — HDR histograms, fairness (`error`); [`journal`] — a
//!    client's grants and ids across processes, and their checks (`error`,
//!    `stats`).
//! 3. [`model`] — the [`Workload`](model::Workload) and
//!    [`Peer`](model::Peer) traits, cells, clients, `OpError`,
//!    `Implementation` (`error`, `journal`).
//! 4. Shared utilities: [`baseline`] (the old lock; nothing),
//!    [`machine`] (nothing), [`format`](mod@format) (nothing).
//! 5. [`workloads`] — one file per workload: `cas`, `sequence`, `once`,
//!    `consumer`, `outbox` (`error`, `model`, `workloads::cleanup`; the
//!    outbox, with the postgres feature, also `bakery-outbox`), `lock` (the
//!    same and `baseline`, `journal`), `rwlock` (the same and `journal`);
//!    the registry, the one list of them,
//!    in `workloads/mod.rs` (`model`, its files).
//! 6. [`peers`] — the native clients, one file per backend: `postgres`,
//!    `redis` (`error`, `journal`, `model`, `peers::driver`,
//!    `workloads::lock`), `advisory` (`error`,
//!    `model`, `peers::driver`, `peers::postgres`, `workloads::lock`),
//!    `processed` (`error`, `model`, `peers::driver`, `peers::postgres`), `etcd` (`error`,
//!    `model`, `peers::driver`, `workloads::lock`), `cassandra`, `mongodb`
//!    (nothing); their registry [`peers::for_target`] in `peers/mod.rs`
//!    (`model`, its files).
//! 7. [`versions`] — server versions (`error`, `peers`).
//! 8. [`runner`] — times one cell (`error`, `model`, `stats`).
//! 9. [`process`] — a cell with a worker process per client, and the
//!    worker (`error`, `journal`, `model`, `peers`, `runner`, `stats`,
//!    `workloads`).
//! 10. [`session`] — runs a [`Plan`] into a [`Run`](session::Run) (`error`,
//!     `machine`, `model`, `peers`, `process`, `runner`, `versions`,
//!     `workloads`).
//! 11. [`results`] — the [`Report`] and the check types, built from a `Run`
//!     (`machine`, `model`, `session`, `stats`).
//! 12. [`checks`] — the performance targets (`format`, `results`).
//! 13. [`report`] — the writers: `table` (`format`, `results`), `json`
//!     (`error`, `results`), `svg` (`error`, `format`, `results`, `stats`),
//!     `markdown` (`checks`, `error`, `format`, `machine`, `report::table`,
//!     `results`), `text` (`report::json`, `report::markdown`,
//!     `report::table`, `results`); `report/mod.rs` (`error`, `results`, its
//!     files).
//! 14. This root: [`run`] (`checks`, `results`, `session`).
//!
//! Adding a workload is one file in `workloads/` declaring its
//! [`WorkloadSpec`](model::WorkloadSpec) and implementing
//! [`Workload`](model::Workload), plus one line in [`workloads::registry`].

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod baseline;
pub mod checks;
pub mod error;
pub mod format;
pub mod journal;
pub mod machine;
pub mod model;
pub mod peers;
pub mod process;
pub mod report;
pub mod results;
pub mod runner;
pub mod session;
pub mod stats;
pub mod versions;
pub mod workloads;

pub use error::BenchError;
pub use results::Report;
pub use session::{Plan, ProcessPlan, ALL_WORKLOADS};

/// Run `plan` and gather its report, the targets checked.
///
/// The clients of a cell run as tasks of the current tokio runtime, in
/// parallel on a multi-threaded one (as separate client processes would).
pub async fn run(plan: Plan) -> Result<Report, BenchError> {
    let run = session::execute(plan).await?;
    let mut report = Report::from_run(run);
    // The cells in one process and those across processes are judged
    // apart (a count of clients is not a count of processes).
    let (across, in_process): (Vec<results::CellResult>, Vec<results::CellResult>) = report
        .results
        .iter()
        .cloned()
        .partition(|cell| cell.across_processes);
    report.checks = checks::evaluate(&in_process);
    // The PostgreSQL bound beside the native lock: the in-process cas cells.
    let mut across_and_cas = across;
    across_and_cas.extend(in_process.into_iter().filter(|cell| cell.workload == "cas"));
    report
        .checks
        .extend(checks::evaluate_across(&across_and_cas));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A short run of every workload on an in-process store, then every
    /// output: the numbers are not checked (they depend on the machine),
    /// only that every cell ran cleanly and every output is there; the
    /// outbox, which needs a PostgreSQL target, is skipped with its reason.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_reports_in_every_form() {
        let plan = Plan {
            block_size: 10,
            command: "bakery bench --test".into(),
            ..Plan::new(
                &[ALL_WORKLOADS],
                &["memory://"],
                vec![1, 2],
                Duration::from_millis(20),
            )
        };
        let report = run(plan).await.expect("run");
        assert_eq!(report.cells_with_errors(), 0, "{:#?}", report.results);
        // 1 store × 2 client counts × (3 cas + 2 sequence + 6 lock (fair,
        // polling, old, election, semaphore, rwlock writers) + 1 rwlock + 2 once + 2
        // consumer variants, and the memory store's two native lock peers,
        // `tokio::sync::Mutex` and the FIFO hand-off); the outbox skipped.
        assert_eq!(report.results.len(), 2 * 18);
        for peer in ["tokio::sync::Mutex", "FIFO hand-off (tokio, no store)"] {
            assert!(
                report
                    .results
                    .iter()
                    .any(|r| r.label == peer && r.errors == 0 && r.ops > 0),
                "{peer}: {:#?}",
                report.results
            );
        }
        assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
        assert_eq!(report.skipped[0].workload, "outbox");
        assert!(
            report.skipped[0].reason.contains("postgres"),
            "{:?}",
            report.skipped
        );
        assert_eq!(report.checks.len(), 19);
        let criterion = report
            .checks
            .iter()
            .find(|check| check.id == "cached-next-vs-fetch-add")
            .expect("the criterion target is listed");
        assert_eq!(criterion.status, results::CheckStatus::SeeCriterion);

        let text = report::text::render(&report, None);
        for expected in [
            "bakery bench: 20ms per cell",
            "cas: ",
            "sequence: ",
            "lock: ",
            "rwlock: ",
            "once: ",
            "consumer: ",
            "outbox: ",
            "skipped on memory: ",
            "targets",
        ] {
            assert!(text.contains(expected), "no {expected:?} in:\n{text}");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let charts = report::write_files(&report, dir.path()).expect("write");
        // Two charts per workload that ran (not the skipped outbox).
        assert_eq!(charts.len(), 6 * 2, "{charts:?}");
        for file in charts
            .iter()
            .map(String::as_str)
            .chain([report::json::FILE, report::markdown::FILE])
        {
            let text = std::fs::read_to_string(dir.path().join(file)).expect(file);
            assert!(!text.is_empty(), "{file}");
        }
        // The cas cells at 1 client give the store's cost of a larger row.
        let markdown =
            std::fs::read_to_string(dir.path().join(report::markdown::FILE)).expect("markdown");
        assert!(
            markdown.contains("- **Row size**: a conditional write of a 4 KiB row runs at"),
            "{markdown}"
        );
        // Only the lock's cells may run past the duration, and it says so.
        assert!(
            markdown.contains("; a lock cell runs on until its clients did 5 operations each"),
            "{markdown}"
        );
        assert!(!markdown.contains("; a cas cell runs on"), "{markdown}");
        assert!(
            markdown.contains("; any cell runs on until its clients did 1 operation each"),
            "{markdown}"
        );
        let json = std::fs::read_to_string(dir.path().join(report::json::FILE)).expect("json");
        assert!(json.contains("\"max_extension\": 5"), "{json}");
    }
}
