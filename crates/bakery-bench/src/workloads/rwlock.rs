//! The `rwlock` workload: every client takes one read-write lock
//! ([`bakery::RwLock`]) again and again, a writer or a reader by a fixed
//! rule: client 0, 4, 8, … writes ([`is_writer`]), the others read (so one
//! client alone is a writer). One operation is one acquire (`write()` or
//! `read()`) + release; the latency is the wait plus both writes.
//!
//! Every grant is checked: no writer is inside with anyone else (reader or
//! writer); readers may be inside together. In one process the workload's
//! own grant log sees every client; across processes each client journals
//! its grants with their mode (shared for a reader), writers increment the
//! shared counter file and readers read it (it must not change under a
//! reader), and the parent checks them all together
//! ([`journal::check_grants`](crate::journal::check_grants)). Besides
//! throughput the table shows the acquisitions by mode and the most readers
//! that were inside at once (sharing happened).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bakery::{Key, RwLock, VersionedStore};

use crate::journal::{monotonic_ns, Journal};
use crate::workloads::lock::row_lock_cell;

use super::prelude::*;

/// The `rwlock` workload.
#[derive(Debug, Clone, Copy)]
pub struct RwLockWorkload;

const MIXED: Variant = Variant::new("mixed", "RwLock (1 writer : 3 readers)");

/// Extra column: write acquisitions.
pub const WRITES: &str = "writes";
/// Extra column: read acquisitions.
pub const READS: &str = "reads";
/// Extra column: the most readers inside at once.
pub const MOST_READERS: &str = "most readers";

/// One writer in this many clients.
const WRITER_EVERY: usize = 4;

/// The `rwlock` workload as the registry lists it.
pub const SPEC: WorkloadSpec = WorkloadSpec::new("rwlock", "acq", &[MIXED], &RwLockWorkload)
    .summary(
        "RwLock write() or read() + release: client 0, 4, 8, … writes, the others read \
         (one client alone writes).",
    )
    .title(
        "rwlock: acquire + release of one read-write lock by every client, client 0, 4, 8, … \
         a writer and the others readers (acquisitions/s; latency = wait + both writes; \
         writes, reads = acquisitions by mode; most readers = most readers inside at once)",
    )
    .extra_columns(&[WRITES, READS, MOST_READERS])
    .across_processes();

/// Whether client `index` of a cell (its process, across processes) is a
/// writer: clients 0, 4, 8, … (one in 4).
pub fn is_writer(index: usize) -> bool {
    index.is_multiple_of(WRITER_EVERY)
}

#[async_trait]
impl Workload for RwLockWorkload {
    async fn setup(&self, store: &CellStore, cell: &CellSpec) -> Result<PreparedCell, BenchError> {
        let name = cell.recipe_name();
        let prepare_error = prepare_error("rwlock", store);
        let key = Key::with_prefix(bakery::rwlock::KEY_PREFIX, &name).map_err(prepare_error)?;
        let counted: Arc<dyn VersionedStore> = store.counted.clone();
        let log = Arc::new(RwGrantLog::new(cell.journal.clone()));
        // Across processes a worker's one client is the cell's client of
        // its process index.
        let first = cell.journal.as_ref().map_or(0, |j| j.process());
        let mut clients = Vec::with_capacity(cell.clients);
        for index in 0..cell.clients {
            clients.push(RwLockClient {
                index,
                writer: is_writer(first + index),
                lock: RwLock::builder(counted.clone(), &name)
                    .build()
                    .map_err(prepare_error)?,
                log: log.clone(),
                writes: 0,
                reads: 0,
            });
        }
        let problems = Box::new(move || log.problems());
        Ok(row_lock_cell(store, &counted, key, clients, problems))
    }
}

/// Who is inside the lock, as the clients see it inside their critical
/// sections: an overlap detector for many readers or one writer.
#[derive(Debug, Default)]
pub struct RwGrantLog {
    writer_inside: AtomicBool,
    readers_inside: AtomicUsize,
    most_readers: AtomicUsize,
    overlaps: AtomicU64,
    /// Across processes: where each grant is logged with its mode (and the
    /// shared counter incremented by writers, read by readers).
    journal: Option<Arc<Journal>>,
}

impl RwGrantLog {
    /// A log of grants, also written to `journal` if given (a cell across
    /// processes).
    pub fn new(journal: Option<Arc<Journal>>) -> Self {
        RwGrantLog {
            journal,
            ..RwGrantLog::default()
        }
    }

    /// A writer's critical section (asked at `asked_ns` on
    /// [`monotonic_ns`], with fencing token `token`): an error if another
    /// writer or any reader is inside.
    pub fn write_section(&self, asked_ns: u64, token: u64) -> Result<(), OpError> {
        // Set the flag, then look for readers; a reader counts itself in,
        // then looks for the flag (SeqCst: one of the two sees the other).
        let other_writer = self.writer_inside.swap(true, Ordering::SeqCst);
        let readers = self.readers_inside.load(Ordering::SeqCst);
        let overlap = other_writer || readers > 0;
        if overlap {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let journaled = match &self.journal {
            Some(journal) => journal.critical_section(asked_ns, Some(token)),
            None => Ok(()),
        };
        if !other_writer {
            self.writer_inside.store(false, Ordering::SeqCst);
        }
        if overlap {
            return Err(OpError(format!(
                "a writer was granted the rwlock while {} (exclusion violated)",
                if other_writer {
                    "another writer held it".to_string()
                } else {
                    format!("{readers} reader(s) held it")
                }
            )));
        }
        journaled.map_err(OpError)
    }

    /// A reader's critical section: an error if a writer is inside.
    pub fn read_section(&self, asked_ns: u64, token: u64) -> Result<(), OpError> {
        let readers = self.readers_inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(readers, Ordering::SeqCst);
        let writer = self.writer_inside.load(Ordering::SeqCst);
        if writer {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let journaled = match &self.journal {
            Some(journal) => journal.shared_section(asked_ns, Some(token)),
            None => Ok(()),
        };
        self.readers_inside.fetch_sub(1, Ordering::SeqCst);
        if writer {
            return Err(OpError(
                "a reader was granted the rwlock while a writer held it (exclusion violated)"
                    .into(),
            ));
        }
        journaled.map_err(OpError)
    }

    /// The most readers inside at once so far.
    pub fn most_readers(&self) -> u64 {
        self.most_readers.load(Ordering::SeqCst) as u64
    }

    /// What the cell's finish reports: overlapping grants, if any.
    pub fn problems(&self) -> Vec<String> {
        match self.overlaps.load(Ordering::SeqCst) {
            0 => Vec::new(),
            overlaps => vec![format!(
                "{overlaps} rwlock grants overlapped a writer's (exclusion violated)"
            )],
        }
    }
}

struct RwLockClient {
    index: usize,
    writer: bool,
    lock: RwLock,
    log: Arc<RwGrantLog>,
    writes: u64,
    reads: u64,
}

#[async_trait]
impl BenchClient for RwLockClient {
    async fn op(&mut self) -> Result<(), OpError> {
        let asked_ns = if self.log.journal.is_some() {
            monotonic_ns()
        } else {
            0
        };
        if self.writer {
            let guard = self.lock.write().await?;
            let inside = self.log.write_section(asked_ns, guard.token());
            guard.release().await?;
            self.writes += 1;
            inside
        } else {
            let guard = self.lock.read().await?;
            let inside = self.log.read_section(asked_ns, guard.token());
            guard.release().await?;
            self.reads += 1;
            inside
        }
    }

    fn extras(&self) -> Vec<(&'static str, u64)> {
        let mut extras = vec![(WRITES, self.writes), (READS, self.reads)];
        // A cell-wide figure: client 0 reports it (the runner sums extras).
        if self.index == 0 {
            extras.push((MOST_READERS, self.log.most_readers()));
        }
        extras
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_in_four_writes_and_one_alone_is_a_writer() {
        let writers: Vec<usize> = (0..9).filter(|&i| is_writer(i)).collect();
        assert_eq!(writers, [0, 4, 8]);
    }

    /// The negative control in one process: readers together pass, a
    /// writer beside a reader (or a writer) is found.
    #[test]
    fn a_writer_beside_a_reader_is_an_error_and_readers_together_are_not() {
        let log = RwGrantLog::default();
        // Two readers inside at once (one holds while the other enters).
        log.readers_inside.fetch_add(1, Ordering::SeqCst);
        log.read_section(0, 2).expect("readers share");
        assert_eq!(log.most_readers(), 2);
        assert!(log.problems().is_empty());
        // A writer while that reader holds.
        assert!(log.write_section(0, 3).is_err());
        assert_eq!(log.problems().len(), 1);
        log.readers_inside.fetch_sub(1, Ordering::SeqCst);
        log.write_section(0, 4).expect("alone");

        // A reader while a writer holds, and a second writer.
        let log = RwGrantLog::default();
        log.writer_inside.store(true, Ordering::SeqCst);
        assert!(log.read_section(0, 5).is_err());
        assert!(log.write_section(0, 6).is_err());
        assert!(
            log.writer_inside.load(Ordering::SeqCst),
            "the holder's flag is left"
        );
        assert_eq!(log.overlaps.load(Ordering::SeqCst), 2);
    }

    /// A short cell on a memory store: writers and readers, no overlap,
    /// readers inside together at some point is not required (timing).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cell_runs_writers_and_readers_without_overlap() {
        let raw: Arc<dyn VersionedStore> = Arc::new(bakery::MemoryStore::new());
        let counted = Arc::new(bakery::CountingStore::new(raw.clone()));
        let store = CellStore {
            counted: counted.clone(),
            raw,
        };
        let cell = CellSpec {
            tag: "rwlock-test".into(),
            clients: 4,
            variant: MIXED.id,
            block_size: 1,
            postgres: None,
            journal: None,
        };
        let prepared = RwLockWorkload.setup(&store, &cell).await.expect("setup");
        let measured = crate::runner::measure(
            prepared,
            &crate::runner::RoundTripCounter::Store(counted),
            std::time::Duration::from_millis(100),
            5,
        )
        .await
        .expect("measure");
        assert_eq!(measured.errors, 0, "{:?}", measured.first_error);
        assert!(measured.extras[WRITES] > 0, "{:?}", measured.extras);
        assert!(measured.extras[READS] > 0, "{:?}", measured.extras);
        assert_eq!(
            measured.extras[WRITES] + measured.extras[READS],
            measured.ops
        );
    }
}
