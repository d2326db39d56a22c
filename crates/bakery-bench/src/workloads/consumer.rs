//! The `consumer` workload: `Consumer::process`, exactly-once processing
//! of messages with increasing keys, the state a counter that each applied
//! message increments.
//!
//! Each client has its own `Consumer` handle on the cell's consumer, as
//! separate processes would. Two variants:
//! - **partition per client**: client `i` processes keys 1, 2, 3, … of its
//!   own partition: no contention, so every message is one conditional
//!   write (the handle remembers the row it wrote last) — one round trip;
//! - **shared partition**: every client processes the next key of one
//!   shared counter on one partition: the writes contend, a conflict is
//!   retried with the row the store handed back, and a key that a faster
//!   client's later key overtook is dropped as a duplicate (the
//!   high-water mark rule; the `duplicates` column counts them).
//!
//! Afterwards every partition's counter is read back: their sum must equal
//! the messages applied (a lost update or a double apply would show here),
//! then the rows (`consumer/NAME/PARTITION`) are deleted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bakery::{Consumer, Processed, VersionedStore};

use super::prelude::*;

/// The `consumer` workload.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerWorkload;

const OWN: Variant = Variant::new(
    "partition-per-client",
    "Consumer::process, partition per client",
);
const SHARED: Variant = Variant::new("shared-partition", "Consumer::process, shared partition");

/// Extra column: messages dropped as duplicates (overtaken keys).
const DUPLICATES: &str = "duplicates";

/// The `consumer` workload as the registry lists it.
pub const SPEC: WorkloadSpec = WorkloadSpec::new(
    "consumer",
    "msgs",
    &[OWN, SHARED],
    &ConsumerWorkload,
)
.summary("Consumer::process: a message's state change and high-water mark in one write.")
.title(
    "consumer: Consumer::process of increasing keys, a handle per client, state = a counter \
     (msgs/s; duplicates = keys at or below the mark, dropped)",
)
.extra_columns(&[DUPLICATES]);

#[async_trait]
impl Workload for ConsumerWorkload {
    async fn setup(&self, store: &CellStore, cell: &CellSpec) -> Result<PreparedCell, BenchError> {
        let prepare_error = prepare_error("consumer", store);
        let name = cell.recipe_name();
        let partitions: Vec<String> = if cell.variant == SHARED.id {
            vec!["shared".to_string()]
        } else {
            (0..cell.clients).map(|i| format!("p{i}")).collect()
        };
        // One key counter per partition, shared by its clients.
        let keys: Arc<[AtomicU64]> = partitions.iter().map(|_| AtomicU64::new(0)).collect();
        let applied = Arc::new(AtomicU64::new(0));
        let counted: Arc<dyn VersionedStore> = store.counted.clone();
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for index in 0..cell.clients {
            let slot = index % partitions.len();
            clients.push(Box::new(ConsumerClient {
                consumer: Consumer::builder(counted.clone(), &name)
                    .build()
                    .map_err(prepare_error)?,
                partition: partitions[slot].clone(),
                slot,
                keys: keys.clone(),
                applied: applied.clone(),
                duplicates: 0,
            }));
        }
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(ConsumerFinish {
                consumer: Consumer::builder(store.raw.clone(), &name)
                    .build()
                    .map_err(prepare_error)?,
                store: store.raw.clone(),
                partitions,
                applied,
            })),
        })
    }
}

/// One handle processing messages of its partition.
struct ConsumerClient {
    consumer: Consumer,
    partition: String,
    /// Its partition's index in `keys`.
    slot: usize,
    /// The last key handed out, per partition.
    keys: Arc<[AtomicU64]>,
    /// Messages applied by every client of the cell.
    applied: Arc<AtomicU64>,
    duplicates: u64,
}

#[async_trait]
impl BenchClient for ConsumerClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let key = self.keys[self.slot].fetch_add(1, Ordering::Relaxed) + 1;
        match self
            .consumer
            .process(&self.partition, u128::from(key), |count: u64| count + 1)
            .await?
        {
            Processed::Applied(_) => {
                self.applied.fetch_add(1, Ordering::Relaxed);
            }
            Processed::Duplicate { .. } => self.duplicates += 1,
            Processed::Expired { age } => {
                return Err(OpError(format!(
                    "key {key} expired ({age:?} old) on a consumer without a window"
                )))
            }
        }
        Ok(())
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
        vec![(DUPLICATES, self.duplicates)]
    }
}

/// Checks that the counters add up to the messages applied, then deletes
/// the partitions.
struct ConsumerFinish {
    /// On the raw store (uncounted).
    consumer: Consumer,
    store: Arc<dyn VersionedStore>,
    partitions: Vec<String>,
    applied: Arc<AtomicU64>,
}

#[async_trait]
impl Finish for ConsumerFinish {
    async fn finish(self: Box<Self>, had_errors: bool) -> Vec<String> {
        let mut tally = Tally::default();
        for partition in &self.partitions {
            tally.add(match self.consumer.state::<u64>(partition).await {
                Ok(state) => Ok(state.map(|(_, count)| count)),
                Err(err) => Err(format!("cannot read back partition {partition}: {err}")),
            });
            if let Ok(key) = self.consumer.row_key(partition) {
                delete_quietly(&*self.store, &key).await;
            }
        }
        let applied = self.applied.load(Ordering::Relaxed);
        tally.problems(applied, had_errors, |stored, applied| {
            format!(
                "the counters hold {stored} but {applied} messages were applied (a lost update \
                 or a double apply)"
            )
        })
    }
}
