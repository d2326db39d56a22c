//! The `outbox` workload: the transactional outbox end to end — a message
//! emitted into PostgreSQL's WAL by a producer's transaction, read back by
//! the relay from a logical replication slot, and applied exactly once by a
//! `ConsumerSink` to a consumer on the cell's store.
//!
//! One operation is one message, from the start of its `emit` until the
//! relay has applied it to the consumer: each client emits a message (as
//! its own transaction, on its own PostgreSQL connection) and waits until
//! the sink has applied it, then emits the next. So ops/s is messages/s end
//! to end, and the latency percentiles are end-to-end latencies. One relay
//! runs for the whole cell, polling every millisecond when the slot is
//! empty (so the latency is the pipeline's, not a poll interval's); the
//! `batches` column counts the batches it delivered (warm-up included), so
//! ops / batches is the mean batch. Round trips/op are the calls of the
//! sink's consumer to the cell's store per message; the PostgreSQL requests
//! of the producers (one per message) and of the relay (a read and a
//! confirmation per batch) are not counted.
//!
//! Why this design: the runner measures closed loops, and the relay is an
//! open pipeline. Timing only the producers would measure `emit`, and a
//! relay rate computed after the cell would need the drain time outside the
//! timed part. Waiting for each message's delivery keeps the whole pipeline
//! inside the timed operation, so every column keeps its meaning. The cost
//! is that at most one message per client is in flight: the relay's peak
//! rate shows at higher client counts, where its batches fill.
//!
//! The source is the plan's first PostgreSQL target (bakery's options
//! removed), whatever the cell's store is; it needs `wal_level=logical`
//! and the right to create replication slots. Without such a target, or on
//! a server that refuses, the workload is skipped with the reason. Each cell
//! creates its own slot (`bakery_bench_<tag>`) and prefix (`bench-<tag>`),
//! and drops the slot afterwards (a slot left behind would keep WAL on the
//! server, so a failure to drop it is reported as an error of the cell).
//! Afterwards the consumer's digest is read back: it must count every
//! acknowledged message exactly once; a message that never arrives fails
//! its operation after 30 s (the relay's own retry window) and the check.
//!
//! The relay reads the slot with SQL functions, and PostgreSQL logs each
//! read ("starting logical decoding for slot …", level LOG): at a 1 ms
//! poll an idle relay writes about a thousand such lines per second to a
//! default-configured server's log.

use async_trait::async_trait;

use crate::error::BenchError;
use crate::model::{CellSpec, CellStore, PreparedCell, Variant, Workload, WorkloadSpec};

/// The `outbox` workload.
#[derive(Debug, Clone, Copy)]
pub struct OutboxWorkload;

const RELAY: Variant = Variant::new("relay", "emit → Relay → ConsumerSink");

/// Extra column: batches the relay delivered.
const BATCHES: &str = "batches";

/// The `outbox` workload as the registry lists it.
pub const SPEC: WorkloadSpec = WorkloadSpec::new("outbox", "msgs", &[RELAY], &OutboxWorkload)
    .summary(
        "The PostgreSQL outbox end to end: emit, relay, exactly-once consumer on the store \
         (needs a postgres target as source).",
    )
    .title(
        "outbox: one message per operation, from emit (its own PostgreSQL transaction) until \
         the relay applied it to a consumer on the store (msgs/s and latency end to end; round \
         trips = the consumer's store calls; batches = relay batches)",
    )
    .extra_columns(&[BATCHES]);

#[async_trait]
impl Workload for OutboxWorkload {
    async fn setup(&self, store: &CellStore, cell: &CellSpec) -> Result<PreparedCell, BenchError> {
        #[cfg(feature = "postgres")]
        return pipeline::prepare(store, cell).await;
        #[cfg(not(feature = "postgres"))]
        {
            let _ = (store, cell);
            Err(BenchError::Unavailable(
                "this build has no postgres feature (the outbox's source)".to_string(),
            ))
        }
    }
}

#[cfg(feature = "postgres")]
mod pipeline {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use async_trait::async_trait;
    use bakery::{Consumer, ErrorKind, VersionedStore};
    use bakery_outbox::tokio_postgres::Client;
    use bakery_outbox::{emit, ConsumerSink, Digest, Message, Relay, Sink};
    use tokio::sync::watch;
    use tokio::task::JoinHandle;

    use super::BATCHES;
    use crate::error::BenchError;
    use crate::model::{BenchClient, CellSpec, CellStore, Finish, OpError, PreparedCell};
    use crate::workloads::cleanup::{counts_disagree, delete_quietly, prepare_error};

    /// Changes the relay decodes per batch (the CLI's default).
    const BATCH: i32 = 1000;
    /// How long the relay waits before reading an empty slot again.
    const POLL: Duration = Duration::from_millis(1);
    /// How long opening a PostgreSQL connection may take.
    const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// How long a client waits for its message to be applied.
    const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
    /// How long the finish waits for the relay to drain and stop.
    const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
    /// The consumer partition every message goes to.
    const PARTITION: &str = "messages";

    type DigestSink = ConsumerSink<Digest, fn(Digest, &Message) -> Digest>;

    /// A PostgreSQL connection to `source`, bounded in time.
    async fn open(source: &str) -> Result<Client, bakery::Error> {
        tokio::time::timeout(CONNECT_TIMEOUT, bakery_outbox::connect(source))
            .await
            .unwrap_or_else(|_| {
                Err(bakery::Error::new(
                    ErrorKind::Unavailable,
                    "outbox",
                    "connecting to the source timed out",
                ))
            })
    }

    pub(super) async fn prepare(
        store: &CellStore,
        cell: &CellSpec,
    ) -> Result<PreparedCell, BenchError> {
        let Some(source) = cell.postgres.as_deref() else {
            return Err(BenchError::Unavailable(
                "needs a PostgreSQL target in the plan as the outbox's source (add a postgres \
                 --uri)"
                    .to_string(),
            ));
        };
        let prepare_error = prepare_error("outbox", store);
        let admin = open(source).await.map_err(prepare_error)?;
        let wal_level: String = admin
            .query_one("SHOW wal_level", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| BenchError::Internal(format!("outbox: SHOW wal_level: {e}")))?;
        if wal_level != "logical" {
            return Err(BenchError::Unavailable(format!(
                "the PostgreSQL source has wal_level={wal_level}; logical decoding needs \
                 wal_level=logical"
            )));
        }
        let prefix = cell.recipe_name();
        let consumer = Consumer::builder(store.counted.clone(), &prefix)
            .build()
            .map_err(prepare_error)?;
        // Uncounted: reads the digest back and names the row to delete.
        let check = Consumer::builder(store.raw.clone(), &prefix)
            .build()
            .map_err(prepare_error)?;
        let sink = ConsumerSink::digest(consumer)
            .partition(PARTITION)
            .map_err(prepare_error)?;
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..cell.clients).map(|_| watch::channel(0u64)).unzip();
        let failure = Arc::new(Mutex::new(None));
        let emitted = Arc::new(AtomicU64::new(0));
        let batches = Arc::new(AtomicU64::new(0));
        let mut clients: Vec<Box<dyn BenchClient>> = Vec::with_capacity(cell.clients);
        for (index, applied) in receivers.into_iter().enumerate() {
            clients.push(Box::new(Producer {
                client: open(source).await.map_err(prepare_error)?,
                index: u32::try_from(index).unwrap_or(u32::MAX),
                prefix: prefix.clone(),
                seq: 0,
                applied,
                failure: failure.clone(),
                emitted: emitted.clone(),
                batches: (index == 0).then(|| batches.clone()),
            }));
        }
        // Created last: nothing fails after it but the relay itself.
        let slot = cell.sql_name();
        let relay = match Relay::connect(source, &slot).await {
            Ok(relay) => relay.prefix(&prefix).map_err(prepare_error)?,
            Err(err) if err.kind() == ErrorKind::Config => {
                return Err(BenchError::Unavailable(format!(
                    "the PostgreSQL source cannot host a relay: {err}"
                )))
            }
            Err(err) => return Err(prepare_error(err)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(relay_loop(
            relay,
            Notifying {
                sink,
                clients: senders,
                batches: batches.clone(),
            },
            stop.clone(),
            failure,
        ));
        Ok(PreparedCell {
            clients,
            finish: Some(Box::new(OutboxFinish {
                admin,
                slot,
                stop,
                task,
                store: store.raw.clone(),
                consumer: check,
                emitted,
            })),
        })
    }

    /// The sink the relay delivers to: the consumer, then a wake-up of the
    /// client whose message it was.
    struct Notifying {
        sink: DigestSink,
        /// Per client, the highest sequence number applied.
        clients: Vec<watch::Sender<u64>>,
        batches: Arc<AtomicU64>,
    }

    #[async_trait]
    impl Sink for Notifying {
        async fn deliver(&mut self, message: &Message) -> bakery::Result<()> {
            self.sink.deliver(message).await?;
            if let Some((client, seq)) = decode(&message.payload) {
                if let Some(applied) = self.clients.get(client) {
                    applied.send_if_modified(|last| {
                        let newer = seq > *last;
                        *last = (*last).max(seq);
                        newer
                    });
                }
            }
            Ok(())
        }

        async fn flush(&mut self) -> bakery::Result<()> {
            self.sink.flush().await?;
            self.batches.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    /// A message's payload: the client's index and its sequence number.
    fn encode(client: u32, seq: u64) -> [u8; 12] {
        let mut payload = [0u8; 12];
        payload[..4].copy_from_slice(&client.to_be_bytes());
        payload[4..].copy_from_slice(&seq.to_be_bytes());
        payload
    }

    fn decode(payload: &[u8]) -> Option<(usize, u64)> {
        let client = u32::from_be_bytes(payload.get(..4)?.try_into().ok()?);
        let seq = u64::from_be_bytes(payload.get(4..12)?.try_into().ok()?);
        Some((usize::try_from(client).ok()?, seq))
    }

    type RelayEnd = (Relay, Notifying, bakery::Result<()>);

    /// Drain the slot again and again until `stop`, then hand the relay
    /// back (to drop its slot). A failure is kept in `failure` and wakes
    /// every waiting client.
    async fn relay_loop(
        relay: Relay,
        mut sink: Notifying,
        stop: Arc<AtomicBool>,
        failure: Arc<Mutex<Option<String>>>,
    ) -> RelayEnd {
        let result = loop {
            if let Err(err) = relay.run(&mut sink, BATCH, POLL, true).await {
                break Err(err);
            }
            if stop.load(Ordering::Acquire) {
                break Ok(());
            }
            tokio::time::sleep(POLL).await;
        };
        if let Err(err) = &result {
            if let Ok(mut failure) = failure.lock() {
                *failure = Some(err.to_string());
            }
            // Dropping the senders wakes the waiting clients.
            sink.clients.clear();
        }
        (relay, sink, result)
    }

    /// One producer: emits a message, waits until it is applied.
    struct Producer {
        client: Client,
        index: u32,
        prefix: String,
        /// The last sequence number emitted.
        seq: u64,
        applied: watch::Receiver<u64>,
        failure: Arc<Mutex<Option<String>>>,
        /// Messages acknowledged by every producer of the cell.
        emitted: Arc<AtomicU64>,
        /// Client 0 only: the relay's batches, for the extras.
        batches: Option<Arc<AtomicU64>>,
    }

    #[async_trait]
    impl BenchClient for Producer {
        async fn op(&mut self) -> Result<(), OpError> {
            self.seq += 1;
            let seq = self.seq;
            emit(&self.client, &self.prefix, &encode(self.index, seq)).await?;
            self.emitted.fetch_add(1, Ordering::Relaxed);
            let applied = self.applied.wait_for(|applied| *applied >= seq);
            match tokio::time::timeout(DELIVERY_TIMEOUT, applied).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(_)) => Err(OpError(format!(
                    "the relay stopped: {}",
                    self.failure
                        .lock()
                        .ok()
                        .and_then(|f| f.clone())
                        .unwrap_or_default()
                ))),
                Err(_) => Err(OpError(format!(
                    "message {seq} was not applied within {DELIVERY_TIMEOUT:?}"
                ))),
            }
        }

        fn extras(&self) -> Vec<(&'static str, u64)> {
            self.batches
                .as_ref()
                .map(|b| vec![(BATCHES, b.load(Ordering::Relaxed))])
                .unwrap_or_default()
        }
    }

    /// Stops the relay once it drained, checks the consumer's digest against
    /// the acknowledged messages, drops the slot and deletes the partition.
    struct OutboxFinish {
        /// For dropping the slot if the relay is gone.
        admin: Client,
        slot: String,
        stop: Arc<AtomicBool>,
        task: JoinHandle<RelayEnd>,
        store: Arc<dyn VersionedStore>,
        /// The sink's consumer, uncounted.
        consumer: Consumer,
        emitted: Arc<AtomicU64>,
    }

    #[async_trait]
    impl Finish for OutboxFinish {
        async fn finish(mut self: Box<Self>, had_errors: bool) -> Vec<String> {
            self.stop.store(true, Ordering::Release);
            let mut problems = Vec::new();
            let drop_slot = match tokio::time::timeout(DRAIN_TIMEOUT, &mut self.task).await {
                Ok(Ok((relay, sink, result))) => {
                    if let Err(err) = result {
                        problems.push(format!("the relay failed: {err}"));
                    }
                    problems.extend(self.check(&sink, had_errors).await);
                    relay.drop_slot().await
                }
                outcome => {
                    self.task.abort();
                    problems.push(match outcome {
                        Ok(Err(join)) => format!("the relay task died: {join}"),
                        _ => format!("the relay did not stop within {DRAIN_TIMEOUT:?}"),
                    });
                    self.admin
                        .execute("SELECT pg_drop_replication_slot($1)", &[&self.slot])
                        .await
                        .map(drop)
                        .map_err(|e| {
                            bakery::Error::new(ErrorKind::Internal, "outbox", e.to_string())
                        })
                }
            };
            if let Err(err) = drop_slot {
                problems.push(format!(
                    "cannot drop the replication slot {} (it keeps WAL on the server until \
                     dropped: SELECT pg_drop_replication_slot('{}')): {err}",
                    self.slot, self.slot
                ));
            }
            if let Ok(key) = self.consumer.row_key(PARTITION) {
                delete_quietly(&*self.store, &key).await;
            }
            problems
        }
    }

    impl OutboxFinish {
        /// Every acknowledged message applied once: the stored digest counts
        /// what the sink applied, and that is what the producers emitted.
        async fn check(&self, sink: &Notifying, had_errors: bool) -> Vec<String> {
            let stored = match self.consumer.state::<Digest>(PARTITION).await {
                Ok(state) => state.map_or(0, |(_, digest)| digest.count),
                Err(err) => return vec![format!("cannot read the consumer back: {err}")],
            };
            let emitted = self.emitted.load(Ordering::Relaxed);
            let applied = sink.sink.applied;
            // An emit whose reply was lost may still have committed.
            if counts_disagree(stored, emitted, had_errors) || stored != applied {
                vec![format!(
                    "{emitted} messages emitted, {applied} applied by the relay, {stored} in \
                     the consumer's digest (each must be applied exactly once)"
                )]
            } else {
                Vec::new()
            }
        }
    }
}
