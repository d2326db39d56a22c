#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod capabilities;
mod cas;
pub mod containers;
pub mod corrupt;
mod election;
pub mod faults;
mod job;
mod lock;
pub mod namespace;
mod once;
pub mod options;
pub mod processes;
pub mod proxy;
mod queued;
mod rwlock;
mod semaphore;
mod sequence;
mod snowflake;
mod support;
mod topology;
mod verify;
pub mod watch;

pub use topology::{Clients, Topology};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bakery_core::{Capabilities, Key, VersionedStore};

/// A boxed case future.
pub type CaseFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// One conformance case: a name and an async function that panics (with a
/// message saying what broke) if the store breaks the contract.
///
/// A case of several clients ([`Case::many_clients`]) must pass in every
/// [`Topology`]: its clients sharing one store handle, and each on a store
/// of its own.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{MemoryStore, VersionedStore};
/// use bakery_testkit::Clients;
///
/// # #[tokio::main]
/// # async fn main() {
/// let memory = MemoryStore::new();
/// for case in bakery_testkit::cases().into_iter().filter(|c| c.many_clients) {
///     let memory = memory.handle();
///     let store: Arc<dyn VersionedStore> = Arc::new(memory.handle());
///     let clients = Clients::separate(store, move || {
///         let handle = memory.handle();
///         async move { Ok(Arc::new(handle) as Arc<dyn VersionedStore>) }
///     });
///     # if case.name != "cas::race_of_8_tasks_loses_no_update" { continue; }
///     (case.run)(clients).await; // panics if the contract is broken
/// }
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct Case {
    /// Stable name, e.g. `cas::stale_version_conflicts_with_current_row`.
    pub name: &'static str,
    /// Runs the case with its clients.
    pub run: fn(Clients) -> CaseFuture,
    /// The case runs several clients, so it runs in every [`Topology`]
    /// (otherwise once, on one store).
    pub many_clients: bool,
}

impl Case {
    /// Run the case with every client on `store`.
    pub fn run_on(&self, store: Arc<dyn VersionedStore>) -> CaseFuture {
        (self.run)(Clients::shared(store))
    }
}

/// A case prints as its name: its fn pointer and flags tell a reader
/// nothing.
macro_rules! debug_as_name {
    ($($case:ty),+) => {$(
        impl std::fmt::Debug for $case {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name)
            }
        }
    )+};
}
debug_as_name!(Case, TargetCase);

/// Every case of the suite: the contract of `put_if_version`, the
/// sequence recipe, the lock recipes, the exactly-once recipes and the
/// recorded-history checks of `bakery verify`. Each must pass unchanged on
/// every backend.
pub fn cases() -> Vec<Case> {
    let mut all = cas::cases();
    all.extend(sequence::cases());
    all.extend(snowflake::cases());
    all.extend(lock::cases());
    all.extend(job::cases());
    all.extend(election::cases());
    all.extend(semaphore::cases());
    all.extend(rwlock::cases());
    all.extend(once::cases());
    all.extend(verify::cases());
    all
}

/// A boxed future that opens a new store on a [`Target`].
pub type OpenFuture =
    Pin<Box<dyn Future<Output = bakery_core::Result<Arc<dyn VersionedStore>>> + Send + 'static>>;

/// What a capability case runs against: an open store and a way to open
/// ANOTHER store on the same target (the same URI, file or server), as a
/// second process or a restarted one would.
///
/// [`Target::reopen`] must return a genuinely new store: a new connection
/// (pool) to the same server or file, and for an in-process backend such
/// as `MemoryStore` a new, empty instance — never a clone of the first
/// store, or a backend would pass the PERSISTENT and SHARED checks by
/// sharing one object.
///
/// ```
/// use std::sync::Arc;
/// use bakery_core::{MemoryStore, VersionedStore};
/// use bakery_testkit::Target;
///
/// # #[tokio::main]
/// # async fn main() {
/// let target = Target::new(Arc::new(MemoryStore::new()), || async {
///     Ok(Arc::new(MemoryStore::new()) as Arc<dyn VersionedStore>)
/// });
/// for case in bakery_testkit::capability_cases() {
///     (case.run)(target.clone()).await; // panics if a claim is false
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct Target {
    store: Arc<dyn VersionedStore>,
    open: Arc<dyn Fn() -> OpenFuture + Send + Sync>,
}

impl Target {
    /// A target whose first store is `store`; `open` opens each further
    /// store on the same target.
    pub fn new<F, Fut>(store: Arc<dyn VersionedStore>, open: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bakery_core::Result<Arc<dyn VersionedStore>>> + Send + 'static,
    {
        Target {
            store,
            open: Arc::new(move || Box::pin(open())),
        }
    }

    /// A target whose first store is opened with `open` too. Fails (does
    /// not skip) when the target cannot be reached.
    pub async fn connect<F, Fut>(open: F) -> bakery_core::Result<Self>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bakery_core::Result<Arc<dyn VersionedStore>>> + Send + 'static,
    {
        let store = open().await?;
        Ok(Target::new(store, open))
    }

    /// The store the target was opened with (shared by every caller).
    pub fn store(&self) -> Arc<dyn VersionedStore> {
        self.store.clone()
    }

    /// A NEW store on the same target. Panics (failing the case) if it
    /// cannot be opened: a target that answered once must answer again.
    pub async fn reopen(&self) -> Arc<dyn VersionedStore> {
        match (self.open)().await {
            Ok(store) => store,
            Err(e) => panic!("reopening the {} target failed: {e}", self.store.backend()),
        }
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// One capability case: checks that a backend's [`Capabilities`] claim
/// holds, using a [`Target`] (it needs a second store on the same target).
/// A case whose capability is not claimed checks the converse where every
/// non-claiming backend must satisfy it, and otherwise passes vacuously.
#[derive(Clone, Copy)]
pub struct TargetCase {
    /// Stable name, e.g. `capabilities::persistent_rows_survive_a_reopen`.
    pub name: &'static str,
    /// The capability this case verifies.
    pub capability: Capabilities,
    /// Runs the case against a target.
    pub run: fn(Target) -> CaseFuture,
}

/// The capability cases: every claim of [`Capabilities`] verified on the
/// backend that makes it — PERSISTENT (rows survive a reopen), SHARED (two
/// stores open at once see one state), LINEARIZABLE_READS (a read on
/// another store sees every acknowledged write) and WATCH (a change by
/// another client wakes every watch of the key and no watch of another
/// key; `lock::watch_capability_matches_behaviour` in [`cases`] checks that
/// a backend without the claim gives no watch).
pub fn capability_cases() -> Vec<TargetCase> {
    let mut all = capabilities::cases();
    all.extend(watch::cases());
    all
}

/// A case function: of one store (`async fn(Arc<dyn VersionedStore>)`),
/// run once, or of several clients (`async fn(Clients)`), run in every
/// topology. `Args`, the parameter's type, tells them apart, so [`cases_of!`]
/// registers both alike.
pub(crate) trait CaseFn<Args> {
    const MANY_CLIENTS: bool;
    fn start(&self, clients: Clients) -> CaseFuture;
}

impl<F, Fut> CaseFn<Arc<dyn VersionedStore>> for F
where
    F: Fn(Arc<dyn VersionedStore>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    const MANY_CLIENTS: bool = false;
    fn start(&self, clients: Clients) -> CaseFuture {
        Box::pin(self(clients.store()))
    }
}

impl<F, Fut> CaseFn<Clients> for F
where
    F: Fn(Clients) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    const MANY_CLIENTS: bool = true;
    fn start(&self, clients: Clients) -> CaseFuture {
        Box::pin(self(clients))
    }
}

/// Whether case function `f` runs several clients.
pub(crate) fn many_clients<Args, F: CaseFn<Args>>(_f: &F) -> bool {
    F::MANY_CLIENTS
}

/// The cases of module `$module`, in order: each `$f` (a [`CaseFn`]) named
/// `$module::$f`.
macro_rules! cases_of {
    ($module:literal: $($f:ident),+ $(,)?) => {
        vec![$($crate::Case {
            name: concat!($module, "::", stringify!($f)),
            run: |clients| $crate::CaseFn::start(&$f, clients),
            many_clients: $crate::many_clients(&$f),
        }),+]
    };
}
pub(crate) use cases_of;

macro_rules! target_case {
    ($module:literal, $capability:ident, $f:ident) => {
        $crate::TargetCase {
            name: concat!($module, "::", stringify!($f)),
            capability: bakery_core::Capabilities::$capability,
            run: |target| Box::pin($f(target)),
        }
    };
}
pub(crate) use target_case;

/// A key no other case or run uses, so cases can share a persistent server.
pub fn unique_key(case: &str) -> Key {
    let id = uuid::Uuid::now_v7().simple().to_string();
    match Key::new(format!("bakery-test/{case}/{id}")) {
        Ok(key) => key,
        Err(e) => panic!("test key for {case:?} is invalid: {e}"),
    }
}

/// A sequence or lock name no other case or run uses.
pub fn unique_name(case: &str) -> String {
    format!("t-{case}-{}", uuid::Uuid::now_v7().simple())
}

/// A table, collection or prefix name no other test or run uses:
/// `prefix`, `_`, and 32 hex digits (a time-ordered UUID) — letters,
/// digits and `_` only, so it is a valid identifier on every backend
/// (at most 48 characters for a prefix of up to 15).
///
/// ```
/// let a = bakery_testkit::unique_ident("bk_t");
/// assert!(a.starts_with("bk_t_") && a.len() == 37);
/// assert_ne!(a, bakery_testkit::unique_ident("bk_t"));
/// ```
pub fn unique_ident(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// Write `value` to `key` at `expected` (`None`: only if absent); the write
/// must apply. For backends' own tests.
pub async fn applied(
    store: &dyn VersionedStore,
    key: &Key,
    expected: Option<bakery_core::Version>,
    value: &str,
) -> bakery_core::Row {
    match store
        .put_if_version(key, expected, value.to_string().into())
        .await
    {
        Ok(bakery_core::PutOutcome::Applied(row)) => row,
        Ok(other) => panic!("put {key} at {expected:?}: expected Applied, got {other:?}"),
        Err(e) => panic!("put {key} at {expected:?}: {e}"),
    }
}

/// Add one to the decimal counter at `key`, `n` times, by CAS, retrying
/// with the row a conflict hands back (no second read); returns how many
/// applied. For a counter nobody deletes, on a backend whose versions move
/// by one: the version must equal the counter, and a conflict must carry a
/// newer row.
pub async fn count_up(store: &dyn VersionedStore, key: &Key, n: u64) -> u64 {
    let mut current = store.get(key).await.expect("get");
    let mut done = 0;
    while done < n {
        let value = current.as_ref().map(|row| number(&row.value)).unwrap_or(0);
        let expected = current.as_ref().map(|row| row.version);
        match store
            .put_if_version(key, expected, (value + 1).to_string().into())
            .await
            .expect("put_if_version")
        {
            bakery_core::PutOutcome::Applied(row) => {
                assert_eq!(row.version, value + 1, "version and counter move together");
                done += 1;
                current = Some(row);
            }
            bakery_core::PutOutcome::Conflict(now) => {
                let now = now.expect("the counter is never deleted");
                assert!(
                    Some(now.version) > expected,
                    "a conflict returns a newer row"
                );
                current = Some(now);
            }
        }
    }
    done
}

/// The decimal number stored in a row's value.
pub fn number(value: &[u8]) -> u64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{value:?} is not a decimal number"))
}

/// Assert that `text` (usually an error) mentions every one of `needles`;
/// the failure names the missing ones and shows the whole text.
///
/// ```
/// bakery_testkit::assert_mentions("fsync = off: refused", &["fsync", "refused"]);
/// ```
#[track_caller]
pub fn assert_mentions(text: impl std::fmt::Display, needles: &[&str]) {
    let text = text.to_string();
    let missing: Vec<&str> = needles
        .iter()
        .copied()
        .filter(|n| !text.contains(n))
        .collect();
    assert!(missing.is_empty(), "{missing:?} missing from: {text}");
}

/// The store calls of `grants` acquisitions (each released) by clients of
/// one process: none conflicted with another, and each grant cost at most
/// one write to take or enqueue and one to release.
#[track_caller]
pub(crate) fn assert_clients_took_turns(spent: bakery_core::OpCounts, grants: u64) {
    assert_eq!(spent.conflicts, 0, "{spent:?}");
    assert!(
        spent.puts <= 2 * grants,
        "at most one write per take or enqueue and one per release: {spent:?}"
    );
}

/// A runtime of `workers` threads, for tests that run async cases from a
/// plain `#[test]` (to repeat them, or to restart a server in between).
pub fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("runtime")
}

/// True in a CI run (`CI=true` or `CI=1`), where no server test may be
/// skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The URI of the real server that test `who` needs, from the environment
/// variable `var` (which `scripts/backends.sh` exports, e.g.
/// `BAKERY_POSTGRES_URI`). Unset or empty: in CI ([`in_ci`]) the test FAILS
/// — a CI run must exercise every server; on a developer machine it prints
/// why and returns `None`, and the test returns early.
///
/// ```
/// // Outside CI, a missing server is reported and skipped.
/// if !bakery_testkit::in_ci() {
///     assert_eq!(bakery_testkit::server_uri("BAKERY_NO_SUCH_URI", "doc"), None);
/// }
/// ```
pub fn server_uri(var: &str, who: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(uri) if !uri.is_empty() => Some(uri),
        _ => {
            let server = var
                .strip_prefix("BAKERY_")
                .and_then(|rest| rest.strip_suffix("_URI"))
                .map_or_else(|| var.to_owned(), str::to_lowercase);
            let start = format!("start it with `scripts/backends.sh start {server}`");
            assert!(
                !in_ci(),
                "{who}: {var} is not set but CI requires the {server} tests; {start}"
            );
            eprintln!("{who}: skipped: {var} is not set ({start}; CI fails instead)");
            None
        }
    }
}
