//! The `sequence` workload: `Sequence::next()` from several clients on one
//! sequence, with the default settings (adaptive block, prefetch on).
//!
//! Two variants:
//! - `next`: a handle per client, built alike in one process, as a service
//!   builds one per request or per task. Such handles are one client: they
//!   share the blocks (and the stats, so only the first one reports them).
//! - `nodes`: a handle per client, each with its own node id, as separate
//!   processes would be: each reserves its own blocks on the one row, so
//!   this variant shows how the store bears contention on it.
//!
//! One operation is one `next()` call, so ops/s is ids/s and the latency
//! percentiles are per call. Each client also checks that its ids strictly
//! increase.

use std::sync::Arc;

use bakery::{Key, Sequence, VersionedStore};

use crate::journal::Journal;

use super::prelude::*;

/// The `sequence` workload.
#[derive(Debug, Clone, Copy)]
pub struct SequenceWorkload;

const NEXT: Variant = Variant::new("next", "Sequence::next()");

const NODES: Variant = Variant::new("nodes", "Sequence::next(), a node per client");

/// The extra counters of a sequence cell.
const WAITS: &str = "waits";
const RESERVATIONS: &str = "reservations";

/// The `sequence` workload as the registry lists it.
pub const SPEC: WorkloadSpec =
    WorkloadSpec::new("sequence", "ids", &[NEXT, NODES], &SequenceWorkload)
        .summary("Sequence::next().")
        .title(
            "sequence: next() on one sequence, default settings (block adapting from 1,000 to \
             1,000,000 ids, prefetch on), a handle per client; in one process they are one \
             client unless each has its own node id; the cached nextval() peer has CACHE \
             {block_size} (ids/s; latency per call; waits = calls that waited for the store)",
        )
        .extra_columns(&[WAITS, RESERVATIONS])
        .across_processes();

#[async_trait]
impl Workload for SequenceWorkload {
    async fn setup(&self, store: &CellStore, cell: &CellSpec) -> Result<PreparedCell, BenchError> {
        let name = cell.recipe_name();
        let prepare_error = prepare_error("sequence", store);
        let key = Key::with_prefix(bakery::sequence::KEY_PREFIX, &name).map_err(prepare_error)?;
        let own_nodes = cell.variant == NODES.id;
        let handle = |client: usize| {
            let builder = Sequence::builder(store.counted.clone(), &name);
            let builder = if own_nodes {
                builder.node_id(format!("bench-{client}"))
            } else {
                builder
            };
            let sequence = builder.build().map_err(prepare_error)?;
            Ok(Box::new(SequenceClient {
                sequence,
                journal: cell.journal.clone(),
                last: 0,
                reports_stats: own_nodes || client == 0,
            }) as Box<dyn BenchClient>)
        };
        let clients = (0..cell.clients)
            .map(handle)
            .collect::<Result<_, BenchError>>()?;
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(SequenceFinish {
                store: store.raw.clone(),
                key,
            })),
        })
    }
}

/// One handle calling `next()`.
struct SequenceClient {
    sequence: Sequence,
    /// Across processes: every id logged, for the parent's duplicate check.
    journal: Option<Arc<Journal>>,
    /// The last id handed out (ids start at 1).
    last: u64,
    /// Whether this handle reports its client's stats (handles of one
    /// client share them, so only one of them does).
    reports_stats: bool,
}

#[async_trait]
impl BenchClient for SequenceClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let id = self.sequence.next().await?;
        if id <= self.last {
            return Err(OpError(format!(
                "id {id} after {}: ids of one handle must increase",
                self.last
            )));
        }
        self.last = id;
        if let Some(journal) = &self.journal {
            journal.id(id);
        }
        Ok(())
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
        if !self.reports_stats {
            return Vec::new();
        }
        let stats = self.sequence.stats();
        vec![(WAITS, stats.waits), (RESERVATIONS, stats.reservations)]
    }
}

/// Deletes the sequence row (the handles are gone by then, so nothing
/// reserves any more).
struct SequenceFinish {
    store: Arc<dyn VersionedStore>,
    key: Key,
}

#[async_trait]
impl Finish for SequenceFinish {
    async fn finish(self: Box<Self>, _had_errors: bool) -> Vec<String> {
        delete_quietly(&*self.store, &self.key).await;
        Vec::new()
    }
}
