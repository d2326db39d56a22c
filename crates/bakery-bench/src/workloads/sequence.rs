//! The `sequence` workload: `Sequence::next()` from several clients on one
//! sequence.
//!
//! Each client has its own handle on the same sequence name, as separate
//! processes would (handles share nothing but the store): each reserves
//! its own blocks of the plan's block size, with background prefetch on. One
//! operation is one `next()` call, so ops/s is ids/s and the latency
//! percentiles are per call. Each client also checks that its ids strictly
//! increase.

use std::sync::Arc;

use bakery::{Key, Sequence, VersionedStore};

use super::prelude::*;

/// The `sequence` workload.
#[derive(Debug, Clone, Copy)]
pub struct SequenceWorkload;

const NEXT: Variant = Variant::new("next", "Sequence::next()");

/// Adaptive block size: starts at the plan's block size and doubles (up to
/// 10,000 times that) while a block lasts less than half of
/// [`ADAPTIVE_TARGET`], so the prefetch can outrun a closed-loop consumer.
const ADAPTIVE: Variant = Variant::new("adaptive", "Sequence::next(), adaptive block");

/// How long an adaptive block should last.
const ADAPTIVE_TARGET: std::time::Duration = std::time::Duration::from_secs(1);

/// The extra counters of a sequence cell.
const WAITS: &str = "waits";
const RESERVATIONS: &str = "reservations";

/// The `sequence` workload as the registry lists it.
pub const SPEC: WorkloadSpec =
    WorkloadSpec::new("sequence", "ids", &[NEXT, ADAPTIVE], &SequenceWorkload)
        .summary("Sequence::next().")
        .title(
            "sequence: next() on one sequence, a handle per client, block size {block_size}, \
             prefetch on (ids/s; latency per call; waits = calls that waited for the store)",
        )
        .extra_columns(&[WAITS, RESERVATIONS]);

#[async_trait]
impl Workload for SequenceWorkload {
    async fn setup(&self, store: &CellStore, cell: &CellSpec) -> Result<PreparedCell, BenchError> {
        let name = cell.recipe_name();
        let prepare_error = prepare_error("sequence", store);
        let key = Key::with_prefix(bakery::sequence::KEY_PREFIX, &name).map_err(prepare_error)?;
        let handle = || {
            let builder = Sequence::builder(store.counted.clone(), &name).prefetch(true);
            let builder = if cell.variant == ADAPTIVE.id {
                builder
                    .adaptive(cell.block_size, cell.block_size.saturating_mul(10_000))
                    .target_block_duration(ADAPTIVE_TARGET)
            } else {
                builder.block_size(cell.block_size)
            };
            let sequence = builder.build().map_err(prepare_error)?;
            Ok(Box::new(SequenceClient { sequence, last: 0 }) as Box<dyn BenchClient>)
        };
        let clients = (0..cell.clients)
            .map(|_| handle())
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
    /// The last id handed out (ids start at 1).
    last: u64,
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
        Ok(())
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
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
