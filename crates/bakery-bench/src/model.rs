//! The model every other module builds on: what a workload is, what a
//! native peer is, what a cell is and what one operation can fail with.
//!
//! A *cell* is one measurement: one workload variant (or one native peer)
//! on one target with one number of clients, for the plan's duration.
//! Workloads and peers only set a cell up ([`PreparedCell`]); the timing,
//! the histograms and the round-trip counting are done once, in
//! [`runner`](crate::runner).
//!
//! Adding a workload is one file declaring its [`WorkloadSpec`] and
//! implementing [`Workload`], plus one line in
//! [`workloads::registry`](crate::workloads::registry); adding a native
//! peer is one type implementing [`Peer`] plus one line in
//! [`peers::for_target`](crate::peers::for_target).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use async_trait::async_trait;
use bakery::{CountingStore, VersionedStore};
use serde::Serialize;

use crate::error::{one_line, BenchError};
use crate::journal::Journal;

/// Why one operation failed: a one-line message (no secrets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError(pub String);

impl From<bakery::Error> for OpError {
    fn from(err: bakery::Error) -> Self {
        OpError(one_line(&err.to_string()))
    }
}

/// One client of a cell: an operation run again and again until the cell's
/// time is up. Each client runs on its own task.
#[async_trait]
pub trait BenchClient: Send {
    /// Do one operation (one increment, one id, one lock acquire +
    /// release). Its latency is what the histograms record.
    async fn op(&mut self) -> Result<(), OpError>;

    /// The untimed operation the runner does once before the timed part
    /// (it opens the client's connections); by default one [`op`](Self::op).
    async fn warm_up(&mut self) -> Result<(), OpError> {
        self.op().await
    }

    /// Counters this client keeps besides its operations (named like the
    /// workload's [`WorkloadSpec::extra_columns`]); summed over the clients.
    fn extras(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// What a cell needs after the timed part: check the outcome (no lost
/// update, …) and remove what the cell wrote.
#[async_trait]
pub trait Finish: Send {
    /// Check and clean up. `had_errors` tells whether some operation failed
    /// (an unknown outcome may then have applied, which loosens the checks).
    /// Returns the problems found (each counted as an error of the cell).
    async fn finish(self: Box<Self>, had_errors: bool) -> Vec<String>;
}

/// A cell ready to run: its clients, and what to do afterwards.
pub struct PreparedCell {
    /// One per client of the cell.
    pub clients: Vec<Box<dyn BenchClient>>,
    /// Checks and cleanup after the timed part, if any.
    pub finish: Option<Box<dyn Finish>>,
}

/// Which cell to prepare.
#[derive(Debug, Clone)]
pub struct CellSpec {
    /// Unique in this run and safe in key, sequence, table and Redis key
    /// names (lowercase ASCII letters, digits and `-`), so cells never share
    /// rows and repeated runs never collide.
    pub tag: String,
    /// How many clients.
    pub clients: usize,
    /// Which variant of the workload ([`Variant::id`]); empty for a peer.
    pub variant: &'static str,
    /// The plan's block size (sequence block, and the CACHE of the cached
    /// `nextval()` peer).
    pub block_size: u64,
    /// A plain `postgres://` URL (bakery's options removed) of the plan's
    /// first PostgreSQL target, if it has one: for a workload that needs
    /// PostgreSQL besides the cell's store (the outbox's source).
    pub postgres: Option<String>,
    /// Where the cell's one client logs its grants and ids when the cell
    /// runs across processes (the parent checks them all together); `None`
    /// in one process, where the workload checks its clients itself.
    pub journal: Option<Arc<Journal>>,
}

/// A workload that could not run on a target, and why (its cells there
/// were skipped: [`BenchError::Unavailable`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The workload.
    pub workload: String,
    /// The target label.
    pub target: String,
    /// Why, one line.
    pub reason: String,
}

impl CellSpec {
    /// `bench-<tag>`: the name of what the cell makes through a recipe (a
    /// sequence, a lock, an idempotency scope, a consumer's prefix).
    pub fn recipe_name(&self) -> String {
        format!("bench-{}", self.tag)
    }

    /// `bakery_bench_<tag>`: the cell's name for SQL tables, sequences and
    /// replication slots (lowercase letters, digits and `_`, so safe to
    /// splice into SQL).
    pub fn sql_name(&self) -> String {
        format!("bakery_bench_{}", self.tag.replace('-', "_"))
    }
}

/// One way a workload runs on every store (e.g. `cas` on a shared key and
/// on a key per client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// Stable id, used in the JSON.
    pub id: &'static str,
    /// What the table shows in its `implementation` column.
    pub label: &'static str,
}

impl Variant {
    /// The variant `id`, shown as `label`.
    pub const fn new(id: &'static str, label: &'static str) -> Self {
        Self { id, label }
    }
}

/// The store of a cell, twice: counted (what clients use, so the runner can
/// report round trips per operation) and raw (for checks and cleanup, which
/// must not be counted).
#[derive(Debug, Clone)]
pub struct CellStore {
    /// Every call the clients make goes through this.
    pub counted: Arc<CountingStore>,
    /// The same store, uncounted.
    pub raw: Arc<dyn VersionedStore>,
}

/// A workload as the registry lists it: what it is (data a plan, a
/// command's help and a report need before any cell runs) and the
/// [`Workload`] that sets up its cells. Each workload file declares one
/// `const`.
///
/// ```
/// use bakery_bench::model::{Variant, WorkloadSpec};
/// use bakery_bench::workloads::CasWorkload;
///
/// const ONE: Variant = Variant::new("one", "one key");
/// const INFO: WorkloadSpec = WorkloadSpec::new("demo", "ops", &[ONE], &CasWorkload)
///     .summary("A demonstration.")
///     .title("demo: block size {block_size}");
/// assert_eq!(INFO.title_for(64), "demo: block size 64");
/// ```
#[derive(Clone, Copy)]
pub struct WorkloadSpec {
    /// The name a plan selects it by and the JSON uses (`cas`).
    pub name: &'static str,
    /// What one operation produces, for the throughput column (`ops`, `ids`).
    pub unit: &'static str,
    /// The variants measured on every store, in table order.
    pub variants: &'static [Variant],
    /// Sets up its cells.
    pub workload: &'static dyn Workload,
    /// A few words on what one operation is, for a command's help
    /// (`Sequence::next()`).
    pub summary: &'static str,
    /// One line heading its table; `{block_size}` stands for the run's
    /// block size ([`title_for`](Self::title_for)).
    pub title: &'static str,
    /// Names of the counters its clients report besides operations.
    pub extra_columns: &'static [&'static str],
    /// The operations per client (on average) a cell needs before it may
    /// end: it runs past its duration until it has them, for at most
    /// [`MAX_EXTENSION`](crate::runner::MAX_EXTENSION) × the duration. An
    /// index over per-client counts (the lock's fairness) cannot judge a
    /// cell of 80 grants over 64 clients: the fairest lock there scores
    /// 0.89. 0: the duration alone.
    pub min_ops_per_client: u64,
    /// Whether its cells also run across processes (`Plan::processes`):
    /// a client per process, its grants or ids checked by the parent.
    pub across_processes: bool,
}

impl WorkloadSpec {
    /// A workload named `name` producing `unit`s, measured in `variants`;
    /// no summary, title or extra columns yet.
    pub const fn new(
        name: &'static str,
        unit: &'static str,
        variants: &'static [Variant],
        workload: &'static dyn Workload,
    ) -> Self {
        Self {
            name,
            unit,
            variants,
            workload,
            summary: "",
            title: "",
            extra_columns: &[],
            min_ops_per_client: 0,
            across_processes: false,
        }
    }

    /// With its help text.
    pub const fn summary(self, summary: &'static str) -> Self {
        Self { summary, ..self }
    }

    /// With its table heading.
    pub const fn title(self, title: &'static str) -> Self {
        Self { title, ..self }
    }

    /// With counters besides operations.
    pub const fn extra_columns(self, extra_columns: &'static [&'static str]) -> Self {
        Self {
            extra_columns,
            ..self
        }
    }

    /// With a least number of operations per client a cell runs to.
    pub const fn min_ops_per_client(self, min_ops_per_client: u64) -> Self {
        Self {
            min_ops_per_client,
            ..self
        }
    }

    /// With cells across processes too.
    pub const fn across_processes(self) -> Self {
        Self {
            across_processes: true,
            ..self
        }
    }

    /// The table heading of a run with `block_size`.
    pub fn title_for(&self, block_size: u64) -> String {
        self.title.replace("{block_size}", &block_size.to_string())
    }
}

impl std::fmt::Debug for WorkloadSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadSpec")
            .field("name", &self.name)
            .field("unit", &self.unit)
            .field("variants", &self.variants)
            .finish_non_exhaustive()
    }
}

/// How a workload's cells are set up on every bakery store.
#[async_trait]
pub trait Workload: Send + Sync {
    /// Set up one cell on `store`; [`BenchError::Unavailable`] when the
    /// workload cannot run there (the cell is then skipped, not failed).
    async fn setup(&self, store: &CellStore, cell: &CellSpec) -> Result<PreparedCell, BenchError>;
}

/// A native peer: what a user would reach for instead of bakery (PostgreSQL
/// `nextval()`, Redis `INCRBY`, PostgreSQL advisory locks, etcd's lock), run
/// with the same clients and duration, so every bakery number has a
/// familiar reference beside it.
#[async_trait]
pub trait Peer: Send + Sync {
    /// The workload whose table it joins ([`WorkloadSpec::name`]).
    fn workload(&self) -> &'static str;

    /// What the table shows in its `implementation` column, e.g.
    /// `nextval() CACHE 1000`.
    fn label(&self) -> String;

    /// Set up one cell: one connection per client, each increments `sent`
    /// once per request it sends.
    async fn setup(&self, cell: &CellSpec, sent: RoundTrips) -> Result<PreparedCell, BenchError>;
}

/// The requests a peer cell's clients have sent, counted together.
pub type RoundTrips = Arc<AtomicU64>;

/// Who implemented the operation of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Implementation {
    /// A bakery recipe or the primitive, on a bakery store.
    Bakery,
    /// A native peer through the raw driver.
    Native,
}
